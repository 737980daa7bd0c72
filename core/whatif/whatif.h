#pragma once
// What-if: memory at another batch size or precision without running the model there.
//
// The model is recorded at two batch sizes. The two allocation sequences are aligned op by op, and each
// allocation's size is fitted as a * batch + b. Replaying the larger record with fitted sizes (same event
// order, same alloc/free pairs) predicts the peak, the ledgers and the whole timeline at any batch.
// A precision the CPU can run is recorded in that precision (its kernels allocate differently: bfloat16
// matmuls keep float32 workspaces); one it cannot run is rescaled from a record of the same element width,
// or else from the base precision by element width, and says so.
#include "recording/model.h"
#include "report/report.h"
#include "report/whatif_table.h"
#include "whatif/checkpoint.h"
#include "whatif/parallel.h"

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <functional>
#include <vector>

namespace memledger {

class WhatIf {
public:
    // Records `base` (inputs as given; its batch and dtype are ignored) at batches b1 < b2 in every dtype of
    // `dtypes` the CPU can run. base.dtype must run; others that raise RunError are rescaled instead.
    // Throws RunError, Cancelled, std::invalid_argument (b1 >= b2 or b1 < 1).
    static WhatIf record(Model& model, RunOptions base, std::int64_t b1 = 1, std::int64_t b2 = 2,
        const std::vector<std::string>& dtypes = {"float32", "bfloat16", "float16"});
    // The same at several batch sizes (at least two, increasing): a fit between each two neighbours, so that
    // kernels that switch algorithm at larger batches are seen. A batch between two records is predicted from
    // the fit around it; beyond the largest, from the last fit, marked extrapolated.
    static WhatIf record(Model& model, RunOptions base, const std::vector<std::int64_t>& batches,
        const std::vector<std::string>& dtypes = {"float32", "bfloat16", "float16"});
    // Records at log-spaced batches: the first two of recordedBatchesFor(mode), then four times the last (and
    // `largest` itself last) while the next record's predicted peak total stays within `memory_budget` bytes and
    // its predicted time within `seconds_budget`; where the next is beyond that, the largest batch that is not,
    // when it is at least 1.5 times the last, is recorded last. `progress` (may be empty) is told each record as
    // it is made. The policy that fills a Plan is whatif/whatif_policy.h.
    struct Plan {
        std::int64_t largest = 256;
        std::int64_t memory_budget = 0; // 0: a quarter of this machine's memory
        double seconds_budget = 20.0; // per record (a warm-up and a recorded run)
        // For all the records beyond the first two of each precision, in all precisions (0: no limit): the base
        // precision goes furthest, the others stop sooner and are predicted beyond their last record.
        double total_seconds_budget = 0;
        // Records counted instead of timed (whatif_policy.h's countedRecordBudget, MEMLEDGER_RECORD_BUDGET): at most
        // this many records beyond the first two of each precision, all precisions together, and none refused for
        // its time, so that the same model gives the same records on any machine under any load. -1: the seconds
        // above decide.
        int record_count_budget = -1;
        // Told each record as it starts: its precision, batch (or sequence) and how many of that precision so far.
        std::function<void(const std::string& dtype, std::int64_t batch, int done)> progress;
        // Batches (or sequences) asked for: recorded too on the way to `largest`, so that they are measured
        // rather than predicted where this machine can run them.
        std::vector<std::int64_t> wanted;
        // Figures beyond the largest record are wanted (a budget's search for the longest sequence, the window's
        // slider): along the sequence, records go on past a kernel switch so that the extrapolation is trusted.
        // false (rows asked for, no budget): no record past the longest row asked for, once it is recorded.
        bool beyond_records = true;
        // Told the what-if of the first two records (the base dtype, the others rescaled) before the larger
        // ones are made, so that a view can use it meanwhile.
        std::function<void(const WhatIf& firstRecords)> first_records;
    };
    static WhatIf recordPlanned(Model& model, RunOptions base, const std::vector<std::string>& dtypes, const Plan& plan);

    // Along the sequence length, at base's batch: records at `seqs` (at least three, increasing), each
    // allocation fitted as a * T^2 + b * T + c through three neighbouring records. A sequence between records
    // is predicted from the three around it; beyond the largest, from the last three, marked extrapolated.
    // Throws RunError when the model takes no token input.
    static WhatIf recordSeq(Model& model, RunOptions base, const std::vector<std::int64_t>& seqs,
        const std::vector<std::string>& dtypes = {"float32", "bfloat16"});
    // Records at the base sequence T and 2T, 4T, ... up to `plan.largest` while this machine runs them within
    // the plan's memory and time (so that a requested length is recorded, not extrapolated, where it can be).
    static WhatIf recordSeqPlanned(Model& model, RunOptions base, const std::vector<std::string>& dtypes, const Plan& plan);
    WhatIfAxis axis() const;

