#pragma once
#include "analysis/step_values.h"
#include "report/report.h"

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace memledger {

enum class TimelineAxis { Milliseconds, OpSequence };

// Where each point of a timeline lies on its x axis: point 0 is the start, point i+1 follows event i. Read off the
// trace when asked (an event's time, its place in the trace, or its op's number with the op's events spread evenly
// over [k, k+1) so that none hide behind another), so that a long trace keeps no key per event. Sorted.
class TimelineKeys {
public:
    TimelineKeys() = default; // no points
    // For a snapshot without timestamps the "time" of an event is its place in the trace (0, 1, 2...).
    TimelineKeys(const Report& report, TimelineAxis axis);

    std::size_t size() const { return points_; }
    bool empty() const { return points_ == 0; }
    double operator[](std::size_t p) const { return p == 0 ? first_ : eventKey(p - 1); }
    double front() const { return (*this)[0]; }
    double back() const { return (*this)[points_ - 1]; }
    // The first point in [from, size()) whose key is at least `key` / above `key` (size() when none).
    std::size_t lowerBound(double key, std::size_t from = 0) const;
    std::size_t upperBound(double key, std::size_t from = 0) const;
    std::vector<double> toVector() const;

private:
    enum class Kind { Time, Order, Ops };
    double eventKey(std::size_t i) const
    {
        switch (kind_) {
        case Kind::Time:
            return static_cast<double>(trace_->time_ns[i]) / 1e6;
        case Kind::Order:
            return static_cast<double>(i);
        case Kind::Ops:
            break;
        }
        return opKey(i);
    }
    double opKey(std::size_t i) const;

    std::shared_ptr<const Trace> trace_;
    Kind kind_ = Kind::Order;
    std::size_t points_ = 0;
    double first_ = 0; // the start's key: 0, or the first event's when that lies before 0
    std::vector<std::uint32_t> opRuns_; // Ops: where each run of events of one op begins, then the trace's end
};

// The stacked live-bytes step series behind the timeline, built once per report, axis and device.
// Bands 0-8 are the ledgers (a model run fills the first seven; a CUDA snapshot also Unattributed and Resident, the
// blocks alive before its trace that nothing in it tells more of); a snapshot adds the blocks freed by the caller
// whose stream has not caught up. Stacking order, bottom first: kStackOrder.
// The tops are not stored per point: each event moves its bytes from one band to another (or in, or out), which
// takes a byte an event to remember, and the bytes of every band are kept at the start of each block of
// StepBlocks::kSize points; a band's tops are replayed from there when read (core/analysis/step_values.h).
struct TimelineSeries {
    static constexpr int kBands = kLedgerKinds + 1;
    static constexpr int kPendingFree = kLedgerKinds;
    static constexpr int kAllDevices = -2; // -1 is the CPU
    // Resident ledgers at the bottom, then what lives longest: weights, optimizer state, inputs, gathered
    // parameters, autocast's weight casts, the KV cache, saved activations, activations, gradients, communication buffers,
    // temporaries.
    static constexpr std::array<int, kBands> kStackOrder {static_cast<int>(Ledger::Resident),
        static_cast<int>(Ledger::Weights), static_cast<int>(Ledger::OptimizerState), static_cast<int>(Ledger::Inputs),
        static_cast<int>(Ledger::GatheredParameters), static_cast<int>(Ledger::AutocastCache),
        static_cast<int>(Ledger::KvCache), static_cast<int>(Ledger::SavedActivations), static_cast<int>(Ledger::Activations),
        static_cast<int>(Ledger::Gradients), static_cast<int>(Ledger::Communication),
        static_cast<int>(Ledger::Temporaries), static_cast<int>(Ledger::Unattributed), kPendingFree};
    TimelineKeys keys;
    std::array<StepValues, kBands> tops; // top of each band after stacking, per point
    std::array<bool, kBands> present {}; // band holds bytes somewhere in the run
    double peak_key = 0;
    double peak_value = 0;

    // `device`: a snapshot's events on one device only (kAllDevices: all of them); ignored for model runs.
    static TimelineSeries build(const Report& report, TimelineAxis axis, int device = kAllDevices);
    // The same, built once while anyone holds it: the timeline, the Segments tab, the peak panel and the ranks
    // share one series of a report, axis and device.
    static std::shared_ptr<const TimelineSeries> shared(const Report& report, TimelineAxis axis,
        int device = kAllDevices);
    // "saved for backward" (ledgerLabel), "pending free".
    static const char* bandName(int band);
    // Top of the band stacked under `band` at point p (0 for the bottom band).
    double bottomOf(int band, std::size_t p) const;
    // Point index shown at key `x`: the last point at or before it.
    std::size_t pointAt(double x) const;
    double firstKey() const { return keys.empty() ? 0 : keys.front(); }
    double lastKey() const { return keys.empty() ? 0 : keys.back(); }
    // Snapshots: the free_requested event of the alloc event `alloc` while it waits for its free_completed (-1: none,
    // and for model runs). The first call walks the trace once more for every alloc's (what a hover asks).
    std::int32_t freeRequestedAt(std::size_t alloc) const;

private:
    struct Requests; // what freeRequestedAt finds, when first asked
    std::shared_ptr<Requests> requests_;
};

// False for a snapshot whose trace has no timestamps: its "time" keys are then the events' order (0, 1, 2...).
bool timelineHasTime(const Report& report);
// The x axis' name: "time (ms)", "op sequence", or "event (in order; the trace has no timestamps)".
std::string timelineAxisLabel(const Report& report, TimelineAxis axis);

// Live bytes of the allocations made inside module `path` or below it (`path` "" matches nothing),
// per point of `keys` as built by TimelineSeries::build, starting from `base`.
std::vector<double> moduleLiveSeries(const Trace& trace, const std::string& path, double base);

} // namespace memledger
