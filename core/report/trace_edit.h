#pragma once
// A new trace made from a recorded one: its events kept, dropped or resized, allocations that had no free in the
// trace given one, and new events placed between them, with the partners, the ops' and the phases' event
// ranges carried over. The rank layout of a sharded job (whatif/parallel.h) is made with it.
#include "report/report.h"

#include <cstdint>
#include <string>
#include <vector>

namespace memledger {

class TraceEdit {
public:
    explicit TraceEdit(const Trace& t);

    // Where a new event goes: before original event `pos` (t.size(): after the last), after the events placed
    // there earlier.
    using Handle = std::size_t; // an original event's index, or what addAlloc returned
    Handle addAlloc(std::size_t pos, std::int64_t bytes, Ledger ledger, const std::string& where,
        const std::string& op);
    void addFree(std::size_t pos, Handle alloc); // an alloc made with addAlloc, or an original one
    void drop(std::size_t event); // an original event (an alloc: its free too)
    void resize(std::size_t alloc, std::int64_t bytes); // an original alloc, and its free
    bool dropped(std::size_t event) const { return placed_[event].dropped; }

    // The new trace; the ops' and phases' event ranges are carried over: an op keeps the events of its own,
    // a phase takes the new events placed before its first event (the first phase: all of them before it).
    // A free's ledger is its alloc's.
    Trace build(std::vector<OpCall>* ops, std::vector<Phase>* phases);

private:
    struct Placed {
        std::size_t pos = 0;
        std::uint64_t seq = 0; // new events: the order they were placed in; originals after them
        bool original = false;
        bool dropped = false;
        std::int64_t bytes = 0;
        Action action = Action::Alloc;
        Ledger ledger = Ledger::Temporaries;
        std::uint32_t where = 0, op = 0; // new events' strings, in the new trace's table
        std::int64_t partner = -1; // handle
    };
    const Trace& t_;
    Trace out_; // its strings, while events are placed
    std::vector<Placed> placed_;
    std::uint64_t seq_ = 0;
};

} // namespace memledger
