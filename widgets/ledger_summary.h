#pragma once
#include "report/report.h"

#include <QStringList>
#include <QWidget>

#include <memory>
#include <vector>

class QLabel;

namespace memledger {

// A snapshot: the peak moment (what the timeline's stack holds at its highest, on the chosen device) and,
// apart, the state at the end (reserved, allocated, reserved but not allocated), each as a bar with rows.
// A model run: what is alive at the peak, as one bar stacked by ledger with the numbers beneath (only the ledgers that hold
// bytes), a training step's gradients and optimizer state, and the load tax:
// "file 2.61 MiB float16, resident 5.21 MiB as float32".
class LedgerSummary : public QWidget {
    Q_OBJECT
public:
    explicit LedgerSummary(QWidget* parent = nullptr);
    ~LedgerSummary() override;
    struct Row;
    struct Section;
    void setReport(std::shared_ptr<const Report> report);
    QString loadTaxText() const;
    // A meta run's badge (kMetaRunBadge) while it shows; "" for any other report.
    QString metaBadgeText() const;
    // A training step: the gradients and optimizer state the step leaves behind; "" otherwise.
    QString trainingText() const;
    // The rows under the bar: the ledgers that hold bytes, bottom of the stack first ("weights", ...).
    QStringList rowNames() const;
    // The report's notes (how the run was made and what its figures leave out: a converted program, a meta run,
    // the lifetimes, a rank's layout), one per line; the panel shows how many there are, and opens them.
    QString notesText() const;
    // What the notes line says: "3 notes about this run"; "" when the report has none.
    QString notesLinkText() const;
    // Everything the panel says, as plain lines: each section's title, its rows ("  name: bytes"), its caption.
    QString summaryText() const;
    // A snapshot's figures on one device (TimelineSeries::kAllDevices: all), as the timeline shows it.
    void setDevice(int device);
    int device() const { return device_; }
    QSize sizeHint() const override;

protected:
    void paintEvent(QPaintEvent* event) override;
    void resizeEvent(QResizeEvent* event) override;

private:
    void keepLoadTaxVisible();

    int rowsHeight() const;

    std::shared_ptr<const Report> report_;
    int device_ = -2; // TimelineSeries::kAllDevices
    std::vector<Section> sections_; // what the panel shows, made when the report or the device changes
    QLabel* meta_; // kMetaRunBadge, for a meta run only
    QLabel* training_;
    QLabel* loadTax_;
    QLabel* notes_; // "3 notes about this run": the notes as its tooltip, a click opens them
    QStringList notes() const; // the report's, one item per note
};

// The load-tax line of a report; empty when the report has no weights.
QString loadTaxLine(const Report& report);

} // namespace memledger
