#include "whatif_cli.h"

#include "cli.h"
#include "demo_model.h"
#include "support/atomic_file.h"
#include "support/errors.h"
#include "support/format.h"
#include "whatif/whatif.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>

namespace memledger {

namespace {

std::string cell(const std::string& s, std::size_t width)
{
    return s.size() >= width ? s + " " : s + std::string(width - s.size(), ' ');
}

} // namespace

void printWhatIfTable(const nlohmann::json& table, std::ostream& out)
{
    const std::int64_t budget = table.value("budget_bytes", std::int64_t {0});
    out << cell("batch", 8) << cell("dtype", 10) << cell("method", 11) << cell("peak", 12) << cell("peak total", 12)
        << cell("reserved", 12) << (budget > 0 ? "fits " + formatBytes(budget) : "") << "\n";
    for (const auto& p : table["predictions"]) {
        auto peak = p.value("measured_peak_bytes", p["predicted_peak_bytes"].get<std::int64_t>());
        auto total = p.value("measured_peak_total_bytes", p["predicted_peak_total_bytes"].get<std::int64_t>());
        out << cell(std::to_string(p["batch"].get<std::int64_t>()), 8) << cell(p["dtype"], 10) << cell(p["method"], 11)
            << cell(formatBytes(peak), 12) << cell(formatBytes(total), 12)
            << cell(formatBytes(p["predicted_reserved_bytes"].get<std::int64_t>()), 12);
        if (budget > 0)
            out << (p.value("fits", false) ? "yes" : "no");
        out << "\n";
    }
    if (budget > 0) {
        out << "\nLargest batch within " << formatBytes(budget) << " (peak total and reserved):\n";
        for (const auto& [dtype, n] : table["max_batch"].items()) {
            auto v = n.get<std::int64_t>();
            out << "  " << cell(dtype, 10) << (v >= 1000000 ? ">= 1000000" : std::to_string(v)) << "\n";
        }
    }
}

nlohmann::json computeWhatIfTable(const CliOptions& o, std::vector<std::string>* notesOut)
{
    auto batches = o.batches.empty() ? std::vector<std::int64_t> {1, 8, 32} : o.batches;
    auto dtypes = o.dtypes.empty() ? std::vector<std::string> {"float32", "bfloat16"} : o.dtypes;
    const std::int64_t budget = o.budget.value_or(0);
    std::vector<Prediction> rows;
    std::vector<std::pair<std::string, std::int64_t>> maxBatch;
    auto model = o.model.empty() ? Model::openBytes(demoModelBytes(), kDemoModelName) : Model::open(o.model);
    RunOptions base = o.run;
    base.batch.reset();
    base.dtype = "float32";
    if (o.model.empty() && base.inputs.empty())
        base.inputs = demoModelInput();
    auto w = WhatIf::record(model, base, 1, 2, dtypes);
    for (const auto& dtype : dtypes)
        for (auto batch : batches) {
            auto p = w.predict(batch, dtype);
            // Where the two records did not line up, a prediction is a guess: run it instead.
            if (!p.reliable && w.isRecorded(dtype))
                p = w.measure(model, batch, dtype);
            rows.push_back(std::move(p));
        }
    if (budget > 0)
        for (const auto& dtype : dtypes)
            maxBatch.emplace_back(dtype, w.maxBatch(dtype, budget));
    if (notesOut) {
        *notesOut = w.notes();
        for (const auto& p : rows)
            notesOut->insert(notesOut->end(), p.notes.begin(), p.notes.end());
    }
    return whatIfToJson(rows, budget, maxBatch);
}

int runWhatIf(const CliOptions& o)
{
    const std::string name = o.model.empty() ? kDemoModelName : o.model;
    const std::int64_t budget = o.budget.value_or(0);
    nlohmann::json table;
    std::vector<std::string> notes;
    try {
        table = computeWhatIfTable(o, &notes);
    } catch (const FileError& e) {
        std::cerr << "memledger: " << e.what() << "\n";
        return kExitBadFile;
    } catch (const RunError& e) {
        std::cerr << "memledger: " << name << ": " << e.what() << "\n";
        return kExitRunFailed;
    } catch (const std::invalid_argument& e) {
        std::cerr << "memledger: " << e.what() << "\n";
        return kExitUsage;
    }

    std::cout << "What-if for " << name << " (from runs at batch 1 and 2 on the CPU)\n\n";
    printWhatIfTable(table, std::cout);
    std::sort(notes.begin(), notes.end());
    notes.erase(std::unique(notes.begin(), notes.end()), notes.end());
    if (!notes.empty()) {
        std::cout << "\nNotes:\n";
        for (const auto& n : notes)
            std::cout << "  - " << n << "\n";
    }
    std::cout << "Reserved: what PyTorch's CUDA caching allocator would hold (CUDA context not included).\n";
    if (!o.json.empty()) {
        try {
            writeFileAtomically(o.json, table.dump(2) + "\n");
            std::cout << "Wrote " << o.json << "\n";
        } catch (const std::exception& e) {
            std::cerr << "memledger: " << e.what() << "\n";
            return kExitRunFailed;
        }
    }
    return kExitOk;
}

} // namespace memledger
