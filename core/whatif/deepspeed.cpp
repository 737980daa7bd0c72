// One rank of DeepSpeed's ZeRO stages 1-3 laid over a training step recorded on one device (whatif/parallel.h).
//
// Modelled from DeepSpeed 0.19's runtime/zero/ (stage_1_and_2.py, stage3.py, partition_parameters.py,
// partitioned_param_coordinator.py), with bf16 or fp16 enabled: the engine casts the model to that dtype
// (param_dtype) and the step computes in it, as recorded. The optimizer steps float32 master weights.
// - Stages 1 and 2: each rank keeps the 16-bit parameters whole, in one flat buffer per group (the trainable
//   parameters, padded to a multiple of 2 x N elements); its optimizer steps a partition of 1/N of it: the float32
//   master partition and the optimizer's state over it. In the backward each gradient is copied into a bucket of
//   reduce_bucket_size elements (two with overlap_comm), allocated when the backward begins and freed when it ends.
//   Stage 1 keeps the 16-bit gradients whole until the step, plus its partition's copy in grad_accum_dtype made
//   when the backward ends; stage 2 frees each gradient once it is in the bucket and reduces it into the rank's
//   gradient partition (grad_accum_dtype), allocated by the first. The step makes a float32 copy of the gradient
//   partition where grad_accum_dtype is not float32, and frees the gradients.
// - Stage 3: every parameter is partitioned (ceil(numel / N) elements a rank, in one flat 16-bit buffer) but those
//   of at most param_persistence_threshold elements, which each rank also keeps whole. Before a module's forward
//   and backward its own parameters are all-gathered into one flat buffer (N partitions), with the modules after
//   it in the trace gathered ahead up to prefetch_bucket_size elements (less where max_live_parameters is near);
//   after its forward and backward they are released unless the module comes again within max_reuse_distance
//   elements of gathering. Gradients go through one bucket of reduce_bucket_size elements made with the optimizer
//   into a gradient partition in grad_accum_dtype, both alive through the step.
// - offload_optimizer (--offload optimizer): the master partition, the optimizer's state, a float32 gradient
//   partition and the optimizer's step are the host's; each gradient goes from the bucket to the host.
//   offload_param (--offload params, stage 3): the 16-bit partitions too, each copied to the device to be gathered.
// These are the model states of DeepSpeed's own estimators (estimate_zero2_model_states_mem_needs and
// estimate_zero3_model_states_mem_needs: 2 bytes a parameter plus 18 over N for stage 2, 18 over N plus four
// bytes of the largest module's parameters for stage 3, when grad_accum_dtype is float32).
#include "whatif/rank_schedule.h"

#include "report/trace_edit.h"
#include "support/dtype.h"
#include "support/format.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>

