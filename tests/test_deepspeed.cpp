// DeepSpeed's ZeRO stages (--shard ds-zero1|ds-zero2|ds-zero3, whatif/deepspeed.cpp) against DeepSpeed's own figures:
// its model-state estimators (tests/fixtures/deepspeed_truths.py: estimate_zero2_model_states_mem_needs and
// estimate_zero3_model_states_mem_needs on the parameter counts of the fsdp fixtures' toy decoder and Llama-2-7B
// shape). A rank's weights, gradients and optimizer state equal them to the byte: ZeRO-2's 2 bytes a parameter plus
// 18 over N (16-bit parameters; a 16-bit gradient partition, its float32 copy in the step, the float32 master
// partition and Adam's two moments), ZeRO-3's 18 over N with grad_accum_dtype float32 plus the largest module's
// gathered parameters and gradients (4 bytes an element of it), and with offload_optimizer / offload_param what
// stays on the device; the host's pinned memory per node, times DeepSpeed's additional_buffer_factor 1.5, equals
// theirs where theirs is the step's (ZeRO-3 with zero.Init; ZeRO-2 up to 4 GPUs: beyond, theirs is the load-time
// figure, each process's float32 copy of the model). docs/distributed.md's table deepspeed-estimators is written
// from these cases.
// Skipped, with the reason, where deepspeed cannot be imported or the build's libtorch has no meta runs (1.13).
#include "doc_table.h"
#include "truth_file.h"
#include "recording/build_report.h"
#include "recording/model.h"
#include "report/report_summary.h"
#include "run_command.h"
#include "support/format.h"
#include "exports/gpu_fit_export.h"
#include "whatif/gpu_fit.h"
#include "whatif/parallel.h"
#include "whatif/whatif.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <map>
#include <string>

using namespace memledger;
using memledger::test::fixture;
using memledger::test::groupedBytes;

namespace {

const nlohmann::json& deepSpeedTruth()
{
    static const nlohmann::json truth = test::readTruth("deepspeed/deepspeed_truth.json", "make_deepspeed_fixtures");
    return truth;
}

Report recordStep(const std::string& file, const std::string& input, const std::string& device)
{
    RunOptions o;
    auto parsed = parseInputs(input);
    o.inputs = parsed.shapes;
    o.input_types = parsed.types;
    o.threads = 1;
    o.mode = RunMode::Train;
    o.optimizer = "adamw";
    o.dtype = "bfloat16"; // DeepSpeed's bf16: the engine casts the model
    o.device = device;
    auto model = Model::open(file);
    return analyzeModel(model, o);
}

RankLayout layOut(const Report& step, const ParallelPlan& plan)
{
    return layOutRank(step.model, step.layers, *step.trace, *step.ops, step.phases, step.run, step.optimizer_state_bytes, plan);
}

// The bytes of `ledger` alive at their most within the optimizer phase (the step's gradient partitions).
std::int64_t liveInOptimizer(const RankLayout& r, Ledger ledger)
{
    const Phase* opt = findPhase(r.phases, "optimizer");
    std::int64_t live = 0, most = 0;
    const auto& t = r.trace;
    for (std::size_t i = 0; i < t.size(); ++i) {
        if (t.ledger[i] == ledger && t.action[i] == Action::Alloc)
            live += t.bytes[i];
        else if (t.ledger[i] == ledger && t.action[i] == Action::Free && t.partner[i] != kNoPartner)
            live -= t.bytes[i];
        if (opt && i >= opt->first_event && i < opt->end_event)
            most = std::max(most, live);
    }
    return most;
}

std::int64_t largestAlloc(const RankLayout& r, Ledger ledger)
{
    std::int64_t most = 0;
    for (std::size_t i = 0; i < r.trace.size(); ++i)
        if (r.trace.ledger[i] == ledger && r.trace.action[i] == Action::Alloc)
            most = std::max(most, r.trace.bytes[i]);
    return most;
}

class DeepSpeed : public ::testing::Test {
protected:
    void SetUp() override
    {
        if (torchBuildInfo().rfind("libtorch 1.", 0) == 0)
            GTEST_SKIP() << "this build's libtorch (" << torchBuildInfo() << ") has no meta runs";
        SKIP_IF_TRUTH_IS_NOT_HERE(deepSpeedTruth(), true);
    }
};

} // namespace

