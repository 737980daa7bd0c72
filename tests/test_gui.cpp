// The window: opens the demo and runs it off the GUI thread, shows bad files as errors, exports.
#include "support/format.h"
#include "layer_tree_model.h"
#include "layer_tree_panel.h"
#include "job_runner.h"
#include "ledger_summary.h"
#include "gpu_fit_view.h"
#include "main_window.h"
#include "qt_test_app.h"
#include "window_wait.h"
#include "run_panel.h"
#include "timeline_plot.h"
#include "whatif_controller.h"
#include "whatif_panel.h"
#include "run_command.h"
#include "whatif/checkpoint.h"
#include "whatif/whatif.h"

#include "exports/report_json.h"
#include "exports/whatif_export.h"
#include "report/meta_run.h"
#include "recording/build_report.h"

#include <nlohmann/json.hpp>

#include <QAbstractItemModelTester>
#include <QComboBox>
#include <QDockWidget>
#include <QElapsedTimer>
#include <QFile>
#include <QMenu>
#include <QMenuBar>
#include <QProgressBar>
#include <QPushButton>
#include <QSignalSpy>
#include <QTest>
#include <QSortFilterProxyModel>
#include <QThread>
#include <QTemporaryDir>
#include <QTimer>
#include <QTreeView>

#include <gtest/gtest.h>

#include <fstream>
#include <future>
#include <set>

using namespace memledger;

namespace {

constexpr int kRunTimeoutMs = 120000;


int countRows(const QAbstractItemModel& m, const QModelIndex& parent = {})
{
    int n = m.rowCount(parent);
    for (int r = 0, rows = n; r < rows; ++r)
        n += countRows(m, m.index(r, 0, parent));
    return n;
}

void writeFile(const QString& path, const QByteArray& bytes)
{
    QFile f(path);
    ASSERT_TRUE(f.open(QIODevice::WriteOnly));
    f.write(bytes);
}

} // namespace

// The GPUs tab shows the fit table's notes as the CLI and the HTML page do: the program's range, FSDP2's padding.
TEST(GpuFitView, ShowsTheTablesNotes)
{
    qtTestApp();
    GpuFitView view;
    GpuFitTable t;
    t.budget_bytes = 80'000'000'000;
    t.gpu_counts = {1, 2};
    t.notes = {"a micro-batch of 16 is the most the program accepts", "fsdp and zero2 on 16 GPUs (and more): 96 parameters"};
    view.setTable(t);
    EXPECT_EQ(view.notesText(), "Note: a micro-batch of 16 is the most the program accepts\nNote: fsdp and zero2 on 16 GPUs "
                                "(and more): 96 parameters");
    view.clear("a training step's question");
    EXPECT_TRUE(view.notesText().isEmpty());
}

TEST(MainWindow, RunsTheDemoAndShowsWhatTheCoreReports)
{
    qtTestApp();
    MainWindow w;
    w.show();
    QAbstractItemModelTester treeTester(w.layerTree()->model());
    QAbstractItemModelTester proxyTester(w.layerTree()->proxy());
    w.openDemo();
    EXPECT_TRUE(w.isRunning());
    ASSERT_TRUE(waitForReport(w)) << w.errorText().toStdString();
    EXPECT_FALSE(w.isRunning());
    auto report = w.report();
    ASSERT_TRUE(report);
    ASSERT_TRUE(report->trace);

    // Tree: one row per module, root first, with the core's figures.
    EXPECT_EQ(countRows(*w.layerTree()->model()), static_cast<int>(report->layers.size()));
    auto root = w.layerTree()->model()->index(0, LayerTreeModel::Weights);
    EXPECT_EQ(root.data(LayerTreeModel::SortRole).toLongLong(), report->layers[0].weight_bytes);
    for (std::size_t i = 0; i < report->layers.size(); i += 7) {
        auto index = w.layerTree()->model()->indexForLayer(static_cast<int>(i), LayerTreeModel::Activations);
        EXPECT_EQ(index.data(LayerTreeModel::SortRole).toLongLong(), report->layers[i].activation_bytes) << i;
        EXPECT_EQ(
            index.siblingAtColumn(0).data(LayerTreeModel::PathRole).toString().toStdString(), report->layers[i].path);
    }

    // Timeline: the stacked top is weights + inputs + live bytes, and its peak is the report's.
    const auto& s = w.timeline()->series();
    ASSERT_EQ(s.keys.size(), report->trace->size() + 1);
    auto live = liveBytesAfterEachEvent(*report->trace);
    for (std::size_t i = 0; i < live.size(); ++i)
        ASSERT_EQ(s.tops[TimelineSeries::kBands - 1][i + 1],
            static_cast<double>(report->weight_bytes + report->input_bytes + live[i]));
    EXPECT_EQ(s.peak_value, static_cast<double>(report->peak_total_bytes));
    EXPECT_GT(w.timeline()->plottedPointCount(), 0);

    EXPECT_EQ(w.ledgerSummary()->loadTaxText(), "file 2.61 MiB float16, resident 5.21 MiB as float32");
    EXPECT_EQ(w.runPanel()->inputsText(), "1x1x300x300");

    // Selecting a module in the tree shades it on the timeline, and a click on the timeline selects back.
    w.layerTree()->selectModule("base.0");
    EXPECT_EQ(w.timeline()->highlightedModule(), "base.0");
    emit w.timeline()->moduleClicked("Norm.branch0.0.conv");
    EXPECT_EQ(w.timeline()->highlightedModule(), "Norm.branch0.0.conv");
}

