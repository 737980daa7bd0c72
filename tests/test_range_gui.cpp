// The range gesture on the timeline, and the snapshot views of their own (tree columns, peak panel, a snapshot
// without a trace, a trace without timestamps), with the window offscreen. Truths: sums over the trace made
// here, and real snapshots read by Python's pickle (tests/range_truths.py).
#include "layer_tree_model.h"
#include "layer_tree_panel.h"
#include "ledger_summary.h"
#include "main_window.h"
#include "qt_test_app.h"
#include "window_wait.h"
#include "segment_timeline.h"
#include "timeline_plot.h"

#include "analysis/report_range.h"
#include "snapshot/snapshot.h"
#include "support/format.h"

#include "run_command.h"
#include "synthetic_report.h"

#include <QDir>
#include <QImage>
#include <QTemporaryDir>
#include <QSignalSpy>
#include <QTest>
#include <QTreeView>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace memledger;
using namespace memledger::test;

namespace {

QString snapshotPath(const char* name)
{
    return QStringLiteral(MEMLEDGER_SNAPSHOTS "/") + QString::fromUtf8(name);
}

#define SKIP_WITHOUT_SNAPSHOTS()                                                                                   \
    if (!QDir(QStringLiteral(MEMLEDGER_SNAPSHOTS)).exists())                                                       \
    GTEST_SKIP() << "no snapshot folder at " << MEMLEDGER_SNAPSHOTS

nlohmann::json pythonTruths(const char* file)
{
    auto r = runCommand("/usr/bin/python3 " + std::string(MEMLEDGER_SOURCE_DIR) + "/tests/range_truths.py "
        + snapshotPath(file).toStdString());
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return nlohmann::json::parse(r.output);
}

QPoint pixelAt(TimelinePlot& plot, double key)
{
    return {static_cast<int>(plot.xAxis->coordToPixel(key)), plot.axisRect()->rect().center().y()};
}

void saveScreenshot(QWidget& w, const char* name)
{
    auto dir = qEnvironmentVariable("MEMLEDGER_TEST_SCREENSHOTS");
    QTest::qWait(300); // queued replots and layouts first
    if (!dir.isEmpty())
        w.grab().save(dir + QLatin1Char('/') + QString::fromUtf8(name));
}

} // namespace

TEST(RangeGesture, CtrlDragSelectsARangeShadedUntilEscClearsIt)
{
    qtTestApp();
    TimelinePlot plot;
    plot.resize(900, 400);
    auto report = std::make_shared<const Report>(makeSyntheticReport(400));
    plot.setReport(report);
    plot.show();
    plot.replot();
    QSignalSpy changed(&plot, &TimelinePlot::rangeChanged);
    const auto& keys = plot.series().keys;
    const double a = keys[keys.size() / 4], b = keys[keys.size() / 2];
    auto from = pixelAt(plot, a), to = pixelAt(plot, b);
    const auto xBefore = plot.xAxis->range();

    QTest::mousePress(&plot, Qt::LeftButton, Qt::ControlModifier, from);
    QMouseEvent move(QEvent::MouseMove, to, plot.mapToGlobal(to), Qt::NoButton, Qt::LeftButton, Qt::ControlModifier);
    QApplication::sendEvent(&plot, &move);
    QTest::mouseRelease(&plot, Qt::LeftButton, Qt::ControlModifier, to);

    ASSERT_EQ(changed.size(), 1);
    EXPECT_TRUE(plot.hasRange());
    // The events between the two keys, as the pixels round them.
    auto expected = plot.eventsBetween(plot.xAxis->pixelToCoord(from.x()), plot.xAxis->pixelToCoord(to.x()));
    EXPECT_EQ(plot.rangeFirst(), expected.first);
    EXPECT_EQ(plot.rangeEnd(), expected.second);
    EXPECT_GT(plot.rangeEnd(), plot.rangeFirst() + 10);
    EXPECT_EQ(plot.xAxis->range(), xBefore); // the drag did not pan
    auto shade = plot.rangeShade();
    EXPECT_DOUBLE_EQ(shade.lower, keys[plot.rangeFirst() + 1]);
    EXPECT_DOUBLE_EQ(shade.upper, keys[plot.rangeEnd()]);
    EXPECT_FALSE(plot.rangeText().isEmpty());

    // Esc clears it.
    plot.setFocus();
    QTest::keyClick(&plot, Qt::Key_Escape);
    EXPECT_FALSE(plot.hasRange());
    ASSERT_EQ(changed.size(), 2);
    EXPECT_EQ(changed.back().at(0).toUInt(), 0u);
    EXPECT_EQ(plot.rangeShade().size(), 0.0);

    // In range mode a plain drag selects too; without it a plain drag pans.
    plot.setRangeMode(true);
    QTest::mousePress(&plot, Qt::LeftButton, Qt::NoModifier, from);
    QMouseEvent move2(QEvent::MouseMove, to, plot.mapToGlobal(to), Qt::NoButton, Qt::LeftButton, Qt::NoModifier);
    QApplication::sendEvent(&plot, &move2);
    QTest::mouseRelease(&plot, Qt::LeftButton, Qt::NoModifier, to);
    EXPECT_TRUE(plot.hasRange());
    // A new report clears the range.
    plot.setReport(report);
    EXPECT_FALSE(plot.hasRange());
    EXPECT_EQ(changed.back().at(1).toUInt(), 0u);
}

