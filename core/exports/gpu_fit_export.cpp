#include "exports/gpu_fit_export.h"

#include "exports/html_style.h"
#include "exports/report_html.h"
#include "exports/whatif_export.h"
#include "support/format.h"
#include "whatif/gpu_fit.h"
#include "whatif/whatif.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace memledger {

namespace {

// Whether the table has a checkpoint axis (an answer with checkpointing): its column is shown.
bool hasCheckpointColumn(const GpuFitTable& t)
{
    return std::any_of(t.answers.begin(), t.answers.end(), [](const GpuFitAnswer& a) { return a.checkpoint != "none"; });
}

// Whether an answer offloads (the table's --offload, an offload axis, or an offload offered): the strategy column
// names it and the host/node column is shown.
bool hasOffload(const GpuFitTable& t)
{
    return !t.offload.empty()
        || std::any_of(t.answers.begin(), t.answers.end(), [](const GpuFitAnswer& a) { return !a.offload.empty(); });
}

// "full (38% of the forward's ops run again)" / "none".
std::string checkpointCell(const GpuFitAnswer& a)
{
    if (a.checkpoint == "none")
        return a.checkpoint;
    return a.checkpoint + ", " + formatPercent(100.0 * a.recompute_share) + " recomputed";
}

// A row with no answer: how far its closest rank (the most GPUs, the smallest micro-batch) is from fitting.
std::string closestText(const GpuFitTable& t, const GpuFitAnswer& a)
{
    const int most = t.gpu_counts.empty() ? 0 : t.gpu_counts.back();
    std::string s = "not even micro-batch " + std::to_string(t.runnable.min) + " fits on " + std::to_string(most) + " GPUs";
    if (!a.closest)
        return s;
    const auto& p = *a.closest;
    const auto budget = t.allocatorBudget(most);
    const auto need = std::max(p.predicted_peak_total_bytes, p.predicted_reserved_bytes);
    s += ": a rank needs " + formatBytes(p.predicted_peak_total_bytes) + " peak total";
    if (p.predicted_reserved_bytes > p.predicted_peak_total_bytes)
        s += " (" + formatBytes(p.predicted_reserved_bytes) + " reserved)";
    if (need > budget)
        s += ", " + formatBytes(need - budget) + " over the allocator's " + formatBytes(budget);
    else if (p.out_of_memory)
        s += ", out of memory in the allocator's replay (fragmentation)";
    return s;
}

} // namespace


