#pragma once
#include "memledger/report.h"

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

// The stacked live-bytes step series behind the timeline, built once per report and axis.
// Band order, bottom first: weights, inputs, activations, temporaries, unattributed.
struct TimelineSeries {
    static constexpr int kBands = 5;
    std::vector<double> keys; // sorted; point 0 is the start, point i+1 follows event i
    std::array<std::vector<double>, kBands> tops; // top of each band after stacking, per point
    std::array<bool, kBands> present {}; // band holds bytes somewhere in the run
    std::array<StepBlocks, kBands> blocks;
    double peak_key = 0;
    double peak_value = 0;

    static TimelineSeries build(const Report& report, TimelineAxis axis);
    // Point index shown at key `x`: the last point at or before it.
    std::size_t pointAt(double x) const;
    double firstKey() const { return keys.empty() ? 0 : keys.front(); }
    double lastKey() const { return keys.empty() ? 0 : keys.back(); }
};

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
