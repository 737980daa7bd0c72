// The call-stack views: the call tree, the stack pane, the flame graph, the timeline's hover, and the window
// with a real snapshot (its tabs) and without stacks (a model run: the views stay hidden or say so).
#include "call_tree_hand_trace.h"
#include "run_command.h"
#include "call_tree_view.h"
#include "flame_graph.h"
#include "main_window.h"
#include "qt_test_app.h"
#include "window_wait.h"
#include "segment_map_view.h"
#include "stack_pane.h"
#include "synthetic_report.h"
#include "timeline_plot.h"

#include "snapshot/snapshot.h"
#include "snapshot/snapshot_contexts.h"

#include <QAbstractItemModelTester>
#include <QComboBox>
#include <QDir>
#include <QDockWidget>
#include <QFile>
#include <QFont>
#include <QHeaderView>
#include <QLineEdit>
#include <QSignalSpy>
#include <QSortFilterProxyModel>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QTest>
#include <QTreeView>

#include <QCheckBox>

#include <gtest/gtest.h>

using namespace memledger;
using memledger::test::HandTrace;

namespace {

std::shared_ptr<const Report> handReport()
{
    HandTrace h;
    auto r = std::make_shared<Report>();
    r->source = ReportSource::Snapshot;
    r->trace = std::make_shared<Trace>(std::move(h.t));
    return r;
}

// MEMLEDGER_SNAPSHOTS in the environment names another folder (a worktree's ../shared is elsewhere).
QString snapshotPath(const char* name)
{
    auto env = qEnvironmentVariable("MEMLEDGER_SNAPSHOTS");
    return (env.isEmpty() ? QStringLiteral(MEMLEDGER_SNAPSHOTS) : env) + QStringLiteral("/") + QString::fromLatin1(name);
}

// Rows under `parent` of the view's proxy, by their Frame column's full text (SortRole).
QModelIndex childNamed(const QSortFilterProxyModel* proxy, const QModelIndex& parent, const QString& text)
{
    for (int r = 0; r < proxy->rowCount(parent); ++r) {
        auto i = proxy->index(r, 0, parent);
        if (i.data(CallTreeModel::SortRole).toString() == text)
            return i;
    }
    return {};
}

qlonglong cell(const QSortFilterProxyModel* proxy, const QModelIndex& row, int column)
{
    return proxy->index(row.row(), column, row.parent()).data(CallTreeModel::SortRole).toLongLong();
}

} // namespace

TEST(CallTreeView, ShowsTheHandTraceSumsBothWays)
{
    qtTestApp();
    CallTreeView view;
    QAbstractItemModelTester tester(view.model(), QAbstractItemModelTester::FailureReportingMode::Warning);
    view.setFrames(CallTreeFrames::All);
    view.setReport(handReport());
    ASSERT_TRUE(view.hasStacks());
    auto* proxy = view.proxy();
    auto root = proxy->index(0, 0);
    EXPECT_EQ(cell(proxy, root, CallTreeModel::Allocated), 410);
    EXPECT_EQ(cell(proxy, root, CallTreeModel::AtPeak), 280);
    EXPECT_EQ(cell(proxy, root, CallTreeModel::Count), 6);
    EXPECT_EQ(cell(proxy, root, CallTreeModel::Largest), 200);
    auto mod = childNamed(proxy, root, QStringLiteral("/home/u/train.py:5 <module>"));
    ASSERT_TRUE(mod.isValid());
    EXPECT_EQ(cell(proxy, mod, CallTreeModel::Allocated), 200);
    EXPECT_EQ(cell(proxy, mod, CallTreeModel::AtPeak), 80);
    EXPECT_EQ(mod.data(Qt::DisplayRole).toString(), QStringLiteral("u/train.py:5 <module>")); // folders shortened
    EXPECT_TRUE(mod.data(Qt::FontRole).value<QFont>().bold()); // user code

    // Sorting by bytes allocated, ascending: "(no stack)" (10 B) first.
    view.view()->sortByColumn(CallTreeModel::Allocated, Qt::AscendingOrder);
    EXPECT_EQ(proxy->index(0, 0, root).data(CallTreeModel::SortRole).toString(), QStringLiteral("(no stack)"));

    // The filter keeps a match and its parents.
    view.filterEdit()->setText(QStringLiteral("model.py:12"));
    ASSERT_EQ(proxy->rowCount(root), 1);
    EXPECT_EQ(proxy->index(0, 0, root).data(CallTreeModel::SortRole).toString(),
        QStringLiteral("/home/u/train.py:5 <module>"));
    view.filterEdit()->clear();

    // Bottom-up, Python and ATen ops: the ops are the roots.
    view.setBottomUp(true);
    view.setFrames(CallTreeFrames::PythonAndOps);
    root = proxy->index(0, 0);
    auto mm = childNamed(proxy, root, QStringLiteral("aten::mm"));
    ASSERT_TRUE(mm.isValid());
    EXPECT_EQ(cell(proxy, mm, CallTreeModel::Allocated), 200);
    EXPECT_EQ(proxy->rowCount(mm), 0);
    auto mul = childNamed(proxy, root, QStringLiteral("aten::mul"));
    ASSERT_TRUE(mul.isValid());
    EXPECT_EQ(cell(proxy, mul, CallTreeModel::Largest), 100);
    EXPECT_EQ(view.model()->headerData(CallTreeModel::Frame, Qt::Horizontal).toString(),
        QStringLiteral("Allocating frame, then its callers"));

    // Selecting a node hands its frames (innermost first) to whoever shows stacks.
    QSignalSpy selected(&view, &CallTreeView::nodeSelected);
    auto fwd = childNamed(proxy, mul, QStringLiteral("/home/u/model.py:10 forward"));
    ASSERT_TRUE(fwd.isValid());
    view.view()->setCurrentIndex(fwd);
    ASSERT_EQ(selected.size(), 1);
    auto frames = selected.at(0).at(1).value<std::vector<CallTreeLabel>>();
    ASSERT_EQ(frames.size(), 2u);
    EXPECT_EQ(frames[0].text, "aten::mul");
    EXPECT_EQ(frames[1].text, "/home/u/model.py:10 forward");
}

