#pragma once
// A new trace made from a recorded one: its events kept, dropped, resized or moved, copied elsewhere (a
// recomputation), allocations that had no free in the trace given one, and new events placed between them,
// with the partners, the ops' and the phases' event ranges carried over. The rank layout of a sharded job
// (whatif/parallel.h), the checkpoint what-if (whatif/checkpoint.h) and the remedies' edited runs
// (whatif/remedies.h) are made with it.
//
// The rules of a trace's pairs live here too: a free is paired with the live alloc at its address
// (AllocFreePairing, for the recorder), and a free's ledger is always its alloc's (setLedger).
#include "report/report.h"

#include <climits>
#include <cstdint>
#include <unordered_map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace memledger {

// Gives alloc event `alloc` the ledger `l`, and its free (when the trace has it) the same one.
void setLedger(Trace& t, std::size_t alloc, Ledger l);

// Pushes event `event` of `from` onto `out` (whose strings and stacks are `from`'s) with every column of it but
// its partner, which is left to the pairing (AllocFreePairing); returns its index in `out`.
std::size_t pushCopy(Trace& out, const Trace& from, std::size_t event);

// Pairs the events of a trace as they are pushed: a free with the live alloc at its address (addresses are
// unique across a process's devices: CUDA's unified addressing). Other actions (a snapshot's segment and
// free_requested events) are not paired.
class AllocFreePairing {
public:
    AllocFreePairing() = default;
    // Keyed by (device, address) instead: a snapshot's trace, whose devices the file tells apart.
    struct ByDevice {};
    explicit AllocFreePairing(ByDevice)
        : byDevice_(true)
    {
    }
    // Event `i` of `t` was just pushed: an alloc is live at its address from now on (an alloc at the address of
    // a live one, whose free the trace missed, takes its place); a free is linked both ways with the live alloc
    // at its address, takes its size, and the alloc is then no longer live.
    void add(Trace& t, std::size_t i);
    // The live alloc event at `address` (a tensor's storage), if any.
    std::optional<std::uint32_t> liveAt(std::uint64_t address) const
    {
        auto it = live_.find(address);
        return it == live_.end() ? std::nullopt : std::optional<std::uint32_t>(static_cast<std::uint32_t>(it->second));
    }

private:
    std::unordered_map<std::uint64_t, std::int32_t> live_; // address -> its alloc event
    bool byDevice_ = false;
};

class TraceEdit {
public:
    explicit TraceEdit(const Trace& t);

    // Where a new event goes: before original event `pos` (t.size(): after the last), after the events placed
    // there earlier (or, with order(), in the order asked for).
    using Handle = std::size_t; // an original event's index, or what addAlloc and copy returned
    // device: the new block's; none: the device of the event at `pos`.
    Handle addAlloc(std::size_t pos, std::int64_t bytes, Ledger ledger, const std::string& where,
        const std::string& op, std::optional<std::int8_t> device = std::nullopt);
    // A new free of `alloc` (an alloc made with addAlloc or copy, or an original one, whose own free goes).
    Handle addFree(std::size_t pos, Handle alloc);
    // A copy of original event `event` (its op, module, stack, ledger, size) placed before `pos`, unpaired.
    Handle copy(std::size_t pos, std::size_t event);
    void pair(Handle alloc, Handle free); // two placed events, as alloc and free
    void move(std::size_t event, std::size_t pos); // an original event, placed before `pos` instead
    void drop(std::size_t event); // an original event (an alloc: its free too)
    void resize(std::size_t alloc, std::int64_t bytes); // an original alloc, and its free
    bool dropped(std::size_t event) const { return placed_[event].dropped; }
    std::int64_t bytes(Handle h) const { return placed_[h].bytes; } // as placed or resized
    // The order of the events placed at one position: by group, then by seq. New events default to group 0
    // and the order they were placed in; the originals come after every group, in their order.
    static constexpr int kOriginalGroup = INT_MAX;
    void order(Handle h, int group, std::int64_t seq);

    // The new trace; the ops' and phases' event ranges are carried over: an op keeps the events of its own; the
    // new events placed before a phase's first event end the phase before it (the first phase takes them).
    // A free takes its alloc's address, device and ledger. New and moved events' times: the time of the
    // event at their position (never before the event before them).
    Trace build(std::vector<OpCall>* ops, std::vector<Phase>* phases);
    // After build(): the handle each event of the new trace was made from.
    const std::vector<Handle>& builtFrom() const { return order_; }
    // The original event whose columns a handle takes (an original's own index, a copy's source, a copy's free
    // the copied event); -1 for a new event with no source (addAlloc, and a new free of it).
    std::int64_t sourceOf(Handle h) const { return placed_[h].src; }

private:
    struct Placed {
        std::size_t pos = 0;
        int group = 0;
        std::int64_t seq = 0; // new events: the order they were placed in
        bool original = false; // an original event (moved or not)
        bool moved = false;
        bool dropped = false;
        std::int64_t src = -1; // the original event whose columns it takes (originals, copies, a copy's free)
        std::int64_t bytes = 0;
        Action action = Action::Alloc;
        Ledger ledger = Ledger::Temporaries;
        std::optional<std::int8_t> device; // new allocs: the device asked for
        std::uint32_t where = 0, op = 0; // new events without a source: their strings, in the new trace's table
        std::int64_t partner = -1; // handle
    };
    Handle place(Placed p);
    const Trace& t_;
    Trace out_; // its strings, while events are placed
    std::vector<Placed> placed_;
    std::vector<Handle> order_;
    std::int64_t seq_ = 0;
};

} // namespace memledger
