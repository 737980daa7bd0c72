#pragma once
// "What would help": remedies for a run's memory, ranked by what they save on the peak total (then on the
// reserve), each with its predicted figures and, where a real run can check it, a way to measure it.
//
// memledger never suggests a change that alters the model's result (beyond the rounding of a lower
// precision, which is said): an activation goes in place only where nothing reads its input afterwards;
// BatchNorm folds into the convolution before it only where that convolution's output feeds nothing else; a
// buffer is called unread only when no op of the recorded inference took it (BatchNorm's running statistics
// are read in eval mode and are never suggested).
#include "allocator/caching_allocator.h"
#include "report/remedy.h"
#include "report/report.h"
#include "whatif/parallel.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace memledger {

class Model;
class WhatIf;

// The tiling remedy's request: the input's last dimensions run as tiles of `tile`, each with `overlap` elements of
// context on every side (an interior tile's input is tile + 2 x overlap, at most the full size), stitched into the
// full output.
struct TilingRequest {
    std::vector<std::int64_t> tile; // {512, 512}; empty: no tiling remedy
    std::int64_t overlap = 0;
    // A program of the tile's own input size, for a model whose sizes are fixed (torch.export without dynamic
    // shapes, a traced model): the tile's run is this program's; nullptr: the report's model at the tile's size.
    Model* program = nullptr;
    // The input shapes of an interior tile's run: each input's last dimensions replaced (std::invalid_argument
    // where the tile has more dimensions than an input has beyond its batch).
    std::vector<Shape> inputsOf(const std::vector<Shape>& full) const;
    // "Tiles of 512x512" with ", 32 of overlap" where there is overlap.
    std::string text() const;
};

struct RemedyOptions {
    // A GPU's memory, bytes (judged on its allocator's share, DeviceOverheads); 0: no budget (largest batch left out;
    // micro-batches of 1).
    std::int64_t budget = 0;
    TilingRequest tiling; // the tiling remedy's, measured by a run at the tile's shape; no tile: none
    const WhatIf* whatif = nullptr; // records of this model: lower precision, largest batch, micro-batching
    // The model of the report: the tiling remedy is measured by a run at the tile shape, and the largest batch's
    // figures the records do not back are run (as the what-if table runs them).
    Model* model = nullptr;
    // A rank's report (whatif/parallel.h): the step it was laid over and the plan, for the rank's checkpointing
    // remedies (each block checkpointed, selective and full, laid out as the rank again).
    const Report* rank_step = nullptr;
    const ParallelPlan* rank_plan = nullptr;
};

// The remedies for `report`, best first. Needs only the report for in-place, BatchNorm folding, unread buffers
// and allocator settings; the others need options.whatif (or options.model for tiling) and are left out
// without it. A tiling run that fails gives a remedy not worked out (Remedy::not_worked_out), the others intact.
std::vector<Remedy> computeRemedies(const Report& report, const RemedyOptions& options = {});

// The remedies of a model's report with what they need: what-if records of the report's run (batch 1 upward,
// its dtype and the lower precisions, planned as WhatIf::recordPlanned does) and, with a tile, the tiling run.
// `progress` (may be empty) is told each record. Throws RunError, Cancelled.
// `rankStep` and `rankPlan`: RemedyOptions' (a rank's report).
std::vector<Remedy> remediesForModel(Model& model, const Report& report, std::int64_t budget,
    const TilingRequest& tiling, const std::function<void(const std::string&)>& progress = {},
    const std::atomic<bool>* cancel = nullptr, const Report* rankStep = nullptr, const ParallelPlan* rankPlan = nullptr);

// Measures `remedy` by a real run and returns it with measured_peak_total, measured_reserve (the reserve
// simulated from the measured run's trace, or the GPU's own on a GPU run) and method "measured".
// measure_how "run": `model` (the report's model) at the remedy's setting; "variant": `variant`, the edited
// model, run at the report's setting. Throws RunError (the run failed) or std::invalid_argument (it cannot be
// measured: measure_how "", "gpu" without a GPU run, or no variant given).
Remedy measureRemedy(const Remedy& remedy, const Report& report, Model& model, Model* variant = nullptr);

