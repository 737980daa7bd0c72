#include "analysis/timeline_series.h"

#include "snapshot/snapshot.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>

namespace memledger {

namespace {

constexpr std::size_t kBlock = StepBlocks::kSize;
constexpr int kNoBand = 0xF;
using Bands = std::array<double, TimelineSeries::kBands>;

// What a TimelineSeries keeps of its bands: per event, the band its bytes leave and the band they join (kNoBand:
// none), and every band's bytes at the first point of each block. A band's top at a point is the bytes of the bands
// stacked up to it at its block's start, moved by the events between.
struct StackedBands {
    std::shared_ptr<const Trace> trace; // the events' bytes
    std::shared_ptr<const Snapshot> snapshot; // what the series was made of, held as long as it is
    std::vector<std::uint8_t> moves; // per event: from << 4 | to
    std::vector<Bands> starts; // per block
    std::array<int, TimelineSeries::kBands> position {}; // band -> its place in kStackOrder

    StackedBands()
    {
        for (int k = 0; k < TimelineSeries::kBands; ++k)
            position[static_cast<std::size_t>(TimelineSeries::kStackOrder[static_cast<std::size_t>(k)])] = k;
    }

    void decode(int band, std::size_t first, std::size_t count, double* out) const
    {
        const auto block = first / kBlock;
        const auto& bytes = starts[block];
        const int at = position[static_cast<std::size_t>(band)];
        // An event's bytes raise the band's top when they move into a band stacked at or under it (under[] 1), and
        // lower it when they move out of one.
        std::array<double, 16> under {}; // by band; kNoBand: 0
        double top = 0;
        for (int k = 0; k <= at; ++k) {
            const auto b = static_cast<std::size_t>(TimelineSeries::kStackOrder[static_cast<std::size_t>(k)]);
            top += bytes[b];
            under[b] = 1;
        }
        const auto* move = moves.data();
        const auto* eventBytes = trace ? trace->bytes.data() : nullptr;
        const auto end = first + count;
        auto p = block * kBlock;
        // Point p + 1 follows event p.
        for (; p < first; ++p)
            top += static_cast<double>(eventBytes[p]) * (under[move[p] & 0xF] - under[move[p] >> 4]);
        for (;; ++p) {
            out[p - first] = top;
            if (p + 1 == end)
                break;
            top += static_cast<double>(eventBytes[p]) * (under[move[p] & 0xF] - under[move[p] >> 4]);
        }
    }
};

// Walks the points in order: what each event moves (event()) after the bytes at the start (start()), keeping what
// StackedBands needs, the tops' block summaries, the peak and which bands ever hold bytes.
class BandsBuilder {
public:
    BandsBuilder(TimelineSeries& s, StackedBands& bands, const Trace& t)
        : s_(s)
        , bands_(bands)
        , t_(t)
    {
        bands_.moves.resize(t.size());
        bands_.starts.reserve((t.size() + kBlock) / kBlock);
    }

    void start(const Bands& bytes)
    {
        bytes_ = bytes;
        for (std::size_t b = 0; b < bytes.size(); ++b)
            s_.present[b] = bytes[b] > 0;
        point();
    }
    // Event i moves its bytes out of band `from` and into band `to` (kNoBand: neither).
    void event(std::size_t i, int from = kNoBand, int to = kNoBand)
    {
        bands_.moves[i] = static_cast<std::uint8_t>(from << 4 | to);
        const auto b = static_cast<double>(t_.bytes[i]);
        if (from != kNoBand)
            bytes_[static_cast<std::size_t>(from)] -= b;
        if (to != kNoBand) {
            bytes_[static_cast<std::size_t>(to)] += b;
            s_.present[static_cast<std::size_t>(to)] = true;
        }
        point();
    }
    std::array<StepBlocks, TimelineSeries::kBands> finish()
    {
        flush();
        return std::move(blocks_);
    }

private:
    void point()
    {
        if (at_ == 0)
            bands_.starts.push_back(bytes_);
        double top = 0;
        for (int b : TimelineSeries::kStackOrder) {
            top += bytes_[static_cast<std::size_t>(b)];
            tops_[static_cast<std::size_t>(b)][at_] = top;
        }
        if (top > s_.peak_value) {
            s_.peak_value = top;
            s_.peak_key = s_.keys[p_];
        }
        ++p_;
        if (++at_ == kBlock)
            flush();
    }
    void flush()
    {
        if (at_ == 0)
            return;
        for (std::size_t b = 0; b < blocks_.size(); ++b)
            blocks_[b].add(tops_[b].data(), at_);
        at_ = 0;
    }

