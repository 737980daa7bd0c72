// One rank of a data-parallel training job (core/whatif/parallel.h) against PyTorch's own figures:
// - FSDP2 (fully_shard per block, then the root) against torch.distributed._tools.fsdp2_mem_tracker.FSDPMemTracker
//   under the "fake" process group and FakeTensorMode (tests/fixtures/fsdp_truths.py): the rank's sharded
//   parameters exact, its optimizer state within 0.01%, its peak total within 2%, for world sizes 2 to 64,
//   param_dtype float32 and bfloat16, reshard after forward on and off, two decoder shapes and a 7B, and
//   fine-tunes with part of the model frozen (whole units, units of frozen and trained parameters, a tied head);
// - the trace editor the layout is made with, on a hand-made trace.
// Skipped, with the reason, where the build's libtorch has no meta runs (1.13) or the fixtures' PyTorch no FSDP2.
#include "doc_table.h"
#include "truth_file.h"
#include "recording/build_report.h"
#include "recording/model.h"
#include "report/report_summary.h"
#include "report/trace_edit.h"
#include "run_command.h"
#include "support/dtype.h"
#include "support/format.h"
#include "exports/gpu_fit_export.h"
#include "whatif/gpu_fit.h"
#include "whatif/checkpoint.h"
#include "whatif/parallel.h"
#include "whatif/rank_checkpoint.h"
#include "whatif/whatif_policy.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <tuple>
#include <string>

using namespace memledger;
using memledger::test::fixture;
using memledger::test::runCommand;
using memledger::test::groupedBytes;