namespace memledger {

namespace {

std::string ownerOf(const std::string& name)
{
    auto dot = name.rfind('.');
    return dot == std::string::npos ? std::string() : name.substr(0, dot);
}

std::int64_t ceilDiv(std::int64_t a, std::int64_t b)
{
    return b > 0 ? (a + b - 1) / b : a;
}

} // namespace

RankLayout layOutDeepSpeedRank(const ModelInfo& model, const Trace& step, const std::vector<OpCall>& ops,
    const std::vector<Phase>& phases, const std::vector<MicroSteps::Shown>& microSteps, const RunInfo& run,
    std::int64_t optimizerStateBytes, const ParallelPlan& plan)
{
    const int n = plan.gpus;
    const auto& ds = plan.deepspeed;
    const int stage = plan.shard == Sharding::DsZero1 ? 1 : plan.shard == Sharding::DsZero2 ? 2 : 3;
    const std::string gradDtype = ds.grad_accum_dtype.empty() ? plan.paramDtype() : ds.grad_accum_dtype;
    const int md = dtypeSize(plan.master_dtype), pd = dtypeSize(plan.paramDtype()), gd = dtypeSize(gradDtype);
    const int cd = dtypeSize(run.dtype);
    const bool offloadOptimizer = !plan.offload.empty(); // "optimizer", or "params" (which moves the optimizer too)
    const bool offloadParams = plan.offload == "params";

    RankLayout out;
    auto& info = out.info;
    info.gpus = n;
    info.shard = shardingName(plan.shard);
    info.master_dtype = plan.master_dtype;
    info.param_dtype = plan.paramDtype();
    info.reduce_dtype = plan.paramDtype(); // DeepSpeed communicates gradients in the model's dtype
    info.reshard_after_forward = stage == 3;
    info.root_reshard_after_forward = false;
    info.backend = plan.backend;
    info.offload = plan.offload;
    info.gpus_per_node = std::min(plan.gpus_per_node, n);

    // Stage 3 gathers each module's own parameters (module.parameters(recurse=False)): its units are the modules
    // that hold parameters, in the model's order.
    const auto params = shardParameters(model, {""}, n, false);
    if (params.empty())
        throw std::invalid_argument("the model lists no parameters to lay out across ranks");
    std::vector<std::string> units;
    std::map<std::string, std::int64_t> gatheredNumel, unitNumel; // per unit: its partitioned (gathered) and all elements
    std::int64_t fullNumel = 0, trainable = 0, partitioned = 0, trainablePartition3 = 0, persistentNumel = 0;
    std::vector<std::int64_t> frozenBlocks, persistentBlocks;
    for (const auto& p : params) {
        fullNumel += p.numel;
        const auto owner = ownerOf(p.name);
        if (std::find(units.begin(), units.end(), owner) == units.end())
            units.push_back(owner);
        unitNumel[owner] += p.numel;
        const auto part = ceilDiv(p.numel, n);
        partitioned += part;
        if (p.trainable) {
            trainable += p.numel;
            trainablePartition3 += part;
        } else if (p.numel > 0) {
            frozenBlocks.push_back(p.numel * pd);
        }
        if (p.numel <= ds.param_persistence_threshold) {
            persistentNumel += p.numel;
            if (p.numel > 0)
                persistentBlocks.push_back(p.numel * pd);
        } else {
            gatheredNumel[owner] += part * n;
        }
    }
    info.full_parameter_bytes = fullNumel * md;
    if (stage == 3)
        info.units = units;
    // The optimizer's partition: stages 1 and 2 pad the flat group to a multiple of 2 x N elements
    // (nccl_start_alignment_factor) and give each rank 1/N of it; stage 3 steps the trainable parameters' partitions.
    const std::int64_t alignment = 2LL * n;
    const std::int64_t partition = stage == 3 ? trainablePartition3 : ceilDiv(trainable, alignment) * alignment / n;

    // Resident before the step. The engine casts the module: floating-point buffers are in the 16-bit dtype too.
    const auto buffers = residentBuffers(model, pd);
    std::int64_t hostParameters = 0;
    if (stage < 3) {
        const auto flat = ceilDiv(trainable, alignment) * alignment * pd;
        out.parameter_bytes = flat;
        if (flat > 0)
            info.resident_blocks.push_back(flat);
        for (auto b : frozenBlocks) {
            out.parameter_bytes += b;
            info.resident_blocks.push_back(b);
        }
    } else {
        if (offloadParams) {
            hostParameters = partitioned * pd;
        } else {
            out.parameter_bytes = partitioned * pd;
            info.resident_blocks.push_back(partitioned * pd);
        }
        for (auto b : persistentBlocks) {
            out.parameter_bytes += b;
            info.resident_blocks.push_back(b);
        }
    }
    info.resident_blocks.insert(info.resident_blocks.end(), buffers.blocks.begin(), buffers.blocks.end());
    out.weight_bytes = out.parameter_bytes + buffers.bytes;

    // The optimizer's state: the master partition and as many tensors of its size as recorded per element (Adam two).
    const double perElement
        = trainable > 0 ? static_cast<double>(optimizerStateBytes) / static_cast<double>(trainable * cd) : 0.0;
    const int statesPerParameter = static_cast<int>(perElement + 0.5);
    const std::int64_t master = partition * md;
    const std::int64_t optimizerState = master + static_cast<std::int64_t>(perElement * static_cast<double>(partition * md) + 0.5);
    std::int64_t hostOptimizerState = 0, hostGradients = 0;
    if (offloadOptimizer) {
        hostOptimizerState = optimizerState;
        hostGradients = partition * md; // the float32 gradient partition the host's optimizer steps
    } else {
        out.optimizer_state_bytes = optimizerState;
        if (master > 0) {
            info.resident_blocks.push_back(master);
            for (int s = 0; s < statesPerParameter; ++s)
                info.resident_blocks.push_back(master);
        }
    }

    TraceEdit edit(step);
    const OpEnds opEnds(ops, step.size());
    const Phase* optimizer = findPhase(phases, "optimizer");
    const std::size_t stepBegin = optimizer ? optimizer->first_event : step.size();
    const std::size_t stepEnd = optimizer ? std::min<std::size_t>(optimizer->end_event, step.size()) : step.size();
    const std::int64_t bucket = ds.reduce_bucket_size * pd;

    std::vector<std::size_t> gradients;
    for (std::size_t i = 0; i < step.size(); ++i)
        if (step.action[i] == Action::Alloc && step.ledger[i] == Ledger::Gradients)
            gradients.push_back(i);
    auto inPhase = [&](std::size_t i, std::size_t phase) {
        const auto& p = phases.at(phase);
        return i >= p.first_event && i < p.end_event;
    };

    // Stage 3: the bucket and the gradient partition are made with the optimizer, before the step.
    std::optional<TraceEdit::Handle> gradPartition;
    if (stage == 3) {
        edit.addAlloc(0, bucket, Ledger::Communication, "", "ds::ipg_bucket");
        if (!offloadOptimizer && partition > 0)
            gradPartition = edit.addAlloc(0, partition * gd, Ledger::Gradients, "", "ds::grad_partition");
    }
    // Each micro-step's backward: the buckets (stages 1 and 2), each gradient into them.
    const bool keepGradients = stage == 1 && !offloadOptimizer; // stage 1 keeps the 16-bit gradients to the step
    for (const auto& m : microSteps) {
        const auto& bw = phases.at(m.backward_phase);
        std::vector<TraceEdit::Handle> buckets;
        if (stage < 3)
            for (int b = 0; b < (ds.overlap_comm ? 2 : 1); ++b)
                buckets.push_back(edit.addAlloc(bw.first_event, bucket, Ledger::Communication, "", "ds::ipg_bucket"));
        for (auto g : gradients) {
            if (!inPhase(g, m.backward_phase))
                continue;
            if (!keepGradients)
                edit.addFree(opEnds.endOfOpAt(g), g);
            // Stage 2: the rank's gradient partition, made by the first reduction, kept to the step.
            if (stage == 2 && !offloadOptimizer && !gradPartition && partition > 0)
                gradPartition = edit.addAlloc(opEnds.endOfOpAt(g), partition * gd, Ledger::Gradients, "", "ds::grad_partition");
        }
        const auto end = std::min<std::size_t>(bw.end_event, step.size());
        for (auto b : buckets)
            edit.addFree(end, b);
    }
    const auto& lastBackward = phases.at(microSteps.back().backward_phase);
    // Stage 1: when the last backward ends, the partition's gradients are copied out in grad_accum_dtype.
    if (stage == 1 && !offloadOptimizer && partition > 0)
        gradPartition = edit.addAlloc(std::min<std::size_t>(lastBackward.end_event, step.size()), partition * gd,
            Ledger::Gradients, "", "ds::grad_partition");
    // The step: a float32 copy of the gradient partition where it is in another dtype; the gradients freed after it.
    if (optimizer && gradPartition && gd != md) {
        auto fp32 = edit.addAlloc(stepBegin, partition * md, Ledger::Gradients, "", "ds::fp32_grad_partition");
        edit.addFree(stepEnd, fp32);
    }
    if (stage < 3 && gradPartition)
        edit.addFree(stepEnd, *gradPartition);
    if (keepGradients)
        for (auto g : gradients)
            if (step.partner[g] == kNoPartner)
                edit.addFree(stepEnd, g);

    // Stage 3's gathers around each module's forward and backward.
    std::int64_t largestGather = 0;
    if (stage == 3) {
        const auto points = hookPoints(step, ops, phases, microSteps, units).points;
        // The trace of fetches (DeepSpeed's __submodule_order) per micro-step, and each point's place in it.
        std::vector<std::size_t> nextFetch(points.size());
        std::vector<std::vector<std::string>> fetches(microSteps.size());
        for (std::size_t k = 0; k < points.size(); ++k) {
            auto& f = fetches[points[k].micro];
            nextFetch[k] = f.size() + (points[k].order >= 2 && points[k].order <= 3 ? 1 : 0);
            if (points[k].order == 2 || points[k].order == 3)
                f.push_back(points[k].unit);
        }
        std::map<std::string, TraceEdit::Handle> gathered;
        std::int64_t available = 0;
        auto gather = [&](const std::string& u, std::size_t pos) {
            const auto numel = gatheredNumel.count(u) ? gatheredNumel.at(u) : 0;
            if (numel == 0 || gathered.count(u))
                return std::int64_t {0};
            std::optional<TraceEdit::Handle> copied;
            if (offloadParams) // the partitions copied from the host to be gathered
                copied = edit.addAlloc(pos, numel / n * pd, Ledger::Communication, u, "ds::h2d_copy");
            gathered[u] = edit.addAlloc(pos, numel * pd, Ledger::GatheredParameters, u, "ds::all_gather");
            largestGather = std::max(largestGather, numel);
            if (copied)
                edit.addFree(pos, *copied);
            available += numel;
            return numel;
        };
        auto release = [&](const std::string& u, std::size_t pos) {
            auto it = gathered.find(u);
            if (it == gathered.end())
                return;
            edit.addFree(pos, it->second);
            available -= gatheredNumel.at(u);
            gathered.erase(it);
        };
        for (std::size_t k = 0; k < points.size(); ++k) {
            const auto& pt = points[k];
            const auto& f = fetches[pt.micro];
            if (pt.order == 2 || pt.order == 3) {
                gather(pt.unit, pt.pos);
                if (ds.prefetch_bucket_size <= 0)
                    continue;
                const auto budget = std::min(ds.prefetch_bucket_size, ds.max_live_parameters - available);
                std::int64_t prefetching = 0;
                for (std::size_t j = nextFetch[k]; j < f.size() && prefetching < budget; ++j)
                    prefetching += gather(f[j], pt.pos);
            } else if (pt.order == 4) {
                std::vector<std::string> all;
                for (const auto& [u, h] : gathered)
                    all.push_back(u);
                for (const auto& u : all)
                    release(u, pt.pos);
            } else {
                // Released unless the module is gathered again within max_reuse_distance elements of the trace.
                std::int64_t traversed = 0;
                bool reused = false;
                for (std::size_t j = nextFetch[k]; j < f.size() && traversed < ds.max_reuse_distance && !reused; ++j) {
                    reused = f[j] == pt.unit;
                    traversed += unitNumel.count(f[j]) ? unitNumel.at(f[j]) : 0;
                }
                if (!reused)
                    release(pt.unit, pt.pos);
            }
        }
    }

    // The optimizer's temporaries: those of its partition (the recorded ones, of the whole model at the run's dtype,
    // scaled to the partition at the master dtype).
    const double share = trainable > 0 ? static_cast<double>(partition) / static_cast<double>(trainable) : 0.0;
    std::int64_t hostOptimizerTemporaries = 0;
    if (optimizer) {
        for (std::size_t i = stepBegin; i < stepEnd; ++i)
            if (step.action[i] == Action::Alloc && !edit.dropped(i) && step.ledger[i] != Ledger::Gradients)
                edit.resize(i, static_cast<std::int64_t>(static_cast<double>(step.bytes[i]) * share * md / cd + 0.5));
        if (offloadOptimizer)
            hostOptimizerTemporaries = moveOptimizerScratchToHost(edit, step, *optimizer);
    }

    out.gradient_bytes = stage == 3 && gradPartition ? partition * gd : 0;
    info.host_bytes = hostParameters + hostGradients + hostOptimizerState + hostOptimizerTemporaries;
    out.host_scratch_bytes = hostOptimizerTemporaries;
    out.ops = ops;
    out.phases = phases;
    out.trace = edit.build(&out.ops, &out.phases);

    const std::string name = info.shard;
    std::string layout = name + " (DeepSpeed's ZeRO stage " + std::to_string(stage) + "): ";
    if (stage < 3)
        layout += "the " + plan.paramDtype() + " parameters whole on every rank (" + formatBytes(out.parameter_bytes) + "), ";
    else
        layout += "the " + plan.paramDtype() + " parameters partitioned (" + formatBytes(partitioned * pd) + (offloadParams ? " on the host" : "")
            + ") but " + std::to_string(persistentBlocks.size()) + " of at most " + std::to_string(ds.param_persistence_threshold)
            + " elements kept whole (" + formatBytes(persistentNumel * pd) + "), each module's gathered for its forward and "
            + "backward (the largest " + formatBytes(largestGather * pd) + "; prefetch " + std::to_string(ds.prefetch_bucket_size)
            + " elements, reuse distance " + std::to_string(ds.max_reuse_distance) + "), ";
    layout += "a " + plan.master_dtype + " master partition of " + std::to_string(partition) + " elements with "
        + std::to_string(statesPerParameter) + " optimizer state tensor" + (statesPerParameter == 1 ? "" : "s") + " ("
        + formatBytes(optimizerState) + (offloadOptimizer ? ", on the host" : "") + "), ";
    if (stage == 1 && !offloadOptimizer)
        layout += "the " + plan.paramDtype() + " gradients whole until the step and the partition's copy in " + gradDtype;
    else if (offloadOptimizer)
        layout += "each gradient through the bucket to the host's " + plan.master_dtype + " gradient partition";
    else
        layout += "each gradient through the bucket into a " + gradDtype + " gradient partition (" + formatBytes(partition * gd) + ")";
    layout += "; " + std::string(stage < 3 && ds.overlap_comm ? "two buckets" : "a bucket") + " of "
        + std::to_string(ds.reduce_bucket_size) + " elements (" + formatBytes(bucket) + ", reduce_bucket_size)"
        + (stage < 3 ? " through each backward" : " made with the optimizer");
    if (gradPartition && gd != md)
        layout += "; the step's " + plan.master_dtype + " copy of the gradient partition (" + formatBytes(partition * md) + ")";
    layout += ". Modelled from DeepSpeed 0.19's runtime/zero/ (stage_1_and_2.py, stage3.py, "
              "partitioned_param_coordinator.py), not measured; the step's optimizer temporaries are those of torch's "
              "optimizer over the partition (DeepSpeed's FusedAdam and CPUAdam make none)";
    out.notes.push_back(layout);
    if (offloadOptimizer)
        out.notes.push_back("offloaded (DeepSpeed's offload_optimizer" + std::string(offloadParams ? " and offload_param" : "")
            + "): the host's pinned memory holds " + (offloadParams ? formatBytes(hostParameters) + " of parameter partitions, " : std::string())
            + formatBytes(hostOptimizerState) + " of master weights and optimizer state, " + formatBytes(hostGradients)
            + " of gradients and the step's " + formatBytes(hostOptimizerTemporaries) + " of scratch: " + formatBytes(info.host_bytes)
            + " per rank, " + formatBytes(info.host_bytes * info.gpus_per_node) + " per node of " + std::to_string(info.gpus_per_node)
            + (info.gpus_per_node == 1 ? " GPU" : " GPUs") + " (DeepSpeed's estimators add half again: additional_buffer_factor 1.5)");
    out.notes.push_back("one rank of " + plan.text() + ": rank 0; the step was recorded on one device at the rank's "
        + "micro-batch in " + plan.paramDtype() + " and the " + name + " schedule laid over it");
    return out;
}

} // namespace memledger
