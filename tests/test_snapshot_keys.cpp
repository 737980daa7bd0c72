// Every key PyTorch's snapshot writers emit: a synthetic snapshot that carries them all (written by
// tests/fixtures/snapshot_keys.py, which also sums its figures from the pickle on its own) opens, its
// user_metadata and compile_context figures are Python's, and the keys memledger reads past are listed.
#include "analysis/report_range.h"
#include "exports/report_json.h"
#include "snapshot/frames.h"
#include "snapshot/snapshot.h"
#include "snapshot/snapshot_contexts.h"

#include "run_command.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <map>
#include <unistd.h>

using namespace memledger;

namespace {

const std::string kScript = std::string(MEMLEDGER_SOURCE_DIR) + "/tests/fixtures/snapshot_keys.py";

nlohmann::json runTruth(const std::string& mode, const std::string& path)
{
    auto run = test::runCommand("/usr/bin/python3 " + kScript + " " + mode + " " + path + " 2>/dev/null");
    EXPECT_EQ(run.exit_code, 0) << run.output;
    return nlohmann::json::parse(run.output);
}

// The synthetic file, written once per test program and removed at its end.
struct Synthetic {
    std::string path = (std::filesystem::temp_directory_path()
        / ("memledger-snapshot-keys-" + std::to_string(::getpid()) + ".pickle"))
                           .string();
    nlohmann::json truth = runTruth("write", path);
    ~Synthetic()
    {
        std::error_code ec;
        std::filesystem::remove(path, ec);
    }
};

const Synthetic& synthetic()
{
    static const Synthetic s;
    return s;
}

// Figures by value ("" for none) as memledger and as Python have them.
using Figures = std::map<std::string, std::array<std::int64_t, 3>>;

Figures ours(const std::vector<ContextFigure>& list)
{
    Figures out;
    for (const auto& f : list)
        out[f.value] = {f.allocations, f.allocated_bytes, f.peak_bytes};
    return out;
}

Figures python(const nlohmann::json& list)
{
    Figures out;
    for (const auto& f : list)
        out[f["value"].is_null() ? std::string() : f["value"].get<std::string>()]
            = {f["allocations"].get<std::int64_t>(), f["allocated_bytes"].get<std::int64_t>(),
                f["peak_bytes"].get<std::int64_t>()};
    return out;
}

bool contains(const std::vector<std::string>& v, const std::string& s)
{
    return std::find(v.begin(), v.end(), s) != v.end();
}

} // namespace

TEST(SnapshotKeys, ASnapshotWithEveryKeyOpens)
{
    const auto& syn = synthetic();
    Snapshot s = readSnapshotFile(syn.path);
    ASSERT_TRUE(s.trace);
    EXPECT_EQ(s.trace->size(), syn.truth["rows"].get<std::size_t>()); // annotate is no row, oom is one
    EXPECT_EQ(s.skipped_entries, 0); // annotate is read (AnnotationsNameTheirAllocations)
    EXPECT_EQ(s.traceCount(Action::SegmentMap), 1u);
    EXPECT_EQ(s.traceCount(Action::SegmentUnmap), 1u);
    ASSERT_EQ(s.ooms.size(), 1u);
    EXPECT_EQ(s.ooms[0].device_free, 12345);
    EXPECT_EQ(s.ooms[0].bytes_requested, std::int64_t(1) << 30);
    ASSERT_EQ(s.segments.size(), 1u);
    EXPECT_EQ(s.segments[0].pool_id[0], 1);
    EXPECT_EQ(s.segments[0].pool_id[1], 2);
    EXPECT_TRUE(s.segments[0].is_expandable);
    EXPECT_TRUE(s.settings.expandable_segments);
    ASSERT_EQ(s.annotations.size(), 1u);
    EXPECT_EQ(s.devices, (std::vector<int> {0, 1}));
    // Read past and listed: the entries' pool_id and forward_frames. Host memory is read (HostMemory below).
    for (const char* key : {"device_traces[].pool_id", "device_traces[].forward_frames", "device_traces[].internal_metadata"})
        EXPECT_TRUE(contains(s.ignored_keys, key)) << key;
    EXPECT_FALSE(contains(s.ignored_keys, "host_segments"));
    EXPECT_FALSE(contains(s.ignored_keys, "host_traces"));
    EXPECT_FALSE(contains(s.ignored_keys, "device_traces[].user_metadata"));
    EXPECT_FALSE(contains(s.ignored_keys, "device_traces[].compile_context"));
}

