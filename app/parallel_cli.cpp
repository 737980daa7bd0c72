#include "parallel_cli.h"

#include "cli.h"
#include "demo_model.h"
#include "exports/gpu_fit_export.h"
#include "support/atomic_file.h"
#include "support/errors.h"
#include "support/format.h"
#include "whatif/gpu_fit.h"
#include "whatif/whatif_policy.h"

#include <nlohmann/json.hpp>

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
        throw std::invalid_argument("--shard '" + name + "' is not one of fsdp, zero2, zero1, ddp");
    plan.shard = *s;
    plan.master_dtype = o.run.dtype;
    if (plan.sharded()) {
        plan.param_dtype = o.param_dtype;
        plan.reduce_dtype = o.reduce_dtype;
    } else if (!o.param_dtype.empty() && o.param_dtype != o.run.dtype) {
        throw std::invalid_argument("--param-dtype is FSDP's (fsdp, zero2): " + name
            + " computes in the parameters' own dtype (--dtype)");
    } else if (!o.reduce_dtype.empty() && o.reduce_dtype != o.run.dtype) {
        throw std::invalid_argument("--reduce-dtype is FSDP's (fsdp, zero2): " + name + " reduces in --dtype");
    }
    plan.reshard_after_forward = plan.shard == Sharding::Fsdp && o.reshard_after_forward;
    if (plan.sharded() && !o.shard_units.empty())
        plan.units = shardUnitsMatching(layers, o.shard_units);
    plan.gradient_as_bucket_view = o.gradient_as_bucket_view;
    return plan;
}

std::string recordingDtype(const ParallelPlan& plan)
{
    return plan.paramDtype();
}

int runFit(const CliOptions& o)
{
    const std::string name = o.model.empty() ? kDemoModelName : o.model;
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
        request.base.reshard_after_forward = o.reshard_after_forward;

        RunOptions base = o.run;
        base.mode = RunMode::Train;
        if (base.inputs.empty()) {
            base.inputs = file.default_inputs;
            base.input_types = file.default_input_types;
        }
        WhatIfRequest records;
        records.dtypes = computeDtypesFor(request.precisions);
        records.rows = {1, 2, 4, 8}; // the records a training step's what-if makes, and a row past them if it is cheap
        auto w = recordWhatIf(*file.model, base, records, [](const std::string& dtype, std::int64_t batch, int done) {
            std::cerr << "memledger: fit record " << done << " in " << dtype << " at batch " << batch << "\n";
        });
        table = makeGpuFitTable(w, request);
        table.optimizer = base.optimizer;
        if (!base.inputs.empty() && base.inputs.front().size() > 1)
            table.seq = base.seq.value_or(base.inputs.front()[1]);
        for (const auto& n : w.notes())
            table.notes.push_back(n);
    } catch (const std::exception&) {
        return failureExit({}, name);
    }
    std::cout << "Fit for " << name << ": one " << (table.optimizer.empty() ? "" : table.optimizer + " ")
              << "training step per rank" << (table.seq > 0 ? ", sequence " + std::to_string(table.seq) : std::string())
              << (table.device == "meta" ? ", on the meta device (figures from shapes)" : "") << "\n\n"
              << gpuFitToText(table);
    if (!o.json.empty()) {
        try {
            writeFileAtomically(o.json, gpuFitToJson(table).dump(2) + "\n");
            std::cout << "Wrote " << o.json << "\n";
        } catch (const std::exception&) {
            return failureExit();
        }
    }
    return kExitOk;
}

} // namespace memledger