std::string gpuFitToText(const GpuFitTable& t)
{
    std::ostringstream out;
    GpuFitTable copy = t;
    out << "Budget per GPU: " << (t.budget_text.empty() ? formatBytes(t.budget_bytes) : t.budget_text + " (" + formatBytes(t.budget_bytes) + ")")
        << "; off it first, outside PyTorch's allocator:\n"
        << "  CUDA context      " << padCell(formatBytes(t.overheads.cuda_context_bytes), 10, true) << "  (" << t.overheads.cuda_context_source << ")\n"
        << "  NCCL buffers      " << padCell(formatBytes(t.overheads.nccl_bytes), 10, true) << "  (" << t.overheads.nccl_source << ")\n"
        << "  left to the allocator: " << formatBytes(copy.allocatorBudget(1)) << " on one GPU, "
        << formatBytes(copy.allocatorBudget(2)) << " on more\n\n";
    bool seq = false;
    for (const auto& a : t.answers)
        seq = seq || a.longest_seq > 0;
    const bool ckpt = hasCheckpointColumn(t);
    const std::size_t ckptWidth = 34;
    const bool off = hasOffload(t);
    const std::size_t strategyWidth = off ? 30 : 10;
    out << padCell("precision", 16) << padCell("strategy", strategyWidth) << (ckpt ? padCell("checkpoint", ckptWidth) : std::string())
        << padCell("fewest GPUs", 13, true) << padCell("micro-batch", 13, true)
        << (t.global_batch > 0 ? padCell("micro-steps", 13, true) : std::string())
        << (t.grad_accum > 1 || t.global_batch > 0 ? padCell("global batch", 14, true) : std::string()) << (seq ? padCell("longest seq", 13, true) : std::string()) << padCell("peak total", 13, true) << padCell("reserved", 13, true) << padCell("weights", 12, true)
        << padCell("grads", 12, true) << padCell("optimizer", 12, true)
        << (off ? padCell("host/node", 12, true) : std::string()) << "\n";
    for (const auto& a : t.answers) {
        out << padCell(a.precision, 16) << padCell(a.strategyText(), strategyWidth) << (ckpt ? padCell(checkpointCell(a), ckptWidth) : std::string());
        if (!a.not_modelled.empty()) {
            out << "  not modelled: " << a.not_modelled << "\n";
            continue;
        }
        if (a.fewest_gpus == 0 || !a.at) {
            out << padCell("none", 13, true) << "  (" << closestText(t, a) << ")\n";
            continue;
        }
        const auto& p = *a.at;
        out << padCell(std::to_string(a.fewest_gpus), 13, true) << padCell(a.microBatchText(a.micro_batch), 13, true)
            << (t.global_batch > 0 ? padCell(std::to_string(a.grad_accum), 13, true) : std::string())
            << (t.grad_accum > 1 || t.global_batch > 0
                       ? padCell(std::to_string(a.globalBatch()), 14, true)
                       : std::string())
            << (seq ? padCell(a.longest_seq > 0 ? WhatIfTable::largestText(a.longest_seq) : "-", 13, true) : std::string())
            << padCell(formatBytes(p.predicted_peak_total_bytes), 13, true)
            << padCell(p.predicted_reserved_bytes > 0 ? formatBytes(p.predicted_reserved_bytes) : "-", 13, true)
            << padCell(formatBytes(p.weight_bytes), 12, true) << padCell(formatBytes(p.gradient_bytes), 12, true)
            << padCell(formatBytes(p.optimizer_state_bytes), 12, true)
            << (off ? padCell(a.offload.empty() ? "-" : formatBytes(p.host_bytes_per_node), 12, true) : std::string()) << "\n";
    }
    // The largest micro-batch per GPU count, one line per precision and strategy.
    if (!t.gpu_counts.empty()) {
        out << "\nLargest micro-batch per rank by GPU count (0: does not fit):\n"
            << padCell("", 16 + strategyWidth + (ckpt ? ckptWidth : 0));
        for (int n : t.gpu_counts)
            out << padCell(std::to_string(n), 9, true);
        out << "\n";
        for (const auto& a : t.answers) {
            if (!a.not_modelled.empty())
                continue;
            out << padCell(a.precision, 16) << padCell(a.strategyText(), strategyWidth) << (ckpt ? padCell(checkpointCell(a), ckptWidth) : std::string());
            for (const auto& [n, b] : a.largest)
                out << padCell(b >= 1000000 ? ">=1e6" : a.microBatchText(b), 9, true);
            out << "\n";
        }
        if (const auto legend = t.extrapolatedLegend(); !legend.empty())
            out << legend << "\n";
    }
    if (seq)
        out << "\nLongest seq: at the fewest GPUs and micro-batch " << t.runnable.min
            << ", the longest sequence that fits (within the program's range).\n";
    out << "\nPrecisions:\n";
    std::vector<std::string> seen;
    for (const auto& a : t.answers)
        if (std::find(seen.begin(), seen.end(), a.precision) == seen.end()) {
            seen.push_back(a.precision);
            out << "  " << padCell(a.precision, 16) << precisionText(a.precision) << "\n";
        }
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.1f s", t.seconds);
    out << "Each rank: rank 0 (the largest shards); " << (t.device == "meta" ? "the step computed on the meta device from shapes" : "the step recorded on the " + t.device)
        << (t.grad_accum > 1 ? "; " + std::to_string(t.grad_accum) + " micro-batches accumulated per optimizer step "
                   "(global batch: micro-batch x " + std::to_string(t.grad_accum) + " x GPUs), the gradients kept between them"
                             : std::string())
        << (t.offload.empty() ? std::string()
                              : "; --offload " + t.offload + ": parameter and gradient shards and the optimizer state "
                                  "on the host (host/node: pinned memory for up to " + std::to_string(t.gpus_per_node) + " ranks a node"
                                  + (t.host_budget > 0 ? ", within " + formatBytes(t.host_budget) : std::string()) + ")")
        << (t.global_batch > 0 ? "; global batch " + std::to_string(t.global_batch) + ": per GPU count, its share in one "
                   "step where it fits, else the largest micro-batch that divides it, the rest accumulated (micro-steps); "
                   "the GPU counts that do not divide it are no answer"
                               : std::string())
        << "; answered in " << secs << ".\n";
    for (const auto& n : t.notes)
        out << "Note: " << n << "\n";
    return out.str();
}