namespace {

const nlohmann::json& fsdpTruth()
{
    static const nlohmann::json truth = test::readTruth("fsdp/fsdp_truth.json", "make_fsdp_fixtures");
    return truth;
}

RunOptions stepOptions(const std::string& input, const std::string& dtype)
{
    RunOptions o;
    auto parsed = parseInputs(input);
    o.inputs = parsed.shapes;
    o.input_types = parsed.types;
    o.threads = 1;
    o.mode = RunMode::Train;
    o.optimizer = "adamw";
    o.dtype = dtype;
    return o;
}

std::int64_t category(const nlohmann::json& snapshot, const char* name)
{
    return snapshot.value(name, std::int64_t {0});
}

std::string caseName(const nlohmann::json& c)
{
    return c["model"].get<std::string>() + " " + c["input"].get<std::string>() + " on " + std::to_string(c["gpus"].get<int>())
        + (c.value("units", nlohmann::json()).is_string() ? " (units " + c["units"].get<std::string>() + ")" : "")
        + ", " + c["param_dtype"].get<std::string>() + (c["reduce_dtype"].is_string() ? "/" + c["reduce_dtype"].get<std::string>() : "")
        + (c["reshard_after_forward"].get<bool>() ? ", reshard" : ", no reshard");
}

class Fsdp : public ::testing::Test {
protected:
    void SetUp() override
    {
        if (torchBuildInfo().rfind("libtorch 1.", 0) == 0)
            GTEST_SKIP() << "this build's libtorch (" << torchBuildInfo() << ") has no meta runs";
        SKIP_IF_TRUTH_IS_NOT_HERE(fsdpTruth(), true);
    }
};

// Every case of the truth, each step recorded once per (file, input, param dtype) and laid out per plan.
TEST_F(Fsdp, RankAgreesWithFsdpMemTracker)
{
    const auto& cases = fsdpTruth()["cases"];
    ASSERT_FALSE(cases.empty());
    std::map<std::string, Report> steps;
    std::map<std::string, std::vector<LayerStats>> layersOf;
    int checked = 0, castChecked = 0;
    for (const auto& c : cases) {
        SCOPED_TRACE(caseName(c));
        const auto file = fixture("fsdp/" + c["file"].get<std::string>());
        const auto pd = c["param_dtype"].get<std::string>();
        if (!layersOf.count(file))
            layersOf[file] = Model::open(file).modules();
        ParallelPlan plan;
        plan.gpus = c["gpus"].get<int>();
        plan.shard = Sharding::Fsdp;
        plan.master_dtype = "float32";
        plan.param_dtype = pd;
        plan.reduce_dtype = c["reduce_dtype"].is_string() ? c["reduce_dtype"].get<std::string>() : std::string();
        plan.reshard_after_forward = c["reshard_after_forward"].get<bool>();
        plan.root_reshard_after_forward = plan.reshard_after_forward; // the truth passes it to the root too
        if (c.value("units", nlohmann::json()).is_string()) // units inside units, as --shard-units names them
            plan.units = shardUnitsMatching(layersOf[file], c["units"].get<std::string>());
        // The step the rank is laid over, as analyze --gpus records it: in param_dtype, each unit's floating-point
        // inputs cast to it (FSDP2's cast_forward_inputs). Recorded once per file, input and casts.
        auto options = stepOptions(c["input"].get<std::string>(), pd);
        options.cast_module_inputs = inputCastUnits(plan, layersOf[file]);
        std::string key = file + "|" + c["input"].get<std::string>() + "|" + pd;
        for (const auto& u : options.cast_module_inputs)
            key += "|" + u;
        if (!steps.count(key)) {
            auto model = Model::open(file);
            steps[key] = analyzeModel(model, options);
        }
        const auto& step = steps[key];
        auto rank = rankReport(step, plan);
        const auto& peak = c["peak"];
        const auto& after = c["after_step"];
        // The rank's parameter shards, padded as FSDP2 pads them, exactly.
        EXPECT_EQ(rank.model.parameter_bytes, c["padded_sharded_param_bytes"].get<std::int64_t>());
        EXPECT_EQ(rank.weight_bytes - rank.model.parameter_bytes, c["buffer_bytes"].get<std::int64_t>());
        // AdamW's moments over the local shards; FSDPMemTracker's OptState holds the host `step` counters too.
        const double optTruth = static_cast<double>(category(after, "OptState") - c["step_tensor_bytes"].get<std::int64_t>());
        EXPECT_NEAR(static_cast<double>(rank.optimizer_state_bytes), optTruth, 1e-4 * optTruth + 1);
        // The sharded gradients (padded) of the parameters that require grad only: a frozen one has none.
        EXPECT_EQ(rank.gradient_bytes, category(after, "Sharded Grad"));
        const double theirs = static_cast<double>(category(peak, "Total") - c["step_tensor_bytes"].get<std::int64_t>());
        const double ours = static_cast<double>(rank.peak_total_bytes);
        std::printf("[ fsdp     ] %-44s memledger %14s FSDPMemTracker %14s (%+.2f%%)\n", caseName(c).c_str(),
            groupedBytes(rank.peak_total_bytes).c_str(), groupedBytes(static_cast<std::int64_t>(theirs)).c_str(),
            100.0 * (ours - theirs) / theirs);
        EXPECT_NEAR(ours, theirs, 0.02 * theirs) << "peak " << peak.dump();
        // A float32 tensor handed to every block (MPT's ALiBi bias): where FSDP2's cast of it moves the peak, memledger
        // is at the job's figure, not at the figure of the job without the cast.
        if (c.contains("peak_total_cast_forward_inputs_off")) {
            const double off = c["peak_total_cast_forward_inputs_off"].get<double>() - c["step_tensor_bytes"].get<double>();
            std::printf("[ fsdp     ] %-44s FSDPMemTracker with cast_forward_inputs=False %14s\n", caseName(c).c_str(),
                groupedBytes(static_cast<std::int64_t>(off)).c_str());
            if (std::abs(off - theirs) > 0.005 * theirs) {
                EXPECT_LT(std::abs(ours - theirs), std::abs(off - theirs) / 4);
                bool said = false;
                for (const auto& n : step.notes)
                    said = said || n.find("MixedPrecisionPolicy.cast_forward_inputs: 3 floating-point inputs") != std::string::npos;
                EXPECT_TRUE(said) << "the step does not say it cast the blocks' inputs";
                ++castChecked;
            }
        }
        char pct[32];
        std::snprintf(pct, sizeof pct, "%+.2f%%", 100.0 * (ours - theirs) / theirs);
        test::docTableRow("distributed.md", "fsdp-memtracker",
            {caseName(c), groupedBytes(c["padded_sharded_param_bytes"].get<std::int64_t>()),
                groupedBytes(rank.model.parameter_bytes), groupedBytes(static_cast<std::int64_t>(theirs)),
                groupedBytes(rank.peak_total_bytes), pct},
            {{"fsdp_truth " + caseName(c) + " padded sharded parameters", rank.model.parameter_bytes,
                 c["padded_sharded_param_bytes"].get<std::int64_t>(), 0},
                {"fsdp_truth " + caseName(c) + " FSDPMemTracker peak total", rank.peak_total_bytes,
                    static_cast<std::int64_t>(theirs), 0.02}},
            false);
        ++checked;
    }
    EXPECT_GE(checked, 10);
    EXPECT_GE(castChecked, 2); // alibi without reshard after forward, on 8 and 64 ranks
}

const nlohmann::json& fsdpCheckpointTruth()
{
    static const nlohmann::json truth = test::readTruth("fsdp/fsdp_ac_truth.json", "make_fsdp_ac_fixtures");
    return truth;
}

std::string checkpointCaseName(const nlohmann::json& c)
{
    return caseName(c) + ", " + c["checkpoint"].get<std::string>()
        + (c["every"].get<int>() > 1 ? " every " + std::to_string(c["every"].get<int>()) : std::string());
}

// A case of fsdp_ac_truth.json as memledger lays it out: its program, param dtype, FSDP plan (the root resharded as
// the truth's) and the step's run options (each unit's inputs cast where the param dtype is not the master's).
struct FsdpAcCase {
    std::string file, pd;
    ParallelPlan plan;
    RunOptions options;
};

FsdpAcCase fsdpAcCase(const nlohmann::json& c)
{
    FsdpAcCase out;
    out.file = fixture("fsdp/" + c["file"].get<std::string>());
    out.pd = c["param_dtype"].get<std::string>();
    out.plan.gpus = c["gpus"].get<int>();
    out.plan.shard = Sharding::Fsdp;
    out.plan.master_dtype = "float32";
    out.plan.param_dtype = out.pd;
    out.plan.reshard_after_forward = c["reshard_after_forward"].get<bool>();
    out.plan.root_reshard_after_forward = out.plan.reshard_after_forward;
    out.options = stepOptions(c["input"].get<std::string>(), out.pd);
    out.options.cast_module_inputs = inputCastUnits(out.plan, Model::open(out.file).modules());
    return out;
}

// The step of a program at an input and dtype, recorded once per test.
const Report& recordedOnce(std::map<std::string, Report>& steps, const std::string& file, const std::string& input,
    const std::string& pd, const RunOptions& options)
{
    const std::string key = file + "|" + input + "|" + pd;
    if (!steps.count(key)) {
        auto model = Model::open(file);
        steps[key] = analyzeModel(model, options);
    }
    return steps.at(key);
}

// Activation checkpointing under FSDP2 (tests/fixtures/fsdp_ac_truths.py): checkpoint_wrapper on every block (every
// K-th), full and selective (create_selective_checkpoint_contexts saving matmul and attention outputs), against
// FSDPMemTracker on toy, gpt, a 7B and a 70B at 4 to 64 ranks. As analyze --checkpoint full|selective --gpus N
// --shard fsdp does it: the step recorded in param_dtype, rewritten by the checkpoint what-if, the rank laid over it.
// The rank's shards exact, its peak total within 2%; and the what-if's checkpointed fits (fit, whatif --gpus) give
// the same peak as the report at the recorded size.
TEST_F(Fsdp, CheckpointedRankAgreesWithFsdpMemTracker)
{
    const auto& truth = fsdpCheckpointTruth();
    SKIP_IF_TRUTH_IS_NOT_HERE(truth, true);
    const auto& cases = truth["cases"];
    ASSERT_FALSE(cases.empty());
    std::map<std::string, Report> steps;
    int checked = 0, selective = 0, fitsChecked = 0;
    for (const auto& c : cases) {
        if (c.value("micro_steps", 1) > 1)
            continue; // AccumulatedRankAgreesWithFsdpMemTracker's
        SCOPED_TRACE(checkpointCaseName(c));
        auto [file, pd, plan, options] = fsdpAcCase(c);
        const auto layers = Model::open(file).modules();
        const auto& step = recordedOnce(steps, file, c["input"].get<std::string>(), pd, options);
        const auto spec = parseCheckpointSpec(c["checkpoint"].get<std::string>(), c["every"].get<int>());
        auto checkpointed = predictCheckpoint(step, spec, false);
        EXPECT_EQ(checkpointed.checkpoint.size(),
            (largestRepeatedBlocks(layers).size() + static_cast<std::size_t>(spec.every) - 1) / static_cast<std::size_t>(spec.every));
        EXPECT_GT(checkpointed.recomputed_ops, 0);
        auto rank = rankReport(*checkpointed.report, plan);
        EXPECT_EQ(rank.model.parameter_bytes, c["padded_sharded_param_bytes"].get<std::int64_t>());
        const double theirs = static_cast<double>(category(c["peak"], "Total") - c["step_tensor_bytes"].get<std::int64_t>());
        const double ours = static_cast<double>(rank.peak_total_bytes);
        std::printf("[ fsdp ac  ] %-60s memledger %16s FSDPMemTracker %16s (%+.2f%%)\n", checkpointCaseName(c).c_str(),
            groupedBytes(rank.peak_total_bytes).c_str(), groupedBytes(static_cast<std::int64_t>(theirs)).c_str(),
            100.0 * (ours - theirs) / theirs);
        EXPECT_NEAR(ours, theirs, 0.02 * theirs) << "peak " << c["peak"].dump();
        char pct[32];
        std::snprintf(pct, sizeof pct, "%+.2f%%", 100.0 * (ours - theirs) / theirs);
        test::docTableRow("distributed.md", "fsdp-checkpoint",
            {checkpointCaseName(c), groupedBytes(rank.model.parameter_bytes), groupedBytes(static_cast<std::int64_t>(theirs)),
                groupedBytes(rank.peak_total_bytes), pct,
                formatPercent(100.0 * checkpointed.recomputeShare())},
            {{"fsdp_ac_truth " + checkpointCaseName(c) + " padded sharded parameters", rank.model.parameter_bytes,
                 c["padded_sharded_param_bytes"].get<std::int64_t>(), 0},
                {"fsdp_ac_truth " + checkpointCaseName(c) + " FSDPMemTracker peak total", rank.peak_total_bytes,
                    static_cast<std::int64_t>(theirs), 0.02}},
            false);
        selective += spec.mode == CheckpointMode::Selective;
        ++checked;
        // The what-if's checkpointed fits (what fit and whatif --gpus lay ranks over) at the recorded size: the
        // same rank peak as the report's, once per model and checkpoint.
        if (c["model"] == "toy" && plan.gpus == 4) {
            auto model = Model::open(file);
            auto base = options;
            auto w = WhatIf::record(model, base, std::vector<std::int64_t> {1, 2}, {pd}).withCheckpoint(spec);
            auto p = w.predictRank(2, plan, false);
            EXPECT_NEAR(static_cast<double>(p.predicted_peak_total_bytes), ours, 0.001 * ours);
            auto viaReport = w.predictedRankReport(2, plan);
            EXPECT_NEAR(static_cast<double>(viaReport.peak_total_bytes), ours, 0.001 * ours);
            ++fitsChecked;
        }
    }
    EXPECT_GE(checked, 18);
    EXPECT_GE(selective, 8);
    EXPECT_GE(fitsChecked, 4);
}

// Gradient accumulation under FSDP2 (tests/fixtures/fsdp_ac_truths.py's ACCUM_CASES): K forwards and backwards per
// optimizer step, set_requires_gradient_sync(False) but in the last, against FSDPMemTracker (its peak over the whole
// step) on toy and gpt at 4 to 64 ranks, in float32 and bfloat16 (whose unsharded gradients are kept in float32, FSDP2's
// grad_dtype), with and without reshard after forward, and under full and selective checkpointing. As analyze
// --grad-accum K --gpus N --shard fsdp does it; the what-if's rank (fit, whatif --gpus) gives the same peak.
TEST_F(Fsdp, AccumulatedRankAgreesWithFsdpMemTracker)
{
    const auto& truth = fsdpCheckpointTruth();
    SKIP_IF_TRUTH_IS_NOT_HERE(truth, true);
    std::map<std::string, Report> steps;
    int checked = 0, fitsChecked = 0;
    for (const auto& c : truth["cases"]) {
        const int k = c.value("micro_steps", 1);
        if (k == 1)
            continue;
        const auto name = checkpointCaseName(c) + ", " + std::to_string(k) + " micro-steps";
        SCOPED_TRACE(name);
        auto [file, pd, plan, options] = fsdpAcCase(c);
        plan.grad_accum = k;
        const auto& recorded = recordedOnce(steps, file, c["input"].get<std::string>(), pd, options);
        const auto spec = parseCheckpointSpec(c["checkpoint"].get<std::string>(), c["every"].get<int>());
        Report step = recorded;
        if (!spec.none())
            step = *predictCheckpoint(recorded, spec, false).report;
        auto rank = rankReport(step, plan);
        EXPECT_EQ(rank.run.grad_accum, k);
        EXPECT_EQ(rank.model.parameter_bytes, c["padded_sharded_param_bytes"].get<std::int64_t>());
        const double theirs = static_cast<double>(category(c["peak"], "Total") - c["step_tensor_bytes"].get<std::int64_t>());
        const double ours = static_cast<double>(rank.peak_total_bytes);
        std::printf("[ fsdp acc ] %-60s memledger %16s FSDPMemTracker %16s (%+.2f%%)\n", name.c_str(),
            groupedBytes(rank.peak_total_bytes).c_str(), groupedBytes(static_cast<std::int64_t>(theirs)).c_str(),
            100.0 * (ours - theirs) / theirs);
        EXPECT_NEAR(ours, theirs, 0.02 * theirs) << "peak " << c["peak"].dump();
        // Accumulating costs the gradients kept between micro-steps: never less than the step without it.
        auto single = plan;
        single.grad_accum = 1;
        EXPECT_GT(rank.peak_total_bytes, rankReport(step, single).peak_total_bytes);
        char pct[32];
        std::snprintf(pct, sizeof pct, "%+.2f%%", 100.0 * (ours - theirs) / theirs);
        test::docTableRow("distributed.md", "fsdp-accumulation",
            {name, groupedBytes(rank.model.parameter_bytes), groupedBytes(static_cast<std::int64_t>(theirs)),
                groupedBytes(rank.peak_total_bytes), pct},
            {{"fsdp_ac_truth " + name + " padded sharded parameters", rank.model.parameter_bytes,
                 c["padded_sharded_param_bytes"].get<std::int64_t>(), 0},
                {"fsdp_ac_truth " + name + " FSDPMemTracker peak total", rank.peak_total_bytes,
                    static_cast<std::int64_t>(theirs), 0.02}},
            false);
        ++checked;
        if (c["model"] == "toy" && plan.gpus == 4 && spec.none()) {
            auto model = Model::open(file);
            auto w = WhatIf::record(model, options, std::vector<std::int64_t> {1, 2}, {pd});
            auto p = w.predictRank(2, plan, false);
            EXPECT_NEAR(static_cast<double>(p.predicted_peak_total_bytes), ours, 0.001 * ours);
            // The what-if's accumulation stage (the window's Micro-batches row) answers for the same job.
            auto staged = w.withGradAccum(k);
            auto unplanned = plan;
            unplanned.grad_accum = 1;
            EXPECT_EQ(staged.predictRank(2, unplanned, false).predicted_peak_total_bytes, p.predicted_peak_total_bytes);
            EXPECT_EQ(staged.predictedRankReport(2, unplanned).run.grad_accum, k);
            ++fitsChecked;
        }
    }
    EXPECT_GE(checked, 14);
    EXPECT_GE(fitsChecked, 4);
}

// --offload params (FSDP2's CPUOffloadPolicy), modelled from PyTorch's source (FSDPMemTracker cannot run it without a
// GPU): the device keeps the buffers and the step's unsharded tensors; the host holds the padded parameter shards
// (FSDPMemTracker's sharded parameters of the same job without offload), the gradient shards, the optimizer state (the
// same job's) and the optimizer step's scratch. Each unit's shards are copied to the device before its all-gather.
TEST_F(Fsdp, AnOffloadedRankHoldsItsShardsAndOptimizerStateOnTheHost)
{
    const auto& truth = fsdpCheckpointTruth();
    SKIP_IF_TRUTH_IS_NOT_HERE(truth, true);
    int checked = 0;
    for (const auto& c : truth["cases"]) {
        if (c["model"] != "toy" || c["gpus"] != 4 || c["checkpoint"] != "full" || c.value("micro_steps", 1) != 1)
            continue;
        const auto pd = c["param_dtype"].get<std::string>();
        SCOPED_TRACE(pd);
        const auto file = fixture("fsdp/" + c["file"].get<std::string>());
        auto model = Model::open(file);
        ParallelPlan plan;
        plan.gpus = 4;
        plan.master_dtype = "float32";
        plan.param_dtype = pd;
        auto options = stepOptions(c["input"].get<std::string>(), pd);
        options.cast_module_inputs = inputCastUnits(plan, model.modules());
        auto step = analyzeModel(model, options);
        auto onDevice = rankReport(step, plan);
        auto offloaded = plan;
        offloaded.offload = "params";
        offloaded.gpus_per_node = 4;
        auto rank = rankReport(step, offloaded);
        ASSERT_TRUE(rank.run.parallel);
        const auto& par = *rank.run.parallel;
        EXPECT_EQ(par.offload, "params");
        EXPECT_EQ(par.gpus_per_node, 4);
        auto wide = offloaded;
        wide.gpus_per_node = 8; // four ranks: a node holds four whatever its size
        EXPECT_EQ(rankReport(step, wide).run.parallel->gpus_per_node, 4);
        EXPECT_EQ(rank.model.parameter_bytes, 0);
        EXPECT_EQ(rank.optimizer_state_bytes, 0);
        EXPECT_EQ(rank.gradient_bytes, 0);
        EXPECT_EQ(rank.weight_bytes, onDevice.weight_bytes - onDevice.model.parameter_bytes); // the buffers
        // The host: the padded shards (FSDPMemTracker's), their gradients, the optimizer state, and scratch under a shard.
        const auto shards = c["padded_sharded_param_bytes"].get<std::int64_t>();
        EXPECT_EQ(onDevice.model.parameter_bytes, shards);
        const auto state = shards + onDevice.gradient_bytes + onDevice.optimizer_state_bytes;
        EXPECT_GE(par.host_bytes, state);
        EXPECT_LE(par.host_bytes, state + shards);
        EXPECT_LT(rank.peak_total_bytes, onDevice.peak_total_bytes);
        // The device saves at least the optimizer state and the shards, less one unit's copies from the host.
        EXPECT_GT(onDevice.peak_total_bytes - rank.peak_total_bytes, onDevice.optimizer_state_bytes);
        std::printf("[ offload  ] toy on 4, %s: device %s -> %s, host %s per rank\n", pd.c_str(),
            groupedBytes(onDevice.peak_total_bytes).c_str(), groupedBytes(rank.peak_total_bytes).c_str(),
            groupedBytes(par.host_bytes).c_str());
        ++checked;
    }
    EXPECT_GE(checked, 2);
    // Refused, naming the flag, where it cannot be answered.
    ParallelPlan ddp;
    ddp.shard = Sharding::Ddp;
    ddp.offload = "params";
    RunInfo run;
    run.mode = RunMode::Train;
    EXPECT_THROW(checkPlan(ddp, run), std::invalid_argument);
    ParallelPlan optimizerOnly;
    optimizerOnly.offload = "optimizer";
    try {
        checkPlan(optimizerOnly, run);
        ADD_FAILURE() << "--offload optimizer accepted";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("--offload"), std::string::npos) << e.what();
    }
}

