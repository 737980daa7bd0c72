#include "analysis/report_diff.h"

#include "snapshot/snapshot.h"
#include "support/format.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <unordered_map>

namespace memledger {

namespace {

bool isSnapshot(const Report& r)
{
    return r.source == ReportSource::Snapshot;
}

DiffSide sideOf(const Report& r, const std::string& name)
{
    DiffSide s;
    s.name = name.empty() ? r.model.path : name;
    s.source = r.source;
    s.type = r.model.type;
    s.dtype = r.run.dtype;
    s.mode = r.run.mode;
    s.device = r.run.device;
    s.batch = r.run.batch;
    s.input_shapes = r.run.input_shapes;
    s.input_types = r.run.input_types;
    if (r.gpu)
        s.reserved_kind = ReserveKind::Gpu;
    else if (r.snapshot)
        s.reserved_kind = ReserveKind::SnapshotEnd;
    else if (r.simulated_reserved_peak_bytes > 0)
        s.reserved_kind = ReserveKind::Simulated;
    return s;
}

std::int64_t reservedOf(const Report& r)
{
    if (r.gpu)
        return r.gpu->reserved_peak_bytes;
    if (r.snapshot)
        return r.snapshot->reservedBytes();
    return r.simulated_reserved_peak_bytes;
}

// Per allocation site (Trace::where) of a trace: bytes allocated, bytes of its allocations alive at the peak,
// and how many allocations. The rule of the snapshot tree: an allocation of the trace is alive at the peak
// when it was made at or before the peak event and freed after it (or never, within the trace).
struct SiteFigures {
    std::int64_t allocated = 0, at_peak = 0, count = 0;
};

std::map<std::string, SiteFigures> sitesOf(const Report& r)
{
    std::map<std::string, SiteFigures> out;
    if (!r.trace)
        return out;
    const Trace& t = *r.trace;
    std::unordered_map<std::uint32_t, SiteFigures> byId;
    for (std::size_t i = 0; i < t.size(); ++i) {
        if (t.action[i] != Action::Alloc)
            continue;
        auto& f = byId[t.where[i]];
        f.allocated += t.bytes[i];
        ++f.count;
        const auto idx = static_cast<std::int32_t>(i);
        if (r.peak_event >= 0 && idx <= r.peak_event && (t.partner[i] == kNoPartner || t.partner[i] > r.peak_event))
            f.at_peak += t.bytes[i];
    }
    for (const auto& [id, f] : byId) {
        const auto& where = t.strings.at(id);
        auto& o = out[where.empty() ? std::string("(no stack)") : where];
        o.allocated += f.allocated;
        o.at_peak += f.at_peak;
        o.count += f.count;
    }
    return out;
}

DiffSeries seriesOf(const Report& r, TimelineAxis axis)
{
    DiffSeries d;
    auto s = TimelineSeries::build(r, axis);
    d.keys = s.keys.toVector();
    // Stacked bands: the top of the last one is the total of every band.
    d.values = s.tops[static_cast<std::size_t>(TimelineSeries::kStackOrder.back())].toVector();
    d.peak_key = s.peak_key;
    d.peak_value = s.peak_value;
    return d;
}

// The name of each outermost op that allocated, by op sequence.
std::map<std::uint32_t, std::string> opNames(const Trace& t)
{
    std::map<std::uint32_t, std::string> ops;
    for (std::size_t i = 0; i < t.size(); ++i) {
        const auto& name = t.strings.at(t.outer_op[i]);
        if (!name.empty()) // events before the first op have none
            ops.emplace(t.op_seq[i], name);
    }
    return ops;
}

void sortEntries(std::vector<DiffEntry>& entries)
{
    std::stable_sort(entries.begin(), entries.end(), [](const DiffEntry& x, const DiffEntry& y) {
        auto ax = std::llabs(x.change), ay = std::llabs(y.change);
        if (ax != ay)
            return ax > ay;
        return x.key < y.key;
    });
}

void setChange(DiffEntry& e, const std::vector<DiffColumn>& columns)
{
    for (std::size_t c = 0; c < columns.size(); ++c)
        if (columns[c].bytes && std::llabs(e.figures[c].delta()) > std::llabs(e.change)) {
            e.change = e.figures[c].delta();
            e.change_column = static_cast<int>(c);
        }
}

void moduleEntries(const Report& a, const Report& b, ReportDiff& d)
{
    const bool train = a.run.mode == RunMode::Train || b.run.mode == RunMode::Train;
    d.entry_kind = DiffEntryKind::Module;
    d.columns = {{"weight_bytes", "weights", true}, {"activation_bytes", "activations", true},
        {"temporary_peak_bytes", "temp peak", true}, {"peak_bytes", "peak delta", true}};
    if (train) {
        d.columns.push_back({"saved_activation_bytes", "saved", true});
        d.columns.push_back({"gradient_bytes", "gradients", true});
    }
    d.columns.push_back({"calls", "calls", false});
    auto values = [&](const LayerStats& l) {
        std::vector<std::int64_t> v {l.weight_bytes, l.activation_bytes, l.temporary_peak_bytes, l.peak_bytes};
        if (train) {
            v.push_back(l.saved_activation_bytes);
            v.push_back(l.gradient_bytes);
        }
        v.push_back(l.calls);
        return v;
    };
    std::map<std::string, std::size_t> index;
    auto add = [&](const LayerStats& l, bool sideB) {
        auto it = index.find(l.path);
        if (it == index.end()) {
            DiffEntry e;
            e.key = l.path;
            e.label = l.path.empty() ? "(root) " + (l.type.empty() ? l.name : l.type) : l.path;
            e.type = l.type;
            e.depth = l.depth;
            e.figures.resize(d.columns.size());
            it = index.emplace(l.path, d.entries.size()).first;
            d.entries.push_back(std::move(e));
        }
        auto& e = d.entries[it->second];
        auto v = values(l);
        for (std::size_t c = 0; c < v.size(); ++c)
            (sideB ? e.figures[c].b : e.figures[c].a) = v[c];
        (sideB ? e.in_b : e.in_a) = true;
    };
    for (const auto& l : a.layers)
        add(l, false);
    for (const auto& l : b.layers)
        add(l, true);
}

void siteEntries(const Report& a, const Report& b, ReportDiff& d)
{
    d.entry_kind = DiffEntryKind::Site;
    d.columns = {{"allocated_bytes", "allocated", true}, {"at_peak_bytes", "at peak", true},
        {"allocations", "allocations", false}};
    auto sa = sitesOf(a), sb = sitesOf(b);
    std::map<std::string, DiffEntry> merged;
    auto add = [&](const std::map<std::string, SiteFigures>& sites, bool sideB) {
        for (const auto& [where, f] : sites) {
            auto& e = merged[where];
            if (e.figures.empty()) {
                e.key = where;
                e.label = where;
                e.type = "site";
                e.figures.resize(d.columns.size());
            }
            std::int64_t v[] = {f.allocated, f.at_peak, f.count};
            for (std::size_t c = 0; c < 3; ++c)
                (sideB ? e.figures[c].b : e.figures[c].a) = v[c];
            (sideB ? e.in_b : e.in_a) = true;
        }
    };
    add(sa, false);
    add(sb, true);
    for (auto& [key, e] : merged)
        d.entries.push_back(std::move(e));
}

} // namespace

std::string DiffSide::describe() const
{
    if (source == ReportSource::Snapshot)
        return (type.empty() ? std::string("CUDA memory snapshot") : type) + (device.empty() ? std::string() : ", " + device);
    std::string s = "model";
    if (!dtype.empty())
        s += ", " + dtype;
    s += ", batch " + std::to_string(batch);
    if (!input_shapes.empty()) {
        std::string shapes;
        shapes = inputsToString(input_shapes, input_types);
        s += " (" + shapes + ")";
    }
    s += ", " + std::string(mode == RunMode::Train ? "training step" : nameOf(mode));
    if (!device.empty() && device != "cpu")
        s += ", " + device;
    return s;
}

const DiffTotal* ReportDiff::total(const std::string& name) const
{
    for (const auto& t : totals)
        if (t.name == name)
            return &t;
    return nullptr;
}

const DiffLedger* ReportDiff::ledger(Ledger l) const
{
    for (const auto& x : ledgers)
        if (x.ledger == l)
            return &x;
    return nullptr;
}

const DiffEntry* ReportDiff::entry(const std::string& key) const
{
    for (const auto& e : entries)
        if (e.key == key)
            return &e;
    return nullptr;
}

std::size_t ReportDiff::changedEntries() const
{
    std::size_t n = 0;
    for (const auto& e : entries)
        n += e.changed();
    return n;
}

const char* axisName(TimelineAxis axis)
{
    return axis == TimelineAxis::OpSequence ? "op" : "ms";
}

bool sameGraph(const Report& a, const Report& b, std::string* why)
{
    auto say = [&](const std::string& text) {
        if (why)
            *why = text;
    };
    if (isSnapshot(a) || isSnapshot(b)) {
        say("a snapshot has no op sequence");
        return false;
    }
    if (!a.trace || !b.trace || a.trace->size() == 0 || b.trace->size() == 0) {
        say("a report without events has no op sequence");
        return false;
    }
    auto oa = opNames(*a.trace), ob = opNames(*b.trace);
    // Op sequence numbers count from 0: the last one seen, plus one, is how many ops ran up to it.
    const auto opsA = oa.empty() ? 0u : oa.rbegin()->first + 1, opsB = ob.empty() ? 0u : ob.rbegin()->first + 1;
    if (opsA != opsB) {
        say("the runs have different numbers of ops (" + std::to_string(opsA) + " and " + std::to_string(opsB) + ")");
        return false;
    }
    std::size_t shared = 0;
    for (const auto& [seq, name] : oa) {
        auto it = ob.find(seq);
        if (it == ob.end())
            continue;
        if (it->second != name) {
            say("op " + std::to_string(seq) + " is " + name + " in A and " + it->second + " in B");
            return false;
        }
        ++shared;
    }
    say("both are runs of the same graph: " + std::to_string(opsA) + " ops, " + std::to_string(shared)
        + " allocating in both with the same names");
    return true;
}

ReportDiff diffReports(const Report& a, const Report& b, const std::string& aName, const std::string& bName)
{
    ReportDiff d;
    d.a = sideOf(a, aName);
    d.b = sideOf(b, bName);

    auto total = [&](const char* name, const char* label, std::int64_t va, std::int64_t vb) {
        d.totals.push_back({name, label, {va, vb}});
    };
    total("peak_bytes", "peak during the run", a.peak_bytes, b.peak_bytes);
    total("peak_total_bytes", "peak total", a.peak_total_bytes, b.peak_total_bytes);
    total("reserved_bytes", "reserved on a GPU", reservedOf(a), reservedOf(b));
    total("weight_bytes", "weights", a.weight_bytes, b.weight_bytes);
    total("input_bytes", "inputs", a.input_bytes, b.input_bytes);
    total("optimizer_state_bytes", "optimizer state", a.optimizer_state_bytes, b.optimizer_state_bytes);
    total("gradient_bytes", "gradients", a.gradient_bytes, b.gradient_bytes);
    if (isSnapshot(a) || isSnapshot(b)) // what the trace did not see allocated: weights, optimizer state, ...
        total("alive_before_trace_bytes", "alive before the trace", isSnapshot(a) ? aliveBeforeTrace(*a.snapshot) : 0,
            isSnapshot(b) ? aliveBeforeTrace(*b.snapshot) : 0);
    if (d.a.reserved_kind != d.b.reserved_kind && reservedOf(a) > 0 && reservedOf(b) > 0)
        d.notes.push_back(std::string("reserved bytes are not alike: A's are ") + nameOf(d.a.reserved_kind) + ", B's "
            + nameOf(d.b.reserved_kind));

    // A snapshot's ledgers (snapshot/snapshot_ledgers.h) also hold Unattributed and Resident.
    for (int l = 0; l < kLedgerKinds; ++l) {
        const auto& la = a.ledgers[static_cast<std::size_t>(l)];
        const auto& lb = b.ledgers[static_cast<std::size_t>(l)];
        if (la.at_peak || la.total || lb.at_peak || lb.total)
            d.ledgers.push_back({static_cast<Ledger>(l), {la.at_peak, lb.at_peak}, {la.total, lb.total},
                ledgerLabel(static_cast<Ledger>(l))});
    }
    if (isSnapshot(a) || isSnapshot(b))
        d.ledgers_sum = std::string(isSnapshot(a) && isSnapshot(b) ? "" : "a snapshot's ")
            + "rows at the peak, resident included, sum to the peak during the run; allocated, all but resident sum "
              "to what the trace allocated";

    if (!isSnapshot(a) && !isSnapshot(b)) {
        moduleEntries(a, b, d);
    } else {
        siteEntries(a, b, d);
        if (isSnapshot(a) != isSnapshot(b))
            d.notes.push_back("A model run against a snapshot: a model's sites are module paths, a snapshot's are "
                              "stack frames, so few entries match");
    }
    for (auto& e : d.entries)
        setChange(e, d.columns);
    sortEntries(d.entries);

    std::string why;
    d.axis = sameGraph(a, b, &why) ? TimelineAxis::OpSequence : TimelineAxis::Milliseconds;
    d.axis_reason = why;
    d.series_a = seriesOf(a, d.axis);
    d.series_b = seriesOf(b, d.axis);
    return d;
}

bool DiffEntry::changed() const
{
    return std::any_of(figures.begin(), figures.end(), [](const DiffFigure& f) { return f.delta() != 0; });
}

} // namespace memledger
