#include "snapshot/snapshot.h"
#include "snapshot/frames.h"

#include "support/huge_pages.h"
#include "support/atomic_file.h"
#include "support/errors.h"
#include "snapshot/pickle_reader.h"
#include "support/node_recycler.h"

#include <algorithm>
#include <deque>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#if defined(__linux__)
#endif
#include <fstream>
#include <memory_resource>
#include <numeric>
#include <set>
#include <unordered_map>

namespace memledger {

namespace {

// The structure is wrong (a pickle, but not a snapshot); becomes a FileError naming the file.
struct ShapeError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

std::int64_t intOr(const PickleValue& d, std::string_view key, std::int64_t fallback)
{
    const PickleValue* v = d.get(key);
    if (!v || v->isNone())
        return fallback;
    if (!v->isNumber())
        throw ShapeError("'" + std::string(key) + "' is a " + pickleKindName(v->kind()) + ", not a number");
    if (v->kind() != PickleKind::Float)
        return v->asInt();
    // A float where an int belongs (or an integer wider than 64 bits, which the reader gives as a float):
    // its value when it fits, else the fallback.
    double f = v->asFloat();
    return std::isfinite(f) && f > -9.2e18 && f < 9.2e18 ? static_cast<std::int64_t>(f) : fallback;
}

std::string strOr(const PickleValue& d, std::string_view key, std::string_view fallback = {})
{
    const PickleValue* v = d.get(key);
    if (!v || !(v->isStr() || v->kind() == PickleKind::Bytes))
        return std::string(fallback);
    return std::string(v->asStr());
}

const PickleValue& requireList(const PickleValue* v, const char* what)
{
    if (!v || !v->isSequence())
        throw ShapeError(std::string(what) + " is missing or not a list");
    return *v;
}

SnapshotFrame frameOf(const PickleValue& f)
{
    SnapshotFrame out;
    if (!f.isDict())
        return out;
    out.filename = strOr(f, "filename");
    out.line = intOr(f, "line", 0);
    out.name = strOr(f, "name");
    return out;
}

std::vector<SnapshotFrame> framesOf(const PickleValue* frames)
{
    std::vector<SnapshotFrame> out;
    if (!frames || !frames->isSequence())
        return out;
    out.reserve(frames->items().size());
    for (const auto& f : frames->items())
        out.push_back(frameOf(f));
    return out;
}

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

SnapshotSegment segmentOf(const PickleValue& s, bool& legacy)
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
                    blk.frames = framesOf(last.get("frames"));
                    if (!b.get("address"))
                        blk.address = static_cast<std::uint64_t>(intOr(last, "addr", static_cast<std::int64_t>(at)));
                }
            } else {
                blk.frames = framesOf(b.get("frames"));
            }
            at = blk.address + static_cast<std::uint64_t>(std::max<std::int64_t>(blk.size, 0));
            seg.blocks.push_back(std::move(blk));
        }
    }
    return seg;
}

// The inverse of actionName(): the trace spells actions as memledger names them.
bool actionOf(std::string_view s, Action& a)
{
    for (int i = 0; i <= static_cast<int>(Action::Snapshot); ++i)
        if (s == actionName(static_cast<Action>(i))) {
            a = static_cast<Action>(i);
            return true;
        }
    return false;
}

// Interns a trace entry's call stack (each frame once, each stack once, in the trace's CallStacks) and its
// allocation site (snapshot/frames.h), caching per frames list and per frame dict (the pickle shares identical
// frames through its memo, so most lookups are one hash probe).
class StackInterner {
public:
    struct Ids {
        std::uint32_t where = 0;
        std::uint32_t stack = 0;
    };
    explicit StackInterner(Trace& t)
        : strings_(t.strings)
        , stacks_(t.stacks)
    {
    }

