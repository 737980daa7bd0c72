#include "whatif/alignment.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <unordered_map>

namespace memledger {

namespace {

// Occurrence matching: the k-th `x` of a with the k-th `x` of b, keeping only pairs in order.
TokenPairs alignByOccurrence(const std::vector<std::uint64_t>& a, const std::vector<std::uint64_t>& b)
{
    std::unordered_map<std::uint64_t, std::vector<std::uint32_t>> inB;
    for (std::uint32_t j = 0; j < b.size(); ++j)
        inB[b[j]].push_back(j);
    std::unordered_map<std::uint64_t, std::size_t> seen;
    TokenPairs out;
    for (std::uint32_t i = 0; i < a.size(); ++i) {
        auto it = inB.find(a[i]);
        if (it == inB.end())
            continue;
        auto k = seen[a[i]]++;
        if (k >= it->second.size())
            continue;
        auto j = it->second[k];
        if (out.empty() || j > out.back().second)
            out.emplace_back(i, j);
    }
    return out;
}

} // namespace

TokenPairs alignTokens(const std::vector<std::uint64_t>& a, const std::vector<std::uint64_t>& b, std::size_t maxEdits)
{
    const auto n = static_cast<std::int64_t>(a.size());
    const auto m = static_cast<std::int64_t>(b.size());
    // Myers: v[k] is the furthest x on diagonal k = x - y after d edits; each round's v is kept to walk back.
    const std::int64_t limit = std::min<std::int64_t>(n + m, static_cast<std::int64_t>(maxEdits));
    std::vector<std::vector<std::int64_t>> rounds;
    std::vector<std::int64_t> v(static_cast<std::size_t>(2 * limit + 3), 0);
    const std::int64_t off = limit + 1;
    std::int64_t found = -1;
    for (std::int64_t d = 0; d <= limit && found < 0; ++d) {
        for (std::int64_t k = -d; k <= d; k += 2) {
            std::int64_t x
                = (k == -d || (k != d && v[off + k - 1] < v[off + k + 1])) ? v[off + k + 1] : v[off + k - 1] + 1;
            std::int64_t y = x - k;
            while (x < n && y < m && a[x] == b[y]) {
                ++x;
                ++y;
            }
            v[off + k] = x;
            if (x >= n && y >= m) {
                found = d;
                break;
            }
        }
        rounds.emplace_back(v.begin() + (off - d), v.begin() + (off + d + 1));
    }
    if (found < 0)
        return alignByOccurrence(a, b);

    TokenPairs out;
    std::int64_t x = n, y = m;
    for (std::int64_t d = found; d > 0; --d) {
        const auto& prev = rounds[static_cast<std::size_t>(d - 1)]; // index k + (d - 1)
        auto at = [&](std::int64_t k) { return prev[static_cast<std::size_t>(k + d - 1)]; };
        std::int64_t k = x - y;
        bool down = k == -d || (k != d && at(k - 1) < at(k + 1));
        std::int64_t pk = down ? k + 1 : k - 1;
        std::int64_t px = at(pk);
        std::int64_t py = px - pk;
        std::int64_t midX = down ? px : px + 1;
        while (x > midX) { // the snake after the edit
            --x;
            --y;
            out.emplace_back(static_cast<std::uint32_t>(x), static_cast<std::uint32_t>(y));
        }
        x = px;
        y = py;
    }
    while (x > 0 && y > 0) {
        --x;
        --y;
        out.emplace_back(static_cast<std::uint32_t>(x), static_cast<std::uint32_t>(y));
    }
    std::reverse(out.begin(), out.end());
    return out;
}

namespace {

struct Segment {
    std::uint64_t key = 0;
    std::uint32_t begin = 0, end = 0;
    bool op = false; // an op call, not a gap between two
};

std::uint64_t hashText(const std::string& s)
{
    return std::hash<std::string> {}(s);
}

// The run cut into outermost op calls and the gaps between them (events outside any op).
std::vector<Segment> segmentsOf(const RawRun& r)
{
    const auto& t = r.trace;
    std::vector<Segment> out;
    std::uint32_t prev = 0;
    for (const auto& op : r.ops) {
        auto key = hashText(t.strings.at(op.module) + '\n' + t.strings.at(op.name));
        if (op.first_event > prev)
            out.push_back({key ^ 0x9e3779b97f4a7c15ull, prev, op.first_event, false});
        out.push_back({key, op.first_event, op.end_event, true});
        prev = std::max(prev, op.end_event);
    }
    if (prev < t.size())
        out.push_back({hashText("(after the last op)"), prev, static_cast<std::uint32_t>(t.size()), false});
    return out;
}

// Allocations of one segment and their tokens: innermost op, and whether they die inside the segment.
void allocsOf(const Trace& t, const Segment& s, std::vector<std::uint32_t>& events, std::vector<std::uint64_t>& tokens)
{
    events.clear();
    tokens.clear();
    for (auto i = s.begin; i < s.end; ++i) {
        if (t.action[i] != Action::Alloc)
            continue;
        bool temporary = t.partner[i] != kNoPartner && static_cast<std::uint32_t>(t.partner[i]) < s.end;
        events.push_back(i);
        tokens.push_back(hashText(t.strings.at(t.inner_op[i])) * 2 + (temporary ? 1 : 0));
    }
}

} // namespace

SizeFit fitSizes(const RawRun& r1, std::int64_t b1, const RawRun& r2, std::int64_t b2, int power)
{
    const auto& t1 = r1.trace;
    const auto& t2 = r2.trace;
    SizeFit fit;
    fit.slope.assign(t2.size(), 0.0);
    fit.intercept.resize(t2.size());
    for (std::size_t i = 0; i < t2.size(); ++i)
        fit.intercept[i] = static_cast<double>(t2.bytes[i]);
    std::vector<char> fitted(t2.size(), 0);
    const double db = static_cast<double>(b2 - b1);

    auto seg1 = segmentsOf(r1);
    auto seg2 = segmentsOf(r2);
    std::vector<std::uint64_t> keys1, keys2;
    for (const auto& s : seg1)
        keys1.push_back(s.key);
    for (const auto& s : seg2)
        keys2.push_back(s.key);
    fit.ops = r2.ops.size();

    std::vector<std::uint32_t> ev1, ev2;
    std::vector<std::uint64_t> tok1, tok2;
    for (auto [i, j] : alignTokens(keys1, keys2)) {
        if (seg2[j].op)
            ++fit.matched_ops;
        allocsOf(t1, seg1[i], ev1, tok1);
        allocsOf(t2, seg2[j], ev2, tok2);
        auto match = [&](std::uint32_t e1, std::uint32_t e2) {
            double slope = static_cast<double>(t2.bytes[e2] - t1.bytes[e1]) / db;
            fit.slope[e2] = slope;
            fit.intercept[e2] = static_cast<double>(t2.bytes[e2]) - slope * static_cast<double>(b2);
            fitted[e2] = 1;
        };
        std::vector<char> used1(ev1.size(), 0);
        for (auto [p, q] : alignTokens(tok1, tok2, 256)) {
            match(ev1[p], ev2[q]);
            used1[p] = 1;
        }
        // The same op may switch kernels between batch sizes (addmm at batch 1, a copy and mm at 2): align
        // what is left by lifetime alone, and keep a pair only if its sizes could belong to one tensor,
        // from constant (s2 == s1) to growing with the batch (s2 == s1 * b2 / b1).
        std::vector<std::uint32_t> rest1, rest2;
        std::vector<std::uint64_t> life1, life2;
        for (std::size_t p = 0; p < ev1.size(); ++p)
            if (!used1[p]) {
                rest1.push_back(ev1[p]);
                life1.push_back(tok1[p] & 1);
            }
        for (std::size_t q = 0; q < ev2.size(); ++q)
            if (!fitted[ev2[q]]) {
                rest2.push_back(ev2[q]);
                life2.push_back(tok2[q] & 1);
            }
        if (rest1.empty() || rest2.empty())
            continue;
        for (auto [p, q] : alignTokens(life1, life2, 256)) {
            auto s1 = t1.bytes[rest1[p]], s2 = t2.bytes[rest2[q]];
            if (s2 >= s1
                && static_cast<double>(s2) * std::pow(static_cast<double>(b1), power)
                    <= static_cast<double>(s1) * std::pow(static_cast<double>(b2), power))
                match(rest1[p], rest2[q]);
        }
    }

    // Allocations only the larger run made.
    std::unordered_map<std::int64_t, std::uint32_t> fittedBySize;
    for (const auto& s : seg2) {
        fittedBySize.clear();
        for (auto i = s.begin; i < s.end; ++i)
            if (fitted[i] && t2.action[i] == Action::Alloc)
                fittedBySize.emplace(t2.bytes[i], i);
        for (auto i = s.begin; i < s.end; ++i) {
            if (t2.action[i] != Action::Alloc)
                continue;
            ++fit.allocs;
            fit.bytes += t2.bytes[i];
            if (fitted[i]) {
                ++fit.matched_allocs;
                fit.matched_bytes += t2.bytes[i];
                continue;
            }
            auto sibling = fittedBySize.find(t2.bytes[i]);
            if (sibling != fittedBySize.end()) {
                fit.slope[i] = fit.slope[sibling->second];
                fit.intercept[i] = fit.intercept[sibling->second];
            } else {
                fit.slope[i] = static_cast<double>(t2.bytes[i]) / static_cast<double>(b2);
                fit.intercept[i] = 0.0;
            }
        }
    }
    for (std::size_t i = 0; i < t2.size(); ++i) {
        if (t2.action[i] == Action::Free && t2.partner[i] != kNoPartner) {
            auto p = static_cast<std::size_t>(t2.partner[i]);
            fit.slope[i] = fit.slope[p];
            fit.intercept[i] = fit.intercept[p];
        }
    }
    return fit;
}

SizeFit fitSizesQuadratic(const RawRun& r1, std::int64_t x1, const RawRun& r2, std::int64_t x2, const RawRun& r3,
    std::int64_t x3, std::vector<double>& quad)
{
    auto f13 = fitSizes(r1, x1, r3, x3, 2);
    auto f23 = fitSizes(r2, x2, r3, x3, 2);
    // The size of each event of r3 at x1 (from its line to r1), at x2 (from its line to r2) and at x3, and the
    // parabola through the three.
    SizeFit fit = f23;
    quad.assign(r3.trace.size(), 0.0);
    const double a = static_cast<double>(x1), b = static_cast<double>(x2), c = static_cast<double>(x3);
    for (std::size_t i = 0; i < r3.trace.size(); ++i) {
        double v1 = f13.slope[i] * a + f13.intercept[i];
        double v2 = f23.slope[i] * b + f23.intercept[i];
        double v3 = f23.slope[i] * c + f23.intercept[i];
        double d12 = (v2 - v1) / (b - a), d23 = (v3 - v2) / (c - b);
        double q = (d23 - d12) / (c - a);
        double s = d12 - q * (a + b);
        quad[i] = q;
        fit.slope[i] = s;
        fit.intercept[i] = v1 - q * a * a - s * a;
    }
    fit.matched_allocs = std::min(f13.matched_allocs, f23.matched_allocs);
    fit.matched_bytes = std::min(f13.matched_bytes, f23.matched_bytes);
    fit.matched_ops = std::min(f13.matched_ops, f23.matched_ops);
    return fit;
}

} // namespace memledger
