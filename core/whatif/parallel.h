#pragma once
// One rank of a data-parallel training job, laid over a training step recorded on one device.
//
// The step is recorded once, in the dtype the forward and backward compute in (FSDP's param_dtype), at the
// rank's micro-batch. Its activations and temporaries are what one rank makes; what sharding changes is laid
// over it as the job's hooks do it:
// - fsdp (FSDP2's fully_shard): every parameter is sharded on dim 0, padded to a multiple of N rows; rank 0
//   holds the first (largest) shard, in the master dtype. Before a unit's forward, and again before its
//   backward, its parameters are all-gathered in param_dtype (an all-gather output of N padded shards, then
//   one unsharded tensor per parameter); they are freed after the unit's forward (reshard_after_forward; the
//   root keeps them until its backward ends) and after its backward. When a unit's backward starts, the next
//   unit's all-gather is issued too (FSDP2's backward prefetch). After a unit's backward its gradients are
//   copied into a reduce-scatter input (N padded shards, reduce_dtype), freed, and reduced into a sharded
//   gradient (cast to the master dtype where reduce_dtype differs). The optimizer state and the optimizer's
//   temporaries are those of the local shards.
// - zero2: fsdp without reshard_after_forward (the parameters stay gathered from a unit's forward to the end
//   of its backward).
// - ddp: everything replicated, plus DDP's gradient buckets (as many bytes as the parameters; 25 MiB each, the
//   first 1 MiB), allocated when the model is wrapped; each gradient is a copy of its bucket slice, or with
//   gradient_as_bucket_view a view of it (autograd's own gradient freed once AccumulateGrad copied it in).
// - zero1: ddp whose optimizer state (and the optimizer's temporaries) only covers the parameters the rank owns,
//   partitioned as torch.distributed.optim.ZeroRedundancyOptimizer does (whole parameters, largest first, each
//   to the least loaded rank); DeepSpeed's stage 1 partitions by element, within a parameter of the same.
// - ds-zero1, ds-zero2, ds-zero3: DeepSpeed's ZeRO stages 1-3 as DeepSpeed lays them out (whatif/deepspeed.cpp,
//   DeepSpeed 0.19's runtime/zero/): the engine casts the model to the 16-bit dtype (param_dtype); the optimizer
//   steps float32 master weights partitioned by element, with Adam's moments and a float32 gradient partition.
//   Stages 1 and 2 keep the 16-bit parameters whole on every rank (stage 1 the 16-bit gradients too); stage 3
//   partitions them and gathers each module's own parameters around its forward and backward.
// Not modelled: tensor and pipeline parallelism, activation offloading, NCCL's and the CUDA context's own
// memory (outside PyTorch's allocator: see the fit table's estimates).
#include "report/report.h"
#include "support/dtype.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace memledger {

enum class Sharding { Fsdp, Zero2, Zero1, Ddp, DsZero1, DsZero2, DsZero3 };
const char* shardingName(Sharding s); // "fsdp" | "zero2" | "zero1" | "ddp" | "ds-zero1" | "ds-zero2" | "ds-zero3"
// fsdp and zero2 shard the parameters as FSDP2 does (gathered in param_dtype per unit); zero1 and ddp keep them whole.
inline bool shardsParameters(Sharding s)
{
    return s == Sharding::Fsdp || s == Sharding::Zero2;
}
// DeepSpeed's ZeRO stages: a model cast to param_dtype, a float32 master partition.
inline bool isDeepSpeed(Sharding s)
{
    return s == Sharding::DsZero1 || s == Sharding::DsZero2 || s == Sharding::DsZero3;
}
// The strategies that compute in a param_dtype other than the master dtype (fsdp, zero2 and DeepSpeed's stages);
// ddp and zero1 compute in the weights' own dtype, under autocast where mixed.
inline bool takesParamDtype(Sharding s)
{
    return shardsParameters(s) || isDeepSpeed(s);
}
std::optional<Sharding> shardingFromName(const std::string& name);
// "fsdp, zero2, zero1, ddp, ds-zero1, ds-zero2, ds-zero3": for messages.
std::string shardingNames();

