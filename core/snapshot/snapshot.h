#pragma once
// A CUDA memory snapshot, as written by torch.cuda.memory._dump_snapshot(), read without Python.
#include "allocator/caching_allocator.h"
#include "report/report.h"
#include "report/trace.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace memledger {

struct SnapshotFrame {
    std::string filename;
    std::int64_t line = 0;
    std::string name;
};

enum class BlockState : std::uint8_t { ActiveAllocated, ActivePendingFree, Inactive, Other };

// The state as a snapshot file spells it: "active_allocated", "active_pending_free", "inactive"; "other".
const char* blockStateName(BlockState s);

struct SnapshotBlock {
    std::uint64_t address = 0;
    std::int64_t size = 0;
    std::int64_t requested_size = 0;
    BlockState state = BlockState::Other;
    std::vector<SnapshotFrame> frames; // legacy files: the frames of the last `history` entry
};

struct SnapshotSegment {
    int device = 0;
    std::uint64_t address = 0;
    std::int64_t total_size = 0;
    std::int64_t allocated_size = 0;
    std::int64_t active_size = 0;
    std::int64_t requested_size = 0;
    std::uint64_t stream = 0;
    std::string segment_type; // "small" | "large" | "" when absent
    bool is_expandable = false;
    // segment_pool_id: the private pool that owns the segment (CUDA graphs, torch.cuda.MemPool); (0, 0): none.
    std::int64_t pool_id[2] = {0, 0};
    std::vector<SnapshotBlock> blocks;
};

struct SnapshotOom {
    int device = 0;
    std::int64_t bytes_requested = 0;
    std::int64_t device_free = 0;
    std::int64_t time_ns = 0;
    std::string where;
};

struct SnapshotSettings {
    bool present = false;
    std::string conf; // PYTORCH_CUDA_ALLOC_CONF
    std::int64_t max_split_size = -1; // -1: unlimited
    bool expandable_segments = false;
    std::map<std::int64_t, int> roundup_power2_divisions; // size bucket (MiB) -> divisions; zeros dropped
    double garbage_collection_threshold = 0.0;
    bool isDefault() const;
    AllocatorSettings toModel() const;
};

// What the caching-allocator model makes of the snapshot's alloc/free sequence.
struct SnapshotAllocatorCheck {
    bool done = false;
    std::string unit; // "segment_alloc" or "segment_map" (expandable segments)
    std::int64_t recorded = 0; // segment growth events in the trace
    std::int64_t reproduced = 0; // of them, how many the model made with the same size, in order
    std::int64_t model_total = 0; // growth events the model made
    bool matched = false;
    // Where the model first puts an allocation elsewhere than the GPU did (the trace entry, -1: never), and what
    // the model held there: said in the report when the sizes are not all reproduced.
    std::int64_t departure_event = -1;
    std::string departure;
    AllocatorReplay replay;
};

// A record_function range of the file's external_annotations (Optimizer.step#AdamW.step, torch.compile's
// phases): a START and its END on one device.
struct SnapshotAnnotation {
    std::string name;
    int device = 0;
    std::int64_t start_us = 0; // as the file has them (time_us, the trace's clock)
    std::int64_t end_us = -1; // -1: no END in the file (open until the end)
};

// What a trace entry carries beside its frames: user_metadata (torch.cuda.memory._set_memory_metadata) and
// compile_context (torch.compile's frame and graph). PyTorch writes both on every entry of newer files, ""
// (compile_context "N/A") when unset: those read as none.
struct TraceContext {
    std::uint32_t user_metadata = 0; // string ids in the trace's strings; 0: none
    std::uint32_t compile_context = 0;
    bool operator==(const TraceContext& o) const
    {
        return user_metadata == o.user_metadata && compile_context == o.compile_context;
    }
};

// The context of each trace event, interned: most files have none (no column at all); a file that has them
// holds a 4-byte index per event into the distinct (user_metadata, compile_context) pairs.
class TraceContextColumn {
public:
    TraceContextColumn() { values_.push_back({}); }
    // The context of event i; {0, 0} past the column's end (events before the first with a context).
    const TraceContext& operator[](std::size_t i) const { return values_[i < index_.size() ? index_[i] : 0]; }
    bool empty() const { return values_.size() == 1; } // no event has a context
    std::size_t size() const { return index_.size(); }
    const std::vector<TraceContext>& values() const { return values_; } // [0]: none
    std::uint32_t indexAt(std::size_t i) const { return i < index_.size() ? index_[i] : 0; }
    // Sets event `row`'s context (events are set in order; rows skipped read as none).
    void set(std::size_t row, const TraceContext& c);
    // Room for `n` events, taken when the first context is set (a file without contexts takes none).
    void reserve(std::size_t n) { reserve_ = n; }
    std::size_t memoryBytes() const
    {
        return index_.capacity() * sizeof(std::uint32_t) + values_.capacity() * sizeof(TraceContext);
    }

private:
    std::vector<std::uint32_t> index_;
    std::vector<TraceContext> values_;
    std::unordered_map<std::uint64_t, std::uint32_t> ids_; // (user_metadata << 32 | compile_context) -> value
    std::size_t reserve_ = 0;
};