nlohmann::json gpuFitToJson(const GpuFitTable& t)
{
    nlohmann::json j = {{"format", "memledger-fit"}, {"version", 1}, {"budget_bytes", t.budget_bytes},
        {"budget_text", t.budget_text}, {"cuda_context_bytes", t.overheads.cuda_context_bytes},
        {"cuda_context_source", t.overheads.cuda_context_source}, {"nccl_bytes", t.overheads.nccl_bytes}, {"nccl_source", t.overheads.nccl_source},
        {"gpu_counts", t.gpu_counts}, {"axis", nameOf(t.axis)}, {"seq", t.seq}, {"device", t.device},
        {"optimizer", t.optimizer}, {"grad_accum", t.grad_accum}, {"global_batch", t.global_batch},
        {"offload", t.offload}, {"host_budget_bytes", t.host_budget}, {"gpus_per_node", t.gpus_per_node}, {"runnable", {{"min", t.runnable.min}, {"max", t.runnable.max}, {"why", t.runnable.why}}},
        {"notes", t.notes}, {"seconds", t.seconds}};
    auto& answers = j["answers"] = nlohmann::json::array();
    for (const auto& a : t.answers) {
        nlohmann::json row = {{"precision", a.precision}, {"shard", a.shard}, {"offload", a.offload}, {"checkpoint", a.checkpoint},
            {"recompute_share", a.recompute_share}, {"fewest_gpus", a.fewest_gpus}, {"micro_batch", a.micro_batch},
            {"grad_accum", a.grad_accum}, {"global_batch", a.globalBatch()}};
        if (a.closest) {
            row["closest"] = predictionToJson(*a.closest);
            row["closest"]["allocator_budget_bytes"] = t.allocatorBudget(t.gpu_counts.empty() ? 1 : t.gpu_counts.back());
        }
        if (a.longest_seq > 0)
            row["longest_seq"] = a.longest_seq;
        if (a.last_record > 0)
            row["last_record"] = a.last_record;
        if (!a.not_modelled.empty())
            row["not_modelled"] = a.not_modelled;
        auto& largest = row["largest_micro_batch"] = nlohmann::json::array();
        for (const auto& [n, b] : a.largest)
            largest.push_back({{"gpus", n}, {"micro_batch", b}, {"extrapolated", b > 0 && a.extrapolated(b)}});
        if (a.at) {
            row["rank"] = predictionToJson(*a.at);
        }
        answers.push_back(row);
    }
    return j;
}