// DeepSpeed's zero_optimization settings that move memory (DeepSpeed 0.19's defaults), and its data_types.
struct DeepSpeedOptions {
    std::int64_t reduce_bucket_size = 500000000; // elements of each gradient bucket (ipg buffer), in param_dtype
    bool overlap_comm = false; // stages 1 and 2: two buckets (DeepSpeed's default for stage 3 is true: one bucket)
    std::int64_t prefetch_bucket_size = 50000000; // stage3_prefetch_bucket_size: elements gathered ahead
    std::int64_t max_live_parameters = 1000000000; // stage3_max_live_parameters: caps the prefetch
    std::int64_t max_reuse_distance = 1000000000; // stage3_max_reuse_distance: a module's parameters used again
                                                   // within this many elements of gathering stay gathered
    std::int64_t param_persistence_threshold = 100000; // stage3: a parameter of at most this many elements is kept whole
    std::string grad_accum_dtype; // data_types.grad_accum_dtype: "" the model's dtype (DeepSpeed's default)
};

struct ParallelPlan {
    int gpus = 1;
    Sharding shard = Sharding::Fsdp;
    std::string master_dtype = "float32"; // the model's own dtype: shards, gradients, optimizer state
    std::string param_dtype; // fsdp/zero2: the gathered parameters' dtype ("": master_dtype)
    // "": the master dtype, as FSDP2 in PyTorch 2.15 (reduce_dtype None: the parameter's own dtype; earlier
    // versions reduced in param_dtype: give it)
    std::string reduce_dtype;
    bool reshard_after_forward = true; // fsdp (zero2: false)
    // The root too (fully_shard(model, reshard_after_forward=True) given explicitly); FSDP2's default (None)
    // keeps the root's parameters from its forward to its backward.
    bool root_reshard_after_forward = false;
    std::vector<std::string> units; // fsdp/zero2: module paths; empty: defaultShardUnits
    bool gradient_as_bucket_view = false; // ddp, zero1
    std::int64_t bucket_bytes = 25 * 1024 * 1024; // ddp, zero1: bucket_cap_mb
    std::int64_t first_bucket_bytes = 1024 * 1024; // DDP's first bucket (dist._DEFAULT_FIRST_BUCKET_BYTES)

    // ddp/zero1: torch.autocast's dtype over master_dtype weights ("": none), the mixed precision of an unsharded job.
    std::string autocast;
    // The process group's backend: "nccl" (GPUs: the collectives work in the buffers they are given) or "gloo"
    // (CPU jobs: fsdp/zero2's all-gather makes a flat buffer of its output's size in the calling thread and frees
    // it at once, and its reduce-scatter clones its input until the collective completes).
    std::string backend = "nccl";
    // Gradient accumulation (whatif/accumulation.h): micro-batches per optimizer step. Every micro-step but the last
    // runs without gradient synchronization (FSDP2's set_requires_gradient_sync(False), DDP's no_sync): fsdp and zero2
    // keep each unit's unsharded gradients (in reduce_dtype where it is wider: FSDP2's grad_dtype) and reduce-scatter
    // them in the last micro-step's backward; ddp and zero1 keep param.grad and fill their buckets in the last.
    int grad_accum = 1;
    // CPU offload: "" none; "params": FSDP2's CPUOffloadPolicy (fsdp, zero2): the sharded parameters, their gradients
    // and the optimizer's state and step live in the host's pinned memory. Before a unit's all-gather each parameter's
    // padded shard is copied to the device (then cast to param_dtype where it differs); after its reduce-scatter the
    // gradient shard is copied back and the device's freed (_fsdp_param.py all_gather_inputs, _fsdp_collectives.py
    // foreach_reduce, PyTorch 2.15).
    // DeepSpeed (ds-zero1/2/3): "optimizer" is offload_optimizer (ZeRO-Offload: the master partition, the optimizer
    // state, the float32 gradient partition and the step on the host); "params" is ds-zero3's offload_param too (the
    // 16-bit partitions on the host as well).
    std::string offload;
    int gpus_per_node = 8; // the ranks that share a host (its pinned memory)
    DeepSpeedOptions deepspeed; // ds-zero1/2/3

    std::string paramDtype() const { return param_dtype.empty() ? master_dtype : param_dtype; }
    // The precision of the recorded step the rank is laid over (support/dtype.h): fsdp and zero2 record in their
    // param_dtype, with each unit's inputs cast to it where it is not the master dtype ("bfloat16-fsdp"); ddp and
    // zero1 in the master dtype, under autocast where it is set ("bfloat16-mixed").
    std::string recordedPrecision() const
    {
        if (isDeepSpeed(shard)) // the engine casts the model (module.bfloat16()); no autocast, no input casts
            return paramDtype();
        if (sharded())
            return paramDtype() == master_dtype ? paramDtype() : fsdpRecordPrecision(paramDtype());
        return autocast.empty() ? paramDtype() : precisionOf(master_dtype, autocast);
    }
    std::string reduceDtype() const { return reduce_dtype.empty() ? master_dtype : reduce_dtype; }
    bool sharded() const { return shardsParameters(shard); }
    bool deepSpeed() const { return isDeepSpeed(shard); }
    // "fsdp on 8 GPUs, bfloat16 parameters, float32 master": for notes and titles.
    std::string text() const;
};

