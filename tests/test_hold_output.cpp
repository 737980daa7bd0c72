// How long the training loop holds the model's output and the loss (--hold-output step|backward|none), against
// torch.profiler on a loop written each way (tests/fixtures/hold_output_truths.py: hold_output/truth.json).
#include "fixture_paths.h"
#include "recording/build_report.h"
#include "recording/model.h"
#include "run_command.h"
#include "support/format.h"
#include "whatif/accumulation.h"
#include "whatif/whatif.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <ostream>
#include <memory>
#include <string>
#include <tuple>

#include <unistd.h>

using namespace memledger;
using memledger::test::fixture;

namespace {

struct HoldCase {
    std::string model; // a key of truth.json's "models"
    std::string hold;
    int micro_steps = 1; // --grad-accum (truth.json's "accum")
};

void PrintTo(const HoldCase& c, std::ostream* os)
{
    *os << c.model << " --hold-output " << c.hold << " --grad-accum " << c.micro_steps;
}

const nlohmann::json& truthFile()
{
    static const nlohmann::json t = memledger::test::readTruth("hold_output/truth.json", "make_hold_output_truths");
    return t;
}

// What is alive at the end of the recorded step beyond weights, optimizer state and inputs: every allocation of
// the trace less every free (the frees of blocks allocated before it too, as the profiler's running sum has them).
std::int64_t endBytes(const Trace& t)
{
    std::int64_t live = 0;
    for (std::size_t i = 0; i < t.size(); ++i)
        live += t.action[i] == Action::Alloc ? t.bytes[i] : -t.bytes[i];
    return live;
}

class HoldOutput : public ::testing::TestWithParam<HoldCase> {
protected:
    void SetUp() override
    {
        const auto& all = truthFile();
        if (all.contains("skipped"))
            FAIL() << all["skipped"].get<std::string>();
        const auto& models = all["models"];
        ASSERT_TRUE(models.contains(GetParam().model)) << "hold_output/truth.json has no " << GetParam().model;
        entry = models[GetParam().model];
        if (entry.contains("skipped"))
            GTEST_SKIP() << GetParam().model << ": " << entry["skipped"].get<std::string>();
        const auto k = GetParam().micro_steps;
        truth = k == 1 ? entry["holds"][GetParam().hold] : entry["accum"][std::to_string(k)][GetParam().hold];
        ASSERT_FALSE(truth.is_null()) << "no truth for --hold-output " << GetParam().hold << " --grad-accum " << k;
        report = &recorded(GetParam(), entry);
    }

    static const Report& recorded(const HoldCase& c, const nlohmann::json& entry)
    {
        static std::map<std::string, std::shared_ptr<Model>> models;
        static std::map<std::tuple<std::string, std::string, int>, Report> reports;
        auto key = std::make_tuple(c.model, c.hold, c.micro_steps);
        if (auto it = reports.find(key); it != reports.end())
            return it->second;
        auto& model = models[c.model];
        if (!model)
            model = std::make_shared<Model>(Model::open(fixture(entry["file"].get<std::string>())));
        RunOptions o;
        o.mode = RunMode::Train;
        o.optimizer = "sgd";
        o.hold_output = c.hold;
        o.threads = 1; // as the truth script
        auto parsed = parseInputs(entry["input"].get<std::string>());
        o.inputs = parsed.shapes;
        o.input_types = parsed.types;
        return reports.emplace(key, accumulatedReport(analyzeModel(*model, o), c.micro_steps)).first->second;
    }

    nlohmann::json entry, truth;
    const Report* report = nullptr;
};

std::int64_t num(const nlohmann::json& j, const char* key)
{
    return j[key].get<std::int64_t>();
}

} // namespace

TEST_P(HoldOutput, TheReportNamesTheChoice)
{
    EXPECT_EQ(report->run.hold_output, GetParam().hold);
    EXPECT_EQ(report->run.loss, truth["loss"].get<std::string>());
}

TEST_P(HoldOutput, PeakWithinOnePercentOfTheProfilerOnALoopWrittenThatWay)
{
    auto expected = static_cast<double>(num(truth, "peak_bytes"));
    auto got = static_cast<double>(report->peak_bytes);
    EXPECT_LE(std::abs(got - expected), 0.01 * expected)
        << GetParam().model << " --hold-output " << GetParam().hold << ": memledger " << report->peak_bytes
        << " profiler " << num(truth, "peak_bytes");
    std::printf("[ peak     ] %s %s x%d: memledger %lld profiler %lld (%+.3f%%)\n", GetParam().model.c_str(),
        GetParam().hold.c_str(), GetParam().micro_steps, static_cast<long long>(report->peak_bytes),
        static_cast<long long>(num(truth, "peak_bytes")), (got - expected) / expected * 100.0);
}

