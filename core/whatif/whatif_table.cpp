#include "whatif/whatif.h"
#include "whatif/whatif_policy.h"

#include "support/dtype.h"
#include "support/errors.h"
#include "support/format.h"

#include <algorithm>
#include <chrono>


namespace memledger {

std::pair<std::int64_t, std::int64_t> recordedBatchesFor(RunMode mode)
{
    return mode == RunMode::Train ? std::make_pair(std::int64_t {2}, std::int64_t {4})
                           : std::make_pair(std::int64_t {1}, std::int64_t {2});
}

WhatIfTable makeWhatIfTable(const WhatIf& w, const std::vector<std::int64_t>& batches,
    const std::vector<std::string>& dtypes, std::int64_t budget, Model* model)
{
    WhatIfTable t;
    t.budget_bytes = budget;
    // Every row is judged on the allocator's share of the budget (DeviceOverheads: the one rule).
    if (budget > 0)
        t.overheads = DeviceOverheads::estimates();
    const std::int64_t share = t.allocatorBudget();
    t.recorded_batch1 = w.batch1();
    t.recorded_batch2 = w.batch2();
    t.recorded_batches = w.recordedBatches();
    t.mode = w.mode();
    t.axis = w.axis();
    t.device = w.device();
    t.runnable = w.runnableRange();
    // The rows of each precision in increasing order, so that "fits" once lost is never given back.
    std::vector<std::int64_t> rows = batches;
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    const char* word = t.axis == WhatIfAxis::Seq ? "sequence " : "batch ";
    auto xOf = [&](const Prediction& p) { return t.axis == WhatIfAxis::Seq ? p.seq : p.batch; };
    // Runs that check a figure share half a minute: beyond it the figure stays predicted and says so, so that a
    // table is made within a minute on this machine whatever its rows.
    // With records counted (MEMLEDGER_RECORD_BUDGET), as many runs as that count instead.
    constexpr double kMeasureSeconds = 30.0;
    const auto started = std::chrono::steady_clock::now();
    const int counted = countedRecordBudget();
    int checks = 0;
    auto timeLeft = [&] {
        if (counted >= 0)
            return checks++ < counted;
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count() < kMeasureSeconds;
    };
    for (const auto& dtype : dtypes) {
        const auto first = t.predictions.size();
        if (!w.hasPrecision(dtype)) { // a mixed precision this machine cannot run
            for (auto batch : rows) {
                Prediction p;
                (t.axis == WhatIfAxis::Seq ? p.seq : p.batch) = batch;
                p.dtype = dtype;
                p.runnable = false;
                p.fits = false;
                p.not_runnable = dtype + " could not be recorded here (the what-if's notes say why)";
                t.predictions.push_back(p);
            }
            continue;
        }
        for (auto batch : rows) {
            auto p = w.predict(batch, dtype, true, share);
            // Where the two records did not line up, a prediction is a guess: run it instead.
            const bool check = !p.reliable && p.runnable && model && w.isRecorded(dtype);
            if (check && !timeLeft())
                p.notes.push_back(dtype + ", " + word + std::to_string(batch)
                    + (counted >= 0 ? ": not measured: the table's " + std::to_string(counted)
                                      + " measurements (MEMLEDGER_RECORD_BUDGET) were made"
                                    : std::string(": not measured: the table's half minute for measurements was spent")));
            else if (check) {
                try {
                    p = w.measure(*model, batch, dtype, share);
                } catch (const RunError& e) {
                    p.notes.push_back(dtype + ", " + word + std::to_string(batch) + ": could not be measured: " + e.what());
                }
            }
            t.predictions.push_back(std::move(p));
        }
        if (share <= 0) // no budget
            continue;
        // The largest size that fits, and every row's verdict from it: a row fits when it is runnable, fits by
        // its own figures and lies at or below the largest. A row that does not fit by its own figures below
        // that largest lowers it, so that the rows and the summary never disagree.
        auto n = w.maxBatch(dtype, share);
        for (std::size_t i = first; i < t.predictions.size(); ++i) {
            const auto& p = t.predictions[i];
            const auto x = xOf(p);
            if (!fitsWithin(p, share) && x <= n && x >= t.runnable.min)
                n = w.maxBatch(dtype, share, true, x - 1);
        }
        for (std::size_t i = first; i < t.predictions.size(); ++i) {
            auto& p = t.predictions[i];
            const auto x = xOf(p);
            const bool own = fitsWithin(p, share);
            p.fits = own && x <= n;
            if (own && x > n)
                p.notes.push_back(dtype + ", " + word + std::to_string(x) + ": not called fits: " + word
                    + std::to_string(n + 1) + ", smaller, does not fit (the simulated fragmentation is not monotone)");
            else if (p.out_of_memory && p.runnable)
                p.notes.push_back(dtype + ", " + word + std::to_string(x) + ": out of memory with "
                    + formatBytes(share) + " to the allocator, after it released its cached blocks");
        }
        t.max_batch.emplace_back(dtype, n);
        if (t.axis == WhatIfAxis::Seq)
            t.max_seq_batch.push_back(w.predict(std::max<std::int64_t>(1, t.runnable.min), dtype, false).batch);
        // Confirmed by a real run where the machine can make it (within the records' reach, recorded
        // dtype); otherwise the figure says how it is known.
        FigureMethod how = n >= 1 && w.predict(n, dtype, false).extrapolated ? FigureMethod::Extrapolated : FigureMethod::Predicted;
        if (model && n >= 1 && how == FigureMethod::Predicted && w.isRecorded(dtype) && timeLeft()) {
            try {
                auto m = w.measure(*model, n, dtype, share);
                if (m.measured_peak_total_bytes && *m.measured_peak_total_bytes <= share)
                    how = FigureMethod::Measured;
            } catch (const RunError&) {
            }
        }
        t.max_batch_method.emplace_back(dtype, how);
    }
    // A narrower precision predicted above a wider one at the same row, with no run that shows it: the narrower
    // one's records end sooner and its fit carried a jump on. Said, and marked rough.
    for (auto& narrow : t.predictions)
        for (const auto& wide : t.predictions) {
            if (narrow.batch != wide.batch || narrow.seq != wide.seq || dtypeSize(narrow.dtype) >= dtypeSize(wide.dtype)
                || narrow.method == FigureMethod::Measured || !narrow.runnable)
                continue;
            if (narrow.peakTotal() <= wide.peakTotal())
                continue;
            narrow.reliable = false;
            narrow.notes.push_back(narrow.dtype + ", " + word + std::to_string(xOf(narrow)) + ": predicted above "
                + wide.dtype + " (" + formatBytes(narrow.peakTotal()) + " against " + formatBytes(wide.peakTotal())
                + ") with no record that shows why: rough; measure instead");
        }
    return t;
}

} // namespace memledger
