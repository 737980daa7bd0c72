#include "run_worker.h"

#include "cli.h"
#include "demo_model.h"
#include "memledger/analysis.h"
#include "memledger/errors.h"
#include "memledger/report_json.h"
#include "memledger/snapshot.h"

#include <QPointer>
#include <QStringList>
#include <QThread>

#include <algorithm>

namespace memledger {

QString shapesToText(const std::vector<Shape>& shapes)
{
    QStringList parts;
    for (const auto& s : shapes)
        parts << QString::fromStdString(shapeToString(s));
    return parts.join(QLatin1Char(','));
}

RunWorker::RunWorker(QObject* parent)
    : QObject(parent)
{
}

RunWorker::~RunWorker()
{
    if (cancel_)
        cancel_->store(true);
    for (auto* t : threads_) {
        t->wait();
        delete t;
    }
}

void RunWorker::deliver(quint64 job, std::function<void()> emitIt)
{
    // Runs on the GUI thread; a job that is no longer current says nothing.
    QMetaObject::invokeMethod(
        this,
        [this, job, emitIt = std::move(emitIt)] {
            if (job == job_)
                emitIt();
        },
        Qt::QueuedConnection);
}

quint64 RunWorker::start(RunRequest request)
{
    cancel();
    auto job = ++job_;
    running_ = true;
    auto cancelFlag = std::make_shared<std::atomic<bool>>(false);
    cancel_ = cancelFlag;
    auto* thread = QThread::create([this, job, cancelFlag, request = std::move(request)]() mutable {
        auto& options = request.options;
        options.cancel = cancelFlag.get();
        options.progress = [this, job](int done, int total) {
            deliver(job, [this, job, done, total] { emit progress(job, done, total); });
        };
        auto path = request.path.toStdString();
        try {
            Report report;
            if (request.isSnapshot) {
                report = readSnapshotReport(path);
            } else if (request.isReport) {
                report = readReportFile(path);
            } else if (path.empty()) {
                report = analyzeFile(path, options);
            } else {
                auto model = Model::open(path);
                if (options.inputs.empty()) {
                    std::string how;
                    auto guess = model.guessInputs(&how);
                    auto text = shapesToText(guess);
                    auto howText = QString::fromStdString(how);
                    deliver(job, [this, job, text, howText] { emit inputsGuessed(job, text, howText); });
                }
                report = analyzeModel(model, options);
            }
            auto shared = std::make_shared<const Report>(std::move(report));
            deliver(job, [this, job, shared] {
                running_ = false;
                emit finished(job, shared);
            });
        } catch (const Cancelled&) {
            deliver(job, [this, job] {
                running_ = false;
                emit cancelled(job);
            });
        } catch (const FileError& e) {
            auto message = QString::fromStdString(e.what());
            deliver(job, [this, job, message] {
                running_ = false;
                emit failed(job, message);
            });
        } catch (const std::exception& e) {
            auto name = request.path.isEmpty() ? QString::fromUtf8(kDemoModelName) : request.path;
            auto message = QStringLiteral("%1: %2").arg(name, QString::fromStdString(e.what()));
            deliver(job, [this, job, message] {
                running_ = false;
                emit failed(job, message);
            });
        }
    });
    // Finished threads are reaped here rather than with deleteLater, so the destructor can wait on the rest.
    connect(thread, &QThread::finished, this, [this, thread] {
        threads_.erase(std::remove(threads_.begin(), threads_.end(), thread), threads_.end());
        thread->deleteLater();
    });
    threads_.push_back(thread);
    thread->start();
    emit progress(job, 0, 0);
    return job;
}

void RunWorker::cancel()
{
    if (cancel_)
        cancel_->store(true);
    if (running_) {
        running_ = false;
        emit cancelled(job_);
    }
    ++job_; // whatever the old job still reports is stale now
}

} // namespace memledger
