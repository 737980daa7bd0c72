#include "snapshot/segment_state.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <utility>

namespace memledger {

namespace {

constexpr std::int64_t kSmallSegment = std::int64_t {2} << 20; // the small pool's segments are 2 MiB
constexpr std::int64_t kMinBlock = 512; // no block is smaller: a smaller remainder stays in its neighbour

using Key = std::pair<int, std::uint64_t>; // device, address

struct Segment {
    SnapshotSegment g;
    bool touched = false; // its sizes must be summed again from its blocks
};

std::uint64_t endOf(const SnapshotBlock& b)
{
    return b.address + static_cast<std::uint64_t>(std::max<std::int64_t>(0, b.size));
}

std::uint64_t endOf(const SnapshotSegment& g)
{
    return g.address + static_cast<std::uint64_t>(std::max<std::int64_t>(0, g.total_size));
}

bool isActive(BlockState s)
{
    return s == BlockState::ActiveAllocated || s == BlockState::ActivePendingFree;
}

// Index of the block holding `addr`, or -1.
std::ptrdiff_t blockAt(const SnapshotSegment& g, std::uint64_t addr)
{
    auto it = std::upper_bound(
        g.blocks.begin(), g.blocks.end(), addr, [](std::uint64_t a, const SnapshotBlock& b) { return a < b.address; });
    if (it == g.blocks.begin())
        return -1;
    --it;
    return addr < endOf(*it) ? it - g.blocks.begin() : -1;
}

void makeInactive(SnapshotBlock& b)
{
    b.state = BlockState::Inactive;
    b.requested_size = 0;
    b.frames.clear();
}

// Joins block i with the inactive blocks right beside it.
void mergeInactive(SnapshotSegment& g, std::size_t i)
{
    auto joinable = [&](std::size_t a) {
        return g.blocks[a].state == BlockState::Inactive && g.blocks[a + 1].state == BlockState::Inactive
            && endOf(g.blocks[a]) == g.blocks[a + 1].address;
    };
    if (i + 1 < g.blocks.size() && joinable(i)) {
        g.blocks[i].size += g.blocks[i + 1].size;
        g.blocks.erase(g.blocks.begin() + static_cast<std::ptrdiff_t>(i) + 1);
    }
    if (i > 0 && joinable(i - 1)) {
        g.blocks[i - 1].size += g.blocks[i].size;
        g.blocks.erase(g.blocks.begin() + static_cast<std::ptrdiff_t>(i));
    }
}

// Cuts the block holding `addr` in two there, so that a block starts at `addr` (when one holds it).
void splitAt(SnapshotSegment& g, std::uint64_t addr)
{
    auto i = blockAt(g, addr);
    if (i < 0 || g.blocks[static_cast<std::size_t>(i)].address == addr)
        return;
    auto& b = g.blocks[static_cast<std::size_t>(i)];
    SnapshotBlock tail = b;
    tail.address = addr;
    tail.size = static_cast<std::int64_t>(endOf(b) - addr);
    tail.requested_size = 0; // only free blocks and unmapped ranges are cut
    b.size -= tail.size;
    b.requested_size = std::min(b.requested_size, b.size);
    g.blocks.insert(g.blocks.begin() + i + 1, std::move(tail));
}

class Rewinder {
public:
    explicit Rewinder(const Snapshot& s)
        : s_(s)
        , t_(*s.trace)
        , settings_(s.settings.toModel())
    {
        for (const auto& g : s.segments)
            segs_.insert_or_assign(Key {g.device, g.address}, Segment {g, false});
        // Which free_completed follow a free_requested of the same block: undone, they are pending frees.
        requested_.assign(t_.size(), false);
        std::map<Key, std::size_t> open;
        for (std::size_t k = 0; k < t_.size(); ++k) {
            Key key {t_.device[k], t_.address[k]};
            if (t_.action[k] == Action::FreeRequested)
                open[key] = k;
            else if (t_.action[k] == Action::Alloc)
                open.erase(key);
            else if (t_.action[k] == Action::Free) {
                if (auto it = open.find(key); it != open.end()) {
                    requested_[k] = true;
                    open.erase(it);
                }
            }
        }
    }

    void undo(std::size_t k)
    {
        switch (t_.action[k]) {
        case Action::Alloc:
            undoAlloc(k);
            break;
        case Action::Free:
            undoFree(k);
            break;
        case Action::FreeRequested:
            undoFreeRequested(k);
            break;
        case Action::SegmentAlloc:
            undoSegmentAlloc(k);
            break;
        case Action::SegmentFree:
        case Action::SegmentUnmap:
            undoRelease(k);
            break;
        case Action::SegmentMap:
            undoMap(k);
            break;
        default:
            break;
        }
    }