// The window's runs go through JobRunner: its work runs on a thread of its own while the GUI thread serves events.
// Told by counting, not timing: the work waits until the GUI thread, serving a timer's events, releases it. How long
// the GUI thread goes without serving events during a run is measured in bench/ (bench_window --gui-gaps).
TEST(JobRunner, WorkRunsOffTheGuiThreadWhileTheGuiThreadServesEvents)
{
    qtTestApp();
    JobRunner jobs;
    std::promise<void> release;
    auto released = release.get_future().share();
    QThread* workThread = nullptr;
    QThread* deliveredOn = nullptr;
    int deliveries = 0;
    jobs.launch([&](quint64 job, const std::atomic<bool>*) {
        workThread = QThread::currentThread();
        released.wait(); // the job cannot end before the GUI thread has served the ticks below
        jobs.deliver(job, [&] {
            deliveredOn = QThread::currentThread();
            ++deliveries;
        });
    });
    constexpr int kTicks = 3;
    int ticks = 0;
    QTimer ticker;
    ticker.setInterval(0);
    QObject::connect(&ticker, &QTimer::timeout, [&] {
        if (++ticks == kTicks)
            release.set_value();
    });
    ticker.start();
    EXPECT_TRUE(QTest::qWaitFor([&] { return deliveries > 0; }, kRunTimeoutMs));
    ticker.stop();
    if (ticks < kTicks)
        release.set_value(); // the wait above timed out: let the job end, so that ~JobRunner does not wait forever
    EXPECT_GE(ticks, kTicks);
    EXPECT_EQ(deliveries, 1);
    EXPECT_NE(workThread, nullptr);
    EXPECT_NE(workThread, QCoreApplication::instance()->thread());
    EXPECT_EQ(deliveredOn, QCoreApplication::instance()->thread()); // what the job delivers arrives on the GUI thread
}

// openDemo() returns at once with the run under way, and the run's progress arrives as the modules run, each step
// shown by the GUI thread while the run goes on.
TEST(MainWindow, ARunLeavesTheGuiThreadFreeAndShowsItsProgress)
{
    qtTestApp();
    MainWindow w;
    w.show();
    auto* bar = w.runPanel()->progressBar();
    std::vector<std::pair<int, int>> shown; // (modules done, modules) as the bar showed them during the run
    QObject::connect(bar, &QProgressBar::valueChanged, &w, [&](int value) {
        if (w.isRunning() && bar->maximum() > 1)
            shown.emplace_back(value, bar->maximum());
    });
    int ticksWhileRunning = 0;
    QTimer ticker;
    ticker.setInterval(0);
    QObject::connect(&ticker, &QTimer::timeout, [&] { ticksWhileRunning += w.isRunning(); });
    ticker.start();
    w.openDemo();
    EXPECT_TRUE(w.isRunning()); // openDemo() did not run the model on this thread
    EXPECT_FALSE(w.report());
    ASSERT_TRUE(waitForReport(w)) << w.errorText().toStdString();
    ticker.stop();
    EXPECT_GT(ticksWhileRunning, 0);
    ASSERT_FALSE(shown.empty());
    const int modules = shown.back().second;
    EXPECT_EQ(shown.back().first, modules) << "the last progress is every module";
    std::set<int> steps;
    for (std::size_t i = 0; i < shown.size(); ++i) {
        EXPECT_EQ(shown[i].second, modules) << i;
        if (i > 0)
            EXPECT_GE(shown[i].first, shown[i - 1].first) << i;
        steps.insert(shown[i].first);
    }
    EXPECT_GE(steps.size(), 2u) << "the bar moved while the modules ran, not only at the end";
}

TEST(MainWindow, CancelStopsTheRunAndTheNextRunWorks)
{
    qtTestApp();
    MainWindow w;
    w.openDemo();
    ASSERT_TRUE(w.runPanel()->cancelButton()->isEnabled());
    w.runPanel()->cancelButton()->click();
    EXPECT_FALSE(w.isRunning());
    EXPECT_TRUE(w.runPanel()->runButton()->isEnabled());
    // A stale result of the cancelled job must not show up.
    QSignalSpy shown(&w, &MainWindow::reportChanged);
    shown.wait(1500);
    EXPECT_TRUE(shown.isEmpty());
    w.runPanel()->runButton()->click();
    ASSERT_TRUE(waitForReport(w));
    EXPECT_TRUE(w.report());
}

class BadFile : public ::testing::TestWithParam<std::pair<const char*, const char*>> { };

TEST_P(BadFile, ShowsTheFileAndLeavesTheWindowUsable)
{
    qtTestApp();
    QTemporaryDir dir;
    auto [name, contents] = GetParam();
    auto path = dir.filePath(name);
    if (contents)
        writeFile(path, contents);
    MainWindow w;
    w.show();
    QSignalSpy failed(&w, &MainWindow::runFailed);
    w.openFile(path);
    QElapsedTimer clock;
    clock.start();
    while (failed.isEmpty() && clock.elapsed() < kRunTimeoutMs)
        failed.wait(100);
    ASSERT_EQ(failed.size(), 1);
    EXPECT_TRUE(w.errorText().contains(name)) << w.errorText().toStdString();
    EXPECT_FALSE(w.isRunning());
    EXPECT_FALSE(w.report());
    // A failure never reads as done: the bar is not full.
    auto* bar = w.runPanel()->progressBar();
    EXPECT_GT(bar->maximum(), bar->minimum());
    EXPECT_LT(bar->value(), bar->maximum());
    EXPECT_NE(bar->text(), "100%");
    // Still usable: the demo opens and the error goes away.
    w.openDemo();
    ASSERT_TRUE(waitForReport(w));
    EXPECT_TRUE(w.errorText().isEmpty());
}

INSTANTIATE_TEST_SUITE_P(Files, BadFile,
    ::testing::Values(std::pair<const char*, const char*> {"garbage.pt", "this is not a TorchScript zip"},
        std::pair<const char*, const char*> {"missing.pt", nullptr},
        std::pair<const char*, const char*> {"broken.json", "{\"memledger\": "},
        std::pair<const char*, const char*> {"other.json", "{\"hello\": 1}"}));

