#include "job_runner.h"

#include <QThread>

#include <algorithm>

namespace memledger {

JobRunner::JobRunner(QObject* parent)
    : QObject(parent)
{
}

JobRunner::~JobRunner()
{
    cancel();
    for (auto* t : threads_) {
        t->wait();
        delete t;
    }
}

void JobRunner::deliver(quint64 job, std::function<void()> emitIt)
{
    QMetaObject::invokeMethod(
        this,
        [this, job, emitIt = std::move(emitIt)] {
            if (job == job_)
                emitIt();
        },
        Qt::QueuedConnection);
}

quint64 JobRunner::launch(Work work, bool lowPriority)
{
    cancel();
    auto job = ++job_;
    auto flag = std::make_shared<std::atomic<bool>>(false);
    cancel_ = flag;
    auto* thread = QThread::create([job, flag, work = std::move(work)] { work(job, flag.get()); });
    // Finished threads are reaped here rather than with deleteLater, so the destructor can wait on the rest.
    connect(thread, &QThread::finished, this, [this, thread] {
        threads_.erase(std::remove(threads_.begin(), threads_.end(), thread), threads_.end());
        thread->deleteLater();
    });
    threads_.push_back(thread);
    thread->start(lowPriority ? QThread::LowPriority : QThread::InheritPriority);
    return job;
}

void JobRunner::cancel()
{
    if (cancel_)
        cancel_->store(true);
    ++job_;
}

} // namespace memledger
