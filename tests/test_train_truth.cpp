// A recorded training step against what PyTorch itself reports for the same step (tests/fixtures/make_fixtures.py,
// truth.json: "train": {"input", "sgd": {...}, "adam": {...}} per model).
#include "fixture_paths.h"
#include "recording/model.h"
#include "recording/build_report.h"
#include "run_command.h"
#include "support/errors.h"
#include "support/format.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <utility>

using namespace memledger;
using memledger::test::fixture;

namespace {

struct TrainCase {
    std::string model;
    std::string optimizer;
};

std::string caseName(const ::testing::TestParamInfo<TrainCase>& info)
{
    return info.param.model + "_" + info.param.optimizer;
}

RunOptions trainOptions(const nlohmann::json& train, const std::string& optimizer)
{
    RunOptions o;
    o.mode = RunMode::Train;
    o.optimizer = optimizer;
    o.inputs = parseShapes(train["input"].get<std::string>());
    return o;
}

// One model opened and one step recorded per case, shared by the tests of that case.
struct Recorded {
    nlohmann::json truth; // truth[model]["train"][optimizer]
    nlohmann::json train; // truth[model]["train"]
    std::shared_ptr<Model> model;
    Report report;
};

const Recorded& recorded(const TrainCase& c)
{
    static std::map<std::pair<std::string, std::string>, Recorded> cache;
    auto key = std::make_pair(c.model, c.optimizer);
    auto it = cache.find(key);
    if (it != cache.end())
        return it->second;
    auto all = memledger::test::truth();
    if (!all.contains(c.model) || !all[c.model].contains("train") || !all[c.model]["train"].contains(c.optimizer))
        throw std::runtime_error("truth.json has no train." + c.optimizer + " for " + c.model);
    Recorded r;
    r.train = all[c.model]["train"];
    r.truth = r.train[c.optimizer];
    r.model = std::make_shared<Model>(Model::open(fixture(all[c.model]["file"].get<std::string>())));
    r.report = analyzeModel(*r.model, trainOptions(r.train, c.optimizer));
    return cache.emplace(key, std::move(r)).first->second;
}

class TrainTruth : public ::testing::TestWithParam<TrainCase> {
protected:
    void SetUp() override
    {
        try {
            r = &recorded(GetParam());
        } catch (const std::exception& e) {
            FAIL() << GetParam().model << " " << GetParam().optimizer << ": " << e.what();
        }
    }
    const Recorded* r = nullptr;
};

std::int64_t num(const nlohmann::json& j, const char* key)
{
    return j[key].get<std::int64_t>();
}

} // namespace

TEST_P(TrainTruth, RunIsOneTrainingStepWithTheChosenLoss)
{
    const auto& run = r->report.run;
    EXPECT_EQ(run.mode, RunMode::Train);
    EXPECT_EQ(run.optimizer, GetParam().optimizer);
    EXPECT_EQ(run.loss, r->truth["loss"].get<std::string>());
}

TEST_P(TrainTruth, PeakWithinOnePercentOfTheProfiler)
{
    auto expected = static_cast<double>(num(r->truth, "peak_bytes"));
    auto got = static_cast<double>(r->report.peak_bytes);
    EXPECT_LE(std::abs(got - expected), 0.01 * expected)
        << GetParam().model << " " << GetParam().optimizer << ": memledger " << r->report.peak_bytes << " profiler "
        << num(r->truth, "peak_bytes") << " (" << (got - expected) / expected * 100.0 << "%)";
    std::printf("[ peak     ] %s %s: memledger %lld profiler %lld (%+.3f%%)\n", GetParam().model.c_str(),
        GetParam().optimizer.c_str(), static_cast<long long>(r->report.peak_bytes),
        static_cast<long long>(num(r->truth, "peak_bytes")), (got - expected) / expected * 100.0);
}

