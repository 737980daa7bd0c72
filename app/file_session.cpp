#include "file_session.h"

#include "demo_model.h"
#include "run_panel.h"
#include "report/meta_run.h"
#include "support/format.h"
#include "run_worker.h"

#include <QFileInfo>

#include <algorithm>

namespace memledger {

FileSession::FileSession(RunPanel* panel, QObject* parent)
    : QObject(parent)
    , panel_(panel)
    , worker_(new RunWorker(this))
{
    connect(panel_, &RunPanel::runRequested, this, &FileSession::run);
    connect(panel_, &RunPanel::cancelRequested, this, &FileSession::cancel);
    connect(worker_, &RunWorker::progress, this, [this](quint64, int done, int total) { panel_->setProgress(done, total); });
    connect(worker_, &RunWorker::reading, this,
        [this](quint64, qint64 done, qint64 total) { panel_->setReadProgress(done, total); });
    connect(worker_, &RunWorker::inputsGuessed, this,
        [this](quint64, const QString& shapes, const QString& how, bool example) {
            panel_->setInputs(shapes, example ? tr("(the export's example)") : tr("(guess)"), how);
        });
    connect(worker_, &RunWorker::opened, this, [this](quint64, std::shared_ptr<const OpenedFile> file) {
        take(std::move(file));
        emit opened();
    });
    connect(worker_, &RunWorker::finished, this,
        [this](quint64, std::shared_ptr<const Report> report) { show(std::move(report)); });
    connect(worker_, &RunWorker::failed, this, [this](quint64, const QString& message) {
        panel_->setFinished(RunPanel::Outcome::Failed);
        // A file that did not open leaves the one before shown: the panel says which is which.
        if (opening_.isNull())
            panel_->setStatus(tr("Failed"));
        else if (shown_)
            panel_->setStatus(tr("Could not open %1; still showing %2").arg(opening_, displayName()));
        else
            panel_->setStatus(tr("Could not open %1").arg(opening_));
        opening_ = QString();
        emit failed(message);
        emit stopped();
    });
    connect(worker_, &RunWorker::cancelled, this, [this](quint64) {
        opening_ = QString();
        panel_->setFinished(RunPanel::Outcome::Cancelled);
        panel_->setStatus(tr("Cancelled"));
        emit stopped();
    });
}

void FileSession::take(std::shared_ptr<const OpenedFile> file)
{
    file_ = std::move(file);
    path_ = QString::fromStdString(file_->path);
    opening_ = QString();
    shown_ = false;
    const auto kind = file_->kind;
    panel_->setRunnable(kind == FileKind::Model);
    // A torch.export program (it carries its export example): the lifetimes row applies.
    panel_->setLifetimesApply(kind == FileKind::Model && file_->model && file_->model->info().example_inputs);
    if (kind == FileKind::Model)
        panel_->refreshDevices(false); // opening it loaded libtorch: its GPUs are listed now
    panel_->setGenerates(kind == FileKind::Model && file_->model && !file_->model->info().generation.cache.empty(),
        kind == FileKind::Model && file_->model && file_->model->info().generation.static_cache);
    panel_->setMode(file_->default_mode);
    if (kind == FileKind::Model && file_->model && file_->model->metaWeights())
        panel_->setDevice("meta"); // its weights are meta tensors: it runs there alone
    if (!file_->default_optimizer.empty())
        panel_->setOptimizer(file_->default_optimizer);
    if (!file_->default_inputs.empty())
        panel_->setInputs(shapesToText(file_->default_inputs, file_->default_input_types), tr("(demo input)"));
    else if (kind == FileKind::Snapshot)
        panel_->setInputs(QString(), tr("(CUDA memory snapshot)"));
    else if (kind == FileKind::Report)
        panel_->setInputs(QString(), tr("(saved report)"));
    else
        panel_->setInputs(QString(), QString()); // the worker guesses them from the model
}

void FileSession::show(std::shared_ptr<const Report> report)
{
    panel_->setFinished(RunPanel::Outcome::Done);
    panel_->setStatus(report->source == ReportSource::Model
            ? (report->run.mode == RunMode::Train  ? tr("Ran a training step in %1 ms, %2 events")
                  : report->run.mode == RunMode::Generate
                  ? tr("Generated %1 tokens per row: ").arg(report->run.new_tokens) + tr("%1 ms, %2 events; KV cache ")
                      + QString::fromStdString(formatBytes(report->kv_cache_bytes)) + tr(" at the end")
                  : tr("Ran in %1 ms, %2 events"))
                  .arg(report->run.duration_ms, 0, 'f', 0)
                  .arg(report->trace ? report->trace->size() : 0)
                + (isMetaRun(*report) ? tr(" on meta (shapes only)") : QString()) // the badge is the peak panel's
            : QString());
    // The panel says what the shown report is: a training step read from JSON shows as one.
    if (report->source == ReportSource::Model) {
        if (isModel() && !report->run.input_shapes.empty()) {
            auto shapes = shapesToText(report->run.input_shapes, report->run.input_types);
            if (shapes != panel_->inputsText())
                panel_->setInputs(shapes, report->run.input_guessed ? tr("(guess)") : QString());
        }
        panel_->setMode(report->run.mode);
        if (report->run.mode == RunMode::Generate && report->run.new_tokens > 0) {
            panel_->setNewTokens(static_cast<int>(std::min<std::int64_t>(report->run.new_tokens, 1 << 20)));
            panel_->setCache(report->run.cache);
        }
        if (!report->run.optimizer.empty())
            panel_->setOptimizer(report->run.optimizer);
        if (report->run.mode == RunMode::Train && !report->run.hold_output.empty())
            panel_->setHoldOutput(report->run.hold_output);
        if (!report->run.lifetimes.empty())
            panel_->setLifetimes(report->run.lifetimes);
    }
    shown_ = true;
    emit finished(std::move(report));
}

void FileSession::showRead(std::shared_ptr<const OpenedFile> file)
{
    if (!file || !file->report)
        return;
    worker_->cancel(); // a run or open under way would replace what is read here
    auto report = file->report;
    if (!file_ || file_->path != file->path) {
        take(std::move(file));
        emit opened();
    } else {
        file_ = std::move(file);
    }
    show(std::move(report));
}

void FileSession::open(const QString& path)
{
    // Nothing changes until the file has opened (RunWorker::opened).
    RunRequest request;
    request.path = path;
    request.options.dtype = panel_->dtype();
    // The CPU is every model's default but one whose weights are meta tensors: "" lets the file choose.
    request.options.device = panel_->device() == "cpu" ? std::string() : panel_->device();
    // The mode stays unset: the file says what it is for (a training demo records a training step).
    request.options.optimizer = panel_->optimizer();
    request.options.loss = panel_->loss();
    if (commandLine_) { // the window's first file, run as its command line says
        const auto& c = *commandLine_;
        if (!c.inputs.empty()) {
            request.options.inputs = c.inputs;
            request.options.input_types = c.input_types;
        }
        request.options.batch = c.batch;
        request.options.seq = c.seq;
        request.options.mode = c.mode;
        request.options.new_tokens = c.new_tokens;
        request.options.cache = c.cache;
        if (c.mode == RunMode::Generate && c.new_tokens > 0) {
            panel_->setNewTokens(static_cast<int>(std::min<std::int64_t>(c.new_tokens, 1 << 20)));
            panel_->setCache(c.cache);
        }
        if (c.optimizer != "sgd" || c.mode == RunMode::Train)
            request.options.optimizer = c.optimizer;
        if (c.loss != "auto")
            request.options.loss = c.loss;
        if (c.dtype != "float32")
            request.options.dtype = c.dtype;
        commandLine_.reset();
    }
    opening_ = path.isEmpty() ? QString::fromUtf8(kDemoModelName) : QFileInfo(path).fileName();
    panel_->setRunning(true);
    panel_->setStatus(tr("Opening %1…").arg(opening_));
    worker_->start(std::move(request));
    emit started();
}

void FileSession::run()
{
    if (!file_) {
        open(path_);
        return;
    }
    RunRequest request;
    request.file = file_;
    request.path = path_;
    if (isModel()) {
        try {
            request.options = panel_->options();
        } catch (const std::exception& e) {
            emit inputError(tr("Input shapes: %1").arg(QString::fromStdString(e.what())));
            return;
        }
    }
    panel_->setRunning(true);
    panel_->setStatus(isModel() ? tr("Running %1…").arg(displayName()) : tr("Reading %1…").arg(displayName()));
    worker_->start(std::move(request));
    emit started();
}

void FileSession::cancel()
{
    worker_->cancel();
}

bool FileSession::isRunning() const
{
    return worker_->isRunning();
}

QString FileSession::displayName() const
{
    if (!path_.isEmpty())
        return QFileInfo(path_).fileName();
    // A built-in demo has no path, only its name ("demo:mnist-train.pt").
    return file_ && !file_->name.empty() ? QString::fromStdString(file_->name) : QString::fromUtf8(kDemoModelName);
}

} // namespace memledger