    Ids idsOf(const PickleValue* frames)
    {
        if (!frames || !frames->isSequence() || frames->items().empty())
            return {};
        const void* id = frames->identity();
        auto& slot = recent_[(reinterpret_cast<std::uintptr_t>(id) >> 4) % kRecent];
        if (slot.first == id && id)
            return slot.second;
        if (auto it = byList_.find(id); it != byList_.end() && id) {
            slot = {id, it->second};
            return it->second;
        }
        views_.clear();
        frameIds_.clear();
        for (const auto& f : frames->items())
            frameIds_.push_back(frameInfo(f).frame);
        // Views only once every string is interned (interning may move the table's strings).
        for (auto fid : frameIds_) {
            const auto& fr = stacks_.frame(fid);
            views_.push_back({strings_.at(fr.file), fr.line, strings_.at(fr.name)});
        }
        auto site = allocationSite(views_);
        Ids ids{site.empty() ? 0u : strings_.intern(site), stacks_.internStack(frameIds_)};
        if (id) {
            byList_.emplace(id, ids);
            slot = {id, ids};
        }
        return ids;
    }

private:
    struct Info {
        std::uint32_t file = 0, name = 0, frame = 0;
        std::int64_t line = 0;
    };
    const Info& frameInfo(const PickleValue& f)
    {
        auto key = f.identity();
        if (key)
            if (auto it = byFrame_.find(key); it != byFrame_.end())
                return it->second;
        Info info;
        if (f.isDict()) {
            info.file = strings_.intern(strOr(f, "filename"));
            info.line = intOr(f, "line", 0);
            info.name = strings_.intern(strOr(f, "name"));
        }
        info.frame = stacks_.internFrame(info.file, info.line, info.name);
        if (!key) { // not shared through the memo
            scratch_ = info;
            return scratch_;
        }
        return byFrame_[key] = info;
    }

    StringTable& strings_;
    CallStacks& stacks_;
    static constexpr std::size_t kRecent = 512; // frames lists shared through the memo: a direct-mapped cache
    std::pair<const void*, Ids> recent_[kRecent] = {};
    std::unordered_map<const void*, Ids> byList_;
    std::unordered_map<const void*, Info> byFrame_;
    Info scratch_;
    std::vector<FrameView> views_;
    std::vector<std::uint32_t> frameIds_;
};

// The fields of one trace entry, found in one pass over its dict. Keys are memoized strings in real files,
// so a key is recognised by its pointer after the first string comparison.
struct EntryFields {
    enum Slot { Action, Addr, Size, Stream, Time, Frames, Device, DeviceFree, Count };
    const PickleValue* v[Count] = {};
};

class EntryKeys {
public:
    void read(const PickleValue& e, EntryFields& f)
    {
        f = EntryFields {};
        const auto items = e.entries();
        for (std::size_t i = 0; i + 1 < items.size(); i += 2) {
            // Entries list their keys in the same order: check the key seen at this position last time first.
            std::size_t pos = i / 2;
            const PickleValue& k = items[i];
            int slot;
            if (pos < kByPos && k.isStr() && byPos_[pos].ptr == k.asStr().data() && byPos_[pos].ptr) {
                slot = byPos_[pos].slot;
            } else {
                slot = slotOf(k);
                if (pos < kByPos && k.isStr())
                    byPos_[pos] = {k.asStr().data(), k.asStr().size(), slot};
            }
            if (slot >= 0)
                f.v[slot] = &items[i + 1];
        }
    }

private:
    int slotOf(const PickleValue& k)
    {
        if (!k.isStr())
            return -1;
        auto text = k.asStr();
        for (std::size_t i = 0; i < n_; ++i)
            if (cache_[i].ptr == text.data() && cache_[i].len == text.size())
                return cache_[i].slot;
        static const std::pair<std::string_view, int> kNames[] = {
            {"action", EntryFields::Action},
            {"addr", EntryFields::Addr},
            {"size", EntryFields::Size},
            {"stream", EntryFields::Stream},
            {"time_us", EntryFields::Time},
            {"frames", EntryFields::Frames},
            {"device", EntryFields::Device},
            {"device_free", EntryFields::DeviceFree},
        };
        int slot = -1;
        for (const auto& [name, sl] : kNames)
            if (text == name)
                slot = sl;
        if (n_ < kCache)
            cache_[n_++] = {text.data(), text.size(), slot};
        return slot;
    }
    static constexpr std::size_t kCache = 32;
    static constexpr std::size_t kByPos = 16;
    struct Entry {
        const char* ptr;
        std::size_t len;
        int slot;
    };
    Entry cache_[kCache] = {};
    Entry byPos_[kByPos] = {};
    std::size_t n_ = 0;
};

