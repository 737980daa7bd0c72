#include "timeline_series.h"

#include <algorithm>
#include <limits>

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

TimelineSeries TimelineSeries::build(const Report& r, TimelineAxis axis)
{
    TimelineSeries s;
    const Trace empty;
    const Trace& t = r.trace ? *r.trace : empty;
    auto eventKeys = timelineKeys(t, axis);
    std::size_t points = t.size() + 1;
    s.keys.reserve(points);
    s.keys.push_back(eventKeys.empty() ? 0.0 : std::min(0.0, eventKeys.front()));
    s.keys.insert(s.keys.end(), eventKeys.begin(), eventKeys.end());
    for (auto& band : s.tops)
        band.resize(points);

    std::array<double, kBands> constant{};
    constant[static_cast<int>(Ledger::Weights)] = static_cast<double>(r.weight_bytes);
    constant[static_cast<int>(Ledger::Inputs)] = static_cast<double>(r.input_bytes);
    std::array<std::int64_t, kBands> live{};
    for (int b = 0; b < kBands; ++b)
        s.present[b] = constant[b] > 0;
    auto store = [&](std::size_t p) {
        double top = 0;
        for (int b = 0; b < kBands; ++b) {
            top += constant[b] + static_cast<double>(live[b]);
            s.tops[b][p] = top;
        }
        if (top > s.peak_value) {
            s.peak_value = top;
            s.peak_key = s.keys[p];
        }
    };
    store(0);
    for (std::size_t i = 0; i < t.size(); ++i) {
        auto b = static_cast<int>(t.ledger[i]);
        if (b < kBands) {
            if (t.action[i] == Action::Alloc) {
                live[b] += t.bytes[i];
                s.present[b] = true;
            } else if (t.action[i] == Action::Free && t.partner[i] != kNoPartner) {
                live[b] -= t.bytes[i];
            }
        }
        store(i + 1);
    }
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

ReducedSteps reduceSteps(const std::vector<double>& keys, const std::vector<double>& values, double lo, double hi,
                         int columns)
{
    ReducedSteps out;
    if (keys.empty() || hi <= lo || columns <= 0)
        return out;
    out.keys.reserve(static_cast<std::size_t>(columns) * 3 + 2);
    out.values.reserve(out.keys.capacity());
    auto push = [&](double k, double v) {
        out.keys.push_back(k);
        out.values.push_back(v);
    };
    std::size_t i = static_cast<std::size_t>(std::lower_bound(keys.begin(), keys.end(), lo) - keys.begin());
    // The value held when the range starts.
    if (i > 0)
        push(lo, values[i - 1]);
    double width = (hi - lo) / columns;
    while (i < keys.size() && keys[i] <= hi) {
        auto column = std::min(columns - 1, static_cast<int>((keys[i] - lo) / width));
        double columnEnd = lo + (column + 1) * width;
        double x = keys[i];
        std::size_t begin = i, lowAt = i, highAt = i;
        for (++i; i < keys.size() && (keys[i] < columnEnd || (column == columns - 1 && keys[i] <= hi)); ++i) {
            if (values[i] < values[lowAt])
                lowAt = i;
            if (values[i] > values[highAt])
                highAt = i;
        }
        // First, the two extremes in the order they came, then the value the column ends on.
        std::size_t order[4] = {begin, std::min(lowAt, highAt), std::max(lowAt, highAt), i - 1};
        for (std::size_t k = 0; k < 4; ++k)
            if (out.keys.empty() || out.keys.back() != x || out.values.back() != values[order[k]])
                push(x, values[order[k]]);
    }
    // More data lies right of the range: hold the last value to the edge so the step does not stop short.
    if (!out.keys.empty() && i < keys.size() && out.keys.back() < hi)
        push(hi, out.values.back());
    return out;
}

} // namespace memledger
