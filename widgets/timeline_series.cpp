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

    std::array<double, kBands> constant {};
    constant[static_cast<int>(Ledger::Weights)] = static_cast<double>(r.weight_bytes);
    constant[static_cast<int>(Ledger::Inputs)] = static_cast<double>(r.input_bytes);
    std::array<std::int64_t, kBands> live {};
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
    for (int b = 0; b < kBands; ++b)
        if (s.present[b])
            s.blocks[b] = StepBlocks::build(s.tops[b]);
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