std::int64_t numberOr(const PickleValue* v, const char* what, std::int64_t fallback)
{
    if (!v || v->isNone())
        return fallback;
    if (v->kind() == PickleKind::Float)
        return static_cast<std::int64_t>(v->asFloat());
    if (!v->isInt())
        throw ShapeError(
            std::string("'") + what + "' of a trace entry is a " + pickleKindName(v->kind()) + ", not a number");
    return v->asInt();
}

void decodeTraces(const PickleValue& traces, Snapshot& s)
{
    auto trace = std::make_shared<Trace>();
    std::size_t total = 0, nonEmpty = 0;
    std::uint32_t devIndex = 0;
    for (const auto& dev : traces.items()) {
        if (!dev.isSequence())
            throw ShapeError("device_traces[" + std::to_string(devIndex) + "] is not a list");
        total += dev.items().size();
        nonEmpty += !dev.items().empty();
        ++devIndex;
    }
    std::set<int> devices(s.devices.begin(), s.devices.end());
    for (std::uint32_t d = 0; d < devIndex; ++d)
        devices.insert(static_cast<int>(d)); // one list per device, even an empty one
    trace->reserve(total);
    s.trace_stream.reserve(total);
    adviseHugePages(s.trace_stream.data(), s.trace_stream.capacity() * sizeof(std::uint64_t));

    EntryKeys keys;
    EntryFields f;
    StackInterner stackIds(*trace);
    NodeRecycler nodes; // hash nodes: allocs and frees churn them
    std::pmr::unordered_map<std::uint64_t, std::int32_t> openAlloc(&nodes); // (device, addr) -> alloc event
    openAlloc.reserve(4096);
    std::int64_t lastDevice = -2;
    bool allTimed = true;
    std::int64_t minTime = INT64_MAX;
    struct CachedAction {
        const char* ptr = nullptr;
        std::size_t len = 0;
        Action action = Action::Alloc;
        bool known = false;
    };
    CachedAction actionCache[64];
    // time_ns first holds time_us; made relative to the first entry once all are read.
    auto process = [&](const PickleValue& e, std::uint32_t listIndex) {
        if (!e.isDict())
            throw ShapeError("a trace entry is not a dict");
        keys.read(e, f);
        const PickleValue* act = f.v[EntryFields::Action];
        Action a = Action::Alloc;
        if (!act || !act->isStr()) {
            ++s.skipped_entries;
            return;
        }
        // Action names are memoized strings: remember them by where their bytes are.
        auto name = act->asStr();
        auto& cached = actionCache[(reinterpret_cast<std::uintptr_t>(name.data()) >> 2) % 64];
        if (cached.ptr == name.data() && cached.len == name.size() && cached.ptr) {
            if (!cached.known) {
                ++s.skipped_entries;
                return;
            }
            a = cached.action;
        } else {
            bool known = actionOf(name, a);
            cached = {name.data(), name.size(), a, known};
            if (!known) {
                ++s.skipped_entries;
                return;
            }
        }
        const PickleValue* t = f.v[EntryFields::Time];
        std::int64_t timeUs = 0;
        if (t && t->isNumber()) {
            timeUs = numberOr(t, "time_us", 0);
            minTime = std::min(minTime, timeUs);
        } else {
            allTimed = false;
        }
        // Device: the entry's own field when present, else the index of its list.
        auto device = numberOr(f.v[EntryFields::Device], "device", listIndex);
        if (device < -1 || device > 127)
            throw ShapeError("a trace entry names device " + std::to_string(device));
        if (device != lastDevice) {
            devices.insert(static_cast<int>(device));
            lastDevice = device;
        }
        std::int64_t size = std::max<std::int64_t>(0, numberOr(f.v[EntryFields::Size], "size", 0));
        std::uint64_t addr
            = a == Action::Oom ? 0 : static_cast<std::uint64_t>(numberOr(f.v[EntryFields::Addr], "addr", 0));
        auto i = trace->push(timeUs, size, addr, a, static_cast<std::int8_t>(device));
        auto ids = stackIds.idsOf(f.v[EntryFields::Frames]);
        trace->where[i] = ids.where;
        trace->stack[i] = ids.stack;
        s.trace_stream.push_back(static_cast<std::uint64_t>(numberOr(f.v[EntryFields::Stream], "stream", 0)));
        std::uint64_t key = (static_cast<std::uint64_t>(device & 0xff) << 56) ^ addr;
        if (a == Action::Alloc) {
            openAlloc[key] = static_cast<std::int32_t>(i);
        } else if (a == Action::Free) {
            auto it = openAlloc.find(key);
            if (it != openAlloc.end()) {
                trace->partner[i] = it->second;
                trace->partner[static_cast<std::size_t>(it->second)] = static_cast<std::int32_t>(i);
                openAlloc.erase(it);
            } // else: allocated before the trace began
        } else if (a == Action::Oom) {
            SnapshotOom oom;
            oom.device = static_cast<int>(device);
            oom.bytes_requested = size;
            oom.device_free = numberOr(f.v[EntryFields::DeviceFree], "device_free", 0);
            oom.time_ns = static_cast<std::int64_t>(i); // made a time below
            oom.where = trace->strings.at(trace->where[i]);
            s.ooms.push_back(std::move(oom));
        }
    };

    if (nonEmpty <= 1) {
        std::uint32_t d = 0;
        for (const auto& dev : traces.items()) {
            for (const auto& e : dev.items())
                process(e, d);
            ++d;
        }
    } else {
        // Devices are recorded in separate ring buffers: merge them on one clock (list order without times).
        struct Raw {
            std::int64_t time;
            std::uint32_t list;
            const PickleValue* entry;
        };
        std::vector<Raw> raw;
        raw.reserve(total);
        bool timed = true;
        std::uint32_t d = 0;
        for (const auto& dev : traces.items()) {
            for (const auto& e : dev.items()) {
                if (!e.isDict())
                    throw ShapeError("a trace entry is not a dict");
                const PickleValue* t = e.get("time_us");
                timed = timed && t && t->isNumber();
                raw.push_back({timed ? numberOr(t, "time_us", 0) : 0, d, &e});
            }
            ++d;
        }
        if (timed)
            std::stable_sort(raw.begin(), raw.end(), [](const Raw& a, const Raw& b) { return a.time < b.time; });
        for (const auto& r : raw)
            process(*r.entry, r.list);
    }

    s.trace_has_time = allTimed && trace->size() > 0;
    s.trace_start_us = s.trace_has_time ? minTime : 0;
    for (std::size_t i = 0; i < trace->size(); ++i)
        trace->time_ns[i]
            = s.trace_has_time ? (trace->time_ns[i] - minTime) * 1000 : static_cast<std::int64_t>(i) * 1000;
    for (auto& oom : s.ooms)
        oom.time_ns = trace->time_ns[static_cast<std::size_t>(oom.time_ns)];
    s.devices.assign(devices.begin(), devices.end());
    s.trace = std::move(trace);
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

Snapshot decodeTree(const PickleValue& root)
{
    Snapshot s;
    bool legacy = false;
    const PickleValue* segments = nullptr;
    if (root.isSequence()) {
        s.layout = "segment-list";
        segments = &root;
    } else if (root.isDict()) {
        segments = &requireList(root.get("segments"), "'segments'");
        s.layout = root.get("allocator_settings") ? "dict" : "dict-2.1";
    } else {
        throw ShapeError(
            std::string("the pickle holds a ") + pickleKindName(root.kind()) + ", not a dict or list of segments");
    }
    std::set<int> devices;
    s.segments.reserve(segments->items().size());
    for (const auto& seg : segments->items()) {
        s.segments.push_back(segmentOf(seg, legacy));
        devices.insert(s.segments.back().device);
    }
    s.devices.assign(devices.begin(), devices.end());
    if (legacy)
        s.layout = "legacy-history";
    if (root.isDict()) {
        if (const PickleValue* t = root.get("device_traces")) {
            if (!t->isSequence())
                throw ShapeError("'device_traces' is not a list");
            decodeTraces(*t, s);
        }
        if (const PickleValue* st = root.get("allocator_settings"))
            decodeSettings(*st, s.settings);
    }
    if (!s.trace)
        s.trace = std::make_shared<Trace>();
    return s;
}

} // namespace

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

