// Call trees (analysis/call_tree.h) against sums known by hand and against a real snapshot's tree computed
// from the pickle by Python (tests/fixtures/call_tree_truth.py).
#include "analysis/call_tree.h"
#include "snapshot/snapshot.h"
#include "snapshot/snapshot_contexts.h"

#include "call_tree_hand_trace.h"
#include "run_command.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <array>
#include <cstdlib>
#include <map>
#include <unistd.h>

using namespace memledger;

namespace {

using memledger::test::HandTrace;

// MEMLEDGER_SNAPSHOTS in the environment names another folder (a worktree's ../shared is elsewhere).
std::string snapshotDir()
{
    const char* env = std::getenv("MEMLEDGER_SNAPSHOTS");
    return env && *env ? env : MEMLEDGER_SNAPSHOTS;
}

const CallTreeNode* find(const CallTree& tree, const std::vector<std::string>& path)
{
    std::int32_t at = 0;
    for (const auto& text : path) {
        std::int32_t next = -1;
        for (auto c : tree.nodes[static_cast<std::size_t>(at)].children)
            if (tree.text(c) == text)
                next = c;
        if (next < 0)
            return nullptr;
        at = next;
    }
    return &tree.nodes[static_cast<std::size_t>(at)];
}

void expectNode(const CallTree& tree, const std::vector<std::string>& path, std::int64_t allocated, std::int64_t count,
    std::int64_t largest, std::int64_t alive)
{
    const CallTreeNode* n = find(tree, path);
    ASSERT_NE(n, nullptr) << (path.empty() ? "root" : path.back());
    EXPECT_EQ(n->allocated, allocated) << path.back();
    EXPECT_EQ(n->count, count) << path.back();
    EXPECT_EQ(n->largest, largest) << path.back();
    EXPECT_EQ(n->alive, alive) << path.back();
}

const std::string kMod = "/home/u/train.py:5 <module>";
const std::string kFwd10 = "/home/u/model.py:10 forward";
const std::string kFwd12 = "/home/u/model.py:12 forward";
const std::string kMul = "at::_ops::mul_Tensor::call(at::Tensor const&, at::Tensor const&)";
const std::string kEngine = "engine.cpp:0 torch::autograd::Engine::thread_main()";
const std::string kMm = "at::_ops::mm::call(at::Tensor const&, at::Tensor const&)";

} // namespace

TEST(CallTree, TopDownSumsOfAHandWrittenTrace)
{
    HandTrace h;
    CallTree tree = buildCallTree(h.t, {});
    EXPECT_TRUE(tree.has_stacks);
    EXPECT_EQ(tree.moment, 5);
    const auto& root = tree.nodes[0];
    EXPECT_EQ(root.allocated, 410);
    EXPECT_EQ(root.count, 6);
    EXPECT_EQ(root.largest, 200);
    EXPECT_EQ(root.alive, 280);
    ASSERT_EQ(root.children.size(), 3u); // train.py, the backward's engine, no stack
    expectNode(tree, {kMod}, 200, 4, 100, 80);
    expectNode(tree, {kMod, kFwd10}, 130, 2, 100, 30);
    expectNode(tree, {kMod, kFwd10, kMul}, 130, 2, 100, 30); // the leaf: the allocator's frames are dropped
    EXPECT_TRUE(
        tree.nodes[static_cast<std::size_t>(find(tree, {kMod, kFwd10, kMul}) - tree.nodes.data())].children.empty());
    expectNode(tree, {kMod, kFwd12}, 70, 2, 50, 50);
    expectNode(tree, {kEngine, kMm}, 200, 1, 200, 200);
    expectNode(tree, {"(no stack)"}, 10, 1, 10, 0);
    // Children come largest first; on a tie, most alive first (the engine's 200 bytes are all alive).
    EXPECT_EQ(tree.text(root.children[0]), kEngine);
    EXPECT_EQ(tree.text(root.children[1]), kMod);
    EXPECT_EQ(tree.path(find(tree, {kMod, kFwd12}) - tree.nodes.data()), (std::vector<std::string> {kMod, kFwd12}));
}

TEST(CallTree, BottomUpStartsAtTheAllocatingFrame)
{
    HandTrace h;
    CallTreeOptions o;
    o.bottom_up = true;
    CallTree tree = buildCallTree(h.t, o);
    EXPECT_EQ(tree.nodes[0].children.size(), 4u);
    expectNode(tree, {kMul}, 130, 2, 100, 30);
    expectNode(tree, {kMul, kFwd10, kMod}, 130, 2, 100, 30);
    expectNode(tree, {kFwd12, kMod}, 70, 2, 50, 50);
    expectNode(tree, {kMm, kEngine}, 200, 1, 200, 200);

    o.frames = CallTreeFrames::PythonAndOps; // C++ frames other than ATen ops are gone
    tree = buildCallTree(h.t, o);
    expectNode(tree, {"aten::mul", kFwd10, kMod}, 130, 2, 100, 30);
    expectNode(tree, {"aten::mm"}, 200, 1, 200, 200);
    EXPECT_TRUE(find(tree, {"aten::mm"})->children.empty());
}