TEST(MainWindow, AFileThatFailsToOpenChangesNothingButTheMessage)
{
    qtTestApp();
    QTemporaryDir dir;
    auto bad = dir.filePath("garbage.pt");
    writeFile(bad, "garbage");
    MainWindow w;
    w.show();
    w.openDemo();
    ASSERT_TRUE(waitForReport(w)) << w.errorText().toStdString();
    auto title = w.windowTitle();
    auto report = w.report();
    auto inputs = w.runPanel()->inputsText();
    auto file = w.currentFile();
    ASSERT_TRUE(report);

    QSignalSpy failed(&w, &MainWindow::runFailed);
    w.openFile(bad);
    QElapsedTimer clock;
    clock.start();
    while (failed.isEmpty() && clock.elapsed() < kRunTimeoutMs)
        failed.wait(100);
    ASSERT_EQ(failed.size(), 1);
    EXPECT_EQ(w.windowTitle(), title);
    EXPECT_EQ(w.report(), report);
    EXPECT_EQ(w.runPanel()->inputsText(), inputs);
    EXPECT_EQ(w.currentFile(), file);
    EXPECT_TRUE(w.errorText().contains("garbage.pt")) << w.errorText().toStdString();
    // The panel does not put "failed" under the previous file's results: it says which file is which.
    EXPECT_TRUE(w.runPanel()->status().contains("garbage.pt")) << w.runPanel()->status().toStdString();
    EXPECT_TRUE(w.runPanel()->status().contains("still showing")) << w.runPanel()->status().toStdString();
    auto* bar = w.runPanel()->progressBar();
    EXPECT_LT(bar->value(), bar->maximum());
}

TEST(MainWindow, DocksKeepTheirWidthWhateverTheirTextSays)
{
    qtTestApp();
    MainWindow w;
    w.resize(1280, 720);
    w.show();
    QCoreApplication::processEvents();
    auto dockWidth = w.whatIfDock()->width();
    auto runAt = w.runPanel()->runButton()->mapTo(&w, QPoint());
    EXPECT_LE(dockWidth, 450);
    // Measure's answer is a long sentence; it wraps instead of widening the right side.
    w.whatIfPanel()->showMeasurementFailed(QString("the model rejected the input: ").repeated(12));
    w.runPanel()->setStatus(QString("a long status line without end ").repeated(8));
    for (int i = 0; i < 5; ++i)
        QCoreApplication::processEvents();
    EXPECT_LE(w.whatIfDock()->width(), std::max(dockWidth, 450));
    EXPECT_EQ(w.runPanel()->runButton()->mapTo(&w, QPoint()).x(), runAt.x());
    EXPECT_LE(w.width(), 1280);
}

TEST(MainWindow, SavesReopensAndExports)
{
    qtTestApp();
    QTemporaryDir dir;
    MainWindow w;
    w.resize(1200, 800);
    w.show();
    w.openDemo();
    ASSERT_TRUE(waitForReport(w));
    auto peak = w.report()->peak_total_bytes;

    auto json = dir.filePath("demo.json");
    ASSERT_EQ(w.saveAnalysis(json), QString());
    auto timeline = dir.filePath("timeline.png");
    ASSERT_EQ(w.exportTimelinePng(timeline), QString());
    QImage t(timeline);
    ASSERT_FALSE(t.isNull());
    EXPECT_EQ(t.size(), w.timeline()->size().expandedTo(QSize(800, 300)));
    EXPECT_GT(pixelsUnlike(t, t.pixel(0, 0)), t.width() * t.height() / 10);
    // The PNG shows what the timeline shows: zoomed in, or with a module selected, it is another picture.
    const auto full = w.timeline()->xAxis->range();
    w.timeline()->xAxis->setRange(full.lower, full.lower + full.size() / 4);
    auto zoomed = dir.filePath("zoomed.png");
    ASSERT_EQ(w.exportTimelinePng(zoomed), QString());
    EXPECT_NE(QImage(zoomed), t) << "the zoomed export is the full one";
    w.timeline()->xAxis->setRange(full);
    ASSERT_FALSE(w.report()->layers.size() < 2);
    std::size_t largest = 1;
    for (std::size_t i = 1; i < w.report()->layers.size(); ++i)
        if (w.report()->layers[i].activation_bytes > w.report()->layers[largest].activation_bytes)
            largest = i;
    w.timeline()->highlightModule(QString::fromStdString(w.report()->layers[largest].path));
    auto module = dir.filePath("module.png");
    ASSERT_EQ(w.exportTimelinePng(module), QString());
    EXPECT_NE(QImage(module), t) << "the selected module is not in the export";
    w.timeline()->highlightModule(QString());
    auto window = dir.filePath("window.png");
    ASSERT_EQ(w.exportWindowPng(window), QString());
    QImage shot(window);
    EXPECT_EQ(shot.size(), w.size());
    EXPECT_GT(pixelsUnlike(shot, shot.pixel(0, 0)), shot.width() * shot.height() / 10);

#if __has_include("memledger/report_html.h")
    auto html = dir.filePath("demo.html");
    ASSERT_EQ(w.exportHtml(html), QString());
    QFile page(html);
    ASSERT_TRUE(page.open(QIODevice::ReadOnly));
    EXPECT_TRUE(page.readAll().contains("<html"));
#endif

    // The saved JSON opens without running anything.
    w.openFile(json);
    ASSERT_TRUE(waitForReport(w));
    EXPECT_EQ(w.report()->peak_total_bytes, peak);
    EXPECT_FALSE(w.runPanel()->runButton()->isEnabled());
    EXPECT_EQ(countRows(*w.layerTree()->model()), static_cast<int>(w.report()->layers.size()));
}

namespace {

// The window's what-if plumbing needs a few records, not the 24 every test process counts (tests/build_paths.cpp):
// this test's own process (each test case runs alone, PER_CASE), and the command lines it starts, count 6. The
// records' accuracy is test_whatif's.
void recordFew()
{
    ::setenv("MEMLEDGER_RECORD_BUDGET", "6", 1);
}

} // namespace

