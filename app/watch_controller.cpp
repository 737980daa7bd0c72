#include "watch_controller.h"

#include "job_runner.h"
#include "layer_tree_panel.h"
#include "main_window.h"
#include "reload_marks.h"
#include "support/errors.h"
#include "timeline_plot.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QFileSystemWatcher>
#include <QLabel>
#include <QTabWidget>
#include <QTextDocumentFragment>
#include <QTimer>

#include <sys/stat.h>

#include <cmath>

namespace memledger {

namespace {

// Writes come in bursts (a pickle is written in chunks): read once they have paused this long.
constexpr int kDebounceMs = 250;
// After a failed read, look once more this much later in case the write ended before any further change.
constexpr int kRetryMs = 1500;

QString now()
{
    return QDateTime::currentDateTime().toString(QStringLiteral("HH:mm:ss"));
}

} // namespace

WatchController::WatchController(MainWindow* window)
    : QObject(window)
    , window_(window)
    , watcher_(new QFileSystemWatcher(this))
    , debounce_(new QTimer(this))
    , retry_(new QTimer(this))
    , reader_(new JobRunner(this))
    , marks_(new ReloadMarks(window->timeline()))
    , notice_(new QLabel)
{
    qRegisterMetaType<std::shared_ptr<const memledger::OpenedFile>>("std::shared_ptr<const memledger::OpenedFile>");
    debounce_->setSingleShot(true);
    debounce_->setInterval(kDebounceMs);
    retry_->setSingleShot(true);
    retry_->setInterval(kRetryMs);
    connect(watcher_, &QFileSystemWatcher::fileChanged, this, &WatchController::changed);
    connect(watcher_, &QFileSystemWatcher::directoryChanged, this, &WatchController::changed);
    connect(debounce_, &QTimer::timeout, this, &WatchController::read);
    connect(retry_, &QTimer::timeout, this, [this] {
        if (isWatching() && (!lastRead_ || !(signature() == *lastRead_)))
            read();
    });
    notice_->setVisible(false);
    notice_->setWordWrap(true);
    notice_->setTextFormat(Qt::RichText);
    connect(notice_, &QLabel::linkActivated, this, [this](const QString& link) {
        if (link == QLatin1String("stop"))
            stop();
    });
}

void WatchController::watch(const QString& path)
{
    stop();
    path_ = QFileInfo(path).absoluteFilePath();
    ++generation_;
    loads_ = 0;
    current_.reset();
    lastRead_.reset();
    lastReadFailed_ = false;
    watchPath();
    emit watchingChanged(true);
    if (QFileInfo::exists(path_)) {
        setNotice(tr("reading it\u2026"), false);
        read();
    } else {
        setNotice(tr("waiting for it to be written"), false);
    }
}

void WatchController::stop()
{
    if (!isWatching())
        return;
    ++generation_;
    reader_->cancel();
    reading_ = false;
    changedWhileReading_ = false;
    debounce_->stop();
    retry_->stop();
    if (!watcher_->files().isEmpty())
        watcher_->removePaths(watcher_->files());
    if (!watcher_->directories().isEmpty())
        watcher_->removePaths(watcher_->directories());
    path_.clear();
    current_.reset();
    marks_->clear();
    notice_->clear();
    notice_->setVisible(false);
    emit watchingChanged(false);
}

QString WatchController::noticeText() const
{
    return notice_->isVisible() ? QTextDocumentFragment::fromHtml(notice_->text()).toPlainText() : QString();
}

WatchController::Signature WatchController::signature() const
{
    struct stat st { };
    if (::stat(QFile::encodeName(path_).constData(), &st) != 0)
        return {};
    return {static_cast<qint64>(st.st_ino), static_cast<qint64>(st.st_size),
        static_cast<qint64>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

void WatchController::watchPath()
{
    // A file renamed over the watched one (os.replace) is another inode: the watcher drops the path, so it is
    // added again whenever it exists; the folder tells of the rename and of a file that did not exist yet.
    if (QFileInfo::exists(path_) && !watcher_->files().contains(path_))
        watcher_->addPath(path_);
    const auto dir = QFileInfo(path_).absolutePath();
    if (!watcher_->directories().contains(dir) && QFileInfo(dir).isDir())
        watcher_->addPath(dir);
}

void WatchController::changed()
{
    if (!isWatching())
        return;
    watchPath();
    if (lastRead_ && signature() == *lastRead_)
        return; // another file of the folder, or a touch that changed nothing memledger reads
    if (reading_) {
        changedWhileReading_ = true;
        return;
    }
    debounce_->start(); // restarts: the read waits for a pause in the writes
}

void WatchController::read()
{
    if (!isWatching())
        return;
    if (reading_) {
        changedWhileReading_ = true;
        return;
    }
    reading_ = true;
    changedWhileReading_ = false;
    retry_->stop();
    const auto before = signature();
    const auto path = path_.toStdString();
    const auto generation = generation_;
    reader_->launch([this, path, before, generation](quint64 job, const std::atomic<bool>* cancel) {
        try {
            // Never a model: those are run, which a rewrite mid-run would make meaningless.
            if (detectFileKind(path) == FileKind::Model)
                throw FileError(path,
                    "not a CUDA memory snapshot nor a memledger report (a model?): --watch follows the file a job "
                    "rewrites; open a model without it");
            SnapshotReadOptions options;
            options.cancel = cancel;
            auto file = std::make_shared<const OpenedFile>(openFile(path, options));
            reader_->deliver(job, [this, file, before, generation] {
                if (generation == generation_)
                    readDone(file, before);
            });
        } catch (const Cancelled&) {
        } catch (const std::exception& e) {
            auto message = QString::fromStdString(e.what());
            reader_->deliver(job, [this, message, before, generation] {
                if (generation == generation_)
                    readFailedWith(message, before);
            });
        }
    });
}

void WatchController::readDone(std::shared_ptr<const OpenedFile> file, Signature read)
{
    reading_ = false;
    lastRead_ = read;
    lastReadFailed_ = false;
    watchPath();
    // The view is put back once the window has drawn the new report (a snapshot's segment views follow a turn
    // of the event loop, and choose their own tab).
    const bool first = loads_ == 0 || window_->currentFile() != path_;
    const auto view = keepView();
    connect(
        window_, &MainWindow::reportChanged, this,
        [this, view, first] {
            if (!first)
                restoreView(view);
            shown();
        },
        Qt::SingleShotConnection);
    emit fileRead(std::move(file));
    if (changedWhileReading_)
        debounce_->start();
}

void WatchController::readFailedWith(const QString& message, Signature read)
{
    reading_ = false;
    lastRead_ = read;
    lastReadFailed_ = true;
    watchPath();
    const auto kept = current_
        ? tr("still showing the load of %1").arg(current_->loaded_at.toString(QStringLiteral("HH:mm:ss")))
        : tr("nothing shown yet");
    setNotice(tr("could not read it at %1 (a write under way?): %2. %3; it is read again at its next change.")
                  .arg(now(), message.toHtmlEscaped(), kept),
        true);
    emit statusMessage(tr("%1 could not be read (mid-write?); %2").arg(QFileInfo(path_).fileName(), kept), 8000);
    emit readFailed(message);
    if (changedWhileReading_)
        debounce_->start();
    else
        retry_->start();
}

WatchController::KeptView WatchController::keepView() const
{
    KeptView v;
    const auto* plot = window_->timeline();
    const auto& series = plot->series();
    const auto range = plot->xAxis->range();
    const double full = series.lastKey() - series.firstKey();
    const double slack = std::max(1e-9, std::abs(full) * 1e-6);
    v.zoomed = !series.keys.empty()
        && (std::abs(range.lower - series.firstKey()) > slack || std::abs(range.upper - series.lastKey()) > slack);
    v.lower = range.lower;
    v.upper = range.upper;
    v.module = plot->highlightedModule();
    v.rangeFirst = plot->rangeFirst();
    v.rangeEnd = plot->rangeEnd();
    v.device = plot->device();
    v.tab = window_->tabs()->currentIndex();
    return v;
}

void WatchController::restoreView(const KeptView& v)
{
    auto* plot = window_->timeline();
    if (v.device != plot->device())
        window_->setDevice(v.device);
    if (!v.module.isEmpty())
        window_->layerTree()->selectModule(v.module);
    const auto events = plot->report() && plot->report()->trace ? plot->report()->trace->size() : 0;
    if (v.rangeEnd > v.rangeFirst && v.rangeEnd <= events)
        plot->setRange(v.rangeFirst, v.rangeEnd);
    if (v.zoomed) // unzoomed, the view takes in what the job added
        plot->xAxis->setRange(v.lower, v.upper);
    if (v.tab >= 0 && v.tab < window_->tabs()->count() && window_->tabs()->isTabVisible(v.tab))
        window_->tabs()->setCurrentIndex(v.tab);
    plot->replot(QCustomPlot::rpQueuedReplot);
}

void WatchController::shown()
{
    const auto& report = window_->report();
    if (!report)
        return;
    auto figures = loadFigures(*report, window_->timeline()->series().peak_value, QDateTime::currentDateTime());
    ++loads_;
    if (current_) {
        marks_->show(*current_);
        setNotice(reloadChangeText(*current_, figures).toHtmlEscaped(), false);
    } else {
        marks_->clear();
        setNotice(tr("loaded %1; each rewrite reloads it").arg(figures.loaded_at.toString(QStringLiteral("HH:mm:ss"))),
            false);
    }
    current_ = figures;
    emit statusMessage(tr("Reloaded %1").arg(QFileInfo(path_).fileName()), 4000); // over a failed read's message
    emit reloaded();
}

void WatchController::setNotice(const QString& html, bool warning)
{
    notice_->setStyleSheet(warning
            ? QStringLiteral("QLabel { background: #fff4d6; color: #6b4e00; border: 1px solid #e6c877; padding: 4px; }")
            : QStringLiteral(
                "QLabel { background: #e3f0fb; color: #123c5e; border: 1px solid #a6c8e6; padding: 4px; }"));
    notice_->setText(tr("<b>Watching %1</b> &mdash; %2 &nbsp;<a href=\"stop\">Stop watching</a>")
                         .arg(QFileInfo(path_).fileName().toHtmlEscaped(), html));
    notice_->setToolTip(QDir::toNativeSeparators(path_));
    notice_->setVisible(true);
}

} // namespace memledger
