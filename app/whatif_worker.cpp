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

quint64 WhatIfWorker::record(std::shared_ptr<const OpenedFile> file, RunOptions base)
{
    base.progress = nullptr;
    return launch([this, file, base](quint64 job, const std::atomic<bool>* cancel) mutable {
        if (!file || !file->model)
            return;
        base.cancel = cancel;
        base.inputs = file->inputsFor(base, nullptr, &base.input_types);
        if (base.mode.empty())
            base.mode = file->default_mode;
        base.batch.reset();
        // Log-spaced records (1, 2, 8, 32, ... while this machine runs them in seconds), so that kernels that switch
        // at larger batches are seen; beyond the largest record the panel's figures are extrapolated.
        WhatIf::Plan plan;
        plan.largest = 128;
        plan.seconds_budget = 8; // the panel is usable on the first records meanwhile
        plan.first_records = [this, job](const WhatIf& first) {
            auto w = std::make_shared<const WhatIf>(first);
            deliver(job, [this, job, w] { emit firstRecords(job, w); });
        };
        plan.progress = [this, job](const std::string&, std::int64_t batch, int done) {
            deliver(job, [this, job, batch, done] { emit recording(job, batch, done); });
        };
        auto w = std::make_shared<const WhatIf>(
            WhatIf::recordPlanned(*file->model, base, {"float32", "bfloat16", "float16"}, plan));
        deliver(job, [this, job, w] { emit recorded(job, w); });
        // Token inputs: the sequence what-if too, at the batch of the run (its inputs' dimension 0).
        bool tokens = false;
        for (std::size_t i = 0; i < base.inputs.size(); ++i)
            tokens = tokens || (inputTypeAt(base.input_types, i).isToken() && base.inputs[i].size() >= 2);
        if (!tokens)
            return;
        WhatIf::Plan seqPlan;
        seqPlan.largest = 1 << 16;
        seqPlan.seconds_budget = 8;
        auto s = std::make_shared<const WhatIf>(
            WhatIf::recordSeqPlanned(*file->model, base, {"float32", "bfloat16", "float16"}, seqPlan));
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
