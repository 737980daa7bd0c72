#pragma once
// --checkpoint auto for one rank of a data-parallel job (analyze --gpus N --shard S --checkpoint auto --budget SIZE):
// of the block policies a job sets (none; selective and full, each on every K-th block for K = 1, 2, 4, 8:
// torchtitan's ac_freq), the one with the least recompute whose rank fits the budget. "Fits" is the fit table's rule
// (fitsWithin on the allocator's share of the budget: the CUDA context and, on more than one GPU, NCCL's buffers
// taken off first as estimates, gpu_fit.h), so that this answer and `fit --checkpoint none,selective,full` agree.
#include "report/report.h"
#include "whatif/checkpoint.h"
#include "whatif/parallel.h"

#include <cstdint>
#include <string>
#include <vector>

namespace memledger {

struct RankCheckpointChoice {
    CheckpointSpec spec; // the choice; none where the plain rank fits
    bool fits = false; // false: none of them fits, and `spec` is the one with the lowest peak total
    double recompute_share = 0.0;
    Report step; // the step the rank is laid over (checkpointed as `spec` says)
    Report rank; // the rank of `plan` over it
    std::int64_t allocator_budget = 0;
    // Each policy tried, in the order of its recompute ("full (every 2nd block): 33% recomputed, 1.2 GiB peak total,
    // fits"): for the report's note.
    std::vector<std::string> tried;
};

// `step`: a training step's report (recorded with forward uses: checkpointable); `budget`: a GPU's memory. Throws
// std::invalid_argument where the step cannot be checkpointed by blocks (no repeated block) and the plain rank does
// not fit, or where the plan cannot be laid out (checkPlan).
RankCheckpointChoice chooseRankCheckpoint(const Report& step, const ParallelPlan& plan, std::int64_t budget);

} // namespace memledger