TEST(MainWindow, WhatIfPanelGetsItsRecordsAndTheSavedReportCarriesTheTable)
{
    if (!canRunExportedPrograms())
        GTEST_SKIP() << "this build's libtorch runs no torch.export programs (" << torchBuildInfo() << ")";
    recordFew();
    qtTestApp();
    MainWindow w;
    w.show();
    QSignalSpy ready(&w, &MainWindow::whatIfReady);
    // the GPT demo: its records take seconds where the detector demo's float16 convolutions take minutes on a CPU
    w.openFile(QStringLiteral("demo:gpt.pt2"));
    ASSERT_TRUE(waitForReport(w)) << w.errorText().toStdString();
    ASSERT_TRUE(waitForSignals(ready, 3 * kRunTimeoutMs)) << "the what-if records never arrived";
    EXPECT_EQ(w.whatIfPanel()->batch(), w.report()->run.batch); // it starts at the run the window shows
    auto exported = w.reportForExport();
    ASSERT_TRUE(exported.whatif);
    const auto& rows = exported.whatif->predictions;
    ASSERT_FALSE(rows.empty());
    bool batch8 = false, shown = false;
    for (const auto& row : rows) {
        if (row.batch == w.report()->run.batch && row.dtype == w.report()->run.dtype) { // the run the window shows
            EXPECT_EQ(row.predicted_peak_bytes, w.report()->peak_bytes);
            shown = true;
        }
        batch8 = batch8 || row.batch == 8;
    }
    EXPECT_TRUE(batch8);
    EXPECT_TRUE(shown) << "no row at the shown run's batch " << w.report()->run.batch;
    QTemporaryDir dir;
    auto path = dir.filePath(QStringLiteral("saved.json"));
    EXPECT_TRUE(w.saveAnalysis(path).isEmpty());
    auto back = readReportFile(path.toStdString());
    ASSERT_TRUE(back.whatif);
    EXPECT_EQ(back.whatif->predictions.size(), rows.size());
}

// One what-if policy (whatif/whatif_policy.h): the window's saved table and `memledger whatif --json` of the same
// model and settings are the same JSON, records, rows, figures and all.
TEST(MainWindow, WhatIfTableIsTheCommandLinesForTheSameModelAndSettings)
{
    if (!canRunExportedPrograms())
        GTEST_SKIP() << "this build's libtorch runs no torch.export programs (" << torchBuildInfo() << ")";
    recordFew();
    qtTestApp();
    MainWindow w;
    w.show();
    w.whatIfPanel()->setBudget(QStringLiteral("1 GiB"));
    QSignalSpy table(&w, &MainWindow::whatIfTableReady);
    w.openFile(QStringLiteral("demo:gpt.pt2"));
    ASSERT_TRUE(waitForReport(w)) << w.errorText().toStdString();
    QElapsedTimer clock;
    clock.start();
    while (table.isEmpty() && clock.elapsed() < 3 * kRunTimeoutMs)
        table.wait(200);
    ASSERT_FALSE(table.isEmpty()) << "the what-if table never came";
    auto exported = w.reportForExport();
    ASSERT_TRUE(exported.whatif);
    auto window = whatIfToJson(*exported.whatif);

    QTemporaryDir dir;
    auto path = dir.filePath(QStringLiteral("whatif.json")).toStdString();
    auto r = memledger::test::runCommand(
        memledger::test::memledgerBinary() + " whatif demo:gpt.pt2 --budget 1GiB --json '" + path + "'");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ifstream in(path);
    auto cli = nlohmann::json::parse(in);
    EXPECT_EQ(window["recorded_batches"], cli["recorded_batches"]);
    EXPECT_EQ(window["predictions"].size(), cli["predictions"].size());
    EXPECT_EQ(window, cli) << "window: " << window.dump().substr(0, 2000) << "\ncli: " << cli.dump().substr(0, 2000);
}

TEST(MainWindow, OpensTheMnistTrainingDemoFromTheMenuAndRunsATrainingStep)
{
    qtTestApp();
    MainWindow w;
    w.show();
    QAction* mnist = nullptr;
    for (auto* menu : w.menuBar()->findChildren<QMenu*>())
        if (menu->title().remove('&') == "Open demo")
            for (auto* a : menu->actions())
                if (a->text().contains("MNIST") && a->text().contains("training step"))
                    mnist = a;
    ASSERT_TRUE(mnist) << "File > Open demo lists no MNIST training step";
    mnist->trigger();
    ASSERT_TRUE(waitForReport(w)) << w.errorText().toStdString();
    auto report = w.report();
    ASSERT_TRUE(report);
    EXPECT_EQ(report->run.mode, RunMode::Train);
    EXPECT_EQ(w.runPanel()->modeBox()->currentText(), "training step");
    EXPECT_EQ(w.runPanel()->mode(), RunMode::Train);
    EXPECT_TRUE(w.runPanel()->trainingRowVisible());
    EXPECT_TRUE(w.windowTitle().contains("demo:mnist-train.pt")) << w.windowTitle().toStdString();
    EXPECT_EQ(w.runPanel()->options().mode, RunMode::Train);
    EXPECT_EQ(w.timeline()->phaseBandCount(), static_cast<int>(report->phases.size()));
    EXPECT_FALSE(w.layerTree()->view()->isColumnHidden(LayerTreeModel::Gradients));

    // Back to inference: the RFBNet demo opens in its own mode and the training rows go away.
    w.openDemo();
    ASSERT_TRUE(waitForReport(w)) << w.errorText().toStdString();
    EXPECT_EQ(w.report()->run.mode, RunMode::Inference);
    EXPECT_EQ(w.runPanel()->modeBox()->currentText(), "inference");
    EXPECT_FALSE(w.runPanel()->trainingRowVisible());
    EXPECT_TRUE(w.layerTree()->view()->isColumnHidden(LayerTreeModel::Gradients));
    EXPECT_EQ(w.timeline()->phaseBandCount(), 0);
}

