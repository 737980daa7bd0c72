#pragma once
// Step series: one value per point of sorted keys, as a chart of live or reserved bytes draws them. The values are a
// dense vector, or are read a block at a time from what makes them (a trace's events replayed from the block's
// start), so that a series over ten million events keeps a few bytes an event instead of eight per value. Either way
// each block's minimum and maximum are kept, and a chart reduces a series to its pixel columns (reduceSteps) looking
// at one entry per block inside a wide column and at the values themselves only at the columns' edges.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace memledger {

// Of each block of kSize values: the minimum and maximum, and where in the block each first appears.
struct StepBlocks {
    static constexpr std::size_t kSize = 64;
    std::vector<double> min, max;
    std::vector<std::uint8_t> min_at, max_at; // offsets in the block
    // The next block's values (kSize of them but for the last block).
    void add(const double* values, std::size_t count);
    static StepBlocks build(const std::vector<double>& values);
};

// The first minimum and the first maximum of some values, and where they are.
struct StepExtremes {
    std::size_t low_at = 0, high_at = 0;
    double low = 0, high = 0;
};

// The values of a step series. Copies share the values (a handle); reading is thread-safe.
class StepValues {
public:
    // Writes the values of points [first, first + count), all inside one block, to `out`.
    using Decode = std::function<void(std::size_t first, std::size_t count, double* out)>;

    StepValues() = default;
    explicit StepValues(std::vector<double> values);
    // Values made a block at a time; `blocks` summarises them (built by decoding every block once when not given).
    StepValues(std::size_t size, Decode decode);
    StepValues(std::size_t size, Decode decode, StepBlocks blocks);

    std::size_t size() const { return d_ ? d_->size : 0; }
    bool empty() const { return size() == 0; }
    double operator[](std::size_t p) const; // a dense value, or one block's decoding
    double front() const { return (*this)[0]; }
    double back() const { return (*this)[size() - 1]; }
    // The values of points [first, first + count), block by block.
    void read(std::size_t first, std::size_t count, double* out) const;
    std::vector<double> toVector() const;
    // The first minimum and maximum over points [begin, end) (begin < end), from the blocks inside it.
    StepExtremes extremes(std::size_t begin, std::size_t end) const;
    StepExtremes extremes() const { return extremes(0, size()); }
    // f(p, value) for the points [begin, end) in order.
    template <class F>
    void forEach(std::size_t begin, std::size_t end, F&& f) const
    {
        double buffer[StepBlocks::kSize];
        while (begin < end) {
            const auto count = std::min(end, (begin / StepBlocks::kSize + 1) * StepBlocks::kSize) - begin;
            read(begin, count, buffer);
            for (std::size_t k = 0; k < count; ++k)
                f(begin + k, buffer[k]);
            begin += count;
        }
    }
    const StepBlocks& blocks() const;
    const std::vector<double>* dense() const { return d_ && !d_->decode ? &d_->values : nullptr; }

    // Reads near points cheaply: the last two blocks read stay at hand (one reader per thread).
    class Reader {
    public:
        explicit Reader(const StepValues& values)
            : v_(values)
        {
        }
        // The values of block b (StepBlocks::kSize of them but for the last block), valid until two other blocks
        // are read.
        const double* block(std::size_t b);
        double operator[](std::size_t p) { return block(p / StepBlocks::kSize)[p % StepBlocks::kSize]; }
        StepExtremes extremes(std::size_t begin, std::size_t end);

    private:
        const StepValues& v_;
        std::size_t block_[2] = {SIZE_MAX, SIZE_MAX};
        double values_[2][StepBlocks::kSize];
        int next_ = 0;
    };

private:
    struct Data {
        std::size_t size = 0;
        std::vector<double> values; // dense
        Decode decode; // or made a block at a time
        StepBlocks blocks;
    };
    std::shared_ptr<const Data> d_;
};

// A step series reduced to at most four points per column of [lo, hi] (the value it enters with, its minimum and
// maximum in the order they came, the value it leaves with), so that a chart never gets more points than its
// pixels can show, yet no peak disappears. `keys` are sorted, one per value; any type with size() and operator[].
struct ReducedSteps {
    std::vector<double> keys;
    std::vector<double> values;
};

// Which points fall in each column of [lo, hi]: what a reduction needs of the keys, found once for all the series
// that share them (the timeline's bands).
struct StepColumns {
    std::size_t points = 0; // of the keys
    std::vector<std::size_t> starts; // the first point of each column holding any, then the end of the last
    std::vector<double> x; // the key of each one's first point
    double lo = 0, hi = 0;
    template <class Keys>
    static StepColumns of(const Keys& keys, double lo, double hi, int columns);
};

ReducedSteps reduceSteps(const StepColumns& columns, const StepValues& values);
template <class Keys>
ReducedSteps reduceSteps(const Keys& keys, const StepValues& values, double lo, double hi, int columns)
{
    return values.size() == keys.size() ? reduceSteps(StepColumns::of(keys, lo, hi, columns), values) : ReducedSteps {};
}
ReducedSteps reduceSteps(const std::vector<double>& keys, const std::vector<double>& values, double lo, double hi,
    int columns, const StepBlocks* blocks = nullptr);