    std::vector<SnapshotSegment> result()
    {
        std::vector<SnapshotSegment> out;
        out.reserve(segs_.size());
        for (auto& [key, seg] : segs_) {
            if (seg.touched) {
                auto& g = seg.g;
                g.allocated_size = g.active_size = g.requested_size = 0;
                for (const auto& b : g.blocks) {
                    if (b.state == BlockState::ActiveAllocated)
                        g.allocated_size += b.size;
                    if (isActive(b.state)) {
                        g.active_size += b.size;
                        g.requested_size += b.requested_size;
                    }
                }
            }
            out.push_back(std::move(seg.g));
        }
        return out;
    }

private:
    // The segment holding `addr` on `device`, or nullptr.
    Segment* containing(int device, std::uint64_t addr)
    {
        auto it = segs_.upper_bound(Key {device, addr});
        if (it == segs_.begin())
            return nullptr;
        --it;
        if (it->first.first != device || addr >= endOf(it->second.g))
            return nullptr;
        return &it->second;
    }

    bool overlapsAny(int device, std::uint64_t addr, std::uint64_t end)
    {
        if (containing(device, addr))
            return true;
        auto it = segs_.upper_bound(Key {device, addr});
        return it != segs_.end() && it->first.first == device && it->first.second < end;
    }

    std::string whereOf(std::size_t k) const { return t_.strings.at(t_.where[k]); }

    void undoAlloc(std::size_t k)
    {
        Segment* seg = containing(t_.device[k], t_.address[k]);
        if (!seg)
            return;
        auto i = blockAt(seg->g, t_.address[k]);
        if (i < 0)
            return;
        auto& b = seg->g.blocks[static_cast<std::size_t>(i)];
        if (b.address != t_.address[k] || !isActive(b.state))
            return;
        makeInactive(b);
        mergeInactive(seg->g, static_cast<std::size_t>(i));
        seg->touched = true;
    }

    void undoFree(std::size_t k)
    {
        Segment* seg = containing(t_.device[k], t_.address[k]);
        if (!seg)
            return;
        auto& g = seg->g;
        auto i = blockAt(g, t_.address[k]);
        if (i < 0 || g.blocks[static_cast<std::size_t>(i)].state != BlockState::Inactive)
            return;
        const auto addr = t_.address[k];
        const auto rangeEnd = endOf(g.blocks[static_cast<std::size_t>(i)]);
        auto end = std::min(rangeEnd, addr + static_cast<std::uint64_t>(allocatorRoundSize(t_.bytes[k], settings_)));
        if (rangeEnd - end < static_cast<std::uint64_t>(kMinBlock))
            end = rangeEnd;
        splitAt(g, end);
        splitAt(g, addr);
        auto j = blockAt(g, addr);
        if (j < 0)
            return;
        auto& b = g.blocks[static_cast<std::size_t>(j)];
        b.state = requested_[k] ? BlockState::ActivePendingFree : BlockState::ActiveAllocated;
        b.requested_size = std::min(b.size, t_.bytes[k]);
        const auto alloc = t_.partner[k];
        b.frames = {frameOfWhere(whereOf(alloc == kNoPartner ? k : static_cast<std::size_t>(alloc)))};
        if (b.frames.front().filename.empty())
            b.frames.clear();
        seg->touched = true;
    }

    void undoFreeRequested(std::size_t k)
    {
        Segment* seg = containing(t_.device[k], t_.address[k]);
        if (!seg)
            return;
        auto i = blockAt(seg->g, t_.address[k]);
        if (i < 0)
            return;
        auto& b = seg->g.blocks[static_cast<std::size_t>(i)];
        if (b.address == t_.address[k] && b.state == BlockState::ActivePendingFree) {
            b.state = BlockState::ActiveAllocated;
            seg->touched = true;
        }
    }

    void undoSegmentAlloc(std::size_t k) { segs_.erase(Key {t_.device[k], t_.address[k]}); }

    // segment_free / segment_unmap: the range was there before, free. An unmapped range joins the expandable
    // segments it touches, as the snapshot reports one segment per contiguous mapped range.
    void undoRelease(std::size_t k)
    {
        const int device = t_.device[k];
        const auto addr = t_.address[k];
        const auto size = t_.bytes[k];
        const auto end = addr + static_cast<std::uint64_t>(size);
        if (size <= 0 || overlapsAny(device, addr, end))
            return;
        Segment seg;
        auto& g = seg.g;
        g.device = device;
        g.address = addr;
        g.total_size = size;
        g.stream = k < s_.trace_stream.size() ? s_.trace_stream[k] : 0;
        g.is_expandable = t_.action[k] == Action::SegmentUnmap;
        g.segment_type = !g.is_expandable && size == kSmallSegment ? "small" : "large";
        SnapshotBlock free;
        free.address = addr;
        free.size = size;
        free.state = BlockState::Inactive;
        g.blocks.push_back(free);
        seg.touched = true;
        if (g.is_expandable) {
            if (Segment* left = addr > 0 ? containing(device, addr - 1) : nullptr; left && left->g.is_expandable) {
                left->g.total_size += size;
                left->g.blocks.push_back(free);
                mergeInactive(left->g, left->g.blocks.size() - 1);
                left->touched = true;
                joinRight(device, left->g.address);
                return;
            }
            segs_.insert_or_assign(Key {device, addr}, std::move(seg));
            joinRight(device, addr);
            return;
        }
        segs_.insert_or_assign(Key {device, addr}, std::move(seg));
    }

