#include "support/errors.h"
#include "exports/report_json.h"
#include "snapshot/snapshot.h"
#include "snapshot/snapshot_writer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>

using namespace memledger;

namespace {

std::string snapshotPath(const std::string& name)
{
    return std::string(MEMLEDGER_SNAPSHOTS) + "/" + name;
}

// A snapshot built by a Python script (run with the pickle's path as sys.argv[1]), read back; both files removed.
Snapshot snapshotBuiltBy(const std::string& tag, const std::string& script)
{
    const auto base = "/tmp/memledger-test-" + tag + "-" + std::to_string(::getpid());
    std::ofstream(base + ".py") << script;
    const int rc = std::system(("/usr/bin/python3 " + base + ".py " + base + ".pickle").c_str());
    std::remove((base + ".py").c_str());
    if (rc != 0) {
        std::remove((base + ".pickle").c_str());
        throw std::runtime_error("the script building the " + tag + " snapshot failed");
    }
    Snapshot s = readSnapshotFile(base + ".pickle");
    std::remove((base + ".pickle").c_str());
    return s;
}

// The whole numbers a Python script prints about a file (sys.argv[1]): PyTorch's side of a check.
std::vector<std::int64_t> figuresByPython(const std::string& script, const std::string& file)
{
    const auto out = "/tmp/memledger-test-figures-" + std::to_string(::getpid());
    std::ofstream(out + ".py") << script;
    const int rc = std::system(("/usr/bin/python3 " + out + ".py " + file + " > " + out).c_str());
    std::vector<std::int64_t> figures;
    std::ifstream in(out);
    for (std::int64_t v = 0; in >> v;)
        figures.push_back(v);
    std::remove(out.c_str());
    std::remove((out + ".py").c_str());
    if (rc != 0)
        throw std::runtime_error("the Python script reading " + file + " failed");
    return figures;
}

#define SKIP_WITHOUT_SNAPSHOTS()                                                                                       \
    if (!std::filesystem::is_directory(MEMLEDGER_SNAPSHOTS))                                                           \
    GTEST_SKIP() << "the shared snapshots folder " MEMLEDGER_SNAPSHOTS " is absent: real-snapshot checks skipped"

// The figures of shared/snapshots/README.md.
struct Expected {
    const char* file;
    std::size_t segments;
    std::int64_t reserved;
    std::int64_t allocated;
    std::size_t trace;
    std::map<std::string, std::size_t> actions;
    std::size_t devices;
    bool expandable;
    const char* layout;
};

const std::vector<Expected>& table()
{
    static const std::vector<Expected> t = {
        {"bare-segment-list.pkl", 255, 3649044480, 3353639424, 0, {}, 1, false, "segment-list"},
        {"legacy-history-format.pickle", 176, 11844714496, 11840159744, 1, {{"snapshot", 1}}, 1, false,
            "legacy-history"},
        {"many-segments.pickle", 216, 14180941824, 1377753600, 5163,
            {{"alloc", 1721}, {"free_requested", 1721}, {"free_completed", 1721}}, 1, false, "dict"},
        {"oom-expandable-segments.pickle", 12, 114628231168, 28728827904, 7923,
            {{"alloc", 3025}, {"free_requested", 2299}, {"free_completed", 2299}, {"segment_map", 293},
                {"segment_unmap", 6}, {"oom", 1}},
            4, true, "dict"},
        {"segment-alloc-and-free.pickle", 8, 22194159616, 1332177408, 3092,
            {{"alloc", 1023}, {"free_requested", 1021}, {"free_completed", 1021}, {"segment_alloc", 16},
                {"segment_free", 11}},
            1, false, "dict"},
        {"small-alloc-free.pickle", 5, 262144000, 8704, 1040, {{"alloc", 520}, {"free_completed", 520}}, 1, true,
            "dict-2.1"},
        {"tiny-segment-alloc.pickle", 9, 3781165056, 31719936, 97,
            {{"alloc", 36}, {"free_requested", 26}, {"free_completed", 26}, {"segment_alloc", 9}}, 1, false, "dict"},
        {"torch-2.1-era-format.pickle", 215, 6471811072, 2297283072, 10307,
            {{"alloc", 3505}, {"free_requested", 3325}, {"free_completed", 3325}, {"segment_alloc", 152}}, 1, false,
            "dict-2.1"},
    };
    return t;
}

std::map<std::string, std::size_t> actionCounts(const Snapshot& s)
{
    std::map<std::string, std::size_t> m;
    for (auto a : s.trace->action)
        ++m[actionName(a)];
    return m;
}

} // namespace

TEST(Snapshot, EverySharedFileMatchesTheReadmeTable)
{
    SKIP_WITHOUT_SNAPSHOTS();
    for (const auto& e : table()) {
        SCOPED_TRACE(e.file);
        Snapshot s = readSnapshotFile(snapshotPath(e.file));
        EXPECT_EQ(s.segments.size(), e.segments);
        EXPECT_EQ(s.reservedBytes(), e.reserved);
        EXPECT_EQ(s.allocatedBytes(), e.allocated);
        EXPECT_EQ(s.trace->size(), e.trace);
        EXPECT_EQ(actionCounts(s), e.actions);
        EXPECT_EQ(s.devices.size(), e.devices);
        bool expandable = false;
        for (const auto& g : s.segments)
            expandable = expandable || g.is_expandable;
        EXPECT_EQ(expandable, e.expandable);
        EXPECT_EQ(s.layout, e.layout);
        EXPECT_EQ(s.trace_stream.size(), s.trace->size());
    }
}

