#pragma once
#include "job_runner.h"
#include "recording/model.h"
#include "session/open_file.h"
#include "whatif/whatif.h"
#include "whatif/whatif_policy.h"

#include <QObject>
#include <QString>

#include <atomic>
#include <memory>
#include <vector>

namespace memledger {

// Records a model for the what-if panel as the what-if policy plans it (whatif/whatif_policy.h, the command
// line's too), makes the table a saved report holds, and measures a chosen setting, off the GUI thread.
// Like RunWorker: every job has an id, a new one cancels the old, and stale results are dropped.
class WhatIfWorker : public QObject {
    Q_OBJECT
public:
    explicit WhatIfWorker(QObject* parent = nullptr);
    ~WhatIfWorker() override;

    // `file` is the model the window opened (shared with its runs). `base` holds the inputs, mode, optimizer
    // and loss of the run shown; `request` its batch (a row of the saved table) and the budget.
    quint64 record(std::shared_ptr<const OpenedFile> file, RunOptions base, WhatIfRequest request = {});
    // `x` is a batch, or a sequence length for a sequence what-if.
    quint64 measure(std::shared_ptr<const OpenedFile> file, std::shared_ptr<const WhatIf> whatIf, std::int64_t x,
        const QString& dtype);
    void cancel();

signals:
    void recorded(quint64 job, std::shared_ptr<const memledger::WhatIf> whatIf);
    // After `recorded`: the table a saved report holds, for the request's rows, precisions and budget (rows the
    // records do not back measured), as `whatif --json` of the same model and settings writes it.
    void tableReady(quint64 job, std::shared_ptr<const memledger::WhatIfTable> table, memledger::WhatIfRequest request);
    // After `recorded`, for a model with token inputs: the what-if along the sequence length, at the run's batch.
    void seqRecorded(quint64 job, std::shared_ptr<const memledger::WhatIf> whatIf);
    // While the records are made: the what-if of the first two (usable up to the second record's batch), and
    // each larger record as it starts.
    void firstRecords(quint64 job, std::shared_ptr<const memledger::WhatIf> whatIf);
    void recording(quint64 job, qint64 batch, int done);
    void measured(quint64 job, const memledger::Prediction& prediction);
    void failed(quint64 job, const QString& message);

private:
    quint64 launch(std::function<void(quint64, const std::atomic<bool>*)> work);
    void deliver(quint64 job, std::function<void()> emitIt);

    JobRunner* jobs_;
};

} // namespace memledger