// A model run in the window: a range recomputes the tree and the peak panel, the status says so, and clearing
// it brings the whole run back.
TEST(RangeWindow, ARangeRecomputesTheTreeAndThePeakPanel)
{
    qtTestApp();
    MainWindow w;
    ASSERT_TRUE(openAndWait(w, QStringLiteral("demo:mnist-train.pt"))) << w.errorText().toStdString();
    auto whole = w.report();
    const Trace& t = *whole->trace;
    const auto n = static_cast<std::uint32_t>(t.size());
    ASSERT_GT(n, 20u);
    // The backward phase's events: what it allocates, by hand.
    const Phase* backward = nullptr;
    for (const auto& p : whole->phases)
        if (p.name == "backward")
            backward = &p;
    ASSERT_TRUE(backward);
    std::int64_t gradients = 0, peak = backward->first_event > 0 ? 0 : 0;
    std::int64_t live = 0;
    for (std::uint32_t i = 0; i < backward->end_event; ++i) {
        if (t.action[i] == Action::Alloc)
            live += t.bytes[i];
        else if (t.action[i] == Action::Free)
            live -= t.bytes[i];
        if (i + 1 == backward->first_event)
            peak = live;
        if (i >= backward->first_event) {
            peak = std::max(peak, live);
            if (t.action[i] == Action::Alloc && t.ledger[i] == Ledger::Gradients)
                gradients += t.bytes[i];
        }
    }
    w.timeline()->setRange(backward->first_event, backward->end_event);
    auto range = w.rangeReport();
    ASSERT_TRUE(range);
    EXPECT_EQ(w.layerTree()->model()->report(), range);
    EXPECT_EQ(range->ledgers[static_cast<std::size_t>(Ledger::Gradients)].total, gradients);
    EXPECT_EQ(range->peak_bytes, peak);
    EXPECT_EQ(range->peak_total_bytes,
        whole->weight_bytes + whole->optimizer_state_bytes + whole->input_bytes + peak
            + (whole->gpu ? whole->gpu->library_bytes : 0));
    EXPECT_TRUE(w.ledgerSummary()->summaryText().contains(QStringLiteral("peak of the range")));
    EXPECT_TRUE(w.rangeStatusText().startsWith(QStringLiteral("Range ")));
    w.layerTree()->view()->expandAll();
    saveScreenshot(w, "range-model-1400x900.png");
    w.resize(1280, 720);
    QApplication::processEvents();
    saveScreenshot(w, "range-model-1280x720.png");

    w.timeline()->clearRange();
    EXPECT_FALSE(w.rangeReport());
    EXPECT_EQ(w.layerTree()->model()->report(), whole);
    EXPECT_TRUE(w.rangeStatusText().isEmpty());
}

