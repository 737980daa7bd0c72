#include "exports/serve_export.h"

#include "exports/report_html.h"
#include "support/format.h"

#include <nlohmann/json.hpp>

#include <sstream>
#include <tuple>
#include <utility>
#include <vector>

namespace memledger {

namespace {

std::string kvTypeName(const ServePlan& p)
{
    return p.request.kv_dtype.empty() ? p.request.dtype : p.request.kv_dtype;
}

} // namespace

std::vector<std::tuple<std::string, std::int64_t, std::string>> servePlanLayout(const ServePlan& p)
{
    std::ostringstream usable;
    usable << "the budget x --memory-fraction " << p.request.memory_fraction << " (vLLM's gpu_memory_utilization)";
    std::vector<std::tuple<std::string, std::int64_t, std::string>> lines {
        {"usable", p.usable_bytes, usable.str()},
        {"weights", -p.weight_bytes,
            p.request.dtype + (p.request.gpus > 1 ? ", split over " + std::to_string(p.request.gpus) + " GPUs" : "")},
        {"prefill activations", -p.activation_peak_bytes,
            "one prefill of " + std::to_string(p.prefill_tokens > 0 ? p.prefill_tokens : p.request.max_batched_tokens)
                + " tokens (--max-batched-tokens " + std::to_string(p.request.max_batched_tokens)
                + "), recorded on meta with a GPU's fused attention (vLLM's profile run)"},
        {"CUDA context", -p.cuda_context_bytes, "estimate"}};
    if (p.nccl_bytes > 0)
        lines.emplace_back("NCCL buffers", -p.nccl_bytes, "estimate, on more than one GPU");
    lines.emplace_back("KV cache", p.kv_cache_bytes,
        std::to_string(p.blocks) + " blocks of " + std::to_string(p.request.block_size) + " tokens, "
            + formatBytes(p.block_bytes) + " each");
    return lines;
}

std::string servePlanTitle(const ServePlan& p, const std::string& model)
{
    return "Serving " + model + " on " + (p.request.gpus > 1 ? std::to_string(p.request.gpus) + " x " : "")
        + (p.request.budget_text.empty() ? formatBytes(p.request.budget) : p.request.budget_text) + " ("
        + formatBytes(p.request.budget) + " each), " + p.request.dtype + " weights, " + kvTypeName(p) + " KV cache";
}

std::string servePlanAnswer(const ServePlan& p)
{
    std::string text = "Sequences of " + std::to_string(p.request.context) + " tokens at once: "
        + std::to_string(p.sequences) + " (" + std::to_string(p.blocks_per_sequence) + " blocks each)";
    if (p.request.batch > 0)
        text += "\nLongest context at " + std::to_string(p.request.batch)
            + (p.request.batch == 1 ? " sequence: " : " sequences: ") + std::to_string(p.longest_context) + " tokens"
            + (p.max_positions > 0 && p.longest_context == p.max_positions ? " (the model's own bound)" : "");
    return text;
}

const char* const kServeNotModelled = "Not modelled: CUDA graphs' memory, the sampler's buffers, prefix caching; the "
                                      "activations are the exported model's own prefill (transformers' attention), "
                                      "not the engine's kernels.";

std::string servePlanToText(const ServePlan& p, const std::string& model)
{
    std::ostringstream out;
    out << servePlanTitle(p, model) << ":\n";
    for (const auto& [what, bytes, why] : servePlanLayout(p))
        out << "  " << padCell(what, 20) << ' ' << padCell((bytes < 0 ? "- " : "  ") + formatBytes(bytes < 0 ? -bytes : bytes), 13, true)
            << "  " << why << "\n";
    out << "  a token of every layer takes " << formatBytes(p.block_bytes / p.request.block_size) << " (2 x "
        << p.layers << " layers x " << p.kv_heads_per_gpu << " KV heads x " << p.head_dim << " x " << p.kv_type_bytes
        << " bytes)\n";
    out << servePlanAnswer(p) << "\n";
    for (const auto& n : p.notes)
        out << "Note: " << n << "\n";
    out << kServeNotModelled << "\n";
    return out.str();
}

nlohmann::json servePlanToJson(const ServePlan& p, const std::string& model)
{
    nlohmann::json layout = nlohmann::json::array();
    for (const auto& [what, bytes, why] : servePlanLayout(p))
        layout.push_back({{"what", what}, {"bytes", bytes < 0 ? -bytes : bytes}, {"source", why}});
    return {{"format", "memledger-serve"}, {"version", 1}, {"model", model},
        {"request",
            {{"budget_bytes", p.request.budget}, {"budget", p.request.budget_text}, {"gpus", p.request.gpus},
                {"context", p.request.context}, {"batch", p.request.batch}, {"dtype", p.request.dtype},
                {"kv_dtype", kvTypeName(p)}, {"block_size", p.request.block_size},
                {"memory_fraction", p.request.memory_fraction}, {"max_batched_tokens", p.request.max_batched_tokens}}},
        {"layout", layout}, {"usable_bytes", p.usable_bytes}, {"weight_bytes", p.weight_bytes},
        {"activation_peak_bytes", p.activation_peak_bytes}, {"prefill_tokens", p.prefill_tokens}, {"cuda_context_bytes", p.cuda_context_bytes},
        {"nccl_bytes", p.nccl_bytes}, {"kv_cache_bytes", p.kv_cache_bytes}, {"layers", p.layers},
        {"kv_heads_per_gpu", p.kv_heads_per_gpu}, {"head_dim", p.head_dim}, {"kv_type_bytes", p.kv_type_bytes},
        {"block_bytes", p.block_bytes}, {"blocks", p.blocks}, {"blocks_per_sequence", p.blocks_per_sequence},
        {"sequences", p.sequences}, {"longest_context", p.longest_context}, {"max_positions", p.max_positions},
        {"notes", p.notes},
        {"not_modelled", {"CUDA graphs' memory", "the sampler's buffers", "prefix caching"}}};
}

std::string servePlanToHtml(const ServePlan& p, const std::string& model)
{
    std::ostringstream out;
    out << "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>memledger: serving "
        << htmlEscape(model) << "</title><style>body{font-family:sans-serif;margin:2em;max-width:60em}"
        << "table{border-collapse:collapse}td,th{padding:.25em .75em;border-bottom:1px solid #ddd;text-align:left}"
        << "td.n{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}.kv{color:#b08900;font-weight:bold}</style></head>"
        << "<body><h1>Serving " << htmlEscape(model) << "</h1><p>"
        << (p.request.gpus > 1 ? std::to_string(p.request.gpus) + " x " : "")
        << htmlEscape(p.request.budget_text.empty() ? formatBytes(p.request.budget) : p.request.budget_text) << " ("
        << formatBytes(p.request.budget) << " each), " << htmlEscape(p.request.dtype) << " weights, "
        << htmlEscape(kvTypeName(p)) << " KV cache.</p><h2>One GPU's layout</h2><table><tr><th>what</th><th>bytes</th>"
        << "<th>from</th></tr>";
    for (const auto& [what, bytes, why] : servePlanLayout(p))
        out << "<tr><td" << (what == "KV cache" ? " class=\"kv\"" : "") << ">" << htmlEscape(what) << "</td><td class=\"n\">"
            << (bytes < 0 ? "&minus; " : "") << formatBytes(bytes < 0 ? -bytes : bytes) << "</td><td>" << htmlEscape(why)
            << "</td></tr>";
    out << "</table><h2>The answer</h2><p id=\"sequences\">Sequences of " << p.request.context << " tokens at once: <b>"
        << p.sequences << "</b> (" << p.blocks_per_sequence << " blocks of " << p.request.block_size << " tokens each)</p>";
    if (p.request.batch > 0)
        out << "<p id=\"longest\">Longest context at " << p.request.batch << " sequences: <b>" << p.longest_context
            << "</b> tokens</p>";
    for (const auto& n : p.notes)
        out << "<p class=\"note\">" << htmlEscape(n) << "</p>";
    out << "<p>" << htmlEscape(kServeNotModelled) << "</p></body></html>\n";
    return out.str();
}

} // namespace memledger
