#include "whatif_worker.h"

#include "support/errors.h"

namespace memledger {

WhatIfWorker::WhatIfWorker(QObject* parent)
    : QObject(parent)
    , jobs_(new JobRunner(this))
{
}

WhatIfWorker::~WhatIfWorker() = default;

void WhatIfWorker::deliver(quint64 job, std::function<void()> emitIt)
{
    jobs_->deliver(job, std::move(emitIt));
}

quint64 WhatIfWorker::launch(std::function<void(quint64, const std::atomic<bool>*)> work)
{
    return jobs_->launch(
        [this, work = std::move(work)](quint64 job, const std::atomic<bool>* cancel) {
            try {
                work(job, cancel);
            } catch (const Cancelled&) {
            } catch (const std::exception& e) {
                auto message = QString::fromStdString(e.what());
                deliver(job, [this, job, message] { emit failed(job, message); });
            }
        },
        true);
}

quint64 WhatIfWorker::record(std::shared_ptr<const OpenedFile> file, RunOptions base, WhatIfRequest request)
{
    base.progress = nullptr;
    return launch([this, file, base, request](quint64 job, const std::atomic<bool>* cancel) mutable {
        if (!file || !file->model)
            return;
        base.cancel = cancel;
        base.inputs = file->inputsFor(base, nullptr, &base.input_types);
        if (!base.mode)
            base.mode = file->default_mode;
        if (request.dtypes.empty())
            request.dtypes = windowWhatIfDtypes(*base.mode);
        // The panel is usable on the first records while the larger ones are made.
        auto w = std::make_shared<const WhatIf>(recordWhatIf(
            *file->model, base, request,
            [this, job](const std::string&, std::int64_t batch, int done) {
                deliver(job, [this, job, batch, done] { emit recording(job, batch, done); });
            },
            [this, job](const WhatIf& first) {
                auto f = std::make_shared<const WhatIf>(first);
                deliver(job, [this, job, f] { emit firstRecords(job, f); });
            }));
        deliver(job, [this, job, w] { emit recorded(job, w); });
        auto table = std::make_shared<const WhatIfTable>(whatIfTableFor(*w, request, file->model.get()));
        deliver(job, [this, job, table, request] { emit tableReady(job, table, request); });
        // Token inputs: the sequence what-if too, at the batch of the run (its inputs' dimension 0).
        WhatIfRequest seq;
        seq.axis = WhatIfAxis::Seq;
        seq.dtypes = request.dtypes;
        for (std::size_t i = 0; i < base.inputs.size() && seq.current_batch == 0; ++i)
            if (inputTypeAt(base.input_types, i).isToken() && base.inputs[i].size() >= 2) {
                seq.current_batch = base.inputs[i][0];
                seq.current_seq = base.inputs[i][1];
            }
        if (seq.current_batch == 0)
            return;
        auto s = std::make_shared<const WhatIf>(recordWhatIf(*file->model, base, seq));
        deliver(job, [this, job, s] { emit seqRecorded(job, s); });
    });
}

quint64 WhatIfWorker::measure(std::shared_ptr<const OpenedFile> file, std::shared_ptr<const WhatIf> whatIf,
    std::int64_t batch, const QString& dtype)
{
    auto d = dtype.toStdString();
    return launch([this, file, whatIf, batch, d](quint64 job, const std::atomic<bool>*) {
        if (!file || !file->model)
            return;
        auto p = whatIf->measure(*file->model, batch, d);
        deliver(job, [this, job, p] { emit measured(job, p); });
    });
}

void WhatIfWorker::cancel()
{
    jobs_->cancel();
}

} // namespace memledger