// An annotation attached to a live allocation after the fact (torch.cuda.memory._annotate_tensor, torch 2.15):
// an `annotate` trace entry keyed to the allocation's base address, its text in the entry's user_metadata.
struct TensorAnnotation {
    static constexpr std::uint32_t kBeforeTrace = UINT32_MAX;
    std::uint32_t event = kBeforeTrace; // the alloc event of the allocation it names; kBeforeTrace: none in the trace
    std::uint64_t address = 0;
    int device = 0;
    std::int64_t time_ns = 0; // on the trace's clock
    std::string text;
    std::uint32_t stack = 0; // the annotation site's frames (in the trace's stacks); 0: none
};

// The device id of a snapshot's pinned host memory (host_segments, host_traces): no GPU index (0..127), not
// TimelineSeries::kAllDevices (-2) nor the CPU (-1). Its figures are never summed into the GPUs'.
constexpr int kHostDevice = -3;
// "cuda:N", "host (pinned)" for kHostDevice, "cpu" for -1.
std::string snapshotDeviceName(int device);

// How memledger.capture (python/memledger) made the file: its "memledger_capture" key. Empty `device`: another tool's.
struct SnapshotCapture {
    std::string device; // "cpu" (torch.profiler's CPU allocator events) or "cuda" (_record_memory_history)
    std::string source; // what recorded the events
    std::string torch; // the torch version that ran the job
    std::string note; // what the capture says of its own file
    std::int64_t steps = -1; // the optimizer steps it saw; -1: not said
    bool present() const { return !device.empty(); }
};

struct Snapshot {
    std::string layout; // "dict", "dict-2.1" (no allocator_settings), "legacy-history", "segment-list"
    std::vector<int> devices;
    std::vector<SnapshotSegment> segments;
    std::shared_ptr<const Trace> trace; // every device_traces entry, merged in time order
    StreamColumn trace_stream; // stream of each trace event
    TraceContextColumn trace_context; // user_metadata and compile_context of each trace event
    bool trace_has_time = false; // older files have no time_us: time_ns is then the entry's index
    std::int64_t trace_start_us = 0;
    std::int64_t skipped_entries = 0; // actions memledger does not know
    std::vector<TensorAnnotation> tensor_annotations; // `annotate` entries, by time
    std::vector<SnapshotOom> ooms;
    std::vector<SnapshotAnnotation> annotations; // START/END pairs of external_annotations, by start
    std::int64_t annotation_entries = 0; // entries of external_annotations (an END without its START counts here)
    SnapshotSettings settings;
    SnapshotCapture capture;
    SnapshotAllocatorCheck allocator_check;
    // Keys memledger reads past (docs/snapshots.md, "Keys"): top-level ones ("host_traces") and trace entries'
    // ("device_traces[].pool_id"), first met first.
    std::vector<std::string> ignored_keys;
    // Pinned host memory (host_segments, host_traces), read by the same decoder as the devices' into a snapshot
    // of its own on kHostDevice, so that no GPU figure (peak, reserved, fragmentation) counts it. Null when the
    // file has neither key. host_skipped: host entries or segments of another shape, left out (never fatal).
    std::shared_ptr<const Snapshot> host;
    std::int64_t host_skipped = 0;

    // An annotation's range on the trace's clock: ns from the trace's start; end -1 for a range never closed.
    std::int64_t startNs(const SnapshotAnnotation& a) const { return (a.start_us - trace_start_us) * 1000; }
    std::int64_t endNs(const SnapshotAnnotation& a) const
    {
        return a.end_us >= 0 ? (a.end_us - trace_start_us) * 1000 : -1;
    }
    std::int64_t reservedBytes() const; // sum of segments' total_size
    std::int64_t allocatedBytes() const; // sum of active_allocated blocks' size
    std::size_t traceCount(Action a) const;
    // Every event the CPU's (device -1): memledger.capture's file off a GPU. No caching allocator made it.
    bool onCpu() const;
};

// What a snapshot is called: "CPU memory snapshot" when it is onCpu(), else "CUDA memory snapshot".
std::string snapshotKindName(const Snapshot& s);

// True when the file starts like a pickle (PROTO opcode, byte 0x80). Does not throw.
bool looksLikePickleFile(const std::string& path);

// What a caller may watch or stop while a snapshot is read.
struct SnapshotReadOptions {
    // (bytes decoded, bytes in all), about every 4 MB, from the reading thread.
    std::function<void(std::size_t, std::size_t)> progress;
    const std::atomic<bool>* cancel = nullptr; // when set, the read stops with Cancelled (support/errors.h)
};

