#pragma once
// The fit table: "will this fine-tune fit, on how many GPUs, at which micro-batch?" For a budget (a GPU's
// memory), each precision and each data-parallel strategy, the fewest GPUs on which one rank's step fits, and the
// largest micro-batch per rank there, from a training step's what-if (one record per compute dtype) laid out
// per rank (whatif/parallel.h). "Fits" is the what-if's rule (fitsWithin: the peak total and the reserve on a
// device of the allocator's share of the budget), inside the program's range, with the CUDA context and NCCL's
// buffers (estimates, outside PyTorch's allocator) taken off the budget first.
#include "report/whatif_table.h"
#include "whatif/parallel.h"
#include "whatif/whatif.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace memledger {

struct GpuFitRequest {
    std::vector<std::string> precisions = {"bfloat16-mixed", "bfloat16", "float32"};
    std::vector<Sharding> shards = {Sharding::Fsdp, Sharding::Zero2, Sharding::Zero1, Sharding::Ddp};
    std::vector<int> gpu_counts; // empty: 1, 2, 4, ..., 1024
    std::int64_t budget = 0;
    std::string budget_text;
    ParallelPlan base; // units, reshard_after_forward, buckets: what the user set
    // Activation checkpointing (an axis: none, selective, full): each precision and strategy answered for each, the
    // step's what-if rewritten by WhatIf::withCheckpoint. Empty: none only.
    std::vector<CheckpointSpec> checkpoints;
    bool with_reserved = true;
    // The samples per optimizer step over all GPUs (fit --global-batch): each answer is the fewest GPUs on which a
    // micro-batch that divides it fits, accumulated over micro-steps to reach it (base.grad_accum is then chosen per
    // answer). 0: not asked; each GPU count's largest micro-batch with base.grad_accum.
    std::int64_t global_batch = 0;
    // CPU offload as an axis (fit --offload none,optimizer,params: "" for none): each precision, strategy and
    // checkpointing answered with each offload its strategy has (checkPlanOffload). Empty: base.offload alone, and
    // where nothing fits without offload (base.offload none), the strategy's own offload offered as a further answer.
    std::vector<std::string> offloads;
    // With base.offload: a node's host memory (pinned) for its gpus_per_node ranks' offloaded state; a GPU count whose
    // ranks need more on a node does not fit. 0: not checked.
    std::int64_t host_budget = 0;
    // The same step's what-if along the sequence at the smallest micro-batch: each answer also gets the longest
    // sequence that fits at its fewest GPUs. nullptr: not asked.
    const WhatIf* seq_whatif = nullptr;
};

// The precisions a what-if must record (support/dtype.h) for these precisions and strategies: fsdp and zero2 in
// mixed precision record the compute dtype (FSDP's param_dtype) with each unit's inputs cast to it
// ("bfloat16-fsdp": the what-if's RunOptions::cast_module_inputs name the units, else the default ones); ddp and zero1 the
// mixed precision itself ("bfloat16-mixed": autocast over float32 weights).
std::vector<std::string> recordedPrecisionsFor(const std::vector<std::string>& precisions, const std::vector<Sharding>& shards);
// Throws std::invalid_argument naming an unknown precision.
void checkPrecisions(const std::vector<std::string>& precisions);
// The plan of one precision and strategy on `gpus` GPUs.
ParallelPlan planFor(const GpuFitRequest& r, const std::string& precision, Sharding shard, int gpus);
// Why `plan`'s rank cannot be laid out from `w` (its recorded precision, ParallelPlan::recordedPrecision, is not
// among the what-if's: a mixed precision this machine could not record); "" when it can.
std::string notRecorded(const WhatIf& w, const ParallelPlan& plan);
// "bfloat16 mixed (float32 master weights, gradients and AdamW state; bfloat16 compute)": for people.
std::string precisionText(const std::string& precision);

GpuFitTable makeGpuFitTable(const WhatIf& w, const GpuFitRequest& r);

// One GPU count's way to a global batch (fit --global-batch): the whole per-rank share (global / GPUs) in one step where
// it fits, else the largest micro-batch that divides it and fits with the rest accumulated. micro_batch 0: none (the
// GPUs do not divide the global batch, or not even a micro-batch of 1 fits).
struct GlobalBatchAnswer {
    std::int64_t micro_batch = 0;
    int grad_accum = 1;
    std::optional<Prediction> at;
};
GlobalBatchAnswer reachGlobalBatch(const WhatIf& step, const ParallelPlan& plan, std::int64_t globalBatch,
    std::int64_t budget, bool withReserved);

// The training step's what-if a fit table is made from (`base`: the step's run options): the precisions `r` needs
// (recordedPrecisionsFor), recorded at micro-batch 1, 2, 4 and 8, and again up to past the answers where one lies
// beyond the last record of the precision its ranks are laid over (whatif_policy.h's recordWhatIfReaching with
// fitRecordsWanted), so that no answer, and no "does not fit" just above it, is extrapolated where this machine
// can record it. `progress` is told each record as it starts. `table`: set to makeGpuFitTable of the returned
// what-if and `r` without r.seq_whatif (addLongestSequences adds them) where the last round made it of these records
// (a fit table is costly: a 7B's takes seconds), else reset.
WhatIf recordFitWhatIf(Model& model, const RunOptions& base, const GpuFitRequest& r,
    const std::function<void(const std::string& dtype, std::int64_t batch, int done)>& progress = {},
    std::optional<GpuFitTable>* table = nullptr);
// Each answer's longest sequence at its fewest GPUs and the smallest micro-batch (GpuFitAnswer::longest_seq), from
// r.seq_whatif; nothing without it, or with a global batch.
void addLongestSequences(GpuFitTable& t, const GpuFitRequest& r);
// The furthest size the records of a fit table's what-if must reach (recordsToReach of each answer at each GPU count
// from its precision's last record); 0 when every answer lies inside its records.
std::int64_t fitRecordsWanted(const GpuFitTable& t);

// The estimates off a GPU's budget outside PyTorch's allocator (the CUDA context, NCCL's buffers), with their
// sources, as a fit table carries them; `t.allocatorBudget(gpus)` is then what the allocator may use.
void setOverheadEstimates(GpuFitTable& t);

// `memledger whatif --gpus ... --shard ...`: rank 0's row at each micro-batch x precision x strategy x GPU count,
// "fits" judged on the allocator's share of the budget (setOverheadEstimates).
std::vector<Prediction> rankRows(const WhatIf& w, const std::vector<std::int64_t>& batches,
    const std::vector<std::string>& precisions, const std::vector<Sharding>& shards, const std::vector<int>& gpus,
    const GpuFitRequest& r);

} // namespace memledger
