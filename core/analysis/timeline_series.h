#pragma once
#include "report/report.h"

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace memledger {

enum class TimelineAxis { Milliseconds, OpSequence };

// Where the minimum and maximum of each block of kSize values are, so that reducing a wide range looks at
// one entry per block instead of every value.
struct StepBlocks {
    static constexpr std::size_t kSize = 64;
    std::vector<std::uint32_t> min_at, max_at;
    static StepBlocks build(const std::vector<double>& values);
};

// The stacked live-bytes step series behind the timeline, built once per report, axis and device.
// Bands 0-8 are the ledgers (a model run fills the first seven; a CUDA snapshot also Unattributed and Resident, the
// blocks alive before its trace that nothing in it tells more of); a snapshot adds the blocks freed by the caller
// whose stream has not caught up. Stacking order, bottom first: kStackOrder.
struct TimelineSeries {
    static constexpr int kBands = kLedgerKinds + 1;
    static constexpr int kPendingFree = kLedgerKinds;
    static constexpr int kAllDevices = -2; // -1 is the CPU
    // Resident ledgers at the bottom, then what lives longest: weights, optimizer state, inputs, saved
    // activations, activations, gradients, temporaries.
    static constexpr std::array<int, kBands> kStackOrder {static_cast<int>(Ledger::Resident),
        static_cast<int>(Ledger::Weights), static_cast<int>(Ledger::OptimizerState), static_cast<int>(Ledger::Inputs),
        static_cast<int>(Ledger::SavedActivations), static_cast<int>(Ledger::Activations),
        static_cast<int>(Ledger::Gradients), static_cast<int>(Ledger::Temporaries),
        static_cast<int>(Ledger::Unattributed), kPendingFree};
    std::vector<double> keys; // sorted; point 0 is the start, point i+1 follows event i
    std::array<std::vector<double>, kBands> tops; // top of each band after stacking, per point
    std::array<bool, kBands> present {}; // band holds bytes somewhere in the run
    std::array<StepBlocks, kBands> blocks;
    double peak_key = 0;
    double peak_value = 0;
    // Snapshots: per event, the free_requested event of an alloc still waiting for free_completed (-1: none).
    std::vector<std::int32_t> free_requested_at;

    // `device`: a snapshot's events on one device only (kAllDevices: all of them); ignored for model runs.
    static TimelineSeries build(const Report& report, TimelineAxis axis, int device = kAllDevices);
    // "saved for backward" (ledgerLabel), "pending free".
    static const char* bandName(int band);
    // Top of the band stacked under `band` at point p (0 for the bottom band).
    double bottomOf(int band, std::size_t p) const;
    // Point index shown at key `x`: the last point at or before it.
    std::size_t pointAt(double x) const;
    double firstKey() const { return keys.empty() ? 0 : keys.front(); }
    double lastKey() const { return keys.empty() ? 0 : keys.back(); }
};

// False for a snapshot whose trace has no timestamps: its "time" keys are then the events' order (0, 1, 2...).
bool timelineHasTime(const Report& report);
// The x axis' name: "time (ms)", "op sequence", or "event (in order; the trace has no timestamps)".
std::string timelineAxisLabel(const Report& report, TimelineAxis axis);

// Per event: where the event falls on the x axis for `axis`.
std::vector<double> timelineKeys(const Trace& trace, TimelineAxis axis);

// Live bytes of the allocations made inside module `path` or below it (`path` "" matches nothing),
// per point of `keys` as built by TimelineSeries::build, starting from `base`.
std::vector<double> moduleLiveSeries(const Trace& trace, const std::string& path, double base);

// A step series reduced to at most four points per column of [lo, hi] (the value it enters with, its minimum
// and maximum in the order they came, the value it leaves with), so that a chart never gets more points
// than its pixels can show, yet no peak disappears.
struct ReducedSteps {
    std::vector<double> keys;
    std::vector<double> values;
};
ReducedSteps reduceSteps(const std::vector<double>& keys, const std::vector<double>& values, double lo, double hi,
    int columns, const StepBlocks* blocks = nullptr);

} // namespace memledger
