#include "analysis/live_index.h"

#include <algorithm>

namespace memledger {

LiveStackIndex::LiveStackIndex(std::vector<Interval> intervals)
{
    std::sort(intervals.begin(), intervals.end(), [](const Interval& a, const Interval& b) { return a.order < b.order; });
    slots_.reserve(intervals.size());
    bytes_.reserve(intervals.size());
    std::size_t count = 0;
    for (const auto& i : intervals)
        if (i.end > i.begin && i.bytes != 0)
            count += i.end == kForever ? 1 : 2;
    changes_.reserve(count);
    for (std::size_t s = 0; s < intervals.size(); ++s) {
        const auto& i = intervals[s];
        slots_.push_back(i.order);
        bytes_.push_back(i.bytes);
        if (i.end <= i.begin || i.bytes == 0)
            continue;
        changes_.push_back({i.begin, static_cast<std::uint32_t>(s)});
        if (i.end != kForever)
            changes_.push_back({i.end, static_cast<std::uint32_t>(s) | kEnd});
    }
    intervals = {};
    // The changes at one event are applied or taken back together: their order among themselves does not matter.
    std::sort(changes_.begin(), changes_.end(), [](const Change& a, const Change& b) { return a.event < b.event; });
    tree_.assign(slots_.size() + 1, 0);
}

void LiveStackIndex::add(std::size_t slot, std::int64_t bytes)
{
    total_ += bytes;
    for (auto i = slot + 1; i < tree_.size(); i += i & (~i + 1))
        tree_[i] += bytes;
}

void LiveStackIndex::moveTo(std::int64_t event)
{
    // Every change at or before `event` applied, none after.
    auto apply = [this](const Change& c, std::int64_t sign) {
        const auto slot = c.slot & ~kEnd;
        add(slot, (c.slot & kEnd ? -sign : sign) * bytes_[slot]);
    };
    while (applied_ < changes_.size() && changes_[applied_].event <= event)
        apply(changes_[applied_++], 1);
    while (applied_ > 0 && changes_[applied_ - 1].event > event)
        apply(changes_[--applied_], -1);
}

std::int64_t LiveStackIndex::liveBytes(std::int64_t event)
{
    moveTo(event);
    return total_;
}

std::int64_t LiveStackIndex::allocationAt(std::int64_t event, double height)
{
    moveTo(event);
    if (slots_.empty() || height > static_cast<double>(total_))
        return -1;
    // Bytes are whole: at least half a byte up is the first live allocation, never an empty slot before it.
    height = std::max(height, 0.5);
    // The last position whose running sum stays below the height; the allocation is the slot after it.
    std::size_t pos = 0;
    double below = 0;
    std::size_t step = 1;
    while (step * 2 < tree_.size())
        step *= 2;
    for (; step > 0; step /= 2)
        if (pos + step < tree_.size() && below + static_cast<double>(tree_[pos + step]) < height) {
            pos += step;
            below += static_cast<double>(tree_[pos]);
        }
    return pos < slots_.size() ? static_cast<std::int64_t>(slots_[pos]) : -1;
}

} // namespace memledger