// fit --global-batch G: each answer reaches G exactly, with its share in one step where it fits, else the largest
// micro-batch that divides it and fits with the rest accumulated; a GPU count that does not divide G is no answer.
TEST_F(Fsdp, AGlobalBatchIsReachedWithTheLargestMicroBatchThatFits)
{
    const auto file = fixture("fsdp/toy.pt2");
    auto model = Model::open(file);
    auto w = WhatIf::record(model, stepOptions("2x32:int64", "float32"), std::vector<std::int64_t> {1, 2, 4, 8}, {"float32"});
    GpuFitRequest request;
    request.precisions = {"float32"};
    request.shards = {Sharding::Fsdp};
    request.gpu_counts = {1, 3};
    request.with_reserved = false;
    request.global_batch = 16;
    auto accumulating = planFor(request, "float32", Sharding::Fsdp, 1);
    accumulating.grad_accum = 3;
    GpuFitTable overheads;
    setOverheadEstimates(overheads);
    // Room for micro-batch 4 accumulated on one GPU, not for 16 at once nor 8 accumulated.
    request.budget = w.predictRank(4, accumulating, false).predicted_peak_total_bytes + overheads.overheads.cuda_context_bytes;
    auto t = makeGpuFitTable(w, request);
    ASSERT_EQ(t.answers.size(), 1u);
    const auto& a = t.answers.front();
    std::printf("%s", gpuFitToText(t).c_str());
    EXPECT_EQ(t.global_batch, 16);
    EXPECT_EQ(a.fewest_gpus, 1);
    EXPECT_EQ(a.micro_batch, 4);
    EXPECT_EQ(a.grad_accum, 4);
    EXPECT_EQ(a.globalBatch(), 16);
    ASSERT_TRUE(a.at);
    EXPECT_TRUE(fitsWithin(*a.at, t.allocatorBudget(1)));
    ASSERT_EQ(a.largest.size(), 2u);
    EXPECT_EQ(a.largest[1].second, 0) << "3 GPUs do not share 16 samples evenly";
    // Two ranks with room for micro-batch 2 accumulated: 8 samples each, as 4 micro-steps of 2.
    auto two = planFor(request, "float32", Sharding::Fsdp, 2);
    auto twoAccumulating = two;
    twoAccumulating.grad_accum = 3;
    const auto room = w.predictRank(2, twoAccumulating, false).predicted_peak_total_bytes;
    auto reach = reachGlobalBatch(w, two, 16, room, false);
    EXPECT_EQ(reach.micro_batch, 2);
    EXPECT_EQ(reach.grad_accum, 4);
    ASSERT_TRUE(reach.at);
    EXPECT_LE(reach.at->predicted_peak_total_bytes, room);
    // With room for all 8 at once: one micro-step, no gradients kept between.
    const auto all = w.predictRank(8, two, false).predicted_peak_total_bytes;
    reach = reachGlobalBatch(w, two, 16, all, false);
    EXPECT_EQ(reach.micro_batch, 8);
    EXPECT_EQ(reach.grad_accum, 1);
    auto json = gpuFitToJson(t);
    EXPECT_EQ(json["global_batch"], 16);
    EXPECT_EQ(json["answers"][0]["grad_accum"], 4);
    EXPECT_EQ(json["answers"][0]["global_batch"], 16);
    EXPECT_EQ(gpuFitFromJson(json).answers.front().grad_accum, 4);
}

// The question the issue brought: a Llama-2-70B at sequence 4096, AdamW, bfloat16 mixed with FSDP on H100-80GB. Without
// checkpointing no GPU count up to 1024 fits; with each block checkpointed the fit names the fewest GPUs, and its
// rank at the truth's world size is within 2% of FSDPMemTracker's.
TEST_F(Fsdp, SeventyBFitsWithCheckpointing)
{
    const auto& truth = fsdpCheckpointTruth();
    SKIP_IF_TRUTH_IS_NOT_HERE(truth, true);
    const nlohmann::json* full = nullptr;
    for (const auto& c : truth["cases"])
        if (c["model"] == "70b" && c["checkpoint"] == "full")
            full = &c;
    ASSERT_TRUE(full);
    auto model = Model::open(fixture("fsdp/llama70b.pt2"));
    GpuFitRequest request;
    request.budget = *parseBudget("H100-80GB");
    request.budget_text = "H100-80GB";
    request.precisions = {"bfloat16-mixed"};
    request.shards = {Sharding::Fsdp};
    request.gpu_counts = {8, 16, 32, 64, 128, 256, 512, 1024};
    request.checkpoints = {parseCheckpointSpec("none"), parseCheckpointSpec("selective"), parseCheckpointSpec("full")};
    auto w = recordFitWhatIf(model, stepOptions("1x4096:int64", "float32"), request);
    auto t = makeGpuFitTable(w, request);
    ASSERT_EQ(t.answers.size(), 3u);
    std::printf("%s", gpuFitToText(t).c_str());
    const auto& none = t.answers[0];
    const auto& fullAnswer = t.answers[2];
    EXPECT_EQ(none.checkpoint, "none");
    EXPECT_EQ(none.fewest_gpus, 0); // the saved activations of 80 blocks at 4096 tokens alone exceed 80 GB
    ASSERT_TRUE(none.closest); // and the row says by how much
    EXPECT_GT(none.closest->predicted_peak_total_bytes, t.allocatorBudget(1024));
    EXPECT_EQ(fullAnswer.checkpoint, "full");
    ASSERT_GT(fullAnswer.fewest_gpus, 0);
    EXPECT_LE(fullAnswer.fewest_gpus, 64);
    EXPECT_GT(fullAnswer.recompute_share, 0.5);
    // The rank at the truth's world size and micro-batch 1, as the fit table lays it: within 2% of FSDPMemTracker.
    auto plan = planFor(request, "bfloat16-mixed", Sharding::Fsdp, (*full)["gpus"].get<int>());
    plan.root_reshard_after_forward = true; // the truth passes reshard_after_forward=True to the root too
    auto rank = w.withCheckpoint(parseCheckpointSpec("full")).predictRank(1, plan, false);
    const double theirs = static_cast<double>(category((*full)["peak"], "Total") - (*full)["step_tensor_bytes"].get<std::int64_t>());
    std::printf("[ fit      ] 70B, seq 4096, bfloat16 mixed FSDP, full checkpointing: %d GPUs, micro-batch %lld; on %d "
                "ranks memledger %s, FSDPMemTracker %s\n",
        fullAnswer.fewest_gpus, static_cast<long long>(fullAnswer.micro_batch), (*full)["gpus"].get<int>(),
        groupedBytes(rank.predicted_peak_total_bytes).c_str(), groupedBytes(static_cast<std::int64_t>(theirs)).c_str());
    EXPECT_NEAR(static_cast<double>(rank.predicted_peak_total_bytes), theirs, 0.02 * theirs);
    // JSON and HTML say the checkpoint of each row.
    auto j = gpuFitToJson(t);
    EXPECT_EQ(j["answers"][2]["checkpoint"], "full");
    EXPECT_TRUE(j["answers"][0].contains("closest"));
    EXPECT_EQ(gpuFitFromJson(j).answers[2].checkpoint, "full");
    EXPECT_NE(gpuFitToHtml(t, "llama70b.pt2").find("<td class=l>full, "), std::string::npos);
}

