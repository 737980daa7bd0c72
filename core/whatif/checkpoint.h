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

// What the checkpoint keeps of a segment's forward besides its input.
enum class CheckpointSaves {
    Nothing, // full: every op of the segment runs again in its backward
    // selective (torch.utils.checkpoint.create_selective_checkpoint_contexts, torchtitan's op-level policy): the
    // outputs of matrix products and attention (aten::mm, addmm, bmm, the scaled-dot-product attention kernels)
    // MUST_SAVE, kept from the forward until the recomputation takes them; every other op recomputed
    MatmulsAndAttention,
};
// Whether selective checkpointing keeps the output of an allocation made inside `op` (an ATen op name).
bool savedBySelectiveCheckpoint(const std::string& op);

// --checkpoint as a run's option: typed once where the text enters (the command line, the window) and handed down.
enum class CheckpointMode {
    None,
    Full, // each repeated block (largestRepeatedBlocks: a decoder's layers) checkpointed, non-reentrant
    Selective, // the same blocks, their matmul and attention outputs saved (CheckpointSaves::MatmulsAndAttention)
    Modules, // the modules named (paths, "*" for any one name)
    Auto, // the least recompute that fits a budget (planCheckpoints)
};
struct CheckpointSpec {
    CheckpointMode mode = CheckpointMode::None;
    std::string modules; // Modules: the paths or patterns as given ("layers.*")
    int every = 1; // Full and Selective: every K-th block only, the first of each K (torchtitan's ac_freq)
    // How the checkpoint runs: non-reentrant (torchtitan, Hugging Face, checkpoint_wrapper) unless asked; named
    // modules keep the what-if's old default, reentrant (PyTorch 1.13's)
    std::optional<CheckpointImpl> impl;

    bool none() const { return mode == CheckpointMode::None; }
    CheckpointImpl implementation() const
    {
        return impl.value_or(mode == CheckpointMode::Modules ? CheckpointImpl::Reentrant : CheckpointImpl::NonReentrant);
    }
    CheckpointSaves saves() const
    {
        return mode == CheckpointMode::Selective ? CheckpointSaves::MatmulsAndAttention : CheckpointSaves::Nothing;
    }
    // "none", "full", "selective", "full (every 2nd block)", "layers.0,layers.1", "auto": for tables and notes.
    std::string text() const;
    bool operator==(const CheckpointSpec& o) const
    {
        return mode == o.mode && modules == o.modules && every == o.every && implementation() == o.implementation();
    }
};
// "none" | "full" | "selective" | "auto" | module paths (comma-separated, "*" for any one name); throws
// std::invalid_argument naming --checkpoint (every < 1, selective with a reentrant implementation).
CheckpointSpec parseCheckpointSpec(const std::string& text, int every = 1, std::optional<CheckpointImpl> impl = std::nullopt);
// --checkpoint's text: a list of none, full and selective is one spec each (an axis: "none,selective,full"); anything
// else is one spec (parseCheckpointSpec: "auto", or module paths "layers.0,layers.1").
std::vector<CheckpointSpec> parseCheckpointSpecs(
    const std::string& text, int every = 1, std::optional<CheckpointImpl> impl = std::nullopt);
// The checkpoints a training step of `model` is analysed with: those asked for (--checkpoint), else the one the model
// was exported with (ModelInfo::exported_checkpointing: its modules, named), saying so in `notes`; none where
// neither is.
std::vector<CheckpointSpec> checkpointsToAnalyze(
    const std::vector<CheckpointSpec>& asked, const ModelInfo& model, std::vector<std::string>* notes = nullptr);
// The modules a spec checkpoints in a model's tree (layers in the tree's order): full and selective, every `every`-th
// of the repeated blocks; named modules, those matched; none and auto: none. Throws std::invalid_argument: no
// repeated block to checkpoint, a path or pattern the model lacks.
std::vector<std::string> checkpointedModules(const std::vector<LayerStats>& layers, const CheckpointSpec& spec);

struct CheckpointPrediction {
    CheckpointImpl impl = CheckpointImpl::Reentrant;
    CheckpointSaves saves = CheckpointSaves::Nothing;
    std::vector<std::string> checkpoint; // module paths checkpointed (the outermost of those asked)
    std::int64_t recorded_peak_bytes = 0; // the plain step's
    std::int64_t recorded_peak_total_bytes = 0;
    std::int64_t predicted_peak_bytes = 0;
    std::int64_t predicted_peak_total_bytes = 0; // weights + optimizer state + inputs + predicted peak
    std::int64_t predicted_reserved_bytes = 0; // simulated caching allocator; 0 when not asked for
    // recorded - predicted peak: negative when the checkpoint makes the peak worse.
    std::int64_t saving_bytes = 0;
    double recompute_ms = 0.0; // the recorded forward time of the checkpointed modules
    // What runs again in the backward: the ops recomputed and their share of the forward's ops and of its
    // allocated bytes (selective checkpointing recomputes the cheap ops and keeps the matmuls').
    std::int64_t recomputed_ops = 0;
    std::int64_t forward_ops = 0;
    std::int64_t recomputed_bytes = 0; // bytes allocated by the recomputation
    std::int64_t forward_bytes = 0; // bytes allocated by the forward phase
    double recomputeShare() const
    {
        return forward_ops > 0 ? static_cast<double>(recomputed_ops) / static_cast<double>(forward_ops) : 0.0;
    }
    // For each event of the predicted trace, the event of the recorded one whose size it has (a recomputation's
    // copy: the event copied); -1 for a new event of its own size (the RNG state). A what-if scales the predicted
    // trace along the batch with it (WhatIf::withCheckpoint).
    std::vector<std::int64_t> event_source;    std::vector<std::string> notes; // modules left out and why, a plan that makes the peak worse, ...
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
// saves: what the segments keep (MatmulsAndAttention needs the non-reentrant implementation).
CheckpointPrediction predictCheckpoint(const Report& r, const std::vector<std::string>& paths,
    CheckpointImpl impl = CheckpointImpl::Reentrant, bool withReserved = true,
    CheckpointSaves saves = CheckpointSaves::Nothing);
// The step of a spec (checkpointedModules over the report's layers); `spec` none: the report's own figures.
CheckpointPrediction predictCheckpoint(const Report& r, const CheckpointSpec& spec, bool withReserved = true);

// The set of modules (at any depth) whose checkpointing brings the predicted peak total within `budget` bytes of a GPU
// (its allocator's share: DeviceOverheads) with the least recompute time: a greedy search over checkpointableModules() followed by local improvement
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
