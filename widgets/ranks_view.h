#pragma once
// The snapshots (or reports) of a multi-GPU job, one per rank (session/ranks.h): which rank peaks highest and the
// spread, a row per rank (peak total, reserved peak, when the peak falls, the annotation or phase holding it, the
// ledgers then), and every rank's live bytes overlaid on one time axis from each trace's start, one colour per
// rank. A click on a row or a curve asks to open that rank's file in the window's main views.
#include "session/ranks.h"

#include <QWidget>

#include <memory>

class QCustomPlot;
class QCPAbstractPlottable;
class QCPGraph;
class QLabel;
class QPushButton;
class QTableWidget;

namespace memledger {

class RanksView : public QWidget {
    Q_OBJECT
public:
    enum Column { Rank, File, PeakTotal, ReservedPeak, PeakAt, Ledgers, Phase, ColumnCount };
    static constexpr int kRankRole = Qt::UserRole + 1; // column Rank: the rank's index into the table
    static constexpr int kValueRole = Qt::UserRole + 2; // the number a cell shows (bytes, ms)

    explicit RanksView(QWidget* parent = nullptr);

    void setTable(std::shared_ptr<const RankTable> table);
    const std::shared_ptr<const RankTable>& table() const { return table_; }
    // Marks the rank whose file the main views show ("" or another file: none).
    void setCurrentFile(const QString& file);

    QTableWidget* tableWidget() const { return rows_; }
    QCustomPlot* plot() const { return plot_; }
    QCPGraph* graphOf(int rank) const;
    QLabel* heading() const { return heading_; }
    QPushButton* closeButton() const { return close_; }
    int rowOf(int rank) const; // the table row that shows `rank` (the table may be sorted)

signals:
    void rankChosen(const QString& file);
    void closeRequested();

private:
    void fillRows();
    void plotTimelines();
    void emphasize(int rank); // its curve drawn thicker and on top; -1: none

    std::shared_ptr<const RankTable> table_;
    QLabel* heading_;
    QPushButton* close_;
    QTableWidget* rows_;
    QCustomPlot* plot_;
    std::vector<QCPGraph*> graphs_;
    int emphasized_ = -1;
};

} // namespace memledger