// A rank's "What would help" offers checkpointing each block, selective and full, with the rank's figures laid over the
// checkpointed step: the same peak total as analyze --checkpoint of that rank (checked against FSDPMemTracker above).
TEST_F(Fsdp, RankRemediesOfferCheckpointing)
{
    const auto file = fixture("fsdp/toy.pt2");
    const std::string rank = std::string(MEMLEDGER_BINARY) + " analyze " + file
        + " --input 2x32:int64 --mode train --optimizer adamw --gpus 8 --shard fsdp --param-dtype bfloat16";
    auto withRemedies = runCommand(rank + " --remedies --json " + fixture("fsdp/rank-remedies.json"));
    ASSERT_EQ(withRemedies.exit_code, 0) << withRemedies.output;
    EXPECT_NE(withRemedies.output.find("Checkpoint each block (full)"), std::string::npos) << withRemedies.output;
    std::ifstream in(fixture("fsdp/rank-remedies.json"));
    auto j = nlohmann::json::parse(in);
    auto full = runCommand(rank + " --checkpoint full --json " + fixture("fsdp/rank-full.json"));
    ASSERT_EQ(full.exit_code, 0) << full.output;
    std::ifstream fin(fixture("fsdp/rank-full.json"));
    const auto fullTotal = nlohmann::json::parse(fin)["peak_total_bytes"].get<std::int64_t>();
    bool found = false;
    for (const auto& m : j.value("remedies", nlohmann::json::array()))
        if (m.value("title", std::string()) == "Checkpoint each block (full)") {
            found = true;
            EXPECT_EQ(m.value("peak_total_after_bytes", std::int64_t {0}), fullTotal);
            EXPECT_LT(m.value("peak_total_after_bytes", std::int64_t {0}), j["peak_total_bytes"].get<std::int64_t>());
        }
    EXPECT_TRUE(found) << j.value("remedies", nlohmann::json::array()).dump();
}

const nlohmann::json& distTruth()
{
    static const nlohmann::json truth = test::readTruth("dist/dist_truth.json", "make_dist_fixtures");
    return truth;
}

// Real jobs on this machine: torchrun --nproc-per-node 2 and 4, gloo on the CPU, torch.profiler on each rank
// (tests/fixtures/dist_truths.py). DDP (gradient_as_bucket_view off and on) and ZeRO-1 (ZeroRedundancyOptimizer),
// in float32 and in bfloat16 mixed precision (torch.autocast over float32 weights): rank 0's weights and optimizer
// state exact, its peak total within 1%. The step is recorded on the CPU (under --autocast bfloat16 where mixed).
TEST(RealJobs, DdpAndZeroOneRanksAgreeWithTorchrun)
{
    if (torchBuildInfo().rfind("libtorch 1.", 0) == 0)
        GTEST_SKIP() << "this build's libtorch (" << torchBuildInfo() << ") runs no torch.export programs";
    SKIP_IF_TRUTH_IS_NOT_HERE(distTruth(), true);
    std::map<std::string, Report> steps;
    int checked = 0;
    std::vector<std::string> skipped; // cases whose strategy this torch lacks (a failed run fails below)
    for (const auto& c : distTruth()["cases"]) {
        const auto shard = c["shard"].get<std::string>();
        if (shard != "ddp" && shard != "zero1")
            continue;
        ASSERT_FALSE(c.contains("failed")) << c.dump(); // a job that failed or ran past its time: never fewer checks
        if (c.contains("skipped") || !c.contains("ranks") || c["ranks"].empty()) {
            skipped.push_back(c.value("skipped", std::string("no ranks")));
            continue;
        }
        const auto& truth = c["ranks"][0];
        const bool view = c["gradient_as_bucket_view"].is_boolean() && c["gradient_as_bucket_view"].get<bool>();
        const auto precision = c.value("param_dtype", std::string("float32")); // "bfloat16-mixed": autocast
        const int micro = c.value("micro_steps", 1);
        const auto name = c["model"].get<std::string>() + " " + c["input"].get<std::string>() + " " + shard + " on "
            + std::to_string(c["nproc"].get<int>()) + (view ? ", bucket view" : "")
            + (isMixedPrecision(precision) ? ", " + autocastDtypeOf(precision) + " mixed" : "")
            + (micro > 1 ? ", " + std::to_string(micro) + " micro-steps" : "");
        SCOPED_TRACE(name);
        const auto file = fixture("dist/" + c["file"].get<std::string>());
        // The accumulating loop deletes each micro-step's logits and loss after its backward (--hold-output backward).
        const auto key = file + " " + precision + (micro > 1 ? " backward" : "");
        if (!steps.count(key)) {
            auto model = Model::open(file);
            auto o = stepOptions(c["input"].get<std::string>(), masterDtypeOf(precision));
            o.autocast = autocastDtypeOf(precision);
            o.device = "cpu";
            if (micro > 1)
                o.hold_output = "backward";
            steps[key] = analyzeModel(model, o);
        }
        ParallelPlan plan;
        plan.gpus = c["nproc"].get<int>();
        plan.shard = *shardingFromName(shard);
        plan.gradient_as_bucket_view = view;
        plan.autocast = autocastDtypeOf(precision);
        plan.grad_accum = micro;
        auto rank = rankReport(steps[key], plan);
        EXPECT_EQ(rank.model.parameter_bytes, truth["weight_bytes"].get<std::int64_t>());
        EXPECT_EQ(rank.optimizer_state_bytes, truth["optimizer_state_bytes"].get<std::int64_t>());
        const double theirs = static_cast<double>(truth["peak_total_bytes"].get<std::int64_t>() - truth["step_tensor_bytes"].get<std::int64_t>());
        const double ours = static_cast<double>(rank.peak_total_bytes);
        std::printf("[ torchrun ] %-40s memledger %12s profiler %12s (%+.2f%%)\n", name.c_str(),
            groupedBytes(rank.peak_total_bytes).c_str(), groupedBytes(static_cast<std::int64_t>(theirs)).c_str(),
            100.0 * (ours - theirs) / theirs);
        EXPECT_NEAR(ours, theirs, 0.01 * theirs);
        char pct[32];
        std::snprintf(pct, sizeof pct, "%+.2f%%", 100.0 * (ours - theirs) / theirs);
        test::docTableRow("distributed.md", "torchrun",
            {name, groupedBytes(static_cast<std::int64_t>(theirs)), groupedBytes(rank.peak_total_bytes), pct},
            {{"dist_truth " + name + " rank 0 peak total", rank.peak_total_bytes, static_cast<std::int64_t>(theirs), 0.01}},
            false);
        ++checked;
    }
    if (checked == 0)
        GTEST_SKIP() << "no DDP or ZeRO-1 job ran here: " << (skipped.empty() ? std::string("none listed") : skipped.front());
    EXPECT_GE(checked + static_cast<int>(skipped.size()), 4);
}

