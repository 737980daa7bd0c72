// The window: it lays out the docks and tabs, builds the menus and connects the parts that each own one job
// (FileSession, TimelineToolbar, WhatIfController, RemediesController, ComparisonController, RecentFiles). It is
// a little over 600 lines because it is the one place where every view is handed each report; no job lives here.
#include "main_window.h"
#include "gpu_fit_view.h"
#include <thread>
#include <QCoreApplication>
#include <QPointer>
#include "whatif/gpu_fit.h"
#include "whatif/serving.h"
#include "session/open_file.h"
#include "support/errors.h"

#include "bytes_text.h"
#include "call_tree_view.h"
#include "report/meta_run.h"
#include "checkpoint_bar.h"
#include "comparison_controller.h"
#include "demo_model.h"
#include "file_session.h"
#include "flame_graph.h"
#include "layer_tree_panel.h"
#include "ledger_summary.h"
#include "ranks_controller.h"
#include "ranks_view.h"
#include "recent_files.h"
#include "remedies_panel.h"
#include "remedies_controller.h"
#include "analysis/report_range.h"
#include "report_files.h"
#include "run_panel.h"
#include "run_worker.h"
#include "segment_map_view.h"
#include "segment_timeline.h"
#include "snapshot/snapshot.h"
#include "stack_pane.h"
#include "context_table.h"
#include "support/format.h"
#include "timeline_plot.h"
#include "timeline_toolbar.h"
#include "watch_controller.h"
#include "whatif_controller.h"
#include "whatif_panel.h"

#include <utility>
#include <QCloseEvent>
#include <QComboBox>
#include <QDir>
#include <QDockWidget>
#include <QDragEnterEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QGuiApplication>
#include <QLabel>
#include <QMenuBar>
#include <QMimeData>
#include <QScreen>
#include <QScrollArea>
#include <QSplitter>
#include <QStatusBar>
#include <QTabWidget>
#include <QTimer>
#include <QVBoxLayout>

#include <cstdio>
#include <functional>