// torch.cuda.memory._annotate_tensor's `annotate` entries name the allocation alive at their address, as Python
// finds it in the pickle; one names a block of before the trace.
TEST(SnapshotKeys, AnnotationsNameTheirAllocations)
{
    const auto& syn = synthetic();
    Report r = readSnapshotReport(syn.path);
    ASSERT_TRUE(r.snapshot && r.trace);
    const auto& truth = syn.truth["tensor_annotations"];
    const auto& ours = r.snapshot->tensor_annotations;
    ASSERT_EQ(ours.size(), truth.size());
    ASSERT_EQ(ours.size(), 2u);
    auto j = reportToJson(r, false);
    const auto& listed = j["snapshot"]["tensor_annotations"];
    ASSERT_EQ(listed.size(), truth.size());
    for (std::size_t k = 0; k < ours.size(); ++k) {
        const auto& a = ours[k];
        EXPECT_EQ(a.text, truth[k]["text"].get<std::string>());
        EXPECT_EQ(listed[k]["text"], truth[k]["text"]);
        EXPECT_EQ(listed[k]["bytes"], truth[k]["bytes"]) << a.text;
        if (truth[k]["bytes"].is_null()) {
            EXPECT_EQ(a.event, TensorAnnotation::kBeforeTrace);
            EXPECT_TRUE(listed[k]["alloc_event"].is_null());
            continue;
        }
        ASSERT_LT(a.event, r.trace->size());
        EXPECT_EQ(r.trace->action[a.event], Action::Alloc);
        EXPECT_EQ(r.trace->address[a.event], a.address);
        EXPECT_EQ(r.trace->bytes[a.event], truth[k]["bytes"].get<std::int64_t>());
        EXPECT_EQ(listed[k]["alloc_event"], a.event);
        ASSERT_EQ(annotationsOfEvent(*r.snapshot, a.event).size(), 1u);
        EXPECT_NE(a.stack, 0u); // the annotation site's frames
    }
    bool note = false;
    for (const auto& n : r.notes)
        note = note || n.find("2 allocation annotations") != std::string::npos;
    EXPECT_TRUE(note);
}

TEST(SnapshotKeys, EachEventKeepsItsUserMetadataAndCompileContext)
{
    Snapshot s = readSnapshotFile(synthetic().path);
    const Trace& t = *s.trace;
    ASSERT_TRUE(hasContexts(s));
    // Five distinct (user_metadata, compile_context) pairs besides none: (step 1, -), (step 1, frame 0/0),
    // (step 2, frame 0/0), (step 2, -) of the oom, (-, frame 1/0).
    EXPECT_EQ(s.trace_context.values().size(), 6u);
    EXPECT_LE(s.trace_context.size(), t.size());
    std::map<std::int64_t, std::pair<std::string, std::string>> byBytes; // allocs have distinct sizes
    for (std::size_t i = 0; i < t.size(); ++i)
        if (t.action[i] == Action::Alloc || t.action[i] == Action::Oom)
            byBytes[t.bytes[i]] = {contextOfEvent(s, i, ContextKind::UserMetadata),
                contextOfEvent(s, i, ContextKind::CompileContext)};
    using P = std::pair<std::string, std::string>;
    EXPECT_EQ(byBytes[1024], P("step 1", ""));
    EXPECT_EQ(byBytes[2048], P("step 1", "torch-compiled frame 0/0"));
    EXPECT_EQ(byBytes[512], P("step 1", "")); // device 1: merged on one clock, the column follows
    EXPECT_EQ(byBytes[4096], P("", ""));
    EXPECT_EQ(byBytes[8192], P("step 2", "torch-compiled frame 0/0"));
    EXPECT_EQ(byBytes[std::int64_t(1) << 30], P("step 2", "")); // the oom entry (read from the tree)
    EXPECT_EQ(byBytes[256], P("", "torch-compiled frame 1/0"));
    EXPECT_EQ(contextOfEvent(s, t.size() + 5, ContextKind::UserMetadata), "");
}