// A torch.export program's Run panel has a Lifetimes row: eager by default (the report names it), and a run with
// "as the graph frees them" is the graph's lifetimes, a lower inference peak for the same ops. A TorchScript model
// has no such row.
TEST(MainWindow, TheLifetimesRowChoosesEagerOrGraphForAProgram)
{
    if (!canRunExportedPrograms())
        GTEST_SKIP() << "this build's libtorch runs no torch.export programs (" << torchBuildInfo() << ")";
    qtTestApp();
    MainWindow w;
    w.show();
    w.openFile(QStringLiteral("demo:gpt.pt2"));
    ASSERT_TRUE(waitForReport(w)) << w.errorText().toStdString();
    EXPECT_TRUE(w.runPanel()->lifetimesRowVisible());
    EXPECT_EQ(w.report()->run.lifetimes, "eager");
    const auto eagerPeak = w.report()->peak_bytes;
    w.runPanel()->setLifetimes("graph");
    EXPECT_EQ(w.runPanel()->options().lifetimes, "graph");
    w.runPanel()->runButton()->click();
    ASSERT_TRUE(waitForReport(w)) << w.errorText().toStdString();
    ASSERT_EQ(w.report()->run.lifetimes, "graph");
    EXPECT_LT(w.report()->peak_bytes, eagerPeak) << "the graph frees q, k, v and the attention output sooner";

    w.openDemo(); // RFBNet, TorchScript
    ASSERT_TRUE(waitForReport(w)) << w.errorText().toStdString();
    EXPECT_FALSE(w.runPanel()->lifetimesRowVisible());
    EXPECT_TRUE(w.report()->run.lifetimes.empty());
}

// A training step's What if panel: GPUs and Sharding rows give rank 0's figures (the what-if's own rank
// prediction), the fewest GPUs per strategy for the budget, and "Show this rank" puts the rank's step in the window
// until File > Back to the run.
TEST(MainWindow, WhatIfPanelShowsOneRankOfAShardedJob)
{
    qtTestApp();
    MainWindow w;
    w.show();
    QSignalSpy ready(&w, &MainWindow::whatIfReady);
    w.openFile(QStringLiteral("demo:mnist-train.pt"));
    ASSERT_TRUE(waitForReport(w)) << w.errorText().toStdString();
    ASSERT_TRUE(waitForSignals(ready, 3 * kRunTimeoutMs)) << "the what-if records never arrived";
    QElapsedTimer clock;
    clock.start();
    auto* panel = w.whatIfPanel();
    const auto run = w.report();
    ASSERT_EQ(run->run.mode, RunMode::Train);
    // One GPU in bfloat16 mixed (offered first): the what-if's record under bfloat16 autocast, float32 weights.
    panel->setDtype(QStringLiteral("bfloat16-mixed"));
    EXPECT_FALSE(panel->rankPlan());
    auto one = panel->activeWhatIf()->predict(panel->batch(), "bfloat16-mixed", false);
    EXPECT_TRUE(one.runnable) << one.not_runnable;
    EXPECT_EQ(one.weight_bytes, run->weight_bytes);
    EXPECT_TRUE(panel->peakTotalText().startsWith(QString::fromStdString(formatBytes(one.predicted_peak_total_bytes))))
        << panel->peakTotalText().toStdString();
    panel->setDtype(QStringLiteral("float32"));
    panel->setGpus(4); // more than one GPU: FSDP unless another strategy is chosen
    EXPECT_EQ(panel->shard(), "fsdp");
    auto plan = panel->rankPlan();
    ASSERT_TRUE(plan);
    auto expected = panel->activeWhatIf()->predictRank(panel->batch(), *plan, false);
    EXPECT_TRUE(panel->peakTotalText().startsWith(QString::fromStdString(formatBytes(expected.predicted_peak_total_bytes))))
        << panel->peakTotalText().toStdString();
    panel->setShard(QStringLiteral("ddp"));
    auto ddp = panel->activeWhatIf()->predictRank(panel->batch(), *panel->rankPlan(), false);
    EXPECT_GT(ddp.predicted_peak_total_bytes, expected.predicted_peak_total_bytes); // replicated, and its buckets
    panel->setBudget(QStringLiteral("64 MiB"));
    clock.restart();
    while (panel->gpuFitText().isEmpty() && clock.elapsed() < 10000)
        QTest::qWait(50);
    EXPECT_TRUE(panel->gpuFitText().contains("fsdp")) << panel->gpuFitText().toStdString();
    // DeepSpeed's stages are offered too: the rank laid out as DeepSpeed does, and the fit table answers for them.
    panel->setShard(QStringLiteral("ds-zero3"));
    auto ds = panel->rankPlan();
    ASSERT_TRUE(ds);
    EXPECT_EQ(ds->shard, Sharding::DsZero3);
    auto dsRank = panel->activeWhatIf()->predictRank(panel->batch(), *ds, false);
    EXPECT_TRUE(dsRank.runnable) << dsRank.not_runnable;
    EXPECT_TRUE(panel->peakTotalText().startsWith(QString::fromStdString(formatBytes(dsRank.predicted_peak_total_bytes))))
        << panel->peakTotalText().toStdString();
    clock.restart();
    while (!panel->gpuFitText().contains("ds-zero3") && clock.elapsed() < 10000)
        QTest::qWait(50);
    EXPECT_TRUE(panel->gpuFitText().contains("ds-zero3")) << panel->gpuFitText().toStdString();
    panel->setShard(QStringLiteral("ddp"));
    // Mixed precision under DDP is autocast over float32 weights: the what-if's "bfloat16-mixed" record (the window
    // makes one for every training step) laid out per rank.
    panel->setDtype(QStringLiteral("bfloat16-mixed"));
    auto mixedPlan = panel->rankPlan();
    ASSERT_TRUE(mixedPlan);
    EXPECT_EQ(mixedPlan->autocast, "bfloat16");
    EXPECT_EQ(mixedPlan->recordedPrecision(), "bfloat16-mixed");
    auto mixed = panel->activeWhatIf()->predictRank(panel->batch(), *mixedPlan, false);
    EXPECT_TRUE(mixed.runnable) << mixed.not_runnable;
    EXPECT_EQ(mixed.weight_bytes, ddp.weight_bytes); // float32 weights, replicated
    EXPECT_TRUE(panel->peakTotalText().startsWith(QString::fromStdString(formatBytes(mixed.predicted_peak_total_bytes))))
        << panel->peakTotalText().toStdString();
    panel->setDtype(QStringLiteral("float32"));
    panel->setShard(QStringLiteral("fsdp"));
    panel->requestRank();
    ASSERT_TRUE(w.report());
    ASSERT_TRUE(w.report()->run.parallel);
    EXPECT_EQ(w.report()->run.parallel->gpus, 4);
    EXPECT_EQ(w.report()->run.parallel->shard, "fsdp");
    EXPECT_LT(w.report()->weight_bytes, run->weight_bytes);
    EXPECT_GT(w.report()->ledgers[static_cast<std::size_t>(Ledger::GatheredParameters)].total, 0);
    QAction* back = nullptr;
    for (auto* a : w.menuBar()->findChildren<QAction*>())
        if (a->text().remove('&') == "Back to the run")
            back = a;
    ASSERT_TRUE(back);
    EXPECT_TRUE(back->isVisible());
    back->trigger();
    EXPECT_EQ(w.report(), run);
    EXPECT_FALSE(back->isVisible());
}

