#pragma once
// Private to core: matching the allocations of two runs at different batch sizes.
#include "recording/model.h"

#include <cstdint>
#include <utility>
#include <vector>

namespace memledger {

using TokenPairs = std::vector<std::pair<std::uint32_t, std::uint32_t>>;

// Index pairs (i, j), a[i] == b[j], of a longest common subsequence, in order (Myers' diff). When the
// sequences differ in more than maxEdits places, the k-th occurrence of each token is matched instead.
TokenPairs alignTokens(
    const std::vector<std::uint64_t>& a, const std::vector<std::uint64_t>& b, std::size_t maxEdits = 2000);

// Each event of r2 sized as slope * batch + intercept; a free carries its allocation's fit.
struct SizeFit {
    std::vector<double> slope;
    std::vector<double> intercept;
    std::size_t allocs = 0; // allocations of r2
    std::size_t matched_allocs = 0; // of them, found in r1
    std::int64_t bytes = 0; // allocated bytes of r2
    std::int64_t matched_bytes = 0;
    std::size_t ops = 0; // op calls of r2
    std::size_t matched_ops = 0;
};

// Ops are aligned by (module path, op name) in order, allocations inside an op by (innermost op,
// freed inside the op or not). An allocation of r2 without a match takes the fit of a matched one of the
// same size in its op, else grows in proportion to the batch.
// `power`: how fast a tensor may grow with the variable when ops switch kernels (1: in proportion to the batch;
// 2: with the square of the sequence, as attention scores do).
SizeFit fitSizes(const RawRun& r1, std::int64_t b1, const RawRun& r2, std::int64_t b2, int power = 1);

// Each event of r3 sized as quad * x^2 + slope * x + intercept through the three runs at x1 < x2 < x3 (the
// sequence length: attention that materialises its scores grows as its square). r3 is aligned with r1 and
// with r2 as fitSizes aligns two runs.
SizeFit fitSizesQuadratic(const RawRun& r1, std::int64_t x1, const RawRun& r2, std::int64_t x2, const RawRun& r3,
    std::int64_t x3, std::vector<double>& quad);

} // namespace memledger