namespace memledger {

namespace {

// The right dock area keeps this width whatever its labels say; long texts wrap inside it.
constexpr int kDockWidth = 330;
constexpr int kDockMinWidth = 260;
constexpr int kDockMaxWidth = 440;

void keepDockWidth(QWidget* panel)
{
    panel->setMinimumWidth(kDockMinWidth);
    panel->setMaximumWidth(kDockMaxWidth);
    panel->setSizePolicy(QSizePolicy::Preferred, panel->sizePolicy().verticalPolicy());
}

const char* kFileFilter = "Models, reports and CUDA snapshots (*.pt *.pt2 *.pth *.json *.pickle *.pkl);;All files (*)";

void printTiming(const QElapsedTimer& clock, const char* what)
{
    std::fprintf(stderr, "memledger timing: %s %.3f s after the file was chosen\n", what,
        static_cast<double>(clock.nsecsElapsed()) / 1e9);
}

} // namespace

MainWindow::MainWindow(QWidget* parent)
    : QMainWindow(parent)
    , timeline_(new TimelinePlot)
    , timelineBar_(new TimelineToolbar(timeline_))
    , tree_(new LayerTreePanel)
    , summary_(new LedgerSummary)
    , runPanel_(new RunPanel)
    , whatIfDock_(new QDockWidget(tr("What if"), this))
    , error_(new QLabel)
    , peakLabel_(new QLabel)
    , rangeLabel_(new QLabel)
    , session_(new FileSession(runPanel_, this))
    , whatIf_(new WhatIfController(this))
    , remedies_(new RemediesController(whatIf_, this, this))
    , comparison_(new ComparisonController(this))
    , ranks_(new RanksController(this))
    , watch_(new WatchController(this))
{
    setWindowTitle(QStringLiteral("memledger"));
    setAcceptDrops(true);
    // 1400x900, or the screen's free area where that is smaller (a 1280x720 laptop).
    QSize size(1400, 900);
    if (auto* screen = QGuiApplication::primaryScreen())
        size = size.boundedTo(screen->availableGeometry().size());
    resize(size);

    setCentralWidget(buildCentralWidget());
    buildDocks();
    statusBar()->addPermanentWidget(rangeLabel_);
    statusBar()->addPermanentWidget(peakLabel_);
    rangeLabel_->setVisible(false);
    buildMenus();
    connectViews();
    connectRuns();
    updateActions();
}

MainWindow::~MainWindow() = default;

QWidget* MainWindow::buildCentralWidget()
{
    error_->setVisible(false);
    error_->setWordWrap(true);
    error_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    error_->setStyleSheet(QStringLiteral("QLabel { background: #fbe3e4; color: #8a1f11; border: 1px solid #e8a0a4;"
                                         " padding: 6px; }"));
    auto* top = new QWidget;
    auto* topLayout = new QVBoxLayout(top);
    topLayout->setContentsMargins(0, 0, 0, 0);
    topLayout->addWidget(error_);
    topLayout->addWidget(watch_->notice());
    topLayout->addWidget(timelineBar_);
    topLayout->addWidget(timeline_, 1);
    timeline_->setMinimumHeight(200);

    auto* splitter = new QSplitter(Qt::Vertical);
    splitter->addWidget(top);
    // Segments: reserved vs allocated over time and, for a snapshot, the segment map at its end.
    segmentTimeline_ = new SegmentTimeline;
    segmentMap_ = new SegmentMapView;
    auto* segments = new QSplitter(Qt::Horizontal);
    segments->addWidget(segmentTimeline_);
    segments->addWidget(segmentMap_);
    segments->setStretchFactor(0, 3);
    segments->setStretchFactor(1, 2);
    segments->setSizes({600, 420});
    tabs_ = new QTabWidget;
    tabs_->setDocumentMode(true);
    tabs_->addTab(tree_, tr("Layers"));
    tabs_->addTab(segments, tr("Segments"));
    // A snapshot's call stacks: the call tree and the flame graph of the bytes alive at the chosen moment.
    callTree_ = new CallTreeView;
    flame_ = new FlameGraph;
    auto* flameScroll = new QScrollArea;
    flameScroll->setWidget(flame_);
    flameScroll->setWidgetResizable(true);
    flameScroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    tabs_->addTab(callTree_, tr("Call tree"));
    tabs_->addTab(flameScroll, tr("Flame graph"));
    // A snapshot's allocations per user_metadata and compile_context (only for files that have them).
    contextTable_ = new ContextTable;
    tabs_->addTab(contextTable_, tr("Metadata"));
    tabs_->addTab(remedies_->panel(), tr("What would help"));
    gpuFit_ = new GpuFitView;
    tabs_->addTab(gpuFit_, tr("GPUs"));
    // File > Open ranks…: one snapshot per rank, side by side (only once ranks are open).
    ranksView_ = new RanksView;
    tabs_->addTab(ranksView_, tr("Ranks"));
    tabs_->setTabVisible(tabs_->indexOf(ranksView_), false);
    // MEMLEDGER_SCREENSHOT_REMEDIES=1 shows this tab (main.cpp waits for the remedies with the what-if).
    if (qEnvironmentVariableIsSet("MEMLEDGER_SCREENSHOT_REMEDIES"))
        tabs_->setCurrentWidget(remedies_->panel());
    splitter->addWidget(tabs_);
    splitter->setStretchFactor(0, 3);
    splitter->setStretchFactor(1, 2);
    return splitter;
}

void MainWindow::buildDocks()
{
    auto* runDock = new QDockWidget(tr("Run"), this);
    runDock->setObjectName(QStringLiteral("runDock"));
    runDock->setWidget(runPanel_);
    addDockWidget(Qt::RightDockWidgetArea, runDock);
    auto* summaryDock = new QDockWidget(tr("At the peak"), this);
    summaryDock->setObjectName(QStringLiteral("summaryDock"));
    summaryDock->setWidget(summary_);
    addDockWidget(Qt::RightDockWidgetArea, summaryDock);
    // The What if panel in a scroll area, so that on a short screen it scrolls instead of pushing the window taller.
    auto* scroll = new QScrollArea;
    scroll->setWidget(whatIf_->panel());
    scroll->setWidgetResizable(true);
    scroll->setFrameShape(QFrame::NoFrame);
    scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    keepDockWidth(scroll);
    whatIf_->panel()->setMinimumWidth(0);
    whatIfDock_->setObjectName(QStringLiteral("whatIfDock"));
    whatIfDock_->setWidget(scroll);
    addDockWidget(Qt::RightDockWidgetArea, whatIfDock_);
    keepDockWidth(runPanel_);
    keepDockWidth(summary_);
    stackPane_ = new StackPane;
    stackDock_ = new QDockWidget(tr("Call stack"), this);
    stackDock_->setObjectName(QStringLiteral("stackDock"));
    stackDock_->setWidget(stackPane_);
    addDockWidget(Qt::RightDockWidgetArea, stackDock_);
    tabifyDockWidget(whatIfDock_, stackDock_); // a snapshot has no what-if: the stack gets the room
    stackDock_->setVisible(false); // snapshots with call stacks only
    keepDockWidth(stackPane_);
    resizeDocks({runDock, summaryDock, whatIfDock_}, {kDockWidth, kDockWidth, kDockWidth}, Qt::Horizontal);
}

void MainWindow::buildMenus()
{
    auto* file = menuBar()->addMenu(tr("&File"));
    file->addAction(tr("&Open…"), QKeySequence::Open, this, [this] {
        auto path = QFileDialog::getOpenFileName(
            this, tr("Open a model, a report or a CUDA memory snapshot"), QString(), tr(kFileFilter));
        if (!path.isEmpty())
            openFile(path);
    });
    auto* demos = file->addMenu(tr("Open &demo"));
    for (const auto& d : demoModels()) {
        auto name = QString::fromUtf8(d.name);
        auto* action = demos->addAction(QString::fromUtf8(d.title), this, [this, name] { openFile(name); });
        action->setToolTip(name);
    }
    file->addAction(tr("Open ran&ks…"), this, [this] {
        auto paths = QFileDialog::getOpenFileNames(this,
            tr("Open ranks: one CUDA memory snapshot (or report) per rank"), QString(), tr(kFileFilter));
        if (!paths.isEmpty())
            openRanks(paths);
    });
    file->addAction(tr("Open ranks from a &folder…"), this, [this] {
        auto dir = QFileDialog::getExistingDirectory(
            this, tr("Open ranks: a folder of snapshots (.pickle, .pkl) or reports (.json), one per rank"));
        if (!dir.isEmpty())
            openRanks({dir});
    });
    recent_ = new RecentFiles(file->addMenu(tr("Open &recent")), this);
    connect(recent_, &RecentFiles::openRequested, this, &MainWindow::openFile);
    file->addAction(tr("&Watch…"), this, [this] {
        auto path = QFileDialog::getOpenFileName(this,
            tr("Watch a CUDA memory snapshot or a report that a running job rewrites"), QString(),
            tr("CUDA snapshots and reports (*.pickle *.pkl *.json);;All files (*)"));
        if (!path.isEmpty())
            watchFile(path);
    });
    auto* stopWatching = file->addAction(tr("S&top watching"), watch_, &WatchController::stop);
    stopWatching->setVisible(false);
    connect(watch_, &WatchController::watchingChanged, stopWatching, &QAction::setVisible);
    file->addSeparator();
    // Each export asks where, writes, and says where it wrote or why it could not.
    auto exportAction = [this, file](const QString& text, const QString& suffix, const QString& filter,
                            std::function<QString(const QString&)> write) {
        return file->addAction(text, this, [=] {
            auto path = QFileDialog::getSaveFileName(this, QString(text).remove('&').remove(QStringLiteral("…")),
                saveBaseName(session_->path(), session_->displayName()) + suffix, filter);
            if (path.isEmpty())
                return;
            auto error = write(path);
            if (error.isEmpty())
                showStatus(tr("Saved %1").arg(QDir::toNativeSeparators(path)), 6000);
            else
                showError(error);
        });
    };
    auto* save = exportAction(tr("&Save analysis…"), QStringLiteral(".memledger.json"), tr("memledger report (*.json)"),
        [this](const QString& p) { return saveAnalysis(p); });
    save->setShortcut(QKeySequence::Save);
    needReport_ << save;
    needReport_ << exportAction(tr("Export timeline as &PNG…"), QStringLiteral("-timeline.png"), tr("PNG image (*.png)"),
        [this](const QString& p) { return exportTimelinePng(p); });
    needReport_ << exportAction(tr("Export &window as PNG…"), QStringLiteral("-window.png"), tr("PNG image (*.png)"),
        [this](const QString& p) { return exportWindowPng(p); });
    auto* html = exportAction(tr("Export &HTML…"), QStringLiteral(".html"), tr("HTML page (*.html)"),
        [this](const QString& p) { return exportHtml(p); });
    if (canWriteHtml()) {
        needReport_ << html;
    } else {
        html->setEnabled(false);
        html->setToolTip(tr("This build has no HTML report writer"));
    }
    file->addSeparator();
    needReport_ << file->addAction(tr("&Compare with…"), this, [this] {
        auto path = QFileDialog::getOpenFileName(this,
            tr("Compare with (B): a model, a report or a CUDA memory snapshot; the file shown is A"), QString(),
            tr(kFileFilter));
        if (!path.isEmpty())
            compareWith(path);
    });
    backToRun_ = file->addAction(tr("&Back to the run"), this, &MainWindow::backToRun);
    backToRun_->setToolTip(tr("Show the recorded run again, in place of the rank the What if panel laid out"));
    backToRun_->setVisible(false);
    file->addSeparator();
    file->addAction(tr("&Quit"), QKeySequence::Quit, this, &QWidget::close);
}

void MainWindow::connectViews()
{
    connect(tree_, &LayerTreePanel::moduleSelected, timeline_, &TimelinePlot::highlightModule);
    // The checkpointing what-if: ticks in the tree draw the predicted step over the recorded one at once.
    connect(tree_->checkpointBar(), &CheckpointBar::predicted, timeline_,
        [this](std::shared_ptr<const Report> predicted, const QString& name) {
            timeline_->setPredictedReport(std::move(predicted), name);
        });
    connect(timeline_, &TimelinePlot::moduleClicked, tree_, &LayerTreePanel::selectModule);
    connect(timeline_, &TimelinePlot::momentClicked, segmentMap_, &SegmentMapView::setMoment);
    connect(segmentMap_, &SegmentMapView::momentChanged, timeline_, &TimelinePlot::setMomentMarker);
    connect(timeline_, &TimelinePlot::momentClicked, flame_,
        [this](std::size_t events) { flame_->setMoment(static_cast<std::int64_t>(events)); });
    connect(timeline_, &TimelinePlot::allocationClicked, stackPane_, &StackPane::showAllocation);
    connect(timeline_, &TimelinePlot::rangeChanged, this, &MainWindow::showRange);
    connect(timelineBar_, &TimelineToolbar::deviceChosen, this, &MainWindow::setDevice);
    connect(callTree_, &CallTreeView::nodeSelected, stackPane_, &StackPane::showFrames);
    connect(flame_, &FlameGraph::nodeClicked, stackPane_, &StackPane::showFrames);
    connect(callTree_, &CallTreeView::framesChanged, flame_, &FlameGraph::setFrames);

    connect(whatIf_, &WhatIfController::ready, this, &MainWindow::whatIfReady);
    connect(whatIf_, &WhatIfController::tableReady, this, &MainWindow::whatIfTableReady);
    connect(whatIf_, &WhatIfController::seqReady, this, &MainWindow::seqWhatIfReady);
    connect(whatIf_, &WhatIfController::statusMessage, this, &MainWindow::showStatus);
    connect(whatIf_, &WhatIfController::rankReady, this, &MainWindow::showRank);
    connect(whatIf_, &WhatIfController::ready, this, &MainWindow::updateGpuFit);
    connect(whatIf_, &WhatIfController::budgetChanged, this, &MainWindow::updateGpuFit);
    connect(whatIf_->panel(), &WhatIfPanel::checkpointChanged, this, &MainWindow::updateGpuFit);
    connect(gpuFit_, &GpuFitView::recordFurtherRequested, this, [this](qint64 x) {
        gpuFit_->clear(tr("Recording the step up to micro-batch %1…").arg(x));
        whatIf_->recordUpTo(x);
    });
    connect(remedies_, &RemediesController::ready, this, &MainWindow::remediesReady);
    connect(remedies_, &RemediesController::statusMessage, this, &MainWindow::showStatus);
    connect(comparison_, &ComparisonController::statusMessage, this, &MainWindow::showStatus);
    connect(comparison_, &ComparisonController::shown, this, &MainWindow::comparisonShown);
    connect(comparison_, &ComparisonController::failed, this, [this](const QString& message) {
        showError(message);
        emit comparisonFailed(message);
    });
    connect(ranks_, &RanksController::statusMessage, this, &MainWindow::showStatus);
    connect(ranks_, &RanksController::ready, this, [this](std::shared_ptr<const RankTable> table) {
        clearError();
        ranksView_->setTable(std::move(table));
        ranksView_->setCurrentFile(session_->path());
        tabs_->setTabVisible(tabs_->indexOf(ranksView_), true);
        tabs_->setCurrentWidget(ranksView_);
        emit ranksShown();
    });
    connect(ranks_, &RanksController::failed, this, [this](const QString& message) {
        showError(message);
        emit ranksFailed(message);
    });
    connect(ranksView_, &RanksView::rankChosen, this, &MainWindow::openFile);
    connect(ranksView_, &RanksView::closeRequested, this, [this] {
        tabs_->setTabVisible(tabs_->indexOf(ranksView_), false);
        ranksView_->setTable(nullptr);
    });
    // Another file or run shown is another A: the comparison no longer describes it.
    connect(this, &MainWindow::reportChanged, comparison_, &ComparisonController::close);
    connect(this, &MainWindow::reportChanged, this,
        [this](std::shared_ptr<const Report> report) { remedies_->reportShown(std::move(report), session_->file()); });
}

void MainWindow::connectRuns()
{
    connect(session_, &FileSession::opened, this, &MainWindow::fileOpened);
    connect(session_, &FileSession::started, remedies_, &RemediesController::runStarted);
    connect(session_, &FileSession::stopped, remedies_, &RemediesController::runAbandoned);
    connect(watch_, &WatchController::fileRead, session_, &FileSession::showRead);
    connect(watch_, &WatchController::statusMessage, this, &MainWindow::showStatus);
    connect(session_, &FileSession::inputError, this, &MainWindow::showError);
    connect(session_, &FileSession::finished, this, [this](std::shared_ptr<const Report> report) {
        clearError();
        if (report->source == ReportSource::Model && session_->isModel() && report->run.mode != RunMode::Generate)
            whatIf_->record(session_->file(), *report);
        else if (report->run.mode == RunMode::Generate) {
            whatIf_->clear(); // the what-if of a generation is not built yet: no other run's rows beside it
            whatIf_->panel()->setBudgetOnly(); // its budget: the GPUs tab's serving answer
            showStatus(tr("The What if panel does not vary a generation yet: run again with another batch, prompt or "
                          "number of new tokens. Its memory budget sets the GPUs tab's serving answer."),
                12000);
        }
        const bool timing = openClock_.isValid() && qEnvironmentVariableIsSet("MEMLEDGER_TIMING");
        if (timing)
            printTiming(openClock_, "file read and its report made");
        const bool generated = report->run.mode == RunMode::Generate;
        showReport(std::move(report));
        if (generated)
            updateGpuFit(); // serving's answer for this run
        if (timing) {
            printTiming(openClock_, "views given the report");
            timeline_->repaint(); // drawn now, not at the next paint event
            printTiming(openClock_, "timeline drawn");
            openClock_.invalidate();
        }
    });
    connect(session_, &FileSession::failed, this, [this](const QString& message) {
        showError(message);
        emit runFailed(message);
    });
}

void MainWindow::setCommandLineRun(const RunOptions& options)
{
    session_->setCommandLine(options);
}

void MainWindow::openFile(const QString& path)
{
    watch_->stop();
    clearError();
    openClock_.start();
    session_->open(path);
}

void MainWindow::watchFile(const QString& path)
{
    clearError();
    watch_->watch(path);
}

void MainWindow::showRank(std::shared_ptr<const Report> rank)
{
    if (!runReport_)
        runReport_ = report_;
    showReport(std::move(rank));
    backToRun_->setVisible(true);
}

void MainWindow::updateServing()
{
    whatIf_->panel()->setGpuFitTable(nullptr);
    ServeRequest request;
    request.budget = whatIf_->budget();
    if (request.budget <= 0) {
        gpuFit_->clear(tr("Type a memory budget (a GPU) in the What if panel: the GPUs tab then says how many sequences "
                          "of this run's length fit on it when serving."));
        return;
    }
    request.budget_text = whatIf_->panel()->budgetBox()->currentText().trimmed().toStdString();
    // the run's own question: sequences of its prompt and new tokens, and the longest context at its batch, in its
    // precision; the rest as fit --serve's defaults (vLLM's)
    request.context = report_->run.seq + report_->run.new_tokens;
    request.batch = report_->run.batch;
    request.dtype = report_->run.dtype;
    // the file opened again, in the thread: the meta run must not convert the weights the window's runs use
    const auto path = session_->file()->path;
    const auto name = QString::fromStdString(session_->file()->name);
    const auto generation = ++gpuFitGeneration_;
    gpuFit_->clear(tr("Recording one prefill on the meta device (a serving engine's profile run)…"));
    QPointer<MainWindow> self(this);
    std::thread([self, path, request, name, generation] {
        auto plans = std::make_shared<std::vector<ServePlan>>();
        QString error;
        try {
            auto file = openFileOrDemo(path);
            if (!file.model)
                throw RunError(path + " is not a model file");
            *plans = serveModelOnGpus(*file.model, request, {1, 2, 4, 8}); // tensor-parallel, as vLLM splits
        } catch (const std::exception& e) {
            error = QString::fromUtf8(e.what());
        }
        QMetaObject::invokeMethod(QCoreApplication::instance(), [self, plans, error, name, generation] {
            if (!self || generation != self->gpuFitGeneration_)
                return;
            if (error.isEmpty())
                self->gpuFit_->setServePlan(*plans, name);
            else
                self->gpuFit_->clear(tr("No serving answer: %1").arg(error));
            emit self->gpuFitReady();
        });
    }).detach();
}

void MainWindow::updateGpuFit()
{
    if (report_ && report_->run.mode == RunMode::Generate && report_->source == ReportSource::Model
        && session_->isModel() && session_->file()->model && !session_->file()->path.empty()
        && !session_->file()->model->info().generation.cache.empty()) {
        updateServing();
        return;
    }
    const auto& w = whatIf_->whatIf();
    whatIf_->panel()->setGpuFitTable(nullptr);
    if (!w || w->mode() != RunMode::Train) {
        gpuFit_->clear(tr("The fit table answers for a training step: run the model with Mode \"training step\"."));
        return;
    }
    GpuFitRequest request;
    request.budget = whatIf_->budget();
    if (request.budget <= 0) {
        gpuFit_->clear(tr("Type a memory budget (a GPU) in the What if panel."));
        return;
    }
    // Every strategy the CLI's fit answers for, DeepSpeed's stages among them (their rows follow PyTorch's).
    request.shards.insert(request.shards.end(), {Sharding::DsZero1, Sharding::DsZero2, Sharding::DsZero3});
    request.precisions.push_back("float16"); // every precision the What if panel offers: it shows the rows of its own
    // with the checkpointing its Checkpointing row has (a model without repeated blocks: the rows say why)
    request.checkpoints = {parseCheckpointSpec(whatIf_->panel()->checkpoint().toStdString())};
    // and its Micro-batches and CPU offload rows
    request.base.grad_accum = whatIf_->panel()->gradAccum();
    // Ticked: each strategy with the offload it has (FSDP2's CPUOffloadPolicy, DeepSpeed's offload_param or
    // offload_optimizer), a row each; the panel shows those of its own strategy.
    if (whatIf_->panel()->offloadAsked())
        request.offloads = {"params", "optimizer"};
    request.with_reserved = w->eventCount(w->dtypes().front()) <= 200000;
    // Off the GUI thread (a 7B step takes a second or more); the latest request wins.
    const auto generation = ++gpuFitGeneration_;
    gpuFit_->clear(tr("Finding the fewest GPUs…"));
    QPointer<MainWindow> self(this);
    std::thread([self, w, request, generation] {
        auto table = std::make_shared<GpuFitTable>();
        QString error;
        try {
            *table = makeGpuFitTable(*w, request);
        } catch (const std::exception& e) {
            error = QString::fromUtf8(e.what());
        }
        QMetaObject::invokeMethod(QCoreApplication::instance(), [self, table, error, generation] {
            if (!self || generation != self->gpuFitGeneration_)
                return;
            if (error.isEmpty()) {
                // An answer beyond the records is offered a record up to it, once: records asked for already went
                // as far as this machine's memory and time for one record let them.
                auto wanted = fitRecordsWanted(*table);
                if (wanted <= self->whatIf_->askedUpTo())
                    wanted = 0;
                self->gpuFit_->setTable(*table, wanted);
                self->whatIf_->panel()->setGpuFitTable(table);
            } else
                self->gpuFit_->clear(tr("No fit table: %1").arg(error));
            emit self->gpuFitReady();
        });
    }).detach();
}

void MainWindow::backToRun()
{
    if (runReport_)
        showReport(std::exchange(runReport_, nullptr));
    backToRun_->setVisible(false);
}

void MainWindow::fileOpened()
{
    runReport_.reset();
    backToRun_->setVisible(false);
    whatIf_->clear();
    showReport(nullptr); // the previous file's report is not this one's
    setWindowTitle(QStringLiteral("%1 — memledger").arg(session_->displayName()));
    timelineBar_->setWeightsOffered(session_->file()->kind != FileKind::Snapshot);
    if (!session_->path().isEmpty())
        recent_->add(session_->path());
    ranksView_->setCurrentFile(session_->path());
}

void MainWindow::startRun()
{
    clearError();
    session_->run();
}

void MainWindow::cancelRun()
{
    session_->cancel();
}

bool MainWindow::isRunning() const
{
    return session_->isRunning();
}

QString MainWindow::errorText() const
{
    return error_->isVisible() ? error_->text() : QString();
}

QString MainWindow::currentFile() const
{
    return session_->path();
}

bool MainWindow::fileIsSnapshot() const
{
    return session_->file() && session_->file()->kind == FileKind::Snapshot;
}

void MainWindow::showReport(std::shared_ptr<const Report> report)
{
    if (!report || report != hostReport_) { // another file: its own host, if any, when picked
        fileReport_ = report;
        hostReport_.reset();
    }
    report_ = std::move(report);
    rangeReport_.reset();
    timeline_->setReport(report_);
    tree_->setReport(report_);
    summary_->setReport(report_);
    auto bytes = [](std::int64_t b) { return bytesText(b); };
    QString peak;
    if (report_ && report_->optimizer_state_bytes > 0)
        peak = tr("peak %1 (weights %2, optimizer state %3, inputs %4, run %5)")
                   .arg(bytes(report_->peak_total_bytes), bytes(report_->weight_bytes),
                       bytes(report_->optimizer_state_bytes), bytes(report_->input_bytes), bytes(report_->peak_bytes));
    else if (report_)
        peak = tr("peak %1 (weights %2, inputs %3, run %4)")
                   .arg(bytes(report_->peak_total_bytes), bytes(report_->weight_bytes), bytes(report_->input_bytes),
                       bytes(report_->peak_bytes));
    if (report_ && report_->run.parallel) // one rank of a job, laid over the recorded step
        peak = tr("rank %1 of %2 GPUs, %3 (predicted) \u00b7 ")
                   .arg(report_->run.parallel->rank)
                   .arg(report_->run.parallel->gpus)
                   .arg(QString::fromStdString(report_->run.parallel->shard))
            + peak;
    if (report_ && isMetaRun(*report_)) // computed from shapes: the status bar never shows it as measured
        peak = QString::fromUtf8(kMetaRunBadge) + QStringLiteral(" \u00b7 ") + peak;
    peakLabel_->setText(peak);
    if (report_ && report_->snapshot) {
        // A snapshot's segment views replay its whole trace: they follow once the timeline is drawn.
        updateActions();
        QTimer::singleShot(0, this, [this, shown = report_] {
            if (report_ != shown)
                return; // another report came meanwhile
            showSegments();
            showCallStacks();
            emit reportChanged(report_);
        });
        return;
    }
    showSegments();
    showCallStacks();
    updateActions();
    if (report_) // clearing the views when another file opens is not a report arriving
        emit reportChanged(report_);
}

void MainWindow::showSegments()
{
    segmentTimeline_->setReport(report_);
    segmentMap_->setReport(report_);
    const bool snapshot = report_ && report_->snapshot;
    // Model runs: what a GPU's caching allocator would reserve, from the replay the segment timeline made.
    const auto& history = segmentTimeline_->history();
    if (report_ && !snapshot && history.simulated)
        timeline_->setReservedLine(history.reserved, tr("reserved (simulated GPU)"));
    // The file's devices, its pinned host memory last ("all devices" is the GPUs': host memory is not GPU memory).
    std::vector<int> devices;
    if (fileReport_ && fileReport_->snapshot) {
        devices = fileReport_->snapshot->devices;
        if (fileReport_->snapshot->host)
            devices.push_back(kHostDevice);
    }
    timelineBar_->setDevices(snapshot ? devices : std::vector<int> {}, TimelineSeries::kAllDevices);
    if (report_ && report_ == hostReport_)
        setDevice(kHostDevice);
    if (snapshot) {
        const auto& s = *report_->snapshot;
        const auto kind = QString::fromStdString(report_->model.type);
        runPanel_->setStatus(kind);
        peakLabel_->setText(tr("%1: peak %2 live, %3 reserved and %4 allocated at the end")
                                .arg(kind, bytesText(report_->peak_bytes),
                                    bytesText(s.reservedBytes()),
                                    bytesText(s.allocatedBytes())));
        if (tabs_->currentWidget() != ranksView_) // a rank opened from the Ranks tab keeps it in sight
            tabs_->setCurrentIndex(s.onCpu() ? 0 : 1); // a CPU capture has no caching allocator's segments to show
    }
    // A snapshot has no model to record: the What if dock stays away.
    whatIfDock_->setVisible(!snapshot);
}

void MainWindow::showCallStacks()
{
    callTree_->setReport(report_);
    flame_->setReport(report_);
    stackPane_->setReport(report_);
    contextTable_->setReport(report_);
    const bool stacks = callTree_->hasStacks(); // model runs have module paths instead
    for (int i = 0; i < tabs_->count(); ++i)
        if (tabs_->widget(i) == callTree_ || tabs_->widget(i) == flame_->parentWidget()->parentWidget())
            tabs_->setTabVisible(i, stacks);
        else if (tabs_->widget(i) == contextTable_)
            tabs_->setTabVisible(i, contextTable_->hasValues());
    stackDock_->setVisible(stacks);
    if (stacks)
        stackDock_->raise();
}

void MainWindow::showRange(std::uint32_t first, std::uint32_t end)
{
    timelineBar_->setRangeSelected(end > first);
    if (!report_ || end <= first) {
        rangeReport_.reset();
        tree_->setReport(report_);
        summary_->setReport(report_);
        callTree_->setRange(0, CallTreeOptions::kEnd);
        contextTable_->setReport(report_);
        rangeLabel_->clear();
        rangeLabel_->setVisible(false);
        return;
    }
    rangeReport_ = std::make_shared<const Report>(reportForRange(*report_, first, end));
    tree_->setReport(rangeReport_);
    summary_->setReport(rangeReport_);
    callTree_->setRange(first, end);
    contextTable_->setReport(rangeReport_); // the figures of the range's allocations
    const auto& r = *rangeReport_;
    std::int64_t allocated = 0;
    if (r.snapshot)
        allocated = r.layers.empty() ? 0 : r.layers[0].activation_bytes;
    else
        for (auto l : {Ledger::Activations, Ledger::SavedActivations, Ledger::Temporaries, Ledger::Gradients})
            allocated += r.ledgers[static_cast<std::size_t>(l)].total;
    rangeLabel_->setText(tr("Range %1: %2 allocated, peak %3")
                             .arg(timeline_->rangeText(), bytesText(allocated),
                                 bytesText(r.peak_total_bytes)));
    rangeLabel_->setVisible(true);
}

QString MainWindow::rangeStatusText() const
{
    return rangeLabel_->isHidden() ? QString() : rangeLabel_->text();
}

QComboBox* MainWindow::deviceSelector() const
{
    return timelineBar_->deviceSelector();
}

void MainWindow::setDevice(int device)
{
    // The host's pinned memory is a report of its own (hostReport): picking it shows that report, picking a
    // GPU or all devices the file's again.
    if (device == kHostDevice && fileReport_ && fileReport_->snapshot && fileReport_->snapshot->host
        && report_ != hostReport_) {
        if (!hostReport_)
            hostReport_ = std::make_shared<const Report>(hostReport(*fileReport_));
        showReport(hostReport_);
    } else if (device != kHostDevice && hostReport_ && report_ == hostReport_) {
        showReport(fileReport_);
    }
    callTree_->setDevice(device);
    flame_->setDevice(device);
    summary_->setDevice(device);
    timeline_->setDevice(device);
    segmentTimeline_->setDevice(device);
    segmentMap_->setDevice(device);
    timelineBar_->selectDevice(device);
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

void MainWindow::showStatus(const QString& text, int milliseconds)
{
    statusBar()->showMessage(text, milliseconds);
}

void MainWindow::updateActions()
{
    for (auto* a : needReport_)
        a->setEnabled(report_ != nullptr);
}

WhatIfPanel* MainWindow::whatIfPanel() const
{
    return whatIf_->panel();
}

RemediesPanel* MainWindow::remediesPanel() const
{
    return remedies_->panel();
}

Report MainWindow::reportForExport() const
{
    Report r = *report_;
    if (r.source == ReportSource::Model)
        r.whatif = whatIf_->tableForExport();
    remedies_->addShownTo(r);
    return r;
}

QString MainWindow::saveAnalysis(const QString& path) const
{
    if (!report_)
        return tr("%1: nothing to save yet").arg(path);
    return saveReportJson(reportForExport(), path);
}

QString MainWindow::exportTimelinePng(const QString& path) const
{
    if (!report_)
        return tr("%1: nothing to export yet").arg(path);
    return saveTimelinePng(*report_, *timeline_, path);
}

QString MainWindow::exportWindowPng(const QString& path)
{
    return saveWidgetPng(this, path);
}

QString MainWindow::exportHtml(const QString& path) const
{
    if (!report_)
        return tr("%1: nothing to export yet").arg(path);
    return saveReportHtml(reportForExport(), path);
}

void MainWindow::compareWith(const QString& path)
{
    if (!report_) {
        showError(tr("Compare with %1: open or run a file first, it will be A").arg(path));
        return;
    }
    RunRequest request;
    request.path = path;
    const auto& opened = session_->file();
    const bool sameFile = !session_->path().isEmpty() && QFileInfo(path) == QFileInfo(session_->path());
    if (sameFile && opened && opened->model)
        request.file = opened; // the model opened once, run again at the panel's settings
    try {
        request.options = runPanel_->options();
    } catch (const std::exception& e) {
        showError(tr("Input shapes: %1").arg(QString::fromStdString(e.what())));
        return;
    }
    // Another model takes the panel's shapes only when they were given, not guessed for A.
    if (!sameFile && (report_->run.input_guessed || !session_->isModel())) {
        request.options.inputs.clear();
        request.options.input_types.clear();
    }
    clearError();
    comparison_->compare(report_, session_->displayName(), std::move(request));
}

void MainWindow::closeComparison()
{
    comparison_->close();
}

void MainWindow::openRanks(const QStringList& paths)
{
    clearError();
    ranks_->open(paths);
}

bool MainWindow::isComparing() const
{
    return comparison_->isShown();
}

DiffView* MainWindow::diffView() const
{
    return comparison_->view();
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
    session_->cancel();
    QMainWindow::closeEvent(event);
}

} // namespace memledger