// A snapshot's tree has its own columns: at the peak, allocated in total, count, largest block, and the ledger
// columns of a training step's gradients and saved activations.
TEST(SnapshotViews, TheTreeHasTheSnapshotsOwnColumns)
{
    SKIP_WITHOUT_SNAPSHOTS();
    qtTestApp();
    MainWindow w;
    ASSERT_TRUE(openAndWait(w, snapshotPath("many-segments.pickle"))) << w.errorText().toStdString();
    auto* model = w.layerTree()->model();
    auto* view = w.layerTree()->view();
    QStringList shown;
    for (int c = 0; c < LayerTreeModel::ColumnCount; ++c)
        if (!view->isColumnHidden(c))
            shown << model->headerData(c, Qt::Horizontal).toString();
    EXPECT_EQ(shown,
        QStringList({"Module (forward frames)", "Type", "At the peak", "Allocated in total", "Count", "Largest block",
            "Gradients", "Saved for backward"}));
    const auto& r = *w.report();
    auto root = model->index(0, 0);
    EXPECT_EQ(model->index(0, LayerTreeModel::AtPeak).data(LayerTreeModel::SortRole).toLongLong(), r.peak_bytes);
    std::int64_t allocs = 0;
    for (std::size_t i = 0; i < r.trace->size(); ++i)
        allocs += r.trace->action[i] == Action::Alloc;
    EXPECT_EQ(model->index(0, LayerTreeModel::BlockCount).data().toString(), QString::number(allocs));
    EXPECT_GT(model->rowCount(root), 0);

    // A range of the snapshot: the tree counts what it allocated.
    w.timeline()->setRange(1000, 3000);
    ASSERT_TRUE(w.rangeReport());
    std::int64_t inRange = 0;
    for (std::size_t i = 1000; i < 3000; ++i)
        inRange += r.trace->action[i] == Action::Alloc;
    EXPECT_EQ(model->index(0, LayerTreeModel::BlockCount).data().toString(), QString::number(inRange));
    EXPECT_FALSE(w.rangeStatusText().isEmpty());
    w.tabs()->setCurrentIndex(0);
    view->expandToDepth(1);
    saveScreenshot(w, "range-snapshot-1400x900.png");
}

// The peak panel of a snapshot: the peak and the end apart, per device, never contradicting the segment chart.
TEST(SnapshotViews, ThePeakPanelFollowsTheDeviceAndTheChart)
{
    SKIP_WITHOUT_SNAPSHOTS();
    qtTestApp();
    auto truth = pythonTruths("oom-expandable-segments.pickle");
    MainWindow w;
    ASSERT_TRUE(openAndWait(w, snapshotPath("oom-expandable-segments.pickle"))) << w.errorText().toStdString();
    auto* summary = w.ledgerSummary();
    auto bytes = [](const nlohmann::json& v) { return QString::fromStdString(formatBytes(v.get<std::int64_t>())); };
    std::int64_t reserved = 0, allocated = 0;
    for (const auto& [dev, d] : truth["devices"].items()) {
        reserved += d["reserved"].get<std::int64_t>();
        allocated += d["allocated"].get<std::int64_t>();
    }
    auto text = summary->summaryText();
    EXPECT_TRUE(text.contains(QStringLiteral("At the peak: %1").arg(bytes(w.report()->peak_bytes)))) << text.toStdString();
    EXPECT_TRUE(text.contains(QStringLiteral("At the end: %1 reserved").arg(bytes(reserved)))) << text.toStdString();
    EXPECT_TRUE(text.contains(QStringLiteral("cached, not allocated (the allocator's reserve): %1").arg(
        QString::fromStdString(formatBytes(reserved - allocated)))));
    for (const auto& [dev, d] : truth["devices"].items()) {
        int device = std::stoi(dev);
        w.setDevice(device);
        EXPECT_EQ(summary->device(), device);
        text = summary->summaryText();
        SCOPED_TRACE(text.toStdString());
        EXPECT_TRUE(text.contains(QStringLiteral("At the end (cuda:%1): %2 reserved").arg(device).arg(bytes(d["reserved"]))));
        const auto frag = d["reserved"].get<std::int64_t>() - d["allocated"].get<std::int64_t>();
        EXPECT_TRUE(text.contains(
            QStringLiteral("cached, not allocated (the allocator's reserve): %1")
                .arg(QString::fromStdString(formatBytes(frag)))));
        // The peak on this device is the top of the timeline's stack for it.
        EXPECT_TRUE(text.contains(QStringLiteral("At the peak (cuda:%1): %2")
                                      .arg(device)
                                      .arg(QString::fromStdString(
                                          formatBytes(static_cast<std::int64_t>(w.timeline()->series().peak_value))))));
        // The segment chart's fragmentation at the end is the panel's with the blocks' rounding (the chart counts
        // the bytes requested, as the trace does), and neither says there is none.
        const auto& h = w.segmentTimeline()->history();
        const auto rounding = d["allocated"].get<std::int64_t>() - d["requested"].get<std::int64_t>();
        if (rounding > 0)
            EXPECT_TRUE(text.contains(QStringLiteral("rounded up into blocks: %1").arg(QString::fromStdString(formatBytes(rounding)))));
        EXPECT_EQ(static_cast<std::int64_t>(h.fragmentation.back()), frag + rounding);
        if (frag > 0) {
            EXPECT_FALSE(text.contains(QStringLiteral("No fragmentation"), Qt::CaseInsensitive));
            EXPECT_FALSE(w.segmentTimeline()->causeText().contains(QStringLiteral("No fragmentation")));
        }
    }
    saveScreenshot(w, "snapshot-panel-1400x900.png");
}

