#include "whatif_cli.h"

#include "cli.h"
#include "demo_model.h"
#include "support/atomic_file.h"
#include "support/errors.h"
#include "support/format.h"
#include "whatif/whatif.h"
#include "whatif/checkpoint.h"
#include "exports/report_text.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>

namespace memledger {

namespace {

// Notes about a precision nobody asked for ("float16: predicted from the bfloat16 records") are left out.
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

} // namespace

WhatIfTable computeWhatIfTable(const OpenedFile& file, const CliOptions& o, std::vector<std::string>* notesOut)
{
    if (!file.model)
        throw RunError("what-if needs a model file, not a " + std::string(fileKindName(file.kind)));
    auto batches = o.batches.empty() ? std::vector<std::int64_t> {1, 8, 32} : o.batches;
    auto dtypes = o.dtypes.empty() ? std::vector<std::string> {"float32", "bfloat16"} : o.dtypes;
    RunOptions base = o.run;
    base.batch.reset();
    base.dtype = "float32";
    if (base.inputs.empty()) {
        base.inputs = file.default_inputs;
        base.input_types = file.default_input_types;
    }
    if (base.mode.empty()) {
        base.mode = file.default_mode;
        if (!file.default_optimizer.empty() && base.optimizer == "sgd")
            base.optimizer = file.default_optimizer;
    }
    if (!o.seqs.empty()) {
        // Along the sequence: one sequence what-if per batch asked for (the input's batch when none is).
        auto seqs = o.seqs;
        std::sort(seqs.begin(), seqs.end());
        seqs.erase(std::unique(seqs.begin(), seqs.end()), seqs.end());
        std::vector<std::int64_t> seqBatches = o.batches;
        if (seqBatches.empty())
            seqBatches.push_back(base.inputs.empty() ? 1 : base.inputs.front().front());
        WhatIfTable table;
        for (auto batch : seqBatches) {
            RunOptions at = base;
            at.batch = batch;
            WhatIf::Plan plan;
            plan.largest = std::min<std::int64_t>(seqs.back(), 1 << 16);
            plan.wanted = seqs;
            plan.progress = [batch](const std::string& dtype, std::int64_t seq, int done) {
                std::cerr << "memledger: what-if record " << done << " in " << dtype << " at sequence " << seq
                          << ", batch " << batch << "\n";
            };
            auto w = WhatIf::recordSeqPlanned(*file.model, at, dtypes, plan);
            auto part = makeWhatIfTable(w, seqs, dtypes, o.budget.value_or(0), file.model.get());
            if (table.predictions.empty()) {
                table = part;
            } else {
                table.predictions.insert(table.predictions.end(), part.predictions.begin(), part.predictions.end());
                table.max_batch.insert(table.max_batch.end(), part.max_batch.begin(), part.max_batch.end());
                table.max_batch_method.insert(
                    table.max_batch_method.end(), part.max_batch_method.begin(), part.max_batch_method.end());
                table.max_seq_batch.insert(table.max_seq_batch.end(), part.max_seq_batch.begin(), part.max_seq_batch.end());
            }
            if (notesOut) {
                auto n = w.notes();
                notesOut->insert(notesOut->end(), n.begin(), n.end());
                for (const auto& p : part.predictions)
                    notesOut->insert(notesOut->end(), p.notes.begin(), p.notes.end());
                keepNotesOf(dtypes, *notesOut);
            }
        }
        return table;
    }
    // Records at log-spaced batches while the machine can run them within a few seconds each, so that kernels
    // that switch algorithm at larger batches are seen; beyond the largest record figures are extrapolated.
    WhatIf::Plan plan;
    plan.largest = std::max<std::int64_t>(64, std::min<std::int64_t>(1024, *std::max_element(batches.begin(), batches.end())));
    plan.wanted = batches;
    plan.progress = [](const std::string& dtype, std::int64_t batch, int done) {
        std::cerr << "memledger: what-if record " << done << " in " << dtype << " at batch " << batch << "\n";
    };
    auto w = WhatIf::recordPlanned(*file.model, base, dtypes, plan);
    auto table = makeWhatIfTable(w, batches, dtypes, o.budget.value_or(0), file.model.get());
    if (notesOut) {
        *notesOut = w.notes();
        for (const auto& p : table.predictions)
            notesOut->insert(notesOut->end(), p.notes.begin(), p.notes.end());
        keepNotesOf(dtypes, *notesOut);
    }
    return table;
}

int runCheckpointWhatIf(const CliOptions& o)
{
    const std::string name = o.model.empty() ? kDemoModelName : o.model;
    auto impl = checkpointImplFromName(o.checkpoint_impl).value_or(CheckpointImpl::Reentrant);
    const bool automatic = o.checkpoint.size() == 1 && o.checkpoint[0] == "auto";
    nlohmann::json out;
    try {
        auto file = openFileOrDemo(o.model);
        Report recorded;
        if (file.model) {
            RunOptions run = o.run;
            run.mode = "train";
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
            p = predictCheckpoint(recorded, o.checkpoint, impl);
        }
        std::cout << "Checkpointing what-if for " << name << " (one training step recorded at batch "
                  << recorded.run.batch << " without checkpoints, peak " << formatBytes(recorded.peak_bytes)
                  << ", peak total " << formatBytes(recorded.peak_total_bytes) << ")\n\n";
        if (plan)
            std::cout << "Auto plan for a budget of " << formatBytes(plan->budget_bytes) << " (peak total): "
                      << (plan->fits ? "fits" : "does NOT fit") << ", " << plan->evaluated << " plans tried\n";
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
        out["recorded_peak_bytes"] = recorded.peak_bytes;
        out["recorded_peak_total_bytes"] = recorded.peak_total_bytes;
        out["recorded_reserved_bytes"] = recorded.simulated_reserved_peak_bytes;
        auto row = checkpointToJson(p);
        if (plan) {
            out["budget_bytes"] = plan->budget_bytes;
            row["fits"] = plan->fits;
            row["plan"] = "auto";
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
    if (!o.checkpoint.empty())
        return runCheckpointWhatIf(o);
    const std::string name = o.model.empty() ? kDemoModelName : o.model;
    WhatIfTable table;
    std::vector<std::string> notes;
    try {
        table = computeWhatIfTable(openFileOrDemo(o.model), o, &notes);
    } catch (const std::exception&) {
        return failureExit({}, name);
    }

    std::string records;
    for (std::size_t i = 0; i < table.recorded_batches.size(); ++i)
        records += (i == 0 ? "" : i + 1 == table.recorded_batches.size() ? " and " : ", ")
            + std::to_string(table.recorded_batches[i]);
    std::cout << "What-if for " << name << " (" << (table.mode == "train" ? "a training step, " : "")
              << "from runs at " << (table.axis == "seq" ? "sequence " : "batch ") << records << " on the CPU)\n\n";
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
