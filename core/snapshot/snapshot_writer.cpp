#include "snapshot/snapshot_writer.h"
#include "allocator/gpu_replay.h"
#include "snapshot/segment_state.h"

#include "support/atomic_file.h"
#include "snapshot/snapshot.h"

#include <algorithm>
#include <unordered_map>

namespace memledger {

namespace {

// Emits pickle opcodes for plain data. Repeated strings and frame lists go through the memo, as Python's
// own pickler does, so a million events stay a few dozen bytes each.
class PickleOut {
public:
    explicit PickleOut(std::string& out)
        : out_(out)
    {
        out_.push_back(static_cast<char>(0x80));
        out_.push_back(4);
    }
    void stop() { out_.push_back('.'); }

    void integer(std::int64_t v)
    {
        if (v >= 0 && v < 256) {
            out_.push_back('K');
            out_.push_back(static_cast<char>(v));
        } else if (v >= 0 && v < 65536) {
            out_.push_back('M');
            le(static_cast<std::uint64_t>(v), 2);
        } else if (v >= INT32_MIN && v <= INT32_MAX) {
            out_.push_back('J');
            le(static_cast<std::uint32_t>(static_cast<std::int32_t>(v)), 4);
        } else {
            // LONG1: little-endian two's complement, shortest form.
            unsigned char b[9];
            std::uint64_t u = static_cast<std::uint64_t>(v);
            int n = 0;
            for (; n < 8; ++n)
                b[n] = static_cast<unsigned char>(u >> (8 * n));
            n = 8;
            bool neg = v < 0;
            while (n > 1 && b[n - 1] == (neg ? 0xff : 0) && ((b[n - 2] & 0x80) != 0) == neg)
                --n;
            if (!neg && (b[n - 1] & 0x80))
                b[n++] = 0;
            out_.push_back(static_cast<char>(0x8a));
            out_.push_back(static_cast<char>(n));
            out_.append(reinterpret_cast<const char*>(b), static_cast<std::size_t>(n));
        }
    }
    void boolean(bool b) { out_.push_back(static_cast<char>(b ? 0x88 : 0x89)); }
    void none() { out_.push_back('N'); }
    void str(std::string_view s)
    {
        if (s.size() < 256) {
            out_.push_back(static_cast<char>(0x8c));
            out_.push_back(static_cast<char>(s.size()));
        } else {
            out_.push_back('X');
            le(s.size(), 4);
        }
        out_.append(s.data(), s.size());
    }
    // A string written once and fetched from the memo afterwards (dict keys, state names).
    void key(std::string_view s)
    {
        auto it = keys_.find(std::string(s));
        if (it != keys_.end()) {
            get(it->second);
            return;
        }
        str(s);
        keys_.emplace(std::string(s), memoize());
    }
    std::uint32_t memoize()
    {
        out_.push_back(static_cast<char>(0x94));
        return memo_++;
    }
    void get(std::uint32_t idx)
    {
        if (idx < 256) {
            out_.push_back('h');
            out_.push_back(static_cast<char>(idx));
        } else {
            out_.push_back('j');
            le(idx, 4);
        }
    }
    void emptyDict() { out_.push_back('}'); }
    void emptyList() { out_.push_back(']'); }
    void mark() { out_.push_back('('); }
    void setItems() { out_.push_back('u'); }
    void appends() { out_.push_back('e'); }
    void tuple2() { out_.push_back(static_cast<char>(0x86)); }

private:
    void le(std::uint64_t v, int n)
    {
        for (int i = 0; i < n; ++i)
            out_.push_back(static_cast<char>(v >> (8 * i)));
    }