// A snapshot without a trace: the state at the end, not "No allocation events"; a trace without timestamps:
// its axis is the events' order.
TEST(SnapshotViews, NoTraceShowsTheEndStateAndNoTimestampsShowOrder)
{
    SKIP_WITHOUT_SNAPSHOTS();
    qtTestApp();
    auto truth = pythonTruths("bare-segment-list.pkl");
    MainWindow w;
    ASSERT_TRUE(openAndWait(w, snapshotPath("bare-segment-list.pkl"))) << w.errorText().toStdString();
    auto* plot = w.timeline();
    EXPECT_TRUE(plot->showsEndStateOnly());
    EXPECT_FALSE(plot->emptyText().contains(QStringLiteral("No allocation events")));
    EXPECT_TRUE(plot->emptyText().contains(QString::fromStdString(formatBytes(truth["allocated"].get<std::int64_t>()))))
        << plot->emptyText().toStdString();
    EXPECT_EQ(plot->yAxis->range().upper >= static_cast<double>(truth["allocated"].get<std::int64_t>()), true);
    EXPECT_TRUE(plot->xAxis->label().contains(QStringLiteral("the state at the end")));
    auto* model = w.layerTree()->model();
    EXPECT_EQ(model->index(0, LayerTreeModel::AtPeak).data(LayerTreeModel::SortRole).toLongLong(),
        truth["allocated"].get<std::int64_t>());
    EXPECT_GT(model->rowCount(model->index(0, 0)), 1); // grouped by the blocks' frames
    auto text = w.ledgerSummary()->summaryText();
    EXPECT_FALSE(text.contains(QStringLiteral("At the peak")));
    EXPECT_TRUE(text.contains(QStringLiteral("no trace")));
    w.tabs()->setCurrentIndex(0);
    saveScreenshot(w, "no-trace-1400x900.png");

    w.openFile(snapshotPath("torch-2.1-era-format.pickle"));
    ASSERT_TRUE(waitForReport(w)) << w.errorText().toStdString();
    EXPECT_FALSE(plot->xAxis->label().contains(QStringLiteral("ms")));
    EXPECT_TRUE(plot->xAxis->label().contains(QStringLiteral("order")));
    EXPECT_FALSE(plot->showsEndStateOnly());
    QTemporaryDir dir;
    auto png = dir.filePath(QStringLiteral("t.png"));
    EXPECT_TRUE(w.exportTimelinePng(png).isEmpty());
    EXPECT_FALSE(QImage(png).isNull());
    saveScreenshot(w, "no-time-1400x900.png");
}