// FSDP's units as torchtitan and Hugging Face wrap a model: each of its repeated blocks (largestRepeatedBlocks: of a
// list's items of one type, the set holding the most weights; a Llama's decoder layers), then the root (""). A model
// with no repeated block: the root alone.
std::vector<std::string> defaultShardUnits(const std::vector<LayerStats>& layers);
// --shard-units: a comma-separated list of module paths, any component of which may be "*" (any one module name),
// e.g. "layers.*,tok_embeddings" or "layers.*.feed_forward,layers.*" (each block's MLP a unit inside its block). The root is always added. Throws std::invalid_argument naming a path the
// model does not have.
std::vector<std::string> shardUnitsMatching(const std::vector<LayerStats>& layers, const std::string& pattern);

// The plan's units but the root (plan.units, or defaultShardUnits): those whose floating-point inputs FSDP2 casts to
// param_dtype as their forward begins (MixedPrecisionPolicy.cast_forward_inputs, on by default), the root's being
// the run's own inputs.
std::vector<std::string> unitsBelowRoot(const ParallelPlan& plan, const std::vector<LayerStats>& layers);
// unitsBelowRoot where the plan gathers parameters in a dtype other than the master dtype (its recordedPrecision is
// an FSDP record); none otherwise. What the step a rank is laid over is recorded with (RunOptions::cast_module_inputs).
std::vector<std::string> inputCastUnits(const ParallelPlan& plan, const std::vector<LayerStats>& layers);

// Checks a plan against a recorded step (a training step, in the plan's param dtype, gpus >= 1, the dtypes
// known); throws std::invalid_argument with what to change.
void checkPlan(const ParallelPlan& plan, const RunInfo& run);
// The part of checkPlan that needs no step: --offload against the strategy.
void checkPlanOffload(const ParallelPlan& plan);

// What FSDP2's row padding costs on `gpus` GPUs where parameters have fewer rows in dim 0 than GPUs (a mixture of
// experts' [experts, ...] weights): a sentence for a note, "" where none does (or they cost rank 0 under a tenth
// more than an even split of the model would).
std::string fsdpPaddingNote(const ModelInfo& model, int gpus, const std::string& masterDtype);

// The rank's step: the recorded step's trace with the schedule laid over it.
struct RankLayout {
    Trace trace;
    std::vector<OpCall> ops;
    std::vector<Phase> phases;
    ParallelInfo info; // with CPU offload, info.host_bytes: what the rank holds on the host
    std::int64_t weight_bytes = 0; // the rank's parameter shards and the buffers, resident on the device
    std::int64_t parameter_bytes = 0; // of which parameter shards (0 with --offload params: on the host)
    std::int64_t optimizer_state_bytes = 0; // on the device (0 with --offload params)
    std::int64_t gradient_bytes = 0; // after the step: the rank's gradient shards (or replicas) on the device
    std::int64_t host_scratch_bytes = 0; // of info.host_bytes, the offloaded optimizer step's temporaries
    std::vector<std::string> notes;
};
// `step`: a training step's classified trace, ops and phases (a report's, or a what-if's predicted trace);
// `model` and `layers` the model's tensors and tree; `run` its RunInfo; `optimizerStateBytes` the recorded
// optimizer state (of the whole model at the run's dtype). `withOps` false: the layout's ops are left empty (a
// prediction reads the trace only; copying a 7B step's ops was a tenth of a fit table's time).
RankLayout layOutRank(const ModelInfo& model, const std::vector<LayerStats>& layers, const Trace& step,
    const std::vector<OpCall>& ops, const std::vector<Phase>& phases, const RunInfo& run,
    std::int64_t optimizerStateBytes, const ParallelPlan& plan, bool withOps = true);

// The rank's report: figures, ledgers (gathered parameters and communication buffers their own), layer tree,
// timeline and GPU replay of rank 0. Throws std::invalid_argument (checkPlan).
Report rankReport(const Report& step, const ParallelPlan& plan);

} // namespace memledger