// Real FSDP2 jobs on this machine (torchrun --nproc-per-node 2 and 4, gloo on the CPU; tests/fixtures/dist_truths.py),
// laid out with --backend gloo: gloo's all-gather makes a flat buffer of its output's size in the calling thread and
// frees it before returning, and its reduce-scatter clones its input until FSDP's post-backward hook waits. Its
// worker threads also make a flat buffer for each all-gather, freed when the collective completes: whether that
// lands on the step's peak depends on thread timing, so the iterations' peaks lie at and above the step without
// it (the truth records five iterations per rank, up to a third apart). What memledger gives is that step. Checked:
// never more than 1% above the job's lowest iteration over its ranks, and below it by no more than one worker
// buffer (the largest unit's all-gather, when every recorded iteration caught one); the table shows how close it
// is (most cases are equal to the lowest, all within 0.6% when first measured). Rank 0's shards and AdamW state
// exact.
TEST(RealJobs, FsdpRanksOnGlooAgreeWithTheJobsLowestIteration)
{
    if (torchBuildInfo().rfind("libtorch 1.", 0) == 0)
        GTEST_SKIP() << "this build's libtorch (" << torchBuildInfo() << ") runs no torch.export programs";
    SKIP_IF_TRUTH_IS_NOT_HERE(distTruth(), true);
    std::map<std::string, Report> steps;
    int checked = 0;
    std::vector<std::string> skipped;
    for (const auto& c : distTruth()["cases"]) {
        if (c["shard"].get<std::string>() != "fsdp")
            continue;
        ASSERT_FALSE(c.contains("failed")) << c.dump(); // a job that failed or ran past its time: never fewer checks
        if (c.contains("skipped") || !c.contains("ranks") || c["ranks"].empty()) {
            skipped.push_back(c.value("skipped", std::string("no ranks")));
            continue;
        }
        const auto dtypes = c.value("param_dtype", std::string("float32")); // "float32/bfloat16": param/reduce
        const auto slash = dtypes.find('/');
        const auto pd = dtypes.substr(0, slash);
        const int micro = c.value("micro_steps", 1);
        const auto name = c["model"].get<std::string>() + " " + c["input"].get<std::string>() + " fsdp on "
            + std::to_string(c["nproc"].get<int>()) + ", " + dtypes
            + (micro > 1 ? ", " + std::to_string(micro) + " micro-steps" : "");
        SCOPED_TRACE(name);
        ASSERT_TRUE(c["ranks"][0].contains("peak_bytes_later")); // several iterations
        const auto file = fixture("dist/" + c["file"].get<std::string>());
        const auto key = file + " " + pd + (micro > 1 ? " backward" : "");
        if (!steps.count(key)) {
            auto model = Model::open(file);
            auto o = stepOptions(c["input"].get<std::string>(), pd);
            o.device = "cpu";
            if (micro > 1)
                o.hold_output = "backward"; // the accumulating loop deletes each micro-step's logits after its backward
            steps[key] = analyzeModel(model, o);
        }
        ParallelPlan plan;
        plan.gpus = c["nproc"].get<int>();
        plan.shard = Sharding::Fsdp;
        plan.master_dtype = "float32";
        plan.param_dtype = pd;
        plan.reduce_dtype = slash == std::string::npos ? std::string() : dtypes.substr(slash + 1);
        plan.backend = "gloo";
        plan.grad_accum = micro;
        auto rank = rankReport(steps[key], plan);
        const auto& rank0 = c["ranks"][0];
        EXPECT_EQ(rank.optimizer_state_bytes, rank0["optimizer_state_bytes"].get<std::int64_t>());
        EXPECT_EQ(rank.model.parameter_bytes, rank0["weight_storage_bytes"].get<std::int64_t>());
        std::int64_t lowest = std::numeric_limits<std::int64_t>::max(), highest = 0;
        for (const auto& r : c["ranks"]) {
            const auto resident = r["resident_bytes"].get<std::int64_t>() - r["step_tensor_bytes"].get<std::int64_t>();
            std::vector<std::int64_t> peaks {r["peak_bytes"].get<std::int64_t>()};
            for (const auto& later : r.value("peak_bytes_later", nlohmann::json::array()))
                peaks.push_back(later.get<std::int64_t>());
            for (auto p : peaks) {
                lowest = std::min(lowest, resident + p);
                highest = std::max(highest, resident + p);
            }
        }
        const double theirs = static_cast<double>(lowest), ours = static_cast<double>(rank.peak_total_bytes);
        std::printf("[ torchrun ] %-40s memledger %12s lowest iteration %12s (%+.2f%%), highest %12s\n", name.c_str(),
            groupedBytes(rank.peak_total_bytes).c_str(), groupedBytes(lowest).c_str(), 100.0 * (ours - theirs) / theirs,
            groupedBytes(highest).c_str());
        // The worker's flat buffer: the largest unit's parameters gathered in param_dtype (float32 bytes in the truth).
        std::int64_t unit = 0;
        const auto units = c.value("fsdp_unit_bytes", nlohmann::json::object());
        for (const auto& [path, bytes] : units.items())
            unit = std::max(unit, bytes.get<std::int64_t>());
        ASSERT_GT(unit, 0);
        const double worker = static_cast<double>(unit) * dtypeSize(pd) / 4.0;
        EXPECT_LE(ours, theirs * 1.01);
        EXPECT_GE(ours, theirs - worker - 0.01 * theirs);
        char pct[32], spread[32];
        std::snprintf(pct, sizeof pct, "%+.2f%%", 100.0 * (ours - theirs) / theirs);
        std::snprintf(spread, sizeof spread, "+%.1f%%", 100.0 * static_cast<double>(highest - lowest) / theirs);
        test::docTableRow("distributed.md", "torchrun-fsdp",
            {name, groupedBytes(lowest), groupedBytes(highest) + " (" + spread + ")", groupedBytes(rank.peak_total_bytes), pct},
            {{"dist_truth " + name + " lowest iteration's peak total", rank.peak_total_bytes, lowest,
                0.01 + worker / theirs}},
            false);
        ++checked;
    }
    if (checked == 0)
        GTEST_SKIP() << "no FSDP job ran here: " << (skipped.empty() ? std::string("none listed") : skipped.front());
    EXPECT_GE(checked + static_cast<int>(skipped.size()), 4);
}

// The fit table on the 7B (FSDP's fixture, exported on meta at 1x4096, batch 1..16): "Llama-2-7B-shaped, seq 4096,
// AdamW, bfloat16 mixed, 80 GB: how many GPUs, which micro-batch". Each answer is the first GPU count whose rank
// fits at the smallest micro-batch; its micro-batch fits and the next does not (or is past the program's range);
// the rank figures are the what-if's own; the JSON reads back; the HTML and the CLI say the same.
TEST_F(Fsdp, FitTableAnswersTheSevenBQuestion)
{
    auto model = Model::open(fixture("fsdp/llama7b.pt2"));
    GpuFitRequest request;
    request.budget = *parseBudget("H100-80GB");
    request.budget_text = "H100-80GB";
    // bfloat16-fsdp (FSDP's param_dtype, each unit's inputs cast: the bfloat16 records, nothing being cast),
    // bfloat16-mixed (autocast on meta, for DDP and ZeRO-1), bfloat16 (pure), float32
    EXPECT_EQ(recordedPrecisionsFor(request.precisions, request.shards),
        (std::vector<std::string> {"bfloat16-fsdp", "bfloat16-mixed", "bfloat16", "float32"}));
    auto base = stepOptions("1x4096:int64", "float32");
    // As `memledger fit` records it: micro-batch 2, 4 and 8, and past an answer beyond them.
    auto w = recordFitWhatIf(model, base, request);
    auto t = makeGpuFitTable(w, request);
    ASSERT_EQ(t.answers.size(), 12u);
    // The file was saved by torch.export.save alone: the table (the CLI's, the window's, the HTML's) says what its
    // lifetimes cannot see.
    EXPECT_TRUE(std::any_of(t.notes.begin(), t.notes.end(),
        [](const std::string& n) { return n.find("not saved by memledger.export") != std::string::npos; }));
    for (const auto& a : t.answers) {
        SCOPED_TRACE(a.precision + " " + a.shard);
        EXPECT_TRUE(a.not_modelled.empty()) << a.not_modelled; // DDP and ZeRO-1 in mixed precision too
        ASSERT_EQ(a.largest.size(), t.gpu_counts.size());
        for (const auto& [n, b] : a.largest) {
            auto plan = planFor(request, a.precision, *shardingFromName(a.shard), n);
            const auto budget = t.allocatorBudget(n);
            if (b > 0) {
                EXPECT_TRUE(fitsWithin(w.predictRank(b, plan, true, budget), budget)) << n << " GPUs, batch " << b;
                EXPECT_TRUE(t.runnable.contains(b));
                EXPECT_FALSE(a.extrapolated(b)) << n << " GPUs, batch " << b << ", last record " << a.last_record;
            }
            if (b + 1 <= t.runnable.max)
                EXPECT_FALSE(fitsWithin(w.predictRank(b + 1, plan, true, budget), budget)) << n << " GPUs, batch " << b + 1;
            if (a.fewest_gpus > 0 && n < a.fewest_gpus)
                EXPECT_EQ(b, 0) << n << " GPUs";
        }
        if (a.fewest_gpus > 0) {
            ASSERT_TRUE(a.at);
            EXPECT_EQ(a.at->gpus, a.fewest_gpus);
            EXPECT_EQ(a.at->batch, a.micro_batch);
        }
    }
    // The question users bring: bfloat16 mixed with FSDP on H100s.
    const auto& mixed = t.answers.front();
    EXPECT_EQ(mixed.precision, "bfloat16-mixed");
    EXPECT_EQ(mixed.shard, "fsdp");
    EXPECT_GT(mixed.fewest_gpus, 1); // 7B's float32 masters, gradients and AdamW state: 100 GiB before activations
    EXPECT_GE(mixed.micro_batch, 1);
    std::printf("[ fit      ] 7B, seq 4096, AdamW, bfloat16 mixed, FSDP, H100-80GB: %d GPUs, micro-batch %lld\n",
        mixed.fewest_gpus, static_cast<long long>(mixed.micro_batch));
    auto back = gpuFitFromJson(gpuFitToJson(t));
    ASSERT_EQ(back.answers.size(), t.answers.size());
    EXPECT_EQ(back.answers.front().fewest_gpus, mixed.fewest_gpus);
    EXPECT_EQ(back.answers.front().micro_batch, mixed.micro_batch);
    auto html = gpuFitToHtml(t, "llama7b.pt2");
    EXPECT_NE(html.find("<td class=fit>" + std::to_string(mixed.fewest_gpus) + "</td><td class=fit>"
                  + std::to_string(mixed.micro_batch) + "</td>"),
        std::string::npos);
    // The command line gives the same answer.
    auto cli = runCommand(std::string(MEMLEDGER_BINARY) + " fit " + fixture("fsdp/llama7b.pt2")
        + " --input 1x4096:int64 --budget H100-80GB --precision bfloat16-mixed --shard fsdp --json "
        + fixture("fsdp/fit-7b.json"));
    ASSERT_EQ(cli.exit_code, 0) << cli.output;
    std::ifstream in(fixture("fsdp/fit-7b.json"));
    auto j = nlohmann::json::parse(in);
    EXPECT_EQ(j["answers"][0]["fewest_gpus"], mixed.fewest_gpus);
    EXPECT_EQ(j["answers"][0]["micro_batch"], mixed.micro_batch);
    // Its sequence what-if too: the longest sequence at the fewest GPUs is the program's own cap, and says so.
    EXPECT_EQ(j["answers"][0].value("longest_seq", 0), 4096);
    EXPECT_NE(cli.output.find("is the longest the program accepts"), std::string::npos) << cli.output;
}

