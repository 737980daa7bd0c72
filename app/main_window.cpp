#include "main_window.h"
#include "remedies_panel.h"

#include "demo_model.h"
#include "diff_view.h"
#include "report/report_diff.h"
#include "exports/report_json.h"
#include "layer_tree_panel.h"
#include "checkpoint_bar.h"
#include "ledger_summary.h"
#include "report/report_range.h"
#include "run_panel.h"
#include "run_worker.h"
#include "segment_map_view.h"
#include "call_tree_view.h"
#include "flame_graph.h"
#include "stack_pane.h"
#include "segment_timeline.h"
#include "snapshot/snapshot.h"
#include "support/format.h"
#include "timeline_plot.h"
#include "timeline_png.h"
#include "whatif_panel.h"
#include "whatif_worker.h"
#include "remedies_worker.h"

#if __has_include("exports/report_html.h")
#include "exports/report_html.h"
#define MEMLEDGER_HAS_HTML 1
#endif

#include <nlohmann/json.hpp>

#include <QActionGroup>
#include <QCloseEvent>
#include <QComboBox>
#include <QDockWidget>
#include <QDragEnterEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QGuiApplication>
#include <QLabel>
#include <QMenuBar>
#include <QMimeData>
#include <QRegularExpression>
#include <QSaveFile>
#include <QScreen>
#include <QScrollArea>
#include <QSettings>
#include <QSplitter>
#include <QStackedWidget>
#include <QStatusBar>
#include <QTabWidget>
#include <QTimer>
#include <QToolBar>
#include <QVBoxLayout>

#include <algorithm>
#include <cstdio>
#include <stdexcept>

namespace memledger {

namespace {

constexpr int kMaxRecentFiles = 8;
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
    // 1400x900, or the screen's free area where that is smaller (a 1280x720 laptop).
    QSize size(1400, 900);
    if (auto* screen = QGuiApplication::primaryScreen())
        size = size.boundedTo(screen->availableGeometry().size());
    resize(size);

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
    deviceBox_ = new QComboBox;
    deviceBox_->setToolTip(tr("The snapshot's device to show"));
    deviceAction_ = timelineBar->addWidget(deviceBox_);
    deviceAction_->setVisible(false);
    connect(deviceBox_, QOverload<int>::of(&QComboBox::activated), this,
        [this](int i) { setDevice(deviceBox_->itemData(i).toInt()); });
    timelineBar->addSeparator();
    auto* hideWeights = hideWeightsAction_ = timelineBar->addAction(tr("Hide weights"));
    hideWeights->setCheckable(true);
    hideWeights->setToolTip(tr("Start the y axis at the top of the weights, so that activations and temporaries "
                               "get the plot's height"));
    connect(hideWeights, &QAction::toggled, timeline_, &TimelinePlot::setWeightsHidden);
    setUpRange(timelineBar);
    timelineBar->addSeparator();
    // On a narrow window the toolbar moves the hint into its extension menu; the tooltip says it in full.
    auto* hint = new QLabel(tr("wheel: zoom · drag: pan · shift+drag: zoom to box · ctrl+drag: select range · "
                               "double-click: reset · click: select module and moment"));
    hint->setEnabled(false);
    hint->setToolTip(hint->text());
    timelineBar->addWidget(hint);

    auto* top = new QWidget;
    auto* topLayout = new QVBoxLayout(top);
    topLayout->setContentsMargins(0, 0, 0, 0);
    topLayout->addWidget(error_);
    topLayout->addWidget(timelineBar);
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
    splitter->addWidget(tabs_);
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

    statusBar()->addPermanentWidget(peakLabel_);

