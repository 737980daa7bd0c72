// A snapshot file decoded: its pickle read with the reducer (snapshot_entries.h) so that the trace is made as it
// is read, then the tree's other keys (snapshot_segments.h, snapshot_traces.h) and the ledgers.
#include "snapshot/snapshot.h"
#include "snapshot/snapshot_entries.h"
#include "snapshot/snapshot_ledgers.h"
#include "snapshot/snapshot_segments.h"
#include "snapshot/snapshot_traces.h"

#include "support/atomic_file.h"
#include "support/errors.h"

#include <algorithm>
#include <fstream>
#include <functional>
#include <set>

namespace memledger {

using namespace snapdecode;

namespace {

// `trace`, `rows` and `tables` hold what the reducer made of the pickle while it was read.
Snapshot decodeTree(const PickleValue& root, Snapshot&& s, std::shared_ptr<Trace> trace, TraceRows& rows,
    StackTables& tables)
{
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
        s.segments.push_back(segmentOf(seg, legacy, tables));
        devices.insert(s.segments.back().device);
    }
    s.devices.assign(devices.begin(), devices.end());
    if (legacy)
        s.layout = "legacy-history";
    std::shared_ptr<Snapshot> host;
    if (root.isDict()) {
        const PickleValue* t = root.get("device_traces");
        if (t && !t->isSequence())
            throw ShapeError("'device_traces' is not a list");
        const PickleValue* hs = root.get("host_segments");
        const PickleValue* ht = root.get("host_traces");
        if (hs || ht) {
            host = std::make_shared<Snapshot>();
            host->layout = s.layout;
            host->devices = {kHostDevice};
            if (hs)
                decodeHostSegments(*hs, *host, s.host_skipped, tables);
        }
        if (const PickleValue* st = root.get("allocator_settings"))
            decodeSettings(*st, s.settings);
        if (const PickleValue* a = root.get("external_annotations"))
            decodeAnnotations(*a, s);
        if (const PickleValue* c = root.get("memledger_capture"); c && c->isDict()) {
            auto text = [c](const char* key) {
                const PickleValue* v = c->get(key);
                return v && v->isStr() ? std::string(v->asStr()) : std::string();
            };
            s.capture.device = text("device");
            s.capture.source = text("source");
            s.capture.torch = text("torch");
            s.capture.note = text("note");
            if (const PickleValue* steps = c->get("steps"); steps && steps->isInt())
                s.capture.steps = steps->asInt();
        }
        if (t || ht)
            decodeTraces(t, ht, s, host.get(), trace, rows, tables);
        // Top-level keys memledger reads past: newer ones.
        const auto& e = root.entries();
        for (std::size_t i = 0; i + 1 < e.size(); i += 2) {
            if (!e[i].isStr())
                continue;
            const std::string_view key = e[i].asStr();
            if (key != "segments" && key != "device_traces" && key != "allocator_settings"
                && key != "external_annotations" && key != "host_segments" && key != "host_traces"
                && !(key == "memledger_capture" && s.capture.present()))
                s.ignored_keys.push_back(std::string(key));
        }
    }
    if (trace && s.trace == trace) // the annotations first: they tell the optimizer's ranges
        assignSnapshotLedgers(*trace, s);
    if (host) {
        // The host's allocations get ledgers by the same rules, with the same record_function ranges.
        host->annotations = s.annotations;
        host->annotation_entries = s.annotation_entries;
        if (!host->trace) {
            host->trace = std::make_shared<Trace>();
        } else {
            auto ht = std::const_pointer_cast<Trace>(host->trace);
            assignSnapshotLedgers(*ht, *host);
        }
        s.host = std::move(host);
    }
    if (!s.trace) {
        s.trace = std::make_shared<Trace>();
        s.trace_stream.clear();
    }
    return std::move(s);
}

} // namespace

