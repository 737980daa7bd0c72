#pragma once
// Checkpointing what-if: the peak of a recorded training step as it would be with torch.utils.checkpoint
// around some modules, from the recorded step of the plain model, without running it again.
//
// The recorded trace is transformed the way PyTorch 1.13's torch/utils/checkpoint.py changes the step:
// - forward: the RNG state is saved per segment (torch.get_rng_state(), 5,056 bytes on the CPU); what only
//   the segment's own autograd nodes saved is freed when its last forward use returns (reentrant: the
//   segment runs under no_grad; non-reentrant: its saved tensors are packed into empty holders);
// - backward, reentrant: when the segment's backward starts, its forward runs again (recorded events copied,
//   a forked RNG state around it); the recomputed output is held to the end of the segment's backward, and so
//   are the incoming gradient and the saved segment input; the RNG state lives until the graph is freed;
// - backward, non-reentrant: the first of the segment's nodes to unpack a saved tensor recomputes the forward;
//   what the segment's nodes saved lives until the node that uses it releases it, the rest dies when the
//   recomputation returns; the segment input and RNG state live until the segment's backward ends.
// The peak is then the same running sum as a report's, and the reserve the same GPU replay.
#include "report/report.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace memledger {

enum class CheckpointImpl {
    Reentrant, // torch.utils.checkpoint.checkpoint(..., use_reentrant=True): PyTorch 1.13's default
    NonReentrant, // use_reentrant=False: saved-tensor hooks
};
const char* checkpointImplName(CheckpointImpl impl); // "reentrant" | "non-reentrant"
std::optional<CheckpointImpl> checkpointImplFromName(const std::string& name);

struct CheckpointPrediction {
    CheckpointImpl impl = CheckpointImpl::Reentrant;
    std::vector<std::string> checkpoint; // module paths checkpointed (the outermost of those asked)
    std::int64_t recorded_peak_bytes = 0; // the plain step's
    std::int64_t recorded_peak_total_bytes = 0;
    std::int64_t predicted_peak_bytes = 0;
    std::int64_t predicted_peak_total_bytes = 0; // weights + optimizer state + inputs + predicted peak
    std::int64_t predicted_reserved_bytes = 0; // simulated caching allocator; 0 when not asked for
    // recorded - predicted peak: negative when the checkpoint makes the peak worse.
    std::int64_t saving_bytes = 0;
    double recompute_ms = 0.0; // the recorded forward time of the checkpointed modules
    std::vector<std::string> notes; // modules left out and why, a plan that makes the peak worse, ...
    // The predicted step (trace, peak, ledgers at the peak): the timeline draws it over the recorded one.
    std::shared_ptr<const Report> report;

    bool worse() const { return predicted_peak_bytes > recorded_peak_bytes; }
};

// Modules a checkpoint can go around: every module except the root whose forward made an allocation, in the
// report's layer order.
std::vector<std::string> checkpointableModules(const Report& r);

// The step with torch.utils.checkpoint around each module of `paths` (module paths as in the layer tree; a
// module inside another one asked for is left out, with a note). withReserved: also replay the caching
// allocator (slower). Throws std::invalid_argument: not a training step, an unknown path, the root, a report
// without forward uses (saved before memledger recorded them).
CheckpointPrediction predictCheckpoint(const Report& r, const std::vector<std::string>& paths,
    CheckpointImpl impl = CheckpointImpl::Reentrant, bool withReserved = true);

// The set of modules (at any depth) whose checkpointing brings the predicted peak total within `budget` bytes
// with the least recompute time: a greedy search over checkpointableModules() followed by local improvement
// (drop, swap for a parent or a child). When no plan fits, the plan with the lowest peak found.
struct CheckpointPlan {
    std::int64_t budget_bytes = 0;
    bool fits = false;
    CheckpointPrediction prediction; // of the plan; prediction.checkpoint is the plan
    int evaluated = 0; // predictions tried
    std::vector<CheckpointPrediction> tried; // each of them, in the order tried (without their reports)
};
// The plan: whole repeated blocks first (repeatedBlocks, the fewest whose checkpointing fits, none of which can
// be dropped), and only where even all of them do not fit, the greedy search over every module from there.
// The CLI and the window both call it. Its modules are listed in the model's order.
CheckpointPlan planCheckpoints(const Report& r, std::int64_t budget, CheckpointImpl impl = CheckpointImpl::Reentrant);
// The blocks users wrap: the children of one module that share a type, the most of them among `candidates`
// (a decoder's layers.0 ... layers.N, a ResNet stage's blocks), in item order. Empty when none repeats.
std::vector<std::string> repeatedBlocks(const Report& r, const std::vector<std::string>& candidates);

} // namespace memledger
