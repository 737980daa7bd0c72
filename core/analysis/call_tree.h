#pragma once
// Call trees of a trace's allocations (heaptrack's views): top-down (the outermost frame at the root, the
// allocating frame at the leaves) and bottom-up (the allocating frame at the root, its callers below), each
// node with what the allocations under it add up to. Built in one pass over the events (per distinct stack),
// then each distinct stack is expanded once, so a million events cost one pass.
#include "report/trace.h"
#include "snapshot/snapshot_contexts.h"

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace memledger {

class TraceContextColumn;

enum class CallTreeFrames {
    All, // every frame but the allocator's and the unwinder's (snapshot/frames.h)
    PythonAndOps, // Python frames and the ATen ops a stack passes through ("aten::mul"), nothing else
};

struct CallTreeOptions {
    static constexpr std::size_t kEnd = std::numeric_limits<std::size_t>::max();
    static constexpr std::int64_t kRangePeak = -2; // `moment`: the peak of the range
    static constexpr int kAllDevices = -2;
    std::size_t first = 0; // event range [first, last): which allocations count as allocated
    std::size_t last = kEnd;
    int device = kAllDevices; // events of one device only (-1: the CPU)
    // The moment whose live allocations fill `alive`: after event `moment` (-1: before the first event), or
    // kRangePeak: the moment in the range when the most bytes are alive (the first such).
    std::int64_t moment = kRangePeak;
    CallTreeFrames frames = CallTreeFrames::All;
    bool bottom_up = false;
    // A top level of one node per value of the allocations' user_metadata or compile_context (a snapshot's
    // entries; "(no user_metadata)" for those without), the frames beneath; none: the frames at the top.
    std::optional<ContextKind> group;
};

// What the allocations of one stack add up to.
struct StackTotals {
    std::uint32_t stack = 0;
    std::uint32_t group = 0; // with CallTreeOptions::group: the value's string id in the trace (0: none)
    std::int64_t allocated = 0; // bytes allocated in the range
    std::int64_t count = 0; // allocations in the range
    std::int64_t largest = 0; // the largest of them
    std::int64_t alive = 0; // bytes alive at the moment (allocated in the trace, at or before it)
};

struct StackTotalsResult {
    // Stacks with something allocated or alive, by stack id (grouped: by group, then stack id).
    std::vector<StackTotals> stacks;
    std::int64_t moment = -1; // the moment `alive` is taken at (after this event; -1: before the first)
    std::int64_t alive = 0; // bytes alive then (allocations made in the trace)
    std::int64_t allocated = 0;
    std::int64_t count = 0;
};
// `contexts`: the snapshot's user_metadata and compile_context per event, for CallTreeOptions::group (null or
// empty: every allocation has none).
StackTotalsResult stackTotals(
    const Trace& trace, const CallTreeOptions& options, const TraceContextColumn* contexts = nullptr);

// Where the most bytes are alive in [first, last) on `device` (allocations of the trace; a free of a block
// allocated before the trace lowers it too, so this is the report's peak for the whole range): the event after
// which it happens, or first - 1 when the range starts at its peak.
std::int64_t peakMoment(const Trace& trace, std::size_t first, std::size_t last, int device);

struct CallTreeNode {
    std::uint32_t label = 0; // index into CallTree::labels
    std::int32_t parent = -1;
    std::vector<std::int32_t> children; // largest `allocated` first
    std::int64_t allocated = 0; // inclusive: the allocations of every stack through this node
    std::int64_t count = 0;
    std::int64_t largest = 0;
    std::int64_t alive = 0; // bytes alive at the tree's moment
};

struct CallTreeLabel {
    std::string text; // "file:line name", "aten::mul", "(no stack)"
    std::int64_t frame = -1; // frame id in the trace's stacks; -1 for an ATen op or "(no stack)"
    bool user = false; // a user's Python frame (snapshot/frames.h)
    bool group = false; // a user_metadata or compile_context value (CallTreeOptions::group), not a frame
};

struct CallTree {
    std::vector<CallTreeNode> nodes; // node 0: the root, every allocation of the range
    std::vector<CallTreeLabel> labels;
    std::int64_t moment = -1; // as StackTotalsResult::moment
    bool bottom_up = false;
    bool has_stacks = false; // some allocation has a stack (false for model runs)
    std::optional<ContextKind> group; // the top level's values (CallTreeOptions::group)
    const std::string& text(std::int32_t node) const
    {
        return labels[nodes[static_cast<std::size_t>(node)].label].text;
    }
    // The labels from the root's child down to `node`.
    std::vector<std::string> path(std::int32_t node) const;
};

CallTree buildCallTree(const Trace& trace, const CallTreeOptions& options, const TraceContextColumn* contexts = nullptr);

// A stack's frames as the tree shows them, innermost first (the allocator's and unwinder's frames dropped).
std::vector<CallTreeLabel> stackLabels(const Trace& trace, std::uint32_t stack, CallTreeFrames frames);

} // namespace memledger
