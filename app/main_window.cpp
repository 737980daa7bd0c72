#include "main_window.h"

#include "demo_model.h"
#include "layer_tree_panel.h"
#include "ledger_summary.h"
#include "memledger/format.h"
#include "memledger/report_json.h"
#include "run_panel.h"
#include "run_worker.h"
#include "timeline_plot.h"
#include "timeline_png.h"

#if __has_include("memledger/report_html.h")
#include "memledger/report_html.h"
#define MEMLEDGER_HAS_HTML 1
#endif

#include <nlohmann/json.hpp>

#include <QActionGroup>
#include <QCloseEvent>
#include <QDockWidget>
#include <QDragEnterEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QLabel>
#include <QMenuBar>
#include <QMimeData>
#include <QSaveFile>
#include <QSettings>
#include <QSplitter>
#include <QStatusBar>
#include <QToolBar>
#include <QVBoxLayout>

#include <stdexcept>

namespace memledger {

namespace {

constexpr int kMaxRecentFiles = 8;

bool isReportFile(const QString& path)
{
    return path.endsWith(QStringLiteral(".json"), Qt::CaseInsensitive);
}

QString writeWithQSaveFile(const QString& path, const QByteArray& bytes)
{
    QSaveFile file(path);
    if (!file.open(QIODevice::WriteOnly) || file.write(bytes) != bytes.size() || !file.commit())
        return QStringLiteral("%1: %2").arg(path, file.errorString());
    return {};
}

} // namespace

MainWindow::MainWindow(QWidget* parent)
    : QMainWindow(parent)
    , worker_(new RunWorker(this))
    , timeline_(new TimelinePlot)
    , tree_(new LayerTreePanel)
    , summary_(new LedgerSummary)
    , runPanel_(new RunPanel)
    , whatIfDock_(new QDockWidget(tr("What if"), this))
    , error_(new QLabel)
    , peakLabel_(new QLabel)
{
    setWindowTitle(QStringLiteral("memledger"));
    setAcceptDrops(true);
    resize(1400, 900);

    error_->setVisible(false);
    error_->setWordWrap(true);
    error_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    error_->setStyleSheet(QStringLiteral("QLabel { background: #fbe3e4; color: #8a1f11; border: 1px solid #e8a0a4;"
                                         " padding: 6px; }"));

    auto* timelineBar = new QToolBar(tr("Timeline"));
    timelineBar->setIconSize(QSize(16, 16));
    auto* axisGroup = new QActionGroup(this);
    auto* byTime = timelineBar->addAction(tr("Time (ms)"));
    auto* byOp = timelineBar->addAction(tr("Op sequence"));
    for (auto* a : {byTime, byOp}) {
        a->setCheckable(true);
        axisGroup->addAction(a);
    }
    byTime->setChecked(true);
    connect(byTime, &QAction::triggered, this, [this] { timeline_->setAxis(TimelineAxis::Milliseconds); });
    connect(byOp, &QAction::triggered, this, [this] { timeline_->setAxis(TimelineAxis::OpSequence); });
    timelineBar->addSeparator();
    timelineBar->addAction(tr("Reset zoom"), timeline_, &TimelinePlot::resetZoom);
    timelineBar->addSeparator();
    auto* hint = new QLabel(tr("wheel: zoom · drag: pan · shift+drag: zoom to box · double-click: reset · "
                               "click: select module"));
    hint->setEnabled(false);
    timelineBar->addWidget(hint);

    auto* top = new QWidget;
    auto* topLayout = new QVBoxLayout(top);
    topLayout->setContentsMargins(0, 0, 0, 0);
    topLayout->addWidget(error_);
    topLayout->addWidget(timelineBar);
    topLayout->addWidget(timeline_, 1);
    timeline_->setMinimumHeight(220);

    auto* splitter = new QSplitter(Qt::Vertical);
    splitter->addWidget(top);
    splitter->addWidget(tree_);
    splitter->setStretchFactor(0, 3);
    splitter->setStretchFactor(1, 2);
    setCentralWidget(splitter);

    auto* runDock = new QDockWidget(tr("Run"), this);
    runDock->setObjectName(QStringLiteral("runDock"));
    runDock->setWidget(runPanel_);
    addDockWidget(Qt::RightDockWidgetArea, runDock);
    auto* summaryDock = new QDockWidget(tr("At the peak"), this);
    summaryDock->setObjectName(QStringLiteral("summaryDock"));
    summaryDock->setWidget(summary_);
    addDockWidget(Qt::RightDockWidgetArea, summaryDock);
    whatIfDock_->setObjectName(QStringLiteral("whatIfDock"));
    addDockWidget(Qt::RightDockWidgetArea, whatIfDock_);
    whatIfDock_->setVisible(false); // until setWhatIfPanel()

    statusBar()->addPermanentWidget(peakLabel_);

    buildMenus();

    connect(tree_, &LayerTreePanel::moduleSelected, timeline_, &TimelinePlot::highlightModule);
    connect(timeline_, &TimelinePlot::moduleClicked, tree_, &LayerTreePanel::selectModule);
    connect(runPanel_, &RunPanel::runRequested, this, &MainWindow::startRun);
    connect(runPanel_, &RunPanel::cancelRequested, this, &MainWindow::cancelRun);
    connect(worker_, &RunWorker::progress, this,
        [this](quint64, int done, int total) { runPanel_->setProgress(done, total); });
    connect(worker_, &RunWorker::inputsGuessed, this, [this](quint64, const QString& shapes, const QString& how) {
        runPanel_->setInputs(shapes, tr("(guess)"), how);
    });
    connect(worker_, &RunWorker::finished, this, [this](quint64, std::shared_ptr<const Report> report) {
        runPanel_->setRunning(false);
        runPanel_->setStatus(report->source == "model" ? tr("Ran in %1 ms, %2 events")
                                                             .arg(report->run.duration_ms, 0, 'f', 0)
                                                             .arg(report->trace ? report->trace->size() : 0)
                                                       : QString());
        clearError();
        showReport(std::move(report));
    });
    connect(worker_, &RunWorker::failed, this, [this](quint64, const QString& message) {
        runPanel_->setRunning(false);
        runPanel_->setStatus(tr("Failed"));
        showError(message);
        emit runFailed(message);
    });
    connect(worker_, &RunWorker::cancelled, this, [this](quint64) {
        runPanel_->setRunning(false);
        runPanel_->setStatus(tr("Cancelled"));
    });
    updateActions();
}

MainWindow::~MainWindow() = default;

void MainWindow::buildMenus()
{
    auto* file = menuBar()->addMenu(tr("&File"));
    file->addAction(tr("&Open…"), QKeySequence::Open, this, [this] {
        auto path = QFileDialog::getOpenFileName(this, tr("Open a model or a report"), QString(),
            tr("Models and reports (*.pt *.pth *.json);;All files (*)"));
        if (!path.isEmpty())
            openFile(path);
    });
    file->addAction(tr("Open the &demo model"), this, [this] { openDemo(); });
    recentMenu_ = file->addMenu(tr("Open &recent"));
    rebuildRecentMenu();
    file->addSeparator();
    auto ask = [this](const QString& title, const QString& suffix, const QString& filter) {
        auto base = file_.isEmpty() ? QStringLiteral("rfbnet-demo") : QFileInfo(file_).completeBaseName();
        return QFileDialog::getSaveFileName(this, title, base + suffix, filter);
    };
    auto report = [this](const QString& error) {
        if (error.isEmpty())
            statusBar()->showMessage(tr("Saved"), 4000);
        else
            showError(error);
    };
    needReport_ << file->addAction(tr("&Save analysis…"), QKeySequence::Save, this, [=] {
        auto path = ask(tr("Save analysis"), QStringLiteral(".memledger.json"), tr("memledger report (*.json)"));
        if (!path.isEmpty())
            report(saveAnalysis(path));
    });
    needReport_ << file->addAction(tr("Export timeline as &PNG…"), this, [=] {
        auto path = ask(tr("Export timeline"), QStringLiteral("-timeline.png"), tr("PNG image (*.png)"));
        if (!path.isEmpty())
            report(exportTimelinePng(path));
    });
    needReport_ << file->addAction(tr("Export &window as PNG…"), this, [=] {
        auto path = ask(tr("Export window"), QStringLiteral("-window.png"), tr("PNG image (*.png)"));
        if (!path.isEmpty())
            report(exportWindowPng(path));
    });
    auto* html = file->addAction(tr("Export &HTML…"), this, [=] {
        auto path = ask(tr("Export HTML"), QStringLiteral(".html"), tr("HTML page (*.html)"));
        if (!path.isEmpty())
            report(exportHtml(path));
    });
#ifdef MEMLEDGER_HAS_HTML
    needReport_ << html;
#else
    html->setEnabled(false);
    html->setToolTip(tr("This build has no HTML report writer"));
#endif
    file->addSeparator();
    file->addAction(tr("&Quit"), QKeySequence::Quit, this, &QWidget::close);
}

void MainWindow::openFile(const QString& path)
{
    file_ = path;
    fileIsReport_ = isReportFile(path);
    setWindowTitle(QStringLiteral("%1 — memledger").arg(displayName()));
    runPanel_->setRunnable(!fileIsReport_);
    if (path.isEmpty())
        runPanel_->setInputs(shapesToText(demoModelInput()), tr("(demo input)"));
    else if (!fileIsReport_)
        runPanel_->setInputs(QString(), QString()); // the worker guesses them from the model
    if (!path.isEmpty())
        addRecentFile(path);
    clearError();
    startRun();
}

void MainWindow::startRun()
{
    RunRequest request;
    request.path = file_;
    request.isReport = fileIsReport_;
    if (!fileIsReport_) {
        try {
            request.options = runPanel_->options();
        } catch (const std::exception& e) {
            showError(tr("Input shapes: %1").arg(QString::fromStdString(e.what())));
            return;
        }
    }
    runPanel_->setRunning(true);
    runPanel_->setStatus(fileIsReport_ ? tr("Reading %1…").arg(displayName()) : tr("Running %1…").arg(displayName()));
    worker_->start(std::move(request));
}

void MainWindow::cancelRun()
{
    worker_->cancel();
}

bool MainWindow::isRunning() const
{
    return worker_->isRunning();
}

QString MainWindow::errorText() const
{
    return error_->isVisible() ? error_->text() : QString();
}

QString MainWindow::displayName() const
{
    return file_.isEmpty() ? QString::fromUtf8(kDemoModelName) : QFileInfo(file_).fileName();
}

void MainWindow::showReport(std::shared_ptr<const Report> report)
{
    report_ = std::move(report);
    timeline_->setReport(report_);
    tree_->setReport(report_);
    summary_->setReport(report_);
    if (report_ && report_->source == "model" && !fileIsReport_ && !report_->run.input_shapes.empty()) {
        auto shapes = shapesToText(report_->run.input_shapes);
        if (shapes != runPanel_->inputsText())
            runPanel_->setInputs(shapes, report_->run.input_guessed ? tr("(guess)") : QString());
    }
    peakLabel_->setText(report_ ? tr("peak %1 (weights %2, inputs %3, run %4)")
                                      .arg(QString::fromStdString(formatBytes(report_->peak_total_bytes)),
                                          QString::fromStdString(formatBytes(report_->weight_bytes)),
                                          QString::fromStdString(formatBytes(report_->input_bytes)),
                                          QString::fromStdString(formatBytes(report_->peak_bytes)))
                                : QString());
    updateActions();
    emit reportChanged(report_);
}

void MainWindow::showError(const QString& message)
{
    error_->setText(message);
    error_->setVisible(true);
    statusBar()->showMessage(message, 8000);
}

void MainWindow::clearError()
{
    error_->clear();
    error_->setVisible(false);
}

void MainWindow::updateActions()
{
    for (auto* a : needReport_)
        a->setEnabled(report_ != nullptr);
}

void MainWindow::setWhatIfPanel(QWidget* panel)
{
    whatIfDock_->setWidget(panel);
    whatIfDock_->setVisible(panel != nullptr);
}

QString MainWindow::saveAnalysis(const QString& path) const
{
    if (!report_)
        return tr("%1: nothing to save yet").arg(path);
    return writeWithQSaveFile(path, QByteArray::fromStdString(reportToJson(*report_).dump() + "\n"));
}

QString MainWindow::exportTimelinePng(const QString& path) const
{
    if (!report_)
        return tr("%1: nothing to export yet").arg(path);
    return renderTimelinePng(*report_, path, timeline_->size().expandedTo(QSize(800, 300)));
}

QString MainWindow::exportWindowPng(const QString& path)
{
    QSaveFile file(path);
    if (!file.open(QIODevice::WriteOnly) || !grab().save(&file, "PNG") || !file.commit())
        return QStringLiteral("%1: %2").arg(path, file.errorString());
    return {};
}

QString MainWindow::exportHtml(const QString& path) const
{
#ifdef MEMLEDGER_HAS_HTML
    if (!report_)
        return tr("%1: nothing to export yet").arg(path);
    return writeWithQSaveFile(path, QByteArray::fromStdString(reportToHtml(*report_)));
#else
    return tr("%1: this build has no HTML report writer").arg(path);
#endif
}

void MainWindow::addRecentFile(const QString& path)
{
    QSettings settings;
    auto files = settings.value(QStringLiteral("recentFiles")).toStringList();
    auto absolute = QFileInfo(path).absoluteFilePath();
    files.removeAll(absolute);
    files.prepend(absolute);
    while (files.size() > kMaxRecentFiles)
        files.removeLast();
    settings.setValue(QStringLiteral("recentFiles"), files);
    rebuildRecentMenu();
}

void MainWindow::rebuildRecentMenu()
{
    recentMenu_->clear();
    const auto files = QSettings().value(QStringLiteral("recentFiles")).toStringList();
    for (const auto& f : files)
        recentMenu_->addAction(f, this, [this, f] { openFile(f); });
    recentMenu_->setEnabled(!files.isEmpty());
}

void MainWindow::dragEnterEvent(QDragEnterEvent* event)
{
    const auto urls = event->mimeData()->urls();
    if (urls.size() == 1 && urls.front().isLocalFile())
        event->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* event)
{
    const auto urls = event->mimeData()->urls();
    if (urls.size() == 1 && urls.front().isLocalFile()) {
        event->acceptProposedAction();
        openFile(urls.front().toLocalFile());
    }
}

void MainWindow::closeEvent(QCloseEvent* event)
{
    worker_->cancel();
    QMainWindow::closeEvent(event);
}

} // namespace memledger
