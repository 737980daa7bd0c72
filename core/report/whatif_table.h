#pragma once
// The what-if table as plain values: what the report carries, the exports write and a reopened report reads.
#include "report/kinds.h"
#include "report/trace.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace memledger {

// The sizes a model accepts along one what-if axis (the batch: dimension 0 of every input; the sequence:
// dimension 1 of its token inputs): a torch.export program's range constraints, narrowed by a size the model
// refused to run. A size outside it is never "fits", whatever its figures.
struct SizeRange {
    std::int64_t min = 1;
    std::int64_t max = std::numeric_limits<std::int64_t>::max();
    std::string why; // what bounds it: "input 1 (idx): dimension 1 was exported for 2..256"; empty: nothing does
    bool contains(std::int64_t x) const { return x >= min && x <= max; }
    bool bounded() const { return min > 1 || max < std::numeric_limits<std::int64_t>::max(); }
    // Narrows to [lo, hi] when that is tighter on either side, taking `reason` as the why.
    void narrow(std::int64_t lo, std::int64_t hi, const std::string& reason);
    // "2..256", "1", "2..inf"
    std::string text() const;
};

// The one budget rule of every "fits" and "largest batch" (the what-if, the fit table, the remedies, the window): a
// budget is a GPU's memory, and PyTorch's caching allocator has what the CUDA context and, on more than one GPU,
// NCCL's buffers leave of it. Both are estimates (estimates()), said with their sources wherever a budget is.
struct DeviceOverheads {
    std::int64_t cuda_context_bytes = 0;
    std::int64_t nccl_bytes = 0; // on more than one GPU
    std::string cuda_context_source, nccl_source;
    // 512 MiB each, with their sources.
    static DeviceOverheads estimates();
    // What the allocator may use of a GPU of `budget` bytes in a job of `gpus` GPUs: 0 where no budget is given
    // (budget <= 0), at least 1 byte where one is (a budget the overheads exceed fits nothing).
    std::int64_t allocatorShare(std::int64_t budget, int gpus = 1) const
    {
        if (budget <= 0)
            return 0;
        return std::max<std::int64_t>(1, budget - cuda_context_bytes - (gpus > 1 ? nccl_bytes : 0));
    }
};

struct Prediction {
    std::int64_t batch = 1;
    std::int64_t seq = 0; // a sequence what-if's row: the token inputs' dimension 1 (0: batch what-if)
    std::string dtype = "float32";
    FigureMethod method = FigureMethod::Predicted; // Measured: a run at exactly this batch and dtype
    std::int64_t predicted_peak_bytes = 0; // most bytes live at once during the run
    std::int64_t predicted_peak_total_bytes = 0; // weights + inputs + peak
    std::int64_t predicted_reserved_bytes = 0; // a GPU's caching allocator, weights and inputs included
    std::int64_t weight_bytes = 0;
    std::int64_t input_bytes = 0;
    std::int64_t host_bytes = 0; // a rank with CPU offload: what it holds in the host's pinned memory (ParallelInfo)
    std::int64_t host_bytes_per_node = 0; // and the node, for the ranks it holds (ParallelInfo::gpus_per_node)
    std::array<std::int64_t, kLedgerCount> ledgers_at_peak {}; // weights, inputs, activations, temporaries
    std::int32_t peak_event = -1; // in the predicted trace
    bool reliable = true; // false: the two records did not align; measure() instead
    bool extrapolated = false; // beyond the largest record: the last fit carried on
    // False: the model cannot run at this size (outside the program's range, or at or past a size it refused);
    // the figures are what the fit says, and the row never fits. `not_runnable` says why.
    bool runnable = true;
    std::string not_runnable;
    // The reserve was replayed on a device of the budget's size (WhatIf::predict's capacity): 0 when not.
    std::int64_t capacity_bytes = 0;
    // That replay ran out of memory: live blocks and the fragmentation the allocator cannot avoid exceed the
    // device even after its cached blocks were released.
    bool out_of_memory = false;
    // Set by the table: fits the budget (monotone along the rows of one precision: once lost, never back).
    std::optional<bool> fits;
    // One rank of a data-parallel job (whatif/parallel.h): gpus > 0, its strategy and the master dtype of the
    // weights, gradients and optimizer state (dtype is what the forward and backward compute in).
    int gpus = 0;
    std::string shard;
    std::string checkpoint = "none"; // activation checkpointing of the step (CheckpointSpec::text)
    std::string master_dtype;
    std::int64_t gradient_bytes = 0; // a rank's: its gradient shards (or replicas) after the step
    std::int64_t optimizer_state_bytes = 0;
    std::vector<std::string> notes;