    TimelineSeries& s_;
    StackedBands& bands_;
    const Trace& t_;
    Bands bytes_ {};
    std::array<std::array<double, kBlock>, TimelineSeries::kBands> tops_ {}; // the block being walked
    std::array<StepBlocks, TimelineSeries::kBands> blocks_;
    std::size_t p_ = 0, at_ = 0;
};

// Live bytes of a snapshot per ledger (Trace::ledger, as snapshot/snapshot_ledgers.h tells it), with the blocks
// freed by the caller but not yet by the stream apart, told to `out` (when given). The sum follows
// reportFromSnapshot: it starts from what was alive before the trace (aliveBeforeTrace); every free_completed
// takes its bytes away. As in snapshotLedgerFigures, a block alive before the trace is in the ledger
// its free in the trace tells, the rest of those bytes are Resident. `requested` (when given) gets, per event, the
// free_requested event of an alloc still waiting for its free_completed (-1: none).
void walkSnapshotBands(const Snapshot& snap, const Trace& t, int device, BandsBuilder* out,
    std::vector<std::int32_t>* requested)
{
    auto onDevice = [&](std::size_t i) { return device == TimelineSeries::kAllDevices || t.device[i] == device; };
    std::array<std::int64_t, TimelineSeries::kBands> live {};
    std::int64_t told = 0;
    for (std::size_t i = 0; i < t.size(); ++i)
        if (onDevice(i) && t.action[i] == Action::Free && t.partner[i] == kNoPartner) {
            live[static_cast<std::size_t>(t.ledger[i])] += t.bytes[i];
            told += t.bytes[i];
        }
    const std::int64_t before = aliveBeforeTrace(
        snap, device == TimelineSeries::kAllDevices ? std::nullopt : std::optional<int>(device));
    constexpr auto kResident = static_cast<std::size_t>(Ledger::Resident);
    live[kResident] = std::max<std::int64_t>(0, before - told + live[kResident]);

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

    if (requested)
        requested->assign(t.size(), -1);
    struct Live {
        std::int32_t alloc; // -1: alive before the trace
        Ledger ledger;
        bool pending;
    };
    std::unordered_map<std::uint64_t, Live> open;
    open.reserve(4096);
    Bands start {};
    for (std::size_t b = 0; b < start.size(); ++b)
        start[b] = static_cast<double>(live[b]);
    auto move = [out](std::size_t i, int from = kNoBand, int to = kNoBand) {
        if (out)
            out->event(i, from, to);
    };
    if (out)
        out->start(start);
    constexpr int kPending = TimelineSeries::kPendingFree;
    for (std::size_t i = 0; i < t.size(); ++i) {
        if (!onDevice(i)) {
            move(i);
            continue;
        }
        const auto key = keyOf(i);
        if (t.action[i] == Action::Alloc) {
            open[key] = {static_cast<std::int32_t>(i), t.ledger[i], false};
            move(i, kNoBand, static_cast<int>(t.ledger[i]));
        } else if (t.action[i] == Action::FreeRequested) {
            auto it = open.find(key);
            if (it == open.end()) {
                auto known = requestLedger.find(static_cast<std::uint32_t>(i));
                const Ledger l = known == requestLedger.end() ? Ledger::Resident : known->second;
                it = open.emplace(key, Live {-1, l, false}).first;
            }
            if (it->second.pending) {
                move(i);
                continue;
            }
            it->second.pending = true;
            if (requested && it->second.alloc >= 0)
                (*requested)[static_cast<std::size_t>(it->second.alloc)] = static_cast<std::int32_t>(i);
            move(i, static_cast<int>(it->second.ledger), kPending);
        } else if (t.action[i] == Action::Free) {
            auto it = open.find(key);
            if (it == open.end()) {
                move(i, static_cast<int>(t.ledger[i]));
            } else {
                move(i, it->second.pending ? kPending : static_cast<int>(it->second.ledger));
                open.erase(it);
            }
        } else {
            move(i);
        }
    }
}

// A model run: weights, optimizer state and inputs resident throughout; each ledger's allocations on top.
void walkRunBands(const Report& r, const Trace& t, BandsBuilder& out)
{
    Bands constant {};
    constant[static_cast<int>(Ledger::Weights)] = static_cast<double>(r.weight_bytes);
    constant[static_cast<int>(Ledger::Inputs)] = static_cast<double>(r.input_bytes);
    constant[static_cast<int>(Ledger::OptimizerState)] = static_cast<double>(r.optimizer_state_bytes);
    out.start(constant);
    for (std::size_t i = 0; i < t.size(); ++i) {
        const auto b = static_cast<int>(t.ledger[i]);
        if (b >= kLedgerKinds)
            out.event(i);
        else if (t.action[i] == Action::Alloc)
            out.event(i, kNoBand, b);
        else if (t.action[i] == Action::Free && t.partner[i] != kNoPartner)
            out.event(i, b);
        else
            out.event(i);
    }
}

} // namespace

TimelineKeys::TimelineKeys(const Report& r, TimelineAxis axis)
    : trace_(r.trace)
{
    const std::size_t events = trace_ ? trace_->size() : 0;
    points_ = events + 1;
    if (axis == TimelineAxis::OpSequence) {
        kind_ = Kind::Ops;
        const auto& op = trace_ ? trace_->op_seq : std::vector<std::uint32_t> {};
        for (std::size_t i = 0; i < events;) {
            opRuns_.push_back(static_cast<std::uint32_t>(i));
            const auto j = i;
            while (i < events && op[i] == op[j])
                ++i;
        }
        opRuns_.push_back(static_cast<std::uint32_t>(events));
    } else {
        kind_ = timelineHasTime(r) ? Kind::Time : Kind::Order;
    }
    first_ = events == 0 ? 0.0 : std::min(0.0, eventKey(0));
}

double TimelineKeys::opKey(std::size_t i) const
{
    // The events of op k spread evenly over [k, k+1).
    const auto run = std::upper_bound(opRuns_.begin(), opRuns_.end(), static_cast<std::uint32_t>(i)) - 1;
    const std::size_t first = *run, end = *(run + 1);
    return trace_->op_seq[first] + static_cast<double>(i - first) / static_cast<double>(end - first);
}

std::size_t TimelineKeys::lowerBound(double key, std::size_t from) const
{
    return step_detail::lowerBound(*this, from, points_, key);
}

std::size_t TimelineKeys::upperBound(double key, std::size_t from) const
{
    return step_detail::upperBound(*this, from, points_, key);
}

std::vector<double> TimelineKeys::toVector() const
{
    std::vector<double> out(points_);
    for (std::size_t p = 0; p < points_; ++p)
        out[p] = (*this)[p];
    return out;
}

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

struct TimelineSeries::Requests {
    std::shared_ptr<const Trace> trace;
    std::shared_ptr<const Snapshot> snapshot;
    int device = kAllDevices;
    std::once_flag once;
    std::vector<std::int32_t> at; // per event
};

TimelineSeries TimelineSeries::build(const Report& r, TimelineAxis axis, int device)
{
    TimelineSeries s;
    s.keys = TimelineKeys(r, axis);
    const Trace empty;
    const Trace& t = r.trace ? *r.trace : empty;
    auto bands = std::make_shared<StackedBands>();
    bands->trace = r.trace;
    bands->snapshot = r.snapshot;
    BandsBuilder builder(s, *bands, t);
    if (r.snapshot) {
        walkSnapshotBands(*r.snapshot, t, device, &builder, nullptr);
        s.requests_ = std::make_shared<Requests>();
        s.requests_->trace = r.trace;
        s.requests_->snapshot = r.snapshot;
        s.requests_->device = device;
    } else {
        walkRunBands(r, t, builder);
    }
    auto blocks = builder.finish();
    const auto points = t.size() + 1;
    std::shared_ptr<const StackedBands> kept = std::move(bands);
    for (int b = 0; b < kBands; ++b)
        s.tops[static_cast<std::size_t>(b)] = StepValues(
            points, [kept, b](std::size_t first, std::size_t count, double* out) { kept->decode(b, first, count, out); },
            std::move(blocks[static_cast<std::size_t>(b)]));
    return s;
}

std::shared_ptr<const TimelineSeries> TimelineSeries::shared(const Report& r, TimelineAxis axis, int device)
{
    // What a series is made of. An entry lives as long as its series, which holds the trace and the snapshot:
    // their addresses cannot be another's meanwhile.
    struct Entry {
        const Trace* trace;
        const Snapshot* snapshot;
        TimelineAxis axis;
        int device;
        std::int64_t weights, inputs, optimizer;
        std::weak_ptr<const TimelineSeries> series;
        bool operator==(const Entry& o) const
        {
            return trace == o.trace && snapshot == o.snapshot && axis == o.axis && device == o.device
                && weights == o.weights && inputs == o.inputs && optimizer == o.optimizer;
        }
    };
    static std::mutex mutex;
    static std::vector<Entry> entries;
    const Entry key {r.trace.get(), r.snapshot.get(), axis, r.snapshot ? device : kAllDevices, r.weight_bytes,
        r.input_bytes, r.optimizer_state_bytes, {}};
    {
        std::lock_guard<std::mutex> lock(mutex);
        entries.erase(std::remove_if(entries.begin(), entries.end(), [](const Entry& e) { return e.series.expired(); }),
            entries.end());
        for (const auto& e : entries)
            if (e == key)
                if (auto alive = e.series.lock())
                    return alive;
    }
    auto built = std::make_shared<const TimelineSeries>(build(r, axis, device));
    std::lock_guard<std::mutex> lock(mutex);
    entries.push_back(key);
    entries.back().series = built;
    return built;
}

std::int32_t TimelineSeries::freeRequestedAt(std::size_t alloc) const
{
    if (!requests_)
        return -1;
    auto& r = *requests_;
    std::call_once(r.once, [&r] {
        if (r.trace)
            walkSnapshotBands(*r.snapshot, *r.trace, r.device, nullptr, &r.at);
    });
    return alloc < r.at.size() ? r.at[alloc] : -1;
}

std::size_t TimelineSeries::pointAt(double x) const
{
    const auto p = keys.upperBound(x);
    return p == 0 ? 0 : p - 1;
}

std::vector<double> moduleLiveSeries(const Trace& t, const std::string& path, double base)
{
    std::vector<double> out(t.size() + 1, base);
    if (path.empty())
        return out;
    std::vector<char> inside(t.strings.size(), 0);
    for (std::size_t s = 0; s < t.strings.size(); ++s)
        inside[s] = isInsideModule(t.strings.at(static_cast<std::uint32_t>(s)), path);
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

} // namespace memledger
