#include "whatif/whatif.h"

#include "support/dtype.h"
#include "support/errors.h"
#include "support/format.h"

#include <algorithm>
#include <chrono>

#include <nlohmann/json.hpp>

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
    constexpr double kMeasureSeconds = 30.0;
    const auto started = std::chrono::steady_clock::now();
    auto timeLeft = [&] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count() < kMeasureSeconds;
    };
    for (const auto& dtype : dtypes) {
        const auto first = t.predictions.size();
        for (auto batch : rows) {
            auto p = w.predict(batch, dtype, true, budget);
            // Where the two records did not line up, a prediction is a guess: run it instead.
            const bool check = !p.reliable && p.runnable && model && w.isRecorded(dtype);
            if (check && !timeLeft())
                p.notes.push_back(dtype + ", " + word + std::to_string(batch)
                    + ": not measured: the table's half minute for measurements was spent");
            else if (check) {
                try {
                    p = w.measure(*model, batch, dtype, budget);
                } catch (const RunError& e) {
                    p.notes.push_back(dtype + ", " + word + std::to_string(batch) + ": could not be measured: " + e.what());
                }
            }
            t.predictions.push_back(std::move(p));
        }
        if (budget <= 0)
            continue;
        // The largest size that fits, and every row's verdict from it: a row fits when it is runnable, fits by
        // its own figures and lies at or below the largest. A row that does not fit by its own figures below
        // that largest lowers it, so that the rows and the summary never disagree.
        auto n = w.maxBatch(dtype, budget);
        for (std::size_t i = first; i < t.predictions.size(); ++i) {
            const auto& p = t.predictions[i];
            const auto x = xOf(p);
            if (!fitsWithin(p, budget) && x <= n && x >= t.runnable.min)
                n = w.maxBatch(dtype, budget, true, x - 1);
        }
        for (std::size_t i = first; i < t.predictions.size(); ++i) {
            auto& p = t.predictions[i];
            const auto x = xOf(p);
            const bool own = fitsWithin(p, budget);
            p.fits = own && x <= n;
            if (own && x > n)
                p.notes.push_back(dtype + ", " + word + std::to_string(x) + ": not called fits: " + word
                    + std::to_string(n + 1) + ", smaller, does not fit (the simulated fragmentation is not monotone)");
            else if (p.out_of_memory && p.runnable)
                p.notes.push_back(dtype + ", " + word + std::to_string(x) + ": out of memory on a device of "
                    + formatBytes(budget) + ", after the allocator released its cached blocks");
        }
        t.max_batch.emplace_back(dtype, n);
        if (t.axis == WhatIfAxis::Seq)
            t.max_seq_batch.push_back(w.predict(std::max<std::int64_t>(1, t.runnable.min), dtype, false).batch);
        // Confirmed by a real run where the machine can make it (within the records' reach, recorded
        // dtype); otherwise the figure says how it is known.
        FigureMethod how = n >= 1 && w.predict(n, dtype, false).extrapolated ? FigureMethod::Extrapolated : FigureMethod::Predicted;
        if (model && n >= 1 && how == FigureMethod::Predicted && w.isRecorded(dtype) && timeLeft()) {
            try {
                auto m = w.measure(*model, n, dtype, budget);
                if (m.measured_peak_total_bytes && *m.measured_peak_total_bytes <= budget)
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

nlohmann::json predictionToJson(const Prediction& p)
{
    nlohmann::json j = {
        {"batch", p.batch},
        {"dtype", p.dtype},
        {"method", nameOf(p.method)},
        {"predicted_peak_bytes", p.predicted_peak_bytes},
        {"predicted_peak_total_bytes", p.predicted_peak_total_bytes},
        {"predicted_reserved_bytes", p.predicted_reserved_bytes},
        {"weight_bytes", p.weight_bytes},
        {"input_bytes", p.input_bytes},
        {"reliable", p.reliable},
        {"extrapolated", p.extrapolated},
        {"runnable", p.runnable},
        {"notes", p.notes},
    };
    if (!p.runnable)
        j["not_runnable"] = p.not_runnable;
    if (p.capacity_bytes > 0) {
        j["capacity_bytes"] = p.capacity_bytes;
        j["out_of_memory"] = p.out_of_memory;
    }
    if (p.seq > 0)
        j["seq"] = p.seq;
    if (p.gpus > 0) { // one rank of a data-parallel job
        j["gpus"] = p.gpus;
        j["shard"] = p.shard;
        j["master_dtype"] = p.master_dtype;
        j["gradient_bytes"] = p.gradient_bytes;
        j["optimizer_state_bytes"] = p.optimizer_state_bytes;
    }
    auto& ledgers = j["ledgers_at_peak"] = nlohmann::json::object();
    for (int l = 0; l < kLedgerCount; ++l)
        ledgers[ledgerName(static_cast<Ledger>(l))] = p.ledgers_at_peak[static_cast<std::size_t>(l)];
    if (p.measured_peak_bytes)
        j["measured_peak_bytes"] = *p.measured_peak_bytes;
    if (p.measured_peak_total_bytes)
        j["measured_peak_total_bytes"] = *p.measured_peak_total_bytes;
    if (p.error_percent)
        j["error_percent"] = *p.error_percent;
    return j;
}

nlohmann::json whatIfToJson(const WhatIfTable& t)
{
    nlohmann::json j = {{"format", "memledger-whatif"}, {"version", 1},
        {"recorded_batches", t.recorded_batches.empty() ? std::vector<std::int64_t> {t.recorded_batch1, t.recorded_batch2}
                                                         : t.recorded_batches},
        {"mode", nameOf(t.mode)}, {"axis", nameOf(t.axis)}};
    if (t.device != "cpu")
        j["device"] = t.device;
    if (t.runnable.bounded()) // the sizes the model accepts along the axis, and what bounds them
        j["runnable"] = {{"min", t.runnable.min}, {"max", t.runnable.max}, {"why", t.runnable.why}};
    auto& rows = j["predictions"] = nlohmann::json::array();
    for (const auto& p : t.predictions) {
        auto row = predictionToJson(p);
        if (t.budget_bytes > 0)
            row["fits"] = t.fits(p);
        rows.push_back(std::move(row));
    }
    if (t.axis == WhatIfAxis::Seq) { // sequence lengths: recorded at, and the longest within the budget per batch
        j["recorded_seqs"] = j["recorded_batches"];
        j.erase("recorded_batches");
        if (t.budget_bytes > 0) {
            j["budget_bytes"] = t.budget_bytes;
            auto& ms = j["max_seq"] = nlohmann::json::array();
            for (std::size_t i = 0; i < t.max_batch.size(); ++i)
                ms.push_back({{"dtype", t.max_batch[i].first}, {"seq", t.max_batch[i].second},
                    {"batch", i < t.max_seq_batch.size() ? t.max_seq_batch[i] : 0},
                    {"method", i < t.max_batch_method.size() ? nameOf(t.max_batch_method[i].second) : nameOf(FigureMethod::Predicted)}});
        }
    } else if (t.budget_bytes > 0) {
        j["budget_bytes"] = t.budget_bytes;
        auto& mb = j["max_batch"] = nlohmann::json::object();
        for (const auto& [dtype, n] : t.max_batch)
            mb[dtype] = n;
        auto& how = j["max_batch_method"] = nlohmann::json::object();
        for (const auto& [dtype, method] : t.max_batch_method)
            how[dtype] = nameOf(method);
    }
    return j;
}

WhatIfTable whatIfFromJson(const nlohmann::json& j)
{
    WhatIfTable t;
    t.budget_bytes = j.value("budget_bytes", std::int64_t {0});
    if (j.contains("recorded_batches") && j["recorded_batches"].size() >= 2) {
        t.recorded_batches = j["recorded_batches"].get<std::vector<std::int64_t>>();
        t.recorded_batch1 = t.recorded_batches.front();
        t.recorded_batch2 = t.recorded_batches.back();
    }
    t.mode = fromName(j.value("mode", "inference"), RunMode::Inference);
    t.axis = fromName(j.value("axis", "batch"), WhatIfAxis::Batch);
    t.device = j.value("device", "cpu");
    if (j.contains("runnable") && j["runnable"].is_object()) {
        t.runnable.min = j["runnable"].value("min", std::int64_t {1});
        t.runnable.max = j["runnable"].value("max", t.runnable.max);
        t.runnable.why = j["runnable"].value("why", std::string());
    }
    if (j.contains("recorded_seqs") && j["recorded_seqs"].size() >= 2) {
        t.recorded_batches = j["recorded_seqs"].get<std::vector<std::int64_t>>();
        t.recorded_batch1 = t.recorded_batches.front();
        t.recorded_batch2 = t.recorded_batches.back();
    }
    if (j.contains("max_seq") && j["max_seq"].is_array())
        for (const auto& m : j["max_seq"]) {
            t.max_batch.emplace_back(m.at("dtype").get<std::string>(), m.at("seq").get<std::int64_t>());
            t.max_batch_method.emplace_back(
                m.at("dtype").get<std::string>(), fromName(m.value("method", "predicted"), FigureMethod::Predicted));
            t.max_seq_batch.push_back(m.value("batch", std::int64_t {0}));
        }
    for (const auto& row : j.at("predictions")) {
        Prediction p;
        p.batch = row.at("batch").get<std::int64_t>();
        p.seq = row.value("seq", std::int64_t {0});
        p.dtype = row.at("dtype").get<std::string>();
        p.method = fromName(row.value("method", "predicted"), FigureMethod::Predicted);
        p.predicted_peak_bytes = row.at("predicted_peak_bytes").get<std::int64_t>();
        p.predicted_peak_total_bytes = row.at("predicted_peak_total_bytes").get<std::int64_t>();
        p.predicted_reserved_bytes = row.value("predicted_reserved_bytes", std::int64_t {0});
        p.weight_bytes = row.value("weight_bytes", std::int64_t {0});
        p.input_bytes = row.value("input_bytes", std::int64_t {0});
        p.reliable = row.value("reliable", true);
        p.extrapolated = row.value("extrapolated", false);
        p.runnable = row.value("runnable", true);
        p.not_runnable = row.value("not_runnable", std::string());
        p.capacity_bytes = row.value("capacity_bytes", std::int64_t {0});
        p.out_of_memory = row.value("out_of_memory", false);
        if (row.contains("fits") && row["fits"].is_boolean())
            p.fits = row["fits"].get<bool>();
        p.notes = row.value("notes", std::vector<std::string> {});
        if (row.contains("ledgers_at_peak"))
            for (int l = 0; l < kLedgerCount; ++l)
                p.ledgers_at_peak[static_cast<std::size_t>(l)]
                    = row["ledgers_at_peak"].value(ledgerName(static_cast<Ledger>(l)), std::int64_t {0});
        if (row.contains("measured_peak_bytes"))
            p.measured_peak_bytes = row["measured_peak_bytes"].get<std::int64_t>();
        if (row.contains("measured_peak_total_bytes"))
            p.measured_peak_total_bytes = row["measured_peak_total_bytes"].get<std::int64_t>();
        if (row.contains("error_percent"))
            p.error_percent = row["error_percent"].get<double>();
        t.predictions.push_back(std::move(p));
    }
    if (j.contains("max_batch") && j["max_batch"].is_object())
        for (const auto& [dtype, n] : j["max_batch"].items())
            t.max_batch.emplace_back(dtype, n.get<std::int64_t>());
    if (j.contains("max_batch_method") && j["max_batch_method"].is_object())
        for (const auto& [dtype, m] : j["max_batch_method"].items())
            t.max_batch_method.emplace_back(dtype, fromName(m.get<std::string>(), FigureMethod::Predicted));
    return t;
}

} // namespace memledger
