#pragma once
#include <QObject>

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

class QThread;

namespace memledger {

// Runs work off the GUI thread, one job at a time. Every job has an id; launching a new job cancels the one
// before, and whatever a job that is no longer current delivers is dropped.
class JobRunner : public QObject {
    Q_OBJECT
public:
    using Work = std::function<void(quint64 job, const std::atomic<bool>* cancel)>;

    explicit JobRunner(QObject* parent = nullptr);
    ~JobRunner() override; // cancels and waits for the threads still running

    quint64 launch(Work work, bool lowPriority = false);
    void cancel(); // sets the running job's cancel flag; what it delivers afterwards is dropped
    quint64 currentJob() const { return job_; }
    // From any thread: runs emitIt on the GUI thread if `job` is still current.
    void deliver(quint64 job, std::function<void()> emitIt);

private:
    quint64 job_ = 0;
    std::shared_ptr<std::atomic<bool>> cancel_;
    std::vector<QThread*> threads_;
};

} // namespace memledger
