#include "allocator/caching_allocator.h"

#include "support/node_recycler.h"

#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <memory_resource>
#include <set>
#include <unordered_map>

// A model of the rules of PyTorch's CUDA caching allocator, written from its documented behaviour:
// sizes round up to 512 bytes; requests up to 1 MiB come from a small pool of 2 MiB segments, larger ones
// from a large pool (segments of 20 MiB below 10 MiB, else the request rounded up to 2 MiB); a request takes
// the smallest cached block of its pool and stream that fits (ties: lowest address) and splits off the rest
// when enough remains; freed blocks merge with free neighbours; blocks of max_split_size or more are never
// split and only serve requests that nearly fill them.

namespace memledger {

namespace {

constexpr std::int64_t kMinBlockSize = 512;
constexpr std::int64_t kSmallSize = std::int64_t {1} << 20;
constexpr std::int64_t kSmallBuffer = std::int64_t {2} << 20;
constexpr std::int64_t kLargeBuffer = std::int64_t {20} << 20;
constexpr std::int64_t kMinLargeAlloc = std::int64_t {10} << 20;
constexpr std::int64_t kRoundLarge = std::int64_t {2} << 20;

std::int64_t roundUp(std::int64_t v, std::int64_t unit)
{
    return (v + unit - 1) / unit * unit;
}

struct Segment;
struct Block;

struct BySizeThenAddress {
    bool operator()(const Block* a, const Block* b) const;
};
using Pool = std::pmr::set<Block*, BySizeThenAddress>;

struct Block {
    Pool::iterator where; // its place in the pool while it is free and cached
    bool pooled = false;
    std::uint64_t addr = 0;
    std::int64_t size = 0;
    bool allocated = false;
    std::int32_t event = -1;
    Block* prev = nullptr;
    Block* next = nullptr;
    Segment* segment = nullptr;
};

struct Segment {
    std::uint64_t addr = 0;
    std::int64_t size = 0; // mapped bytes for an expandable segment
    std::uint64_t stream = 0;
    bool small = false;
    bool expandable = false;
    Block* first = nullptr;
};

inline bool BySizeThenAddress::operator()(const Block* a, const Block* b) const
{
    return a->size != b->size ? a->size < b->size : a->addr < b->addr;
}

// One device's allocator: pools per (stream, small/large), segments by address.
class DeviceModel {
public:
    DeviceModel(const AllocatorSettings& s, std::int8_t device, AllocatorReplay& out)
        : settings_(s)
        , device_(device)
        , out_(out)
    {
    }
    ~DeviceModel() = default; // blocks live in blocks_, tree nodes in nodes_
    DeviceModel(const DeviceModel&) = delete;
    DeviceModel& operator=(const DeviceModel&) = delete;

    std::int64_t reserved() const { return reserved_; }
    std::int64_t allocated() const { return allocated_; }
    void setRecordedAddresses(std::vector<std::uint64_t> a) { recorded_addresses_ = std::move(a); }

    void exportSegments(std::vector<ReplaySegment>& out) const
    {
        for (const auto& [addr, seg] : segments_) {
            ReplaySegment r;
            r.device = device_;
            r.stream = seg->stream;
            r.address = seg->addr;
            r.size = seg->size;
            r.small_pool = seg->small;
            r.expandable = seg->expandable;
            for (Block* b = seg->first; b; b = b->next)
                r.blocks.push_back({b->addr, b->size, b->allocated, b->allocated ? b->event : -1});
            if (r.size > 0)
                out.push_back(std::move(r));
        }
    }

