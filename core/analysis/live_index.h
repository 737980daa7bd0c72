#pragma once
// Which allocation lies at a height of the stacked timeline at a moment, in O(log n): the timeline stacks the
// live allocations of a band oldest first, so the one under the cursor is the first whose running sum of bytes
// reaches the cursor's height above the band's bottom. A Fenwick tree over the allocations (in stack order) holds
// the bytes live at the index's current event; moving to another event applies (or takes back) the allocations
// and frees in between, so hovering along the plot costs the events crossed times log n, and a hover at the same
// moment log n. Memory is linear in the allocations: 36 bytes each (a trace has fewer than 2^32 events).
#include <cstddef>
#include <cstdint>
#include <vector>

namespace memledger {

class LiveStackIndex {
public:
    // One allocation of the band: stacked by `order` (its event index), live from event `begin` until before
    // event `end` (kForever: to the end), `bytes` high.
    struct Interval {
        std::uint32_t order = 0;
        std::uint32_t begin = 0;
        std::uint32_t end = 0;
        std::int64_t bytes = 0;
    };
    static constexpr std::uint32_t kForever = UINT32_MAX;

    explicit LiveStackIndex(std::vector<Interval> intervals);

    // The `order` of the allocation at `height` bytes above the band's bottom once event `event` has happened
    // (the live allocations a with begin <= event < end); -1 when the height is above the band's top.
    std::int64_t allocationAt(std::int64_t event, double height);
    std::int64_t liveBytes(std::int64_t event); // the band's height then
    std::size_t size() const { return slots_.size(); }

private:
    void moveTo(std::int64_t event);
    void add(std::size_t slot, std::int64_t bytes);

    struct Change {
        std::uint32_t event;
        std::uint32_t slot; // kEnd set: the allocation's end, its bytes taken away
    };
    static constexpr std::uint32_t kEnd = 1u << 31;
    std::vector<std::uint32_t> slots_; // slot -> order, increasing
    std::vector<std::int64_t> bytes_; // slot -> bytes
    std::vector<Change> changes_; // by event
    std::vector<std::int64_t> tree_; // Fenwick, 1-based
    std::size_t applied_ = 0; // changes_[0, applied_) are in the tree
    std::int64_t total_ = 0;
};

} // namespace memledger