// Decodes a snapshot; throws FileError naming `name`, the reason and, for a damaged pickle, the byte offset.
Snapshot decodeSnapshot(std::string bytes, const std::string& name, const SnapshotReadOptions& options = {});
Snapshot readSnapshotFile(const std::string& path, const SnapshotReadOptions& options = {});
class PickleSource;
// The same as decodeSnapshot over `size` bytes that `source` hands over as they are read (readSnapshotFile's
// way: the bytes are never held whole).
Snapshot decodeSnapshotStream(
    PickleSource& source, std::size_t size, const std::string& name, const SnapshotReadOptions& options = {});

// Replays the snapshot's trace through the caching-allocator model, pre-loading the blocks that were alive
// before the trace began, and compares the segments it asks for with the recorded ones.
SnapshotAllocatorCheck checkAllocatorModel(const Snapshot& s);
// The same replay under other allocator settings (what PYTORCH_CUDA_ALLOC_CONF would change).
AllocatorReplay replaySnapshot(const Snapshot& s, const AllocatorSettings& settings);

// Report for a snapshot: trace, peak of live bytes, the module tree of forward frames (root: the file name),
// the allocator check; the ledgers as snapshot_ledgers.h tells them (decodeSnapshot assigns each event's).
// checkAllocator false: leave the allocator check for later (addAllocatorCheck), so that the timeline can be
// drawn first; reportToJson makes the check itself when it is missing.
Report reportFromSnapshot(Snapshot&& s, const std::string& path, bool checkAllocator = true);
Report reportFromSnapshot(const Snapshot& s, const std::string& path, bool checkAllocator = true);
// The figures of a snapshot's report that come from events [first, end) of its trace (reportFromSnapshot:
// all of them; reportForRange: a range): the peak inside the range and what is alive then, and the module tree:
// a row per chain of Python `forward` frames (path "model.py:120 forward / block.py:48 forward", outermost
// first), "(outside any forward)" with a row per naming frame below it, "(alive before the trace)"; per row,
// summed into its parents, the bytes alive at the peak (peak_bytes), allocated in the range in total
// (activation_bytes), saved for backward (saved_activation_bytes), gradients (gradient_bytes), the count
// (calls) and the largest block. A trace without allocations: the blocks the segments hold at the end, in the
// rows of their own frames.
void summarizeSnapshotEvents(
    Report& r, const Snapshot& s, const std::string& path, std::uint32_t first, std::uint32_t end);
// Bytes alive when the trace began (on `device`; every device when none), in the trace's unit (bytes requested):
// the blocks alive at the end that no allocation of the trace made, and those the trace frees without an alloc.
std::int64_t aliveBeforeTrace(const Snapshot& s, std::optional<int> device = std::nullopt);
// A block's bytes in the unit of the snapshot's trace: those requested (a block's size is rounded up, or holds an
// unsplit remainder); its size when the file has no trace or no requested_size.
std::int64_t requestedOrSize(const Snapshot& s, const SnapshotBlock& b);
// What a snapshot's pinned host memory holds (Snapshot::host), by the rules of the devices' figures: its
// allocations in the trace, their bytes, the most alive at once (the host report's peak_bytes), its segments.
struct SnapshotHostFigures {
    bool present = false;
    std::int64_t allocations = 0;
    std::int64_t allocated_bytes = 0;
    std::int64_t peak_bytes = 0;
    std::int64_t segments = 0;
    std::int64_t reserved_bytes = 0;
    std::int64_t allocated_at_end_bytes = 0;
    std::int64_t trace_entries = 0;
    std::int64_t skipped = 0; // host entries or segments of another shape, left out
};
SnapshotHostFigures hostFigures(const Snapshot& s);
// A snapshot report's host memory as a report of its own (device "host (pinned)"): its timeline, ledgers,
// module tree and peak; the report itself when it holds no host memory.
Report hostReport(const Report& r);
// Open, decode, (check) and report.
Report readSnapshotReport(
    const std::string& path, bool checkAllocator = true, const SnapshotReadOptions& options = {});
// What each annotation of a snapshot report saw of the bytes its trace allocated: the most alive at once inside
// the range, and what the range added (alive at its end minus alive at its start). One per
// report.snapshot->annotations, in order; zeros for a report without a timed trace.
struct AnnotationFigures {
    std::int64_t peak_bytes = 0;
    std::int64_t added_bytes = 0;
};
std::vector<AnnotationFigures> annotationFigures(const Report& r);
// The innermost annotation (record_function range) that holds the moment `ns` (from the trace's start), "" if none.
std::string annotationAt(const Snapshot& s, std::int64_t ns);
// The same report with its snapshot's allocator check made.
Report addAllocatorCheck(const Report& r);

} // namespace memledger