TEST(SnapshotKeys, FxFramesReadWithTheirNode)
{
    Snapshot s = readSnapshotFile(synthetic().path);
    const Trace& t = *s.trace;
    bool found = false;
    for (std::size_t i = 0; i < t.size(); ++i) {
        if (t.action[i] != Action::Alloc || t.bytes[i] != 8192)
            continue;
        ASSERT_NE(t.stack[i], 0u);
        const auto& fr = t.stacks.frame(*t.stacks.begin(t.stack[i]));
        EXPECT_EQ(t.strings.at(fr.name), "forward (fx: add_1 = aten.add.Tensor)");
        // torch.compile's generated code is outside torch: its frame, with its node, names the allocation.
        EXPECT_EQ(t.strings.at(t.where[i]), "/tmp/torchinductor/xy/cxy.py:7 forward (fx: add_1 = aten.add.Tensor)");
        found = true;
    }
    EXPECT_TRUE(found);
    EXPECT_EQ(fxFrameName("f", "", ""), "f");
    EXPECT_EQ(fxFrameName("f", "mm", ""), "f (fx: mm)");
}

TEST(SnapshotKeys, FiguresPerValueArePythons)
{
    const auto& syn = synthetic();
    Report r = readSnapshotReport(syn.path);
    ASSERT_EQ(r.peak_event, syn.truth["peak_event"].get<std::int32_t>());
    for (auto kind : {ContextKind::UserMetadata, ContextKind::CompileContext}) {
        const auto list = contextFigures(r, kind);
        const char* key = kind == ContextKind::UserMetadata ? "user_metadata" : "compile_contexts";
        EXPECT_EQ(ours(list), python(syn.truth[key])) << key;
        ASSERT_FALSE(list.empty());
        EXPECT_EQ(list.back().value, ""); // none last, the values by bytes before it
        for (std::size_t k = 1; k + 1 < list.size(); ++k)
            EXPECT_GE(list[k - 1].allocated_bytes, list[k].allocated_bytes);
        // The figures add up to the trace's allocations.
        std::int64_t bytes = 0, all = 0;
        for (const auto& f : list)
            bytes += f.allocated_bytes;
        for (std::size_t i = 0; i < r.trace->size(); ++i)
            all += r.trace->action[i] == Action::Alloc ? r.trace->bytes[i] : 0;
        EXPECT_EQ(bytes, all);
    }
    // The JSON carries the same lists.
    auto j = reportToJson(r, false);
    EXPECT_EQ(python(j["snapshot"]["user_metadata"]), python(syn.truth["user_metadata"]));
    EXPECT_EQ(python(j["snapshot"]["compile_contexts"]), python(syn.truth["compile_contexts"]));
    EXPECT_TRUE(j["snapshot"]["ignored_keys"].is_array());
    bool hostNote = false;
    for (const auto& n : r.notes)
        hostNote = hostNote || n.find("host (pinned): 4 allocations") != std::string::npos;
    EXPECT_TRUE(hostNote);
}

namespace {

// The GPU figures of a snapshot, which its host memory must leave as they are.
struct GpuFigures {
    std::size_t rows;
    std::int64_t peak, peakEvent, reserved, allocated;
    std::vector<int> devices;
    bool operator==(const GpuFigures& o) const
    {
        return rows == o.rows && peak == o.peak && peakEvent == o.peakEvent && reserved == o.reserved
            && allocated == o.allocated && devices == o.devices;
    }
};

GpuFigures gpuFigures(const Report& r)
{
    return {r.trace->size(), r.peak_bytes, r.peak_event, r.snapshot->reservedBytes(), r.snapshot->allocatedBytes(),
        r.snapshot->devices};
}

void expectHostIsPythons(const Report& r, const nlohmann::json& truth)
{
    ASSERT_TRUE(r.snapshot->host);
    const auto h = hostFigures(*r.snapshot);
    ASSERT_TRUE(h.present);
    EXPECT_EQ(h.allocations, truth["allocations"].get<std::int64_t>());
    EXPECT_EQ(h.allocated_bytes, truth["allocated_bytes"].get<std::int64_t>());
    EXPECT_EQ(h.peak_bytes, truth["peak_bytes"].get<std::int64_t>());
    EXPECT_EQ(h.segments, truth["segments"].get<std::int64_t>());
    EXPECT_EQ(h.reserved_bytes, truth["reserved_bytes"].get<std::int64_t>());
}

} // namespace

