#include "whatif_worker.h"

#include "demo_model.h"
#include "memledger/errors.h"

#include <QThread>

#include <algorithm>

namespace memledger {

namespace {

Model openModel(const QString& path)
{
    return path.isEmpty() ? Model::openBytes(demoModelBytes(), kDemoModelName) : Model::open(path.toStdString());
}

} // namespace

WhatIfWorker::WhatIfWorker(QObject* parent) : QObject(parent) { }

WhatIfWorker::~WhatIfWorker()
{
    cancel();
    for (auto* t : threads_) {
        t->wait();
        delete t;
    }
}

void WhatIfWorker::deliver(quint64 job, std::function<void()> emitIt)
{
    QMetaObject::invokeMethod(
        this,
        [this, job, emitIt = std::move(emitIt)] {
            if (job == job_)
                emitIt();
        },
        Qt::QueuedConnection);
}

quint64 WhatIfWorker::launch(std::function<void(quint64, const std::atomic<bool>*)> work)
{
    cancel();
    auto job = ++job_;
    auto flag = std::make_shared<std::atomic<bool>>(false);
    cancel_ = flag;
    auto* thread = QThread::create([this, job, flag, work = std::move(work)] {
        try {
            work(job, flag.get());
        } catch (const Cancelled&) {
        } catch (const std::exception& e) {
            auto message = QString::fromStdString(e.what());
            deliver(job, [this, job, message] { emit failed(job, message); });
        }
    });
    connect(thread, &QThread::finished, this, [this, thread] {
        threads_.erase(std::remove(threads_.begin(), threads_.end(), thread), threads_.end());
        thread->deleteLater();
    });
    threads_.push_back(thread);
    thread->start(QThread::LowPriority);
    return job;
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
        auto w = std::make_shared<const WhatIf>(
            WhatIf::record(model, base, 1, 2, {"float32", "bfloat16", "float16"}));
        deliver(job, [this, job, w] { emit recorded(job, w); });
    });
}

quint64 WhatIfWorker::measure(const QString& path, std::shared_ptr<const WhatIf> whatIf, std::int64_t batch,
                              const QString& dtype)
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
    if (cancel_)
        cancel_->store(true);
    ++job_;
}

} // namespace memledger
