#include "whatif_worker.h"

#include "demo_model.h"
#include "support/errors.h"

namespace memledger {

namespace {

Model openModel(const QString& path)
{
    return path.isEmpty() ? Model::openBytes(demoModelBytes(), kDemoModelName) : Model::open(path.toStdString());
}

} // namespace

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

quint64 WhatIfWorker::record(const QString& path, RunOptions base)
{
    base.progress = nullptr;
    return launch([this, path, base](quint64 job, const std::atomic<bool>* cancel) mutable {
        base.cancel = cancel;
        auto model = openModel(path);
        if (path.isEmpty() && base.inputs.empty())
            base.inputs = demoModelInput();
        if (base.inputs.empty())
            base.inputs = model.guessInputs();
        base.batch.reset();
        auto w = std::make_shared<const WhatIf>(WhatIf::record(model, base, 1, 2, {"float32", "bfloat16", "float16"}));
        deliver(job, [this, job, w] { emit recorded(job, w); });
    });
}

quint64 WhatIfWorker::measure(
    const QString& path, std::shared_ptr<const WhatIf> whatIf, std::int64_t batch, const QString& dtype)
{
    auto d = dtype.toStdString();
    return launch([this, path, whatIf, batch, d](quint64 job, const std::atomic<bool>*) {
        auto model = openModel(path);
        auto p = whatIf->measure(model, batch, d);
        deliver(job, [this, job, p] { emit measured(job, p); });
    });
}

void WhatIfWorker::cancel()
{
    jobs_->cancel();
}

} // namespace memledger