TEST(CallTreeView, ATraceWithoutStacksSaysSo)
{
    qtTestApp();
    auto model = std::make_shared<Report>(makeSyntheticReport(200));
    CallTreeView view;
    view.setReport(model);
    EXPECT_FALSE(view.hasStacks());
    FlameGraph flame;
    flame.setReport(model);
    EXPECT_TRUE(flame.headline().contains(QStringLiteral("No call stacks")));
}

TEST(StackPane, ListsEveryFrameOfAnAllocation)
{
    qtTestApp();
    StackPane pane;
    pane.setReport(handReport());
    pane.showAllocation(0); // 100 B with stack A: unwinder, allocator, mul, model.py:10, train.py:5
    // The Python frames first, innermost first, then the C++ ones in their order.
    ASSERT_EQ(pane.frameCount(), 5);
    EXPECT_EQ(pane.frameText(0), QStringLiteral("u/model.py:10 forward"));
    EXPECT_TRUE(pane.frameIsUser(0));
    EXPECT_TRUE(pane.frameIsUser(1));
    EXPECT_EQ(pane.frameText(2), QStringLiteral("torch::unwind::unwind()"));
    EXPECT_FALSE(pane.frameIsUser(2));
    EXPECT_FALSE(pane.frameIsUser(4));
    // Python frames only: the two .py frames.
    pane.pythonOnlyBox()->setChecked(true);
    ASSERT_EQ(pane.frameCount(), 2);
    EXPECT_EQ(pane.frameText(1), QStringLiteral("u/train.py:5 <module>"));
    pane.pythonOnlyBox()->setChecked(false);
    EXPECT_EQ(pane.frameCount(), 5);
    EXPECT_TRUE(pane.title().contains(QStringLiteral("100 B")));
    pane.showAllocation(4); // the free of event 0: its allocation's stack
    EXPECT_EQ(pane.frameCount(), 5);
    pane.showAllocation(9); // no stack
    EXPECT_EQ(pane.frameCount(), 1);
    EXPECT_TRUE(pane.frameText(0).contains(QStringLiteral("no stack")));
}

TEST(StackPane, TooltipTrimsALongStack)
{
    Trace t;
    std::vector<std::uint32_t> frames;
    frames.push_back(t.stacks.internFrame(t.strings.intern("??"), 0, t.strings.intern("torch::unwind::unwind()")));
    for (int i = 0; i < 20; ++i)
        frames.push_back(t.stacks.internFrame(t.strings.intern("/home/u/deep.py"), i + 1, t.strings.intern("f")));
    auto stack = t.stacks.internStack(frames);
    auto html = stackTooltipHtml(t, stack, 12);
    EXPECT_FALSE(html.contains(QStringLiteral("unwind"))); // the unwinder's frame is left out
    EXPECT_TRUE(html.contains(QStringLiteral("deep.py:12 f")));
    EXPECT_FALSE(html.contains(QStringLiteral("deep.py:13 f")));
    EXPECT_TRUE(html.contains(QStringLiteral("8 more frames")));
    EXPECT_TRUE(stackTooltipHtml(t, 0).isEmpty());
}