TEST_P(HoldOutput, TheStepEndsWithWhatTheLoopStillHolds)
{
    ASSERT_TRUE(report->trace);
    auto expected = static_cast<double>(num(truth, "end_bytes"));
    auto got = static_cast<double>(endBytes(*report->trace));
    EXPECT_LE(std::abs(got - expected), 0.01 * expected)
        << GetParam().model << " --hold-output " << GetParam().hold << ": alive at the end, memledger " << got
        << " profiler " << expected;
}

TEST_P(HoldOutput, WhatTheLoopHoldsWhenTheStepBeginsIsThePreviousOutputAndLoss)
{
    // The allocations before the first op of the forward: the previous step's output and loss (step only).
    ASSERT_TRUE(report->trace && report->ops);
    const auto& t = *report->trace;
    const auto firstOp = report->ops->empty() ? t.size() : report->ops->front().first_event;
    std::int64_t held = 0;
    for (std::size_t i = 0; i < firstOp && i < t.size(); ++i)
        if (t.action[i] == Action::Alloc)
            held += t.bytes[i];
    EXPECT_EQ(held, num(truth, "held_bytes"));
    EXPECT_EQ(num(truth, "held_bytes"), num(truth, "held_storage_bytes")); // the profiler agrees with the storages
}

INSTANTIATE_TEST_SUITE_P(Loops, HoldOutput,
    ::testing::Values(HoldCase {"mnist_pt", "step"}, HoldCase {"mnist_pt", "backward"}, HoldCase {"mnist_pt", "none"},
        HoldCase {"gpt_pt", "step"}, HoldCase {"gpt_pt", "backward"}, HoldCase {"gpt_pt", "none"},
        HoldCase {"gpt_pt2", "step"}, HoldCase {"gpt_pt2", "backward"}, HoldCase {"gpt_pt2", "none"}),
    [](const ::testing::TestParamInfo<HoldCase>& info) { return info.param.model + "_" + info.param.hold; });

// Gradient accumulation (--grad-accum K): K forwards and backwards before the optimizer's step, the loop written
// each way, against the profiler over the whole step.
INSTANTIATE_TEST_SUITE_P(Accumulated, HoldOutput,
    ::testing::Values(HoldCase {"mnist_pt", "step", 2}, HoldCase {"mnist_pt", "backward", 4},
        HoldCase {"mnist_pt", "none", 4}, HoldCase {"gpt_pt", "step", 2}, HoldCase {"gpt_pt", "step", 4},
        HoldCase {"gpt_pt", "backward", 2}, HoldCase {"gpt_pt", "none", 4}, HoldCase {"gpt_pt2", "step", 4},
        HoldCase {"gpt_pt2", "backward", 4}),
    [](const ::testing::TestParamInfo<HoldCase>& info) {
        return info.param.model + "_" + info.param.hold + "_x" + std::to_string(info.param.micro_steps);
    });

// The what-if's accumulation stage (whatif --grad-accum K, the window's Micro-batches row): its one-device prediction at a
// recorded batch is the accumulated step's, against the profiler; the largest batch within a budget shrinks with it.
TEST(HoldOutputWhatIf, AnAccumulatedWhatIfPredictsTheAccumulatedStep)
{
    const auto& all = truthFile();
    if (all.contains("skipped"))
        GTEST_SKIP() << all["skipped"].get<std::string>();
    const auto& entry = all["models"]["mnist_pt"];
    auto model = Model::open(fixture(entry["file"].get<std::string>()));
    RunOptions o;
    o.mode = RunMode::Train;
    o.optimizer = "sgd";
    o.threads = 1;
    auto parsed = parseInputs(entry["input"].get<std::string>());
    o.inputs = parsed.shapes;
    o.input_types = parsed.types;
    auto w = WhatIf::record(model, o, std::vector<std::int64_t> {4, 8}, {"float32"});
    for (int k : {2, 4}) {
        SCOPED_TRACE(k);
        auto staged = w.withGradAccum(k);
        EXPECT_EQ(staged.gradAccum(), k);
        const auto expected = static_cast<double>(entry["accum"][std::to_string(k)]["step"]["peak_bytes"].get<std::int64_t>());
        const auto got = static_cast<double>(staged.predict(8, "float32", false).predicted_peak_bytes);
        EXPECT_NEAR(got, expected, 0.01 * expected);
        const auto accumulatedReport = staged.predictedReport(8, "float32");
        EXPECT_EQ(accumulatedReport.peak_bytes, static_cast<std::int64_t>(got));
        // The layer tree's columns are one micro-step's: the gradients kept and what one forward saves, not K times.
        const auto single = w.predictedReport(8, "float32");
        ASSERT_FALSE(accumulatedReport.layers.empty());
        EXPECT_EQ(accumulatedReport.layers[0].gradient_bytes, single.layers[0].gradient_bytes);
        EXPECT_EQ(accumulatedReport.layers[0].saved_activation_bytes, single.layers[0].saved_activation_bytes);
        EXPECT_EQ(accumulatedReport.layers[0].calls, single.layers[0].calls);
        EXPECT_GT(got, static_cast<double>(w.predict(8, "float32", false).predicted_peak_bytes));
        const auto budget = w.predict(64, "float32", false).predicted_peak_total_bytes;
        EXPECT_LE(staged.maxBatch("float32", budget, false), w.maxBatch("float32", budget, false));
        EXPECT_THROW(staged.withGradAccum(2), std::invalid_argument);
        EXPECT_THROW(staged.measure(model, 8, "float32"), std::invalid_argument);
    }
}