// A GPU job's rank laid over a step recorded on the CPU: the CPU kernels' scratch in it (oneDNN's in bfloat16,
// which depends on the CPU's instructions) is named with its bytes at the rank's peak; a meta run, which has none,
// and a gloo job, whose kernels are the CPU's, say nothing of it.
TEST(ParallelNotes, ACpuRecordedRankNamesItsKernelScratch)
{
    if (torchBuildInfo().rfind("libtorch 1.", 0) == 0)
        GTEST_SKIP() << "this build's libtorch (" << torchBuildInfo() << ") runs no torch.export programs";
    const std::string base = std::string(MEMLEDGER_BINARY) + " analyze " + fixture("lm/gpt_sdpa.pt2")
        + " --input 2x32:int64 --mode train --optimizer adamw --gpus 4 --shard fsdp --param-dtype bfloat16";
    auto scratchNote = [](const nlohmann::json& j) -> std::string {
        for (const auto& n : j["notes"])
            if (n.get<std::string>().find("the CPU kernels' scratch") != std::string::npos)
                return n.get<std::string>();
        return {};
    };
    auto json = [](const std::string& path) {
        std::ifstream in(path);
        return nlohmann::json::parse(in);
    };
    auto cpu = runCommand(base + " --json " + fixture("fsdp/scratch-cpu.json"));
    ASSERT_EQ(cpu.exit_code, 0) << cpu.output;
    auto c = json(fixture("fsdp/scratch-cpu.json"));
    ASSERT_EQ(c["run"]["device"], "cpu");
    const auto scratch = c["ledgers"]["temporaries"]["at_peak"].get<std::int64_t>();
    if (scratch > 0) {
        EXPECT_NE(scratchNote(c).find("holds " + formatBytes(scratch) + " of the CPU kernels' scratch"),
            std::string::npos) << scratchNote(c);
        EXPECT_NE(cpu.output.find("--device meta leaves kernel scratch out"), std::string::npos) << cpu.output;
    } else {
        EXPECT_EQ(scratchNote(c), "");
    }
    for (const char* other : {" --device meta", " --backend gloo"}) {
        auto r = runCommand(base + other + " --json " + fixture("fsdp/scratch-other.json"));
        ASSERT_EQ(r.exit_code, 0) << other << "\n" << r.output;
        EXPECT_EQ(scratchNote(json(fixture("fsdp/scratch-other.json"))), "") << other;
    }
}

// FSDP2 shards dim 0 padded to whole rows: the mixture of experts' [4, ...] weights on 8 ranks cost rank 0 a row
// each (its shards equal FSDPMemTracker's, RankAgreesWithFsdpMemTracker); the rank's report and the fit table say
// so with the parameters and what it costs over an even split, and a model whose dim 0s all exceed the ranks, or a
// GPU count no larger than the experts, says nothing.
TEST_F(Fsdp, ShortRowsPaddedToWholeRowsAreSaid)
{
    if (!fsdpTruth()["models"].contains("moe"))
        GTEST_SKIP() << "the truths' torch has no torch._grouped_mm";
    auto model = Model::open(fixture("fsdp/moe.pt2"));
    auto step = analyzeModel(model, stepOptions("2x32:int64", "float32"));
    auto noteOf = [](const Report& r) -> std::string {
        for (const auto& n : r.notes)
            if (n.find("fewer rows in dim 0") != std::string::npos)
                return n;
        return {};
    };
    ParallelPlan plan;
    plan.shard = Sharding::Fsdp;
    plan.master_dtype = "float32";
    plan.gpus = 8;
    auto rank = rankReport(step, plan);
    const auto note = noteOf(rank);
    // 3 layers' gate_up_proj [4, 128, 512] and down_proj [4, 256, 128], and their routers' [4, 128] weights
    EXPECT_NE(note.find("9 parameters"), std::string::npos) << note;
    EXPECT_NE(note.find("layers.0.experts.gate_up_proj, 4)"), std::string::npos) << note;
    // rank 0 holds one of each parameter's four rows, where an even split gives it half a row
    const std::int64_t over = 3 * (4 * 128 * 512 + 4 * 256 * 128 + 4 * 128) / 8;
    EXPECT_NE(note.find(formatBytes(over * 4) + " more than an even split"), std::string::npos) << note;
    plan.gpus = 4;
    EXPECT_EQ(noteOf(rankReport(step, plan)), "");
    EXPECT_EQ(fsdpPaddingNote(Model::open(fixture("fsdp/toy.pt2")).info(), 64, "float32"), "");
    auto fit = runCommand(std::string(MEMLEDGER_BINARY) + " fit " + fixture("fsdp/moe.pt2")
        + " --input 2x32:int64 --budget 80GB --precision float32 --shard fsdp --gpus 1,2,4,8,16");
    ASSERT_EQ(fit.exit_code, 0) << fit.output;
    EXPECT_NE(fit.output.find("fsdp and zero2 on 8 GPUs (and more): 9 parameters"), std::string::npos) << fit.output;
}