TEST(Snapshot, RecognisedByContentNotExtension)
{
    SKIP_WITHOUT_SNAPSHOTS();
    auto copy = std::filesystem::temp_directory_path() / "memledger-snapshot-no-extension";
    std::filesystem::copy_file(
        snapshotPath("tiny-segment-alloc.pickle"), copy, std::filesystem::copy_options::overwrite_existing);
    EXPECT_TRUE(looksLikePickleFile(copy.string()));
    EXPECT_EQ(readSnapshotFile(copy.string()).trace->size(), 97u);
    std::filesystem::remove(copy);
    EXPECT_FALSE(looksLikePickleFile(std::string(MEMLEDGER_SNAPSHOTS) + "/README.md"));
}

TEST(Snapshot, TraceConversion)
{
    SKIP_WITHOUT_SNAPSHOTS();
    Snapshot s = readSnapshotFile(snapshotPath("many-segments.pickle"));
    const Trace& t = *s.trace;
    ASSERT_TRUE(s.trace_has_time);
    EXPECT_EQ(t.time_ns.front(), 0);
    EXPECT_TRUE(std::is_sorted(t.time_ns.begin(), t.time_ns.end()));
    // every free_completed of this file has its alloc in the trace; pairs point at each other
    std::size_t paired = 0, freedBeforeTrace = 0;
    for (std::size_t i = 0; i < t.size(); ++i) {
        if (t.partner[i] == kNoPartner) {
            freedBeforeTrace += t.action[i] == Action::Free;
            continue;
        }
        auto p = static_cast<std::size_t>(t.partner[i]);
        EXPECT_EQ(t.partner[p], static_cast<std::int32_t>(i));
        EXPECT_EQ(t.address[p], t.address[i]);
        if (t.action[i] == Action::Free)
            ++paired;
    }
    // a ring buffer: 2 blocks allocated before the first entry are freed in it, 2 allocated in it stay alive
    EXPECT_EQ(paired, 1719u);
    EXPECT_EQ(freedBeforeTrace, 2u);
    // the top user frame skips torch's own files: model.py:54 forward, not torch/nn/modules/module.py
    EXPECT_NE(t.strings.at(t.where[0]).find("model.py:54 forward"), std::string::npos) << t.strings.at(t.where[0]);
    // a free is in its block's ledger (snapshot/snapshot_ledgers.h)
    for (std::size_t i = 0; i < t.size(); ++i) {
        if (t.action[i] == Action::Free && t.partner[i] != kNoPartner)
            EXPECT_EQ(t.ledger[i], t.ledger[static_cast<std::size_t>(t.partner[i])]);
    }
}

TEST(Snapshot, RingBufferStartingMidRunIsAccepted)
{
    SKIP_WITHOUT_SNAPSHOTS();
    // many-segments begins mid-run: blocks alive before its first entry are freed in it
    Snapshot s = readSnapshotFile(snapshotPath("many-segments.pickle"));
    std::size_t unpairedFrees = 0;
    for (std::size_t i = 0; i < s.trace->size(); ++i)
        unpairedFrees += s.trace->action[i] == Action::Free && s.trace->partner[i] == kNoPartner;
    EXPECT_GT(unpairedFrees, 0u);
    Report r = reportFromSnapshot(s, snapshotPath("many-segments.pickle"));
    EXPECT_EQ(r.source, ReportSource::Snapshot);
    EXPECT_GE(r.peak_bytes, s.allocatedBytes());
    bool noted = false;
    for (const auto& n : r.notes)
        noted = noted || n.find("before the trace began") != std::string::npos;
    EXPECT_TRUE(noted);
    // torch-2.1-era-format has no time_us: events are spaced by their order
    Snapshot old = readSnapshotFile(snapshotPath("torch-2.1-era-format.pickle"));
    EXPECT_FALSE(old.trace_has_time);
    EXPECT_EQ(old.trace->time_ns[1], 1000);
}

TEST(Snapshot, OomAndDevices)
{
    SKIP_WITHOUT_SNAPSHOTS();
    Snapshot s = readSnapshotFile(snapshotPath("oom-expandable-segments.pickle"));
    ASSERT_EQ(s.ooms.size(), 1u);
    EXPECT_EQ(s.ooms[0].device, 1);
    EXPECT_GT(s.ooms[0].bytes_requested, 0);
    EXPECT_GT(s.ooms[0].device_free, 0);
    EXPECT_TRUE(s.settings.present);
    EXPECT_TRUE(s.settings.expandable_segments);
    EXPECT_EQ(s.devices, (std::vector<int> {0, 1, 2, 3}));
    std::set<int> traceDevices(s.trace->device.begin(), s.trace->device.end());
    EXPECT_EQ(traceDevices, (std::set<int> {0, 1, 2}));
}

