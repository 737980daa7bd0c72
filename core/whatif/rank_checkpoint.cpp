#include "whatif/rank_checkpoint.h"

#include "report/whatif_table.h"
#include "support/format.h"
#include "whatif/gpu_fit.h"

#include <algorithm>
#include <optional>
#include <stdexcept>

namespace memledger {

RankCheckpointChoice chooseRankCheckpoint(const Report& step, const ParallelPlan& plan, std::int64_t budget)
{
    GpuFitTable overheads;
    overheads.budget_bytes = budget;
    setOverheadEstimates(overheads);
    const auto allocatorBudget = overheads.allocatorBudget(plan.gpus);

    struct Candidate {
        CheckpointSpec spec;
        double share = 0.0;
    };
    std::vector<Candidate> candidates {{CheckpointSpec {}, 0.0}};
    std::string whyNoBlocks;
    for (auto mode : {CheckpointMode::Selective, CheckpointMode::Full}) {
        std::optional<std::vector<std::string>> everyBlock; // the modules with every block checkpointed
        for (int every : {8, 4, 2, 1}) {
            CheckpointSpec spec;
            spec.mode = mode;
            spec.every = every;
            try {
                if (!everyBlock) {
                    auto all = spec;
                    all.every = 1;
                    everyBlock = checkpointedModules(step.layers, all);
                }
                if (every > 1 && checkpointedModules(step.layers, spec) == *everyBlock)
                    continue; // fewer blocks than K: the same as every block
                candidates.push_back({spec, predictCheckpoint(step, spec, false).recomputeShare()});
            } catch (const std::invalid_argument& e) {
                whyNoBlocks = e.what();
            }
        }
    }
    std::stable_sort(candidates.begin() + 1, candidates.end(),
        [](const Candidate& a, const Candidate& b) { return a.share < b.share; });

    RankCheckpointChoice best;
    best.allocator_budget = allocatorBudget;
    bool have = false;
    std::int64_t lowest = 0;
    for (const auto& c : candidates) {
        Report checkpointed = step;
        if (!c.spec.none()) {
            auto p = predictCheckpoint(step, c.spec, true);
            checkpointed = *p.report;
            checkpointed.notes.insert(checkpointed.notes.begin(), p.notes.begin(), p.notes.end());
        }
        Report rank = rankReport(checkpointed, plan);
        Prediction p;
        p.predicted_peak_total_bytes = rank.peak_total_bytes;
        p.predicted_reserved_bytes = rank.simulated_reserved_peak_bytes; // the replay starts from the rank's resident blocks
        const bool fits = fitsWithin(p, allocatorBudget);
        best.tried.push_back(c.spec.text() + ": " + formatPercent(100.0 * c.share) + " of the forward's ops recomputed, "
            + formatBytes(rank.peak_total_bytes) + " peak total, " + (fits ? "fits" : "does not fit"));
        if (fits || !have || rank.peak_total_bytes < lowest) {
            best.spec = c.spec;
            best.fits = fits;
            best.recompute_share = c.share;
            best.step = std::move(checkpointed);
            best.rank = std::move(rank);
            lowest = best.rank.peak_total_bytes;
            have = true;
        }
        if (fits)
            break;
    }
    if (candidates.size() == 1 && !best.fits && !whyNoBlocks.empty())
        throw std::invalid_argument("--checkpoint auto: the rank does not fit without checkpointing and " + whyNoBlocks);
    std::string note = "--checkpoint auto for " + formatBytes(budget) + " (" + formatBytes(allocatorBudget)
        + " left to the allocator after the CUDA context" + (plan.gpus > 1 ? std::string(" and NCCL's buffers") : std::string())
        + ", estimated): " + (best.fits ? "the least recompute that fits is " + best.spec.text()
                                        : "nothing fits; the lowest peak is " + best.spec.text())
        + ". Tried, least recompute first: ";
    for (std::size_t i = 0; i < best.tried.size(); ++i)
        note += (i ? "; " : "") + best.tried[i];
    best.rank.notes.insert(best.rank.notes.begin(), note);
    return best;
}

} // namespace memledger
