#include "analysis/segment_history.h"

#include "allocator/gpu_replay.h"

#include "allocator/caching_allocator.h"
#include "support/format.h"
#include "snapshot/frames.h"
#include "snapshot/snapshot.h"

#include <algorithm>
#include <cmath>

namespace memledger {

namespace {

constexpr std::size_t kBlock = StepBlocks::kSize;

bool isSegmentEvent(Action a)
{
    return a == Action::SegmentAlloc || a == Action::SegmentFree || a == Action::SegmentMap
        || a == Action::SegmentUnmap;
}

std::int64_t segmentDelta(const Trace& t, std::size_t i)
{
    switch (t.action[i]) {
    case Action::SegmentAlloc:
    case Action::SegmentMap:
        return t.bytes[i];
    case Action::SegmentFree:
    case Action::SegmentUnmap:
        return -t.bytes[i];
    default:
        return 0;
    }
}

// The segment(s) whose inactive bytes make most of the fragmentation at the end of a snapshot, and the block
// that keeps the worst one from being released.
std::string snapshotCause(const Snapshot& s, int device)
{
    struct Seg {
        const SnapshotSegment* seg;
        std::int64_t inactive = 0, largestFree = 0;
    };
    std::vector<Seg> segs;
    std::int64_t total = 0;
    for (const auto& g : s.segments) {
        if (device != TimelineSeries::kAllDevices && g.device != device)
            continue;
        Seg e {&g};
        std::int64_t used = 0;
        for (const auto& b : g.blocks) {
            if (b.state == BlockState::ActiveAllocated)
                used += b.size;
            else if (b.state == BlockState::Inactive)
                e.largestFree = std::max(e.largestFree, b.size);
        }
        e.inactive = g.total_size - used;
        total += e.inactive;
        segs.push_back(e);
    }
    if (segs.empty() || total <= 0)
        return "No fragmentation at the end: every reserved byte is allocated.";
    std::sort(segs.begin(), segs.end(), [](const Seg& a, const Seg& b) { return a.inactive > b.inactive; });
    std::size_t n = 0;
    std::int64_t covered = 0;
    while (n < segs.size() && covered * 2 < total && n < 3)
        covered += segs[n++].inactive;
    const auto& worst = *segs.front().seg;
    std::string text = "At the end " + formatBytes(total) + " are reserved but not allocated; "
        + (n == 1 ? std::string("most of it") : formatBytes(covered) + " of it") + " in "
        + (n == 1 ? "segment" : std::to_string(n) + " segments, the largest") + " 0x" +
        [&] {
            char buf[32];
            std::snprintf(buf, sizeof buf, "%llx", static_cast<unsigned long long>(worst.address));
            return std::string(buf);
        }()
        + " on " + snapshotDeviceName(worst.device) + " (" + formatBytes(worst.total_size) + ", "
        + formatBytes(segs.front().inactive) + " not allocated, largest free block "
        + formatBytes(segs.front().largestFree) + ")";
    // The biggest block still allocated there is what keeps the segment from being released.
    const SnapshotBlock* pin = nullptr;
    for (const auto& b : worst.blocks)
        if (b.state != BlockState::Inactive && (!pin || b.size > pin->size))
            pin = &b;
    if (pin) {
        auto where = allocationSite(pin->frames);
        text += ", held by " + formatBytes(pin->size) + (where.empty() ? std::string(" (no stack)") : " from " + where);
    }
    return text + ".";
}

std::string replayCause(const AllocatorReplay& replay, const Trace& t, std::size_t preloaded)
{
    const ReplaySegment* worst = nullptr;
    std::int64_t worstFree = 0, total = 0;
    for (const auto& g : replay.final_segments) {
        std::int64_t free = 0;
        for (const auto& b : g.blocks)
            if (!b.allocated)
                free += b.size;
        total += free;
        if (free > worstFree) {
            worstFree = free;
            worst = &g;
        }
    }
    if (!worst)
        return "Simulated: no fragmentation at the end of the run.";
    std::string text = "Simulated: at the end " + formatBytes(total) + " would be reserved but not allocated, "
        + formatBytes(worstFree) + " of it in one " + formatBytes(worst->size) + " segment";
    const ReplaySegment::Block* pin = nullptr;
    for (const auto& b : worst->blocks)
        if (b.allocated && (!pin || b.size > pin->size))
            pin = &b;
    if (pin) {
        std::string where = "weights or inputs";
        if (pin->event >= static_cast<std::int32_t>(preloaded)) {
            auto e = static_cast<std::size_t>(pin->event) - preloaded;
            where = e < t.size() ? t.strings.at(t.where[e]) : std::string();
            if (where.empty())
                where = "the model's root";
        }
        text += ", held by " + formatBytes(pin->size) + " from " + where;
    }
    return text + ".";
}

} // namespace

std::vector<double> simulatedReservedBytes(const Report& r, std::string* cause)
{
    if (!r.trace)
        return {};
    const auto& t = *r.trace;
    const auto held = simulatedGpuOf(r); // keeps a fresh replay alive while it is read
    const auto& sim = *held;
    const auto pre = sim.preloaded;
    if (sim.replay.reserved_after.size() != pre + t.size())
        return {};
    std::vector<double> out(t.size() + 1, 0.0);
    out[0] = static_cast<double>(sim.reserved_before_run);
    for (std::size_t i = 0; i < t.size(); ++i)
        out[i + 1] = static_cast<double>(sim.replay.reserved_after[pre + i]);
    if (cause)
        *cause = replayCause(sim.replay, t, pre);
    return out;
}

SegmentHistory SegmentHistory::build(const Report& r, TimelineAxis axis, int device)
{
    SegmentHistory h;
    const auto series = TimelineSeries::shared(r, axis, device);
    h.keys = series->keys;
    const auto points = h.keys.size();
    h.active = series->tops[static_cast<std::size_t>(TimelineSeries::kStackOrder.back())];
    h.allocated = h.active;
    auto constant = [points](double value) {
        return StepValues(points, [value](std::size_t, std::size_t count, double* out) { std::fill_n(out, count, value); });
    };
    if (r.snapshot) {
        h.allocated = series->tops[static_cast<int>(Ledger::Unattributed)]; // alive-before and traced, stacked
        const auto& s = *r.snapshot;
        if (s.onCpu()) {
            // No caching allocator: the CPU allocator's blocks are all it holds (the C library's reuse of freed
            // memory is not in the events).
            h.reserved = h.allocated;
            h.cause = "A CPU capture: the CPU allocator keeps no cache of its own, so what it holds is what is "
                      "allocated (no fragmentation to show; the C library's reuse of freed memory is not recorded).";
            h.fragmentation = constant(0);
            return h;
        }
        const Trace empty;
        const Trace& t = r.trace ? *r.trace : empty;
        auto onDevice = [device](int d) { return device == TimelineSeries::kAllDevices || d == device; };
        bool recorded = false;
        for (std::size_t i = 0; i < t.size(); ++i)
            if (isSegmentEvent(t.action[i]) && onDevice(t.device[i])) {
                recorded = true;
                break;
            }
        std::int64_t end = 0;
        for (const auto& g : s.segments)
            if (onDevice(g.device))
                end += g.total_size;
        h.reserved = constant(static_cast<double>(end));
        const auto& after = s.allocator_check.replay.reserved_after;
        if (recorded && t.size() > 0) {
            // Walked back from the end, so that the chart ends where the segments are (a device the trace
            // maps memory on but the segment list leaves out ends at 0, not at what the trace mapped): each block
            // keeps its last point's bytes and walks back from there when read.
            auto reserved = std::make_shared<std::vector<std::int64_t>>((points + kBlock - 1) / kBlock);
            std::int64_t bytes = end;
            for (std::size_t p = points; p-- > 0;) {
                if (p + 1 == points || p % kBlock == kBlock - 1)
                    (*reserved)[p / kBlock] = bytes;
                if (p > 0 && onDevice(t.device[p - 1]))
                    bytes = std::max<std::int64_t>(0, bytes - segmentDelta(t, p - 1));
            }
            h.reserved = StepValues(points,
                [trace = r.trace, last = std::shared_ptr<const std::vector<std::int64_t>>(std::move(reserved)),
                    onDevice, points](std::size_t first, std::size_t count, double* out) {
                    const auto block = first / kBlock;
                    auto p = std::min(points, (block + 1) * kBlock) - 1;
                    std::int64_t bytes = (*last)[block];
                    for (;; --p) {
                        if (p < first + count)
                            out[p - first] = static_cast<double>(bytes);
                        if (p == first)
                            break;
                        if (onDevice(trace->device[p - 1]))
                            bytes = std::max<std::int64_t>(0, bytes - segmentDelta(*trace, p - 1));
                    }
                });
        } else if (!recorded && t.size() > 0 && after.size() == t.size()) {
            h.simulated = true;
            h.reserved = StepValues(points,
                [snapshot = r.snapshot](std::size_t first, std::size_t count, double* out) {
                    const auto& after = snapshot->allocator_check.replay.reserved_after;
                    for (std::size_t k = 0; k < count; ++k)
                        out[k] = static_cast<double>(after[first + k == 0 ? 0 : first + k - 1]);
                });
        }
        h.cause = snapshotCause(s, device);
        // A simulated reserve that ends elsewhere than the segments says so, so that the sentence and the chart
        // (which draws the simulation) do not seem to disagree.
        if (h.simulated && static_cast<std::int64_t>(h.reserved.back()) != end)
            h.cause += " The reserve over time is simulated (the trace records no segment events): it ends at "
                + formatBytes(static_cast<std::int64_t>(h.reserved.back())) + ", where the segments hold "
                + formatBytes(end) + ".";
    } else {
        h.simulated = true;
        auto reserved = simulatedReservedBytes(r, &h.cause);
        h.reserved = reserved.size() == points ? StepValues(std::move(reserved)) : constant(0);
    }
    h.fragmentation = StepValues(points,
        [reserved = h.reserved, allocated = h.allocated](std::size_t first, std::size_t count, double* out) {
            double below[kBlock];
            reserved.read(first, count, out);
            allocated.read(first, count, below);
            for (std::size_t k = 0; k < count; ++k)
                out[k] = std::max(0.0, out[k] - below[k]);
        });
    return h;
}

} // namespace memledger