TEST(HoldOutputCli, TheDefaultIsStepAndTheJsonNamesTheChoice)
{
    const std::string model = fixture("mnist.pt");
    for (const char* hold : {"", "backward"}) {
        auto json = "/tmp/memledger-hold-output-" + std::to_string(::getpid()) + ".json";
        auto r = memledger::test::runCommand(memledger::test::memledgerBinary() + " analyze '" + model
            + "' --input 8x1x28x28 --mode train --threads 1 --json " + json
            + (*hold ? std::string(" --hold-output ") + hold : std::string()));
        ASSERT_EQ(r.exit_code, 0) << r.output;
        const std::string expected = *hold ? hold : "step";
        EXPECT_NE(r.output.find("output held to " + expected), std::string::npos) << r.output;
        std::ifstream in(json);
        auto j = nlohmann::json::parse(in);
        std::remove(json.c_str());
        EXPECT_EQ(j["run"].value("hold_output", ""), expected);
    }
}

// --grad-accum K on the command line: analyze (one device and a rank) says the micro-batches and the global batch in
// the text and the JSON, with the accumulated step's peak; whatif answers for the accumulated step.
TEST(HoldOutputCli, GradAccumIsAnsweredByAnalyzeAndWhatIf)
{
    const auto& all = truthFile();
    if (all.contains("skipped"))
        GTEST_SKIP() << all["skipped"].get<std::string>();
    const std::string model = fixture("mnist.pt");
    const auto json = "/tmp/memledger-grad-accum-" + std::to_string(::getpid()) + ".json";
    auto readJson = [&] {
        std::ifstream in(json);
        auto j = nlohmann::json::parse(in);
        std::remove(json.c_str());
        return j;
    };
    auto r = memledger::test::runCommand(memledger::test::memledgerBinary() + " analyze '" + model
        + "' --input 8x1x28x28 --mode train --threads 1 --grad-accum 4 --json " + json);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("gradient accumulation: 4 micro-batches of 8 per optimizer step, global batch 32"),
        std::string::npos) << r.output;
    auto j = readJson();
    EXPECT_EQ(j["run"]["grad_accum"], 4);
    EXPECT_EQ(j["run"]["global_batch"], 32);
    const auto truth = static_cast<double>(
        all["models"]["mnist_pt"]["accum"]["4"]["step"]["peak_bytes"].get<std::int64_t>());
    EXPECT_NEAR(j["peak_bytes"].get<double>(), truth, 0.01 * truth);

    r = memledger::test::runCommand(memledger::test::memledgerBinary() + " analyze '" + model
        + "' --input 8x1x28x28 --threads 1 --gpus 2 --shard ddp --grad-accum 2 --json " + json);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("global batch 32 over 2 ranks"), std::string::npos) << r.output;
    j = readJson();
    EXPECT_EQ(j["run"]["global_batch"], 32);

    r = memledger::test::runCommand(memledger::test::memledgerBinary() + " whatif '" + model
        + "' --input 8x1x28x28 --mode train --threads 1 --batch 8 --dtype float32 --grad-accum 4 --json " + json);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("gradients accumulated over 4 micro-batches"), std::string::npos) << r.output;
    j = readJson();
    bool seen = false;
    for (const auto& p : j["predictions"])
        if (p["batch"] == 8 && p["dtype"] == "float32") {
            EXPECT_NEAR(p["predicted_peak_bytes"].get<double>(), truth, 0.01 * truth) << p.dump();
            seen = true;
        }
    EXPECT_TRUE(seen) << j.dump();
}

TEST(HoldOutputCli, AnUnknownChoiceIsAUsageError)
{
    auto r = memledger::test::runCommand(memledger::test::memledgerBinary() + " analyze '" + fixture("mnist.pt")
        + "' --mode train --hold-output forever");
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("--hold-output 'forever' is not step, backward or none"), std::string::npos) << r.output;
}
