#pragma once
// The window's what-if: the What if panel, its background recording (the what-if policy of
// whatif/whatif_policy.h, as the command line's), the measurements it asks for, and the what-if table a saved or
// exported report holds. It knows nothing of the other views; the window connects its signals.
#include "report/report.h"
#include "session/open_file.h"
#include "whatif/whatif_policy.h"

#include <QObject>
#include <QString>

#include <memory>

namespace memledger {

class WhatIfPanel;
class WhatIfWorker;

class WhatIfController : public QObject {
    Q_OBJECT
public:
    explicit WhatIfController(QObject* parent = nullptr);

    WhatIfPanel* panel() const { return panel_; }
    // The what-if recorded for the report shown; nullptr until its records are made.
    const std::shared_ptr<const WhatIf>& whatIf() const { return whatIf_; }
    std::int64_t budget() const; // the panel's budget in bytes; 0: none typed

    // Records the model of `file` for `report` (its inputs, mode, optimizer and loss), cancelling any recording.
    void record(std::shared_ptr<const OpenedFile> file, const Report& report);
    void clear(); // another file: nothing recorded
    // Records the same model again, its rows and `x` too (a fit answer beyond the records: whatif/gpu_fit.h), the
    // panel keeping its settings; ready() when done. Nothing before record().
    void recordUpTo(std::int64_t x);
    // The largest size recordUpTo asked for since record() (0: none).
    std::int64_t askedUpTo() const { return askedUpTo_; }

    // The table a saved or exported report of `report` holds: the policy's rows (with the panel's batch) at the
    // panel's budget. The one the recording made, its unreliable rows measured, when the rows and budget are the
    // same; otherwise predicted from the records. nullptr before the records are made.
    std::shared_ptr<const WhatIfTable> tableForExport() const;

signals:
    void ready(); // the panel has its records
    void seqReady(); // and, for token inputs, its records along the sequence
    void tableReady(); // tableForExport() has the recording's own table
    void budgetChanged(std::int64_t bytes); // the budget typed in the panel, once it rests
    void statusMessage(const QString& text, int milliseconds);
    // The panel's "Show this rank": one rank's predicted step, for the window to show in place of the run.
    void rankReady(std::shared_ptr<const memledger::Report> report);

private:
    WhatIfRequest exportRequest() const;

    WhatIfPanel* panel_;
    WhatIfWorker* worker_;
    std::shared_ptr<const OpenedFile> file_;
    std::shared_ptr<const WhatIf> whatIf_;
    std::shared_ptr<const WhatIfTable> table_; // made by the recording, for tableRequest_
    WhatIfRequest tableRequest_;
    std::int64_t runBatch_ = 0;
    std::string runDtype_;
    std::int64_t runSeq_ = 0;
    bool partial_ = false; // the panel shows the first records while larger ones are made
    RunOptions base_; // what record() records
    std::int64_t askedUpTo_ = 0;
};

} // namespace memledger
