#pragma once
#include "job_runner.h"
#include "recording/model.h"
#include "report/report.h"

#include <QObject>
#include <QString>

#include <atomic>
#include <memory>
#include <vector>

class QThread;

namespace memledger {

// What to open: a model to run (path "" is the built-in demo) or a saved JSON report to read.
struct RunRequest {
    QString path;
    bool isReport = false;
    bool isSnapshot = false; // a CUDA memory snapshot (a pickle), read with readSnapshotReport
    RunOptions options; // progress and cancel are set by RunWorker
};

// Runs models and reads reports off the GUI thread, one job at a time. Every job has an id; starting a
// new job cancels the one before, and results of a job that is no longer current are dropped.
class RunWorker : public QObject {
    Q_OBJECT
public:
    explicit RunWorker(QObject* parent = nullptr);
    ~RunWorker() override; // cancels and waits for the threads still running

    quint64 start(RunRequest request);
    void cancel();
    bool isRunning() const { return running_; }
    quint64 currentJob() const;

signals:
    // The inputs the model will be run with, when they are a guess from its first layer.
    void inputsGuessed(quint64 job, const QString& shapes, const QString& how);
    void progress(quint64 job, int done, int total); // total 0: not known yet
    void finished(quint64 job, std::shared_ptr<const memledger::Report> report);
    void failed(quint64 job, const QString& message);
    void cancelled(quint64 job);

private:
    void deliver(quint64 job, std::function<void()> emitIt);

    JobRunner* jobs_;
    bool running_ = false;
};

QString shapesToText(const std::vector<Shape>& shapes); // "1x3x224x224,1x10"

} // namespace memledger