    // Set by WhatIf::measure() only.
    std::optional<std::int64_t> measured_peak_bytes;
    std::optional<std::int64_t> measured_peak_total_bytes;
    std::optional<double> error_percent; // (predicted - measured) / measured of the peak, in percent

    // The peak total a verdict and a table use: the measured one where there is a measurement.
    std::int64_t peakTotal() const { return measured_peak_total_bytes.value_or(predicted_peak_total_bytes); }
};

struct WhatIfTable {
    std::vector<Prediction> predictions;
    std::int64_t budget_bytes = 0; // 0: no budget was given
    // With a budget: what comes off it before the allocator's share (DeviceOverheads), which judges every row.
    DeviceOverheads overheads;
    std::int64_t allocatorBudget() const { return overheads.allocatorShare(budget_bytes, 1); }
    std::vector<std::pair<std::string, std::int64_t>> max_batch; // per dtype, with a budget
    // Per dtype of max_batch: how the largest batch that fits is known: measured (a real run at that batch
    // fits), predicted (within the records) or extrapolated (beyond the largest record).
    std::vector<std::pair<std::string, FigureMethod>> max_batch_method;
    std::int64_t recorded_batch1 = 1; // the smallest and largest records the predictions come from
    std::int64_t recorded_batch2 = 2;
    std::vector<std::int64_t> recorded_batches; // every record
    RunMode mode = RunMode::Inference; // of the recorded runs: Train predicts a training step
    // Batch, or Seq: the rows vary the sequence length (Prediction::seq), recorded_batches are sequence
    // lengths and max_batch is the longest sequence within the budget, at each row's batch (max_seq_batch).
    WhatIfAxis axis = WhatIfAxis::Batch;
    std::vector<std::int64_t> max_seq_batch; // axis "seq": the batch of each max_batch entry
    std::string device = "cpu"; // where the records ran; "meta": figures computed from shapes, never measured
    SizeRange runnable; // the sizes the model accepts along the axis (WhatIf::runnableRange)

    // How a row is known, for people: "measured", "predicted", "extrapolated", or "computed on meta" for a row
    // run at exactly its setting on the meta device.
    // A predicted row within the records reads "interpolated", beyond them (Prediction::extrapolated) "extrapolated".
    std::string methodText(const Prediction& p) const
    {
        if (p.method == FigureMethod::Predicted)
            return p.extrapolated ? "extrapolated" : "interpolated";
        return figureMethodText(p.method, device == "meta");
    }

    std::string budget_text; // the budget as the user typed it ("80GB", "H100-80GB"); empty: its bytes say it

    // The table's verdict for a row (Prediction::fits); a row it did not judge: fitsWithin(p, allocatorBudget()).
    bool fits(const Prediction& p) const;
    // For people, in every export alike: "yes", "no", "no (out of memory)", "cannot run".
    std::string fitsText(const Prediction& p) const;
    // "H100-80GB (79.10 GiB)", "74.51 GiB": the budget as typed, with what it means.
    std::string budgetText() const;
    // What judges the rows, for every export alike: "23.14 GiB to PyTorch's allocator (the CUDA context's 512.0 MiB
    // off: an estimate)"; "" without a budget.
    std::string allocatorText() const;
    // A largest batch or sequence: "none" when not even the smallest fits, ">= 1000000" at the search's end.
    static std::string largestText(std::int64_t n);
    // How max_batch[i] is known, for its text: " (measured: a run at it fits)", " (interpolated between records)",
    // " (extrapolated beyond the records: rough)"; "" for none.
    std::string largestMethodText(std::size_t i) const;
};

