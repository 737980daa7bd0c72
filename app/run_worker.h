#pragma once
#include "job_runner.h"
#include "recording/model.h"
#include "session/open_file.h"
#include "report/report.h"

#include <QObject>
#include <QString>

#include <atomic>
#include <memory>
#include <vector>

class QThread;

namespace memledger {

// What to run: a file already opened, or a path to open first (path "" is the built-in demo). A model is
// run; a report or snapshot is what it holds.
struct RunRequest {
    std::shared_ptr<const OpenedFile> file; // null: open `path` first and emit opened()
    QString path;
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
    // A requested path was opened (before it is run); a file that cannot be opened gives failed() instead.
    void opened(quint64 job, std::shared_ptr<const memledger::OpenedFile> file);
    // The inputs the model will be run with, when they are a guess from its first layer.
    // `example`: the inputs are the example a torch.export program was exported with, not a guess.
    void inputsGuessed(quint64 job, const QString& shapes, const QString& how, bool example);
    void progress(quint64 job, int done, int total); // total 0: not known yet
    void reading(quint64 job, qint64 done, qint64 total); // bytes of a snapshot read so far
    void finished(quint64 job, std::shared_ptr<const memledger::Report> report);
    void failed(quint64 job, const QString& message);
    void cancelled(quint64 job);

private:
    void deliver(quint64 job, std::function<void()> emitIt);

    JobRunner* jobs_;
    bool running_ = false;
};

// "1x3x224x224,1x10", "2x512:int64,2x512:bool"
QString shapesToText(const std::vector<Shape>& shapes, const std::vector<InputType>& types = {});

} // namespace memledger