    // The same from two runs already made (tests, or runs made elsewhere); one dtype, r1.info.dtype.
    // `model` and `modules` are what Model::info() and Model::modules() give; they may be empty.
    static WhatIf fromRuns(const ModelInfo& model, const std::vector<LayerStats>& modules, RawRun r1, std::int64_t b1,
        RawRun r2, std::int64_t b2);

    // O(events): one pass over precomputed sizes. The reserved figure replays the caching allocator
    // (slower); leave it out for live slider feedback and fetch it after the slider rests.
    // `capacity` > 0: the reserve is replayed on a device of that size, whose allocator releases its cached
    // blocks and retries before it runs out of memory (Prediction::out_of_memory), so it never exceeds it.
    // A size outside runnableRange() is predicted all the same, marked not runnable.
    Prediction predict(std::int64_t batch, const std::string& dtype, bool withReserved = true,
        std::int64_t capacity = 0) const;
    // The largest batch (or sequence) within the runnable range and at most `upTo` (and 1,000,000) that fits
    // `budget` (fitsWithin: peak total, and with withReserved a replay on a device of the budget's size), found
    // by doubling from the smallest runnable size until the first that does not fit, then halving the gap: the
    // answer never lies beyond a size found not to fit. 0 if not even the smallest fits.
    std::int64_t maxBatch(const std::string& dtype, std::int64_t budget, bool withReserved = true,
        std::int64_t upTo = 0) const;
    // One rank of a data-parallel job at this batch (or sequence): the step recorded in plan.paramDtype() with
    // the plan's schedule laid over it (whatif/parallel.h). A training step's what-if only; throws
    // std::invalid_argument where the plan's param dtype has no fit.
    Prediction predictRank(std::int64_t batch, const ParallelPlan& plan, bool withReserved = true,
        std::int64_t capacity = 0) const;
    Report predictedRankReport(std::int64_t batch, const ParallelPlan& plan) const;
    // The precision of the records a rank of `plan` is laid over: plan.recordedPrecision() (also where this what-if
    // lacks it: hasPrecision says no); for an FSDP record (support/dtype.h) it did not make, the pure record of its
    // dtype, where it has one, whose units compute a floating-point input in its own type (the rank's figures say so).
    std::string rankPrecision(const ParallelPlan& plan) const;
    // The largest micro-batch (or sequence) per rank that fits `budget`, as maxBatch: 0 if not even the smallest.
    std::int64_t maxRankBatch(const ParallelPlan& plan, std::int64_t budget, bool withReserved = true,
        std::int64_t upTo = 0) const;
    // The sizes the model runs along this what-if's axis: the program's range, narrowed by a size a record
    // refused (not for want of memory).
    const SizeRange& runnableRange() const { return range_; }
    // The full report of a predicted run (ledgers, layer tree, timeline trace), marked predicted in notes.
    Report predictedReport(std::int64_t batch, const std::string& dtype) const;
    // Allocation sizes of the predicted run; events, ops and partners are the larger record's.
    Trace predictedTrace(std::int64_t batch, const std::string& dtype) const;
    // Runs the model at batch/dtype (throws RunError where the CPU has no kernel) and compares.
    Prediction measure(Model& model, std::int64_t batch, const std::string& dtype, std::int64_t capacity = 0) const;

    // Where `further` (the same model and settings, recorded again with larger rows) recorded a precision beyond
    // this what-if's last record of it, that precision's records (its fits and notes) become further's; the
    // others stay. A size further found the model refuses narrows the range too. True if any precision changed.
    bool keepFurthest(const WhatIf& further);

    // The same what-if for the step with activation checkpointing (whatif/checkpoint.h; full or selective: each
    // repeated block): each fit's step rewritten once by the checkpoint what-if (predictCheckpoint) at its largest
    // record, its allocations sized along the batch from the plain step's fits, so that predict, predictRank,
    // maxRankBatch and the fit table answer for the checkpointed job; its reports (predictedReport,
    // predictedRankReport) are the plain step's report rewritten. `spec` none: this what-if. Throws
    // std::invalid_argument: not a training step, auto, a model without repeated blocks or records without the
    // forward's tensor uses (checkpointing a checkpointed what-if again).
    WhatIf withCheckpoint(const CheckpointSpec& spec) const;
    const CheckpointSpec& checkpoint() const { return checkpoint_; }
    // The same what-if for a step of `k` micro-batches whose gradients are accumulated before the optimizer's step
    // (whatif/accumulation.h): each fit's step laid over as micro-steps once, each event sized along the batch from the
    // recorded event it came from, so that predict, maxBatch and predictedReport answer for one device; a rank
    // (predictRank, maxRankBatch, predictedRankReport, the fit table) is laid over the step before it, with the
    // plan's grad_accum set to `k` (its schedule differs between the micro-steps). Apply after withCheckpoint.
    // k = 1: this what-if. Throws std::invalid_argument: k < 1, not a training step, accumulated already.
    WhatIf withGradAccum(int k) const;
    int gradAccum() const { return grad_accum_; }