    // Joins the expandable segment at `addr` with an expandable one starting where it ends.
    void joinRight(int device, std::uint64_t addr)
    {
        auto it = segs_.find(Key {device, addr});
        if (it == segs_.end())
            return;
        auto next = segs_.find(Key {device, endOf(it->second.g)});
        if (next == segs_.end() || !next->second.g.is_expandable)
            return;
        auto& g = it->second.g;
        auto first = g.blocks.size();
        g.total_size += next->second.g.total_size;
        for (auto& b : next->second.g.blocks)
            g.blocks.push_back(std::move(b));
        it->second.touched = true;
        segs_.erase(next);
        if (first > 0 && first < g.blocks.size())
            mergeInactive(g, first);
    }

    // segment_map: the range was not mapped before; the segment holding it loses it (and may fall in two).
    void undoMap(std::size_t k)
    {
        const int device = t_.device[k];
        const auto addr = t_.address[k];
        const auto end = addr + static_cast<std::uint64_t>(std::max<std::int64_t>(0, t_.bytes[k]));
        Segment* seg = containing(device, addr);
        if (!seg || end <= addr || end > endOf(seg->g))
            return;
        auto& g = seg->g;
        splitAt(g, addr);
        splitAt(g, end);
        Segment right;
        right.touched = true;
        right.g = g;
        right.g.address = end;
        right.g.total_size = static_cast<std::int64_t>(endOf(g) - end);
        right.g.blocks.clear();
        std::vector<SnapshotBlock> left;
        for (auto& b : g.blocks) {
            if (endOf(b) <= addr)
                left.push_back(std::move(b));
            else if (b.address >= end)
                right.g.blocks.push_back(std::move(b));
        }
        g.blocks = std::move(left);
        g.total_size = static_cast<std::int64_t>(addr - g.address);
        seg->touched = true;
        if (g.total_size == 0)
            segs_.erase(Key {device, g.address});
        if (right.g.total_size > 0)
            segs_.insert_or_assign(Key {device, end}, std::move(right));
    }

    const Snapshot& s_;
    const Trace& t_;
    AllocatorSettings settings_;
    std::map<Key, Segment> segs_;
    std::vector<bool> requested_;
};

} // namespace

std::vector<SnapshotSegment> segmentsAt(const Snapshot& s, std::size_t events)
{
    if (!s.trace || events >= s.trace->size()) {
        auto out = s.segments;
        std::stable_sort(out.begin(), out.end(), [](const SnapshotSegment& a, const SnapshotSegment& b) {
            return std::tie(a.device, a.address) < std::tie(b.device, b.address);
        });
        return out;
    }
    Rewinder r(s);
    for (std::size_t k = s.trace->size(); k-- > events;)
        r.undo(k);
    return r.result();
}

SnapshotFrame frameOfWhere(const std::string& where)
{
    SnapshotFrame f;
    for (auto colon = where.find(':'); colon != std::string::npos; colon = where.find(':', colon + 1)) {
        auto digits = colon + 1;
        auto end = digits;
        while (end < where.size() && std::isdigit(static_cast<unsigned char>(where[end])))
            ++end;
        if (end > digits && (end == where.size() || where[end] == ' ')) {
            f.filename = where.substr(0, colon);
            f.line = std::stoll(where.substr(digits, end - digits));
            f.name = end < where.size() ? where.substr(end + 1) : std::string();
            return f;
        }
    }
    f.filename = where;
    return f;
}

std::vector<SnapshotSegment> segmentsOfReplay(const Trace& t, const AllocatorReplay& replay, std::size_t preloaded)
{
    std::vector<SnapshotSegment> out;
    for (const auto& rs : replay.final_segments) {
        SnapshotSegment g;
        g.device = std::max(0, static_cast<int>(rs.device));
        g.address = rs.address;
        g.total_size = rs.size;
        g.stream = rs.stream;
        g.segment_type = rs.small_pool ? "small" : "large";
        g.is_expandable = rs.expandable;
        for (const auto& rb : rs.blocks) {
            SnapshotBlock b;
            b.address = rb.address;
            b.size = rb.size;
            b.state = rb.allocated ? BlockState::ActiveAllocated : BlockState::Inactive;
            if (rb.allocated) {
                g.allocated_size += rb.size;
                g.active_size += rb.size;
                b.requested_size = rb.size;
                // The replay's events: the resident set's first (`preloaded`), then the trace's.
                auto event = static_cast<std::int64_t>(rb.event) - static_cast<std::int64_t>(preloaded);
                if (event >= 0 && static_cast<std::size_t>(event) < t.size()) {
                    b.requested_size = t.bytes[static_cast<std::size_t>(event)];
                    if (auto w = t.where[static_cast<std::size_t>(event)])
                        b.frames.push_back(frameOfWhere(t.strings.at(w)));
                }
                g.requested_size += b.requested_size;
            }
            g.blocks.push_back(std::move(b));
        }
        out.push_back(std::move(g));
    }
    return out;
}

} // namespace memledger