TEST(Snapshot, ReportAndJson)
{
    SKIP_WITHOUT_SNAPSHOTS();
    auto path = snapshotPath("segment-alloc-and-free.pickle");
    Report r = readSnapshotReport(path);
    ASSERT_TRUE(r.snapshot);
    EXPECT_EQ(r.source, ReportSource::Snapshot);
    EXPECT_EQ(r.trace->size(), 3092u);
    EXPECT_GT(r.peak_bytes, 0);
    EXPECT_EQ(r.peak_total_bytes, r.peak_bytes);
    ASSERT_FALSE(r.layers.empty());
    EXPECT_EQ(r.layers[0].name, "segment-alloc-and-free.pickle");
    for (std::size_t i = 1; i < r.layers.size(); ++i)
        EXPECT_LT(r.layers[i].parent, static_cast<int>(i));
    EXPECT_FALSE(r.alive_at_peak.empty());
    auto j = reportToJson(r, false);
    EXPECT_EQ(j["source"], "snapshot");
    EXPECT_EQ(j["snapshot"]["segments"], 8);
    EXPECT_EQ(j["snapshot"]["reserved_bytes"], 22194159616);
    EXPECT_EQ(j["snapshot"]["allocated_bytes"], 1332177408);
    EXPECT_EQ(j["snapshot"]["trace_entries"], 3092);
    EXPECT_EQ(j["allocator_model"]["recorded_segment_allocs"], 16);
    EXPECT_EQ(j["allocator_model"]["reproduced_segment_allocs"], 16);
    EXPECT_EQ(j["allocator_model"]["matched"], true);
    EXPECT_EQ(j["allocator_model"]["settings"]["default"], true);
}

// `analyze --json` writes the events' columns straight to text (reportToJsonText): the document is the one the
// JSON values make, for every shared file, and it reads back as the same report.
TEST(Snapshot, JsonTextIsTheJsonDocument)
{
    SKIP_WITHOUT_SNAPSHOTS();
    for (const auto& entry : std::filesystem::directory_iterator(MEMLEDGER_SNAPSHOTS)) {
        if (!looksLikePickleFile(entry.path().string()))
            continue;
        SCOPED_TRACE(entry.path().filename().string());
        Report r = readSnapshotReport(entry.path().string());
        const std::string text = reportToJsonText(r);
        ASSERT_FALSE(text.empty());
        EXPECT_EQ(text.back(), '\n');
        const auto parsed = nlohmann::json::parse(text);
        EXPECT_EQ(parsed, reportToJson(r));
        Report back = reportFromJson(parsed, "text");
        ASSERT_TRUE(back.trace);
        EXPECT_EQ(back.trace->size(), r.trace->size());
        EXPECT_EQ(back.peak_bytes, r.peak_bytes);
    }
}

// The columns' text of a long trace (several pieces a column, made on two threads where there are two cores):
// every number as the JSON values write it, from 0 to the widest, negative ones included.
TEST(Snapshot, JsonTextOfALongTraceIsTheJsonDocument)
{
    auto t = std::make_shared<Trace>();
    const std::int64_t wide[] = {0, 1, 9, 10, 99, 100, 999, 1000, 9999, 10000, 99999999, 100000000, 4294967295,
        4294967296, 999999999999999999, 1000000000000000000, INT64_MAX};
    const std::size_t n = 300000;
    t->reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
        const std::int64_t w = wide[i % std::size(wide)];
        auto k = t->push(w, static_cast<std::int64_t>(i * 7919 % 100003), i % 5 == 0 ? ~std::uint64_t {0} - i : 0x7f0000000000 + i,
            i % 2 ? Action::Alloc : Action::Free, static_cast<std::int8_t>(i % 7 == 0 ? -3 : i % 3 - 1));
        t->partner[k] = i % 4 == 0 ? kNoPartner : static_cast<std::int32_t>(n - i);
        t->op_seq[k] = static_cast<std::uint32_t>(i % 11 == 0 ? UINT32_MAX : i);
        t->stack[k] = 0;
    }
    Report r;
    r.trace = t;
    const std::string text = reportToJsonText(r);
    ASSERT_FALSE(text.empty());
    EXPECT_EQ(text.back(), '\n');
    const auto parsed = nlohmann::json::parse(text);
    EXPECT_EQ(parsed, reportToJson(r));
    EXPECT_EQ(parsed["events"]["time_ns"][16], INT64_MAX);
    EXPECT_EQ(parsed["events"]["address"][0], -1); // the columns are written as signed 64-bit numbers
    EXPECT_EQ(parsed["events"]["partner"][0], kNoPartner);
}

TEST(Snapshot, WriterRoundTrip)
{
    SKIP_WITHOUT_SNAPSHOTS();
    Report r = readSnapshotReport(snapshotPath("tiny-segment-alloc.pickle"));
    Snapshot back = decodeSnapshot(encodeSnapshot(r), "round-trip");
    EXPECT_EQ(back.segments.size(), 9u);
    EXPECT_EQ(back.reservedBytes(), 3781165056);
    EXPECT_EQ(back.allocatedBytes(), 31719936);
    EXPECT_EQ(actionCounts(back), actionCounts(*r.snapshot));
    ASSERT_EQ(back.trace->size(), r.trace->size());
    for (std::size_t i = 0; i < r.trace->size(); ++i)
        EXPECT_EQ(back.trace->strings.at(back.trace->where[i]), r.trace->strings.at(r.trace->where[i])) << i;
}