TEST(CallTree, RangesDevicesAndMoments)
{
    HandTrace h;
    CallTreeOptions o;
    o.last = 5; // events 0-4: the peak is after event 2, 180 bytes
    CallTree tree = buildCallTree(h.t, o);
    EXPECT_EQ(tree.moment, 2);
    expectNode(tree, {}, 180, 3, 100, 180);

    o = {};
    o.first = 6; // the range only frees: it starts at its peak, with everything of event 5 alive
    tree = buildCallTree(h.t, o);
    EXPECT_EQ(tree.moment, 5);
    expectNode(tree, {}, 30, 2, 20, 280);

    o = {};
    o.device = 1;
    tree = buildCallTree(h.t, o);
    EXPECT_EQ(tree.moment, 8);
    expectNode(tree, {}, 20, 1, 20, 20);
    expectNode(tree, {kMod, kFwd12}, 20, 1, 20, 20);

    o = {};
    o.moment = 7; // event 5's block is freed at 7
    tree = buildCallTree(h.t, o);
    expectNode(tree, {}, 410, 6, 200, 80);
    expectNode(tree, {kEngine}, 200, 1, 200, 0);
    o.moment = -1;
    EXPECT_EQ(buildCallTree(h.t, o).nodes[0].alive, 0);

    auto totals = stackTotals(h.t, CallTreeOptions {});
    std::map<std::uint32_t, std::int64_t> alive;
    for (const auto& s : totals.stacks)
        alive[s.stack] = s.alive;
    EXPECT_EQ(alive[h.a], 30);
    EXPECT_EQ(alive[h.b], 50);
    EXPECT_EQ(alive[h.c], 200);
}

TEST(CallTree, ATraceWithoutStacks)
{
    Trace t;
    t.push(0, 64, 0x10, Action::Alloc, -1);
    CallTree tree = buildCallTree(t, {});
    EXPECT_FALSE(tree.has_stacks);
    expectNode(tree, {"(no stack)"}, 64, 1, 64, 64);
    EXPECT_TRUE(buildCallTree(Trace {}, {}).nodes[0].children.empty());
}

namespace {

void compareWithPython(const std::string& file)
{
    auto path = snapshotDir() + "/" + file;
    if (!std::filesystem::exists(path))
        GTEST_SKIP() << path << " is absent: real-snapshot checks skipped";
    auto run = test::runCommand(std::string("/usr/bin/python3 ") + MEMLEDGER_SOURCE_DIR
        + "/tests/fixtures/call_tree_truth.py " + path + " 2>/dev/null");
    ASSERT_EQ(run.exit_code, 0) << run.output;
    auto truth = nlohmann::json::parse(run.output);
    Snapshot s = readSnapshotFile(path);
    const Trace& t = *s.trace;
    for (bool bottomUp : {false, true}) {
        CallTreeOptions o;
        o.bottom_up = bottomUp;
        CallTree tree = buildCallTree(t, o);
        EXPECT_EQ(tree.moment, truth["moment"].get<std::int64_t>());
        EXPECT_EQ(tree.nodes[0].alive, truth["alive"].get<std::int64_t>());
        const auto& want = truth[bottomUp ? "bottom_up" : "top_down"];
        ASSERT_EQ(tree.nodes.size() - 1, want.size()) << (bottomUp ? "bottom-up" : "top-down");
        std::size_t checked = 0;
        for (std::size_t n = 1; n < tree.nodes.size(); ++n) {
            std::string key;
            for (const auto& p : tree.path(static_cast<std::int32_t>(n)))
                key += (key.empty() ? "" : "\n") + p;
            ASSERT_TRUE(want.contains(key)) << key;
            const auto& w = want[key];
            const auto& node = tree.nodes[n];
            EXPECT_EQ(node.allocated, w[0].get<std::int64_t>()) << key;
            EXPECT_EQ(node.count, w[1].get<std::int64_t>()) << key;
            EXPECT_EQ(node.largest, w[2].get<std::int64_t>()) << key;
            EXPECT_EQ(node.alive, w[3].get<std::int64_t>()) << key;
            ++checked;
        }
        EXPECT_GT(checked, 100u);
    }
}

} // namespace

TEST(CallTree, ManySegmentsSnapshotAsPythonSumsIt)
{
    compareWithPython("many-segments.pickle");
}

TEST(CallTree, SmallAllocFreeSnapshotAsPythonSumsIt)
{
    compareWithPython("small-alloc-free.pickle");
}