// The rules behind the remedies, for tests and views.
// An elementwise op (relu, hardtanh, sigmoid, tanh, silu, hardswish, hardsigmoid, leaky_relu, elu; add and
// mul on their first operand) may write into its input's block when: the run is inference and its reads were
// recorded; the input is a block the run allocated (an activation, not a model input or a weight); the op
// allocates exactly one block that outlives it, of the input block's size; and no later op nor the model's
// caller reads the input's block (any view of it counts as the block).
struct InplaceCandidate {
    std::uint32_t op = 0; // op_seq of the op
    std::int32_t input_alloc = -1; // the Alloc event of its input's block
    std::int32_t output_alloc = -1; // the Alloc event of the block it makes, which in place it would not
    std::string op_name; // "aten::relu"
    std::string module; // its module path
};
std::vector<InplaceCandidate> inplaceCandidates(const Report& r);

// A BatchNorm (eval) that folds into the Conv before it: its only input is the convolution's output, which
// nothing else reads; both modules are called once. Folding drops the BatchNorm's op (its output and
// temporaries) and its parameters and running statistics, and gives the convolution a bias if it has none.
struct BatchNormFold {
    std::string conv; // module paths
    std::string batchnorm;
    std::uint32_t conv_op = 0;
    std::uint32_t bn_op = 0;
    std::int32_t conv_output = -1; // Alloc events
    std::int32_t bn_output = -1;
};
std::vector<BatchNormFold> batchNormFolds(const Report& r);

// Allocator settings tried on the report's replay (a snapshot's own replay for a snapshot):
// expandable_segments:True and max_split_size_mb 64, 128, 256, 512; best (lowest reserve) first.
struct AllocatorSuggestion {
    std::string setting; // as PYTORCH_CUDA_ALLOC_CONF takes it
    AllocatorSettings settings;
    std::int64_t reserve_before = 0; // the replay with the run's settings
    std::int64_t reserve_after = 0;
};
std::vector<AllocatorSuggestion> allocatorSuggestions(const Report& r);

// A snapshot's peak (docs/snapshots.md, "What holds the peak"): the annotation or phase that holds it, the
// ledger with the most bytes at it, and that ledger's largest owner at it: the deepest row of the module tree
// that holds more than half of the ledger's bytes at the peak (else the largest top row); the naming frame
// with the most of them where most are made outside any forward. Saved for backward: checkpointing the owner's
// calls would save up to S - B, S what its calls saved for backward alive at the peak, B the largest of those
// blocks (the backward recomputes one call at a time and holds at least that block again; the calls' inputs,
// which checkpointing keeps, are not subtracted). Gradients: half of them (sharded over 2 ranks, or bfloat16
// when float32). Optimizer state: three quarters (8-bit state, when float32). Other ledgers: named, no saving.
// Every figure's method is "estimate". Nothing for a report without a snapshot's traced peak.
std::optional<Remedy> snapshotPeakRemedy(const Report& r);

// The predicted figures of a run whose trace, weights and inputs are edited: the peak total (weights +
// optimizer state + inputs + the edited trace's peak) and the simulated reserve.
struct EditedRun {
    std::int64_t peak_total = 0;
    std::int64_t reserve = 0;
};
// `drop`: events left out; `refree`: (free event, alloc event): that free now frees the alloc's block;
// `tensors`: the resident tensors after the change; `weightBytes`: their total.
EditedRun predictEditedRun(const Report& r, const std::vector<char>& drop,
    const std::vector<std::pair<std::size_t, std::size_t>>& refree, const std::vector<TensorInfo>& tensors,
    std::int64_t weightBytes);

} // namespace memledger
