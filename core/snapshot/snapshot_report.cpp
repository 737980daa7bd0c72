#include "support/atomic_file.h"
#include "support/format.h"
#include "snapshot/snapshot.h"
#include "snapshot/frames.h"
#include "snapshot/snapshot_ledgers.h"
#include "report/report_summary.h"
#include "report/trace_edit.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <future>
#include <system_error>
#include <map>
#include <set>
#include <unordered_map>

namespace memledger {

namespace {

constexpr const char* kOutsideForward = "(outside any forward)";
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

// "dir/model.py:54 forward" -> "model.py:54 forward"; "aten::mul" stays.
std::string shortWhere(const std::string& where)
{
    const auto space = where.find(' ');
    const auto slash = where.find_last_of("/\\", space);
    return slash == std::string::npos ? where : where.substr(slash + 1);
}

} // namespace

namespace {

std::string hexAddress(std::uint64_t a)
{
    char buf[24];
    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(a));
    return buf;
}

// The model's block that holds `address` in `segments` (nullptr: no segment of the model holds it).
const ReplaySegment::Block* blockAt(const std::vector<ReplaySegment>& segments, int device, std::uint64_t address)
{
    for (const auto& seg : segments) {
        if (seg.device != device || address < seg.address || address >= seg.address + static_cast<std::uint64_t>(seg.size))
            continue;
        for (const auto& b : seg.blocks)
            if (address >= b.address && address < b.address + static_cast<std::uint64_t>(b.size))
                return &b;
    }
    return nullptr;
}

// The first allocation the model places elsewhere than the GPU did, and what the model held at both places just
// before it: the model's state then is a replay of the trace up to that entry.
void findDeparture(const Snapshot& s, const AllocatorSettings& settings, const std::vector<PreloadedSegment>& initial,
    SnapshotAllocatorCheck& c)
{
    const Trace& t = *s.trace;
    ReplayOptions options;
    options.streams = &s.trace_stream;
    options.initial = initial;
    options.record_addresses = true;
    options.record_reserved_after = false;
    const auto placed = replayCachingAllocator(t, settings, options);
    std::size_t at = t.size();
    for (std::size_t i = 0; i < t.size() && at == t.size(); ++i)
        if (t.action[i] == Action::Alloc && placed.model_address[i] != 0 && placed.model_address[i] != t.address[i])
            at = i;
    if (at == t.size())
        return;
    Trace before;
    for (std::size_t i = 0; i < at; ++i)
        pushCopy(before, t, i);
    const auto state = replayCachingAllocator(before, settings, options).final_segments;
    const int device = t.device[at];
    const auto* gpu = blockAt(state, device, t.address[at]);
    const auto* model = blockAt(state, device, placed.model_address[at]);
    c.departure_event = static_cast<std::int64_t>(at);
    std::string text = "the model first departs at trace entry " + std::to_string(at) + ", an alloc of "
        + formatBytes(t.bytes[at]) + ": the GPU put it at " + hexAddress(t.address[at]);
    if (!gpu)
        text += ", in no segment the model holds (a segment the trace and the final state do not show)";
    else if (gpu->allocated)
        text += ", which the model still has allocated (a free the trace misses)";
    else
        text += ", in a free block of " + formatBytes(gpu->size) + " at " + hexAddress(gpu->address);
    text += "; the model's best fit took " + hexAddress(placed.model_address[at]);
    if (model && !model->allocated)
        text += ", a free block of " + formatBytes(model->size);
    if (gpu && !gpu->allocated && gpu->address != t.address[at])
        text += ". An allocation takes the start of a free block, so the " + formatBytes(static_cast<std::int64_t>(
                    t.address[at] - gpu->address)) + " before " + hexAddress(t.address[at])
            + " were in use then, though the model's state, rebuilt from the file, has them free: the trace does not "
              "account for that memory (an allocation it never records, or a free recorded early)";
    else if (gpu && !gpu->allocated && model && !model->allocated && model->size < gpu->size)
        text += ". The allocator passed over that smaller free block, so it was not free to it then: memory the "
                "trace shows free that the allocator still held (a free the recording missed, or a block waiting on "
                "another stream's work)";
    c.departure = text;
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
    if (!c.matched && !settings.expandable_segments) // expandable segments' addresses are the model's own
        findDeparture(s, settings, options.initial, c);
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
        + (c.matched ? "" : " (model made " + std::to_string(c.model_total) + ")")
        + (c.departure.empty() ? "" : "; " + c.departure);
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

std::int64_t requestedOrSize(const Snapshot& s, const SnapshotBlock& b)
{
    return s.trace && s.trace->size() > 0 && b.requested_size > 0 ? b.requested_size : b.size;
}

std::int64_t aliveBeforeTrace(const Snapshot& s, std::optional<int> device)
{
    // Block by block, in the trace's unit (its entries carry the bytes requested; a block's size is rounded
    // up): the blocks alive at the end that no allocation of the trace made, and the blocks the trace frees
    // without having allocated them. (The end's allocated bytes less the trace's net would mix the two units.)
    std::int64_t before = 0;
    std::set<std::pair<int, std::uint64_t>> madeInTrace; // allocations of the trace still alive at its end
    if (s.trace) {
        const Trace& t = *s.trace;
        for (std::size_t i = 0; i < t.size(); ++i) {
            if (t.partner[i] != kNoPartner || (device && t.device[i] != *device))
                continue;
            if (t.action[i] == Action::Alloc)
                madeInTrace.insert({t.device[i], t.address[i]});
            else if (t.action[i] == Action::Free)
                before += t.bytes[i];
        }
    }
    for (const auto& seg : s.segments)
        for (const auto& b : seg.blocks)
            if ((!device || seg.device == *device) && b.state == BlockState::ActiveAllocated
                && !madeInTrace.count({seg.device, b.address}))
                before += requestedOrSize(s, b);
    return before;
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

    // The module tree (docs/snapshots.md, "Module tree"): each allocation in the row of its forward frames,
    // outermost first, with what the range allocated (in total, per ledger, count, largest block) and what is
    // alive at the peak, each summed into the parents as a model run's layers are. Allocations made outside any
    // forward are under "(outside any forward)", by the frame that names them. Without allocations in the trace
    // (a bare segment list, a legacy file), the blocks the segments hold at the end are the state shown.
    LayerStats root;
    root.name = baseName(path);
    root.type = "snapshot";
    r.layers.push_back(root);
    std::unordered_map<std::string, int> rowOf;
    auto row = [&](int parent, const std::string& rowPath, std::string name, const char* type) {
        auto [it, fresh] = rowOf.emplace(rowPath, 0);
        if (!fresh)
            return it->second;
        LayerStats l;
        l.path = rowPath;
        l.name = std::move(name);
        l.type = type;
        l.parent = parent;
        l.depth = r.layers[static_cast<std::size_t>(parent)].depth + 1;
        const int id = static_cast<int>(r.layers.size());
        r.layers[static_cast<std::size_t>(parent)].children.push_back(id);
        r.layers.push_back(std::move(l));
        it->second = id;
        return id;
    };
    auto rowOfFrames = [&](const std::vector<FrameView>& frames, const std::string& where) {
        const auto chain = forwardChain(frames);
        if (chain.empty()) {
            const std::string outside = kOutsideForward;
            const int o = row(0, outside, outside, "outside");
            return where.empty() ? row(o, outside + " / (no stack)", "(no stack)", "frame")
                                 : row(o, outside + " / " + where, shortWhere(where), "frame");
        }
        int m = 0;
        for (std::size_t k = 0; k < chain.size(); ++k) {
            // A captured module's row is named by its path in the model (memledger.capture on the CPU).
            const auto module = moduleOfFrame(chain[k]);
            m = row(m, modulePath(chain, k + 1), module.empty() ? shortFrameText(chain[k]) : std::string(module),
                "forward");
        }
        return m;
    };
    auto add = [&](int m, std::int64_t bytes, Ledger ledger, bool inRange, bool atPeak) {
        if (inRange)
            addToLedgerColumns(r.layers, m, ledger, bytes, true);
        for (; m >= 0; m = r.layers[static_cast<std::size_t>(m)].parent) {
            auto& l = r.layers[static_cast<std::size_t>(m)];
            if (inRange) {
                l.calls += 1;
                l.largest_block_bytes = std::max(l.largest_block_bytes, bytes);
            }
            if (atPeak)
                l.peak_bytes += bytes;
        }
    };
    std::vector<PeakItem> alive;
    const bool traced = std::any_of(t.action.begin(), t.action.end(), [](Action a) { return a == Action::Alloc; });
    std::int64_t tracedAtPeak = 0;
    if (traced) {
        std::unordered_map<std::uint64_t, int> rowOfStack; // (stack, where) -> row
        for (std::size_t i = 0; i < t.size(); ++i) {
            if (t.action[i] != Action::Alloc)
                continue;
            auto idx = static_cast<std::int32_t>(i);
            const bool inRange = i >= first && i < end;
            const bool atPeak = r.peak_event >= 0 && idx <= r.peak_event
                && (t.partner[i] == kNoPartner || t.partner[i] > r.peak_event);
            if (!inRange && !atPeak)
                continue;
            const std::string& where = t.strings.at(t.where[i]);
            const auto key = (std::uint64_t {t.stack[i]} << 32) | t.where[i];
            auto it = rowOfStack.find(key);
            if (it == rowOfStack.end())
                it = rowOfStack.emplace(key, rowOfFrames(framesOfStack(t, t.stack[i]), where)).first;
            add(it->second, t.bytes[i], t.ledger[i], inRange, atPeak);
            if (atPeak) {
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
                const auto bytes = requestedOrSize(s, b); // a trace of frees only counts requests
                add(rowOfFrames(framesOf(b.frames), where), bytes, Ledger::Resident, true, true);
                tracedAtPeak += bytes;
                PeakItem p;
                p.bytes = bytes;
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

    // Blocks alive at the peak that the trace did not allocate: made before recording began, or dropped by it.
    if (traced && r.peak_bytes > tracedAtPeak) {
        const int b = row(0, "(alive before the trace)", "(alive before the trace)", "before the trace");
        r.layers[static_cast<std::size_t>(b)].peak_bytes = r.peak_bytes - tracedAtPeak;
    }
    r.layers[0].peak_bytes = r.peak_bytes;
}

Report reportFromSnapshot(Snapshot&& s, const std::string& path, bool checkAllocator)
{
    // The allocator model's replay (a third of the work after reading) runs on a second thread meanwhile.
    std::future<SnapshotAllocatorCheck> check;
    // A CPU capture has no caching allocator to check: its blocks are what the CPU allocator handed out.
    if (checkAllocator && !s.allocator_check.done && !s.onCpu()) {
        try {
            check = std::async(std::launch::async, [&s] { return checkAllocatorModel(s); });
        } catch (const std::system_error&) { // no thread to be had: here, first
            s.allocator_check = checkAllocatorModel(s);
        }
    }
    Report r;
    r.source = ReportSource::Snapshot;
    r.model.path = path;
    r.model.type = snapshotKindName(s);
    std::error_code ec;
    auto fileSize = std::filesystem::file_size(path, ec);
    r.model.file_bytes = ec ? 0 : static_cast<std::int64_t>(fileSize);
    r.run.dtype = "";
    std::string devs;
    for (int d : s.devices)
        devs += (devs.empty() ? "" : ",") + snapshotDeviceName(d);
    r.run.device = devs.empty() ? "cuda" : devs;

    const Trace& t = *s.trace;
    if (t.size() > 1 && s.trace_has_time)
        r.run.duration_ms = static_cast<double>(t.time_ns.back() - t.time_ns.front()) / 1e6;

    summarizeSnapshotEvents(r, s, path, 0, static_cast<std::uint32_t>(t.size()));
    r.range_end = 0; // the whole trace
    const std::int64_t start = aliveBeforeTrace(s);

    r.notes.push_back(r.model.type + " (" + s.layout + "): " + std::to_string(s.segments.size()) + " segments, "
        + formatBytes(s.reservedBytes()) + " reserved, " + formatBytes(s.allocatedBytes()) + " allocated, "
        + std::to_string(t.size()) + " trace entries");
    r.notes.push_back("snapshot ledgers are told from each allocation's call stack and lifetime; resident: alive "
                      "before the trace, with nothing in it telling more");
    if (s.capture.present())
        r.notes.push_back("made by memledger.capture on " + s.capture.device
            + (s.capture.torch.empty() ? std::string() : " (torch " + s.capture.torch + ")")
            + (s.capture.source.empty() ? std::string() : " from " + s.capture.source)
            + (s.capture.steps == 0       ? std::string(", no optimizer step")
                  : s.capture.steps == 1    ? std::string(", 1 optimizer step")
                  : s.capture.steps > 1     ? ", " + std::to_string(s.capture.steps) + " optimizer steps"
                                            : std::string())
            + (s.capture.note.empty() ? std::string() : ": " + s.capture.note));
    if (start > 0 && t.size() > 0)
        r.notes.push_back(formatBytes(start) + " were allocated before the trace began ("
            + (s.onCpu() ? "before memledger.capture started: the tensors it found alive, such as the parameters, the "
                           "optimizer state and the inputs)"
                         : "before _record_memory_history started recording, or their allocs fell out of its "
                           "max_entries ring buffer)"));
    if (!s.trace_has_time && t.size() > 0)
        r.notes.push_back("the trace has no timestamps: the timeline's axis is the events' order");
    for (const auto& o : s.ooms)
        r.notes.push_back("out of memory on " + snapshotDeviceName(o.device) + ": " + formatBytes(o.bytes_requested)
            + " requested, " + formatBytes(o.device_free) + " free on the device"
            + (o.where.empty() ? "" : " at " + o.where));
    if (check.valid())
        s.allocator_check = check.get();
    if (s.allocator_check.recorded > 0)
        r.notes.push_back(allocatorNote(s.allocator_check));
    if (!s.tensor_annotations.empty()) {
        std::size_t before = 0;
        for (const auto& a : s.tensor_annotations)
            before += a.event == TensorAnnotation::kBeforeTrace;
        r.notes.push_back(std::to_string(s.tensor_annotations.size())
            + " allocation annotations (torch.cuda.memory._annotate_tensor), shown with their allocations"
            + (before > 0 ? "; " + std::to_string(before) + " name allocations made before the trace" : ""));
    }
    if (!s.ignored_keys.empty()) { // docs/snapshots.md, "Keys"
        std::string keys;
        for (const auto& k : s.ignored_keys)
            keys += (keys.empty() ? "" : ", ") + k;
        r.notes.push_back("keys of the file memledger reads past: " + keys);
    }
    if (const auto h = hostFigures(s); h.present) {
        r.notes.push_back(snapshotDeviceName(kHostDevice) + ": " + std::to_string(h.allocations) + " allocations, "
            + formatBytes(h.allocated_bytes) + " allocated, peak " + formatBytes(h.peak_bytes) + ", "
            + std::to_string(h.segments) + " segments, " + formatBytes(h.reserved_bytes)
            + " reserved (a device of its own, not counted in the GPU figures)");
        if (h.skipped > 0)
            r.notes.push_back(snapshotDeviceName(kHostDevice) + ": " + std::to_string(h.skipped)
                + " host entries or segments of another shape were left out");
    }
    r.trace = s.trace;
    r.snapshot = std::make_shared<const Snapshot>(std::move(s));
    return r;
}

SnapshotHostFigures hostFigures(const Snapshot& s)
{
    SnapshotHostFigures f;
    f.skipped = s.host_skipped;
    if (!s.host)
        return f;
    const Snapshot& h = *s.host;
    f.present = true;
    f.segments = static_cast<std::int64_t>(h.segments.size());
    f.reserved_bytes = h.reservedBytes();
    f.allocated_at_end_bytes = h.allocatedBytes();
    if (h.trace) {
        const Trace& t = *h.trace;
        f.trace_entries = static_cast<std::int64_t>(t.size());
        for (std::size_t i = 0; i < t.size(); ++i)
            if (t.action[i] == Action::Alloc) {
                ++f.allocations;
                f.allocated_bytes += t.bytes[i];
            }
    }
    f.peak_bytes = reportFromSnapshot(h, s.layout, false).peak_bytes;
    return f;
}

Report hostReport(const Report& r)
{
    if (!r.snapshot || !r.snapshot->host)
        return r;
    Report h = reportFromSnapshot(*r.snapshot->host, r.model.path, false);
    h.model.file_bytes = r.model.file_bytes;
    return h;
}

Report readSnapshotReport(const std::string& path, bool checkAllocator, const SnapshotReadOptions& options)
{
    return reportFromSnapshot(readSnapshotFile(path, options), path, checkAllocator);
}

std::string annotationAt(const Snapshot& s, std::int64_t ns)
{
    std::string found;
    for (const auto& a : s.annotations) { // by start: the innermost is the latest to start
        const auto end = a.end_us >= 0 ? s.endNs(a) : INT64_MAX;
        if (s.startNs(a) <= ns && ns <= end)
            found = a.name;
    }
    return found;
}

std::vector<AnnotationFigures> annotationFigures(const Report& r)
{
    std::vector<AnnotationFigures> out;
    if (!r.snapshot)
        return out;
    out.resize(r.snapshot->annotations.size());
    if (out.empty() || !r.trace || !r.snapshot->trace_has_time || r.trace->size() == 0)
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