TEST(SnapshotKeys, HostMemoryIsADeviceOfItsOwn)
{
    const auto& syn = synthetic();
    Report r = readSnapshotReport(syn.path);
    const Snapshot& s = *r.snapshot;
    ASSERT_TRUE(s.host);
    // Its allocations, bytes and peak are Python's sums.
    expectHostIsPythons(r, syn.truth["host"]);
    // Every host row on the host device, none in the GPUs' trace; its device named in text and JSON.
    const Snapshot& h = *s.host;
    EXPECT_EQ(h.devices, (std::vector<int> {kHostDevice}));
    ASSERT_TRUE(h.trace);
    EXPECT_EQ(h.trace->size(), 11u);
    for (std::size_t i = 0; i < h.trace->size(); ++i)
        EXPECT_EQ(h.trace->device[i], kHostDevice);
    for (std::size_t i = 0; i < r.trace->size(); ++i)
        EXPECT_NE(r.trace->device[i], kHostDevice);
    for (const auto& g : h.segments)
        EXPECT_EQ(g.device, kHostDevice);
    EXPECT_TRUE(h.trace_has_time);
    EXPECT_EQ(h.trace_start_us, 99);
    EXPECT_NE(kHostDevice, -1);
    EXPECT_NE(kHostDevice, -2); // TimelineSeries::kAllDevices
    EXPECT_EQ(snapshotDeviceName(kHostDevice), "host (pinned)");
    // The GPU figures are those of the same file without its host keys (Python's peak event too).
    EXPECT_EQ(r.peak_event, syn.truth["peak_event"].get<std::int32_t>());
    EXPECT_EQ(r.trace->size(), syn.truth["rows"].get<std::size_t>());
    auto j = reportToJson(r, false);
    EXPECT_EQ(j["snapshot"]["devices"], nlohmann::json::array({0, 1}));
    EXPECT_EQ(j["snapshot"]["device_names"], nlohmann::json::array({"cuda:0", "cuda:1", "host (pinned)"}));
    EXPECT_EQ(j["snapshot"]["host"]["name"], "host (pinned)");
    EXPECT_EQ(j["snapshot"]["host"]["peak_bytes"], syn.truth["host"]["peak_bytes"]);
    EXPECT_EQ(j["snapshot"]["host"]["allocations"], syn.truth["host"]["allocations"]);
    // Ledgers by the same rules: every host alloc has one; the host report's ledgers sum to its allocations.
    Report hr = hostReport(r);
    EXPECT_EQ(hr.run.device, "host (pinned)");
    EXPECT_EQ(hr.peak_bytes, syn.truth["host"]["peak_bytes"].get<std::int64_t>());
    std::int64_t total = 0;
    for (const auto& f : hr.ledgers)
        total += f.total;
    EXPECT_EQ(total, syn.truth["host"]["allocated_bytes"].get<std::int64_t>());
}

