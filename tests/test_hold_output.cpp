// How long the training loop holds the model's output and the loss (--hold-output step|backward|none), against
// torch.profiler on a loop written each way (tests/fixtures/hold_output_truths.py: hold_output/truth.json).
#include "fixture_paths.h"
#include "recording/build_report.h"
#include "recording/model.h"
#include "run_command.h"
#include "support/format.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <ostream>
#include <memory>
#include <string>

#include <unistd.h>

using namespace memledger;
using memledger::test::fixture;

namespace {

struct HoldCase {
    std::string model; // a key of truth.json's "models"
    std::string hold;
};

void PrintTo(const HoldCase& c, std::ostream* os)
{
    *os << c.model << " --hold-output " << c.hold;
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
        truth = entry["holds"][GetParam().hold];
        ASSERT_FALSE(truth.is_null()) << "no truth for --hold-output " << GetParam().hold;
        report = &recorded(GetParam(), entry);
    }

    static const Report& recorded(const HoldCase& c, const nlohmann::json& entry)
    {
        static std::map<std::string, std::shared_ptr<Model>> models;
        static std::map<std::pair<std::string, std::string>, Report> reports;
        auto key = std::make_pair(c.model, c.hold);
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
        return reports.emplace(key, analyzeModel(*model, o)).first->second;
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
    std::printf("[ peak     ] %s %s: memledger %lld profiler %lld (%+.3f%%)\n", GetParam().model.c_str(),
        GetParam().hold.c_str(), static_cast<long long>(report->peak_bytes),
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

TEST(HoldOutputCli, AnUnknownChoiceIsAUsageError)
{
    auto r = memledger::test::runCommand(memledger::test::memledgerBinary() + " analyze '" + fixture("mnist.pt")
        + "' --mode train --hold-output forever");
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("--hold-output 'forever' is not step, backward or none"), std::string::npos) << r.output;
}
