#include "support/atomic_file.h"
#include "support/format.h"
#include "snapshot/snapshot.h"
#include "snapshot/frames.h"
#include "snapshot/snapshot_ledgers.h"
#include "report/report_summary.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <unordered_map>

namespace memledger {

namespace {

constexpr std::int64_t kSmallBuffer = std::int64_t {2} << 20;

// The state the allocator was in when the trace began, rebuilt from the final state by undoing the trace.
std::vector<PreloadedSegment> stateAtTraceStart(const Snapshot& s, const AllocatorSettings& settings)
{
    struct Seg {
        std::int64_t size;
        std::uint64_t stream;
        bool small;
        bool expandable;
    };
    std::vector<PreloadedSegment> out;
    const Trace& t = *s.trace;
    for (int dev : s.devices) {
        std::map<std::uint64_t, Seg> segs;
        std::unordered_map<std::uint64_t, std::int64_t> live;
        for (const auto& seg : s.segments) {
            if (seg.device != dev)
                continue;
            bool small = seg.segment_type.empty() ? seg.total_size == kSmallBuffer : seg.segment_type == "small";
            segs[seg.address] = {seg.total_size, seg.stream, small, seg.is_expandable};
            for (const auto& b : seg.blocks)
                if (b.state == BlockState::ActiveAllocated || b.state == BlockState::ActivePendingFree)
                    live[b.address] = b.size;
        }
        auto containing = [&](std::uint64_t addr) -> Seg* {
            auto it = segs.upper_bound(addr);
            if (it == segs.begin())
                return nullptr;
            --it;
            return it->second.expandable ? &it->second : nullptr;
        };
        for (std::size_t k = t.size(); k-- > 0;) {
            if (t.device[k] != dev)
                continue;
            const auto addr = t.address[k];
            switch (t.action[k]) {
            case Action::SegmentAlloc:
                segs.erase(addr);
                break;
            case Action::SegmentFree:
                segs[addr] = {t.bytes[k], s.trace_stream[k], t.bytes[k] == kSmallBuffer, false};
                break;
            case Action::SegmentMap:
                if (Seg* g = containing(addr))
                    g->size -= t.bytes[k];
                break;
            case Action::SegmentUnmap:
                if (Seg* g = containing(addr))
                    g->size += t.bytes[k];
                break;
            // A paired alloc and free cancel out; an unpaired free was allocated before the trace, an
            // unpaired alloc is still alive at the end (so in the final state, but not at the start).
            case Action::Free:
                if (t.partner[k] == kNoPartner)
                    live.emplace(addr, allocatorRoundSize(t.bytes[k], settings));
                break;
            case Action::Alloc:
                if (t.partner[k] == kNoPartner)
                    live.erase(addr);
                break;
            default:
                break;
            }
        }
        std::vector<std::pair<std::uint64_t, std::int64_t>> liveSorted(live.begin(), live.end());
        std::sort(liveSorted.begin(), liveSorted.end());
        for (const auto& [addr, g] : segs) {
            if (g.size <= 0)
                continue;
            PreloadedSegment p;
            p.device = static_cast<std::int8_t>(dev);
            p.stream = g.stream;
            p.address = addr;
            p.size = g.size;
            p.small_pool = g.small;
            p.expandable = g.expandable;
            auto it = std::lower_bound(liveSorted.begin(), liveSorted.end(), std::make_pair(addr, std::int64_t {0}));
            for (; it != liveSorted.end() && it->first < addr + static_cast<std::uint64_t>(g.size); ++it)
                p.allocated.push_back({it->first, it->second});
            out.push_back(std::move(p));
        }
    }
    return out;
}

std::string baseName(const std::string& path)
{
    auto slash = path.find_last_of("/\\");
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

// "dir/model.py:54 forward" -> "dir/model.py"
std::string fileOfWhere(const std::string& where)
{
    auto space = where.find(' ');
    auto head = where.substr(0, space);
    auto colon = head.rfind(':');
    return colon == std::string::npos ? head : head.substr(0, colon);
}

} // namespace

SnapshotAllocatorCheck checkAllocatorModel(const Snapshot& s)
{
    SnapshotAllocatorCheck c;
    c.done = true;
    AllocatorSettings settings = s.settings.toModel();
    if (!s.settings.present)
        settings.expandable_segments = std::any_of(
            s.segments.begin(), s.segments.end(), [](const SnapshotSegment& g) { return g.is_expandable; });
    c.unit = settings.expandable_segments ? "segment_map" : "segment_alloc";
    if (!s.trace || s.trace->size() == 0)
        return c;
    ReplayOptions options;
    options.streams = &s.trace_stream;
    options.initial = stateAtTraceStart(s, settings);
    c.replay = replayCachingAllocator(*s.trace, settings, options);

    const Action unit = settings.expandable_segments ? Action::SegmentMap : Action::SegmentAlloc;
    const auto& modelSizes = settings.expandable_segments ? c.replay.segment_maps : c.replay.segment_allocs;
    const auto& modelDevices
        = settings.expandable_segments ? c.replay.segment_map_device : c.replay.segment_alloc_device;
    std::map<int, std::vector<std::int64_t>> recorded, made;
    const Trace& t = *s.trace;
    for (std::size_t i = 0; i < t.size(); ++i)
        if (t.action[i] == unit)
            recorded[t.device[i]].push_back(t.bytes[i]);
    for (std::size_t i = 0; i < modelSizes.size(); ++i)
        made[modelDevices[i]].push_back(modelSizes[i]);
    for (const auto& [dev, r] : recorded) {
        c.recorded += static_cast<std::int64_t>(r.size());
        const auto& m = made[dev];
        for (std::size_t i = 0; i < r.size() && i < m.size(); ++i)
            if (r[i] == m[i])
                ++c.reproduced;
    }
    c.model_total = static_cast<std::int64_t>(modelSizes.size());
    c.matched = c.reproduced == c.recorded && c.model_total == c.recorded;
    return c;
}

AllocatorReplay replaySnapshot(const Snapshot& s, const AllocatorSettings& settings)
{
    if (!s.trace || s.trace->size() == 0)
        return {};
    ReplayOptions options;
    options.streams = &s.trace_stream;
    options.initial = stateAtTraceStart(s, settings);
    options.record_reserved_after = false;
    return replayCachingAllocator(*s.trace, settings, options);
}

Report reportFromSnapshot(const Snapshot& s, const std::string& path, bool checkAllocator)
{
    return reportFromSnapshot(Snapshot(s), path, checkAllocator);
}

namespace {

std::string allocatorNote(const SnapshotAllocatorCheck& c)
{
    return "allocator model: " + std::to_string(c.reproduced) + " of " + std::to_string(c.recorded) + " recorded "
        + c.unit + " sizes reproduced in order"
        + (c.matched ? "" : " (model made " + std::to_string(c.model_total) + ")");
}

} // namespace

Report addAllocatorCheck(const Report& r)
{
    if (!r.snapshot || r.snapshot->allocator_check.done)
        return r;
    auto s = std::make_shared<Snapshot>(*r.snapshot);
    s->allocator_check = checkAllocatorModel(*s);
    Report out = r;
    if (s->allocator_check.recorded > 0)
        out.notes.push_back(allocatorNote(s->allocator_check));
    out.snapshot = std::move(s);
    return out;
}

std::int64_t aliveBeforeTrace(const Snapshot& s)
{
    std::int64_t net = 0;
    if (s.trace)
        for (std::size_t i = 0; i < s.trace->size(); ++i) {
            if (s.trace->action[i] == Action::Alloc)
                net += s.trace->bytes[i];
            else if (s.trace->action[i] == Action::Free)
                net -= s.trace->bytes[i];
        }
    return std::max<std::int64_t>(0, s.allocatedBytes() - net);
}

void summarizeSnapshotEvents(Report& r, const Snapshot& s, const std::string& path, std::uint32_t first, std::uint32_t end)
{
    const Trace empty;
    const Trace& t = s.trace ? *s.trace : empty;
    end = std::min<std::uint32_t>(end, static_cast<std::uint32_t>(t.size()));
    first = std::min(first, end);
    r.range_first = first;
    r.range_end = end;
    r.alive_at_peak.clear();
    r.layers.clear();

    // The peak: the most live bytes at a moment of the range, counting the blocks alive before the trace.
    const std::int64_t start = aliveBeforeTrace(s);
    std::int64_t live = start;
    auto step = [&](std::size_t i) {
        if (t.action[i] == Action::Alloc)
            live += t.bytes[i];
        else if (t.action[i] == Action::Free)
            live -= t.bytes[i];
        else
            return false;
        return true;
    };
    for (std::size_t i = 0; i < first; ++i)
        step(i);
    r.peak_bytes = live;
    r.peak_event = static_cast<std::int32_t>(first) - 1;
    r.peak_time_ns = first > 0 ? t.time_ns[first - 1] : 0;
    for (std::size_t i = first; i < end; ++i)
        if (step(i) && live > r.peak_bytes) {
            r.peak_bytes = live;
            r.peak_event = static_cast<std::int32_t>(i);
            r.peak_time_ns = t.time_ns[i];
        }
    r.peak_bytes = std::max<std::int64_t>(r.peak_bytes, 0);
    r.peak_total_bytes = r.peak_bytes;

    // Per top user frame: what the range allocated (total, count, largest block) and what is alive at the
    // peak. Without allocations in the trace (a bare segment list, a legacy file), the blocks the segments
    // hold at the end are the state shown, grouped by their own frames.
    struct Figures {
        std::int64_t at_peak = 0, total = 0, count = 0, largest = 0;
    };
    std::map<std::string, Figures> byWhere;
    std::vector<PeakItem> alive;
    const bool traced = std::any_of(t.action.begin(), t.action.end(), [](Action a) { return a == Action::Alloc; });
    std::int64_t tracedAtPeak = 0;
    if (traced) {
        for (std::size_t i = 0; i < t.size(); ++i) {
            if (t.action[i] != Action::Alloc)
                continue;
            const std::string& where = t.strings.at(t.where[i]);
            auto idx = static_cast<std::int32_t>(i);
            if (i >= first && i < end) {
                auto& f = byWhere[where];
                f.total += t.bytes[i];
                f.count += 1;
                f.largest = std::max(f.largest, t.bytes[i]);
            }
            if (r.peak_event >= 0 && idx <= r.peak_event
                && (t.partner[i] == kNoPartner || t.partner[i] > r.peak_event)) {
                byWhere[where].at_peak += t.bytes[i];
                tracedAtPeak += t.bytes[i];
                PeakItem p;
                p.bytes = t.bytes[i];
                p.ledger = t.ledger[i];
                p.where = where;
                p.event = idx;
                alive.push_back(std::move(p));
            }
        }
    } else {
        for (const auto& seg : s.segments)
            for (const auto& b : seg.blocks) {
                if (b.state != BlockState::ActiveAllocated)
                    continue;
                auto where = allocationSite(b.frames);
                auto& f = byWhere[where];
                f.at_peak += b.size;
                f.total += b.size;
                f.count += 1;
                f.largest = std::max(f.largest, b.size);
                tracedAtPeak += b.size;
                PeakItem p;
                p.bytes = b.size;
                p.ledger = Ledger::Resident;
                p.where = where;
                alive.push_back(std::move(p));
            }
        r.peak_bytes = r.peak_total_bytes = std::max(r.peak_bytes, tracedAtPeak);
    }
    if (traced) {
        r.ledgers = snapshotLedgerFigures(t, start, first, end, r.peak_event);
    } else { // the state at the end, none of it told by a trace
        r.ledgers = {};
        r.ledgers[static_cast<std::size_t>(Ledger::Resident)] = {tracedAtPeak, tracedAtPeak, tracedAtPeak};
    }
    std::stable_sort(
        alive.begin(), alive.end(), [](const PeakItem& a, const PeakItem& b) { return a.bytes > b.bytes; });
    if (alive.size() > 50)
        alive.resize(50);
    r.alive_at_peak = std::move(alive);

    LayerStats root;
    root.name = baseName(path);
    root.type = "snapshot";
    r.layers.push_back(root);
    std::map<std::string, int> fileNode;
    std::vector<std::pair<std::int64_t, const std::string*>> order;
    for (const auto& [w, f] : byWhere)
        order.push_back({std::max(f.total, f.at_peak), &w});
    std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    auto addTo = [](LayerStats& node, const LayerStats& l) {
        node.activation_bytes += l.activation_bytes;
        node.peak_bytes += l.peak_bytes;
        node.calls += l.calls;
        node.largest_block_bytes = std::max(node.largest_block_bytes, l.largest_block_bytes);
    };
    // Blocks alive at the peak that the trace did not allocate: it is a ring buffer.
    if (traced && r.peak_bytes > tracedAtPeak) {
        LayerStats before;
        before.path = "(alive before the trace)";
        before.name = before.path;
        before.type = "before the trace";
        before.parent = 0;
        before.depth = 1;
        before.peak_bytes = r.peak_bytes - tracedAtPeak;
        r.layers[0].children.push_back(static_cast<int>(r.layers.size()));
        addTo(r.layers[0], before);
        r.layers.push_back(std::move(before));
    }
    for (const auto& [size, w] : order) {
        const std::string& where = *w;
        const Figures& f = byWhere[where];
        std::string file = where.empty() ? "(no stack)" : fileOfWhere(where);
        auto it = fileNode.find(file);
        if (it == fileNode.end()) {
            LayerStats fl;
            fl.path = file;
            fl.name = baseName(file);
            fl.type = "file";
            fl.parent = 0;
            fl.depth = 1;
            int id = static_cast<int>(r.layers.size());
            r.layers[0].children.push_back(id);
            r.layers.push_back(fl);
            it = fileNode.emplace(file, id).first;
        }
        LayerStats l;
        l.path = where.empty() ? "(no stack):" : where;
        l.name = where.empty() ? "(no stack)" : where.substr(std::min(where.size(), file.size() + 1));
        l.type = "frame";
        l.parent = it->second;
        l.depth = 2;
        l.activation_bytes = f.total;
        l.peak_bytes = f.at_peak;
        l.calls = f.count;
        l.largest_block_bytes = f.largest;
        auto& parent = r.layers[static_cast<std::size_t>(it->second)];
        addTo(parent, l);
        int id = static_cast<int>(r.layers.size());
        parent.children.push_back(id);
        r.layers.push_back(std::move(l));
    }
    for (auto c : fileNode)
        addTo(r.layers[0], r.layers[static_cast<std::size_t>(c.second)]);
    r.layers[0].peak_bytes = r.peak_bytes;
}

Report reportFromSnapshot(Snapshot&& s, const std::string& path, bool checkAllocator)
{
    if (checkAllocator && !s.allocator_check.done)
        s.allocator_check = checkAllocatorModel(s);
    Report r;
    r.source = ReportSource::Snapshot;
    r.model.path = path;
    r.model.type = "CUDA memory snapshot";
    std::error_code ec;
    auto fileSize = std::filesystem::file_size(path, ec);
    r.model.file_bytes = ec ? 0 : static_cast<std::int64_t>(fileSize);
    r.run.dtype = "";
    std::string devs;
    for (int d : s.devices)
        devs += (devs.empty() ? "cuda:" : ",cuda:") + std::to_string(d);
    r.run.device = devs.empty() ? "cuda" : devs;

    const Trace& t = *s.trace;
    if (t.size() > 1 && s.trace_has_time)
        r.run.duration_ms = static_cast<double>(t.time_ns.back() - t.time_ns.front()) / 1e6;

    summarizeSnapshotEvents(r, s, path, 0, static_cast<std::uint32_t>(t.size()));
    r.range_end = 0; // the whole trace
    const std::int64_t start = aliveBeforeTrace(s);

    r.notes.push_back("CUDA memory snapshot (" + s.layout + "): " + std::to_string(s.segments.size()) + " segments, "
        + formatBytes(s.reservedBytes()) + " reserved, " + formatBytes(s.allocatedBytes()) + " allocated, "
        + std::to_string(t.size()) + " trace entries");
    r.notes.push_back("snapshot ledgers are told from each allocation's call stack and lifetime; resident: alive "
                      "before the trace, with nothing in it telling more");
    if (start > 0 && t.size() > 0)
        r.notes.push_back(formatBytes(start) + " were allocated before the trace began (the trace is a ring buffer)");
    if (!s.trace_has_time && t.size() > 0)
        r.notes.push_back("the trace has no timestamps: the timeline's axis is the events' order");
    for (const auto& o : s.ooms)
        r.notes.push_back("out of memory on cuda:" + std::to_string(o.device) + ": " + formatBytes(o.bytes_requested)
            + " requested, " + formatBytes(o.device_free) + " free on the device"
            + (o.where.empty() ? "" : " at " + o.where));
    if (s.allocator_check.recorded > 0)
        r.notes.push_back(allocatorNote(s.allocator_check));
    if (!s.ignored_keys.empty()) { // docs/snapshots.md, "Keys"
        std::string keys;
        bool host = false;
        for (const auto& k : s.ignored_keys) {
            keys += (keys.empty() ? "" : ", ") + k;
            host = host || k.rfind("host_", 0) == 0;
        }
        r.notes.push_back("keys of the file memledger reads past: " + keys);
        if (host)
            r.notes.push_back("the file records host (pinned) memory; memledger does not show it yet");
    }
    r.trace = s.trace;
    r.snapshot = std::make_shared<const Snapshot>(std::move(s));
    return r;
}

Report readSnapshotReport(const std::string& path, bool checkAllocator, const SnapshotReadOptions& options)
{
    return reportFromSnapshot(readSnapshotFile(path, options), path, checkAllocator);
}

std::vector<AnnotationFigures> annotationFigures(const Report& r)
{
    std::vector<AnnotationFigures> out;
    if (!r.snapshot)
        return out;
    out.resize(r.snapshot->annotations.size());
    if (!r.trace || !r.snapshot->trace_has_time || r.trace->size() == 0)
        return out;
    const auto& time = r.trace->time_ns;
    const auto live = liveBytesAfterEachEvent(*r.trace);
    for (std::size_t k = 0; k < out.size(); ++k) {
        const auto& a = r.snapshot->annotations[k];
        const auto start = r.snapshot->startNs(a);
        const auto end = a.end_us >= 0 ? r.snapshot->endNs(a) : time.back();
        auto first = static_cast<std::size_t>(std::lower_bound(time.begin(), time.end(), start) - time.begin());
        auto last = static_cast<std::size_t>(std::upper_bound(time.begin(), time.end(), end) - time.begin());
        const std::int64_t before = first > 0 ? live[first - 1] : 0;
        std::int64_t peak = before;
        for (auto i = first; i < last; ++i)
            peak = std::max(peak, live[i]);
        out[k].peak_bytes = peak;
        out[k].added_bytes = (last > 0 ? live[last - 1] : 0) - before;
    }
    return out;
}

} // namespace memledger
