#pragma once
#include "analysis/report_diff.h"

#include <QWidget>

#include <memory>

class QCustomPlot;
class QCPGraph;
class QCPItemTracer;
class QLabel;
class QPushButton;
class QSplitter;
class QTableWidget;

namespace memledger {

// Two recordings compared (analysis/report_diff.h): who A and B are, both live-bytes curves overlaid on one
// axis (wheel zoom, drag to pan, double-click to reset), the headline figures and ledgers with their deltas,
// and the modules or allocation sites that changed, largest change first. "Close comparison" asks to return.
class DiffView : public QWidget {
    Q_OBJECT
public:
    explicit DiffView(QWidget* parent = nullptr);

    void setDiff(std::shared_ptr<const ReportDiff> diff);
    const std::shared_ptr<const ReportDiff>& diff() const { return diff_; }

    QCustomPlot* plot() const { return plot_; }
    QCPGraph* graphA() const { return graphs_[0]; }
    QCPGraph* graphB() const { return graphs_[1]; }
    QTableWidget* totalsTable() const { return totals_; }
    QTableWidget* entriesTable() const { return entries_; }
    QPushButton* closeButton() const { return close_; }
    void resetZoom();

signals:
    void closeRequested();

private:
    void fillTotals();
    void fillEntries();
    void plotSeries();
    void reduceToView();

    std::shared_ptr<const ReportDiff> diff_;
    QLabel* heading_;
    QLabel* axisNote_;
    QPushButton* close_;
    QCustomPlot* plot_;
    QCPGraph* graphs_[2] {};
    QCPItemTracer* peaks_[2] {};
    QTableWidget* totals_;
    QTableWidget* entries_;
    QSplitter* tables_;
    double lo_ = 0, hi_ = 1;
};

} // namespace memledger
