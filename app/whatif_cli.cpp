#include "whatif_cli.h"

#include "cli.h"
#include "parallel_cli.h"
#include "demo_model.h"
#include "support/atomic_file.h"
#include "support/errors.h"
#include "support/format.h"
#include "whatif/whatif.h"
#include "whatif/whatif_policy.h"
#include "whatif/checkpoint.h"
#include "exports/checkpoint_export.h"
#include "exports/report_text.h"
#include "exports/whatif_export.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>

namespace memledger {

WhatIfTable computeWhatIfTable(const OpenedFile& file, const CliOptions& o, std::vector<std::string>* notesOut)
{
    if (!file.model)
        throw RunError("what-if needs a model file, not a " + std::string(fileKindName(file.kind)));
    RunOptions base = o.run;
    base.dtype = "float32";
    if (base.inputs.empty()) {
        base.inputs = file.default_inputs;
        base.input_types = file.default_input_types;
    }
    if (!base.mode) {
        base.mode = file.default_mode;
        if (!file.default_optimizer.empty() && base.optimizer == "sgd")
            base.optimizer = file.default_optimizer;
    }
    WhatIfRequest request;
    request.dtypes = whatIfDtypes(o.dtypes);
    request.budget = o.budget.value_or(0);
    auto addNotes = [&](const WhatIf& w, const WhatIfTable& part) {
        if (!notesOut)
            return;
        auto n = w.notes();
        notesOut->insert(notesOut->end(), n.begin(), n.end());
        for (const auto& p : part.predictions)
            notesOut->insert(notesOut->end(), p.notes.begin(), p.notes.end());
        keepNotesOf(request.dtypes, *notesOut);
    };
    if (o.seqs.empty()) {
        request.rows = o.batches;
        // Without rows asked for, the input's own batch is a row too, as the window's run is in its What if panel.
        if (o.batches.empty() && !base.inputs.empty() && !base.inputs.front().empty())
            request.current_batch = base.inputs.front().front();
        auto w = recordWhatIfForBudget(*file.model, base, request, [](const std::string& dtype, std::int64_t batch, int done) {
            std::cerr << "memledger: what-if record " << done << " in " << dtype << " at batch " << batch << "\n";
        }).withGradAccum(o.grad_accum);
        auto table = whatIfTableFor(w, request, file.model.get());
        table.budget_text = o.budget_text;
        addNotes(w, table);
        return table;
    }
    // Along the sequence: one sequence what-if per batch asked for (the input's batch when none is).
    request.axis = WhatIfAxis::Seq;
    request.rows = o.seqs;
    std::vector<std::int64_t> seqBatches = o.batches;
    if (seqBatches.empty())
        seqBatches.push_back(base.inputs.empty() ? 1 : base.inputs.front().front());
    WhatIfTable table;
    table.budget_text = o.budget_text;
    for (auto batch : seqBatches) {
        request.current_batch = batch;
        auto w = recordWhatIf(*file.model, base, request, [batch](const std::string& dtype, std::int64_t seq, int done) {
            std::cerr << "memledger: what-if record " << done << " in " << dtype << " at sequence " << seq
                      << ", batch " << batch << "\n";
        }).withGradAccum(o.grad_accum);
        auto part = whatIfTableFor(w, request, file.model.get());
        addNotes(w, part);
        if (table.predictions.empty()) {
            part.budget_text = o.budget_text;
            table = part;
            continue;
        }
        table.predictions.insert(table.predictions.end(), part.predictions.begin(), part.predictions.end());
        table.max_batch.insert(table.max_batch.end(), part.max_batch.begin(), part.max_batch.end());
        table.max_batch_method.insert(
            table.max_batch_method.end(), part.max_batch_method.begin(), part.max_batch_method.end());
        table.max_seq_batch.insert(table.max_seq_batch.end(), part.max_seq_batch.begin(), part.max_seq_batch.end());
    }
    return table;
}

int runCheckpointWhatIf(const CliOptions& o)
{
    const std::string name = o.model.empty() ? kDemoModelName : o.model;
    const auto& spec = o.checkpoints.front();
    const auto impl = spec.implementation();
    const bool automatic = spec.mode == CheckpointMode::Auto;
    nlohmann::json out;
    try {
        auto file = openFileOrDemo(o.model);
        Report recorded;
        if (file.model) {
            RunOptions run = o.run;
            run.mode = RunMode::Train;
            recorded = analyzeOpened(file, run);
        } else if (file.report) {
            recorded = *file.report;
        }
        CheckpointPrediction p;
        std::optional<CheckpointPlan> plan;
        if (automatic) {
            plan = planCheckpoints(recorded, *o.budget, impl);
            p = plan->prediction;
        } else {
            p = predictCheckpoint(recorded, spec);
        }
        // A meta run's step is computed from shapes, not measured: said in the header and the JSON.
        const bool meta = recorded.run.device == "meta";
        std::cout << "Checkpointing what-if for " << name << " (one training step recorded at batch "
                  << recorded.run.batch << (meta ? " on the meta device, from shapes," : "")
                  << " without checkpoints, peak " << formatBytes(recorded.peak_bytes)
                  << ", peak total " << formatBytes(recorded.peak_total_bytes) << ")\n\n";
        if (plan) {
            std::cout << "Auto plan for a budget of " << formatBytes(plan->budget_bytes) << " (peak total): "
                      << (plan->fits ? "fits" : "does NOT fit") << ", " << plan->evaluated << " plans tried:\n";
            for (const auto& t : plan->tried) {
                std::string set;
                for (const auto& m : t.checkpoint)
                    set += (set.empty() ? "" : ", ") + m;
                std::printf("  %-48s peak total %12s  recompute %8.1f ms%s\n",
                    (set.empty() ? std::string("(no checkpoint)") : set).c_str(),
                    formatBytes(t.predicted_peak_total_bytes).c_str(), t.recompute_ms,
                    t.predicted_peak_total_bytes <= plan->budget_bytes ? "  fits" : "");
            }
            std::cout << "\n";
        }
        std::cout << checkpointToText(p);
        if (!p.notes.empty()) {
            std::cout << "\nNotes:\n";
            for (const auto& n : p.notes)
                std::cout << "  - " << n << "\n";
        }
        out["format"] = "memledger-checkpoint";
        out["version"] = 1;
        out["model"] = name;
        out["batch"] = recorded.run.batch;
        if (meta)
            out["device"] = "meta";
        out["recorded_peak_bytes"] = recorded.peak_bytes;
        out["recorded_peak_total_bytes"] = recorded.peak_total_bytes;
        out["recorded_reserved_bytes"] = recorded.simulated_reserved_peak_bytes;
        auto row = checkpointToJson(p);
        if (plan) {
            out["budget_bytes"] = plan->budget_bytes;
            row["fits"] = plan->fits;
            row["plan"] = "auto";
            auto& tried = out["plans_tried"] = nlohmann::json::array();
            for (const auto& t : plan->tried)
                tried.push_back({{"checkpoint", t.checkpoint}, {"predicted_peak_total_bytes", t.predicted_peak_total_bytes},
                    {"recompute_ms", t.recompute_ms}, {"fits", t.predicted_peak_total_bytes <= plan->budget_bytes}});
        }
        out["predictions"] = nlohmann::json::array({row});
    } catch (const std::exception&) {
        return failureExit({}, name);
    }
    if (!o.json.empty()) {
        try {
            writeFileAtomically(o.json, out.dump(2) + "\n");
            std::cout << "Wrote " << o.json << "\n";
        } catch (const std::exception&) {
            return failureExit();
        }
    }
    return kExitOk;
}

int runWhatIf(const CliOptions& o)
{
    if (o.checkpointed() && !o.parallel())
        return runCheckpointWhatIf(o);
    if (o.parallel())
        return runRankWhatIf(o);
    const std::string name = o.model.empty() ? kDemoModelName : o.model;
    WhatIfTable table;
    std::vector<std::string> notes;
    bool meta = o.run.device == "meta";
    try {
        auto file = openFileOrDemo(o.model);
        meta = meta || (o.run.device.empty() && file.model && file.model->metaWeights());
        table = computeWhatIfTable(file, o, &notes);
    } catch (const std::exception&) {
        return failureExit({}, name);
    }

    std::string records;
    for (std::size_t i = 0; i < table.recorded_batches.size(); ++i)
        records += (i == 0 ? "" : i + 1 == table.recorded_batches.size() ? " and " : ", ")
            + std::to_string(table.recorded_batches[i]);
    std::cout << "What-if for " << name << " (" << (table.mode == RunMode::Train ? "a training step, " : "")
              << "from runs at " << (table.axis == WhatIfAxis::Seq ? "sequence " : "batch ") << records << (meta ? " on the meta device, from shapes)\n\n" : " on the CPU)\n\n");
    std::cout << whatIfToText(table);
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
            writeFileAtomically(o.json, whatIfToJson(table).dump(2) + "\n");
            std::cout << "Wrote " << o.json << "\n";
        } catch (const std::exception&) {
            return failureExit();
        }
    }
    return kExitOk;
}

} // namespace memledger
