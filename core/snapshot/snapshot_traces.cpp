#include "snapshot/snapshot_traces.h"
#include "report/trace_edit.h"

#include <algorithm>
#include <map>
#include <set>

namespace memledger::snapdecode {

namespace {

// The rows of one trace of the file, in list order, with the list each is in: device_traces' lists (list d is
// device d) or host_traces (every row on kHostDevice).
struct TracePart {
    struct Ref {
        std::uint32_t row;
        std::uint32_t list;
    };
    std::vector<Ref> order;
    std::vector<std::pair<std::uint32_t, std::int64_t>> oomFree; // row, device_free
    std::size_t nonEmpty = 0; // lists with entries
    int device = kDeviceOfList; // kHostDevice: every row's device, whatever its entry says
};

// Makes `out`'s trace of `part`'s rows of `trace` (in place when `inPlace`: the rows the reducer made are then
// the device traces' own, gathered only when another order or rows of another trace say so); lists of several
// devices merged on one clock; partners, out-of-memory events, times from the trace's start.
void finishTrace(TracePart& part, std::shared_ptr<Trace> trace, TraceRows& rows, Snapshot& src, Snapshot& out,
    bool inPlace, std::set<int>& devices)
{
    rows.finish(); // every row in the columns
    using Ref = TracePart::Ref;
    auto& order = part.order;
    bool inOrder = inPlace;
    for (std::size_t k = 0; inOrder && k < order.size(); ++k)
        inOrder = order[k].row == k;
    inOrder = inOrder && order.size() == trace->size();
    bool timed = true;
    if (rows.untimed > 0)
        for (const auto& r : order)
            if (r.row < rows.untimedRow.size() && rows.untimedRow[r.row]) {
                timed = false;
                break;
            }

    // Devices are recorded in separate ring buffers: merge them on one clock (list order without times).
    if (part.nonEmpty > 1 && timed) {
        std::stable_sort(order.begin(), order.end(),
            [&](const Ref& a, const Ref& b) { return trace->time_ns[a.row] < trace->time_ns[b.row]; });
        inOrder = false;
    }
    auto deviceOf = [&](std::int8_t dev, std::uint32_t list) {
        if (part.device != kDeviceOfList)
            return static_cast<std::int8_t>(part.device);
        return dev == kDeviceOfList ? static_cast<std::int8_t>(list) : dev;
    };
    if (inOrder) {
        for (const auto& r : order)
            trace->device[r.row] = deviceOf(trace->device[r.row], r.list);
    } else {
        // Rows in another order, twice, or not at all (entries outside these lists): gather them.
        auto t = std::make_shared<Trace>();
        t->strings = trace->strings;
        t->stacks = trace->stacks;
        t->reserve(order.size());
        StreamColumn streams;
        streams.reserve(order.size());
        TraceContextColumn contexts;
        std::vector<std::int32_t> newIndex(trace->size(), -1);
        for (const auto& r : order) {
            auto i = pushCopy(*t, *trace, r.row);
            t->device[i] = deviceOf(trace->device[r.row], r.list);
            streams.push_back(src.trace_stream[r.row]);
            if (const auto& c = src.trace_context[r.row]; c.user_metadata != 0 || c.compile_context != 0)
                contexts.set(i, c);
            newIndex[r.row] = static_cast<std::int32_t>(i);
        }
        for (auto& [row, free] : part.oomFree)
            row = newIndex[row] < 0 ? UINT32_MAX : static_cast<std::uint32_t>(newIndex[row]);
        if (inPlace)
            *trace = std::move(*t);
        else
            trace = std::move(t);
        out.trace_stream = std::move(streams);
        out.trace_context = std::move(contexts);
    }

    // One pass in time order: devices, alloc/free partners (report/trace_edit.h), out-of-memory events, times from the start.
    auto& oomFree = part.oomFree;
    std::size_t nextOom = 0;
    std::sort(oomFree.begin(), oomFree.end());
    AllocFreePairing pairs {AllocFreePairing::ByDevice {}}; // allocs and frees paired by (device, address)
    std::int64_t lastDevice = -128;
    std::int64_t minTime = INT64_MAX;
    const std::size_t n = trace->size();
    for (std::size_t i = 0; i < n; ++i) {
        const Action a = trace->action[i];
        const std::int64_t device = trace->device[i];
        if (device != lastDevice) {
            devices.insert(static_cast<int>(device));
            lastDevice = device;
        }
        minTime = std::min(minTime, trace->time_ns[i]);
        pairs.add(*trace, i); // a free without its alloc: allocated before the trace began
        if (a == Action::Oom) {
            while (nextOom < oomFree.size() && oomFree[nextOom].first < i)
                ++nextOom;
            SnapshotOom oom;
            oom.device = static_cast<int>(device);
            oom.bytes_requested = trace->bytes[i];
            oom.device_free = nextOom < oomFree.size() && oomFree[nextOom].first == i ? oomFree[nextOom].second : 0;
            oom.time_ns = static_cast<std::int64_t>(i); // made a time below
            oom.where = trace->strings.at(trace->where[i]);
            out.ooms.push_back(std::move(oom));
        }
    }

    out.trace_has_time = timed && n > 0;
    out.trace_start_us = out.trace_has_time ? minTime : 0;
    for (std::size_t i = 0; i < n; ++i)
        trace->time_ns[i] = out.trace_has_time // wrapping, never undefined, for a damaged file's times
            ? static_cast<std::int64_t>(
                (static_cast<std::uint64_t>(trace->time_ns[i]) - static_cast<std::uint64_t>(minTime)) * 1000u)
            : static_cast<std::int64_t>(i) * 1000;
    for (auto& oom : out.ooms)
        oom.time_ns = trace->time_ns[static_cast<std::size_t>(oom.time_ns)];
    // Never shrunk to fit: the columns were reserved for the most entries the file could hold, and the pages
    // past the last entry were never touched, so they take no memory; copying them smaller would (twice).
    out.trace = std::move(trace);
}

// Puts the `annotate` entries on the trace's clock and finds the allocation each names: the one at its address
// on its device, allocated at or before it and not yet freed (kBeforeTrace: none in the trace, so one made
// before the trace began). One pass over the trace, looking up only the addresses annotated.
void resolveAnnotations(std::vector<PendingAnnotation>& pending, Snapshot& s)
{
    if (pending.empty())
        return;
    using Key = std::pair<int, std::uint64_t>;
    std::vector<TensorAnnotation> out(pending.size());
    std::set<Key> wanted;
    for (std::size_t k = 0; k < pending.size(); ++k) {
        auto& p = pending[k];
        auto& a = out[k];
        a.address = p.addr;
        a.device = static_cast<int>(p.device); // -1..127, or its list's index
        // Untimed (or a trace without times): after every event, so the last allocation at the address.
        a.time_ns = p.timed && s.trace_has_time
            ? static_cast<std::int64_t>(
                (static_cast<std::uint64_t>(p.time_us) - static_cast<std::uint64_t>(s.trace_start_us)) * 1000u)
            : INT64_MAX;
        a.text = std::move(p.text);
        a.stack = p.stack;
        wanted.insert({a.device, a.address});
    }
    std::stable_sort(out.begin(), out.end(),
        [](const TensorAnnotation& a, const TensorAnnotation& b) { return a.time_ns < b.time_ns; });
    std::map<Key, std::uint32_t> live;
    std::size_t next = 0;
    auto settle = [&](std::int64_t before) {
        for (; next < out.size() && out[next].time_ns < before; ++next)
            if (auto it = live.find({out[next].device, out[next].address}); it != live.end())
                out[next].event = it->second;
    };
    if (s.trace) {
        const Trace& t = *s.trace;
        for (std::size_t i = 0; i < t.size(); ++i) {
            settle(t.time_ns[i]); // an annotation at the time of an alloc comes after it
            const Key key {t.device[i], t.address[i]};
            if (t.action[i] == Action::Alloc && wanted.count(key))
                live[key] = static_cast<std::uint32_t>(i);
            else if (t.action[i] == Action::Free)
                live.erase(key);
        }
    }
    settle(INT64_MAX);
    for (; next < out.size(); ++next) // untimed ones
        if (auto it = live.find({out[next].device, out[next].address}); it != live.end())
            out[next].event = it->second;
    s.tensor_annotations = std::move(out);
}

} // namespace

void decodeTraces(const PickleValue* traces, const PickleValue* hostTraces, Snapshot& s, Snapshot* host,
    std::shared_ptr<Trace> trace, TraceRows& rows, StackTables& tables)
{
    KeySlots keys;
    EntryDecoder decoder(rows, tables);
    TracePart gpu;
    std::uint32_t lists = 0;
    std::size_t entries = 0;
    if (traces)
        for (const auto& dev : traces->items()) {
            if (!dev.isSequence())
                throw ShapeError("device_traces[" + std::to_string(lists) + "] is not a list");
            gpu.nonEmpty += !dev.items().empty();
            entries += dev.items().size();
            ++lists;
        }
    gpu.order.reserve(entries);
    std::set<int> devices(s.devices.begin(), s.devices.end());
    std::vector<PendingAnnotation> annotated;
    PendingAnnotation ann;
    if (traces) {
        std::uint32_t d = 0;
        for (const auto& dev : traces->items()) {
            // One list per device, even one with no event (a GPU that allocated nothing); a list with events has
            // the devices they name (its own where they name none: finishTrace), so a CPU capture's one list
            // (device -1) names no GPU.
            const auto rowsBefore = gpu.order.size();
            for (const auto& e : dev.items()) {
                std::uint32_t row = 0;
                switch (entryRow(e, decoder, keys, s.ignored_keys, row, gpu.oomFree, ann)) {
                case EntryKind::Row:
                    gpu.order.push_back({row, d});
                    break;
                case EntryKind::Skipped:
                case EntryKind::Declined: // never from the tree
                    ++s.skipped_entries;
                    break;
                case EntryKind::Annotation:
                    if (ann.device == kNoDevice)
                        ann.device = d;
                    annotated.push_back(std::move(ann));
                    ann = {};
                    break;
                }
            }
            if (gpu.order.size() == rowsBefore)
                devices.insert(static_cast<int>(d));
            ++d;
        }
    }
    // The host's first: the device traces' own may be gathered in place below.
    if (host && hostTraces) {
        TracePart part;
        part.device = kHostDevice;
        if (hostTraces->isSequence()) {
            part.nonEmpty = !hostTraces->items().empty();
            std::vector<std::string> hostIgnored; // the host's entries say nothing of device_traces' keys
            for (const auto& e : hostTraces->items()) {
                std::uint32_t row = 0;
                try {
                    if (entryRow(e, decoder, keys, hostIgnored, row, part.oomFree, ann) == EntryKind::Row)
                        part.order.push_back({row, 0});
                    else
                        ++host->skipped_entries; // _annotate_tensor takes CUDA tensors only
                } catch (const ShapeError&) {
                    ++s.host_skipped;
                }
            }
        } else {
            ++s.host_skipped;
        }
        std::set<int> hostDevices {kHostDevice};
        finishTrace(part, trace, rows, s, *host, false, hostDevices);
    }
    if (traces || !gpu.order.empty()) {
        finishTrace(gpu, trace, rows, s, s, true, devices);
        s.devices.assign(devices.begin(), devices.end());
    }
    resolveAnnotations(annotated, s);
}

} // namespace memledger::snapdecode