TEST(SnapshotKeys, MalformedHostEntriesLeaveTheFileOpenAndTheGpusAlone)
{
    const auto& syn = synthetic();
    const auto bad = std::filesystem::temp_directory_path()
        / ("memledger-snapshot-keys-bad-" + std::to_string(::getpid()) + ".pickle");
    auto truth = runTruth("malformed", bad.string());
    Report r = readSnapshotReport(bad.string());
    Report good = readSnapshotReport(syn.path);
    EXPECT_EQ(gpuFigures(r), gpuFigures(good));
    EXPECT_EQ(r.snapshot->tensor_annotations.size(), truth["tensor_annotations"].size()); // the bad ones skipped
    EXPECT_EQ(r.snapshot->tensor_annotations.size(), good.snapshot->tensor_annotations.size());
    expectHostIsPythons(r, truth["host"]);
    EXPECT_GT(r.snapshot->host_skipped, 0);
    bool note = false;
    for (const auto& n : r.notes)
        note = note || n.find("of another shape were left out") != std::string::npos;
    EXPECT_TRUE(note);
    std::error_code ec;
    std::filesystem::remove(bad, ec);

    // host_traces and host_segments that are not lists: noted, never fatal.
    static const char kOdd[] = "\x80\x02\x7d\x71\x00\x28\x58\x08\x00\x00\x00\x73\x65\x67\x6d\x65\x6e\x74\x73\x71\x01\x5d\x71\x02\x58\x0d\x00\x00\x00\x64\x65\x76\x69\x63\x65\x5f\x74\x72\x61\x63\x65\x73\x71\x03\x5d\x71\x04\x5d\x71\x05\x61\x58\x0d\x00\x00\x00\x68\x6f\x73\x74\x5f\x73\x65\x67\x6d\x65\x6e\x74\x73\x71\x06\x58\x01\x00\x00\x00\x78\x71\x07\x58\x0b\x00\x00\x00\x68\x6f\x73\x74\x5f\x74\x72\x61\x63\x65\x73\x71\x08\x58\x01\x00\x00\x00\x79\x71\x09\x75\x2e"; // {"segments": [], "device_traces": [[]], "host_segments": "x", "host_traces": "y"}
    const std::string odd(kOdd, sizeof kOdd - 1);
    Snapshot s = decodeSnapshot(odd, "odd.pickle");
    ASSERT_TRUE(s.host);
    EXPECT_EQ(s.host_skipped, 2);
    EXPECT_EQ(s.devices, (std::vector<int> {0}));
}

TEST(SnapshotKeys, RealFilesWithCompileContextOpen)
{
    for (const char* name : {"training-loop-annotations-python-frames.pickle", "torch-compile-run.pickle",
             "training-step-annotated.pickle"}) {
        auto path = std::string(MEMLEDGER_SNAPSHOTS) + "/" + name;
        if (!std::filesystem::exists(path))
            GTEST_SKIP() << path << " is absent: real-snapshot checks skipped";
        auto truth = runTruth("truth", path);
        Report r = readSnapshotReport(path);
        ASSERT_TRUE(r.trace) << name;
        EXPECT_EQ(r.trace->size(), truth["rows"].get<std::size_t>()) << name;
        // Their compile_context is "N/A" and user_metadata "" throughout: PyTorch's words for none.
        EXPECT_EQ(ours(contextFigures(r, ContextKind::UserMetadata)), python(truth["user_metadata"])) << name;
        EXPECT_EQ(ours(contextFigures(r, ContextKind::CompileContext)), python(truth["compile_contexts"])) << name;
        EXPECT_TRUE(r.snapshot->trace_context.empty()) << name;
        EXPECT_EQ(r.snapshot->trace_context.size(), 0u) << name; // no column: no memory per event
        EXPECT_TRUE(r.snapshot->ignored_keys.empty()) << name;
    }
}

TEST(SnapshotKeys, FiguresFollowARange)
{
    Report whole = readSnapshotReport(synthetic().path);
    const Trace& t = *whole.trace;
    // Every range of the trace: the figures are the sums over the allocations it made, alive at its peak.
    for (std::uint32_t first = 0; first < t.size(); ++first)
        for (std::uint32_t end = first + 1; end <= t.size(); ++end) {
            Report r = reportForRange(whole, first, end);
            for (auto kind : {ContextKind::UserMetadata, ContextKind::CompileContext}) {
                Figures want;
                bool anyValue = false;
                for (std::uint32_t i = first; i < end; ++i) {
                    if (t.action[i] != Action::Alloc)
                        continue;
                    const auto& v = contextOfEvent(*r.snapshot, i, kind);
                    anyValue = anyValue || !v.empty();
                    auto& f = want[v];
                    f[0] += 1;
                    f[1] += t.bytes[i];
                    const auto freed = t.partner[i];
                    if (r.peak_event >= 0 && std::int64_t(i) <= r.peak_event
                        && (freed == kNoPartner || freed > r.peak_event))
                        f[2] += t.bytes[i];
                }
                if (!anyValue)
                    want.clear();
                EXPECT_EQ(ours(contextFigures(r, kind)), want) << first << ".." << end;
            }
        }
}