    // Sets up a segment that existed before the trace; returns its allocated blocks.
    std::vector<Block*> preload(const PreloadedSegment& p)
    {
        auto* seg = newSegment(p.address, p.size, p.stream, p.small_pool, p.expandable);
        std::vector<Block*> blocks, live;
        std::uint64_t at = p.address;
        std::uint64_t end = p.address + static_cast<std::uint64_t>(p.size);
        for (const auto& a : p.allocated) {
            if (a.address < at || a.address + static_cast<std::uint64_t>(a.size) > end || a.size <= 0)
                continue; // overlapping or outside: the snapshot disagrees with itself; skip the block
            if (a.address > at)
                blocks.push_back(newBlock(at, static_cast<std::int64_t>(a.address - at), seg));
            auto* b = newBlock(a.address, a.size, seg);
            b->allocated = true;
            blocks.push_back(b);
            live.push_back(b);
            at = a.address + static_cast<std::uint64_t>(a.size);
        }
        if (at < end)
            blocks.push_back(newBlock(at, static_cast<std::int64_t>(end - at), seg));
        // A free gap too small to have been split off belongs to the allocated block before it.
        std::vector<Block*> merged;
        for (auto* b : blocks) {
            if (!merged.empty() && merged.back()->allocated && !b->allocated && !wouldSplit(*seg, b->size)) {
                merged.back()->size += b->size;
                deleteBlock(b);
                continue;
            }
            merged.push_back(b);
        }
        for (std::size_t i = 0; i < merged.size(); ++i) {
            merged[i]->prev = i > 0 ? merged[i - 1] : nullptr;
            merged[i]->next = i + 1 < merged.size() ? merged[i + 1] : nullptr;
            if (merged[i]->allocated)
                allocated_ += merged[i]->size;
            else
                addFree(merged[i]);
        }
        seg->first = merged.empty() ? nullptr : merged.front();
        reserved_ += p.size;
        return live;
    }

    Block* malloc(std::int64_t requested, std::uint64_t stream, std::int32_t event)
    {
        std::int64_t size = allocatorRoundSize(requested, settings_);
        bool small = size <= kSmallSize;
        Block* b = findFree(stream, small, size);
        if (!b)
            b = settings_.expandable_segments ? growExpandable(stream, small, size, event)
                                              : newSegmentFor(stream, small, size, event);
        if (!b && settings_.device_memory > 0) {
            releaseCachedSegments();
            b = settings_.expandable_segments ? growExpandable(stream, small, size, event)
                                              : newSegmentFor(stream, small, size, event);
        }
        if (!b) {
            ++out_.ooms;
            return nullptr;
        }
        removeFree(b);
        if (shouldSplit(*b->segment, b->size, size)) {
            auto* rest = newBlock(b->addr + static_cast<std::uint64_t>(size), b->size - size, b->segment);
            rest->prev = b;
            rest->next = b->next;
            if (b->next)
                b->next->prev = rest;
            b->next = rest;
            b->size = size;
            addFree(rest);
        }
        b->allocated = true;
        b->event = event;
        allocated_ += b->size;
        return b;
    }

    void free(Block* b)
    {
        b->allocated = false;
        allocated_ -= b->size;
        for (Block* n : {b->prev, b->next}) {
            if (!n || n->allocated)
                continue;
            removeFree(n);
            if (n == b->prev) {
                b->addr = n->addr;
                b->prev = n->prev;
                if (b->prev)
                    b->prev->next = b;
                else
                    b->segment->first = b;
            } else {
                b->next = n->next;
                if (b->next)
                    b->next->prev = b;
            }
            b->size += n->size;
            deleteBlock(n);
        }
        addFree(b);
    }

    // torch.cuda.empty_cache() or an OOM retry released this segment: follow it if it is wholly free here.
    void releaseSegmentAt(std::uint64_t addr)
    {
        auto it = segments_.find(addr);
        if (it == segments_.end() || it->second->expandable)
            return;
        Block* f = it->second->first;
        if (f && !f->allocated && !f->next)
            releaseSegment(it);
    }