    std::string& out_;
    std::unordered_map<std::string, std::uint32_t> keys_;
    std::uint32_t memo_ = 0;
};

// Appends in batches of 1000 as Python does: MARK ... APPENDS.
template <typename F> void writeList(PickleOut& p, std::size_t n, F&& item)
{
    p.emptyList();
    for (std::size_t i = 0; i < n; i += 1000) {
        p.mark();
        for (std::size_t k = i; k < std::min(n, i + 1000); ++k)
            item(k);
        p.appends();
    }
}

struct FrameText {
    std::string filename;
    std::int64_t line = 0;
    std::string name;
};

// "file:line name" back into a frame (snapshot/segment_state.h reads it); a module path becomes the file name.
FrameText parseWhere(const std::string& where)
{
    auto f = frameOfWhere(where);
    return {f.filename, f.line, f.name};
}

void writeFrames(PickleOut& p, const std::vector<FrameText>& frames)
{
    writeList(p, frames.size(), [&](std::size_t i) {
        p.emptyDict();
        p.mark();
        p.key("filename");
        p.str(frames[i].filename);
        p.key("line");
        p.integer(frames[i].line);
        p.key("name");
        p.str(frames[i].name);
        p.setItems();
    });
}

// PyTorch knows three states: a block of an unknown state is written as inactive.
const char* stateName(BlockState s)
{
    return s == BlockState::Other ? "inactive" : blockStateName(s);
}

struct OutBlock {
    std::uint64_t address;
    std::int64_t size;
    std::int64_t requested;
    const char* state;
    std::vector<FrameText> frames;
};
struct OutSegment {
    int device;
    std::uint64_t address;
    std::int64_t total;
    std::uint64_t stream;
    bool small;
    bool expandable;
    std::vector<OutBlock> blocks;
};

void writeSegment(PickleOut& p, const OutSegment& s)
{
    std::int64_t allocated = 0, requested = 0;
    for (const auto& b : s.blocks)
        if (std::string_view(b.state) != "inactive") {
            allocated += b.size;
            requested += b.requested;
        }
    p.emptyDict();
    p.mark();
    p.key("device");
    p.integer(s.device);
    p.key("address");
    p.integer(static_cast<std::int64_t>(s.address));
    p.key("total_size");
    p.integer(s.total);
    p.key("allocated_size");
    p.integer(allocated);
    p.key("active_size");
    p.integer(allocated);
    p.key("requested_size");
    p.integer(requested);
    p.key("stream");
    p.integer(static_cast<std::int64_t>(s.stream));
    p.key("segment_type");
    p.key(s.small ? "small" : "large");
    p.key("segment_pool_id");
    p.integer(0);
    p.integer(0);
    p.tuple2();
    p.key("is_expandable");
    p.boolean(s.expandable);
    p.key("frames");
    p.emptyList();
    p.key("blocks");
    writeList(p, s.blocks.size(), [&](std::size_t i) {
        const auto& b = s.blocks[i];
        p.emptyDict();
        p.mark();
        p.key("address");
        p.integer(static_cast<std::int64_t>(b.address));
        p.key("size");
        p.integer(b.size);
        p.key("requested_size");
        p.integer(b.requested);
        p.key("state");
        p.key(b.state);
        p.key("frames");
        writeFrames(p, b.frames);
        p.setItems();
    });
    p.setItems();
}

// A segment the model cudaMalloc'ed just before event `before`: written as a segment_alloc entry.
struct ModelSegmentAlloc {
    std::size_t before;
    std::uint64_t address;
    std::int64_t size;
};

std::string encode(const std::vector<OutSegment>& segments, const Trace& t, const std::vector<std::uint64_t>* addresses,
    const StreamColumn* streams, std::int64_t timeBaseUs, const AllocatorSettings& settings,
    const std::vector<ModelSegmentAlloc>& segmentAllocs = {})
{
    std::string out;
    out.reserve(64 + t.size() * 40 + segments.size() * 256);
    PickleOut p(out);
    p.emptyDict();
    p.mark();
    p.key("segments");
    writeList(p, segments.size(), [&](std::size_t i) { writeSegment(p, segments[i]); });

    int maxDevice = 0;
    for (auto d : t.device)
        maxDevice = std::max<int>(maxDevice, d);
    for (const auto& s : segments)
        maxDevice = std::max(maxDevice, s.device);
    std::vector<std::vector<std::size_t>> perDevice(static_cast<std::size_t>(maxDevice) + 1);
    for (std::size_t i = 0; i < t.size(); ++i)
        perDevice[static_cast<std::size_t>(std::max<int>(0, t.device[i]))].push_back(i);
    std::unordered_map<std::uint32_t, std::uint32_t> framesMemo; // where id -> memo index of its frames list
    std::unordered_map<std::size_t, std::vector<const ModelSegmentAlloc*>> segmentsBefore;
    for (const auto& m : segmentAllocs)
        segmentsBefore[m.before].push_back(&m);
    auto writeSegmentAlloc = [&](std::size_t i, const ModelSegmentAlloc& m) {
        p.emptyDict();
        p.mark();
        p.key("action");
        p.key("segment_alloc");
        p.key("addr");
        p.integer(static_cast<std::int64_t>(m.address));
        p.key("size");
        p.integer(m.size);
        p.key("stream");
        p.integer(streams && i < streams->size() ? static_cast<std::int64_t>((*streams)[i]) : 0);
        p.key("time_us");
        p.integer(timeBaseUs + t.time_ns[i] / 1000);
        p.key("frames");
        p.emptyList();
        p.setItems();
    };
    p.key("device_traces");
    writeList(p, perDevice.size(), [&](std::size_t d) {
        const auto& events = perDevice[d];
        // Segment allocations the model made go in front of the event that caused them.
        std::vector<std::pair<std::size_t, const ModelSegmentAlloc*>> order;
        order.reserve(events.size());
        for (auto i : events) {
            if (auto it = segmentsBefore.find(i); it != segmentsBefore.end())
                for (const auto* m : it->second)
                    order.push_back({i, m});
            order.push_back({i, nullptr});
        }
        writeList(p, order.size(), [&](std::size_t k) {
            std::size_t i = order[k].first;
            if (order[k].second) {
                writeSegmentAlloc(i, *order[k].second);
                return;
            }
            p.emptyDict();
            p.mark();
            p.key("action");
            p.key(actionName(t.action[i]));
            p.key(t.action[i] == Action::Oom ? "device_free" : "addr");
            p.integer(
                t.action[i] == Action::Oom ? 0 : static_cast<std::int64_t>(addresses ? (*addresses)[i] : t.address[i]));
            p.key("size");
            p.integer(t.bytes[i]);
            p.key("stream");
            p.integer(streams && i < streams->size() ? static_cast<std::int64_t>((*streams)[i]) : 0);
            p.key("time_us");
            p.integer(timeBaseUs + t.time_ns[i] / 1000);
            p.key("frames");
            auto w = t.where[i];
            if (auto it = framesMemo.find(w); it != framesMemo.end()) {
                p.get(it->second);
            } else {
                std::vector<FrameText> frames;
                if (w != 0)
                    frames.push_back(parseWhere(t.strings.at(w)));
                writeFrames(p, frames);
                framesMemo.emplace(w, p.memoize());
            }
            p.setItems();
        });
    });
    p.key("allocator_settings");
    p.emptyDict();
    p.mark();
    p.key("PYTORCH_CUDA_ALLOC_CONF");
    p.str("");
    p.key("max_split_size");
    p.integer(settings.max_split_size == std::numeric_limits<std::int64_t>::max() ? -1 : settings.max_split_size);
    p.key("garbage_collection_threshold");
    p.integer(0);
    p.key("expandable_segments");
    p.boolean(settings.expandable_segments);
    p.setItems();
    p.setItems();
    p.stop();
    return out;
}

std::vector<OutSegment> segmentsFromModel(const Trace& t, const AllocatorReplay& replay)
{
    std::vector<OutSegment> out;
    for (const auto& g : segmentsOfReplay(t, replay)) {
        OutSegment o {g.device, g.address, g.total_size, g.stream, g.segment_type == "small", g.is_expandable, {}};
        for (const auto& b : g.blocks) {
            OutBlock ob {b.address, b.size, b.requested_size,
                b.state == BlockState::ActiveAllocated ? "active_allocated" : "inactive", {}};
            for (const auto& f : b.frames)
                ob.frames.push_back({f.filename, f.line, f.name});
            o.blocks.push_back(std::move(ob));
        }
        out.push_back(std::move(o));
    }
    return out;
}

} // namespace

std::string encodeSnapshot(const Trace& trace, const AllocatorSettings& settings)
{
    ReplayOptions options;
    options.record_addresses = true;
    options.use_recorded_segment_addresses = false;
    auto replay = replayCachingAllocator(trace, settings, options);
    // Events the model never placed (frees of blocks it did not see) keep their own address.
    auto addresses = replay.model_address;
    for (std::size_t i = 0; i < addresses.size(); ++i)
        if (addresses[i] == 0)
            addresses[i] = trace.address[i];
    std::vector<ModelSegmentAlloc> segmentAllocs;
    if (std::find(trace.action.begin(), trace.action.end(), Action::SegmentAlloc) == trace.action.end())
        for (std::size_t k = 0; k < replay.segment_allocs.size(); ++k)
            segmentAllocs.push_back({static_cast<std::size_t>(replay.segment_alloc_event[k]),
                replay.segment_alloc_address[k], replay.segment_allocs[k]});
    return encode(segmentsFromModel(trace, replay), trace, &addresses, nullptr, 0, settings, segmentAllocs);
}

std::string encodeSnapshot(const Report& report)
{
    if (report.gpu && report.gpu->allocator_pickle) // a run on a GPU: the allocator's own snapshot
        return *report.gpu->allocator_pickle;
    static const Trace kEmpty;
    const Trace& t = report.trace ? *report.trace : kEmpty;
    if (!report.snapshot) // a model run: after the resident set, as the report's simulated GPU replays it
        return report.trace ? encodeSnapshot(withResidentSet(report)) : encodeSnapshot(t);
    const Snapshot& s = *report.snapshot;
    std::vector<OutSegment> segments;
    for (const auto& g : s.segments) {
        OutSegment o {g.device, g.address, g.total_size, g.stream, g.segment_type == "small", g.is_expandable, {}};
        for (const auto& b : g.blocks) {
            OutBlock ob {b.address, b.size, b.requested_size, stateName(b.state), {}};
            for (const auto& f : b.frames)
                ob.frames.push_back({f.filename, f.line, f.name});
            o.blocks.push_back(std::move(ob));
        }
        segments.push_back(std::move(o));
    }
    return encode(segments, t, nullptr, &s.trace_stream, s.trace_start_us, s.settings.toModel());
}

void writeSnapshotFile(const std::string& path, const Report& report)
{
    writeFileAtomically(path, encodeSnapshot(report));
}

} // namespace memledger