TEST(FlameGraph, BoxesAreAsWideAsTheBytesAlive)
{
    qtTestApp();
    FlameGraph flame;
    flame.resize(801, 300);
    flame.setFrames(CallTreeFrames::All);
    flame.setReport(handReport());
    const CallTree* tree = flame.tree();
    ASSERT_NE(tree, nullptr);
    EXPECT_EQ(tree->nodes[0].alive, 280); // the peak
    auto rootRect = flame.nodeRect(0);
    std::int32_t engine = -1, mod = -1;
    for (auto c : tree->nodes[0].children) {
        if (tree->text(c) == "engine.cpp:0 torch::autograd::Engine::thread_main()")
            engine = c;
        if (tree->text(c) == "/home/u/train.py:5 <module>")
            mod = c;
    }
    ASSERT_GE(engine, 0);
    ASSERT_GE(mod, 0);
    EXPECT_NEAR(flame.nodeRect(engine).width() / rootRect.width(), 200.0 / 280.0, 1e-6);
    EXPECT_NEAR(flame.nodeRect(mod).width() / rootRect.width(), 80.0 / 280.0, 1e-6);
    EXPECT_LT(flame.nodeRect(0).top(), flame.nodeRect(mod).top()); // callees below

    // A click zooms to a frame; it then spans the width. A click on it again zooms out.
    QSignalSpy clicked(&flame, &FlameGraph::nodeClicked);
    QTest::mouseClick(&flame, Qt::LeftButton, {}, flame.nodeRect(mod).center().toPoint());
    EXPECT_EQ(flame.zoomedNode(), mod);
    EXPECT_NEAR(flame.nodeRect(mod).width(), rootRect.width(), 1e-6);
    EXPECT_EQ(clicked.size(), 1);
    QTest::mouseClick(&flame, Qt::LeftButton, {}, flame.nodeRect(mod).center().toPoint());
    EXPECT_EQ(flame.zoomedNode(), 0);

    // Another moment: after 8 events (event 7 freed the engine's 200 bytes).
    flame.setMoment(8);
    EXPECT_EQ(flame.tree()->moment, 7);
    EXPECT_EQ(flame.tree()->nodes[0].alive, 80);
    EXPECT_TRUE(flame.nodeRect(engine).isEmpty() || flame.tree()->nodes[static_cast<std::size_t>(engine)].alive == 0);
    QImage image(flame.size(), QImage::Format_RGB32);
    flame.render(&image);
    EXPECT_GT(pixelsUnlike(image, image.pixel(0, 0)), 1000);
}

TEST(SnapshotWindow, CallStackViewsShowARealSnapshot)
{
    qtTestApp();
    auto path = snapshotPath("segment-alloc-and-free.pickle");
    if (!QFile::exists(path))
        GTEST_SKIP() << "no snapshot at " << path.toStdString();
    MainWindow w;
    w.show();
    w.openFile(path);
    ASSERT_TRUE(waitForReport(w));
    auto* tabs = w.tabs();
    int tree = tabs->indexOf(w.callTree());
    ASSERT_GE(tree, 0);
    EXPECT_TRUE(tabs->isTabVisible(tree));
    EXPECT_TRUE(w.stackDock()->isVisible());
    // Every allocation of this trace has frames: the tree's total is the trace's, which the README counts
    // (1023 allocs).
    auto root = w.callTree()->proxy()->index(0, 0);
    EXPECT_EQ(cell(w.callTree()->proxy(), root, CallTreeModel::Count), 1023);
    EXPECT_EQ(w.flameGraph()->tree()->moment, w.report()->peak_event); // the flame graph starts at the peak

    // Hovering the lowest allocation of the lowest ledger band the trace allocates in at the peak lists its stack,
    // trimmed; a click there shows it whole.
    auto* plot = w.timeline();
    const auto& s = plot->series();
    const auto p = s.pointAt(s.peak_key);
    double y = 0;
    QString text;
    for (int band : TimelineSeries::kStackOrder) {
        if (band == static_cast<int>(Ledger::Resident)
            || s.tops[static_cast<std::size_t>(band)][p] <= s.bottomOf(band, p))
            continue;
        y = s.bottomOf(band, p) + 1.0;
        text = plot->describeAt(s.peak_key, y);
        break;
    }
    EXPECT_TRUE(text.contains(QStringLiteral("call stack"))) << text.toStdString();
    EXPECT_TRUE(text.contains(QStringLiteral("more frames"))) << text.toStdString();
    QSignalSpy clicked(plot, &TimelinePlot::allocationClicked);
    QPoint at(
        static_cast<int>(plot->xAxis->coordToPixel(s.peak_key)), static_cast<int>(plot->yAxis->coordToPixel(y)) - 1);
    QTest::mouseClick(plot, Qt::LeftButton, {}, at);
    ASSERT_EQ(clicked.size(), 1);
    EXPECT_GT(w.stackPane()->frameCount(), 40); // the whole stack (80-odd frames)

    // The segment map's hover lists a block's stack too.
    auto* map = w.segmentMap();
    bool listed = false;
    for (int b = 0; b < map->barCount() && !listed; ++b) {
        auto bar = map->barRect(b);
        for (int x = bar.left() + 1; x < bar.right() && !listed; x += 2)
            listed = map->describeAt(QPoint(x, bar.center().y())).contains(QStringLiteral("call stack"));
    }
    EXPECT_TRUE(listed);
}