std::int64_t Snapshot::reservedBytes() const
{
    std::int64_t n = 0;
    for (const auto& s : segments)
        n += s.total_size;
    return n;
}

std::int64_t Snapshot::allocatedBytes() const
{
    std::int64_t n = 0;
    for (const auto& s : segments)
        for (const auto& b : s.blocks)
            if (b.state == BlockState::ActiveAllocated)
                n += b.size;
    return n;
}

std::size_t Snapshot::traceCount(Action a) const
{
    if (!trace)
        return 0;
    return static_cast<std::size_t>(std::count(trace->action.begin(), trace->action.end(), a));
}

bool looksLikePickleFile(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    char c = 0;
    return in.get(c) && static_cast<unsigned char>(c) == 0x80;
}

namespace {

Snapshot decodeView(std::shared_ptr<const void> owner, const char* data, std::size_t size, const std::string& name)
{
    if (size == 0)
        throw FileError(name, "empty file, not a PyTorch memory snapshot");
    if (static_cast<unsigned char>(data[0]) != 0x80)
        throw FileError(name, "not a PyTorch memory snapshot: no pickle PROTO opcode (0x80) at byte 0");
    try {
        PickleDocument doc = readPickle(std::move(owner), data, size);
        if (doc.protocol() < 2)
            throw FileError(name, "pickle protocol " + std::to_string(doc.protocol()) + " is not supported (2 to 5)");
        return decodeTree(doc.root());
    } catch (const PickleError& e) {
        throw FileError(name, "damaged or unsafe pickle: " + std::string(e.what()));
    } catch (const ShapeError& e) {
        throw FileError(name,
            std::string("a Python pickle, but not a PyTorch memory snapshot (") + e.what()
                + ") nor a TorchScript model (a zip archive written by torch.jit.save)");
    } catch (const FileError&) {
        throw;
    } catch (const std::bad_alloc&) {
        throw FileError(name, "out of memory while decoding the snapshot");
    } catch (const std::exception& e) {
        throw FileError(name, std::string("not a PyTorch memory snapshot: ") + e.what());
    }
}

} // namespace

Snapshot decodeSnapshot(std::string bytes, const std::string& name)
{
    auto owned = std::make_shared<const std::string>(std::move(bytes));
    return decodeView(owned, owned->data(), owned->size(), name);
}

Snapshot readSnapshotFile(const std::string& path)
{
    // Read into memory rather than mapped: another program truncating the file meanwhile cannot crash us.
    return decodeSnapshot(readWholeFile(path), path); // names the problem (missing, a directory, empty)
}

const char* blockStateName(BlockState s)
{
    switch (s) {
    case BlockState::ActiveAllocated:
        return "active_allocated";
    case BlockState::ActivePendingFree:
        return "active_pending_free";
    case BlockState::Inactive:
        return "inactive";
    case BlockState::Other:
        break;
    }
    return "other";
}

} // namespace memledger