namespace {

// The call tree grouped by user_metadata or compile_context: each value's node holds what Python sums for that
// value on its own (tests/fixtures/snapshot_keys.py: allocations, bytes, bytes alive at the peak), the values'
// nodes add up to the root, and beneath each value the frames add up to it.
void expectGroupsAsPythonSumsThem(const std::string& path, const nlohmann::json& truth)
{
    Snapshot s = readSnapshotFile(path);
    ASSERT_TRUE(s.trace);
    for (auto kind : {ContextKind::UserMetadata, ContextKind::CompileContext}) {
        const auto& want = truth[kind == ContextKind::UserMetadata ? "user_metadata" : "compile_contexts"];
        for (bool bottomUp : {false, true}) {
            CallTreeOptions o;
            o.group = kind;
            o.bottom_up = bottomUp;
            CallTree tree = buildCallTree(*s.trace, o, &s.trace_context);
            const auto& root = tree.nodes[0];
            std::map<std::string, std::array<std::int64_t, 3>> ours, python;
            std::int64_t allocated = 0, count = 0, alive = 0;
            for (auto g : root.children) {
                const auto& n = tree.nodes[static_cast<std::size_t>(g)];
                const auto& label = tree.labels[n.label];
                EXPECT_TRUE(label.group) << label.text;
                auto value = label.text == "(no " + std::string(contextKindName(kind)) + ")" ? std::string() : label.text;
                ours[value] = {n.count, n.allocated, n.alive};
                allocated += n.allocated;
                count += n.count;
                alive += n.alive;
                std::int64_t below = 0, belowCount = 0;
                for (auto c : n.children) {
                    below += tree.nodes[static_cast<std::size_t>(c)].allocated;
                    belowCount += tree.nodes[static_cast<std::size_t>(c)].count;
                    EXPECT_FALSE(tree.labels[tree.nodes[static_cast<std::size_t>(c)].label].group);
                }
                EXPECT_EQ(below, n.allocated) << label.text;
                EXPECT_EQ(belowCount, n.count) << label.text;
            }
            EXPECT_EQ(allocated, root.allocated);
            EXPECT_EQ(count, root.count);
            EXPECT_EQ(alive, root.alive);
            if (want.empty()) { // no value in the file: one node, every allocation without one
                EXPECT_EQ(root.children.size(), 1u);
                continue;
            }
            for (const auto& f : want)
                python[f["value"].is_null() ? std::string() : f["value"].get<std::string>()]
                    = {f["allocations"].get<std::int64_t>(), f["allocated_bytes"].get<std::int64_t>(),
                        f["peak_bytes"].get<std::int64_t>()};
            // Python lists a value only for the allocations; the tree also holds a value whose blocks are
            // only alive (none here: every value allocates).
            EXPECT_EQ(ours, python) << contextKindName(kind) << (bottomUp ? " bottom-up" : " top-down");
        }
    }
}

nlohmann::json snapshotKeysTruth(const std::string& mode, const std::string& path)
{
    auto run = test::runCommand("/usr/bin/python3 " + std::string(MEMLEDGER_SOURCE_DIR)
        + "/tests/fixtures/snapshot_keys.py " + mode + " " + path + " 2>/dev/null");
    EXPECT_EQ(run.exit_code, 0) << run.output;
    return nlohmann::json::parse(run.output);
}

} // namespace

TEST(CallTree, GroupedByUserMetadataAndCompileContextOfASyntheticSnapshot)
{
    auto path = (std::filesystem::temp_directory_path()
        / ("memledger-call-tree-groups-" + std::to_string(::getpid()) + ".pickle"))
                    .string();
    auto truth = snapshotKeysTruth("write", path);
    expectGroupsAsPythonSumsThem(path, truth);
    std::filesystem::remove(path);
}

// The shared real snapshots carry the keys (torch-compile-run.pickle both on every entry) but no value: one node.
TEST(CallTree, GroupingRealSnapshotsThatHaveTheKeysButNoValues)
{
    for (const char* file : {"torch-compile-run.pickle", "training-loop-annotations-python-frames.pickle"}) {
        auto path = snapshotDir() + "/" + file;
        if (!std::filesystem::exists(path))
            GTEST_SKIP() << path << " is absent: real-snapshot checks skipped";
        expectGroupsAsPythonSumsThem(path, snapshotKeysTruth("truth", path));
    }
}

TEST(CallTree, GroupingWithoutContextsHoldsEveryAllocationInOneNode)
{
    HandTrace h;
    CallTreeOptions o;
    o.group = ContextKind::UserMetadata;
    CallTree tree = buildCallTree(h.t, o);
    ASSERT_EQ(tree.nodes[0].children.size(), 1u);
    EXPECT_EQ(tree.text(tree.nodes[0].children[0]), "(no user_metadata)");
    expectNode(tree, {"(no user_metadata)"}, 410, 6, 200, 280);
    expectNode(tree, {"(no user_metadata)", kMod, kFwd10}, 130, 2, 100, 30);
}
