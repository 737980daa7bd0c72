#include "analysis/step_values.h"

#include <algorithm>
#include <cassert>

namespace memledger {

void StepBlocks::add(const double* values, std::size_t count)
{
    // The extremes first (no branch to mispredict), then where each first is.
    double lowest = values[0], highest = values[0];
    for (std::size_t i = 1; i < count; ++i) {
        lowest = std::min(lowest, values[i]);
        highest = std::max(highest, values[i]);
    }
    std::size_t low = 0, high = 0;
    while (values[low] != lowest)
        ++low;
    while (values[high] != highest)
        ++high;
    min.push_back(lowest);
    max.push_back(highest);
    min_at.push_back(static_cast<std::uint8_t>(low));
    max_at.push_back(static_cast<std::uint8_t>(high));
}

StepBlocks StepBlocks::build(const std::vector<double>& values)
{
    StepBlocks b;
    const auto count = (values.size() + kSize - 1) / kSize;
    b.min.reserve(count);
    b.max.reserve(count);
    b.min_at.reserve(count);
    b.max_at.reserve(count);
    for (std::size_t first = 0; first < values.size(); first += kSize)
        b.add(values.data() + first, std::min(kSize, values.size() - first));
    return b;
}

StepValues::StepValues(std::vector<double> values)
{
    auto d = std::make_shared<Data>();
    d->size = values.size();
    d->blocks = StepBlocks::build(values);
    d->values = std::move(values);
    d_ = std::move(d);
}

StepValues::StepValues(std::size_t size, Decode decode)
{
    auto d = std::make_shared<Data>();
    d->size = size;
    d->decode = std::move(decode);
    const auto count = (size + StepBlocks::kSize - 1) / StepBlocks::kSize;
    d->blocks.min.reserve(count);
    d->blocks.max.reserve(count);
    d->blocks.min_at.reserve(count);
    d->blocks.max_at.reserve(count);
    double buffer[StepBlocks::kSize];
    for (std::size_t first = 0; first < size; first += StepBlocks::kSize) {
        const auto n = std::min(StepBlocks::kSize, size - first);
        d->decode(first, n, buffer);
        d->blocks.add(buffer, n);
    }
    d_ = std::move(d);
}

StepValues::StepValues(std::size_t size, Decode decode, StepBlocks blocks)
{
    auto d = std::make_shared<Data>();
    d->size = size;
    d->decode = std::move(decode);
    d->blocks = std::move(blocks);
    assert(d->blocks.min.size() == (size + StepBlocks::kSize - 1) / StepBlocks::kSize);
    d_ = std::move(d);
}

const StepBlocks& StepValues::blocks() const
{
    static const StepBlocks none;
    return d_ ? d_->blocks : none;
}

double StepValues::operator[](std::size_t p) const
{
    assert(p < size());
    if (!d_->decode)
        return d_->values[p];
    double v = 0;
    d_->decode(p, 1, &v);
    return v;
}

void StepValues::read(std::size_t first, std::size_t count, double* out) const
{
    assert(first + count <= size());
    if (!d_ || count == 0)
        return;
    if (!d_->decode) {
        std::copy_n(d_->values.begin() + static_cast<std::ptrdiff_t>(first), count, out);
        return;
    }
    const auto end = first + count;
    while (first < end) {
        const auto n = std::min(end, (first / StepBlocks::kSize + 1) * StepBlocks::kSize) - first;
        d_->decode(first, n, out);
        out += n;
        first += n;
    }
}

std::vector<double> StepValues::toVector() const
{
    std::vector<double> out(size());
    read(0, out.size(), out.data());
    return out;
}

StepExtremes StepValues::extremes(std::size_t begin, std::size_t end) const
{
    return Reader(*this).extremes(begin, end);
}

const double* StepValues::Reader::block(std::size_t b)
{
    if (!v_.d_->decode)
        return v_.d_->values.data() + b * StepBlocks::kSize;
    for (int k = 0; k < 2; ++k)
        if (block_[k] == b)
            return values_[k];
    const int k = next_;
    next_ ^= 1;
    const auto first = b * StepBlocks::kSize;
    const auto count = std::min(StepBlocks::kSize, v_.size() - first);
    const auto& blocks = v_.d_->blocks;
    if (blocks.min[b] == blocks.max[b]) // a flat block (a ledger resident throughout): nothing to replay
        std::fill_n(values_[k], count, blocks.min[b]);
    else
        v_.d_->decode(first, count, values_[k]);
    block_[k] = b;
    return values_[k];
}

StepExtremes StepValues::Reader::extremes(std::size_t begin, std::size_t end)
{
    assert(begin < end && end <= v_.size());
    return step_detail::extremesOf([this](std::size_t b) { return block(b); }, &v_.blocks(), begin, end);
}

ReducedSteps reduceSteps(const StepColumns& columns, const StepValues& values)
{
    struct Read {
        StepValues::Reader reader;
        double at(std::size_t p) { return reader[p]; }
        StepExtremes extremes(std::size_t begin, std::size_t end) { return reader.extremes(begin, end); }
    };
    if (values.size() != columns.points)
        return {};
    return step_detail::reduce(columns, Read {StepValues::Reader(values)});
}

ReducedSteps reduceSteps(const std::vector<double>& keys, const std::vector<double>& values, double lo, double hi,
    int columns, const StepBlocks* blocks)
{
    struct Dense {
        const std::vector<double>& values;
        const StepBlocks* blocks;
        double at(std::size_t p) const { return values[p]; }
        StepExtremes extremes(std::size_t begin, std::size_t end) const
        {
            return step_detail::extremesOf(
                [this](std::size_t b) { return values.data() + b * StepBlocks::kSize; }, blocks, begin, end);
        }
    };
    if (values.size() != keys.size())
        return {};
    return step_detail::reduce(StepColumns::of(keys, lo, hi, columns), Dense {values, blocks});
}

} // namespace memledger