    // Every dtype predict() accepts but the FSDP records (support/dtype.h), which ranks are laid over (predictRank).
    std::vector<std::string> dtypes() const;
    // Whether predict() accepts `precision`: every dtype does; a mixed one where it was recorded (support/dtype.h).
    bool hasPrecision(const std::string& precision) const;
    bool isRecorded(const std::string& dtype) const; // recorded, not rescaled
    std::int64_t batch1() const; // the smallest record
    std::int64_t batch2() const; // the largest record
    std::vector<std::int64_t> recordedBatches() const; // of the first dtype, increasing
    std::vector<std::int64_t> recordedBatches(const std::string& dtype) const; // a precision's own records
    std::int64_t lastRecord(const std::string& dtype) const; // the last of them (0: none)
    RunMode mode() const; // what the records ran
    std::string device() const; // where the records ran: cpu, or meta (figures from shapes, not measured)
    std::vector<std::string> notes() const; // alignment, rescaled dtypes, ...
    // Of notes(), those that qualify every figure the records give (RawRun::figure_notes): what a table built on this
    // what-if (the fit table) repeats.
    std::vector<std::string> figureNotes() const;
    const ModelInfo& model() const { return *model_; } // the model's tensors, as recorded
    std::size_t eventCount(const std::string& dtype) const; // events replayed per prediction

    struct Fit; // one dtype's fitted sizes, in core/whatif/fit.h

private:
    std::shared_ptr<const ModelInfo> model_;
    std::shared_ptr<const std::vector<LayerStats>> modules_;
    std::vector<std::shared_ptr<const Fit>> fits_;
    std::vector<std::string> notes_;
    SizeRange range_;
    CheckpointSpec checkpoint_; // withCheckpoint's: the stage its fits were rewritten by (none: the recorded step)
    int grad_accum_ = 1; // withGradAccum's
    std::shared_ptr<const WhatIf> unaccumulated_; // withGradAccum's: the what-if ranks are laid over
    // The report of fit `f` at `batch` (the recorded step's: a checkpointed fit's plain one).
    Report reportOf(const Fit& f, std::int64_t batch, const std::string& dtype) const;
    // The largest size within the runnable range and `upTo` for which `fits` holds: doubling from the smallest
    // to the first that does not, then halving the gap. 0 if not even the smallest.
    std::int64_t largestFitting(std::int64_t upTo, const std::function<bool(std::int64_t)>& fits) const;
    // predictRank; `replayOnlyIfPeakFits`: no reserve replay where the peak total already exceeds `capacity` (a
    // search that needs only the verdict lays the rank out once).
    Prediction rankPrediction(std::int64_t batch, const ParallelPlan& plan, bool withReserved, std::int64_t capacity,
        bool replayOnlyIfPeakFits) const;
    const Fit& fit(const std::string& dtype) const; // the first fit of dtype; throws std::invalid_argument
    const Fit& fit(const std::string& dtype, std::int64_t batch) const; // the fit whose records surround batch
    void addRescaledFits(const std::vector<std::pair<std::string, std::string>>& cannotRun);
    // record() and recordSeq(): runs at each of `xs` (validated by the caller) in every dtype, a fit through each
    // two (batch) or three (sequence) neighbouring records.
    static WhatIf recordAt(Model& model, RunOptions base, const std::vector<std::int64_t>& xs,
        const std::vector<std::string>& dtypes, WhatIfAxis axis);
    // recordPlanned() and recordSeqPlanned(): the planned records along `axis`, one loop for both.
    static WhatIf recordAlong(
        Model& model, RunOptions base, const std::vector<std::string>& dtypes, const Plan& plan, WhatIfAxis axis);
};

// The two batch sizes a what-if records: 1 and 2 for inference; 2 and 4 for a training step, whose backward
// takes other kernel paths at batch 1 (vectors where larger batches have matrices).
std::pair<std::int64_t, std::int64_t> recordedBatchesFor(RunMode mode);

// The table of predictions for `batches` x `dtypes` (a prediction the records do not back, measured instead
// when `model` is given and can run that dtype), with the largest batch within `budget` per dtype (0: none).
WhatIfTable makeWhatIfTable(const WhatIf& w, const std::vector<std::int64_t>& batches,
    const std::vector<std::string>& dtypes, std::int64_t budget, Model* model = nullptr);

} // namespace memledger
