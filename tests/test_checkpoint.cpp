// The checkpointing what-if against PyTorch itself: tests/fixtures/checkpoint_truth.py runs eager models with
// torch.utils.checkpoint.checkpoint(..., use_reentrant=True/False) around the named modules and writes the peak of
// the training step (torch.profiler's [memory] events); memledger predicts it from the recorded step of the scripted
// model without any checkpoint.
#include "fixture_paths.h"
#include "recording/model.h"
#include "exports/report_json.h"
#include "recording/build_report.h"
#include "run_command.h"
#include "support/format.h"
#include "whatif/checkpoint.h"
#include "exports/checkpoint_export.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <map>
#include <string>

using namespace memledger;
using memledger::test::fixture;

namespace {

std::string dir() { return fixture("checkpoint"); }

nlohmann::json truth()
{
    std::ifstream in(dir() + "/checkpoint_truth.json");
    return nlohmann::json::parse(in);
}

// One plain step recorded per model, shared by the tests.
const Report& recorded(const std::string& name)
{
    static std::map<std::string, Report> cache;
    auto it = cache.find(name);
    if (it != cache.end())
        return it->second;
    auto t = truth()[name];
    auto model = Model::open(dir() + "/" + t["file"].get<std::string>());
    RunOptions o;
    o.mode = RunMode::Train;
    o.optimizer = "sgd";
    o.inputs = parseShapes(t["input"].get<std::string>());
    return cache.emplace(name, analyzeModel(model, o)).first->second;
}

std::string join(const std::vector<std::string>& v)
{
    std::string s;
    for (const auto& x : v)
        s += (s.empty() ? "" : ",") + x;
    return s;
}

double errorPercent(std::int64_t predicted, std::int64_t truth)
{
    return 100.0 * static_cast<double>(predicted - truth) / static_cast<double>(truth);
}

class CheckpointTruth : public ::testing::TestWithParam<std::string> {};

TEST_P(CheckpointTruth, EveryCaseWithinOnePercent)
{
    const auto name = GetParam();
    auto t = truth()[name];
    const auto& r = recorded(name);
    // The plain step first: the prediction starts from it.
    ASSERT_LE(std::abs(errorPercent(r.peak_bytes, t["plain_peak_bytes"].get<std::int64_t>())), 1.0)
        << name << ": the recorded plain step differs from PyTorch's";
    int compared = 0;
    for (const auto& c : t["cases"]) {
        auto paths = c["checkpoint"].get<std::vector<std::string>>();
        auto impl = checkpointImplFromName(c["impl"].get<std::string>());
        ASSERT_TRUE(impl);
        auto p = predictCheckpoint(r, paths, *impl, false);
        auto real = c["peak_bytes"].get<std::int64_t>();
        auto err = errorPercent(p.predicted_peak_bytes, real);
        std::printf("%-16s %-36s %-14s truth %12lld predicted %12lld error %+.2f%%%s\n", name.c_str(),
            join(paths).c_str(), checkpointImplName(*impl), static_cast<long long>(real),
            static_cast<long long>(p.predicted_peak_bytes), err, p.checkpoint.size() < paths.size() ? " (left out)" : "");
        if (p.checkpoint.size() < paths.size()) {
            // A module whose input does not require grad: reentrant checkpointing would drop its gradients, which
            // memledger says instead of predicting a different training.
            EXPECT_EQ(*impl, CheckpointImpl::Reentrant) << join(paths);
            bool said = false;
            for (const auto& n : p.notes)
                said = said || n.find("requires_grad") != std::string::npos;
            EXPECT_TRUE(said) << join(paths);
            continue;
        }
        EXPECT_LE(std::abs(err), 1.0) << name << " " << join(paths) << " " << checkpointImplName(*impl);
        EXPECT_EQ(p.worse(), real > t["plain_peak_bytes"].get<std::int64_t>()) << join(paths);
        ++compared;
    }
    EXPECT_GE(compared, 3);
}

INSTANTIATE_TEST_SUITE_P(Models, CheckpointTruth,
    ::testing::Values("ckpt_mnist", "ckpt_resnet18", "ckpt_mobilenet", "ckpt_nested"));

// The MNIST CNN of demo:mnist-train.pt (conv1 1->32, conv2 32->64, fc1, fc2) at batch 64: checkpointing conv2 makes
// the peak worse (22.6 MB without, 25.8 MB with), and memledger says so plainly.
TEST(Checkpoint, MnistCnnWithConv2CheckpointedIsWorse)
{
    auto t = truth()["ckpt_mnist"];
    const auto& r = recorded("ckpt_mnist");
    std::int64_t real = 0;
    for (const auto& c : t["cases"])
        if (c["checkpoint"] == nlohmann::json::array({"conv2"}) && c["impl"] == "reentrant")
            real = c["peak_bytes"];
    ASSERT_GT(real, t["plain_peak_bytes"].get<std::int64_t>()) << "PyTorch itself: conv2 makes it worse";
    auto p = predictCheckpoint(r, {"conv2"}, CheckpointImpl::Reentrant);
    EXPECT_TRUE(p.worse());
    EXPECT_LT(p.saving_bytes, 0);
    EXPECT_LE(std::abs(errorPercent(p.predicted_peak_bytes, real)), 1.0);
    EXPECT_NE(checkpointToText(p).find("WORSE"), std::string::npos);
    auto j = checkpointToJson(p);
    EXPECT_TRUE(j["worse"].get<bool>());
    for (const char* k : {"checkpoint", "predicted_peak_bytes", "predicted_peak_total_bytes", "predicted_reserved_bytes",
             "recompute_ms"})
        EXPECT_TRUE(j.contains(k)) << k;
    EXPECT_GT(p.predicted_reserved_bytes, 0);
    EXPECT_GT(p.recompute_ms, 0.0);
    EXPECT_EQ(p.predicted_peak_total_bytes - p.predicted_peak_bytes, r.peak_total_bytes - r.peak_bytes);
}

// A saved report keeps what the prediction needs: reopened, it predicts the same step.
TEST(Checkpoint, SavedReportPredictsTheSame)
{
    const auto& r = recorded("ckpt_nested");
    auto again = reportFromJson(nlohmann::json::parse(reportToJson(r).dump()), "saved.json");
    for (auto impl : {CheckpointImpl::Reentrant, CheckpointImpl::NonReentrant}) {
        auto a = predictCheckpoint(r, {"body.inner"}, impl, false);
        auto b = predictCheckpoint(again, {"body.inner"}, impl, false);
        EXPECT_EQ(a.predicted_peak_bytes, b.predicted_peak_bytes);
        EXPECT_DOUBLE_EQ(a.recompute_ms, b.recompute_ms);
    }
}

TEST(Checkpoint, RefusesWhatItCannotPredict)
{
    const auto& r = recorded("ckpt_mnist");
    EXPECT_THROW(predictCheckpoint(r, {"nope"}), std::invalid_argument);
    EXPECT_THROW(predictCheckpoint(r, {""}), std::invalid_argument);
    Report inference = r;
    inference.run.mode = RunMode::Inference;
    EXPECT_THROW(predictCheckpoint(inference, {"conv2"}), std::invalid_argument);
    Report old = r; // saved before memledger kept the forward's tensor uses
    old.forward_uses.clear();
    EXPECT_THROW(predictCheckpoint(old, {"conv2"}), std::invalid_argument);
    EXPECT_TRUE(checkpointableModules(old).empty());
}

// The auto plan on MobileNetV2: it fits the budget by its own prediction, and PyTorch, running that very plan,
// measures a peak within 1% of it.
TEST(Checkpoint, AutoPlanFitsAndPyTorchAgrees)
{
    const auto& r = recorded("ckpt_mobilenet");
    const std::int64_t resident = r.peak_total_bytes - r.peak_bytes;
    // 30% less than the plain step's peak to the allocator: the GPU's budget less the CUDA context.
    const std::int64_t budget = resident + r.peak_bytes * 7 / 10;
    for (auto impl : {CheckpointImpl::Reentrant, CheckpointImpl::NonReentrant}) {
        auto plan = planCheckpoints(r, budget + DeviceOverheads::estimates().cuda_context_bytes, impl);
        ASSERT_TRUE(plan.fits) << checkpointToText(plan.prediction);
        ASSERT_FALSE(plan.prediction.checkpoint.empty());
        EXPECT_LE(plan.prediction.predicted_peak_total_bytes, budget);
        // No single module of the plan can be dropped and still fit (the search's local improvement).
        for (std::size_t k = 0; k < plan.prediction.checkpoint.size(); ++k) {
            auto fewer = plan.prediction.checkpoint;
            fewer.erase(fewer.begin() + static_cast<std::ptrdiff_t>(k));
            EXPECT_GT(predictCheckpoint(r, fewer, impl, false).predicted_peak_total_bytes, budget);
        }
        auto res = memledger::test::runCommand(std::string(MEMLEDGER_PYTHON) + " " + MEMLEDGER_SOURCE_DIR
            + "/tests/fixtures/checkpoint_truth.py " + dir() + " --peak ckpt_mobilenet "
            + join(plan.prediction.checkpoint) + " " + checkpointImplName(impl));
        ASSERT_EQ(res.exit_code, 0) << res.output;
        auto real = std::stoll(res.output.substr(res.output.find_last_of("\n", res.output.size() - 2) + 1));
        std::printf("auto plan %s (%s): predicted %lld, PyTorch %lld\n", join(plan.prediction.checkpoint).c_str(),
            checkpointImplName(impl), static_cast<long long>(plan.prediction.predicted_peak_bytes),
            static_cast<long long>(real));
        EXPECT_LE(std::abs(errorPercent(plan.prediction.predicted_peak_bytes, real)), 1.0);
    }
}

TEST(Checkpoint, CommandLine)
{
    auto t = truth()["ckpt_mnist"];
    auto json = std::string(::testing::TempDir()) + "/ckpt.json";
    auto res = memledger::test::runCommand(memledger::test::memledgerBinary() + " whatif " + dir() + "/ckpt_mnist.pt"
        + " --mode train --input " + t["input"].get<std::string>() + " --checkpoint conv2 --json " + json);
    ASSERT_EQ(res.exit_code, 0) << res.output;
    EXPECT_NE(res.output.find("WORSE"), std::string::npos) << res.output;
    std::ifstream in(json);
    auto j = nlohmann::json::parse(in);
    ASSERT_EQ(j["predictions"].size(), 1u);
    EXPECT_EQ(j["predictions"][0]["checkpoint"], nlohmann::json::array({"conv2"}));
    EXPECT_TRUE(j["predictions"][0]["worse"].get<bool>());
    auto bad = memledger::test::runCommand(memledger::test::memledgerBinary() + " whatif " + dir() + "/ckpt_mnist.pt"
        + " --mode train --input " + t["input"].get<std::string>() + " --checkpoint conv9");
    EXPECT_EQ(bad.exit_code, 2);
    EXPECT_NE(bad.output.find("conv9"), std::string::npos) << bad.output;
    auto noBudget = memledger::test::runCommand(memledger::test::memledgerBinary() + " whatif --checkpoint auto");
    EXPECT_EQ(noBudget.exit_code, 2);
}

} // namespace