    // A recorded segment_unmap: give back the free tail of an expandable segment.
    void unmapAt(std::uint64_t addr, std::int64_t size)
    {
        for (auto& [a, seg] : segments_) {
            if (!seg->expandable || addr < seg->addr || addr >= seg->addr + static_cast<std::uint64_t>(seg->size))
                continue;
            Block* last = seg->first;
            while (last && last->next)
                last = last->next;
            if (!last || last->allocated || addr < last->addr)
                return;
            std::int64_t cut = std::min<std::int64_t>(size, seg->size - static_cast<std::int64_t>(addr - seg->addr));
            removeFree(last);
            last->size -= cut;
            seg->size -= cut;
            reserved_ -= cut;
            if (last->size > 0) {
                addFree(last);
            } else {
                if (last->prev)
                    last->prev->next = nullptr;
                else
                    seg->first = nullptr;
                deleteBlock(last);
            }
            return;
        }
    }

private:
    Pool& poolOf(const Segment& s)
    {
        // Most replays touch one stream: remember its two pools.
        Pool*& cached = s.small ? lastSmall_ : lastLarge_;
        if (cached && (s.small ? lastSmallStream_ : lastLargeStream_) == s.stream)
            return *cached;
        auto it = pools_.find({s.stream, s.small});
        if (it == pools_.end())
            it = pools_.emplace(std::make_pair(s.stream, s.small), Pool(BySizeThenAddress {}, &nodes_)).first;
        cached = &it->second;
        (s.small ? lastSmallStream_ : lastLargeStream_) = s.stream;
        return it->second;
    }

    Block* newBlock(std::uint64_t addr, std::int64_t size, Segment* seg)
    {
        Block* b;
        if (!freeBlocks_.empty()) {
            b = freeBlocks_.back();
            freeBlocks_.pop_back();
            *b = Block {};
        } else {
            b = &blocks_.emplace_back();
        }
        b->addr = addr;
        b->size = size;
        b->segment = seg;
        return b;
    }
    void deleteBlock(Block* b) { freeBlocks_.push_back(b); }
    void addFree(Block* b)
    {
        b->where = poolOf(*b->segment).insert(b).first;
        b->pooled = true;
    }
    void removeFree(Block* b)
    {
        if (b->pooled) {
            poolOf(*b->segment).erase(b->where);
            b->pooled = false;
        }
    }
    Segment* newSegment(std::uint64_t addr, std::int64_t size, std::uint64_t stream, bool small, bool expandable)
    {
        auto seg = std::make_unique<Segment>();
        seg->addr = addr;
        seg->size = size;
        seg->stream = stream;
        seg->small = small;
        seg->expandable = expandable;
        auto* raw = seg.get();
        segments_[addr] = std::move(seg);
        fake_next_ = std::max(fake_next_, addr + static_cast<std::uint64_t>(size) + kRoundLarge);
        return raw;
    }
    void deleteBlocks(Segment* seg)
    {
        for (Block* b = seg->first; b;) {
            Block* n = b->next;
            deleteBlock(b);
            b = n;
        }
        seg->first = nullptr;
    }

    bool wouldSplit(const Segment& seg, std::int64_t remaining) const
    {
        if (seg.small || settings_.expandable_segments)
            return remaining >= kMinBlockSize;
        return remaining > kSmallSize;
    }
    bool shouldSplit(const Segment& seg, std::int64_t blockSize, std::int64_t size) const
    {
        std::int64_t remaining = blockSize - size;
        if (seg.small || settings_.expandable_segments)
            return remaining >= kMinBlockSize;
        return size < settings_.max_split_size && remaining > kSmallSize;
    }

    Block* findFree(std::uint64_t stream, bool small, std::int64_t size)
    {
        auto pit = pools_.find({stream, small});
        if (pit == pools_.end())
            return nullptr;
        Block key;
        key.size = size;
        key.addr = 0;
        auto it = pit->second.lower_bound(&key);
        if (it == pit->second.end())
            return nullptr;
        Block* b = *it;
        const auto maxSplit = settings_.max_split_size;
        if (size < maxSplit && b->size >= maxSplit)
            return nullptr; // an oversize block never serves a smaller request
        if (size >= maxSplit && b->size >= size + kLargeBuffer)
            return nullptr; // nor one it would leave much of unused
        return b;
    }

