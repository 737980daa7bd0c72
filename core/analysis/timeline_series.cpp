#include "analysis/timeline_series.h"

#include "snapshot/snapshot.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <unordered_map>

namespace memledger {

std::vector<double> timelineKeys(const Trace& t, TimelineAxis axis)
{
    std::vector<double> keys(t.size());
    if (axis == TimelineAxis::Milliseconds) {
        for (std::size_t i = 0; i < t.size(); ++i)
            keys[i] = static_cast<double>(t.time_ns[i]) / 1e6;
        return keys;
    }
    // Op sequence: the events of op k spread evenly over [k, k+1) so that none hide behind another.
    std::size_t i = 0;
    while (i < t.size()) {
        std::size_t j = i;
        while (j < t.size() && t.op_seq[j] == t.op_seq[i])
            ++j;
        for (std::size_t k = i; k < j; ++k)
            keys[k] = t.op_seq[i] + static_cast<double>(k - i) / static_cast<double>(j - i);
        i = j;
    }
    return keys;
}

namespace {

// Live bytes of a snapshot per ledger (Trace::ledger, as snapshot/snapshot_ledgers.h tells it), with the blocks
// freed by the caller but not yet by the stream apart. The sum follows reportFromSnapshot: the blocks alive at the
// end, minus what the trace did, were alive at its start; every free_completed takes its bytes away. As in
// snapshotLedgerFigures, a block alive before the trace is in the ledger its free in the trace tells, the rest of
// those bytes are Resident.
void buildSnapshotBands(const Report& r, const Trace& t, int device, TimelineSeries& s,
    const std::function<void(std::size_t, const std::array<double, TimelineSeries::kBands>&)>& store)
{
    const auto& snap = *r.snapshot;
    auto onDevice = [&](std::size_t i) { return device == TimelineSeries::kAllDevices || t.device[i] == device; };
    std::int64_t allocatedEnd = 0;
    for (const auto& seg : snap.segments)
        if (device == TimelineSeries::kAllDevices || seg.device == device)
            for (const auto& b : seg.blocks)
                if (b.state == BlockState::ActiveAllocated)
                    allocatedEnd += b.size;
    std::array<std::int64_t, TimelineSeries::kBands> live {};
    std::int64_t net = 0, told = 0;
    for (std::size_t i = 0; i < t.size(); ++i) {
        if (!onDevice(i))
            continue;
        if (t.action[i] == Action::Alloc) {
            net += t.bytes[i];
        } else if (t.action[i] == Action::Free) {
            net -= t.bytes[i];
            if (t.partner[i] == kNoPartner) {
                live[static_cast<std::size_t>(t.ledger[i])] += t.bytes[i];
                told += t.bytes[i];
            }
        }
    }
    const std::int64_t before = std::max<std::int64_t>(0, allocatedEnd - net);
    constexpr auto kResident = static_cast<std::size_t>(Ledger::Resident);
    live[kResident] = std::max<std::int64_t>(0, before - told + live[kResident]);
    for (std::size_t b = 0; b < live.size(); ++b)
        s.present[b] = live[b] > 0;

    // The ledger of a block alive before the trace whose free is requested: that of its free_completed, found
    // walking back (an alloc at the address means the request belongs to an older block).
    std::unordered_map<std::uint64_t, Ledger> nextFree;
    std::unordered_map<std::uint32_t, Ledger> requestLedger;
    auto keyOf = [&](std::size_t i) { return (static_cast<std::uint64_t>(t.device[i] & 0xff) << 56) ^ t.address[i]; };
    if (told > 0)
        for (std::size_t i = t.size(); i-- > 0;) {
            if (!onDevice(i))
                continue;
            const Action a = t.action[i];
            if (a == Action::Free && t.partner[i] == kNoPartner)
                nextFree[keyOf(i)] = t.ledger[i];
            else if (a == Action::Alloc && !nextFree.empty())
                nextFree.erase(keyOf(i));
            else if (a == Action::FreeRequested && !nextFree.empty()) {
                auto it = nextFree.find(keyOf(i));
                if (it != nextFree.end())
                    requestLedger[static_cast<std::uint32_t>(i)] = it->second;
            }
        }

    s.free_requested_at.assign(t.size(), -1);
    struct Live {
        std::int32_t alloc; // -1: alive before the trace
        Ledger ledger;
        bool pending;
    };
    std::unordered_map<std::uint64_t, Live> open;
    open.reserve(4096);
    std::array<double, TimelineSeries::kBands> band {};
    auto put = [&](std::size_t p) {
        for (std::size_t b = 0; b < band.size(); ++b)
            band[b] = static_cast<double>(live[b]);
        store(p, band);
    };
    constexpr auto kPending = static_cast<std::size_t>(TimelineSeries::kPendingFree);
    put(0);
    for (std::size_t i = 0; i < t.size(); ++i) {
        if (onDevice(i)) {
            const auto key = keyOf(i);
            const auto b = t.bytes[i];
            if (t.action[i] == Action::Alloc) {
                const auto l = static_cast<std::size_t>(t.ledger[i]);
                live[l] += b;
                open[key] = {static_cast<std::int32_t>(i), t.ledger[i], false};
                s.present[l] = true;
            } else if (t.action[i] == Action::FreeRequested) {
                auto it = open.find(key);
                if (it == open.end()) {
                    auto known = requestLedger.find(static_cast<std::uint32_t>(i));
                    const Ledger l = known == requestLedger.end() ? Ledger::Resident : known->second;
                    it = open.emplace(key, Live {-1, l, false}).first;
                }
                if (!it->second.pending) {
                    it->second.pending = true;
                    live[static_cast<std::size_t>(it->second.ledger)] -= b;
                    live[kPending] += b;
                    s.present[kPending] = true;
                    if (it->second.alloc >= 0)
                        s.free_requested_at[static_cast<std::size_t>(it->second.alloc)] = static_cast<std::int32_t>(i);
                }
            } else if (t.action[i] == Action::Free) {
                auto it = open.find(key);
                if (it == open.end()) {
                    live[static_cast<std::size_t>(t.ledger[i])] -= b;
                } else {
                    live[it->second.pending ? kPending : static_cast<std::size_t>(it->second.ledger)] -= b;
                    open.erase(it);
                }
            }
        }
        put(i + 1);
    }
}

} // namespace

bool timelineHasTime(const Report& r)
{
    return !r.snapshot || r.snapshot->trace_has_time;
}

std::string timelineAxisLabel(const Report& r, TimelineAxis axis)
{
    if (axis == TimelineAxis::OpSequence)
        return "op sequence";
    if (timelineHasTime(r))
        return "time (ms)";
    return r.trace && r.trace->size() > 0 ? "event (in order; the trace has no timestamps)"
                                          : "the state at the end (the snapshot has no trace)";
}

const char* TimelineSeries::bandName(int band)
{
    if (band == kPendingFree)
        return "pending free";
    return ledgerLabel(static_cast<Ledger>(band));
}

double TimelineSeries::bottomOf(int band, std::size_t p) const
{
    double bottom = 0;
    for (int b : kStackOrder) {
        if (b == band)
            return bottom;
        bottom = tops[static_cast<std::size_t>(b)][p];
    }
    return bottom;
}

TimelineSeries TimelineSeries::build(const Report& r, TimelineAxis axis, int device)
{
    TimelineSeries s;
    const Trace empty;
    const Trace& t = r.trace ? *r.trace : empty;
    auto eventKeys = timelineKeys(t, axis);
    if (axis == TimelineAxis::Milliseconds && !timelineHasTime(r))
        for (std::size_t i = 0; i < eventKeys.size(); ++i)
            eventKeys[i] = static_cast<double>(i);
    std::size_t points = t.size() + 1;
    s.keys.reserve(points);
    s.keys.push_back(eventKeys.empty() ? 0.0 : std::min(0.0, eventKeys.front()));
    s.keys.insert(s.keys.end(), eventKeys.begin(), eventKeys.end());
    for (auto& band : s.tops)
        band.resize(points);

    // `bytes` per band, stacked in kStackOrder.
    auto store = [&](std::size_t p, const std::array<double, kBands>& bytes) {
        double top = 0;
        for (int b : kStackOrder) {
            top += bytes[static_cast<std::size_t>(b)];
            s.tops[static_cast<std::size_t>(b)][p] = top;
        }
        if (top > s.peak_value) {
            s.peak_value = top;
            s.peak_key = s.keys[p];
        }
    };
    if (r.snapshot) {
        buildSnapshotBands(r, t, device, s, store);
    } else {
        std::array<double, kBands> constant {};
        constant[static_cast<int>(Ledger::Weights)] = static_cast<double>(r.weight_bytes);
        constant[static_cast<int>(Ledger::Inputs)] = static_cast<double>(r.input_bytes);
        constant[static_cast<int>(Ledger::OptimizerState)] = static_cast<double>(r.optimizer_state_bytes);
        std::array<std::int64_t, kBands> live {};
        for (int b = 0; b < kBands; ++b)
            s.present[static_cast<std::size_t>(b)] = constant[static_cast<std::size_t>(b)] > 0;
        std::array<double, kBands> bytes {};
        auto put = [&](std::size_t p) {
            for (int b = 0; b < kBands; ++b)
                bytes[static_cast<std::size_t>(b)]
                    = constant[static_cast<std::size_t>(b)] + static_cast<double>(live[static_cast<std::size_t>(b)]);
            store(p, bytes);
        };
        put(0);
        for (std::size_t i = 0; i < t.size(); ++i) {
            auto b = static_cast<int>(t.ledger[i]);
            if (b < kLedgerKinds) {
                if (t.action[i] == Action::Alloc) {
                    live[static_cast<std::size_t>(b)] += t.bytes[i];
                    s.present[static_cast<std::size_t>(b)] = true;
                } else if (t.action[i] == Action::Free && t.partner[i] != kNoPartner) {
                    live[static_cast<std::size_t>(b)] -= t.bytes[i];
                }
            }
            put(i + 1);
        }
    }
    for (int b = 0; b < kBands; ++b)
        if (s.present[static_cast<std::size_t>(b)])
            s.blocks[static_cast<std::size_t>(b)] = StepBlocks::build(s.tops[static_cast<std::size_t>(b)]);
    return s;
}

std::size_t TimelineSeries::pointAt(double x) const
{
    auto it = std::upper_bound(keys.begin(), keys.end(), x);
    return it == keys.begin() ? 0 : static_cast<std::size_t>(it - keys.begin()) - 1;
}

std::vector<double> moduleLiveSeries(const Trace& t, const std::string& path, double base)
{
    std::vector<double> out(t.size() + 1, base);
    if (path.empty())
        return out;
    std::vector<char> inside(t.strings.size(), 0);
    for (std::size_t s = 0; s < t.strings.size(); ++s) {
        const auto& w = t.strings.at(static_cast<std::uint32_t>(s));
        inside[s] = w.size() >= path.size() && w.compare(0, path.size(), path) == 0
            && (w.size() == path.size() || w[path.size()] == '.');
    }
    double live = base;
    for (std::size_t i = 0; i < t.size(); ++i) {
        if (inside[t.where[i]]) {
            if (t.action[i] == Action::Alloc)
                live += static_cast<double>(t.bytes[i]);
            else if (t.action[i] == Action::Free && t.partner[i] != kNoPartner)
                live -= static_cast<double>(t.bytes[i]);
        }
        out[i + 1] = live;
    }
    return out;
}

StepBlocks StepBlocks::build(const std::vector<double>& values)
{
    StepBlocks b;
    auto count = (values.size() + kSize - 1) / kSize;
    b.min_at.resize(count);
    b.max_at.resize(count);
    for (std::size_t k = 0; k < count; ++k) {
        auto first = k * kSize, end = std::min(values.size(), first + kSize);
        std::size_t low = first, high = first;
        for (auto i = first + 1; i < end; ++i) {
            if (values[i] < values[low])
                low = i;
            if (values[i] > values[high])
                high = i;
        }
        b.min_at[k] = static_cast<std::uint32_t>(low);
        b.max_at[k] = static_cast<std::uint32_t>(high);
    }
    return b;
}

namespace {

// Indices of the first minimum and first maximum of values[begin, end).
std::pair<std::size_t, std::size_t> minMaxAt(
    const std::vector<double>& values, std::size_t begin, std::size_t end, const StepBlocks* blocks)
{
    std::size_t low = begin, high = begin;
    auto consider = [&](std::size_t lowAt, std::size_t highAt) {
        if (values[lowAt] < values[low])
            low = lowAt;
        if (values[highAt] > values[high])
            high = highAt;
    };
    std::size_t i = begin;
    if (blocks) {
        constexpr auto n = StepBlocks::kSize;
        for (; i < end && i % n; ++i)
            consider(i, i);
        for (; i + n <= end; i += n)
            consider(blocks->min_at[i / n], blocks->max_at[i / n]);
    }
    for (; i < end; ++i)
        consider(i, i);
    return {low, high};
}

} // namespace

ReducedSteps reduceSteps(const std::vector<double>& keys, const std::vector<double>& values, double lo, double hi,
    int columns, const StepBlocks* blocks)
{
    ReducedSteps out;
    if (keys.empty() || hi <= lo || columns <= 0)
        return out;
    out.keys.reserve(static_cast<std::size_t>(columns) * 4 + 2);
    out.values.reserve(out.keys.capacity());
    auto push = [&](double k, double v) {
        out.keys.push_back(k);
        out.values.push_back(v);
    };
    auto at = [&](double key) {
        return static_cast<std::size_t>(std::lower_bound(keys.begin(), keys.end(), key) - keys.begin());
    };
    // First index in [from, end) whose key is >= key, searching outwards from `from`: a column's events
    // are near, and a search over the whole trace misses the cache at every step.
    auto gallop = [&](std::size_t from, std::size_t end, double key) {
        std::size_t step = 1;
        while (from + step < end && keys[from + step] < key)
            step *= 2;
        auto first = keys.begin() + static_cast<std::ptrdiff_t>(from + step / 2);
        auto last = keys.begin() + static_cast<std::ptrdiff_t>(std::min(from + step, end));
        return static_cast<std::size_t>(std::lower_bound(first, last, key) - keys.begin());
    };
    std::size_t i = at(lo);
    auto end = static_cast<std::size_t>(std::upper_bound(keys.begin(), keys.end(), hi) - keys.begin());
    // The value held when the range starts.
    if (i > 0)
        push(lo, values[i - 1]);
    double width = (hi - lo) / columns;
    while (i < end) {
        auto column = std::min(columns - 1, static_cast<int>((keys[i] - lo) / width));
        double x = keys[i];
        auto next = column == columns - 1 ? end : std::max(i + 1, gallop(i, end, lo + (column + 1) * width));
        auto [lowAt, highAt] = minMaxAt(values, i, next, blocks);
        // First, the two extremes in the order they came, then the value the column ends on.
        std::size_t order[4] = {i, std::min(lowAt, highAt), std::max(lowAt, highAt), next - 1};
        for (std::size_t k = 0; k < 4; ++k)
            if (out.keys.empty() || out.keys.back() != x || out.values.back() != values[order[k]])
                push(x, values[order[k]]);
        i = next;
    }
    // More data lies right of the range: hold the last value to the edge so the step does not stop short.
    if (!out.keys.empty() && end < keys.size() && out.keys.back() < hi)
        push(hi, out.values.back());
    return out;
}

} // namespace memledger