TEST_F(DeepSpeed, ModelStatesMatchItsOwnEstimators)
{
    const auto& truth = deepSpeedTruth();
    ASSERT_TRUE(truth.contains("cases"));
    std::map<std::string, Report> steps;
    int checked = 0;
    for (const auto& c : truth["cases"]) {
        const auto name = c["model"].get<std::string>();
        const int n = c["gpus"].get<int>(), perNode = c["gpus_per_node"].get<int>(), nodes = c["nodes"].get<int>();
        const std::string caseName = name + " on " + std::to_string(n) + " (" + std::to_string(nodes) + "x" + std::to_string(perNode) + ")";
        SCOPED_TRACE(caseName);
        if (!steps.count(name))
            steps[name] = name == "7b" ? recordStep(fixture("fsdp/" + c["file"].get<std::string>()), "1x128:int64", "meta")
                                       : recordStep(fixture("fsdp/" + c["file"].get<std::string>()), "2x32:int64", "meta");
        const auto& step = steps[name];
        const auto P = c["total_params"].get<std::int64_t>(), L = c["largest_layer_params"].get<std::int64_t>();
        ParallelPlan base;
        base.gpus = n;
        base.gpus_per_node = perNode;
        base.master_dtype = "float32";
        base.param_dtype = "bfloat16";
        const double factor = truth["additional_buffer_factor"].get<double>();
        auto hostPerNode = [&](const RankLayout& r) {
            return static_cast<std::int64_t>(static_cast<double>((r.info.host_bytes - r.host_scratch_bytes) * r.info.gpus_per_node) * factor);
        };
        auto row = [&](const std::string& config, std::int64_t theirsGpu, std::int64_t oursGpu, std::int64_t theirsCpu,
                       std::int64_t oursCpu, bool hostChecked) {
            std::vector<test::PyTorchFigure> figures {{"deepspeed " + caseName + " " + config + " GPU", oursGpu, theirsGpu, 0}};
            if (hostChecked)
                figures.push_back({"deepspeed " + caseName + " " + config + " host", oursCpu, theirsCpu, 0});
            test::docTableRow("distributed.md", "deepspeed-estimators",
                {caseName + ", " + config, groupedBytes(theirsGpu), groupedBytes(oursGpu), groupedBytes(theirsCpu),
                    oursCpu > 0 ? groupedBytes(oursCpu) : std::string("-"), hostChecked ? "the step's" : "load time (theirs)"},
                figures);
        };

        // ZeRO-2: 16-bit parameters whole, the 16-bit gradient partition and its float32 copy in the step, the
        // float32 master partition and Adam's moments.
        auto plan = base;
        plan.shard = Sharding::DsZero2;
        auto r = layOut(step, plan);
        EXPECT_EQ(r.parameter_bytes, 2 * P);
        const auto zero2 = r.parameter_bytes + r.optimizer_state_bytes + liveInOptimizer(r, Ledger::Gradients);
        EXPECT_EQ(zero2, c["zero2"]["gpu"].get<std::int64_t>());
        EXPECT_EQ(r.info.host_bytes, 0);
        row("ZeRO-2", c["zero2"]["gpu"].get<std::int64_t>(), zero2, c["zero2"]["cpu"].get<std::int64_t>(), 0, false);

        // ZeRO-Offload: the 16-bit parameters stay; master, moments and a float32 gradient partition on the host.
        plan.offload = "optimizer";
        r = layOut(step, plan);
        EXPECT_EQ(r.parameter_bytes + r.optimizer_state_bytes + liveInOptimizer(r, Ledger::Gradients),
            c["zero2_offload"]["gpu"].get<std::int64_t>());
        const bool stepHost = nodes == 1 && perNode <= 4; // max(4 x GPUs, 16): the step's 16 bytes a parameter
        if (stepHost)
            EXPECT_EQ(hostPerNode(r), c["zero2_offload"]["cpu"].get<std::int64_t>());
        else
            EXPECT_LT(hostPerNode(r), c["zero2_offload"]["cpu"].get<std::int64_t>());
        row("ZeRO-2, offload_optimizer", c["zero2_offload"]["gpu"].get<std::int64_t>(), r.parameter_bytes,
            c["zero2_offload"]["cpu"].get<std::int64_t>(), hostPerNode(r), stepHost);

        // ZeRO-3, every parameter partitioned (stage3_param_persistence_threshold 0), gradients accumulated in float32.
        plan = base;
        plan.shard = Sharding::DsZero3;
        plan.deepspeed.param_persistence_threshold = 0;
        plan.deepspeed.grad_accum_dtype = "float32";
        r = layOut(step, plan);
        const auto largestMemory = c["zero3"]["largest_layer_memory"].get<std::int64_t>();
        EXPECT_EQ(largestMemory, 4 * L);
        // Their 4 bytes an element of the largest module: its parameters gathered (2L), then its 16-bit gradients.
        EXPECT_EQ(largestAlloc(r, Ledger::GatheredParameters), 2 * L);
        const auto zero3 = r.parameter_bytes + r.optimizer_state_bytes + r.gradient_bytes + largestMemory;
        EXPECT_EQ(zero3, c["zero3"]["gpu"].get<std::int64_t>());
        row("ZeRO-3", c["zero3"]["gpu"].get<std::int64_t>(), zero3, c["zero3"]["cpu"].get<std::int64_t>(), 0, false);

        plan.offload = "optimizer";
        r = layOut(step, plan);
        const auto zero3Optimizer = r.parameter_bytes + r.optimizer_state_bytes + r.gradient_bytes + largestMemory;
        EXPECT_EQ(zero3Optimizer, c["zero3_offload_optimizer"]["gpu"].get<std::int64_t>());
        EXPECT_EQ(hostPerNode(r), c["zero3_offload_optimizer"]["cpu"].get<std::int64_t>());
        row("ZeRO-3, offload_optimizer", c["zero3_offload_optimizer"]["gpu"].get<std::int64_t>(), zero3Optimizer,
            c["zero3_offload_optimizer"]["cpu"].get<std::int64_t>(), hostPerNode(r), true);

        plan.offload = "params";
        r = layOut(step, plan);
        const auto zero3Params = r.parameter_bytes + r.optimizer_state_bytes + r.gradient_bytes + largestMemory;
        EXPECT_EQ(zero3Params, c["zero3_offload_params"]["gpu"].get<std::int64_t>());
        EXPECT_EQ(hostPerNode(r), c["zero3_offload_params"]["cpu"].get<std::int64_t>());
        row("ZeRO-3, offload_optimizer + offload_param", c["zero3_offload_params"]["gpu"].get<std::int64_t>(), zero3Params,
            c["zero3_offload_params"]["cpu"].get<std::int64_t>(), hostPerNode(r), true);
        ++checked;
    }
    EXPECT_EQ(checked, static_cast<int>(truth["cases"].size()));
}