void TraceContextColumn::set(std::size_t row, const TraceContext& c)
{
    const std::uint64_t key = (static_cast<std::uint64_t>(c.user_metadata) << 32) | c.compile_context;
    std::uint32_t id = 0;
    if (key != 0) {
        auto [it, added] = ids_.try_emplace(key, static_cast<std::uint32_t>(values_.size()));
        if (added)
            values_.push_back(c);
        id = it->second;
    }
    if (id == 0 && row >= index_.size())
        return; // past the column's end reads as none
    if (index_.capacity() == 0 && reserve_ > row)
        index_.reserve(reserve_); // address space: pages are used as events arrive
    if (index_.size() <= row)
        index_.resize(row + 1, 0);
    index_[row] = id;
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

// Decodes a snapshot whose pickle `read` reads with the hooks it is given; `size` is the file's size and
// `firstByte` its first byte (-1 when empty).
Snapshot decodeWith(std::size_t size, int firstByte, const std::string& name, const SnapshotReadOptions& options,
    const std::function<PickleDocument(const PickleReadHooks&)>& read)
{
    if (size == 0 || firstByte < 0)
        throw FileError(name, "empty file, not a PyTorch memory snapshot");
    if (firstByte != 0x80)
        throw FileError(name, "not a PyTorch memory snapshot: no pickle PROTO opcode (0x80) at byte 0");
    try {
        // The trace is made while the pickle is read (SnapshotReducer); the tree keeps the rest.
        Snapshot s;
        auto trace = std::make_shared<Trace>();
        // Room for as many entries as the file can hold (an entry takes at least about 48 bytes of pickle), so
        // that the columns never move while they fill: address space only, pages are used as rows arrive.
        const std::size_t expected = size / 48 + 1024;
        trace->reserve(expected);
        s.trace_stream.reserve(expected);
        s.trace_context.reserve(expected);
        TraceRows rows(*trace, s.trace_stream, s.trace_context);
        StackTables tables(*trace);
        SnapshotReducer reducer(tables, rows, s.ignored_keys);
        PickleReadHooks hooks;
        hooks.reducer = &reducer;
        hooks.progress = options.progress;
        hooks.cancel = options.cancel;
        PickleDocument doc = read(hooks);
        rows.finish(); // the rows the reducer made are in the trace's columns
        if (doc.protocol() < 2)
            throw FileError(name, "pickle protocol " + std::to_string(doc.protocol()) + " is not supported (2 to 5)");
        return decodeTree(doc.root(), std::move(s), trace, rows, tables);
    } catch (const PickleCancelled&) {
        throw Cancelled();
    } catch (const Cancelled&) {
        throw;
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

// A source whose first byte is read ahead (decodeWith checks it before the pickle is read).
class PeekedSource : public PickleSource {
public:
    explicit PeekedSource(PickleSource& source)
        : source_(source)
    {
        char c = 0;
        if (source_.read(&c, 1) == 1) {
            first_ = static_cast<unsigned char>(c);
            pending_ = true;
        }
    }
    int firstByte() const { return first_; }
    std::size_t read(char* dst, std::size_t n) override
    {
        if (!pending_ || n == 0)
            return source_.read(dst, n);
        pending_ = false;
        dst[0] = static_cast<char>(first_);
        return 1 + (n > 1 ? source_.read(dst + 1, n - 1) : 0);
    }

private:
    PickleSource& source_;
    int first_ = -1;
    bool pending_ = false;
};

class FileSource : public PickleSource {
public:
    explicit FileSource(FileReader& file)
        : file_(file)
    {
    }
    std::size_t read(char* dst, std::size_t n) override { return file_.read(dst, n); }

private:
    FileReader& file_;
};

} // namespace

Snapshot decodeSnapshot(std::string bytes, const std::string& name, const SnapshotReadOptions& options)
{
    auto owned = std::make_shared<const std::string>(std::move(bytes));
    const int first = owned->empty() ? -1 : static_cast<unsigned char>((*owned)[0]);
    return decodeWith(owned->size(), first, name, options,
        [&](const PickleReadHooks& hooks) { return readPickle(owned, owned->data(), owned->size(), hooks); });
}

Snapshot decodeSnapshotStream(
    PickleSource& source, std::size_t size, const std::string& name, const SnapshotReadOptions& options)
{
    PeekedSource peeked(source);
    return decodeWith(size, peeked.firstByte(), name, options,
        [&](const PickleReadHooks& hooks) { return readPickle(peeked, size, hooks); });
}

Snapshot readSnapshotFile(const std::string& path, const SnapshotReadOptions& options)
{
    // Read in pieces as it is decoded: the file is never held whole (its strings are copied as they come).
    FileReader file(path); // names the problem (missing, a directory, cannot be opened)
    FileSource source(file);
    return decodeSnapshotStream(source, file.size(), path, options);
}

std::string snapshotDeviceName(int device)
{
    if (device == kHostDevice)
        return "host (pinned)";
    if (device == -1)
        return "cpu";
    return "cuda:" + std::to_string(device);
}

bool Snapshot::onCpu() const
{
    return !devices.empty() && std::all_of(devices.begin(), devices.end(), [](int d) { return d == -1; });
}

std::string snapshotKindName(const Snapshot& s)
{
    return s.onCpu() ? "CPU memory snapshot" : "CUDA memory snapshot";
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
