#include "run_worker.h"

#include "demo_model.h"
#include "support/errors.h"
#include "support/format.h"

#include <QStringList>

namespace memledger {

QString shapesToText(const std::vector<Shape>& shapes, const std::vector<InputType>& types)
{
    return QString::fromStdString(inputsToString(shapes, types));
}

RunWorker::RunWorker(QObject* parent)
    : QObject(parent)
    , jobs_(new JobRunner(this))
{
}

RunWorker::~RunWorker() = default;

quint64 RunWorker::currentJob() const
{
    return jobs_->currentJob();
}

void RunWorker::deliver(quint64 job, std::function<void()> emitIt)
{
    jobs_->deliver(job, std::move(emitIt));
}

quint64 RunWorker::start(RunRequest request)
{
    cancel();
    running_ = true;
    auto job
        = jobs_->launch([this, request = std::move(request)](quint64 job, const std::atomic<bool>* cancelFlag) mutable {
              auto& options = request.options;
              options.cancel = cancelFlag;
              options.progress = [this, job](int done, int total) {
                  deliver(job, [this, job, done, total] { emit progress(job, done, total); });
              };
              try {
                  auto file = request.file;
                  if (!file) {
                      SnapshotReadOptions read; // a snapshot's reading reports its bytes and stops on Cancel
                      read.cancel = cancelFlag;
                      read.progress = [this, job](std::size_t done, std::size_t total) {
                          deliver(job, [this, job, done, total] {
                              emit reading(job, static_cast<qint64>(done), static_cast<qint64>(total));
                          });
                      };
                      file = std::make_shared<const OpenedFile>(openFileOrDemo(request.path.toStdString(), read));
                      deliver(job, [this, job, file] { emit opened(job, file); });
                  }
                  if (file->model && options.inputs.empty() && file->default_inputs.empty()) {
                      std::string how;
                      std::vector<InputType> types;
                      auto guess = file->model->guessInputs(&how, &types);
                      auto text = shapesToText(guess, types);
                      auto howText = QString::fromStdString(how);
                      const bool example = file->model->info().example_inputs;
                      deliver(job, [this, job, text, howText, example] { emit inputsGuessed(job, text, howText, example); });
                  }
                  auto shared = std::make_shared<const Report>(analyzeOpened(*file, options));
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
                  auto name = request.file ? QString::fromStdString(request.file->name)
                      : request.path.isEmpty()  ? QString::fromUtf8(kDemoModelName)
                                                : request.path;
                  auto message = QStringLiteral("%1: %2").arg(name, QString::fromStdString(e.what()));
                  deliver(job, [this, job, message] {
                      running_ = false;
                      emit failed(job, message);
                  });
              }
          });
    emit progress(job, 0, 0);
    return job;
}

void RunWorker::cancel()
{
    if (running_) {
        running_ = false;
        emit cancelled(jobs_->currentJob());
    }
    jobs_->cancel(); // whatever the old job still reports is stale now
}

} // namespace memledger