// The GPUs tab: an answer beyond the window's records (the MNIST step fits about 200 on a 600 MiB GPU; the
// window records up to batch 128) is marked * and offered "Record up to micro-batch N"; the records made, the
// answer lies inside them, unmarked, and the button is gone.
TEST(MainWindow, GpusTabRecordsUpToAnAnswerBeyondItsRecords)
{
    qtTestApp();
    MainWindow w;
    w.show();
    QSignalSpy ready(&w, &MainWindow::whatIfReady);
    QSignalSpy fitReady(&w, &MainWindow::gpuFitReady);
    w.openFile(QStringLiteral("demo:mnist-train.pt"));
    ASSERT_TRUE(waitForReport(w)) << w.errorText().toStdString();
    ASSERT_TRUE(waitForSignals(ready, 3 * kRunTimeoutMs)) << "the what-if records never arrived";
    auto* view = w.gpuFitView();
    auto* button = view->recordFurtherButton();
    // The fit table for the budget typed (the panel's budget rests before the table follows it).
    auto waitForFit = [&](int ms) {
        QElapsedTimer c;
        c.start();
        while (c.elapsed() < ms) {
            fitReady.clear();
            fitReady.wait(200);
            if (view->headerText().contains(QStringLiteral("600.0 MiB")) && view->answers()->rowCount() > 0
                && fitReady.isEmpty())
                return true;
        }
        return false;
    };
    w.whatIfPanel()->setBudget(QStringLiteral("600 MiB"));
    ASSERT_TRUE(waitForFit(20000)) << view->headerText().toStdString();
    const auto recordedBefore = w.whatIfController()->whatIf()->recordedBatches().back();
    ASSERT_FALSE(button->isHidden()) << view->notesText().toStdString();
    EXPECT_TRUE(button->text().startsWith(QStringLiteral("Record up to micro-batch "))) << button->text().toStdString();
    EXPECT_TRUE(view->notesText().contains(QStringLiteral("*: beyond the last record"))) << view->notesText().toStdString();
    const auto wanted = button->text().section(QLatin1Char(' '), -1).toLongLong();
    EXPECT_GT(wanted, recordedBefore);
    button->click();
    ASSERT_TRUE(waitForSignals(ready, 6 * kRunTimeoutMs, ready.count() + 1)) << "the records up to the answer never arrived";
    ASSERT_TRUE(waitForFit(20000)) << view->headerText().toStdString();
    EXPECT_GE(w.whatIfController()->whatIf()->recordedBatches().back(), wanted);
    EXPECT_TRUE(button->isHidden());
    EXPECT_FALSE(view->notesText().contains(QStringLiteral("*: beyond the last record"))) << view->notesText().toStdString();
    bool any = false;
    for (int r = 0; r < view->answers()->rowCount(); ++r)
        if (auto* cell = view->answers()->item(r, 4); cell && !cell->text().isEmpty()) {
            any = true;
            EXPECT_FALSE(cell->text().endsWith(QLatin1Char('*'))) << cell->text().toStdString();
        }
    EXPECT_TRUE(any);
}