// Where the model departs from the GPU, said in the report: here the GPU passed over a smaller free block that
// best fit takes (the trace frees it, the allocator did not reuse it), so the model places the alloc elsewhere.
TEST(Snapshot, TheAllocatorCheckSaysWhereTheModelDeparts)
{
    constexpr std::int64_t MiB = 1 << 20;
    const std::uint64_t A = 0x7f0000000000, B = 0x7f0010000000;
    Trace t;
    auto event = [&](Action action, std::int64_t bytes, std::uint64_t at) {
        return t.push(static_cast<std::int64_t>(t.size()), bytes, at, action, 0);
    };
    auto freeOf = [&](std::size_t a) {
        auto f = event(Action::Free, t.bytes[a], t.address[a]);
        t.partner[f] = static_cast<std::int32_t>(a);
        t.partner[a] = static_cast<std::int32_t>(f);
    };
    event(Action::SegmentAlloc, 20 * MiB, A);
    auto a1 = event(Action::Alloc, 2 * MiB, A);
    event(Action::Alloc, 2 * MiB, A + 2 * MiB);
    auto a3 = event(Action::Alloc, 4 * MiB, A + 4 * MiB);
    freeOf(a1);
    freeOf(a3);
    const auto departing = event(Action::Alloc, 3 * MiB / 2, A + 4 * MiB); // best fit: the 2 MiB block at A
    event(Action::SegmentAlloc, 20 * MiB, B); // the GPU had 14.5 MiB free in A's segment, the model 16
    event(Action::Alloc, 16 * MiB, B);
    Snapshot s;
    s.devices = {0};
    for (std::size_t i = 0; i < t.size(); ++i)
        s.trace_stream.push_back(0);
    auto block = [](std::uint64_t at, std::int64_t size, bool allocated) {
        SnapshotBlock b;
        b.address = at;
        b.size = size;
        b.state = allocated ? BlockState::ActiveAllocated : BlockState::Inactive;
        return b;
    };
    SnapshotSegment segA, segB;
    segA.address = A;
    segA.total_size = 20 * MiB;
    segA.segment_type = "large";
    segA.blocks = {block(A, 2 * MiB, false), block(A + 2 * MiB, 2 * MiB, true), block(A + 4 * MiB, 3 * MiB / 2, true),
        block(A + 11 * MiB / 2, 29 * MiB / 2, false)};
    segB.address = B;
    segB.total_size = 20 * MiB;
    segB.segment_type = "large";
    segB.blocks = {block(B, 16 * MiB, true), block(B + 16 * MiB, 4 * MiB, false)};
    s.segments = {segA, segB};
    s.trace = std::make_shared<Trace>(t);
    auto check = checkAllocatorModel(s);
    EXPECT_FALSE(check.matched);
    ASSERT_EQ(check.departure_event, static_cast<std::int64_t>(departing)) << check.departure;
    EXPECT_NE(check.departure.find("the GPU put it at 0x7f0000400000, in a free block of 16.00 MiB"), std::string::npos)
        << check.departure;
    EXPECT_NE(check.departure.find("best fit took 0x7f0000000000, a free block of 2.00 MiB"), std::string::npos)
        << check.departure;
    EXPECT_NE(check.departure.find("passed over that smaller free block"), std::string::npos) << check.departure;
    auto report = reportFromSnapshot(s, "departs.pickle", true);
    bool said = false;
    for (const auto& n : report.notes)
        said = said || n.find("the model first departs at trace entry 6") != std::string::npos;
    EXPECT_TRUE(said) << "the report's allocator note says where the model departs";
}

TEST(Snapshot, WriterFromATraceThroughTheModel)
{
    Trace t;
    auto where = t.strings.intern("model.py:12 forward");
    std::vector<std::size_t> allocs;
    for (int i = 0; i < 100; ++i) {
        auto k = t.push(i * 1000, 1000 + i * 4096, 0x1000 + static_cast<std::uint64_t>(i) * 0x100000, Action::Alloc, 0);
        t.where[k] = where;
        allocs.push_back(k);
        if (i % 3 == 2) {
            auto f = t.push(i * 1000 + 500, t.bytes[allocs[i - 1]], t.address[allocs[i - 1]], Action::Free, 0);
            t.partner[f] = static_cast<std::int32_t>(allocs[i - 1]);
        }
    }
    Snapshot s = decodeSnapshot(encodeSnapshot(t), "from-trace");
    // the segments the model cudaMalloc'ed are written as segment_alloc entries before their alloc
    auto model = replayCachingAllocator(t);
    EXPECT_EQ(s.trace->size(), t.size() + model.segment_allocs.size());
    EXPECT_EQ(s.traceCount(Action::SegmentAlloc), model.segment_allocs.size());
    auto check = checkAllocatorModel(s);
    EXPECT_TRUE(check.matched) << check.reproduced << " of " << check.recorded;
    std::int64_t blocksTotal = 0;
    for (const auto& g : s.segments) {
        std::int64_t sum = 0;
        for (const auto& b : g.blocks)
            sum += b.size;
        EXPECT_EQ(sum, g.total_size); // what torch.cuda._memory_viz.stats() asserts
        blocksTotal += sum;
    }
    EXPECT_GT(blocksTotal, 0);
    auto firstAlloc
        = std::find(s.trace->action.begin(), s.trace->action.end(), Action::Alloc) - s.trace->action.begin();
    EXPECT_EQ(s.trace->strings.at(s.trace->where[static_cast<std::size_t>(firstAlloc)]), "model.py:12 forward");
}

