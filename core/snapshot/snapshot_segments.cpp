#include "snapshot/snapshot_segments.h"

#include <algorithm>
#include <cstdlib>
#include <map>

namespace memledger {

namespace snapdecode {

namespace {

BlockState stateOf(std::string_view s)
{
    if (s == "active_allocated")
        return BlockState::ActiveAllocated;
    if (s == "active_pending_free")
        return BlockState::ActivePendingFree;
    if (s == "inactive")
        return BlockState::Inactive;
    return BlockState::Other;
}

} // namespace

SnapshotSegment segmentOf(const PickleValue& s, bool& legacy, StackTables& tables)
{
    if (!s.isDict())
        throw ShapeError(std::string("a segment is a ") + pickleKindName(s.kind()) + ", not a dict");
    SnapshotSegment seg;
    seg.device = static_cast<int>(intOr(s, "device", 0));
    seg.address = static_cast<std::uint64_t>(intOr(s, "address", 0));
    seg.total_size = intOr(s, "total_size", 0);
    seg.allocated_size = intOr(s, "allocated_size", 0);
    seg.active_size = intOr(s, "active_size", 0);
    seg.requested_size = intOr(s, "requested_size", 0);
    seg.stream = static_cast<std::uint64_t>(intOr(s, "stream", 0));
    seg.segment_type = strOr(s, "segment_type");
    if (const auto* e = s.get("is_expandable"); e && e->isInt())
        seg.is_expandable = e->asBool();
    if (const auto* p = s.get("segment_pool_id"); p && p->isSequence() && p->items().size() == 2)
        for (int k = 0; k < 2; ++k)
            if (p->items()[static_cast<std::size_t>(k)].isInt())
                seg.pool_id[k] = p->items()[static_cast<std::size_t>(k)].asInt();
    if (seg.total_size < 0)
        throw ShapeError("a segment has a negative total_size");
    const PickleValue* blocks = s.get("blocks");
    if (blocks && blocks->isSequence()) {
        std::uint64_t at = seg.address;
        seg.blocks.reserve(blocks->items().size());
        for (const auto& b : blocks->items()) {
            if (!b.isDict())
                throw ShapeError("a block is not a dict");
            SnapshotBlock blk;
            blk.size = intOr(b, "size", 0);
            blk.requested_size = intOr(b, "requested_size", blk.size);
            blk.address = static_cast<std::uint64_t>(intOr(b, "address", static_cast<std::int64_t>(at)));
            blk.state = stateOf(strOr(b, "state"));
            if (const PickleValue* h = b.get("history"); h && h->isSequence()) {
                legacy = true;
                if (!h->items().empty()) {
                    const auto& last = h->items().back();
                    blk.frames = framesOf(last.get("frames"), tables);
                    if (!b.get("address"))
                        blk.address = static_cast<std::uint64_t>(intOr(last, "addr", static_cast<std::int64_t>(at)));
                }
            } else {
                blk.frames = framesOf(b.get("frames"), tables);
            }
            at = blk.address + static_cast<std::uint64_t>(std::max<std::int64_t>(blk.size, 0));
            seg.blocks.push_back(std::move(blk));
        }
    }
    return seg;
}

void decodeSettings(const PickleValue& v, SnapshotSettings& out)
{
    if (!v.isDict())
        return;
    out.present = true;
    out.conf = strOr(v, "PYTORCH_CUDA_ALLOC_CONF");
    out.max_split_size = intOr(v, "max_split_size", -1);
    if (const auto* e = v.get("expandable_segments"); e && e->isInt())
        out.expandable_segments = e->asBool();
    if (const auto* g = v.get("garbage_collection_threshold"); g && g->isNumber())
        out.garbage_collection_threshold = g->asFloat();
    if (const auto* r = v.get("roundup_power2_divisions"); r && r->isDict()) {
        const auto& e = r->entries();
        for (std::size_t i = 0; i + 1 < e.size(); i += 2) {
            std::int64_t bucket = 0;
            if (e[i].isStr())
                bucket = std::atoll(std::string(e[i].asStr()).c_str());
            else if (e[i].isInt())
                bucket = e[i].asInt();
            auto div = e[i + 1].isInt() ? e[i + 1].asInt() : 0;
            if (div > 0)
                out.roundup_power2_divisions[bucket] = static_cast<int>(div);
        }
    }
}

void decodeAnnotations(const PickleValue& list, Snapshot& s)
{
    if (!list.isSequence())
        return;
    std::map<std::pair<std::string, int>, std::vector<std::size_t>> open;
    for (const auto& e : list.items()) {
        ++s.annotation_entries;
        if (!e.isDict())
            continue;
        const PickleValue* stage = e.get("stage");
        const PickleValue* name = e.get("name");
        const PickleValue* time = e.get("time_us");
        const PickleValue* device = e.get("device");
        if (!stage || !stage->isStr() || !name || !name->isStr() || !time || !time->isNumber())
            continue;
        SnapshotAnnotation a;
        a.name = std::string(name->asStr());
        a.device = device && device->isInt() ? static_cast<int>(device->asInt()) : 0;
        const auto us = time->isInt() ? time->asInt() : static_cast<std::int64_t>(time->asFloat());
        auto& stack = open[{a.name, a.device}];
        if (stage->asStr() == "START") {
            a.start_us = us;
            stack.push_back(s.annotations.size());
            s.annotations.push_back(std::move(a));
        } else if (stage->asStr() == "END" && !stack.empty()) {
            s.annotations[stack.back()].end_us = us;
            stack.pop_back();
        }
    }
    std::stable_sort(s.annotations.begin(), s.annotations.end(),
        [](const SnapshotAnnotation& a, const SnapshotAnnotation& b) { return a.start_us < b.start_us; });
}

void decodeHostSegments(const PickleValue& list, Snapshot& host, std::int64_t& skipped, StackTables& tables)
{
    if (!list.isSequence()) {
        ++skipped;
        return;
    }
    for (const auto& v : list.items()) {
        try {
            if (!v.isDict())
                throw ShapeError("a host segment is not a dict");
            bool legacy = false;
            SnapshotSegment seg = segmentOf(v, legacy, tables);
            seg.device = kHostDevice;
            if (!v.get("total_size"))
                seg.total_size = intOr(v, "size", 0);
            if (seg.total_size < 0)
                throw ShapeError("a host segment has a negative size");
            if (!v.get("blocks")) {
                SnapshotBlock b;
                b.address = seg.address;
                b.size = b.requested_size = seg.total_size;
                auto flag = [&](const char* key) {
                    const PickleValue* f = v.get(key);
                    return f && f->isInt() && f->asBool();
                };
                b.state = flag("allocated") ? BlockState::ActiveAllocated
                    : flag("active")        ? BlockState::ActivePendingFree
                                            : BlockState::Inactive;
                b.frames = framesOf(v.get("frames"), tables);
                seg.blocks.push_back(std::move(b));
            }
            for (const auto& b : seg.blocks) {
                if (b.state == BlockState::ActiveAllocated)
                    seg.allocated_size += v.get("allocated_size") ? 0 : b.size;
                if (b.state != BlockState::Inactive)
                    seg.active_size += v.get("active_size") ? 0 : b.size;
            }
            host.segments.push_back(std::move(seg));
        } catch (const ShapeError&) {
            ++skipped;
        }
    }
}

} // namespace snapdecode

bool SnapshotSettings::isDefault() const
{
    return !expandable_segments && max_split_size < 0 && roundup_power2_divisions.empty()
        && garbage_collection_threshold == 0.0;
}

AllocatorSettings SnapshotSettings::toModel() const
{
    AllocatorSettings a;
    if (max_split_size > 0)
        a.max_split_size = max_split_size;
    a.expandable_segments = expandable_segments;
    // The model takes one division count for all sizes: use the most common non-zero one.
    int best = 0, bestCount = 0;
    std::map<int, int> counts;
    for (const auto& [bucket, div] : roundup_power2_divisions)
        if (++counts[div] > bestCount) {
            bestCount = counts[div];
            best = div;
        }
    a.roundup_power2_divisions = best;
    return a;
}

} // namespace memledger