// The What if panel's Checkpointing row on the GPT demo's AdamW step: each block checkpointed lowers the peak, the
// figures are the checkpointed what-if's (the same as the CLI's analyze --checkpoint), a rank and its Show this rank
// follow it, and the GPUs tab answers per checkpointing with the panel's rows those of the choice.
TEST(MainWindow, CheckpointingAndMicroBatchesRowsPredictTheStagedStep)
{
    if (!canRunExportedPrograms())
        GTEST_SKIP() << "this build's libtorch runs no torch.export programs (" << torchBuildInfo() << ")";
    recordFew();
    qtTestApp();
    MainWindow w;
    w.show();
    QSignalSpy ready(&w, &MainWindow::whatIfReady);
    QSignalSpy fitReady(&w, &MainWindow::gpuFitReady);
    w.openFile(QStringLiteral("demo:gpt-train.pt2"));
    ASSERT_TRUE(waitForReport(w)) << w.errorText().toStdString();
    ASSERT_TRUE(waitForSignals(ready, 3 * kRunTimeoutMs)) << "the what-if records never arrived";
    auto* panel = w.whatIfPanel();
    EXPECT_TRUE(panel->checkpointBox()->isVisibleTo(panel));
    panel->setDtype(QStringLiteral("float32"));
    panel->setBatch(8);
    const auto plain = panel->activeWhatIf()->predict(8, "float32", false);
    panel->setCheckpoint(QStringLiteral("full"));
    EXPECT_EQ(panel->activeWhatIf()->checkpoint().text(), "full");
    const auto full = panel->activeWhatIf()->predict(8, "float32", false);
    EXPECT_LT(full.predicted_peak_total_bytes, plain.predicted_peak_total_bytes);
    EXPECT_TRUE(panel->peakTotalText().startsWith(QString::fromStdString(formatBytes(full.predicted_peak_total_bytes))))
        << panel->peakTotalText().toStdString();
    // The same figure as the command line's analyze --checkpoint full at that batch.
    QTemporaryDir dir;
    const auto json = dir.filePath(QStringLiteral("gpt_train_full_checkpoint.json")).toStdString();
    auto r = memledger::test::runCommand(memledger::test::memledgerBinary()
        + " analyze demo:gpt-train.pt2 --batch 8 --optimizer " + w.report()->run.optimizer + " --checkpoint full --json '"
        + json + "'");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ifstream in(json);
    const auto cli = nlohmann::json::parse(in).value("peak_total_bytes", std::int64_t {0});
    EXPECT_NEAR(static_cast<double>(full.predicted_peak_total_bytes), static_cast<double>(cli), 0.01 * static_cast<double>(cli));
    panel->setCheckpoint(QStringLiteral("selective"));
    const auto selective = panel->activeWhatIf()->predict(8, "float32", false);
    EXPECT_LT(selective.predicted_peak_total_bytes, plain.predicted_peak_total_bytes);
    EXPECT_GT(selective.predicted_peak_total_bytes, full.predicted_peak_total_bytes);
    // A rank of FSDP on 4 GPUs, checkpointed, and Show this rank.
    panel->setCheckpoint(QStringLiteral("full"));
    panel->setGpus(4);
    auto plan = panel->rankPlan();
    ASSERT_TRUE(plan);
    auto rank = panel->activeWhatIf()->predictRank(panel->batch(), *plan, false);
    EXPECT_TRUE(panel->peakTotalText().startsWith(QString::fromStdString(formatBytes(rank.predicted_peak_total_bytes))))
        << panel->peakTotalText().toStdString();
    panel->requestRank();
    ASSERT_TRUE(w.report()->run.parallel);
    EXPECT_NEAR(static_cast<double>(w.report()->peak_total_bytes), static_cast<double>(rank.predicted_peak_total_bytes),
        0.001 * static_cast<double>(rank.predicted_peak_total_bytes));
    // The GPUs tab answers for the panel's Checkpointing row, and the panel's rows are those of its choice.
    panel->setBudget(QStringLiteral("64 MiB"));
    QElapsedTimer clock;
    clock.start();
    auto* view = w.gpuFitView();
    auto tabSays = [&](const QString& checkpoint) {
        if (!view->headerText().contains(QStringLiteral("64.00 MiB")) || view->answers()->rowCount() == 0)
            return false;
        for (int r = 0; r < view->answers()->rowCount(); ++r)
            if (view->answers()->item(r, 2)->text() != checkpoint)
                return false;
        return true;
    };
    while (clock.elapsed() < 30000 && !tabSays(QStringLiteral("full")))
        QTest::qWait(100);
    EXPECT_TRUE(tabSays(QStringLiteral("full"))) << view->headerText().toStdString();
    panel->setCheckpoint(QStringLiteral("none"));
    clock.restart();
    while (clock.elapsed() < 30000 && !tabSays(QStringLiteral("none")))
        QTest::qWait(100);
    EXPECT_TRUE(tabSays(QStringLiteral("none"))) << view->headerText().toStdString();
    clock.restart();
    while (panel->gpuFitText().isEmpty() && clock.elapsed() < 10000)
        QTest::qWait(50);
    EXPECT_TRUE(panel->gpuFitText().contains("fsdp")) << panel->gpuFitText().toStdString();
    // The Micro-batches row (gradient accumulation): one device's figures are the accumulated step's, as the command
    // line's analyze --grad-accum; a rank's are laid over with the plan's micro-steps, and Show this rank says so.
    EXPECT_TRUE(panel->gradAccumBox()->isVisibleTo(panel));
    panel->setCheckpoint(QStringLiteral("none"));
    panel->setGpus(1);
    panel->setShard(QString());
    const auto unaccumulated = panel->activeWhatIf()->predict(8, "float32", false);
    panel->setGradAccum(4);
    EXPECT_EQ(panel->activeWhatIf()->gradAccum(), 4);
    const auto accumulated = panel->activeWhatIf()->predict(8, "float32", false);
    EXPECT_GT(accumulated.predicted_peak_total_bytes, unaccumulated.predicted_peak_total_bytes);
    EXPECT_TRUE(panel->peakTotalText().startsWith(QString::fromStdString(formatBytes(accumulated.predicted_peak_total_bytes))))
        << panel->peakTotalText().toStdString();
    const auto accumulatedJson = dir.filePath(QStringLiteral("gpt_train_accumulated.json")).toStdString();
    r = memledger::test::runCommand(memledger::test::memledgerBinary() + " analyze demo:gpt-train.pt2 --batch 8 --optimizer "
        + w.report()->run.optimizer + " --grad-accum 4 --json '" + accumulatedJson + "'");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ifstream accumulatedIn(accumulatedJson);
    const auto accumulatedCli = nlohmann::json::parse(accumulatedIn).value("peak_total_bytes", std::int64_t {0});
    EXPECT_NEAR(static_cast<double>(accumulated.predicted_peak_total_bytes), static_cast<double>(accumulatedCli),
        0.01 * static_cast<double>(accumulatedCli));
    // A rank of FSDP on 4 GPUs: its micro-steps, and Show this rank.
    panel->setGpus(4);
    plan = panel->rankPlan();
    ASSERT_TRUE(plan);
    EXPECT_EQ(plan->grad_accum, 4);
    rank = panel->activeWhatIf()->predictRank(panel->batch(), *plan, false);
    auto single = *plan;
    single.grad_accum = 1;
    // The stage's micro-steps whatever the plan says; without them the rank keeps no gradients between micro-steps.
    EXPECT_EQ(panel->activeWhatIf()->predictRank(panel->batch(), single, false).predicted_peak_total_bytes,
        rank.predicted_peak_total_bytes);
    panel->setGradAccum(1);
    EXPECT_LT(panel->activeWhatIf()->predictRank(panel->batch(), single, false).predicted_peak_total_bytes,
        rank.predicted_peak_total_bytes);
    panel->setGradAccum(4);
    panel->requestRank();
    ASSERT_TRUE(w.report()->run.parallel);
    EXPECT_EQ(w.report()->run.grad_accum, 4);
    EXPECT_NEAR(static_cast<double>(w.report()->peak_total_bytes), static_cast<double>(rank.predicted_peak_total_bytes),
        0.001 * static_cast<double>(rank.predicted_peak_total_bytes));
    // The CPU offload row: the rank's shards, gradients and optimizer state on the host, and Show this rank says so.
    panel->setOffload(true);
    plan = panel->rankPlan();
    ASSERT_TRUE(plan);
    EXPECT_EQ(plan->offload, "params");
    const auto offloaded = panel->activeWhatIf()->predictRank(panel->batch(), *plan, false);
    EXPECT_GT(offloaded.host_bytes, 0);
    EXPECT_LT(offloaded.predicted_peak_total_bytes, rank.predicted_peak_total_bytes);
    panel->requestRank();
    ASSERT_TRUE(w.report()->run.parallel);
    EXPECT_EQ(w.report()->run.parallel->offload, "params");
    EXPECT_EQ(w.report()->run.parallel->host_bytes, offloaded.host_bytes);
    panel->setShard(QStringLiteral("ddp")); // DDP has no CPUOffloadPolicy: the row asks nothing of it
    EXPECT_EQ(panel->offload(), "");
}

