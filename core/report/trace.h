#pragma once
#include "report/call_stacks.h"
#include "support/string_table.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace memledger {

// Every allocation belongs to one ledger. Weights, inputs and optimizer state are resident before the run;
// the others are allocations the run makes. A training step adds saved activations (made in the forward,
// alive when the backward starts, freed by it), gradients (allocations that end as a parameter's .grad) and
// optimizer state (momentum, Adam's moments). A snapshot's allocations get the same ledgers, told from their call
// stacks and lifetimes (snapshot/snapshot_ledgers.h); the blocks alive before its trace began that nothing in the
// trace tells more of are `Resident`.
enum class Ledger : std::uint8_t {
    Weights = 0,
    Inputs = 1,
    Activations = 2,
    SavedActivations = 3,
    Temporaries = 4,
    Gradients = 5,
    OptimizerState = 6,
    // One rank of a sharded job (whatif/parallel.h): parameters all-gathered for a unit's forward or backward,
    // and the buffers of the collectives (all-gather outputs, reduce-scatter inputs and outputs, DDP's buckets).
    GatheredParameters = 7,
    Communication = 8,
    // Autocast's weight-cast cache: the lower-precision copies of float32 leaf weights, kept until the region ends.
    AutocastCache = 9,
    // Generation: the keys and values of every layer the decode steps attend to (transformers' cache).
    KvCache = 10,
    Unattributed = 11, // snapshots: allocations no ledger can be told for
    Resident = 12, // snapshots: alive before the trace began
};
constexpr int kLedgerCount = 11; // the ledgers of a model run
constexpr int kLedgerKinds = 13; // with a snapshot's Unattributed and Resident
const char* ledgerName(Ledger l); // "weights", "saved_activations", ... as the JSON spells them
const char* ledgerLabel(Ledger l); // "saved for backward", "resident (before the trace)": for people
std::optional<Ledger> ledgerFromName(const std::string& name); // ledgerName's inverse

enum class Action : std::uint8_t {
    Alloc = 0,
    Free = 1, // free_completed in a snapshot
    FreeRequested = 2, // snapshot only: the caller freed it, the stream has not caught up
    SegmentAlloc = 3,
    SegmentFree = 4,
    SegmentMap = 5,
    SegmentUnmap = 6,
    Oom = 7,
    Snapshot = 8,
};
const char* actionName(Action a);

constexpr std::int32_t kNoPartner = -1;

// The CUDA stream of each event of a snapshot's trace. A program uses a handful of streams, so each event
// holds 2 bytes, an index into the distinct streams, rather than the 8 of a stream's handle.
class StreamColumn {
public:
    std::uint64_t operator[](std::size_t i) const { return streams_[index_[i]]; }
    std::size_t size() const { return index_.size(); }
    bool empty() const { return index_.empty(); }
    void reserve(std::size_t n) { index_.reserve(n); }
    void clear()
    {
        index_.clear();
        streams_.clear();
        last_ = 0;
    }
    void push_back(std::uint64_t stream)
    {
        if (last_ >= streams_.size() || streams_[last_] != stream)
            last_ = indexOf(stream);
        index_.push_back(static_cast<std::uint16_t>(last_));
    }
    std::size_t memoryBytes() const
    {
        return index_.capacity() * sizeof(std::uint16_t) + streams_.capacity() * sizeof(std::uint64_t);
    }

private:
    std::size_t indexOf(std::uint64_t stream);
    std::vector<std::uint16_t> index_;
    std::vector<std::uint64_t> streams_; // distinct streams, first seen first (at most 65536: more share the last)
    std::size_t last_ = 0;
};

// Allocation events of one run or snapshot, stored column by column so that a million of them stay
// small (see bytesPerEvent()). Strings (op names, module paths, stack frames) are interned.
struct Trace {
    StringTable strings;
    std::vector<std::int64_t> time_ns; // from the start of the run
    std::vector<std::int64_t> bytes; // size of the block, always >= 0
    std::vector<std::uint64_t> address;
    std::vector<Action> action;
    std::vector<std::int8_t> device; // -1: CPU
    std::vector<Ledger> ledger;
    std::vector<std::uint32_t> op_seq; // index of the outermost op in the run (0 before the first op)
    std::vector<std::uint32_t> outer_op; // string ids
    std::vector<std::uint32_t> inner_op;
    std::vector<std::uint32_t> where; // module path, or the top stack frame of a snapshot
    std::vector<std::int32_t> partner; // alloc <-> its free; kNoPartner if outside the trace
    std::vector<std::uint32_t> stack; // the event's call stack in `stacks`; 0: none (model runs)
    CallStacks stacks; // frames' strings are in `strings`

    std::size_t size() const { return time_ns.size(); }
    void reserve(std::size_t n);
    void clearEvents(); // drops the events, keeps the columns' capacity and the strings
    std::size_t push(std::int64_t t, std::int64_t size, std::uint64_t addr, Action a, std::int8_t dev);
    // Memory of the event columns divided by the number of events (what grows with the trace).
    double bytesPerEvent() const;
    // Memory that does not grow with the events: the interned strings and call stacks.
    std::size_t fixedBytes() const { return strings.memoryBytes() + stacks.memoryBytes(); }
    void shrinkToFit();
};

} // namespace memledger
