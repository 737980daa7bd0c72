#include "cli.h"
#include "whatif_cli.h"
#include "parallel_cli.h"
#include "serve_cli.h"
#include "diff_cli.h"

#include "demo_model.h"
#include "exports/report_html.h"
#include "exports/report_json.h"
#include "exports/ranks_export.h"
#include "exports/remedies_export.h"
#include "exports/report_text.h"
#include "exports/whatif_export.h"
#include "recording/build_report.h"
#include "snapshot/snapshot_writer.h"
#include "support/atomic_file.h"
#include "support/errors.h"
#include "whatif/accumulation.h"
#include "whatif/remedies.h"
#include "session/ranks.h"

#include "whatif/rank_checkpoint.h"

#include <nlohmann/json.hpp>

#include <iostream>
#include <optional>

namespace memledger {

int failureExit(const std::string& where, const std::string& run)
{
    auto say = [&](const std::string& subject, const char* message) {
        std::cerr << "memledger: " << (where.empty() ? "" : where + ": ") << (subject.empty() ? "" : subject + ": ")
                  << message << "\n";
    };
    try {
        throw;
    } catch (const FileError& e) {
        say({}, e.what());
        return kExitBadFile;
    } catch (const std::invalid_argument& e) {
        say(run, e.what());
        return kExitUsage;
    } catch (const UsageError& e) {
        say(run, e.what());
        return kExitUsage;
    } catch (const RunError& e) {
        say(run, e.what());
        return kExitRunFailed;
    } catch (const std::exception& e) {
        say({}, e.what());
        return kExitRunFailed;
    }
}

int writeOutputs(const CliOptions& o, const std::function<std::string()>& json, const std::function<std::string()>& html)
{
    try {
        for (const auto& [path, text] : {std::pair {&o.json, &json}, std::pair {&o.html, &html}})
            if (!path->empty()) {
                writeFileAtomically(*path, (*text)());
                std::cout << "Wrote " << *path << "\n";
            }
    } catch (const std::exception&) {
        return failureExit();
    }
    return kExitOk;
}

namespace {

PngRenderer& pngRenderer()
{
    static PngRenderer renderer;
    return renderer;
}

namespace {

// analyze --checkpoint: a training step as it runs with the checkpoints asked for, or else with those the model was
// exported with (checkpointsToAnalyze), its notes saying what is recomputed; the step itself where there are none.
Report checkpointedStep(Report step, const CliOptions& o, const OpenedFile& file)
{
    if (step.run.mode != RunMode::Train || !file.model)
        return step;
    std::vector<std::string> notes;
    const auto specs = checkpointsToAnalyze(o.checkpoints, file.model->info(), &notes);
    if (specs.empty() || specs.front().none())
        return step;
    auto c = predictCheckpoint(step, specs.front(), true);
    Report out = *c.report;
    out.notes.insert(out.notes.begin(), c.notes.begin(), c.notes.end());
    out.notes.insert(out.notes.begin(), notes.begin(), notes.end());
    return out;
}

} // namespace

int runAnalyze(const CliOptions& o)
{
    const std::string name = o.model.empty() ? kDemoModelName : o.model;
    Report report;
    OpenedFile file;
    std::optional<Report> rankStep; // a rank's: the step it is laid over (its checkpointing remedies)
    std::optional<ParallelPlan> rankPlan;
    try {
        file = openFileOrDemo(o.model);
        if (o.parallel()) {
            // One rank: the step recorded in the dtype the ranks compute in, the schedule laid over it.
            const auto layers = file.model ? file.model->modules() : std::vector<LayerStats> {};
            auto plan = parallelPlanFromCli(o, layers);
            RunOptions run = o.run;
            run.dtype = plan.paramDtype(); // the dtype the forward and backward compute in
            run.mode = RunMode::Train; // a rank of a training job
            run.cast_module_inputs = inputCastUnits(plan, layers);
            rankPlan = plan;
            if (o.checkpointed() && o.checkpoints.front().mode == CheckpointMode::Auto) {
                // The least recompute whose rank fits the budget (whatif/rank_checkpoint.h).
                auto choice = chooseRankCheckpoint(analyzeOpened(file, run), plan, *o.budget);
                rankStep = std::move(choice.step);
                report = std::move(choice.rank);
            } else {
                rankStep = checkpointedStep(analyzeOpened(file, run), o, file);
                report = rankReport(*rankStep, plan);
            }
            if (!rankStep->forward_uses_recorded) // checkpointed already: its remedies are the step's as given
                rankStep.reset();
        } else if (o.checkpointed() || o.grad_accum > 1) {
            RunOptions run = o.run;
            run.mode = RunMode::Train;
            report = accumulatedReport(checkpointedStep(analyzeOpened(file, run), o, file), o.grad_accum);
        } else {
            report = checkpointedStep(analyzeOpened(file, o.run), o, file);
        }
    } catch (const std::exception&) {
        return failureExit({}, name);
    }
    if (!o.whatif_batches.empty() && file.model) {
        try {
            CliOptions w = o;
            w.batches = o.whatif_batches;
            w.dtypes = {"float32", "bfloat16", "float16"};
            report.whatif = std::make_shared<const WhatIfTable>(computeWhatIfTable(file, w));
        } catch (const std::exception&) {
            return failureExit("what-if", name);
        }
    }
    if (o.remedies) {
        try {
            TilingRequest tiling;
            tiling.tile = o.tile;
            tiling.overlap = o.tile_overlap;
            OpenedFile tileProgram;
            if (!o.tile_program.empty()) {
                tileProgram = openFileOrDemo(o.tile_program);
                if (!tileProgram.model)
                    throw std::invalid_argument(o.tile_program + ": --tile-program needs a model, not a report");
                tiling.program = tileProgram.model.get();
            }
            auto remedies = file.model
                ? remediesForModel(*file.model, report, o.budget.value_or(0), tiling,
                      [](const std::string& step) { std::cerr << "memledger: " << step << "\n"; }, nullptr,
                      rankStep ? &*rankStep : nullptr, rankStep ? &*rankPlan : nullptr)
                : computeRemedies(report);
            report.remedies = std::make_shared<const std::vector<Remedy>>(std::move(remedies));
        } catch (const std::exception&) {
            return failureExit("what would help", name);
        }
    }
    std::cout << reportToText(report, o.depth);
    if (o.tensors)
        std::cout << "\n" << tensorsToText(report);
    if (report.whatif) {
        std::cout << "\nWhat if (predicted from runs at batch " << report.whatif->recorded_batch1 << " and "
                  << report.whatif->recorded_batch2 << "):\n";
        std::cout << whatIfToText(*report.whatif);
    }
    if (report.remedies)
        std::cout << "\nWhat would help (ranked by the saving on the peak total, then on the reserve"
                  << (report.run.device == "meta" ? "; every figure computed on the meta device, from shapes" : "")
                  << "):\n"
                  << remediesToText(*report.remedies, report.run.device);
    try {
        if (!o.json.empty()) {
            writeReportJsonFile(report, o.json);
            std::cout << "Wrote " << o.json << "\n";
        }
        if (!o.html.empty()) {
            writeFileAtomically(o.html, reportToHtml(report));
            std::cout << "Wrote " << o.html << "\n";
        }
        if (!o.snapshot_out.empty()) {
            writeSnapshotFile(o.snapshot_out, report);
            std::cout << "Wrote " << o.snapshot_out << "\n";
        }
        if (!o.png.empty()) {
            if (!pngRenderer())
                throw std::runtime_error(o.png + ": this build has no GUI to render the timeline with");
            auto error = pngRenderer()(report, o.png);
            if (!error.empty())
                throw std::runtime_error(error);
            std::cout << "Wrote " << o.png << "\n";
        }
    } catch (const std::exception&) {
        return failureExit();
    }
    return kExitOk;
}

} // namespace

void setPngRenderer(PngRenderer renderer)
{
    pngRenderer() = std::move(renderer);
}

int runRanks(const CliOptions& o)
{
    RankTable table;
    try {
        table = compareRanks(rankFiles(o.rank_files));
    } catch (const std::exception&) {
        return failureExit();
    }
    std::cout << "Ranks: " << table.ranks.size() << (table.ranks.size() == 1 ? " file" : " files") << "\n\n"
              << ranksToText(table);
    return writeOutputs(
        o, [&] { return ranksToJson(table).dump(2) + "\n"; }, [&] { return ranksToHtml(table); });
}

int runCli(const CliOptions& o)
{
    if (o.command == "ranks")
        return runRanks(o);
    if (o.command == "whatif")
        return runWhatIf(o);
    if (o.command == "diff")
        return runDiff(o);
    if (o.command == "fit")
        return o.serve ? runServe(o) : runFit(o);
    return runAnalyze(o);
}

} // namespace memledger