TEST(ModelWindow, NoCallStackViewsForAModelRun)
{
    qtTestApp();
    MainWindow w;
    w.show();
    w.openDemo();
    ASSERT_TRUE(waitForReport(w, 300000));
    EXPECT_FALSE(w.tabs()->isTabVisible(w.tabs()->indexOf(w.callTree())));
    EXPECT_FALSE(w.stackDock()->isVisible());
}

TEST(SnapshotWindow, TheCallTreeGroupsByUserMetadataAndCompileContext)
{
    qtTestApp();
    // A snapshot with values of both (the shared real files have none): tests/fixtures/snapshot_keys.py writes it.
    QTemporaryDir dir;
    auto path = dir.filePath(QStringLiteral("keys.pickle"));
    auto run = test::runCommand("/usr/bin/python3 " MEMLEDGER_SOURCE_DIR "/tests/fixtures/snapshot_keys.py write "
        + path.toStdString() + " >/dev/null 2>&1");
    ASSERT_EQ(run.exit_code, 0) << run.output;
    MainWindow w;
    w.show();
    w.openFile(path);
    ASSERT_TRUE(waitForReport(w));
    auto* view = w.callTree();
    auto* box = view->groupBox();
    ASSERT_TRUE(box->isEnabled()); // the file has values of both
    for (auto kind : {ContextKind::UserMetadata, ContextKind::CompileContext}) {
        // Chosen as a user does: the combo's item.
        const int item = box->findData(static_cast<int>(kind));
        ASSERT_GE(item, 0);
        box->setCurrentIndex(item);
        emit box->activated(item);
        ASSERT_EQ(view->options().group, kind);
        auto* proxy = view->proxy();
        auto root = proxy->index(0, 0);
        // The top level: one row per value, with what the Metadata tab's figures say of it (context_table).
        auto figures = contextFigures(*w.report(), kind);
        ASSERT_FALSE(figures.empty());
        ASSERT_EQ(proxy->rowCount(root), static_cast<int>(figures.size())) << contextKindName(kind);
        for (const auto& f : figures) {
            auto text = f.value.empty() ? QStringLiteral("(no %1)").arg(contextKindName(kind))
                                        : QString::fromStdString(f.value);
            auto row = childNamed(proxy, root, text);
            ASSERT_TRUE(row.isValid()) << text.toStdString();
            EXPECT_EQ(cell(proxy, row, CallTreeModel::Allocated), f.allocated_bytes) << text.toStdString();
            EXPECT_EQ(cell(proxy, row, CallTreeModel::Count), f.allocations) << text.toStdString();
            EXPECT_TRUE(row.data(Qt::FontRole).value<QFont>().italic());
        }
        EXPECT_TRUE(view->model()->headerData(CallTreeModel::Frame, Qt::Horizontal).toString().startsWith(
            QString::fromUtf8(contextKindName(kind))));
        // Selecting a frame under a value lists the frames only, never the value.
        auto value = proxy->index(0, 0, root);
        auto frame = proxy->index(0, 0, value);
        ASSERT_TRUE(frame.isValid());
        QSignalSpy selected(view, &CallTreeView::nodeSelected);
        view->view()->setCurrentIndex(frame);
        ASSERT_EQ(selected.size(), 1);
        auto frames = selected.at(0).at(1).value<std::vector<CallTreeLabel>>();
        ASSERT_EQ(frames.size(), 1u);
        EXPECT_FALSE(frames[0].group);
    }
    view->setGroup(std::nullopt);
    EXPECT_EQ(box->currentIndex(), box->findData(-1));

    // A snapshot without values: the choice is greyed out.
    auto plain = snapshotPath("segment-alloc-and-free.pickle");
    if (!QFile::exists(plain))
        return;
    w.openFile(plain);
    ASSERT_TRUE(waitForReport(w));
    EXPECT_FALSE(box->isEnabled());
}