namespace step_detail {

// The first index in [from, end) whose key is at least `key` (end when none).
template <class Keys>
std::size_t lowerBound(const Keys& keys, std::size_t from, std::size_t end, double key)
{
    while (from < end) {
        auto mid = from + (end - from) / 2;
        if (keys[mid] < key)
            from = mid + 1;
        else
            end = mid;
    }
    return from;
}

// The first index in [from, end) whose key is above `key` (end when none).
template <class Keys>
std::size_t upperBound(const Keys& keys, std::size_t from, std::size_t end, double key)
{
    while (from < end) {
        auto mid = from + (end - from) / 2;
        if (!(key < keys[mid]))
            from = mid + 1;
        else
            end = mid;
    }
    return from;
}

// The first minimum and maximum of values [begin, end) (begin < end), `block(b)` giving the values of block b:
// one entry of `blocks` per whole block inside (every value when there are none), the values at the edges.
template <class Block>
StepExtremes extremesOf(Block&& block, const StepBlocks* blocks, std::size_t begin, std::size_t end)
{
    constexpr auto n = StepBlocks::kSize;
    StepExtremes x;
    x.low_at = x.high_at = begin;
    x.low = x.high = block(begin / n)[begin % n];
    for (std::size_t i = begin; i < end;) {
        const auto k = i / n;
        if (blocks && i % n == 0 && i + n <= end) {
            if (blocks->min[k] < x.low) {
                x.low = blocks->min[k];
                x.low_at = i + blocks->min_at[k];
            }
            if (blocks->max[k] > x.high) {
                x.high = blocks->max[k];
                x.high_at = i + blocks->max_at[k];
            }
            i += n;
            continue;
        }
        const double* values = block(k);
        const auto stop = std::min(end, (k + 1) * n);
        for (; i < stop; ++i) {
            const double v = values[i - k * n];
            if (v < x.low) {
                x.low = v;
                x.low_at = i;
            }
            if (v > x.high) {
                x.high = v;
                x.high_at = i;
            }
        }
    }
    return x;
}

// `values` has at(p) and extremes(begin, end).
template <class Values>
ReducedSteps reduce(const StepColumns& c, Values&& values)
{
    ReducedSteps out;
    if (c.starts.empty())
        return out;
    out.keys.reserve(c.x.size() * 4 + 2);
    out.values.reserve(out.keys.capacity());
    auto push = [&](double k, double v) {
        out.keys.push_back(k);
        out.values.push_back(v);
    };
    // The value held when the range starts.
    if (c.starts.front() > 0)
        push(c.lo, values.at(c.starts.front() - 1));
    for (std::size_t column = 0; column < c.x.size(); ++column) {
        const auto i = c.starts[column], next = c.starts[column + 1];
        const double x = c.x[column];
        auto e = values.extremes(i, next);
        // First, the two extremes in the order they came, then the value the column ends on.
        const bool lowFirst = e.low_at <= e.high_at;
        const double order[4]
            = {values.at(i), lowFirst ? e.low : e.high, lowFirst ? e.high : e.low, values.at(next - 1)};
        for (double v : order)
            if (out.keys.empty() || out.keys.back() != x || out.values.back() != v)
                push(x, v);
    }
    // More data lies right of the range: hold the last value to the edge so the step does not stop short.
    if (!out.keys.empty() && c.starts.back() < c.points && out.keys.back() < c.hi)
        push(c.hi, out.values.back());
    return out;
}

} // namespace step_detail

template <class Keys>
StepColumns StepColumns::of(const Keys& keys, double lo, double hi, int columns)
{
    StepColumns c;
    c.points = keys.size();
    c.lo = lo;
    c.hi = hi;
    if (c.points == 0 || hi <= lo || columns <= 0)
        return c;
    // First index in [from, end) whose key is >= key, searching outwards from `from`: a column's events
    // are near, and a search over the whole trace misses the cache at every step.
    auto gallop = [&](std::size_t from, std::size_t end, double key) {
        std::size_t step = 1;
        while (from + step < end && keys[from + step] < key)
            step *= 2;
        return step_detail::lowerBound(keys, from + step / 2, std::min(from + step, end), key);
    };
    std::size_t i = step_detail::lowerBound(keys, 0, c.points, lo);
    const auto end = step_detail::upperBound(keys, 0, c.points, hi);
    const double width = (hi - lo) / columns;
    c.starts.push_back(i);
    while (i < end) {
        const double x = keys[i];
        auto column = std::min(columns - 1, static_cast<int>((x - lo) / width));
        i = column == columns - 1 ? end : std::max(i + 1, gallop(i, end, lo + (column + 1) * width));
        c.x.push_back(x);
        c.starts.push_back(i);
    }
    return c;
}

} // namespace memledger