std::string gpuFitToHtml(const GpuFitTable& t, const std::string& title)
{
    std::ostringstream out;
    out << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>memledger fit: " << htmlEscape(title)
        << "</title><style>" << kHtmlBaseStyle
        << "td.none{color:#c44e52}td.fit{font-weight:bold}tr.nm td{color:#888}</style></head><body>\n";
    out << "<h1>memledger fit: " << htmlEscape(title) << "</h1>\n<p class=muted>One " << htmlEscape(t.optimizer)
        << " training step per rank" << (t.seq > 0 ? ", sequence " + std::to_string(t.seq) : std::string())
        << (t.device == "meta" ? ", computed on the meta device from shapes" : "") << "; rank 0 (the largest shards)</p>\n";
    out << "<h2>Budget per GPU: "
        << htmlEscape(t.budget_text.empty() ? formatBytes(t.budget_bytes) : t.budget_text + " (" + formatBytes(t.budget_bytes) + ")")
        << "</h2>\n<table><tr><td class=l>CUDA context</td><td>" << formatBytes(t.overheads.cuda_context_bytes) << "</td><td class=l>"
        << htmlEscape(t.overheads.cuda_context_source) << "</td></tr>\n<tr><td class=l>NCCL buffers</td><td>"
        << formatBytes(t.overheads.nccl_bytes) << "</td><td class=l>" << htmlEscape(t.overheads.nccl_source)
        << "</td></tr>\n<tr><td class=l>left to the allocator</td><td>" << formatBytes(t.allocatorBudget(2))
        << "</td><td class=l>on more than one GPU (" << formatBytes(t.allocatorBudget(1)) << " on one)</td></tr></table>\n";
    out << "<h2>Fewest GPUs and the largest micro-batch per rank</h2>\n<table id=fit><tr><th class=l>precision</th>"
           "<th class=l>strategy</th><th class=l>checkpoint</th><th>fewest GPUs</th><th>micro-batch</th><th>longest sequence</th><th>peak total</th><th>reserved</th>"
           "<th>weights</th><th>gradients</th><th>optimizer state</th>"
        << (hasOffload(t) ? "<th>host per node</th>" : "") << "</tr>\n";
    for (const auto& a : t.answers) {
        out << "<tr" << (a.not_modelled.empty() ? "" : " class=nm") << "><td class=l title=\""
            << htmlEscape(precisionText(a.precision)) << "\">" << htmlEscape(a.precision) << "</td><td class=l>"
            << htmlEscape(a.strategyText()) << "</td><td class=l>" << htmlEscape(checkpointCell(a)) << "</td>";
        if (!a.not_modelled.empty()) {
            out << "<td colspan=8 class=l>not modelled: " << htmlEscape(a.not_modelled) << "</td></tr>\n";
            continue;
        }
        if (a.fewest_gpus == 0 || !a.at) {
            out << "<td class=none>none</td><td colspan=7 class=l>" << htmlEscape(closestText(t, a)) << "</td></tr>\n";
            continue;
        }
        const auto& p = *a.at;
        out << "<td class=fit>" << a.fewest_gpus << "</td><td class=fit"
            << (a.grad_accum > 1 ? " title=\"global batch " + std::to_string(a.globalBatch())
                       + " (" + std::to_string(a.grad_accum) + " micro-batches accumulated)\"" : std::string())
            << ">" << a.microBatchText(a.micro_batch)
            << (a.grad_accum > 1 ? " &times; " + std::to_string(a.grad_accum) : std::string())
            << "</td><td>" << (a.longest_seq > 0 ? WhatIfTable::largestText(a.longest_seq) : std::string("&ndash;"))
            << "</td><td>" << formatBytes(p.predicted_peak_total_bytes) << "</td><td>"
            << (p.predicted_reserved_bytes > 0 ? formatBytes(p.predicted_reserved_bytes) : "-") << "</td><td>"
            << formatBytes(p.weight_bytes) << "</td><td>" << formatBytes(p.gradient_bytes) << "</td><td>"
            << formatBytes(p.optimizer_state_bytes) << "</td>"
            << (hasOffload(t) ? "<td>" + (a.offload.empty() ? std::string("&ndash;") : formatBytes(p.host_bytes_per_node)) + "</td>"
                              : std::string())
            << "</tr>\n";
    }
    out << "</table>\n<h2>Largest micro-batch per rank by GPU count</h2>\n<table id=by-gpus><tr><th class=l>precision</th>"
           "<th class=l>strategy</th><th class=l>checkpoint</th>";
    for (int n : t.gpu_counts)
        out << "<th>" << n << "</th>";
    out << "</tr>\n";
    for (const auto& a : t.answers) {
        if (!a.not_modelled.empty())
            continue;
        out << "<tr><td class=l>" << htmlEscape(a.precision) << "</td><td class=l>" << htmlEscape(a.strategyText())
            << "</td><td class=l>" << htmlEscape(a.checkpoint) << "</td>";
        for (const auto& [n, b] : a.largest)
            out << "<td" << (b == 0 ? " class=none" : "") << ">" << (b == 0 ? std::string("&ndash;") : a.microBatchText(b))
                << "</td>";
        out << "</tr>\n";
    }
    out << "</table>\n<p class=muted>&ndash;: does not fit. \"Fits\": the peak total, and the reserve of PyTorch's "
           "caching allocator replayed on a device of the allocator's share of the budget.</p>\n";
    if (const auto legend = t.extrapolatedLegend(); !legend.empty())
        out << "<p class=muted>" << htmlEscape(legend) << "</p>\n";
    if (!t.notes.empty()) {
        out << "<h2>Notes</h2>\n<ul>";
        for (const auto& n : t.notes)
            out << "<li>" << htmlEscape(n) << "</li>";
        out << "</ul>\n";
    }
    out << "</body></html>\n";
    return out.str();
}