// The Run panel's Device choice lists the CPU, then every CUDA GPU this libtorch sees (here, without a GPU or
// in the Debian build, the CPU alone); the run takes the chosen one.
TEST(Window, DeviceChoiceListsWhatThisMachineHas)
{
    qtTestApp();
    MainWindow w;
    auto* box = w.runPanel()->deviceBox();
    const auto devices = availableDevices();
    ASSERT_EQ(box->count(), static_cast<int>(devices.size()) + 1); // and meta, last
    EXPECT_EQ(box->itemData(0).toString(), QStringLiteral("cpu"));
    EXPECT_EQ(box->itemData(box->count() - 1).toString(), QStringLiteral("meta"));
    // Meta is offered where it runs; the libtorch 1.13 build lists it disabled, and cannot choose it.
    EXPECT_EQ(w.runPanel()->setDevice("meta"), metaRunsSupported());
    w.runPanel()->setDevice("cpu");
    for (int i = 1; i + 1 < box->count(); ++i)
        EXPECT_TRUE(box->itemText(i).contains(QString::fromStdString(devices[static_cast<std::size_t>(i)].name)));
    EXPECT_EQ(w.runPanel()->options().device, "cpu");
}

// Meta, picked in the Run panel: the run and its what-if are on meta, and every view says its figures come from
// shapes (the badge, the status, the what-if's tags); the budget presets name the common GPUs.
TEST(Window, MetaRunIsShownAsComputedFromShapes)
{
    if (!canRunExportedPrograms() || !metaRunsSupported())
        GTEST_SKIP() << "this build's libtorch runs no torch.export programs or meta runs (" << torchBuildInfo() << ")";
    qtTestApp();
    MainWindow w;
    w.show();
    auto* box = w.runPanel()->deviceBox();
    int meta = box->findData(QStringLiteral("meta"));
    ASSERT_GE(meta, 0);
    box->setCurrentIndex(meta);
    QSignalSpy ready(&w, &MainWindow::whatIfReady);
    w.openFile(QStringLiteral("demo:gpt.pt2"));
    ASSERT_TRUE(waitForReport(w)) << w.errorText().toStdString();
    ASSERT_TRUE(w.report());
    EXPECT_EQ(reportToJson(*w.report(), false)["run"]["device"], "meta");
    const auto badge = QString::fromUtf8(kMetaRunBadge);
    EXPECT_EQ(w.ledgerSummary()->metaBadgeText(), badge);
    EXPECT_TRUE(w.ledgerSummary()->summaryText().contains(QStringLiteral("computed on meta")));
    EXPECT_TRUE(w.runPanel()->status().contains(QStringLiteral("on meta (shapes only)")))
        << w.runPanel()->status().toStdString();

    ASSERT_TRUE(waitForSignals(ready, 3 * kRunTimeoutMs)) << "the what-if records never arrived";
    auto* whatIf = w.whatIfPanel();
    ASSERT_TRUE(whatIf->activeWhatIf());
    EXPECT_EQ(whatIf->activeWhatIf()->device(), "meta");
    EXPECT_EQ(whatIf->batch(), w.report()->run.batch); // a recorded batch: on cpu it would say "measured"
    EXPECT_TRUE(whatIf->peakTotalText().contains(QStringLiteral("computed on meta")))
        << whatIf->peakTotalText().toStdString();
    EXPECT_FALSE(whatIf->peakTotalText().contains(QStringLiteral("(measured)")));

    QStringList presets;
    for (int i = 0; i < whatIf->budgetBox()->count(); ++i)
        presets << whatIf->budgetBox()->itemText(i);
    // The GPUs by name, at the memory PyTorch reports for them (the same table as --budget).
    for (const char* gpu : {"16 GiB", "H200 (139.7 GiB)", "H100-80GB (79.10 GiB)", "A100-40GB (39.39 GiB)", "4090 (23.64 GiB)"})
        EXPECT_TRUE(presets.join(QLatin1Char('|')).contains(QLatin1String(gpu))) << gpu << ": " << presets.join(QLatin1Char('|')).toStdString();
    whatIf->budgetBox()->setCurrentIndex(whatIf->budgetBox()->findText(QStringLiteral("H100-80GB (79.10 GiB)")));
    EXPECT_EQ(whatIf->budget(), *parseBudget("H100-80GB"));
    whatIf->budgetBox()->setEditText(QStringLiteral("a100 40gb"));
    EXPECT_EQ(whatIf->budget(), *parseBudget("A100-40GB"));
}