TEST_P(TrainTruth, GradientAndOptimizerStateBytesAreExact)
{
    EXPECT_EQ(r->report.gradient_bytes, num(r->truth, "gradient_bytes"));
    EXPECT_EQ(r->report.optimizer_state_bytes, num(r->truth, "optimizer_state_bytes"));
}

TEST_P(TrainTruth, PeakTotalIsWeightsOptimizerStateInputsAndPeak)
{
    const auto& rep = r->report;
    EXPECT_EQ(rep.peak_total_bytes, rep.weight_bytes + rep.optimizer_state_bytes + rep.input_bytes + rep.peak_bytes)
        << "weights " << rep.weight_bytes << " optimizer state " << rep.optimizer_state_bytes << " inputs "
        << rep.input_bytes << " peak " << rep.peak_bytes;
}

TEST_P(TrainTruth, PhasesAreForwardLossBackwardOptimizerCoveringTheEvents)
{
    const auto& rep = r->report;
    ASSERT_EQ(rep.phases.size(), 4u);
    const char* names[] = {"forward", "loss", "backward", "optimizer"};
    ASSERT_TRUE(rep.trace);
    const auto events = static_cast<std::uint32_t>(rep.trace->size());
    EXPECT_EQ(rep.phases.front().first_event, 0u);
    EXPECT_EQ(rep.phases.back().end_event, events);
    for (std::size_t i = 0; i < rep.phases.size(); ++i) {
        const auto& p = rep.phases[i];
        EXPECT_EQ(p.name, names[i]) << "phase " << i;
        EXPECT_LE(p.first_event, p.end_event) << p.name;
        EXPECT_LE(p.start_ns, p.end_ns) << p.name;
        if (i + 1 < rep.phases.size()) {
            const auto& next = rep.phases[i + 1];
            EXPECT_EQ(p.end_event, next.first_event) << p.name << " -> " << next.name; // no gap, no overlap
            EXPECT_LE(p.end_ns, next.start_ns) << p.name << " -> " << next.name;
        }
    }
    // The backward pass allocates (gradients at least); the forward allocates activations.
    EXPECT_LT(rep.phases[0].first_event, rep.phases[0].end_event);
    EXPECT_LT(rep.phases[2].first_event, rep.phases[2].end_event);
}

TEST_P(TrainTruth, GradientLedgerAndLayerGradientsSumToTheRoot)
{
    const auto& rep = r->report;
    EXPECT_GT(rep.ledgers[static_cast<std::size_t>(Ledger::Gradients)].total, 0);
    ASSERT_FALSE(rep.layers.empty());
    EXPECT_EQ(rep.layers[0].gradient_bytes, rep.gradient_bytes);
    // Parents sum their children (a module's own parameters come on top).
    for (std::size_t i = 0; i < rep.layers.size(); ++i) {
        std::int64_t children = 0;
        for (int c : rep.layers[i].children)
            children += rep.layers[static_cast<std::size_t>(c)].gradient_bytes;
        EXPECT_GE(rep.layers[i].gradient_bytes, children) << "layer '" << rep.layers[i].path << "'";
    }
}

TEST_P(TrainTruth, TheStepUpdatesTheParameters)
{
    // PyTorch's own step changed the parameters; ours made a gradient for them and ran the same optimizer.
    EXPECT_TRUE(r->truth["parameter_changed"].get<bool>());
    EXPECT_GT(r->report.gradient_bytes, 0);
    EXPECT_GT(r->report.optimizer_state_bytes, 0);
}

INSTANTIATE_TEST_SUITE_P(Models, TrainTruth,
    ::testing::Values(TrainCase {"resnet18_scripted", "sgd"}, TrainCase {"resnet18_scripted", "adam"},
        TrainCase {"resnet18_traced", "sgd"}, TrainCase {"resnet18_traced", "adam"}, TrainCase {"small_inplace", "sgd"},
        TrainCase {"small_inplace", "adam"}, TrainCase {"transformer_layer", "sgd"},
        TrainCase {"transformer_layer", "adam"}, TrainCase {"mnist", "sgd"}, TrainCase {"mnist", "adam"},
        TrainCase {"demo", "sgd"}, TrainCase {"demo", "adam"}),
    caseName);