GpuFitTable gpuFitFromJson(const nlohmann::json& j)
{
    GpuFitTable t;
    t.budget_bytes = j.at("budget_bytes").get<std::int64_t>();
    t.budget_text = j.value("budget_text", std::string());
    t.overheads.cuda_context_bytes = j.value("cuda_context_bytes", std::int64_t {0});
    t.overheads.cuda_context_source = j.value("cuda_context_source", std::string());
    t.overheads.nccl_bytes = j.value("nccl_bytes", std::int64_t {0});
    t.overheads.nccl_source = j.value("nccl_source", std::string());
    t.gpu_counts = j.value("gpu_counts", std::vector<int> {});
    t.seq = j.value("seq", std::int64_t {0});
    t.device = j.value("device", std::string("cpu"));
    t.optimizer = j.value("optimizer", std::string());
    t.grad_accum = std::max(1, j.value("grad_accum", 1));
    t.global_batch = j.value("global_batch", std::int64_t {0});
    t.offload = j.value("offload", std::string());
    t.host_budget = j.value("host_budget_bytes", std::int64_t {0});
    t.gpus_per_node = std::max(1, j.value("gpus_per_node", 8));
    t.notes = j.value("notes", std::vector<std::string> {});
    t.seconds = j.value("seconds", 0.0);
    if (j.contains("runnable")) {
        t.runnable.min = j["runnable"].value("min", std::int64_t {1});
        t.runnable.max = j["runnable"].value("max", t.runnable.max);
        t.runnable.why = j["runnable"].value("why", std::string());
    }
    for (const auto& row : j.at("answers")) {
        GpuFitAnswer a;
        a.precision = row.at("precision").get<std::string>();
        a.shard = row.at("shard").get<std::string>();
        a.checkpoint = row.value("checkpoint", std::string("none"));
        a.offload = row.value("offload", t.offload);
        a.grad_accum = std::max(1, row.value("grad_accum", t.grad_accum));
        a.recompute_share = row.value("recompute_share", 0.0);
        a.fewest_gpus = row.value("fewest_gpus", 0);
        a.micro_batch = row.value("micro_batch", std::int64_t {0});
        a.longest_seq = row.value("longest_seq", std::int64_t {0});
        a.not_modelled = row.value("not_modelled", std::string());
        a.last_record = row.value("last_record", std::int64_t {0});
        for (const auto& l : row.value("largest_micro_batch", nlohmann::json::array()))
            a.largest.emplace_back(l.at("gpus").get<int>(), l.at("micro_batch").get<std::int64_t>());
        if (row.contains("rank")) {
            const auto& r = row["rank"];
            Prediction p;
            p.batch = r.value("batch", std::int64_t {1});
            p.seq = r.value("seq", std::int64_t {0});
            p.dtype = r.value("dtype", std::string());
            p.predicted_peak_bytes = r.value("predicted_peak_bytes", std::int64_t {0});
            p.predicted_peak_total_bytes = r.value("predicted_peak_total_bytes", std::int64_t {0});
            p.predicted_reserved_bytes = r.value("predicted_reserved_bytes", std::int64_t {0});
            p.weight_bytes = r.value("weight_bytes", std::int64_t {0});
            p.input_bytes = r.value("input_bytes", std::int64_t {0});
            p.gpus = r.value("gpus", 0);
            p.shard = r.value("shard", std::string());
            p.master_dtype = r.value("master_dtype", std::string());
            p.gradient_bytes = r.value("gradient_bytes", std::int64_t {0});
            p.optimizer_state_bytes = r.value("optimizer_state_bytes", std::int64_t {0});
            p.host_bytes = r.value("host_bytes", std::int64_t {0});
            p.host_bytes_per_node = r.value("host_bytes_per_node", std::int64_t {0});
            p.fits = true;
            a.at = p;
        }
        t.answers.push_back(a);
    }
    return t;
}

} // namespace memledger