// The command line: a rank of each stage in the JSON (run.parallel), --ds-config read into the flags it stands for,
// the refusals named, and fit answering for DeepSpeed's stages with the optimizer offloaded.
TEST_F(DeepSpeed, CommandLineLaysOutEachStageAndReadsTheJobsConfig)
{
    const auto model = fixture("fsdp/toy.pt2");
    const std::string rank = memledger::test::memledgerBinary() + " analyze " + model
        + " --input 2x32:int64 --mode train --optimizer adamw --device meta --gpus 8 --param-dtype bfloat16";
    const auto step = recordStep(model, "2x32:int64", "meta");
    for (const char* shard : {"ds-zero1", "ds-zero2", "ds-zero3"}) {
        SCOPED_TRACE(shard);
        const auto out = fixture(std::string("deepspeed/rank-") + shard + ".json");
        auto r = memledger::test::runCommand(rank + " --shard " + shard + " --json " + out);
        ASSERT_EQ(r.exit_code, 0) << r.output;
        std::ifstream in(out);
        auto j = nlohmann::json::parse(in);
        EXPECT_EQ(j["run"]["parallel"]["shard"], shard);
        // The CLI's rank is the layout's.
        ParallelPlan plan;
        plan.gpus = 8;
        plan.shard = *shardingFromName(shard);
        plan.master_dtype = "float32";
        plan.param_dtype = "bfloat16";
        auto report = rankReport(step, plan);
        EXPECT_EQ(j["weight_bytes"].get<std::int64_t>(), report.weight_bytes);
        EXPECT_EQ(j["optimizer_state_bytes"].get<std::int64_t>(), report.optimizer_state_bytes);
        EXPECT_EQ(j["peak_total_bytes"].get<std::int64_t>(), report.peak_total_bytes);
        EXPECT_NE(r.output.find("DeepSpeed's ZeRO stage"), std::string::npos) << r.output;
    }
    // The job's configuration: stage 3, bf16, the optimizer offloaded, two micro-steps, a persistence threshold.
    const auto config = fixture("deepspeed/ds_config.json");
    std::ofstream(config) << R"({"bf16": {"enabled": true}, "zero_optimization": {"stage": 3, "offload_optimizer":
        {"device": "cpu"}, "reduce_bucket_size": "auto", "stage3_param_persistence_threshold": 1e3},
        "gradient_accumulation_steps": 2})";
    const std::string base = memledger::test::memledgerBinary() + " analyze " + model
        + " --input 2x32:int64 --mode train --optimizer adamw --device meta --gpus 8";
    auto r = memledger::test::runCommand(base + " --ds-config " + config + " --json " + fixture("deepspeed/rank-config.json"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("reduce_bucket_size is \"auto\""), std::string::npos) << r.output;
    {
        std::ifstream in(fixture("deepspeed/rank-config.json"));
        auto j = nlohmann::json::parse(in);
        EXPECT_EQ(j["run"]["parallel"]["shard"], "ds-zero3");
        EXPECT_EQ(j["run"]["parallel"]["offload"], "optimizer");
        EXPECT_EQ(j["run"]["grad_accum"], 2);
        EXPECT_EQ(j["optimizer_state_bytes"], 0);
        ParallelPlan plan;
        plan.gpus = 8;
        plan.shard = Sharding::DsZero3;
        plan.master_dtype = "float32";
        plan.param_dtype = "bfloat16";
        plan.offload = "optimizer";
        plan.grad_accum = 2;
        plan.deepspeed.param_persistence_threshold = 1000;
        auto report = rankReport(step, plan);
        EXPECT_EQ(j["run"]["parallel"]["host_bytes"].get<std::int64_t>(), report.run.parallel->host_bytes);
        EXPECT_EQ(j["peak_total_bytes"].get<std::int64_t>(), report.peak_total_bytes);
    }
    // What is not modelled, or contradicts the file, is refused with the file and the key named.
    std::ofstream(config) << R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}})";
    r = memledger::test::runCommand(base + " --ds-config " + config);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find(config + ": zero_optimization.offload_param.device \"nvme\""), std::string::npos) << r.output;
    std::ofstream(config) << R"({"zero_optimization": {"stage": 2}})";
    r = memledger::test::runCommand(base + " --shard fsdp --ds-config " + config);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("is ds-zero2, not --shard fsdp"), std::string::npos) << r.output;
    std::ofstream(config) << "{not json";
    r = memledger::test::runCommand(base + " --ds-config " + config);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find(config + ": not JSON"), std::string::npos) << r.output;
    r = memledger::test::runCommand(rank + " --shard fsdp --offload optimizer");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("--offload optimizer is DeepSpeed's ZeRO-Offload"), std::string::npos) << r.output;
    r = memledger::test::runCommand(rank + " --shard ds-zero2 --offload params");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("--offload params is"), std::string::npos) << r.output;
    // fit answers for DeepSpeed's stages, the optimizer offloaded, the host per node given.
    r = memledger::test::runCommand(memledger::test::memledgerBinary() + " fit " + model
        + " --input 2x32:int64 --device meta --budget 8GiB --gpus 1,8 --precision bfloat16-mixed --shard ds-zero2,ds-zero3"
          " --offload optimizer --json " + fixture("deepspeed/fit.json"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ifstream in(fixture("deepspeed/fit.json"));
    auto j = nlohmann::json::parse(in);
    ASSERT_EQ(j["answers"].size(), 2u);
    for (const auto& a : j["answers"]) {
        EXPECT_EQ(a.value("not_modelled", std::string()), "") << a.dump();
        EXPECT_EQ(a["fewest_gpus"], 1) << a.dump();
    }
}

// The fit table's offload: an axis (each strategy answered with each offload it has, the others no row), and where
// nothing fits without offload and none was asked for, the strategy's own offload offered as a further answer; the
// JSON, the text and the HTML carry it.
TEST_F(DeepSpeed, FitOffersOffloadWhereNothingElseFits)
{
    auto model = Model::open(fixture("fsdp/toy.pt2"));
    RunOptions o;
    auto parsed = parseInputs("2x32:int64");
    o.inputs = parsed.shapes;
    o.input_types = parsed.types;
    o.threads = 1;
    o.mode = RunMode::Train;
    o.optimizer = "adamw";
    o.device = "meta";
    auto w = WhatIf::record(model, o, std::vector<std::int64_t> {1, 2}, {"float32"});
    GpuFitRequest request;
    request.precisions = {"float32"};
    request.shards = {Sharding::Fsdp};
    request.gpu_counts = {1};
    request.with_reserved = false;
    GpuFitTable overheads;
    setOverheadEstimates(overheads);
    auto plain = planFor(request, "float32", Sharding::Fsdp, 1);
    auto offloaded = plain;
    offloaded.offload = "params";
    const auto without = w.predictRank(1, plain, false).predicted_peak_total_bytes;
    const auto with = w.predictRank(1, offloaded, false).predicted_peak_total_bytes;
    ASSERT_LT(with, without);
    // Room for the offloaded rank at micro-batch 1, not for the plain one.
    request.budget = overheads.overheads.cuda_context_bytes + (with + without) / 2;
    auto t = makeGpuFitTable(w, request);
    std::printf("%s", gpuFitToText(t).c_str());
    ASSERT_EQ(t.answers.size(), 2u);
    EXPECT_EQ(t.answers[0].offload, "");
    EXPECT_EQ(t.answers[0].fewest_gpus, 0);
    EXPECT_EQ(t.answers[1].offload, "params");
    EXPECT_EQ(t.answers[1].fewest_gpus, 1);
    ASSERT_TRUE(t.answers[1].at);
    EXPECT_EQ(t.answers[1].at->predicted_peak_total_bytes, w.predictRank(t.answers[1].micro_batch, offloaded, false).predicted_peak_total_bytes);
    EXPECT_TRUE(std::any_of(t.notes.begin(), t.notes.end(),
        [](const std::string& n) { return n.find("offered where nothing fits without it") != std::string::npos; }));
    EXPECT_NE(gpuFitToText(t).find("fsdp, offload params"), std::string::npos);
    EXPECT_NE(gpuFitToHtml(t, "toy").find("<th>host per node</th>"), std::string::npos);
    auto back = gpuFitFromJson(gpuFitToJson(t));
    ASSERT_EQ(back.answers.size(), 2u);
    EXPECT_EQ(back.answers[1].offload, "params");
    // Asked for as an axis: each strategy with the offloads it has (fsdp: none, params; ds-zero2: none, optimizer).
    request.offloads = {"", "optimizer", "params"};
    request.shards = {Sharding::Fsdp, Sharding::DsZero2};
    request.precisions = {"float32"};
    request.budget = *parseBudget("80GB");
    t = makeGpuFitTable(w, request);
    std::vector<std::string> rows;
    for (const auto& a : t.answers)
        rows.push_back(a.strategyText());
    EXPECT_EQ(rows, (std::vector<std::string> {"fsdp", "fsdp, offload params", "ds-zero2", "ds-zero2, offload optimizer"}));
    for (const auto& a : t.answers)
        EXPECT_EQ(a.not_modelled, "") << a.strategyText();
}