    buildMenus();
    setUpWhatIf();
    setUpComparison();
    setUpRemedies();
    resizeDocks({runDock, summaryDock, whatIfDock_}, {kDockWidth, kDockWidth, kDockWidth}, Qt::Horizontal);

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
    connect(callTree_, &CallTreeView::nodeSelected, stackPane_, &StackPane::showFrames);
    connect(flame_, &FlameGraph::nodeClicked, stackPane_, &StackPane::showFrames);
    connect(callTree_, &CallTreeView::framesChanged, flame_, &FlameGraph::setFrames);
    connect(runPanel_, &RunPanel::runRequested, this, &MainWindow::startRun);
    connect(runPanel_, &RunPanel::cancelRequested, this, &MainWindow::cancelRun);
    connect(worker_, &RunWorker::progress, this,
        [this](quint64, int done, int total) { runPanel_->setProgress(done, total); });
    connect(worker_, &RunWorker::reading, this,
        [this](quint64, qint64 done, qint64 total) { runPanel_->setReadProgress(done, total); });
    connect(worker_, &RunWorker::opened, this, [this](quint64, std::shared_ptr<const OpenedFile> file) {
        auto path = QString::fromStdString(file->path);
        fileOpened(std::move(file), path);
    });
    connect(worker_, &RunWorker::inputsGuessed, this, [this](quint64, const QString& shapes, const QString& how) {
        runPanel_->setInputs(shapes, tr("(guess)"), how);
    });
    connect(worker_, &RunWorker::finished, this, [this](quint64, std::shared_ptr<const Report> report) {
        runPanel_->setFinished(RunPanel::Outcome::Done);
        runPanel_->setStatus(report->source == "model"
                ? (report->run.mode == "train" ? tr("Ran a training step in %1 ms, %2 events")
                                               : tr("Ran in %1 ms, %2 events"))
                      .arg(report->run.duration_ms, 0, 'f', 0)
                      .arg(report->trace ? report->trace->size() : 0)
                : QString());
        clearError();
        if (report->source == "model" && !fileIsReport_)
            recordWhatIf(*report);
        if (openClock_.isValid() && qEnvironmentVariableIsSet("MEMLEDGER_TIMING"))
            std::fprintf(stderr, "memledger timing: file read and its report made %.3f s after the file was chosen\n",
                static_cast<double>(openClock_.nsecsElapsed()) / 1e9);
        showReport(std::move(report));
        if (openClock_.isValid() && qEnvironmentVariableIsSet("MEMLEDGER_TIMING")) {
            std::fprintf(stderr, "memledger timing: views given the report %.3f s after the file was chosen\n",
                static_cast<double>(openClock_.nsecsElapsed()) / 1e9);
            timeline_->repaint(); // drawn now, not at the next paint event
            std::fprintf(stderr, "memledger timing: timeline drawn %.3f s after the file was chosen\n",
                static_cast<double>(openClock_.nsecsElapsed()) / 1e9);
            openClock_.invalidate();
        }
    });
    connect(worker_, &RunWorker::failed, this, [this](quint64, const QString& message) {
        runPanel_->setFinished(RunPanel::Outcome::Failed);
        runPanel_->setStatus(tr("Failed"));
        showError(message);
        emit runFailed(message);
    });
    connect(worker_, &RunWorker::cancelled, this, [this](quint64) {
        runPanel_->setFinished(RunPanel::Outcome::Cancelled);
        runPanel_->setStatus(tr("Cancelled"));
    });
    updateActions();
}

MainWindow::~MainWindow() = default;

void MainWindow::buildMenus()
{
    auto* file = menuBar()->addMenu(tr("&File"));
    file->addAction(tr("&Open…"), QKeySequence::Open, this, [this] {
        auto path = QFileDialog::getOpenFileName(this, tr("Open a model, a report or a CUDA memory snapshot"),
            QString(), tr("Models, reports and CUDA snapshots (*.pt *.pth *.json *.pickle *.pkl);;All files (*)"));
        if (!path.isEmpty())
            openFile(path);
    });
    auto* demos = file->addMenu(tr("Open &demo"));
    for (const auto& d : demoModels()) {
        auto name = QString::fromUtf8(d.name);
        auto* action = demos->addAction(QString::fromUtf8(d.title), this, [this, name] { openFile(name); });
        action->setToolTip(name);
    }
    recentMenu_ = file->addMenu(tr("Open &recent"));
    rebuildRecentMenu();
    file->addSeparator();
    auto ask = [this](const QString& title, const QString& suffix, const QString& filter) {
        return QFileDialog::getSaveFileName(this, title, saveBaseName() + suffix, filter);
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
    needReport_ << file->addAction(tr("&Compare with…"), this, [this] {
        auto path = QFileDialog::getOpenFileName(this,
            tr("Compare with (B): a model, a report or a CUDA memory snapshot; the file shown is A"), QString(),
            tr("Models, reports and CUDA snapshots (*.pt *.pth *.json *.pickle *.pkl);;All files (*)"));
        if (!path.isEmpty())
            compareWith(path);
    });
    file->addSeparator();
    file->addAction(tr("&Quit"), QKeySequence::Quit, this, &QWidget::close);
}

void MainWindow::openFile(const QString& path)
{
    // Nothing changes until the file has opened (RunWorker::opened): a file that cannot be opened leaves the
    // window as it was, with a message naming the file.
    RunRequest request;
    request.path = path;
    request.options.dtype = runPanel_->dtype();
    // The mode stays "": the file says what it is for (a training demo records a training step).
    request.options.optimizer = runPanel_->optimizer();
    request.options.loss = runPanel_->loss();
    clearError();
    openClock_.start();
    runPanel_->setRunning(true);
    runPanel_->setStatus(
        tr("Opening %1…").arg(path.isEmpty() ? QString::fromUtf8(kDemoModelName) : QFileInfo(path).fileName()));
    worker_->start(std::move(request));
}

void MainWindow::fileOpened(std::shared_ptr<const OpenedFile> file, const QString& path)
{
    opened_ = std::move(file);
    file_ = path;
    fileIsReport_ = opened_->kind == FileKind::Report;
    fileIsSnapshot_ = opened_->kind == FileKind::Snapshot;
    whatIfWorker_->cancel();
    whatIf_.reset();
    whatIfPanel_->setWhatIf(nullptr);
    whatIfPanel_->setSeqWhatIf(nullptr, 0);
    showReport(nullptr); // the previous file's report is not this one's
    setWindowTitle(QStringLiteral("%1 — memledger").arg(displayName()));
    runPanel_->setRunnable(opened_->kind == FileKind::Model);
    hideWeightsAction_->setVisible(!fileIsSnapshot_);
    if (fileIsSnapshot_)
        hideWeightsAction_->setChecked(false);
    remediesPanel_->setModelActions(opened_->kind == FileKind::Model);
    runPanel_->setMode(opened_->default_mode);
    if (!opened_->default_optimizer.empty())
        runPanel_->setOptimizer(opened_->default_optimizer);
    if (!opened_->default_inputs.empty())
        runPanel_->setInputs(shapesToText(opened_->default_inputs, opened_->default_input_types), tr("(demo input)"));
    else if (fileIsSnapshot_)
        runPanel_->setInputs(QString(), tr("(CUDA memory snapshot)"));
    else if (fileIsReport_)
        runPanel_->setInputs(QString(), tr("(saved report)"));
    else
        runPanel_->setInputs(QString(), QString()); // the worker guesses them from the model
    if (!path.isEmpty())
        addRecentFile(path);
}

void MainWindow::startRun()
{
    if (!opened_) {
        openFile(file_);
        return;
    }
    RunRequest request;
    request.file = opened_;
    request.path = file_;
    if (opened_->kind == FileKind::Model) {
        try {
            request.options = runPanel_->options();
        } catch (const std::exception& e) {
            showError(tr("Input shapes: %1").arg(QString::fromStdString(e.what())));
            return;
        }
    }
    clearError();
    runPanel_->setRunning(true);
    runPanel_->setStatus(
        fileIsReport_ || fileIsSnapshot_ ? tr("Reading %1…").arg(displayName()) : tr("Running %1…").arg(displayName()));
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
    if (!file_.isEmpty())
        return QFileInfo(file_).fileName();
    // A built-in demo has no path, only its name ("demo:mnist-train.pt").
    return opened_ && !opened_->name.empty() ? QString::fromStdString(opened_->name)
                                             : QString::fromUtf8(kDemoModelName);
}

QString MainWindow::saveBaseName() const
{
    if (!file_.isEmpty())
        return QFileInfo(file_).completeBaseName();
    // "demo:mnist-train.pt" -> "mnist-train-demo": no colon, which some file systems refuse.
    auto name = displayName();
    if (name.startsWith(QStringLiteral("demo:")))
        name = name.mid(5);
    if (name.endsWith(QStringLiteral(".pt")))
        name.chop(3);
    name.replace(QRegularExpression(QStringLiteral("[^A-Za-z0-9._-]")), QStringLiteral("-"));
    return (name.isEmpty() ? QStringLiteral("memledger") : name) + QStringLiteral("-demo");
}

void MainWindow::showReport(std::shared_ptr<const Report> report)
{
    report_ = std::move(report);
    timeline_->setReport(report_);
    tree_->setReport(report_);
    summary_->setReport(report_);
    if (report_ && report_->source == "model" && !fileIsReport_ && !report_->run.input_shapes.empty()) {
        auto shapes = shapesToText(report_->run.input_shapes, report_->run.input_types);
        if (shapes != runPanel_->inputsText())
            runPanel_->setInputs(shapes, report_->run.input_guessed ? tr("(guess)") : QString());
    }
    // The panel says what the shown report is: a training step read from JSON shows as one.
    if (report_ && report_->source == "model") {
        runPanel_->setMode(report_->run.mode);
        if (!report_->run.optimizer.empty())
            runPanel_->setOptimizer(report_->run.optimizer);
    }
    auto bytes = [](std::int64_t b) { return QString::fromStdString(formatBytes(b)); };
    QString peak;
    if (report_ && report_->optimizer_state_bytes > 0)
        peak = tr("peak %1 (weights %2, optimizer state %3, inputs %4, run %5)")
                   .arg(bytes(report_->peak_total_bytes), bytes(report_->weight_bytes),
                       bytes(report_->optimizer_state_bytes), bytes(report_->input_bytes), bytes(report_->peak_bytes));
    else if (report_)
        peak = tr("peak %1 (weights %2, inputs %3, run %4)")
                   .arg(bytes(report_->peak_total_bytes), bytes(report_->weight_bytes), bytes(report_->input_bytes),
                       bytes(report_->peak_bytes));
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
    deviceBox_->clear();
    if (snapshot) {
        const auto& s = *report_->snapshot;
        deviceBox_->addItem(tr("all devices"), TimelineSeries::kAllDevices);
        for (int d : s.devices)
            deviceBox_->addItem(QStringLiteral("cuda:%1").arg(d), d);
        runPanel_->setStatus(tr("CUDA memory snapshot"));
        peakLabel_->setText(tr("CUDA memory snapshot: peak %1 live, %2 reserved and %3 allocated at the end")
                                .arg(QString::fromStdString(formatBytes(report_->peak_bytes)),
                                    QString::fromStdString(formatBytes(s.reservedBytes())),
                                    QString::fromStdString(formatBytes(s.allocatedBytes()))));
        tabs_->setCurrentIndex(1);
    }
    deviceAction_->setVisible(snapshot && report_->snapshot->devices.size() > 1);
}

void MainWindow::showCallStacks()
{
    callTree_->setReport(report_);
    flame_->setReport(report_);
    stackPane_->setReport(report_);
    const bool stacks = callTree_->hasStacks(); // model runs have module paths instead
    for (int i = 0; i < tabs_->count(); ++i)
        if (tabs_->widget(i) == callTree_ || tabs_->widget(i) == flame_->parentWidget()->parentWidget())
            tabs_->setTabVisible(i, stacks);
    stackDock_->setVisible(stacks);
    if (stacks)
        stackDock_->raise();
}

void MainWindow::setUpRange(QToolBar* bar)
{
    bar->addSeparator();
    auto* select = bar->addAction(tr("Select range"));
    select->setCheckable(true);
    select->setToolTip(tr("Drag on the timeline to choose a range (or ctrl+drag at any time): the tree and the "
                          "peak panel then count what was allocated in it and its own peak"));
    connect(select, &QAction::toggled, timeline_, &TimelinePlot::setRangeMode);
    clearRangeAction_ = bar->addAction(tr("Clear range"));
    clearRangeAction_->setShortcut(QKeySequence(Qt::Key_Escape));
    clearRangeAction_->setToolTip(tr("Back to the whole run (Esc)"));
    clearRangeAction_->setEnabled(false);
    connect(clearRangeAction_, &QAction::triggered, timeline_, &TimelinePlot::clearRange);
    rangeLabel_ = new QLabel;
    rangeLabel_->setVisible(false);
    statusBar()->addPermanentWidget(rangeLabel_);
    connect(timeline_, &TimelinePlot::rangeChanged, this, &MainWindow::showRange);
}

void MainWindow::showRange(std::uint32_t first, std::uint32_t end)
{
    clearRangeAction_->setEnabled(end > first);
    if (!report_ || end <= first) {
        rangeReport_.reset();
        tree_->setReport(report_);
        summary_->setReport(report_);
        callTree_->setRange(0, CallTreeOptions::kEnd);
        rangeLabel_->clear();
        rangeLabel_->setVisible(false);
        return;
    }
    rangeReport_ = std::make_shared<const Report>(reportForRange(*report_, first, end));
    tree_->setReport(rangeReport_);
    summary_->setReport(rangeReport_);
    callTree_->setRange(first, end);
    const auto& r = *rangeReport_;
    std::int64_t allocated = 0;
    if (r.snapshot)
        allocated = r.layers.empty() ? 0 : r.layers[0].activation_bytes;
    else
        for (auto l : {Ledger::Activations, Ledger::SavedActivations, Ledger::Temporaries, Ledger::Gradients})
            allocated += r.ledgers[static_cast<std::size_t>(l)].total;
    rangeLabel_->setText(tr("Range %1: %2 allocated, peak %3")
                             .arg(timeline_->rangeText(), QString::fromStdString(formatBytes(allocated)),
                                 QString::fromStdString(formatBytes(r.peak_total_bytes))));
    rangeLabel_->setVisible(true);
}

QString MainWindow::rangeStatusText() const
{
    return rangeLabel_ && !rangeLabel_->isHidden() ? rangeLabel_->text() : QString();
}

void MainWindow::setDevice(int device)
{
    callTree_->setDevice(device);
    flame_->setDevice(device);
    summary_->setDevice(device);
    timeline_->setDevice(device);
    segmentTimeline_->setDevice(device);
    segmentMap_->setDevice(device);
    auto i = deviceBox_->findData(device);
    if (i >= 0)
        deviceBox_->setCurrentIndex(i);
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

void MainWindow::setUpWhatIf()
{
    whatIfPanel_ = new WhatIfPanel;
    whatIfWorker_ = new WhatIfWorker(this);
    setWhatIfPanel(whatIfPanel_);
    // The first two records make the panel usable while the larger ones are made; the status bar says which.
    connect(whatIfWorker_, &WhatIfWorker::firstRecords, this, [this](quint64, std::shared_ptr<const WhatIf> w) {
        whatIf_ = std::move(w);
        if (report_)
            whatIfPanel_->setBatch(report_->run.batch);
        whatIfPanel_->setWhatIf(whatIf_);
        whatIfPartial_ = true;
    });
    connect(whatIfWorker_, &WhatIfWorker::recording, this, [this](quint64, qint64 batch, int done) {
        if (done > 2)
            statusBar()->showMessage(
                tr("What-if: recording batch %1 (record %2); figures beyond batch %3 are extrapolated meanwhile")
                    .arg(batch)
                    .arg(done)
                    .arg(whatIf_ ? whatIf_->batch2() : 0),
                15000);
    });
    connect(whatIfWorker_, &WhatIfWorker::recorded, this, [this](quint64, std::shared_ptr<const WhatIf> w) {
        whatIf_ = std::move(w);
        // Start where the run the window shows is: its batch and, when predictable, its precision (unless the
        // panel was already in use on the first records).
        if (report_ && !whatIfPartial_) {
            whatIfPanel_->setBatch(report_->run.batch);
            auto dtypes = whatIf_->dtypes();
            if (std::find(dtypes.begin(), dtypes.end(), report_->run.dtype) != dtypes.end())
                whatIfPanel_->setDtype(QString::fromStdString(report_->run.dtype));
        }
        whatIfPartial_ = false;
        whatIfPanel_->setWhatIf(whatIf_);
        statusBar()->showMessage(
            tr("What-if ready: recorded at batch %1").arg([this] {
                QStringList batches;
                for (auto b : whatIf_->recordedBatches())
                    batches << QString::number(b);
                return batches.join(QStringLiteral(", "));
            }()),
            4000);
        emit whatIfReady();
    });
    connect(whatIfWorker_, &WhatIfWorker::seqRecorded, this, [this](quint64, std::shared_ptr<const WhatIf> w) {
        if (!report_)
            return;
        whatIfPanel_->setSeqWhatIf(std::move(w), report_->run.seq);
        statusBar()->showMessage(tr("What-if along the sequence ready (batch %1)").arg(report_->run.batch), 4000);
        emit seqWhatIfReady();
    });
    connect(whatIfWorker_, &WhatIfWorker::measured, this,
        [this](quint64, const Prediction& p) { whatIfPanel_->showMeasurement(p); });
    connect(whatIfWorker_, &WhatIfWorker::failed, this, [this](quint64, const QString& message) {
        if (whatIf_)
            whatIfPanel_->showMeasurementFailed(message);
        else
            statusBar()->showMessage(tr("What-if: %1").arg(message), 8000);
    });
    // What would help plans for the budget of the What if panel: a new budget recomputes it.
    connect(whatIfPanel_, &WhatIfPanel::budgetChanged, this, [this](std::int64_t) {
        if (report_ && report_->source == "model" && !fileIsReport_)
            computeRemedies();
    });
    connect(whatIfPanel_, &WhatIfPanel::measureRequested, this, [this](std::int64_t batch, const QString& dtype) {
        if (auto w = whatIfPanel_->activeWhatIf())
            whatIfWorker_->measure(opened_, w, batch, dtype);
    });
}

void MainWindow::recordWhatIf(const Report& report)
{
    whatIf_.reset();
    whatIfPartial_ = false;
    whatIfPanel_->setWhatIf(nullptr);
    whatIfPanel_->setSeqWhatIf(nullptr, 0);
    RunOptions base;
    base.inputs = report.run.input_shapes;
    base.input_types = report.run.input_types;
    base.dtype = "float32";
    // The what-if records the run the window shows: a training step is predicted as a training step.
    base.mode = report.run.mode;
    if (report.run.mode == "train") {
        if (!report.run.optimizer.empty())
            base.optimizer = report.run.optimizer;
        if (!report.run.loss.empty())
            base.loss = report.run.loss;
    }
    whatIfWorker_->record(opened_, base);
}

Report MainWindow::reportForExport() const
{
    Report r = *report_;
    if (!whatIf_ || r.source != "model") {
        addShownRemedies(r, remediesPanel_);
        return r;
    }
    std::vector<std::int64_t> batches {1, 8, 32, 64, 128, whatIfPanel_->batch()};
    std::sort(batches.begin(), batches.end());
    batches.erase(std::unique(batches.begin(), batches.end()), batches.end());
    r.whatif = std::make_shared<const WhatIfTable>(
        makeWhatIfTable(*whatIf_, batches, whatIf_->dtypes(), whatIfPanel_->budget()));
    addShownRemedies(r, remediesPanel_);
    return r;
}

void MainWindow::setWhatIfPanel(QWidget* panel)
{
    // In a scroll area, so that on a short screen the panel scrolls instead of pushing the window taller.
    QScrollArea* scroll = nullptr;
    if (panel) {
        scroll = new QScrollArea;
        scroll->setWidget(panel);
        scroll->setWidgetResizable(true);
        scroll->setFrameShape(QFrame::NoFrame);
        scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
        keepDockWidth(scroll);
        panel->setMinimumWidth(0);
    }
    whatIfDock_->setWidget(scroll);
    whatIfDock_->setVisible(panel != nullptr);
}

QString MainWindow::saveAnalysis(const QString& path) const
{
    if (!report_)
        return tr("%1: nothing to save yet").arg(path);
    return writeWithQSaveFile(path, QByteArray::fromStdString(reportToJson(reportForExport()).dump() + "\n"));
}

QString MainWindow::exportTimelinePng(const QString& path) const
{
    if (!report_)
        return tr("%1: nothing to export yet").arg(path);
    return renderTimelinePng(
        *report_, path, timeline_->size().expandedTo(QSize(800, 300)), timeline_->axis(), timeline_->weightsHidden());
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
    return writeWithQSaveFile(path, QByteArray::fromStdString(reportToHtml(reportForExport())));
#else
    return tr("%1: this build has no HTML report writer").arg(path);
#endif
}

void MainWindow::setUpComparison()
{
    compareWorker_ = new RunWorker(this);
    diffView_ = new DiffView;
    connect(diffView_, &DiffView::closeRequested, this, &MainWindow::closeComparison);
    connect(compareWorker_, &RunWorker::finished, this, [this](quint64, std::shared_ptr<const Report> b) {
        if (!report_)
            return;
        auto diff = std::make_shared<const ReportDiff>(diffReports(
            *report_, *b, displayName().toStdString(), QFileInfo(compareFile_).fileName().toStdString()));
        diffView_->setDiff(diff);
        if (!centralStack_) {
            centralStack_ = new QStackedWidget;
            centralStack_->addWidget(takeCentralWidget());
            centralStack_->addWidget(diffView_);
            setCentralWidget(centralStack_);
        }
        centralStack_->setCurrentWidget(diffView_);
        // The comparison takes the window's width: the docks describe A alone and come back when it closes.
        for (auto* dock : findChildren<QDockWidget*>())
            if (dock->isVisible() && !dockedForComparison_.contains(dock)) {
                dockedForComparison_ << dock;
                dock->hide();
            }
        statusBar()->showMessage(tr("Comparing %1 (A) with %2 (B)").arg(displayName(), QFileInfo(compareFile_).fileName()),
            6000);
        emit comparisonShown();
    });
    connect(compareWorker_, &RunWorker::failed, this, [this](quint64, const QString& message) {
        auto text = tr("Compare with: %1").arg(message);
        showError(text);
        emit comparisonFailed(text);
    });
    // Another file or run shown is another A: the comparison no longer describes it.
    connect(this, &MainWindow::reportChanged, this, [this] { closeComparison(); });
}

void MainWindow::compareWith(const QString& path)
{
    if (!report_) {
        showError(tr("Compare with %1: open or run a file first, it will be A").arg(path));
        return;
    }
    RunRequest request;
    request.path = path;
    const bool sameFile = !file_.isEmpty() && QFileInfo(path) == QFileInfo(file_);
    if (sameFile && opened_ && opened_->model)
        request.file = opened_; // the model opened once, run again at the panel's settings
    try {
        request.options = runPanel_->options();
    } catch (const std::exception& e) {
        showError(tr("Input shapes: %1").arg(QString::fromStdString(e.what())));
        return;
    }
    // Another model takes the panel's shapes only when they were given, not guessed for A.
    if (!sameFile && (report_->run.input_guessed || !opened_ || opened_->kind != FileKind::Model)) {
        request.options.inputs.clear();
        request.options.input_types.clear();
    }
    compareFile_ = path;
    clearError();
    statusBar()->showMessage(tr("Compare with %1: opening and running it as B…").arg(QFileInfo(path).fileName()));
    compareWorker_->start(std::move(request));
}

void MainWindow::closeComparison()
{
    compareWorker_->cancel();
    if (centralStack_)
        centralStack_->setCurrentIndex(0);
    for (auto* dock : dockedForComparison_)
        dock->show();
    dockedForComparison_.clear();
}

bool MainWindow::isComparing() const
{
    return centralStack_ && centralStack_->currentWidget() == diffView_;
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
