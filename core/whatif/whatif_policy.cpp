#include "whatif/whatif_policy.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <stdexcept>

namespace memledger {

namespace {

constexpr double kSecondsPerRecord = 60.0; // a warm-up and a recorded run: about a minute
constexpr double kSecondsInAll = 60.0; // the records beyond the first two of each precision, all precisions
constexpr std::int64_t kLongestSequence = std::int64_t {1} << 16;
constexpr double kSecondsReaching = 120.0; // no further round of records toward an answer once this is spent
// With records counted (MEMLEDGER_RECORD_BUDGET), each record's predicted peak total stays within this instead of a
// quarter of this machine's memory and a minute: the same bound on every machine, and a record's time with it.
constexpr std::int64_t kCountedRecordBytes = std::int64_t {1} << 30;

} // namespace

int countedRecordBudget()
{
    const char* text = std::getenv("MEMLEDGER_RECORD_BUDGET");
    if (!text || !*text)
        return -1;
    char* end = nullptr;
    errno = 0;
    const long n = std::strtol(text, &end, 10);
    if (*end != '\0' || errno != 0 || n < 0 || n > 1000)
        throw std::invalid_argument(std::string("MEMLEDGER_RECORD_BUDGET='") + text
            + "' is not a count of records (0 to 1000); unset it to record within about a minute instead");
    return static_cast<int>(n);
}

std::vector<std::string> whatIfDtypes(const std::vector<std::string>& asked)
{
    return asked.empty() ? std::vector<std::string> {"float32", "bfloat16", "float16"} : asked;
}

std::vector<std::string> windowWhatIfDtypes(RunMode mode)
{
    auto dtypes = whatIfDtypes({});
    if (mode == RunMode::Train) { // one device's mixed precision (autocast), and FSDP's (gpu_fit.h)
        dtypes.push_back("bfloat16-mixed");
        dtypes.push_back(fsdpRecordPrecision("bfloat16"));
    }
    return dtypes;
}

std::vector<std::int64_t> whatIfRows(const WhatIfRequest& request)
{
    const bool seq = request.axis == WhatIfAxis::Seq;
    std::vector<std::int64_t> rows = request.rows;
    if (rows.empty())
        rows = seq ? std::vector<std::int64_t> {512, 1024, 2048, 4096, 8192} : std::vector<std::int64_t> {1, 8, 32, 64, 128};
    if (auto current = seq ? request.current_seq : request.current_batch; current > 0)
        rows.push_back(current);
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    return rows;
}

WhatIfRequest withRow(WhatIfRequest request, std::int64_t x)
{
    request.rows = whatIfRows(request);
    request.rows.push_back(x);
    return request;
}

WhatIf::Plan whatIfPlan(const WhatIfRequest& request,
    std::function<void(const std::string& dtype, std::int64_t x, int done)> progress)
{
    WhatIf::Plan plan;
    plan.wanted = whatIfRows(request);
    if (request.axis == WhatIfAxis::Seq)
        // Along the sequence without rows asked for: as long as this machine runs it (the panel's slider).
        plan.largest = request.rows.empty() ? kLongestSequence : std::min(plan.wanted.back(), kLongestSequence);
    else
        plan.largest = plan.wanted.back();
    plan.beyond_records = request.rows.empty() || request.budget > 0;
    plan.seconds_budget = kSecondsPerRecord;
    plan.total_seconds_budget = kSecondsInAll;
    plan.record_count_budget = countedRecordBudget();
    // A quarter of this machine's memory; records counted: kCountedRecordBytes.
    plan.memory_budget = plan.record_count_budget >= 0 ? kCountedRecordBytes : 0;
    plan.progress = std::move(progress);
    return plan;
}

WhatIf recordWhatIf(Model& model, RunOptions base, const WhatIfRequest& request,
    std::function<void(const std::string& dtype, std::int64_t x, int done)> progress,
    std::function<void(const WhatIf& first)> first)
{
    auto plan = whatIfPlan(request, std::move(progress));
    plan.first_records = std::move(first);
    const auto dtypes = whatIfDtypes(request.dtypes);
    if (request.axis == WhatIfAxis::Seq) {
        if (request.current_batch > 0)
            base.batch = request.current_batch;
        return WhatIf::recordSeqPlanned(model, std::move(base), dtypes, plan);
    }
    base.batch.reset();
    return WhatIf::recordPlanned(model, std::move(base), dtypes, plan);
}

std::int64_t recordsToReach(std::int64_t answer, std::int64_t lastRecord, const SizeRange& range)
{
    const auto past = std::min(answer + 1, range.max);
    if (answer <= 0 || lastRecord <= 0 || past <= lastRecord)
        return 0;
    return std::min(past + answer / 8, range.max);
}

std::int64_t budgetRecordsWanted(const WhatIf& w, const std::vector<std::string>& dtypes, std::int64_t budget)
{
    std::int64_t wanted = 0;
    const auto share = DeviceOverheads::estimates().allocatorShare(budget);
    for (const auto& d : dtypes)
        if (w.hasPrecision(d) && w.isRecorded(d))
            wanted = std::max(wanted, recordsToReach(w.maxBatch(d, share), w.lastRecord(d), w.runnableRange()));
    return wanted;
}

WhatIf recordWhatIfReaching(Model& model, RunOptions base, WhatIfRequest request,
    const std::function<std::int64_t(const WhatIf&)>& wanted,
    std::function<void(const std::string& dtype, std::int64_t x, int done)> progress,
    std::function<void(const WhatIf& first)> first)
{
    const auto started = std::chrono::steady_clock::now();
    ReusedRecords reuse; // a further round's records of the first round's sizes are not run again
    auto w = recordWhatIf(model, base, request, progress, std::move(first));
    const auto dtypes = whatIfDtypes(request.dtypes);
    const bool counted = countedRecordBudget() >= 0; // each round within its own count: no time bar
    for (int round = 0; round < 2; ++round) {
        if (!counted
            && std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count() > kSecondsReaching)
            break;
        const auto x = wanted(w);
        if (x == 0)
            break;
        request = withRow(request, x);
        auto further = recordWhatIf(model, base, request, progress);
        // Each precision recorded beyond where it was takes the new records; the others keep theirs (the records
        // of one precision share a minute with the others'). None reached `x`: this machine's memory or time for
        // one record ended them, and another round would stop at the same place.
        bool reached = false;
        for (const auto& d : dtypes)
            reached = reached || further.lastRecord(d) >= x;
        if (!w.keepFurthest(further) || !reached)
            break;
    }
    return w;
}

WhatIf recordWhatIfForBudget(Model& model, RunOptions base, const WhatIfRequest& request,
    std::function<void(const std::string& dtype, std::int64_t x, int done)> progress)
{
    if (request.axis != WhatIfAxis::Batch || request.budget <= 0)
        return recordWhatIf(model, std::move(base), request, std::move(progress));
    const auto dtypes = whatIfDtypes(request.dtypes);
    return recordWhatIfReaching(model, std::move(base), request,
        [&](const WhatIf& w) { return budgetRecordsWanted(w, dtypes, request.budget); }, std::move(progress));
}

WhatIfTable whatIfTableFor(const WhatIf& w, const WhatIfRequest& request, Model* model)
{
    return makeWhatIfTable(w, whatIfRows(request), whatIfDtypes(request.dtypes), request.budget, model);
}

void keepNotesOf(const std::vector<std::string>& dtypes, std::vector<std::string>& notes)
{
    notes.erase(std::remove_if(notes.begin(), notes.end(),
                    [&](const std::string& n) {
                        for (const char* d : {"float32", "bfloat16", "float16"})
                            if (n.rfind(std::string(d) + ":", 0) == 0)
                                return std::find(dtypes.begin(), dtypes.end(), d) == dtypes.end();
                        return false;
                    }),
        notes.end());
}

} // namespace memledger
