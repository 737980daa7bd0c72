#include "report/whatif_table.h"

#include "support/format.h"

#include <algorithm>
#include <cctype>

namespace memledger {

void SizeRange::narrow(std::int64_t lo, std::int64_t hi, const std::string& reason)
{
    if (lo <= min && hi >= max)
        return;
    min = std::max(min, lo);
    max = std::min(max, hi);
    why = reason;
}

std::string SizeRange::text() const
{
    if (min == max)
        return std::to_string(min);
    return std::to_string(min) + ".."
        + (max == std::numeric_limits<std::int64_t>::max() ? std::string("inf") : std::to_string(max));
}

DeviceOverheads DeviceOverheads::estimates()
{
    // Outside PyTorch's allocator: estimates, said as such.
    constexpr std::int64_t kMiB = std::int64_t {1} << 20;
    DeviceOverheads o;
    o.cuda_context_bytes = 512 * kMiB;
    o.cuda_context_source = "estimate: the CUDA context with lazy module loading (CUDA 12, the default since 11.7) "
                            "takes 0.3-0.6 GiB of an H100 or A100 before PyTorch allocates anything";
    o.nccl_bytes = 512 * kMiB;
    o.nccl_source = "estimate: NCCL's communicator buffers, NCCL_BUFFSIZE (4 MiB) per channel and peer over up to "
                    "32 channels on an NVLink node, on more than one GPU";
    return o;
}

bool fitsWithin(const Prediction& p, std::int64_t budget)
{
    if (budget <= 0 || !p.runnable || p.out_of_memory)
        return false;
    return p.peakTotal() <= budget && p.predicted_reserved_bytes <= budget;
}

bool WhatIfTable::fits(const Prediction& p) const
{
    return budget_bytes > 0 && p.fits.value_or(fitsWithin(p, allocatorBudget()));
}

std::string WhatIfTable::fitsText(const Prediction& p) const
{
    if (!p.runnable)
        return "cannot run";
    if (fits(p))
        return "yes";
    return p.out_of_memory ? "no (out of memory)" : "no";
}

std::string WhatIfTable::allocatorText() const
{
    if (budget_bytes <= 0)
        return {};
    return formatBytes(allocatorBudget()) + " to PyTorch's allocator (the CUDA context's "
        + formatBytes(overheads.cuda_context_bytes) + " off: an estimate)";
}

std::string WhatIfTable::budgetText() const
{
    auto bytes = formatBytes(budget_bytes);
    // A size in powers of 1024 reads as its bytes do; "80GB" (powers of 1000) and a GPU's name keep what was typed.
    std::string unit;
    for (char c : budget_text)
        if (std::isalpha(static_cast<unsigned char>(c)))
            unit += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const bool binary = parseBytes(budget_text).has_value() && parseBytes(budget_text) == parseBudget(budget_text)
        && (unit.empty() || unit == "b" || unit.size() == 1 || (unit.size() == 3 && unit.substr(1) == "ib"));
    return budget_text.empty() || binary ? bytes : budget_text + " (" + bytes + ")";
}

std::string WhatIfTable::largestText(std::int64_t n)
{
    return n <= 0 ? "none" : n >= 1000000 ? ">= 1000000" : std::to_string(n);
}

std::string WhatIfTable::largestMethodText(std::size_t i) const
{
    if (i >= max_batch.size() || max_batch[i].second <= 0 || i >= max_batch_method.size())
        return {};
    switch (max_batch_method[i].second) {
    case FigureMethod::Measured:
        return " (measured: a run at it fits)";
    case FigureMethod::Extrapolated:
        return " (extrapolated beyond the records: rough)";
    case FigureMethod::Predicted:
        return " (interpolated between records)";
    case FigureMethod::Estimate:
        return " (estimated)";
    }
    return {};
}

std::string GpuFitAnswer::microBatchText(std::int64_t microBatch) const
{
    return WhatIfTable::largestText(microBatch) + (microBatch > 0 && extrapolated(microBatch) ? "*" : "");
}

std::string GpuFitTable::extrapolatedLegend() const
{
    std::vector<std::string> records; // each precision's last record once
    for (const auto& a : answers) {
        bool marked = false;
        for (const auto& [n, b] : a.largest)
            marked = marked || (b > 0 && a.extrapolated(b));
        const auto item = a.precision + " at micro-batch " + std::to_string(a.last_record);
        if (marked && std::find(records.begin(), records.end(), item) == records.end())
            records.push_back(item);
    }
    if (records.empty())
        return {};
    std::string list;
    for (std::size_t i = 0; i < records.size(); ++i)
        list += (i == 0 ? "" : ", ") + records[i];
    return "*: beyond the last record of its precision (" + list
        + "): extrapolated from the last two records, not interpolated between records";
}

} // namespace memledger