// The fit table (whatif/gpu_fit.h): for a budget (a GPU's memory), each precision and each data-parallel
// strategy, the fewest GPUs on which a rank's step fits and the largest micro-batch per rank there.
struct GpuFitAnswer {
    // "float32", "bfloat16" (pure: weights, gradients and optimizer state in bfloat16), "bfloat16-mixed" (float32
    // master weights, gradients and optimizer state; the forward and backward in bfloat16).
    std::string precision;
    std::string shard; // fsdp | zero2 | zero1 | ddp | ds-zero1 | ds-zero2 | ds-zero3
    // Activation checkpointing of each rank's step: "none", "full", "selective", "full (every 2nd block)"
    // (CheckpointSpec::text), with the share of the forward's ops its backward runs again.
    std::string checkpoint = "none";
    double recompute_share = 0.0;
    // CPU offload of each rank: "" none, "params" (FSDP2's CPUOffloadPolicy, DeepSpeed's ZeRO-3 offload_param) or
    // "optimizer" (DeepSpeed's ZeRO-Offload); at.host_bytes_per_node is then the host's share.
    std::string offload;
    // "ds-zero3", "ds-zero3, offload params": the strategy cell of the table's views.
    std::string strategyText() const { return offload.empty() ? shard : shard + ", offload " + offload; }
    int fewest_gpus = 0; // 0: none of the GPU counts tried
    std::int64_t micro_batch = 0; // the largest per rank at fewest_gpus
    // Micro-batches accumulated per optimizer step at that answer: the table's --grad-accum, or with a global batch
    // asked for, the fewest that reach it with micro-batches that fit (global batch = micro_batch x grad_accum x GPUs).
    int grad_accum = 1;
    std::int64_t globalBatch() const { return micro_batch * grad_accum * fewest_gpus; } // the samples per step
    std::optional<Prediction> at; // the rank at fewest_gpus and micro_batch
    // No answer: the rank at the most GPUs tried and the smallest micro-batch, how far it is from fitting.
    std::optional<Prediction> closest;
    std::vector<std::pair<int, std::int64_t>> largest; // per GPU count tried: its largest micro-batch (0: none)
    // At fewest_gpus and the smallest micro-batch, the longest sequence that fits (a model with token inputs whose
    // sequence what-if was recorded; 0: not asked, or none).
    std::int64_t longest_seq = 0;
    std::string not_modelled; // set: no answer, and why
    // The largest micro-batch recorded in the precision this answer's ranks are laid over (0: not known, a table
    // read from an older file): a micro-batch beyond it is extrapolated from the last two records, not interpolated.
    std::int64_t last_record = 0;
    bool extrapolated(std::int64_t microBatch) const { return last_record > 0 && microBatch > last_record; }
    // "853", or "853*" where extrapolated (GpuFitTable::extrapolatedLegend says what the mark means).
    std::string microBatchText(std::int64_t microBatch) const;
};
struct GpuFitTable {
    std::int64_t budget_bytes = 0;
    std::string budget_text;
    // Outside PyTorch's allocator, per GPU: estimates with their sources, taken off the budget first.
    DeviceOverheads overheads;
    std::vector<int> gpu_counts; // tried, increasing
    std::vector<GpuFitAnswer> answers;
    WhatIfAxis axis = WhatIfAxis::Batch;
    std::int64_t seq = 0; // the sequence every row runs at (0: no token input)
    std::string device = "cpu"; // where the step was recorded: meta, figures from shapes
    std::string optimizer;
    // Micro-batches accumulated per optimizer step (--grad-accum): each answer's global batch is its micro-batch x
    // grad_accum x its GPUs.
    int grad_accum = 1;
    // fit --global-batch G: every answer reaches G exactly (a GPU count that does not divide it is no answer), with
    // the largest micro-batch that fits and divides G / GPUs, accumulated the rest of the way (0: not asked).
    std::int64_t global_batch = 0;
    // --offload params: each rank's state on the host (Prediction::host_bytes), a node holding gpus_per_node ranks';
    // host_budget (0: not checked) rules out the GPU counts whose nodes cannot hold it.
    std::string offload;
    std::int64_t host_budget = 0;
    int gpus_per_node = 8;
    SizeRange runnable; // the micro-batches the program accepts
    std::vector<std::string> notes;
    double seconds = 0; // to compute

    // The allocator's share of the budget on `gpus` GPUs: the budget less the CUDA context and, on more than
    // one, NCCL's buffers.
    std::int64_t allocatorBudget(int gpus) const { return overheads.allocatorShare(budget_bytes, gpus); }
    // What a micro-batch marked extrapolated (GpuFitAnswer::microBatchText) means, for the text, the HTML and the
    // window alike; "" when no answer is.
    std::string extrapolatedLegend() const;
};

// The one rule for one prediction: runnable, no out of memory on a device of the budget's size, and the peak
// total (measured where there is a measurement) and the reserve within the budget. 0: no budget, false.
bool fitsWithin(const Prediction& p, std::int64_t budget);

} // namespace memledger