TEST(Snapshot, PyTorchMemoryVizReadsOurSnapshot)
{
    SKIP_WITHOUT_SNAPSHOTS();
    if (std::system("/usr/bin/python3 -c 'import torch.cuda._memory_viz' >/dev/null 2>&1") != 0)
        GTEST_SKIP() << "Debian's /usr/bin/python3 has no torch: torch.cuda._memory_viz check skipped";
    auto dir = std::filesystem::temp_directory_path();
    auto fromSnapshot = (dir / "memledger-viz-a.pickle").string();
    auto fromTrace = (dir / "memledger-viz-b.pickle").string();
    writeSnapshotFile(fromSnapshot, readSnapshotReport(snapshotPath("segment-alloc-and-free.pickle")));
    Report model;
    auto t = std::make_shared<Trace>();
    for (int i = 0; i < 50; ++i)
        t->push(i, (i + 1) * 300000, 0x10000 + static_cast<std::uint64_t>(i) * 0x1000000, Action::Alloc, 0);
    model.trace = t;
    writeSnapshotFile(fromTrace, model);
    // torch 1.13's _memory_viz takes the list of segments; newer ones take the dict. Try what exists.
    std::string script = dir.string() + "/memledger-viz.py";
    std::ofstream(script) << "import pickle, sys\n"
                             "import torch.cuda._memory_viz as m\n"
                             "for f in sys.argv[1:]:\n"
                             "    d = pickle.load(open(f, 'rb'))\n"
                             "    segs = d['segments']\n"
                             "    ident = lambda s: s\n"
                             "    st = m.stats(segs) if hasattr(m, 'stats') else None\n"
                             "    a = m.segments(segs, format_flamegraph=ident) if hasattr(m, 'trace_plot') is False "
                             "else m.segments(d, format_flamegraph=ident)\n"
                             "    b = m.memory(segs, format_flamegraph=ident) if hasattr(m, 'trace_plot') is False "
                             "else m.memory(d, format_flamegraph=ident)\n"
                             "    assert len(a) > 0 and len(b) > 0\n"
                             "    if hasattr(m, 'trace_plot'): m.trace_plot(d)\n"
                             "    print('ok', f, len(segs), st['total_size'] if st else '')\n";
    std::string cmd = "/usr/bin/python3 " + script + " " + fromSnapshot + " " + fromTrace;
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

namespace {

// Runs a command; false when it did not exit 0.
bool run(const std::string& cmd)
{
    return std::system(cmd.c_str()) == 0;
}

} // namespace

// Files in PyTorch's layout written by Python's pickle (bench/make_snapshot.py: frames shared through the memo
// as PyTorch's are; lists shared per site; frames of their own per traceback): every entry reads with the
// action, address, size and frames that Python's pickle.load gives it, each distinct frame and each distinct
// stack is interned once, and the allocation site is the first user frame.
TEST(Snapshot, PyTorchLayoutReadsAsPythonReadsIt)
{
    namespace fs = std::filesystem;
    auto dir = fs::temp_directory_path() / ("memledger-test-layout-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::string script = std::string(MEMLEDGER_SOURCE_DIR) + "/bench/make_snapshot.py";
    const char* variants[] = {"--nesting 2", "--share-lists", "--unique-frames 2"};
    int v = 0;
    for (const char* flags : variants) {
        SCOPED_TRACE(flags);
        auto pickle = (dir / ("s" + std::to_string(v) + ".pickle")).string();
        auto json = (dir / ("s" + std::to_string(v) + ".json")).string();
        ++v;
        ASSERT_TRUE(run("/usr/bin/python3 " + script + " " + pickle + " --entries 2500 " + flags + " 2>/dev/null"));
        // Python's own reading: each entry's action, addr, size and frames; the distinct frames and stacks.
        ASSERT_TRUE(run("/usr/bin/python3 -c \"import json, pickle, sys\n"
                        "d = pickle.load(open(sys.argv[1], 'rb'))\n"
                        "tr = [e for t in d['device_traces'] for e in t]\n"
                        "fr = lambda e: [[f['filename'], f['line'], f['name']] for f in e['frames']]\n"
                        "out = {'entries': [[e['action'], e['addr'], e['size'], fr(e)] for e in tr],\n"
                        "  'frames': len({(f['filename'], f['line'], f['name']) for e in tr for f in e['frames']}),\n"
                        "  'stacks': len({tuple(map(tuple, fr(e))) for e in tr if e['frames']})}\n"
                        "json.dump(out, open(sys.argv[2], 'w'))\" "
            + pickle + " " + json));
        nlohmann::json truth;
        std::ifstream(json) >> truth;
        Snapshot s = readSnapshotFile(pickle);
        const Trace& t = *s.trace;
        const auto& entries = truth["entries"];
        ASSERT_EQ(t.size(), entries.size());
        EXPECT_EQ(t.stacks.frameCount(), truth["frames"].get<std::size_t>());
        EXPECT_EQ(t.stacks.stackCount() - 1, truth["stacks"].get<std::size_t>()); // stack 0: the empty one
        for (std::size_t i = 0; i < t.size(); ++i) {
            const auto& e = entries[i];
            ASSERT_EQ(actionName(t.action[i]), e[0].get<std::string>()) << "entry " << i;
            ASSERT_EQ(t.address[i], e[1].get<std::uint64_t>()) << "entry " << i;
            ASSERT_EQ(t.bytes[i], e[2].get<std::int64_t>()) << "entry " << i;
            const auto& frames = e[3];
            ASSERT_EQ(t.stacks.depth(t.stack[i]), frames.size()) << "entry " << i;
            std::size_t k = 0;
            for (const auto* f = t.stacks.begin(t.stack[i]); f != t.stacks.end(t.stack[i]); ++f, ++k) {
                const auto& fr = t.stacks.frame(*f);
                ASSERT_EQ(t.strings.at(fr.file), frames[k][0].get<std::string>()) << "entry " << i << " frame " << k;
                ASSERT_EQ(fr.line, frames[k][1].get<std::int64_t>()) << "entry " << i << " frame " << k;
                ASSERT_EQ(t.strings.at(fr.name), frames[k][2].get<std::string>()) << "entry " << i << " frame " << k;
            }
        }
        // An allocation's site: its innermost frame of the user's own code (bench/make_snapshot.py puts the
        // user's files in /home/user/train), "file:line name".
        for (std::size_t i = 0; i < t.size(); ++i) {
            if (t.action[i] != Action::Alloc)
                continue;
            for (const auto& f : entries[i][3])
                if (f[0].get<std::string>().rfind("/home/user/train/", 0) == 0) {
                    ASSERT_EQ(t.strings.at(t.where[i]),
                        f[0].get<std::string>() + ":" + std::to_string(f[1].get<int>()) + " " + f[2].get<std::string>())
                        << "entry " << i;
                    break;
                }
        }
    }
    fs::remove_all(dir);
}

// Reading stops when asked to, with Cancelled, and reports its progress in bytes up to the whole file.
TEST(Snapshot, ReadingReportsProgressAndStopsOnCancel)
{
    namespace fs = std::filesystem;
    auto pickle = (fs::temp_directory_path() / ("memledger-test-cancel-" + std::to_string(::getpid()) + ".pickle"))
                      .string();
    ASSERT_TRUE(run("/usr/bin/python3 " + std::string(MEMLEDGER_SOURCE_DIR) + "/bench/make_snapshot.py " + pickle
        + " --entries 100000 2>/dev/null"));
    const auto size = fs::file_size(pickle);
    ASSERT_GT(size, std::uintmax_t {8} << 20); // more than two progress steps
    std::vector<std::size_t> seen;
    SnapshotReadOptions read;
    read.progress = [&](std::size_t done, std::size_t total) {
        EXPECT_EQ(total, size);
        seen.push_back(done);
    };
    Snapshot s = readSnapshotFile(pickle, read);
    EXPECT_EQ(s.trace->size(), 100000u);
    ASSERT_GE(seen.size(), 2u);
    EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
    EXPECT_EQ(seen.back(), size);

    std::atomic<bool> cancel {false};
    read.cancel = &cancel;
    read.progress = [&](std::size_t, std::size_t) { cancel = true; }; // Cancel pressed during the first step
    EXPECT_THROW(readSnapshotFile(pickle, read), Cancelled);
    fs::remove(pickle);
}

// external_annotations: every shared file's ranges, against what Python's pickle reads (the number of entries
// and of STARTs, per file), and the JSON report lists them.
// The ledgers of real training steps: every byte alive at the peak is in one ledger, the JSON has each ledger's
// at_peak, total and max, and the steps' gradients and optimizer state are told from their stacks.
TEST(Snapshot, LedgersOfRealTrainingSteps)
{
    SKIP_WITHOUT_SNAPSHOTS();
    for (const char* name : {"training-step-annotated.pickle", "training-loop-annotations-python-frames.pickle",
             "torch-compile-run.pickle", "many-segments.pickle"}) {
        SCOPED_TRACE(name);
        Report r = readSnapshotReport(snapshotPath(name), false);
        std::int64_t atPeak = 0;
        for (const auto& f : r.ledgers) {
            atPeak += f.at_peak;
            EXPECT_LE(f.at_peak, f.max);
        }
        EXPECT_EQ(atPeak, r.peak_bytes);
        auto j = reportToJson(r, false);
        for (const char* ledger : {"resident", "unattributed", "gradients", "weights"})
            for (const char* key : {"at_peak", "total", "max"})
                EXPECT_TRUE(j["ledgers"][ledger].contains(key)) << ledger << "." << key;
    }
    // C++ frames of the autograd engine and AccumulateGrad; Optimizer.step and zero_grad annotations
    Report r = readSnapshotReport(snapshotPath("training-step-annotated.pickle"), false);
    EXPECT_GT(r.ledgers[static_cast<std::size_t>(Ledger::Gradients)].max, 0);
    EXPECT_GT(r.ledgers[static_cast<std::size_t>(Ledger::OptimizerState)].total, 0);
    EXPECT_GT(r.ledgers[static_cast<std::size_t>(Ledger::SavedActivations)].max, 0);
    // Its trace begins on an empty device: every block alive at the end was allocated in it and no free lacks
    // its alloc (Python's pickle says so), so nothing is resident. The 6.5 MB once shown here were the blocks'
    // rounding (their sizes) less the trace's requested bytes.
    EXPECT_EQ(aliveBeforeTrace(*r.snapshot), 0);
    EXPECT_EQ(r.ledgers[static_cast<std::size_t>(Ledger::Resident)].max, 0);
}

// A hand-written optimizer that updates out of place (`p.data = p.data - ...`) frees each weight in its step and
// allocates the new value there: that is still a weight, not optimizer state. The real file's optimizer does so
// from its first step on; at the end of its trace the weights alive are the model's parameters (what the
// model's constructor, TransformerLM.__init__, allocated) and the optimizer state its two moments (what the
// optimizer's constructor allocated), as Python's pickle sums them.
TEST(Snapshot, AWeightAnOptimizerReplacesStaysAWeight)
{
    SKIP_WITHOUT_SNAPSHOTS();
    const std::string file = snapshotPath("training-step-annotated.pickle");
    const auto figures = figuresByPython("import pickle, sys\n"
                                         "d = pickle.load(open(sys.argv[1], 'rb'))\n"
                                         "def made_by(init_file):\n"
                                         "    return sum(e['size'] for t in d['device_traces'] for e in t if e['action'] == 'alloc'\n"
                                         "               and any(f['filename'].endswith(init_file) and f['name'] == '__init__'\n"
                                         "                       for f in e['frames']))\n"
                                         "print(made_by('TransformerLM.py'), made_by('optimizer.py'))\n",
        file);
    ASSERT_EQ(figures.size(), 2u);
    const std::int64_t parameters = figures[0], moments = figures[1];
    ASSERT_GT(parameters, 0);
    ASSERT_EQ(moments, 2 * parameters);

    Report r = readSnapshotReport(file, false);
    std::map<Ledger, std::int64_t> atEnd;
    for (std::size_t i = 0; i < r.trace->size(); ++i)
        if (r.trace->action[i] == Action::Alloc && r.trace->partner[i] == kNoPartner)
            atEnd[r.trace->ledger[i]] += r.trace->bytes[i];
    EXPECT_EQ(atEnd[Ledger::Weights], parameters);
    EXPECT_EQ(atEnd[Ledger::OptimizerState], moments);

    // Built: the step allocates a new moment, then the weight's new value, then frees the old weight; only the
    // new value is a weight. Adam's in-place update (no weight freed) leaves its state as it was.
    Snapshot s = snapshotBuiltBy("out-of-place", R"(
import pickle, sys
init = [{'filename': '/home/u/model.py', 'line': 5, 'name': '__init__'},
        {'filename': '/home/u/train.py', 'line': 3, 'name': 'main'}]
step = [{'filename': '/home/u/my_optimizer.py', 'line': 40, 'name': 'step'},
        {'filename': '/home/u/train.py', 'line': 9, 'name': 'main'}]
def e(action, addr, t, frames):
    return {'action': action, 'addr': addr, 'size': 4096, 'stream': 0, 'time_us': t, 'frames': frames}
trace = [e('alloc', 1 << 20, 1, init),
         e('alloc', 2 << 20, 2, step), e('alloc', 3 << 20, 3, step),
         e('free_requested', 1 << 20, 4, step), e('free_completed', 1 << 20, 5, step)]
pickle.dump({'segments': [], 'device_traces': [trace]}, open(sys.argv[1], 'wb'), 4)
)");
    const Trace& t = *s.trace;
    ASSERT_EQ(t.size(), 5u);
    EXPECT_EQ(t.ledger[0], Ledger::Weights);
    EXPECT_EQ(t.ledger[1], Ledger::OptimizerState); // the new moment
    EXPECT_EQ(t.ledger[2], Ledger::Weights); // the weight's new value
}

// Autocast's weight-cast cache, told from where the file says each block is freed: clearing the cache when the
// region ends. The real file is a bfloat16 autocast step of a transformer whose Linear layers run einsum on their
// float32 weights: autocast casts each weight once per region, so the cache is half the bytes the Linear layers'
// constructors allocated (Python's pickle sums them), and those copies are no longer activations.
TEST(Snapshot, AutocastsWeightCastsAreTheirOwnLedger)
{
    SKIP_WITHOUT_SNAPSHOTS();
    const std::string file = snapshotPath("training-step-annotated.pickle");
    const auto figures = figuresByPython("import pickle, sys\n"
                                         "d = pickle.load(open(sys.argv[1], 'rb'))\n"
                                         "print(sum(e['size'] for t in d['device_traces'] for e in t if e['action'] == 'alloc'\n"
                                         "          and any(f['filename'].endswith('linear.py') and f['name'] == '__init__'\n"
                                         "                  for f in e['frames'])))\n",
        file);
    ASSERT_EQ(figures.size(), 1u);
    const std::int64_t linearWeights = figures[0];
    ASSERT_GT(linearWeights, 0);

    Report r = readSnapshotReport(file, false);
    const auto& cache = r.ledgers[static_cast<std::size_t>(Ledger::AutocastCache)];
    EXPECT_EQ(cache.total, linearWeights / 2); // bfloat16 copies of float32 weights
    EXPECT_EQ(cache.max, linearWeights / 2); // one region's casts, alive together until it ends
    auto j = reportToJson(r, false);
    EXPECT_EQ(j["ledgers"]["autocast_cache"]["total"], linearWeights / 2);
    std::int64_t cast = 0; // every event of the ledger is a block's alloc and its free, in pairs
    for (std::size_t i = 0; i < r.trace->size(); ++i)
        if (r.trace->ledger[i] == Ledger::AutocastCache)
            cast += r.trace->action[i] == Action::Alloc ? r.trace->bytes[i] : -r.trace->bytes[i];
    EXPECT_EQ(cast, 0);

    // Python frames only (stacks="python"): the region's __exit__ frees the cache; an activation freed by the
    // backward, and one freed in the forward after the region, keep their ledgers.
    Snapshot s = snapshotBuiltBy("autocast", R"(
import pickle, sys
fwd = [{'filename': '/site-packages/torch/nn/modules/module.py', 'line': 1750, 'name': '_call_impl'},
       {'filename': '/home/u/model.py', 'line': 20, 'name': 'forward'},
       {'filename': '/home/u/train.py', 'line': 30, 'name': 'main'}]
exit_ = [{'filename': '/site-packages/torch/amp/autocast_mode.py', 'line': 390, 'name': '__exit__'},
         {'filename': '/home/u/train.py', 'line': 32, 'name': 'main'}]
bwd = [{'filename': '/site-packages/torch/autograd/graph.py', 'line': 825, 'name': '_engine_run_backward'},
       {'filename': '/home/u/train.py', 'line': 33, 'name': 'main'}]
def e(action, addr, t, frames):
    return {'action': action, 'addr': addr, 'size': 4096, 'stream': 0, 'time_us': t, 'frames': frames}
trace = [e('alloc', 1 << 20, 1, fwd), e('alloc', 2 << 20, 2, fwd),
         e('free_requested', 1 << 20, 3, exit_), e('free_completed', 1 << 20, 4, exit_),
         e('free_requested', 2 << 20, 5, bwd), e('free_completed', 2 << 20, 6, bwd)]
pickle.dump({'segments': [], 'device_traces': [trace]}, open(sys.argv[1], 'wb'), 4)
)");
    const Trace& t = *s.trace;
    ASSERT_EQ(t.action[0], Action::Alloc);
    EXPECT_EQ(t.ledger[0], Ledger::AutocastCache);
    EXPECT_EQ(t.ledger[1], Ledger::SavedActivations);
}

TEST(Snapshot, AnnotationsAreTheFilesStartEndPairs)
{
    SKIP_WITHOUT_SNAPSHOTS();
    std::string list = std::filesystem::temp_directory_path() / ("memledger-annotations-" + std::to_string(::getpid()));
    std::string script = "import pickle, sys, os\n"
                         "d = sys.argv[1]\n"
                         "for f in sorted(os.listdir(d)):\n"
                         "    if not (f.endswith('.pickle') or f.endswith('.pkl')): continue\n"
                         "    s = pickle.load(open(os.path.join(d, f), 'rb'))\n"
                         "    a = s.get('external_annotations', []) if isinstance(s, dict) else []\n"
                         "    print(f, len(a), sum(1 for e in a if e.get('stage') == 'START'))\n";
    std::string scriptPath = list + ".py";
    std::ofstream(scriptPath) << script;
    ASSERT_EQ(std::system(("/usr/bin/python3 " + scriptPath + " " MEMLEDGER_SNAPSHOTS " > " + list).c_str()), 0);
    std::ifstream in(list);
    std::string file;
    std::int64_t entries = 0, starts = 0;
    int files = 0, annotated = 0;
    while (in >> file >> entries >> starts) {
        SCOPED_TRACE(file);
        ++files;
        auto report = readSnapshotReport(snapshotPath(file));
        ASSERT_TRUE(report.snapshot);
        EXPECT_EQ(report.snapshot->annotation_entries, entries);
        EXPECT_EQ(static_cast<std::int64_t>(report.snapshot->annotations.size()), starts);
        auto j = reportToJson(report);
        EXPECT_EQ(static_cast<std::int64_t>(j["snapshot"]["annotations"].size()), starts);
        for (const auto& a : report.snapshot->annotations)
            EXPECT_GE(a.end_us, a.start_us) << a.name;
        annotated += entries > 0;
    }
    std::remove(list.c_str());
    std::remove(scriptPath.c_str());
    EXPECT_GE(files, 10);
    EXPECT_GE(annotated, 2);
}

// Each range's figures: the most bytes alive inside it is at least what was alive at its start and end, and
// a zero_grad(set_to_none=True) after a step frees the gradients (PyTorch drops every .grad there).
TEST(Snapshot, AnnotationRangesSayTheirPeakAndWhatTheyAdded)
{
    SKIP_WITHOUT_SNAPSHOTS();
    auto report = readSnapshotReport(snapshotPath("training-step-annotated.pickle"));
    auto figures = annotationFigures(report);
    ASSERT_EQ(figures.size(), report.snapshot->annotations.size());
    bool freedByZeroGrad = false;
    for (std::size_t i = 0; i < figures.size(); ++i) {
        EXPECT_GE(figures[i].peak_bytes, 0);
        EXPECT_LE(figures[i].peak_bytes, report.peak_bytes);
        if (report.snapshot->annotations[i].name.find("zero_grad") != std::string::npos && figures[i].added_bytes < 0)
            freedByZeroGrad = true;
    }
    EXPECT_TRUE(freedByZeroGrad);
    auto j = reportToJson(report);
    EXPECT_EQ(j["snapshot"]["annotations"][1]["peak_bytes"], figures[1].peak_bytes);
}

// A block alive before the trace that the optimizer's step frees (the previous step's AdamW moments, which the
// step replaces) is optimizer state, not resident; one freed before any phase the trace tells stays resident.
TEST(Snapshot, ABlockTheOptimizerStepFreesIsOptimizerState)
{
    Snapshot s = snapshotBuiltBy("optimizer-free", R"(
import pickle, sys
def e(action, addr, t):
    return {'action': action, 'addr': addr, 'size': 4096, 'stream': 0, 'time_us': t, 'frames': []}
trace = [e('free_requested', 1 << 21, 1), e('free_completed', 1 << 21, 2),
         e('free_requested', 1 << 20, 10), e('free_completed', 1 << 20, 11), e('alloc', 1 << 20, 12)]
ann = [{'stage': 'START', 'name': 'Optimizer.step#AdamW.step', 'device': 0, 'time_us': 5},
       {'stage': 'END', 'name': 'Optimizer.step#AdamW.step', 'device': 0, 'time_us': 20}]
pickle.dump({'segments': [], 'device_traces': [trace], 'external_annotations': ann}, open(sys.argv[1], 'wb'), 4)
)");
    const Trace& t = *s.trace;
    ASSERT_EQ(t.size(), 5u);
    ASSERT_EQ(t.action[1], Action::Free);
    EXPECT_EQ(t.ledger[1], Ledger::Resident);
    ASSERT_EQ(t.action[3], Action::Free);
    EXPECT_EQ(t.partner[3], kNoPartner);
    EXPECT_EQ(t.ledger[3], Ledger::OptimizerState);
    EXPECT_EQ(t.ledger[4], Ledger::OptimizerState); // allocated by the step, alive after it
}