    bool fits(std::int64_t bytes) const
    {
        return settings_.device_memory <= 0 || reserved_ + bytes <= settings_.device_memory;
    }

    std::uint64_t placeSegment(std::int64_t size)
    {
        // The k-th cudaMalloc of the model takes the address the GPU gave the k-th recorded one, when free.
        if (next_recorded_ < recorded_addresses_.size()) {
            std::uint64_t a = recorded_addresses_[next_recorded_++];
            if (!overlaps(a, size))
                return a;
        }
        std::uint64_t a = fake_next_;
        fake_next_ += static_cast<std::uint64_t>(roundUp(size, kRoundLarge)) + kRoundLarge;
        return a;
    }
    bool overlaps(std::uint64_t a, std::int64_t size) const
    {
        auto it = segments_.upper_bound(a);
        if (it != segments_.end() && it->first < a + static_cast<std::uint64_t>(size))
            return true;
        if (it != segments_.begin()) {
            --it;
            if (it->first + static_cast<std::uint64_t>(it->second->size) > a)
                return true;
        }
        return false;
    }

    Block* newSegmentFor(std::uint64_t stream, bool small, std::int64_t size, std::int32_t event)
    {
        std::int64_t bytes = allocatorSegmentSize(size);
        if (!fits(bytes))
            return nullptr;
        auto* seg = newSegment(placeSegment(bytes), bytes, stream, small, false);
        auto* b = newBlock(seg->addr, bytes, seg);
        seg->first = b;
        addFree(b);
        reserved_ += bytes;
        out_.segment_allocs.push_back(bytes);
        out_.segment_alloc_event.push_back(event);
        out_.segment_alloc_device.push_back(device_);
        out_.segment_alloc_address.push_back(seg->addr);
        return b;
    }

    // Expandable segments: one per stream and pool that maps more pages (2 MiB small, 20 MiB large) at its
    // end when nothing cached fits, counting the free block already at its end.
    Block* growExpandable(std::uint64_t stream, bool small, std::int64_t size, std::int32_t event)
    {
        Segment* seg = nullptr;
        for (auto& [a, s] : segments_)
            if (s->expandable && s->stream == stream && s->small == small)
                seg = s.get();
        if (!seg) {
            seg = newSegment(fake_next_, 0, stream, small, true);
            fake_next_ += std::uint64_t {1} << 40; // reserved address space
        }
        Block* last = seg->first;
        while (last && last->next)
            last = last->next;
        std::int64_t tailFree = (last && !last->allocated) ? last->size : 0;
        std::int64_t page = small ? kSmallBuffer : kLargeBuffer;
        std::int64_t map = roundUp(size - tailFree, page);
        if (!fits(map))
            return nullptr;
        if (last && !last->allocated) {
            removeFree(last);
            last->size += map;
        } else {
            auto* b = newBlock(seg->addr + static_cast<std::uint64_t>(seg->size), map, seg);
            b->prev = last;
            if (last)
                last->next = b;
            else
                seg->first = b;
            last = b;
        }
        seg->size += map;
        reserved_ += map;
        addFree(last);
        out_.segment_maps.push_back(map);
        out_.segment_map_event.push_back(event);
        out_.segment_map_device.push_back(device_);
        return last;
    }

    void releaseSegment(std::map<std::uint64_t, std::unique_ptr<Segment>>::iterator it)
    {
        Segment* seg = it->second.get();
        if (seg->first)
            removeFree(seg->first);
        reserved_ -= seg->size;
        deleteBlocks(seg);
        segments_.erase(it);
        ++out_.segment_frees;
    }

    // Before giving up, free every cached segment that holds no allocation, then try again.
    void releaseCachedSegments()
    {
        for (auto it = segments_.begin(); it != segments_.end();) {
            auto next = std::next(it);
            Block* f = it->second->first;
            if (!it->second->expandable && f && !f->allocated && !f->next)
                releaseSegment(it);
            it = next;
        }
    }

