#include "parallel_cli.h"

#include "cli.h"
#include "demo_model.h"
#include "exports/gpu_fit_export.h"
#include "exports/whatif_export.h"
#include "support/atomic_file.h"
#include "support/errors.h"
#include "support/format.h"
#include "whatif/gpu_fit.h"
#include "whatif/whatif_policy.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <optional>
#include <iostream>
#include <stdexcept>

namespace memledger {

ParallelPlan parallelPlanFromCli(const CliOptions& o, const std::vector<LayerStats>& layers, std::int64_t gpus,
    const std::string& shard)
{
    ParallelPlan plan;
    plan.gpus = static_cast<int>(gpus > 0 ? gpus : o.gpus.empty() ? 1 : o.gpus.front());
    const auto name = !shard.empty() ? shard : o.shards.empty() ? std::string("fsdp") : o.shards.front();
    auto s = shardingFromName(name);
    if (!s)
        throw std::invalid_argument("--shard '" + name + "' is not one of " + shardingNames());
    plan.shard = *s;
    plan.master_dtype = o.run.dtype;
    if (plan.sharded() || plan.deepSpeed()) {
        plan.param_dtype = o.param_dtype;
        plan.reduce_dtype = o.reduce_dtype;
    } else if (!o.param_dtype.empty() && o.param_dtype != o.run.dtype) {
        throw std::invalid_argument("--param-dtype is FSDP's (fsdp, zero2): " + name
            + " computes in the parameters' own dtype (--dtype)");
    } else if (!o.reduce_dtype.empty() && o.reduce_dtype != o.run.dtype) {
        throw std::invalid_argument("--reduce-dtype is FSDP's (fsdp, zero2): " + name + " reduces in --dtype");
    }
    if (!plan.sharded() && !plan.deepSpeed())
        plan.autocast = o.run.autocast; // ddp and zero1 in mixed precision: autocast over the master weights
    plan.reshard_after_forward = plan.shard == Sharding::Fsdp && o.reshard_after_forward;
    plan.root_reshard_after_forward = plan.reshard_after_forward && o.reshard_root_after_forward;
    if (plan.sharded() && !o.shard_units.empty())
        plan.units = shardUnitsMatching(layers, o.shard_units);
    plan.gradient_as_bucket_view = o.gradient_as_bucket_view;
    plan.grad_accum = o.grad_accum;
    plan.offload = o.offload;
    plan.gpus_per_node = o.gpus_per_node;
    plan.deepspeed = o.deepspeed;
    if (!o.backend.empty())
        plan.backend = o.backend;
    return plan;
}

namespace {

// The training step fit and whatif --gpus record: the CLI's run as a step, at the file's own inputs where --input
// gives none (the demo's, a program's export example, else the guess: a program's token inputs give the fit its
// sequence); --shard-units names the units FSDP records cast the inputs of (gpu_fit.h).
RunOptions rankStepOptions(const CliOptions& o, const OpenedFile& file, const ParallelPlan& plan)
{
    RunOptions base = o.run;
    base.mode = RunMode::Train;
    if (base.inputs.empty())
        base.inputs = file.inputsFor(base, nullptr, &base.input_types);
    if (!plan.units.empty())
        base.cast_module_inputs = unitsBelowRoot(plan, file.model->modules());
    return base;
}

} // namespace

int runFit(const CliOptions& o)
{
    const std::string name = o.model.empty() ? kDemoModelName : o.model;
    const auto started = std::chrono::steady_clock::now();
    GpuFitTable table;
    try {
        auto file = openFileOrDemo(o.model);
        if (!file.model)
            throw RunError("fit needs a model file, not a " + std::string(fileKindName(file.kind)));
        GpuFitRequest request;
        if (!o.precisions.empty())
            request.precisions = o.precisions;
        if (!o.shards.empty()) {
            request.shards.clear();
            for (const auto& s : o.shards)
                request.shards.push_back(*shardingFromName(s));
        }
        for (auto n : o.gpus)
            request.gpu_counts.push_back(static_cast<int>(n));
        request.budget = *o.budget;
        request.budget_text = o.budget_text;
        request.base = parallelPlanFromCli(o, file.model->modules(), 1, "fsdp");
        request.global_batch = o.global_batch;
        request.host_budget = o.host_budget;
        request.offloads = o.offloads;
        std::vector<std::string> checkpointNotes;
        request.checkpoints = checkpointsToAnalyze(o.checkpoints, file.model->info(), &checkpointNotes);

        const RunOptions base = rankStepOptions(o, file, request.base);
        const auto recordedDtypes = recordedPrecisionsFor(request.precisions, request.shards);
        std::optional<GpuFitTable> made;
        auto w = recordFitWhatIf(
            *file.model, base, request,
            [](const std::string& dtype, std::int64_t batch, int done) {
                std::cerr << "memledger: fit record " << done << " in " << dtype << " at batch " << batch << "\n";
            },
            &made);
        // A model with token inputs: its what-if along the sequence too, at the smallest micro-batch, for the
        // longest sequence that fits at each answer's fewest GPUs.
        std::optional<WhatIf> seqW;
        const bool tokens = !base.inputs.empty() && base.inputs.front().size() > 1 && !base.input_types.empty()
            && base.input_types.front().isToken();
        if (tokens) {
            WhatIfRequest seqRecords;
            seqRecords.axis = WhatIfAxis::Seq;
            seqRecords.dtypes = recordedDtypes;
            seqRecords.current_batch = w.runnableRange().min;
            seqRecords.current_seq = base.seq.value_or(base.inputs.front()[1]);
            try {
                seqW = recordWhatIf(*file.model, base, seqRecords,
                    [](const std::string& dtype, std::int64_t seq, int done) {
                        std::cerr << "memledger: fit record " << done << " in " << dtype << " at sequence " << seq << "\n";
                    });
                request.seq_whatif = &*seqW;
            } catch (const RunError& e) {
                std::cerr << "memledger: no longest sequence: " << e.what() << "\n";
            }
        }
        if (made) { // the records' last table: the same answers
            table = std::move(*made);
            addLongestSequences(table, request);
        } else
            table = makeGpuFitTable(w, request);
        if (seqW) {
            const auto& range = seqW->runnableRange();
            bool capped = false;
            for (const auto& a : table.answers)
                capped = capped || (range.bounded() && a.longest_seq == range.max);
            if (capped)
                table.notes.push_back("a sequence of " + std::to_string(range.max) + " is the longest the program accepts ("
                    + (range.why.empty() ? range.text() : range.why) + "): a longer one may fit but cannot run");
        }
        table.optimizer = base.optimizer;
        table.notes.insert(table.notes.begin(), checkpointNotes.begin(), checkpointNotes.end());
        if (tokens)
            table.seq = base.seq.value_or(base.inputs.front()[1]);
        auto notes = w.notes();
        keepNotesOf(recordedDtypes, notes);
        for (const auto& n : notes)
            if (std::find(table.notes.begin(), table.notes.end(), n) == table.notes.end())
                table.notes.push_back(n);
        // The time the answer took, records included (the table's own is the search over them).
        table.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    } catch (const std::exception&) {
        return failureExit({}, name);
    }
    std::cout << "Fit for " << name << ": one " << (table.optimizer.empty() ? "" : table.optimizer + " ")
              << "training step per rank" << (table.seq > 0 ? ", sequence " + std::to_string(table.seq) : std::string())
              << (table.device == "meta" ? ", on the meta device (figures from shapes)" : "") << "\n\n"
              << gpuFitToText(table);
    return writeOutputs(
        o, [&] { return gpuFitToJson(table).dump(2) + "\n"; }, [&] { return gpuFitToHtml(table, name); });
}


int runRankWhatIf(const CliOptions& o)
{
    const std::string name = o.model.empty() ? kDemoModelName : o.model;
    std::vector<Prediction> rows;
    GpuFitTable overheads;
    std::vector<std::string> notes;
    try {
        auto file = openFileOrDemo(o.model);
        if (!file.model)
            throw RunError("whatif needs a model file, not a " + std::string(fileKindName(file.kind)));
        GpuFitRequest request;
        request.budget = o.budget.value_or(0);
        request.budget_text = o.budget_text;
        request.base = parallelPlanFromCli(o, file.model->modules(), 1, "fsdp");
        std::vector<std::string> precisions = o.precisions;
        if (precisions.empty())
            precisions = o.dtypes.empty() ? std::vector<std::string> {"bfloat16-mixed", "float32"} : o.dtypes;
        std::vector<Sharding> shards;
        for (const auto& s : o.shards.empty() ? std::vector<std::string> {"fsdp"} : o.shards)
            shards.push_back(*shardingFromName(s));
        std::vector<int> gpus;
        for (auto n : o.gpus.empty() ? std::vector<std::int64_t> {1} : o.gpus)
            gpus.push_back(static_cast<int>(n));
        const RunOptions base = rankStepOptions(o, file, request.base);
        std::vector<std::int64_t> batches = o.batches;
        if (batches.empty())
            batches = {1, 2, 4, 8};
        WhatIfRequest records;
        records.dtypes = recordedPrecisionsFor(precisions, shards);
        records.rows = batches;
        auto w = recordWhatIf(*file.model, base, records, [](const std::string& dtype, std::int64_t batch, int done) {
            std::cerr << "memledger: what-if record " << done << " in " << dtype << " at batch " << batch << "\n";
        });
        auto specs = checkpointsToAnalyze(o.checkpoints, file.model->info(), &notes);
        if (specs.empty())
            specs.emplace_back();
        for (const auto& spec : specs) {
            auto part = rankRows(w.withCheckpoint(spec), batches, precisions, shards, gpus, request);
            for (auto& p : part)
                p.checkpoint = spec.text();
            rows.insert(rows.end(), part.begin(), part.end());
        }
        overheads.budget_bytes = request.budget;
        overheads.budget_text = request.budget_text;
        setOverheadEstimates(overheads);
        auto whatIfNotes = w.notes();
        keepNotesOf(records.dtypes, whatIfNotes);
        notes.insert(notes.end(), whatIfNotes.begin(), whatIfNotes.end());
        std::sort(notes.begin(), notes.end());
        notes.erase(std::unique(notes.begin(), notes.end()), notes.end());
    } catch (const std::exception&) {
        return failureExit({}, name);
    }
    std::cout << "What-if for " << name << ": one rank (rank 0) of a data-parallel training step\n\n";
    const bool ckpt = std::any_of(rows.begin(), rows.end(), [](const Prediction& p) { return p.checkpoint != "none"; });
    std::cout << "precision       strategy  " << (ckpt ? padCell("checkpoint", 24) : std::string()) << padCell("GPUs", 6, true) << padCell("batch", 7, true) << padCell("peak total", 13, true)
              << padCell("reserved", 13, true) << padCell("weights", 12, true) << padCell("grads", 12, true) << padCell("optimizer", 12, true)
              << (overheads.budget_bytes > 0 ? "  fits" : "") << "\n";
    for (const auto& p : rows) {
        std::cout << padCell(p.dtype, 16) << padCell(p.shard, 10) << (ckpt ? padCell(p.checkpoint, 24) : std::string())
                  << padCell(std::to_string(p.gpus), 6, true) << padCell(std::to_string(p.seq > 0 ? p.seq : p.batch), 7, true);
        if (!p.runnable) {
            std::cout << "  " << p.not_runnable << "\n";
            continue;
        }
        std::cout << padCell(formatBytes(p.predicted_peak_total_bytes), 13, true)
                  << padCell(p.predicted_reserved_bytes > 0 ? formatBytes(p.predicted_reserved_bytes) : "-", 13, true)
                  << padCell(formatBytes(p.weight_bytes), 12, true) << padCell(formatBytes(p.gradient_bytes), 12, true)
                  << padCell(formatBytes(p.optimizer_state_bytes), 12, true);
        if (overheads.budget_bytes > 0)
            std::cout << "  " << (p.fits.value_or(false) ? "yes" : p.out_of_memory ? "no (out of memory)" : "no");
        std::cout << "\n";
    }
    if (overheads.budget_bytes > 0)
        std::cout << "\nFits: within the allocator's share of "
                  << (overheads.budget_text.empty() ? formatBytes(overheads.budget_bytes) : overheads.budget_text)
                  << ": " << formatBytes(overheads.allocatorBudget(1)) << " on one GPU, "
                  << formatBytes(overheads.allocatorBudget(2)) << " on more (the CUDA context, "
                  << formatBytes(overheads.overheads.cuda_context_bytes) << ", and NCCL's buffers, " << formatBytes(overheads.overheads.nccl_bytes)
                  << ", off it: estimates)\n";
    for (const auto& n : notes)
        std::cout << "Note: " << n << "\n";
    if (!o.json.empty()) {
        try {
            nlohmann::json j = {{"format", "memledger-whatif"}, {"version", 1}, {"budget_bytes", overheads.budget_bytes},
                {"cuda_context_bytes", overheads.overheads.cuda_context_bytes}, {"nccl_bytes", overheads.overheads.nccl_bytes}};
            auto& out = j["predictions"] = nlohmann::json::array();
            for (const auto& p : rows) {
                auto row = predictionToJson(p);
                if (p.fits)
                    row["fits"] = *p.fits;
                out.push_back(row);
            }
            writeFileAtomically(o.json, j.dump(2) + "\n");
            std::cout << "Wrote " << o.json << "\n";
        } catch (const std::exception&) {
            return failureExit();
        }
    }
    return kExitOk;
}

} // namespace memledger