// Every autograd node of the backward is attributed to a module of the model: the module of the forward op that
// created it. The root "" is right only for the loss's nodes and for ops the root's own forward calls
// (torch.flatten, F.max_pool2d, a residual add): never more root nodes than such forward ops can make.
class BackwardAttribution : public ::testing::TestWithParam<std::string> { };

TEST_P(BackwardAttribution, EveryBackwardNodeHasTheModuleOfItsForward)
{
    auto all = memledger::test::truth();
    ASSERT_TRUE(all.contains(GetParam()));
    auto model = Model::open(fixture(all[GetParam()]["file"].get<std::string>()));
    auto raw = model.run(trainOptions(all[GetParam()]["train"], "sgd"));
    // The nodes recorded are the nodes of PyTorch's own graph of the step, by name and count.
    std::map<std::string, int> names, expected;
    for (const auto& op : raw.ops)
        if (op.backward)
            ++names[raw.trace.strings.at(op.name)];
    for (const auto& [name, count] : all[GetParam()]["train"]["sgd"]["backward_nodes"].items())
        expected[name] = count.get<int>();
    auto listed = [](const std::map<std::string, int>& m) {
        std::string out;
        for (const auto& [n, c] : m)
            out += n + " x" + std::to_string(c) + ", ";
        return out;
    };
    EXPECT_EQ(names, expected) << "recorded: " << listed(names) << "\nPyTorch's graph: " << listed(expected);
    std::set<std::string> paths;
    for (const auto& m : model.modules())
        paths.insert(m.path);
    ASSERT_EQ(raw.phases.size(), 4u);
    auto phaseOf = [&](const OpCall& op) -> std::string {
        for (const auto& p : raw.phases)
            if (op.start_ns >= p.start_ns && op.start_ns <= p.end_ns)
                return p.name;
        return "?";
    };
    std::set<std::string> forwardModules; // modules whose forward ran ops
    int rootForwardOps = 0, lossOps = 0, backwardNodes = 0, rootNodes = 0;
    std::map<std::string, int> rootNodeNames;
    for (const auto& op : raw.ops) {
        const std::string module = raw.trace.strings.at(op.module);
        const std::string name = raw.trace.strings.at(op.name);
        if (!op.backward) {
            auto phase = phaseOf(op);
            if (phase == "forward") {
                forwardModules.insert(module);
                rootForwardOps += module.empty();
            } else if (phase == "loss") {
                ++lossOps;
            }
            continue;
        }
        ++backwardNodes;
        EXPECT_TRUE(paths.count(module)) << "backward node " << name << " has module '" << module
                                         << "', not a module of the model";
        const bool accumulate = name == "torch::autograd::AccumulateGrad";
        if (module.empty()) {
            ++rootNodes;
            ++rootNodeNames[name];
        } else if (!accumulate) { // AccumulateGrad: its parameter's module (out_proj's weight is used by self_attn)
            EXPECT_TRUE(forwardModules.count(module))
                << "backward node " << name << " is attributed to '" << module << "' whose forward ran no op";
        }
        // The gradient of a parameter is accumulated for the parameter's module, never for the root (no fixture
        // has a parameter of its own at the root).
        if (accumulate)
            EXPECT_FALSE(module.empty()) << "an AccumulateGrad node left at the root";
    }
    EXPECT_GT(backwardNodes, 0);
    EXPECT_GT(lossOps, 0);
    // A loss op makes at most two nodes (cross-entropy: log_softmax and nll_loss), a root forward op one.
    EXPECT_LE(rootNodes, rootForwardOps + 2 * lossOps)
        << "backward nodes at the root: " << listed(rootNodeNames) << "root forward ops " << rootForwardOps << ", loss ops " << lossOps;
    // Every module with parameters got the backward nodes of its parameters.
    std::set<std::string> backwardModules;
    for (const auto& op : raw.ops)
        if (op.backward)
            backwardModules.insert(raw.trace.strings.at(op.module));
    std::set<std::string> owners;
    for (const auto& t : model.info().tensors)
        if (!t.is_buffer) {
            auto dot = t.name.rfind('.');
            owners.insert(dot == std::string::npos ? std::string() : t.name.substr(0, dot));
        }
    for (const auto& owner : owners)
        EXPECT_TRUE(backwardModules.count(owner)) << "module '" << owner << "' has parameters but no backward node";
}