    AllocatorSettings settings_;
    std::int8_t device_;
    AllocatorReplay& out_;
    NodeRecycler nodes_; // tree nodes of the pools: no malloc per insert
    std::deque<Block> blocks_;
    std::vector<Block*> freeBlocks_;
    std::map<std::pair<std::uint64_t, bool>, Pool> pools_;
    Pool* lastSmall_ = nullptr;
    Pool* lastLarge_ = nullptr;
    std::uint64_t lastSmallStream_ = 0;
    std::uint64_t lastLargeStream_ = 0;
    std::map<std::uint64_t, std::unique_ptr<Segment>> segments_;
    std::int64_t reserved_ = 0;
    std::int64_t allocated_ = 0;
    std::vector<std::uint64_t> recorded_addresses_;
    std::size_t next_recorded_ = 0;
    std::uint64_t fake_next_ = std::uint64_t {1} << 52;
};

} // namespace

std::int64_t allocatorRoundSize(std::int64_t requested, const AllocatorSettings& settings)
{
    if (requested < kMinBlockSize)
        return kMinBlockSize;
    const std::int64_t divisions = settings.roundup_power2_divisions;
    if (divisions > 1 && requested > kMinBlockSize * divisions) {
        // Round up to the next of `divisions` equal steps between two powers of two.
        std::int64_t floorPow2 = std::int64_t {1};
        while (floorPow2 <= requested / 2)
            floorPow2 <<= 1;
        if (floorPow2 == requested)
            return requested;
        std::int64_t step = floorPow2 / divisions;
        if (step <= 0)
            return roundUp(requested, kMinBlockSize);
        return roundUp(requested, step);
    }
    return roundUp(requested, kMinBlockSize);
}

std::int64_t allocatorSegmentSize(std::int64_t rounded)
{
    if (rounded <= kSmallSize)
        return kSmallBuffer;
    if (rounded < kMinLargeAlloc)
        return kLargeBuffer;
    return roundUp(rounded, kRoundLarge);
}

AllocatorReplay replayCachingAllocator(const Trace& trace, const AllocatorSettings& settings)
{
    return replayCachingAllocator(trace, settings, ReplayOptions {});
}

AllocatorReplay replayCachingAllocator(
    const Trace& trace, const AllocatorSettings& settings, const ReplayOptions& options)
{
    AllocatorReplay out;
    std::map<std::int8_t, std::unique_ptr<DeviceModel>> models;
    NodeRecycler liveNodes;
    using LiveMap = std::pmr::unordered_map<std::uint64_t, Block*>;
    std::map<std::int8_t, LiveMap> live;
    std::int8_t cachedDevice = 0;
    DeviceModel* cachedModel = nullptr;
    auto model = [&](std::int8_t dev) -> DeviceModel& {
        if (cachedModel && cachedDevice == dev)
            return *cachedModel;
        auto& m = models[dev];
        if (!m) {
            m = std::make_unique<DeviceModel>(settings, dev, out);
            if (options.use_recorded_segment_addresses) {
                std::vector<std::uint64_t> addrs;
                for (std::size_t i = 0; i < trace.size(); ++i)
                    if (trace.device[i] == dev && trace.action[i] == Action::SegmentAlloc)
                        addrs.push_back(trace.address[i]);
                m->setRecordedAddresses(std::move(addrs));
            }
        }
        cachedDevice = dev;
        cachedModel = m.get();
        return *m;
    };
    std::int8_t cachedLiveDevice = 0;
    LiveMap* cachedLive = nullptr;
    auto liveOf = [&](std::int8_t dev) -> LiveMap& {
        if (!cachedLive || cachedLiveDevice != dev) {
            cachedLive = &live.try_emplace(dev, &liveNodes).first->second;
            cachedLiveDevice = dev;
        }
        return *cachedLive;
    };
    for (const auto& p : options.initial) {
        auto& m = model(p.device);
        for (Block* b : m.preload(p))
            liveOf(p.device)[b->addr] = b;
    }
    auto totals = [&](std::int64_t& reserved, std::int64_t& allocated) {
        reserved = allocated = 0;
        for (auto& [d, m] : models) {
            reserved += m->reserved();
            allocated += m->allocated();
        }
    };
    std::int64_t reserved = 0, allocated = 0;
    totals(reserved, allocated);
    out.peak_reserved = reserved;
    out.peak_allocated = allocated;
    // Paired allocs and frees find each other through Trace::partner; the rest by address.
    const bool usePartners = !options.record_addresses;
    std::vector<Block*> blockOfAlloc(usePartners ? trace.size() : 0, nullptr);
    if (options.record_reserved_after)
        out.reserved_after.reserve(trace.size());
    if (options.record_addresses)
        out.model_address.assign(trace.size(), 0);
    for (std::size_t i = 0; i < trace.size(); ++i) {
        const auto dev = trace.device[i];
        const auto addr = trace.address[i];
        switch (trace.action[i]) {
        case Action::Alloc: {
            auto stream = options.streams && i < options.streams->size() ? (*options.streams)[i] : 0;
            auto& m = model(dev);
            auto& l = liveOf(dev);
            auto before = m.reserved();
            auto beforeAllocated = m.allocated();
            Block* b = m.malloc(trace.bytes[i], stream, static_cast<std::int32_t>(i));
            if (b && usePartners && trace.partner[i] != kNoPartner) {
                blockOfAlloc[i] = b; // its free is in the trace and points back here: no lookup by address
            } else if (b) {
                auto old = l.find(addr);
                if (old != l.end())
                    m.free(old->second); // an alloc at a live address: its free fell outside the trace
                l[addr] = b;
                if (options.record_addresses)
                    out.model_address[i] = b->addr;
            }
            reserved += m.reserved() - before;
            allocated += m.allocated() - beforeAllocated;
            break;
        }
        case Action::Free: {
            if (usePartners) {
                auto p = trace.partner[i];
                if (p != kNoPartner && static_cast<std::size_t>(p) < i && blockOfAlloc[static_cast<std::size_t>(p)]) {
                    auto& m = model(dev);
                    auto beforeAllocated = m.allocated();
                    m.free(blockOfAlloc[static_cast<std::size_t>(p)]);
                    blockOfAlloc[static_cast<std::size_t>(p)] = nullptr;
                    allocated += m.allocated() - beforeAllocated;
                    break;
                }
            }
            auto& l = liveOf(dev);
            auto it = l.find(addr);
            if (it == l.end()) {
                ++out.frees_without_alloc;
                break;
            }
            auto& m = model(dev);
            auto beforeAllocated = m.allocated();
            if (options.record_addresses)
                out.model_address[i] = it->second->addr;
            m.free(it->second);
            allocated += m.allocated() - beforeAllocated;
            l.erase(it);
            break;
        }
        case Action::FreeRequested: {
            if (!options.record_addresses)
                break;
            auto& l = liveOf(dev);
            if (auto it = l.find(addr); it != l.end())
                out.model_address[i] = it->second->addr;
            break;
        }
        case Action::SegmentFree:
        case Action::SegmentUnmap: {
            if (!options.follow_segment_frees)
                break;
            auto& m = model(dev);
            auto before = m.reserved();
            if (trace.action[i] == Action::SegmentFree)
                m.releaseSegmentAt(addr);
            else
                m.unmapAt(addr, trace.bytes[i]);
            reserved += m.reserved() - before;
            break;
        }
        default:
            break;
        }
        out.peak_reserved = std::max(out.peak_reserved, reserved);
        out.peak_allocated = std::max(out.peak_allocated, allocated);
        if (options.record_reserved_after)
            out.reserved_after.push_back(reserved);
    }
    for (const auto& [dev, m] : models)
        m->exportSegments(out.final_segments);
    return out;
}

} // namespace memledger
