#include "exports/whatif_export.h"

#include "support/format.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <sstream>

namespace memledger {

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
    if (p.checkpoint != "none")
        j["checkpoint"] = p.checkpoint;
    if (p.gpus > 0) { // one rank of a data-parallel job
        j["gpus"] = p.gpus;
        j["shard"] = p.shard;
        j["master_dtype"] = p.master_dtype;
        j["gradient_bytes"] = p.gradient_bytes;
        j["optimizer_state_bytes"] = p.optimizer_state_bytes;
        j["host_bytes"] = p.host_bytes; // offloaded to the host (0: none)
        j["host_bytes_per_node"] = p.host_bytes_per_node;
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
    if (t.budget_bytes > 0) { // the budget, and the allocator's share that judges the rows (DeviceOverheads)
        j["budget_bytes"] = t.budget_bytes;
        j["cuda_context_bytes"] = t.overheads.cuda_context_bytes;
        j["cuda_context_source"] = t.overheads.cuda_context_source;
        j["allocator_budget_bytes"] = t.allocatorBudget();
    }
    if (t.axis == WhatIfAxis::Seq) { // sequence lengths: recorded at, and the longest within the budget per batch
        j["recorded_seqs"] = j["recorded_batches"];
        j.erase("recorded_batches");
        if (t.budget_bytes > 0) {
            auto& ms = j["max_seq"] = nlohmann::json::array();
            for (std::size_t i = 0; i < t.max_batch.size(); ++i)
                ms.push_back({{"dtype", t.max_batch[i].first}, {"seq", t.max_batch[i].second},
                    {"batch", i < t.max_seq_batch.size() ? t.max_seq_batch[i] : 0},
                    {"method", i < t.max_batch_method.size() ? nameOf(t.max_batch_method[i].second) : nameOf(FigureMethod::Predicted)}});
        }
    } else if (t.budget_bytes > 0) {
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
    // A table written before the rule judged the whole budget: no context comes off it.
    t.overheads.cuda_context_bytes = j.value("cuda_context_bytes", std::int64_t {0});
    t.overheads.cuda_context_source = j.value("cuda_context_source", std::string());
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

std::string whatIfToText(const WhatIfTable& table)
{
    auto cell = [](const std::string& t, std::size_t width) {
        return t.size() >= width ? t + " " : t + std::string(width - t.size(), ' ');
    };
    const auto budget = table.budget_bytes;
    std::ostringstream out;
    const bool seq = table.axis == WhatIfAxis::Seq;
    const std::size_t methodWidth = table.device == "meta" ? 18 : 11; // "computed on meta"
    std::size_t dtypeWidth = 10; // "bfloat16-mixed" is wider
    for (const auto& p : table.predictions)
        dtypeWidth = std::max(dtypeWidth, p.dtype.size() + 1);
    out << cell("batch", 8) << (seq ? cell("seq", 8) : std::string()) << cell("dtype", dtypeWidth) << cell("method", methodWidth) << cell("peak", 12) << cell("peak total", 12)
        << cell("reserved", 12) << (budget > 0 ? "fits " + table.budgetText() : "") << "\n";
    for (const auto& p : table.predictions) {
        auto peak = p.measured_peak_bytes.value_or(p.predicted_peak_bytes);
        auto total = p.peakTotal();
        out << cell(std::to_string(p.batch), 8) << (seq ? cell(std::to_string(p.seq), 8) : std::string())
            << cell(p.dtype, dtypeWidth) << cell(table.methodText(p), methodWidth)
            // A size the model cannot run has no figures a user could act on: its row says why instead (notes).
            << cell(p.runnable ? formatBytes(peak) : "-", 12) << cell(p.runnable ? formatBytes(total) : "-", 12)
            << cell(p.runnable ? formatBytes(p.predicted_reserved_bytes) : "-", 12);
        if (budget > 0)
            out << table.fitsText(p);
        out << "\n";
    }
    if (budget > 0) {
        out << "\nLargest " << (seq ? "sequence" : "batch") << " within " << table.budgetText() << ", "
            << table.allocatorText() << " (peak total, and the reserve on a device of that share"
            << (table.runnable.bounded() ? ", within " + table.runnable.text() + ", the sizes the model accepts" : std::string())
            << "):\n";
        for (std::size_t i = 0; i < table.max_batch.size(); ++i) {
            const auto& [dtype, n] = table.max_batch[i];
            out << "  " << cell(dtype, dtypeWidth) << WhatIfTable::largestText(n);
            if (seq && i < table.max_seq_batch.size())
                out << " at batch " << table.max_seq_batch[i];
            out << table.largestMethodText(i) << "\n";
        }
    }
    return out.str();
}

} // namespace memledger