// whatif --gpus --shard: one row per micro-batch x strategy x GPU count, rank 0's figures, fits monotone.
TEST_F(Fsdp, WhatIfRowsPerRank)
{
    auto r = runCommand(std::string(MEMLEDGER_BINARY) + " whatif " + fixture("fsdp/toy.pt2")
        + " --input 2x32:int64 --mode train --optimizer adamw --gpus 1,8 --shard fsdp,ddp --precision float32"
          " --batch 2,8,64 --budget 2GiB --json " + fixture("fsdp/whatif-ranks.json"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ifstream in(fixture("fsdp/whatif-ranks.json"));
    auto j = nlohmann::json::parse(in);
    ASSERT_EQ(j["predictions"].size(), 12u); // 2 strategies x 2 GPU counts x 3 batches
    std::map<std::string, std::int64_t> fsdpWeights;
    for (const auto& p : j["predictions"]) {
        EXPECT_TRUE(p.contains("gpus"));
        if (p["shard"] == "fsdp")
            fsdpWeights[std::to_string(p["gpus"].get<int>())] = p["weight_bytes"].get<std::int64_t>();
    }
    EXPECT_LT(fsdpWeights["8"], fsdpWeights["1"]);
    // Rank 0 of 4: the same figures as analyze --gpus 4 --shard fsdp.
    auto a = runCommand(std::string(MEMLEDGER_BINARY) + " analyze " + fixture("fsdp/toy.pt2")
        + " --input 2x32:int64 --mode train --optimizer adamw --gpus 4 --shard fsdp --json " + fixture("fsdp/rank4.json"));
    ASSERT_EQ(a.exit_code, 0) << a.output;
    std::ifstream rin(fixture("fsdp/rank4.json"));
    auto rank = nlohmann::json::parse(rin);
    EXPECT_EQ(rank["run"]["parallel"]["gpus"], 4);
    EXPECT_EQ(rank["run"]["parallel"]["shard"], "fsdp");
    EXPECT_GT(rank["ledgers"]["gathered_parameters"]["total"].get<std::int64_t>(), 0);
    EXPECT_GT(rank["ledgers"]["communication"]["total"].get<std::int64_t>(), 0);
    EXPECT_NE(a.output.find("one rank of 4 GPUs, fsdp"), std::string::npos) << a.output;
    EXPECT_EQ(rank["run"]["parallel"]["backend"], "nccl");
    // --backend gloo: the same rank with gloo's own buffers (RealJobs checks them against torchrun), said as such.
    auto g = runCommand(std::string(MEMLEDGER_BINARY) + " analyze " + fixture("fsdp/toy.pt2")
        + " --input 2x32:int64 --mode train --optimizer adamw --gpus 4 --shard fsdp --backend gloo --json "
        + fixture("fsdp/rank4-gloo.json"));
    ASSERT_EQ(g.exit_code, 0) << g.output;
    EXPECT_NE(g.output.find("gloo's collectives"), std::string::npos) << g.output;
    std::ifstream gin(fixture("fsdp/rank4-gloo.json"));
    auto gloo = nlohmann::json::parse(gin);
    EXPECT_EQ(gloo["run"]["parallel"]["backend"], "gloo");
    EXPECT_GT(gloo["ledgers"]["communication"]["total"].get<std::int64_t>(),
        rank["ledgers"]["communication"]["total"].get<std::int64_t>());
    EXPECT_EQ(runCommand(std::string(MEMLEDGER_BINARY) + " analyze " + fixture("fsdp/toy.pt2")
                  + " --gpus 4 --shard fsdp --backend mpi").exit_code, 2);
    int rootChecked = 0;
    // --reshard-root-after-forward: fully_shard(model, reshard_after_forward=True), as the truth wraps the root;
    // the CLI's rank is then FSDPMemTracker's within 2% (the default keeps the root gathered, and differs).
    for (const auto& c : fsdpTruth()["cases"]) {
        if (c["model"] != "toy" || c["gpus"] != 8 || c["param_dtype"] != "float32" || c["reduce_dtype"].is_string()
            || !c["reshard_after_forward"].get<bool>() || c["input"] != "2x32:int64")
            continue;
        auto root = runCommand(std::string(MEMLEDGER_BINARY) + " analyze " + fixture("fsdp/toy.pt2")
            + " --input 2x32:int64 --mode train --optimizer adamw --gpus 8 --shard fsdp --reshard-root-after-forward"
              " --json " + fixture("fsdp/rank8-root.json") + " --html " + fixture("fsdp/rank8-root.html"));
        ASSERT_EQ(root.exit_code, 0) << root.output;
        EXPECT_NE(root.output.find("resharded after forward, the root too"), std::string::npos) << root.output;
        std::ifstream htmlIn(fixture("fsdp/rank8-root.html"));
        const std::string html((std::istreambuf_iterator<char>(htmlIn)), std::istreambuf_iterator<char>());
        EXPECT_NE(html.find("units, parameters gathered in float32, gradients reduced in float32, resharded after "
                            "forward, the root too; master weights"),
            std::string::npos);
        std::ifstream rootIn(fixture("fsdp/rank8-root.json"));
        auto rootJson = nlohmann::json::parse(rootIn);
        EXPECT_TRUE(rootJson["run"]["parallel"]["root_reshard_after_forward"].get<bool>());
        const double theirs = static_cast<double>(category(c["peak"], "Total") - c["step_tensor_bytes"].get<std::int64_t>());
        EXPECT_NEAR(rootJson["peak_total_bytes"].get<double>(), theirs, 0.02 * theirs);
        ++rootChecked;
    }
    EXPECT_EQ(rootChecked, 1);
    EXPECT_EQ(runCommand(std::string(MEMLEDGER_BINARY) + " analyze " + fixture("fsdp/toy.pt2")
                  + " --gpus 4 --shard fsdp --reshard-root-after-forward --no-reshard-after-forward").exit_code, 2);
    auto zero2Root = runCommand(std::string(MEMLEDGER_BINARY) + " analyze " + fixture("fsdp/toy.pt2")
        + " --gpus 4 --shard zero2 --reshard-root-after-forward");
    EXPECT_EQ(zero2Root.exit_code, 2) << zero2Root.output;
    EXPECT_NE(zero2Root.output.find("--reshard-root-after-forward is fsdp's"), std::string::npos) << zero2Root.output;
    // A sharded job is a training step: --mode may be left out (the step is recorded), not set to inference;
    // a unit the model lacks is named.
    auto bad = runCommand(std::string(MEMLEDGER_BINARY) + " analyze " + fixture("fsdp/toy.pt2") + " --mode inference --gpus 4");
    EXPECT_EQ(bad.exit_code, 2) << bad.output;
    auto unit = runCommand(std::string(MEMLEDGER_BINARY) + " analyze " + fixture("fsdp/toy.pt2")
        + " --input 2x32:int64 --gpus 4 --shard fsdp --shard-units blocks.*");
    EXPECT_EQ(unit.exit_code, 2) << unit.output;
    EXPECT_NE(unit.output.find("has no module 'blocks.*'"), std::string::npos) << unit.output;
    auto implied = runCommand(std::string(MEMLEDGER_BINARY) + " analyze " + fixture("fsdp/toy.pt2")
        + " --input 2x32:int64 --gpus 2 --shard zero1");
    EXPECT_EQ(implied.exit_code, 0) << implied.output;
    EXPECT_NE(implied.output.find("one rank of 2 GPUs, zero1"), std::string::npos) << implied.output;
}

// FSDP in mixed precision is laid over a record of the step in param_dtype with each unit's floating-point inputs
// cast to it (FSDP2's cast_forward_inputs): the what-if's rows of a model that hands its blocks a float32 tensor
// (MPT's ALiBi bias) are analyze --gpus's rank and FSDPMemTracker's, not those of the job without the cast; a model
// whose blocks are given nothing to cast reuses its pure record (no records made twice).
TEST_F(Fsdp, MixedPrecisionRowsCastEachUnitsInputs)
{
    // `whatif` rows of one rank at batch 2 in these precisions, `analyze`'s rank in bfloat16 beside them.
    struct Answers {
        std::string output; // whatif's
        nlohmann::json rows, rank;
    };
    auto answers = [](const std::string& args, const std::string& precisions, const std::string& stem) {
        Answers out;
        auto w = runCommand(std::string(MEMLEDGER_BINARY) + " whatif " + args + " --precision " + precisions
            + " --batch 2 --json " + fixture("fsdp/" + stem + "-rows.json"));
        EXPECT_EQ(w.exit_code, 0) << w.output;
        out.output = w.output;
        auto a = runCommand(std::string(MEMLEDGER_BINARY) + " analyze " + args + " --param-dtype bfloat16 --json "
            + fixture("fsdp/" + stem + "-rank.json"));
        EXPECT_EQ(a.exit_code, 0) << a.output;
        std::ifstream rows(fixture("fsdp/" + stem + "-rows.json")), rank(fixture("fsdp/" + stem + "-rank.json"));
        out.rows = nlohmann::json::parse(rows, nullptr, false)["predictions"];
        out.rank = nlohmann::json::parse(rank, nullptr, false);
        return out;
    };
    int checked = 0;
    for (const auto& c : fsdpTruth()["cases"]) {
        if (c["model"] != "alibi" || c["gpus"] != 8 || c["param_dtype"] != "bfloat16" || c["reshard_after_forward"].get<bool>())
            continue;
        auto alibi = answers(fixture("fsdp/alibi.pt2") + " --input 2x32:int64 --mode train --optimizer adamw --gpus 8 --shard zero2",
            "bfloat16-mixed", "alibi");
        EXPECT_NE(alibi.output.find("what-if record 1 in bfloat16-fsdp at batch 2"), std::string::npos) << alibi.output;
        ASSERT_EQ(alibi.rows.size(), 1u);
        const auto ours = alibi.rows[0]["predicted_peak_total_bytes"].get<std::int64_t>();
        EXPECT_EQ(ours, alibi.rank["peak_total_bytes"].get<std::int64_t>());
        const double theirs = c["peak"]["Total"].get<double>() - c["step_tensor_bytes"].get<double>();
        const double off = c["peak_total_cast_forward_inputs_off"].get<double>() - c["step_tensor_bytes"].get<double>();
        ASSERT_GT(std::abs(off - theirs), 0.005 * theirs) << "the cast no longer moves this case's peak";
        EXPECT_LT(std::abs(static_cast<double>(ours) - theirs), std::abs(off - theirs) / 4)
            << "ours " << ours << ", FSDPMemTracker " << theirs << ", without the cast " << off;
        ++checked;
    }
    EXPECT_EQ(checked, 1);
    // toy's blocks are handed the hidden states and the rotary table, already in bfloat16: one run tells, and the
    // bfloat16 records serve, so the rows equal analyze's rank.
    auto toy = answers(fixture("fsdp/toy.pt2") + " --input 2x32:int64 --mode train --optimizer adamw --gpus 8 --shard fsdp",
        "bfloat16-mixed,bfloat16", "toy");
    EXPECT_EQ(toy.output.find("in bfloat16-fsdp at batch"), std::string::npos) << toy.output;
    ASSERT_EQ(toy.rows.size(), 2u);
    EXPECT_EQ(toy.rows[0]["dtype"], "bfloat16-mixed");
    EXPECT_EQ(toy.rows[0]["predicted_peak_total_bytes"].get<std::int64_t>(), toy.rank["peak_total_bytes"].get<std::int64_t>());
}

// The editor keeps the recorded events, places new ones before a position, gives an alloc without a free one,
// and carries the ops' and phases' ranges over.
TEST(TraceEdit, PlacesEventsAndCarriesRanges)
{
    Trace t;
    auto a = t.push(0, 100, 0x10, Action::Alloc, -1);
    auto b = t.push(1, 50, 0x20, Action::Alloc, -1);
    auto fa = t.push(2, 100, 0x10, Action::Free, -1);
    t.partner[a] = static_cast<std::int32_t>(fa);
    t.partner[fa] = static_cast<std::int32_t>(a);
    t.push(3, 10, 0x30, Action::Alloc, -1);
    std::vector<OpCall> ops(2);
    ops[0].first_event = 0;
    ops[0].end_event = 2;
    ops[1].first_event = 2;
    ops[1].end_event = 4;
    std::vector<Phase> phases(2);
    phases[0].name = "forward";
    phases[0].first_event = 0;
    phases[0].end_event = 2;
    phases[1].name = "backward";
    phases[1].first_event = 2;
    phases[1].end_event = 4;

    TraceEdit e(t);
    auto g = e.addAlloc(0, 1000, Ledger::GatheredParameters, "layers.0", "fsdp::unshard");
    e.addFree(2, g); // before the free of a: ends the forward
    e.addFree(4, b); // b had no free
    e.resize(a, 200);
    auto out = e.build(&ops, &phases);
    ASSERT_EQ(out.size(), 7u);
    EXPECT_EQ(out.action[0], Action::Alloc);
    EXPECT_EQ(out.bytes[0], 1000);
    EXPECT_EQ(out.ledger[0], Ledger::GatheredParameters);
    EXPECT_EQ(out.strings.at(out.where[0]), "layers.0");
    EXPECT_EQ(out.bytes[1], 200); // a, resized, and its free
    EXPECT_EQ(out.bytes[4], 200);
    EXPECT_EQ(out.action[3], Action::Free); // g's free, before a's
    EXPECT_EQ(out.partner[3], 0);
    EXPECT_EQ(out.partner[0], 3);
    EXPECT_EQ(out.action[6], Action::Free); // b's new free, at the end
    EXPECT_EQ(out.partner[6], 2);
    EXPECT_EQ(out.address[6], out.address[2]);
    auto live = liveBytesAfterEachEvent(out);
    EXPECT_EQ(live.back(), 10);
    // Op 0 keeps a and b; op 1 starts at a's free. The forward takes g's alloc placed before its first event and
    // g's free placed before the backward's; the backward ends with b's free placed past the last event.
    EXPECT_EQ(ops[0].first_event, 1u);
    EXPECT_EQ(ops[0].end_event, 3u);
    EXPECT_EQ(ops[1].first_event, 4u);
    EXPECT_EQ(phases[0].first_event, 0u);
    EXPECT_EQ(phases[0].end_event, 4u);
    EXPECT_EQ(phases[1].first_event, 4u);
    EXPECT_EQ(phases[1].end_event, 7u);
}

// A layer tree from (path, type, weights) rows, parents first; each path's parent is the path up to its last dot.
std::vector<LayerStats> treeOf(const std::vector<std::tuple<std::string, std::string, std::int64_t>>& rows)
{
    std::vector<LayerStats> layers;
    for (const auto& [path, type, weights] : rows) {
        LayerStats l;
        l.path = path;
        l.type = type;
        l.weight_bytes = weights;
        if (!path.empty()) {
            auto dot = path.rfind('.');
            const auto parent = dot == std::string::npos ? std::string() : path.substr(0, dot);
            for (std::size_t k = 0; k < layers.size(); ++k)
                if (layers[k].path == parent) {
                    l.parent = static_cast<int>(k);
                    layers[k].children.push_back(static_cast<int>(layers.size()));
                }
        }
        layers.push_back(l);
    }
    return layers;
}

// The default units on held-out shapes: an encoder and a decoder list (the heavier list's blocks, not the two
// lists), an MoE (the blocks, not the experts), 2 blocks over 4 named Linears each.
TEST(ParallelPlan, DefaultUnitsAreTheHeaviestListsBlocks)
{
    auto encdec = treeOf({{"", "EncDec", 1100}, {"encoder", "ModuleList", 200}, {"encoder.0", "EncBlock", 100},
        {"encoder.1", "EncBlock", 100}, {"decoder", "ModuleList", 800}, {"decoder.0", "DecBlock", 200},
        {"decoder.1", "DecBlock", 200}, {"decoder.2", "DecBlock", 200}, {"decoder.3", "DecBlock", 200},
        {"out", "Linear", 100}});
    EXPECT_EQ(defaultShardUnits(encdec),
        (std::vector<std::string> {"decoder.0", "decoder.1", "decoder.2", "decoder.3", ""}));
    auto moe = treeOf({{"", "MoE", 1000}, {"blocks", "ModuleList", 900}, {"blocks.0", "Block", 450},
        {"blocks.0.experts", "ModuleList", 400}, {"blocks.0.experts.0", "MLP", 100}, {"blocks.0.experts.1", "MLP", 100},
        {"blocks.0.experts.2", "MLP", 100}, {"blocks.0.experts.3", "MLP", 100}, {"blocks.1", "Block", 450},
        {"head", "Linear", 100}});
    EXPECT_EQ(defaultShardUnits(moe), (std::vector<std::string> {"blocks.0", "blocks.1", ""}));
    auto two = treeOf({{"", "LM", 300}, {"layers", "ModuleList", 200}, {"layers.0", "Block", 100},
        {"layers.0.attn", "Attention", 40}, {"layers.0.attn.q", "Linear", 10}, {"layers.0.attn.k", "Linear", 10},
        {"layers.0.attn.v", "Linear", 10}, {"layers.0.attn.o", "Linear", 10}, {"layers.1", "Block", 100}});
    EXPECT_EQ(defaultShardUnits(two), (std::vector<std::string> {"layers.0", "layers.1", ""}));
    // No list at all: the heaviest set of named siblings.
    auto named = treeOf({{"", "Net", 30}, {"a", "Linear", 10}, {"b", "Linear", 10}, {"act", "ReLU", 0},
        {"act2", "ReLU", 0}, {"act3", "ReLU", 0}});
    EXPECT_EQ(defaultShardUnits(named), (std::vector<std::string> {"a", "b", ""}));
}

TEST(ParallelPlan, UnitsAndNames)
{
    std::vector<LayerStats> layers(7);
    layers[0].path = "";
    layers[0].children = {1, 6};
    layers[1].path = "layers";
    layers[1].type = "ModuleList";
    layers[1].children = {2, 4};
    layers[2].path = "layers.0";
    layers[2].type = "LlamaBlock";
    layers[2].children = {3};
    layers[3].path = "layers.0.mlp";
    layers[3].type = "Mlp";
    layers[4].path = "layers.1";
    layers[4].type = "LlamaBlock";
    layers[4].children = {5};
    layers[5].path = "layers.1.mlp";
    layers[5].type = "Mlp";
    layers[6].path = "norm";
    EXPECT_EQ(defaultShardUnits(layers), (std::vector<std::string> {"layers.0", "layers.1", ""}));
    EXPECT_EQ(shardUnitsMatching(layers, "layers.*, norm"), (std::vector<std::string> {"layers.0", "layers.1", "norm", ""}));
    // "*" stands for one module name anywhere in the path: each block's MLP a unit inside its block.
    EXPECT_EQ(shardUnitsMatching(layers, "layers.*.mlp,layers.*"),
        (std::vector<std::string> {"layers.0.mlp", "layers.1.mlp", "layers.0", "layers.1", ""}));
    EXPECT_EQ(shardUnitsMatching(layers, "layers.1.mlp"), (std::vector<std::string> {"layers.1.mlp", ""}));
    EXPECT_THROW(shardUnitsMatching(layers, "blocks.*"), std::invalid_argument);
    EXPECT_THROW(shardUnitsMatching(layers, "layers.*.attention"), std::invalid_argument);
    EXPECT_EQ(shardingFromName("zero1"), Sharding::Zero1);
    EXPECT_FALSE(shardingFromName("zero3"));
    EXPECT_TRUE(isInsideModule("layers.10.mlp", "layers.10"));
    EXPECT_FALSE(isInsideModule("layers.10.mlp", "layers.1"));
    EXPECT_TRUE(isInsideModule("norm", ""));
}

} // namespace

// analyze --gpus N --shard S --checkpoint auto --budget GPU: of none, selective and full on every K-th block, the
// least recompute whose rank fits the allocator's share of the budget; each policy of less recompute does not fit
// (each laid out again here as --checkpoint gives it), and the CLI answers the same.
TEST_F(Fsdp, CheckpointAutoChoosesTheLeastRecomputeThatFitsTheRank)
{
    const auto file = fixture("fsdp/toy.pt2");
    auto model = Model::open(file);
    auto options = stepOptions("16x256:int64", "float32");
    options.device = "meta";
    auto step = analyzeModel(model, options);
    ParallelPlan plan;
    plan.gpus = 4;
    plan.shard = Sharding::Fsdp;
    const auto full = rankReport(*predictCheckpoint(step, parseCheckpointSpec("full"), true).report, plan);
    const auto none = rankReport(step, plan);
    ASSERT_LT(full.peak_total_bytes, none.peak_total_bytes);
    GpuFitTable overheads;
    setOverheadEstimates(overheads);
    // Room for full checkpointing, not for the plain rank.
    const std::int64_t budget = overheads.overheads.cuda_context_bytes + overheads.overheads.nccl_bytes
        + std::max(full.peak_total_bytes, full.simulated_reserved_peak_bytes) + 4096;
    auto choice = chooseRankCheckpoint(step, plan, budget);
    ASSERT_TRUE(choice.fits);
    EXPECT_FALSE(choice.spec.none());
    const auto allocator = budget - overheads.overheads.cuda_context_bytes - overheads.overheads.nccl_bytes;
    EXPECT_EQ(choice.allocator_budget, allocator);
    auto chosen = rankReport(*predictCheckpoint(step, choice.spec, true).report, plan);
    EXPECT_EQ(chosen.peak_total_bytes, choice.rank.peak_total_bytes);
    EXPECT_LE(std::max(chosen.peak_total_bytes, chosen.simulated_reserved_peak_bytes), allocator);
    // Every policy of less recompute does not fit.
    for (const char* mode : {"selective", "full"})
        for (int every : {1, 2, 4}) {
            auto spec = parseCheckpointSpec(mode, every);
            auto p = predictCheckpoint(step, spec, false);
            if (p.recomputeShare() >= choice.recompute_share)
                continue;
            auto rank = rankReport(*predictCheckpoint(step, spec, true).report, plan);
            EXPECT_GT(std::max(rank.peak_total_bytes, rank.simulated_reserved_peak_bytes), allocator) << spec.text();
        }
    EXPECT_GT(std::max(none.peak_total_bytes, none.simulated_reserved_peak_bytes), allocator);
    EXPECT_NE(choice.rank.notes.front().find("the least recompute that fits is " + choice.spec.text()), std::string::npos)
        << choice.rank.notes.front();
    // The command line: the same choice and figures.
    auto cli = runCommand(std::string(MEMLEDGER_BINARY) + " analyze " + file + " --input 16x256:int64 --device meta --mode "
        "train --optimizer adamw --gpus 4 --shard fsdp --checkpoint auto --budget " + std::to_string(budget) + "B --json "
        + fixture("fsdp/rank-auto.json"));
    ASSERT_EQ(cli.exit_code, 0) << cli.output;
    std::ifstream in(fixture("fsdp/rank-auto.json"));
    auto j = nlohmann::json::parse(in);
    EXPECT_EQ(j["peak_total_bytes"].get<std::int64_t>(), choice.rank.peak_total_bytes);
    EXPECT_NE(cli.output.find("the least recompute that fits is " + choice.spec.text()), std::string::npos) << cli.output;
    // Not for fit or whatif --gpus (a column of none, selective and full there).
    auto refused = runCommand(std::string(MEMLEDGER_BINARY) + " fit " + file + " --input 2x32:int64 --budget 8GiB "
        "--checkpoint auto");
    EXPECT_NE(refused.exit_code, 0);
    EXPECT_NE(refused.output.find("--checkpoint auto plans"), std::string::npos) << refused.output;
}
