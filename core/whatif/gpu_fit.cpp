#include "whatif/gpu_fit.h"

#include "support/dtype.h"
#include "support/format.h"
#include "whatif/whatif_policy.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <stdexcept>

namespace memledger {

namespace {

constexpr std::int64_t kMiB = 1024 * 1024;

// A step's compute dtype in `precision` (support/dtype.h): a mixed one's autocast dtype.
std::string computeDtypeOf(const std::string& precision)
{
    return isMixedPrecision(precision) ? autocastDtypeOf(precision) : precision;
}

// The CPU offload a strategy offers: FSDP2's CPUOffloadPolicy (fsdp, zero2), DeepSpeed's offload_param with its
// optimizer (ds-zero3) or offload_optimizer (ds-zero1, ds-zero2); none for ddp and zero1.
std::string offloadOf(Sharding shard)
{
    if (shardsParameters(shard) || shard == Sharding::DsZero3)
        return "params";
    return isDeepSpeed(shard) ? "optimizer" : "";
}

} // namespace

std::string notRecorded(const WhatIf& w, const ParallelPlan& plan)
{
    if (w.hasPrecision(w.rankPrecision(plan)))
        return {};
    const auto key = plan.recordedPrecision();
    if (isFsdpRecordPrecision(key))
        return std::string(shardingName(plan.shard)) + " in " + plan.paramDtype() + " over " + plan.master_dtype
            + " master weights is the step recorded in " + plan.paramDtype() + ", which this what-if could not record "
              "(its notes say why)";
    return std::string(shardingName(plan.shard)) + " in " + key + " is the step recorded under " + plan.autocast
        + " autocast over " + plan.master_dtype + " weights, which this what-if could not record (its notes say why)";
}

void checkPrecisions(const std::vector<std::string>& precisions)
{
    for (const auto& p : precisions)
        if (!isSupportedPrecision(p))
            throw std::invalid_argument("precision '" + p
                + "' is not one of float32, bfloat16, float16, bfloat16-mixed, float16-mixed");
}

std::vector<std::string> recordedPrecisionsFor(const std::vector<std::string>& precisions, const std::vector<Sharding>& shards)
{
    checkPrecisions(precisions);
    const bool sharded = std::any_of(shards.begin(), shards.end(), shardsParameters);
    const bool unsharded = std::any_of(shards.begin(), shards.end(), [](Sharding s) { return !takesParamDtype(s); });
    const bool deepSpeed = std::any_of(shards.begin(), shards.end(), isDeepSpeed);
    std::vector<std::string> out;
    auto add = [&](const std::string& d) {
        if (std::find(out.begin(), out.end(), d) == out.end())
            out.push_back(d);
    };
    for (const auto& p : precisions) {
        if (!isMixedPrecision(p)) {
            add(p);
            continue;
        }
        if (sharded) // FSDP's MixedPrecisionPolicy: the step computes in param_dtype, each unit's inputs cast to it
            add(fsdpRecordPrecision(computeDtypeOf(p)));
        if (unsharded) // DDP's and ZeRO-1's: torch.autocast over float32 weights
            add(p);
        if (deepSpeed) // DeepSpeed's bf16/fp16: the model cast, the step in the compute dtype
            add(computeDtypeOf(p));
    }
    return out;
}

std::string precisionText(const std::string& precision)
{
    if (!isSupportedPrecision(precision))
        return precision;
    if (!isMixedPrecision(precision))
        return precision + " (pure: weights, gradients and optimizer state in " + precision + ")";
    const auto compute = computeDtypeOf(precision), master = masterDtypeOf(precision);
    return compute + " mixed (" + master + " master weights, gradients and optimizer state; " + compute
        + " forward and backward: FSDP's param_dtype, DeepSpeed's bf16/fp16 model, or torch.autocast under DDP and ZeRO-1)";
}

ParallelPlan planFor(const GpuFitRequest& r, const std::string& precision, Sharding shard, int gpus)
{
    if (!isSupportedPrecision(precision))
        throw std::invalid_argument("unknown precision '" + precision + "'");
    ParallelPlan plan = r.base;
    plan.gpus = gpus;
    plan.shard = shard;
    plan.master_dtype = masterDtypeOf(precision);
    plan.param_dtype = computeDtypeOf(precision);
    plan.reduce_dtype.clear();
    plan.autocast.clear();
    plan.reshard_after_forward = shard == Sharding::Fsdp && r.base.reshard_after_forward;
    if (!takesParamDtype(shard)) { // ddp and zero1 compute in the weights' dtype, under autocast where mixed
        plan.param_dtype.clear();
        plan.autocast = autocastDtypeOf(precision);
    }
    return plan;
}

void setOverheadEstimates(GpuFitTable& t)
{
    t.overheads = DeviceOverheads::estimates();
}

std::vector<Prediction> rankRows(const WhatIf& w, const std::vector<std::int64_t>& batches,
    const std::vector<std::string>& precisions, const std::vector<Sharding>& shards, const std::vector<int>& gpus,
    const GpuFitRequest& r)
{
    checkPrecisions(precisions);
    GpuFitTable overheads;
    overheads.budget_bytes = r.budget;
    setOverheadEstimates(overheads);
    std::vector<Prediction> rows;
    for (const auto& precision : precisions)
        for (auto shard : shards)
            for (int n : gpus) {
                // "Fits" is monotone along the micro-batch: never above the largest that fits.
                std::int64_t largest = -1;
                for (auto b : batches) {
                    auto plan = planFor(r, precision, shard, n);
                    const auto why = notRecorded(w, plan);
                    Prediction p;
                    if (!why.empty()) {
                        p.batch = b;
                        p.dtype = precision;
                        p.gpus = n;
                        p.shard = shardingName(shard);
                        p.runnable = false;
                        p.not_runnable = why;
                        p.fits = false;
                        rows.push_back(p);
                        continue;
                    }
                    const auto budget = r.budget > 0 ? overheads.allocatorBudget(n) : 0;
                    p = w.predictRank(b, plan, r.with_reserved, budget);
                    p.dtype = precision;
                    if (r.budget > 0) {
                        if (largest < 0)
                            largest = budget > 0 ? w.maxRankBatch(plan, budget, r.with_reserved) : 0;
                        p.fits = budget > 0 && b <= largest && fitsWithin(p, budget);
                    }
                    rows.push_back(p);
                }
            }
    return rows;
}

GlobalBatchAnswer reachGlobalBatch(const WhatIf& step, const ParallelPlan& plan, std::int64_t globalBatch,
    std::int64_t budget, bool withReserved)
{
    GlobalBatchAnswer out;
    const auto range = step.runnableRange();
    if (budget <= 0 || globalBatch < 1 || globalBatch % plan.gpus != 0)
        return out; // these GPUs cannot share the global batch evenly
    const std::int64_t perRank = globalBatch / plan.gpus;
    if (perRank < 1)
        return out;
    auto fitsAt = [&](std::int64_t micro, int k) -> std::optional<Prediction> {
        auto p = plan;
        p.grad_accum = k;
        auto at = step.predictRank(micro, p, withReserved, budget);
        if (!fitsWithin(at, budget))
            return std::nullopt;
        at.fits = true;
        return at;
    };
    // The whole share in one micro-step, where it fits: no gradients kept between micro-steps.
    if (range.contains(perRank))
        if (auto at = fitsAt(perRank, 1)) {
            out = {perRank, 1, at};
            return out;
        }
    if (perRank == 1)
        return out; // nothing to accumulate
    // Else the largest micro-batch that divides it and fits with gradients accumulated. Micro-steps 2 to K-1 keep every
    // gradient through their forward and backward without reducing, so three or more micro-steps never peak lower
    // than two: the search is made with three, each candidate checked with its own K.
    auto accumulating = plan;
    accumulating.grad_accum = 3;
    const auto largest = step.maxRankBatch(accumulating, budget, withReserved, perRank - 1);
    for (std::int64_t micro = std::min(largest, perRank - 1); micro >= 1; --micro) {
        if (perRank % micro != 0 || !range.contains(micro))
            continue;
        const auto k = perRank / micro;
        if (k > 1 << 20)
            break;
        if (auto at = fitsAt(micro, static_cast<int>(k))) {
            out = {micro, static_cast<int>(k), at};
            return out;
        }
    }
    return out;
}

namespace {

// The checkpointing each answer is made for: the request's, or none alone.
std::vector<CheckpointSpec> checkpointsOf(const GpuFitRequest& r)
{
    return r.checkpoints.empty() ? std::vector<CheckpointSpec> {CheckpointSpec {}} : r.checkpoints;
}

} // namespace

GpuFitTable makeGpuFitTable(const WhatIf& w, const GpuFitRequest& r)
{
    const auto started = std::chrono::steady_clock::now();
    checkPrecisions(r.precisions);
    if (w.mode() != RunMode::Train)
        throw std::invalid_argument("the fit table answers for a training step: record with --mode train");
    if (r.budget <= 0)
        throw std::invalid_argument("the fit table needs a budget: --budget H100-80GB (or a size)");
    GpuFitTable t;
    t.budget_bytes = r.budget;
    t.budget_text = r.budget_text;
    t.axis = w.axis();
    t.device = w.device();
    t.runnable = w.runnableRange();
    t.grad_accum = w.gradAccum() > 1 ? w.gradAccum() : r.base.grad_accum; // the what-if's stage, or the plan's
    t.global_batch = r.global_batch;
    t.offload = r.base.offload;
    t.host_budget = r.host_budget;
    t.gpus_per_node = r.base.gpus_per_node;
    if (r.global_batch > 0 && t.grad_accum > 1)
        throw std::invalid_argument("--global-batch chooses the micro-batches accumulated: give it or --grad-accum");
    t.gpu_counts = r.gpu_counts;
    if (t.gpu_counts.empty())
        for (int n = 1; n <= 1024; n *= 2)
            t.gpu_counts.push_back(n);
    std::sort(t.gpu_counts.begin(), t.gpu_counts.end());
    t.gpu_counts.erase(std::unique(t.gpu_counts.begin(), t.gpu_counts.end()), t.gpu_counts.end());
    setOverheadEstimates(t);
    // Each checkpoint's what-if, made once (the plain one as it is).
    const auto specs = checkpointsOf(r);
    std::vector<WhatIf> stepOf;
    std::vector<double> shareOf;
    std::vector<std::string> whyNot; // a checkpoint the model cannot take (no repeated block): its rows say why
    for (const auto& spec : specs) {
        try {
            stepOf.push_back(w.withCheckpoint(spec));
            double share = 0.0;
            if (!spec.none()) { // the recomputed ops' share, from the step at the smallest micro-batch
                auto plainStep = w.predictedReport(w.runnableRange().min, w.dtypes().front());
                share = predictCheckpoint(plainStep, spec, false).recomputeShare();
            }
            shareOf.push_back(share);
            whyNot.emplace_back();
        } catch (const std::invalid_argument& e) {
            if (spec.none())
                throw;
            stepOf.push_back(w);
            shareOf.push_back(0.0);
            whyNot.emplace_back(e.what());
        }
    }
    // The offload axis (--offload none,optimizer,params): each answered where the strategy offloads so; none asked
    // for, the plan's own (--offload, or none).
    const auto offloads = r.offloads.empty() ? std::vector<std::string> {r.base.offload} : r.offloads;
    auto answerFor = [&](const std::string& precision, Sharding shard, std::size_t c, const std::string& offload) {
        const WhatIf& step = stepOf[c];
        // The plan on n GPUs, with this answer's offload.
        auto planAt = [&](int n) {
            auto plan = planFor(r, precision, shard, n);
            plan.offload = offload;
            return plan;
        };
        GpuFitAnswer a;
        a.precision = precision;
        a.shard = shardingName(shard);
        a.checkpoint = specs[c].text();
        a.recompute_share = shareOf[c];
        a.offload = offload;
        const auto one = planAt(1);
        auto why = whyNot[c].empty() ? notRecorded(step, one) : whyNot[c];
        if (why.empty() && !offload.empty()) {
            try {
                checkPlanOffload(one);
            } catch (const std::invalid_argument& e) {
                why = e.what();
            }
        }
        if (!why.empty()) {
            a.not_modelled = why;
            return a;
        }
        a.last_record = step.lastRecord(step.rankPrecision(one)); // the same records at every GPU count
        a.grad_accum = t.grad_accum;
        std::int64_t previous = -1;
        for (int n : t.gpu_counts) {
            // Offloaded, the host's share does not depend on the micro-batch: a node that cannot hold its
            // ranks' state rules the GPU count out whatever the micro-batch.
            if (r.host_budget > 0 && !offload.empty()) {
                const auto rank = step.predictRank(t.runnable.min, planAt(n), false);
                if (rank.host_bytes_per_node > r.host_budget) {
                    a.largest.emplace_back(n, 0);
                    continue;
                }
            }
            if (r.global_batch > 0) {
                auto reach = reachGlobalBatch(step, planAt(n), r.global_batch,
                    t.allocatorBudget(n), r.with_reserved);
                a.largest.emplace_back(n, reach.micro_batch);
                if (reach.micro_batch > 0 && a.fewest_gpus == 0) {
                    a.fewest_gpus = n;
                    a.micro_batch = reach.micro_batch;
                    a.grad_accum = reach.grad_accum;
                    a.at = reach.at;
                }
                continue;
            }
            auto plan = planAt(n);
            const auto budget = t.allocatorBudget(n);
            // DDP's rank is the same on any number of GPUs (past one, NCCL's share off the budget).
            std::int64_t largest = 0;
            if (shard == Sharding::Ddp && previous >= 0 && n > 2)
                largest = previous;
            else
                largest = budget > 0 ? step.maxRankBatch(plan, budget, r.with_reserved) : 0;
            previous = largest;
            a.largest.emplace_back(n, largest);
            if (largest > 0 && a.fewest_gpus == 0) {
                a.fewest_gpus = n;
                a.micro_batch = largest;
                a.at = step.predictRank(largest, plan, r.with_reserved, budget);
                a.at->fits = true;
            }
        }
        if (a.fewest_gpus == 0 && !t.gpu_counts.empty()) { // how far the closest row is from fitting
            const int n = t.gpu_counts.back();
            a.closest = step.predictRank(
                t.runnable.min, planAt(n), r.with_reserved, t.allocatorBudget(n));
            a.closest->fits = false;
        }
        return a;
    };
    int offered = 0;
    for (const auto& precision : r.precisions)
        for (auto shard : r.shards)
            for (std::size_t c = 0; c < specs.size(); ++c) {
                bool fits = false, modelled = true;
                for (const auto& offload : offloads) {
                    if (offloads.size() > 1 && !offload.empty()) { // an offload this strategy has not: no row
                        auto plan = planFor(r, precision, shard, 1);
                        plan.offload = offload;
                        try {
                            checkPlanOffload(plan);
                        } catch (const std::invalid_argument&) {
                            continue;
                        }
                    }
                    t.answers.push_back(answerFor(precision, shard, c, offload));
                    fits = fits || t.answers.back().fewest_gpus > 0;
                    modelled = modelled && t.answers.back().not_modelled.empty();
                }
                // Where nothing fits and no offload was asked for, the strategy's own offload is offered.
                const auto own = offloadOf(shard);
                if (!fits && modelled && r.offloads.empty() && r.base.offload.empty() && !own.empty()) {
                    auto a = answerFor(precision, shard, c, own);
                    if (a.fewest_gpus > 0) {
                        t.answers.push_back(a);
                        ++offered;
                    }
                }
            }
    if (offered > 0)
        t.notes.push_back(std::to_string(offered) + (offered == 1 ? " answer" : " answers")
            + " with CPU offload, offered where nothing fits without it (its offload column; --offload none,... asks "
              "for the axis): --offload params is FSDP2's CPUOffloadPolicy and DeepSpeed's ZeRO-3 offload_param, "
              "--offload optimizer DeepSpeed's ZeRO-Offload");
    bool atRangeEnd = false;
    for (const auto& a : t.answers)
        for (const auto& [n, b] : a.largest)
            atRangeEnd = atRangeEnd || (t.runnable.bounded() && b == t.runnable.max);
    if (atRangeEnd)
        t.notes.push_back("a micro-batch of " + std::to_string(t.runnable.max) + " is the most the program accepts ("
            + (t.runnable.why.empty() ? t.runnable.text() : t.runnable.why) + "): a larger one may fit but cannot run");
    // FSDP2's padding of short dim 0s (a mixture of experts' weights), from the fewest GPUs where it arises.
    if (std::any_of(r.shards.begin(), r.shards.end(), shardsParameters))
        for (int n : t.gpu_counts)
            if (auto note = fsdpPaddingNote(w.model(), n, masterDtypeOf(r.precisions.front())); !note.empty()) {
                t.notes.push_back("fsdp and zero2 on " + std::to_string(n) + " GPUs (and more): " + note);
                break;
            }
    // What qualifies the step itself (its lifetimes, its Functions, its dropout) qualifies every answer.
    for (const auto& n : w.figureNotes())
        t.notes.push_back(n);
    addLongestSequences(t, r);
    t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    return t;
}

void addLongestSequences(GpuFitTable& t, const GpuFitRequest& r)
{
    if (!r.seq_whatif || r.global_batch > 0)
        return;
    for (const auto& spec : checkpointsOf(r)) {
        std::optional<WhatIf> seq;
        for (auto& a : t.answers) {
            if (a.fewest_gpus == 0 || a.checkpoint != spec.text())
                continue;
            if (!seq) {
                try {
                    seq = r.seq_whatif->withCheckpoint(spec);
                } catch (const std::invalid_argument&) {
                    break; // a checkpoint the model cannot take: its rows say why
                }
            }
            auto plan = planFor(r, a.precision, *shardingFromName(a.shard), a.fewest_gpus);
            plan.offload = a.offload;
            a.longest_seq = seq->maxRankBatch(plan, t.allocatorBudget(a.fewest_gpus), r.with_reserved);
        }
    }
}

std::int64_t fitRecordsWanted(const GpuFitTable& t)
{
    std::int64_t wanted = 0;
    for (const auto& a : t.answers)
        for (const auto& [n, b] : a.largest)
            wanted = std::max(wanted, recordsToReach(b, a.last_record, t.runnable));
    return wanted;
}

WhatIf recordFitWhatIf(Model& model, const RunOptions& base, const GpuFitRequest& r,
    const std::function<void(const std::string& dtype, std::int64_t batch, int done)>& progress,
    std::optional<GpuFitTable>* table)
{
    WhatIfRequest records;
    records.dtypes = recordedPrecisionsFor(r.precisions, r.shards);
    records.rows = {1, 2, 4, 8}; // the records a training step's what-if makes, and a row past them if it is cheap
    GpuFitRequest answers = r;
    answers.seq_whatif = nullptr; // the batch records alone decide the micro-batches
    // The last table made, with the records it was made from (each precision's last): the answer where the what-if
    // returned is the one it was last asked of.
    std::optional<GpuFitTable> made;
    std::vector<std::int64_t> madeFrom;
    auto recordsOf = [](const WhatIf& w) {
        std::vector<std::int64_t> out;
        for (const auto& d : w.dtypes())
            out.push_back(w.lastRecord(d));
        return out;
    };
    auto w = recordWhatIfReaching(
        model, base, records,
        [&](const WhatIf& w) {
            made = makeGpuFitTable(w, answers);
            madeFrom = recordsOf(w);
            return fitRecordsWanted(*made);
        },
        progress);
    if (table) {
        table->reset();
        if (made && madeFrom == recordsOf(w))
            *table = std::move(*made);
    }
    return w;
}

} // namespace memledger