INSTANTIATE_TEST_SUITE_P(Models, BackwardAttribution,
    ::testing::Values("resnet18_scripted", "resnet18_traced", "small_inplace", "transformer_layer", "mnist"));

TEST(TrainRepeat, TwoStepsOfOneModelGiveTheSameFigures)
{
    auto all = memledger::test::truth();
    auto model = Model::open(fixture("small_inplace.pt"));
    auto o = trainOptions(all["small_inplace"]["train"], "sgd");
    auto first = analyzeModel(model, o);
    auto second = analyzeModel(model, o); // the parameters moved, their sizes did not
    EXPECT_EQ(first.gradient_bytes, second.gradient_bytes);
    EXPECT_EQ(first.optimizer_state_bytes, second.optimizer_state_bytes);
    EXPECT_EQ(first.peak_bytes, second.peak_bytes);
    EXPECT_EQ(first.weight_bytes, second.weight_bytes);
    // An inference run of the same Model afterwards is unaffected by the training runs.
    RunOptions inference;
    inference.inputs = o.inputs;
    auto after = analyzeModel(model, inference);
    EXPECT_EQ(after.run.mode, RunMode::Inference);
    EXPECT_EQ(after.gradient_bytes, 0);
    EXPECT_EQ(after.optimizer_state_bytes, 0);
}

// Models that a training step must refuse, each with the reason.
struct Refusal {
    std::string model;
    std::string message; // part of memledger's message
};

class TrainRefusal : public ::testing::TestWithParam<Refusal> { };

TEST_P(TrainRefusal, LibraryThrowsRunErrorWithTheReason)
{
    auto t = memledger::test::truth()[GetParam().model];
    ASSERT_FALSE(t.is_null()) << "truth.json has no " << GetParam().model;
    auto model = Model::open(fixture(t["file"].get<std::string>()));
    RunOptions o;
    o.mode = RunMode::Train;
    o.inputs = parseShapes(t["input"].get<std::string>());
    for (const char* optimizer : {"sgd", "adam"}) {
        o.optimizer = optimizer;
        try {
            analyzeModel(model, o);
            ADD_FAILURE() << GetParam().model << ": expected a RunError (PyTorch: " << t["train_refusal"] << ")";
        } catch (const RunError& e) {
            EXPECT_NE(std::string(e.what()).find(GetParam().message), std::string::npos) << e.what();
        }
    }
    // The model is still usable for inference afterwards.
    RunOptions inference;
    inference.inputs = o.inputs;
    EXPECT_NO_THROW(analyzeModel(model, inference));
}

TEST_P(TrainRefusal, CliExitsFourWithTheReason)
{
    auto t = memledger::test::truth()[GetParam().model];
    auto r = memledger::test::runCommand(memledger::test::memledgerBinary() + " analyze '"
        + fixture(t["file"].get<std::string>()) + "' --input " + t["input"].get<std::string>() + " --mode train");
    EXPECT_EQ(r.exit_code, 4) << r.output;
    EXPECT_NE(r.output.find(GetParam().message), std::string::npos) << r.output;
}

INSTANTIATE_TEST_SUITE_P(BadModels, TrainRefusal,
    ::testing::Values(Refusal {"no_grad_path", "does not depend on any parameter"},
        Refusal {"int_output", "not floating point"}, Refusal {"no_params", "no floating-point parameters"}),
    [](const ::testing::TestParamInfo<Refusal>& info) { return info.param.model; });
