// What memledger says when a new user's first command goes wrong: each message names what to do, and the exit
// code is the CLI's convention (docs/cli.md: 2 usage, 3 bad model file, 4 run failed).
#include "fixture_paths.h"
#include "run_command.h"
#include "recording/build_report.h"
#include "recording/model.h"
#include "support/format.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

using memledger::test::fixture;
using memledger::test::memledgerBinary;
using memledger::test::runCommand;

namespace {

bool exists(const std::string& path)
{
    return std::ifstream(path).good();
}

std::string scratch(const std::string& name)
{
    return "/tmp/memledger-messages-" + std::to_string(::getpid()) + "-" + name;
}

} // namespace

TEST(Messages, FloatIdsIntoAnEmbeddingSayTheModelTakesInt64AndHowToPassThem)
{
    int checked = 0;
    for (const char* file : {"lm/gpt_sdpa.pt", "lm/gpt_sdpa.pt2"}) {
        if (!exists(fixture(file)))
            continue;
        auto r = runCommand(memledgerBinary() + " analyze '" + fixture(file) + "' --input 2x32");
        EXPECT_EQ(r.exit_code, 4) << file << ": " << r.output;
        EXPECT_NE(r.output.find("takes int64 token ids"), std::string::npos) << file << ": " << r.output;
        EXPECT_NE(r.output.find("--input 2x32:int64"), std::string::npos) << file << ": " << r.output;
        EXPECT_EQ(r.output.find("Expected tensor for argument"), std::string::npos) << "the raw ATen error: " << r.output;
        ++checked;
    }
    if (checked == 0)
        GTEST_SKIP() << "no language-model fixture (lm/gpt_sdpa.pt): make_lm_fixtures needs torch.export (PyTorch 2.1+)";
}

TEST(Messages, AStateDictSavedWithTorchSaveIsNamedAndTheExportIsSaid)
{
    // tests/fixtures/new_user_files.py: torch.save(model.state_dict()) and torch.save(model).
    const auto sd = fixture("new_user/state_dict.pt"), whole = fixture("new_user/whole_module.pt");
    ASSERT_TRUE(exists(sd)) << sd << " was not made (make_new_user_fixtures)";
    auto r = runCommand(memledgerBinary() + " analyze '" + sd + "'");
    EXPECT_EQ(r.exit_code, 3) << r.output;
    EXPECT_NE(r.output.find(sd), std::string::npos) << "the file is named: " << r.output;
    EXPECT_NE(r.output.find("a state_dict saved with torch.save"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("torch.export"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("memledger.export"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("corrupted"), std::string::npos) << r.output;
    auto w = runCommand(memledgerBinary() + " analyze '" + whole + "'");
    EXPECT_EQ(w.exit_code, 3) << w.output;
    EXPECT_NE(w.output.find("a whole nn.Module pickled with torch.save"), std::string::npos) << w.output;
    EXPECT_NE(w.output.find("torch.export"), std::string::npos) << w.output;
}

TEST(Messages, ABatchTooLargeForTheMachineSuggestsTheMetaDevice)
{
    // 10^11 MNIST images: 313 TB of input, which no allocator here gives.
    auto r = runCommand(memledgerBinary() + " analyze '" + fixture("mnist.pt") + "' --input 100000000000x1x28x28");
    EXPECT_EQ(r.exit_code, 4) << r.output;
    EXPECT_NE(r.output.find("--device meta"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("more memory than cpu can give"), std::string::npos) << r.output;
}

TEST(Messages, AWrongInputCountIsAUsageError)
{
    auto one = runCommand(memledgerBinary() + " analyze '" + fixture("two_inputs.pt") + "' --input 2x16");
    EXPECT_EQ(one.exit_code, 2) << one.output;
    EXPECT_NE(one.output.find("forward takes 2 inputs (x, y) but 1 was given"), std::string::npos) << one.output;
    EXPECT_NE(one.output.find("--input"), std::string::npos) << one.output;
    auto three = runCommand(memledgerBinary() + " analyze '" + fixture("two_inputs.pt") + "' --input 2x16,2x4,2x4");
    EXPECT_EQ(three.exit_code, 2) << three.output;
    auto guessed = runCommand(memledgerBinary() + " analyze '" + fixture("two_inputs.pt") + "'");
    EXPECT_EQ(guessed.exit_code, 2) << guessed.output;
}

// `ranks` names each rank's file in a column of 33 characters: four long names that differ near their end stay apart.
TEST(RankNames, LongNamesThatDifferNearTheEndStayApart)
{
    std::vector<std::string> names;
    for (int i = 0; i < 4; ++i)
        names.push_back("memory_snapshot_training_run_rank_" + std::to_string(i) + "_step_000100.pickle");
    auto labels = memledger::distinctLabels(names, 33);
    ASSERT_EQ(labels.size(), names.size());
    for (std::size_t i = 0; i < labels.size(); ++i) {
        EXPECT_LE(labels[i].size(), 33u) << labels[i];
        EXPECT_NE(labels[i].find("rank_" + std::to_string(i)), std::string::npos) << labels[i];
        EXPECT_NE(labels[i].find(".pickle"), std::string::npos) << "the end is kept: " << labels[i];
        for (std::size_t j = 0; j < i; ++j)
            EXPECT_NE(labels[i], labels[j]);
    }
    // One name alone loses its middle, never its start or its end.
    auto one = memledger::distinctLabels({names[0]}, 20);
    ASSERT_EQ(one.size(), 1u);
    EXPECT_EQ(one[0].size(), 20u) << one[0];
    EXPECT_EQ(one[0].substr(0, 6), "memory") << one[0];
    EXPECT_EQ(one[0].substr(one[0].size() - 6), "pickle") << one[0];
    EXPECT_NE(one[0].find('~'), std::string::npos) << one[0];
    // Names that fit stay whole.
    EXPECT_EQ(memledger::distinctLabels({"a.pickle", "b.pickle"}, 33), (std::vector<std::string> {"a.pickle", "b.pickle"}));
}

TEST(RankNames, TheRanksCommandShowsFourLongNamesApart)
{
    std::vector<std::string> files;
    for (int i = 0; i < 4; ++i) {
        files.push_back(scratch("memory_snapshot_training_run_rank_" + std::to_string(i) + "_step_000100.pickle"));
        auto r = runCommand(memledgerBinary() + " analyze '" + fixture("mnist.pt") + "' --input 1x1x28x28 --snapshot '"
            + files.back() + "'");
        ASSERT_EQ(r.exit_code, 0) << r.output;
    }
    std::string command = memledgerBinary() + " ranks";
    for (const auto& f : files)
        command += " '" + f + "'";
    auto r = runCommand(command);
    for (const auto& f : files)
        std::remove(f.c_str());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    for (int i = 0; i < 4; ++i)
        EXPECT_NE(r.output.find("rank_" + std::to_string(i) + "_step"), std::string::npos) << r.output;
}

// The layer tree lists a model's modules in the order its forward first calls them, whatever the order they were
// registered in, and a ModuleList as one (tests/fixtures/new_user_files.py: forward pre-hooks on the eager module).
class LayerTreeOrder : public ::testing::TestWithParam<std::string> { };

TEST_P(LayerTreeOrder, ModulesInCallOrderWithTheirTypes)
{
    auto truth = memledger::test::readTruth("new_user/truth.json", "make_new_user_fixtures");
    ASSERT_FALSE(truth.contains("skipped")) << truth["skipped"];
    if (GetParam() == "pt2" && !truth["pt2"].get<bool>())
        GTEST_SKIP() << truth["pt2_skipped"].get<std::string>();
    if (GetParam() == "pt2" && !memledger::canRunExportedPrograms())
        GTEST_SKIP() << "this build's libtorch runs no torch.export programs (the PyTorch 2 build does)";
    auto model = memledger::Model::open(fixture("new_user/call_order." + GetParam()));
    const auto& layers = model.modules();
    // PyTorch's order: each path where its first call (or its first child's, for a ModuleList) comes.
    std::vector<std::string> expected, got;
    for (const auto& path : truth["call_order"]) {
        auto p = path.get<std::string>();
        for (auto dot = p.find('.');; dot = p.find('.', dot + 1)) {
            auto prefix = p.substr(0, dot);
            if (std::find(expected.begin(), expected.end(), prefix) == expected.end())
                expected.push_back(prefix);
            if (dot == std::string::npos)
                break;
        }
    }
    ASSERT_FALSE(layers.empty());
    auto tree = [&](int i, auto&& self) -> void { // depth first, each module's children in their order
        const auto& l = layers[static_cast<std::size_t>(i)];
        if (!l.path.empty()) {
            got.push_back(l.path);
            ASSERT_TRUE(truth["types"].contains(l.path)) << l.path;
            EXPECT_EQ(l.type, truth["types"][l.path].get<std::string>()) << l.path;
        }
        for (int c : l.children)
            self(c, self);
    };
    tree(0, tree);
    EXPECT_EQ(got, expected);
    // And the report's tree (depth first, children in order) shows them so.
    auto report = memledger::analyzeModel(model, [&] {
        memledger::RunOptions o;
        o.inputs = memledger::parseShapes(truth["input"].get<std::string>());
        return o;
    }());
    std::vector<std::string> shown;
    auto walk = [&](int i, auto&& self) -> void {
        const auto& l = report.layers[static_cast<std::size_t>(i)];
        if (!l.path.empty())
            shown.push_back(l.path);
        for (int c : l.children)
            self(c, self);
    };
    walk(0, walk);
    EXPECT_EQ(shown, expected);
}

INSTANTIATE_TEST_SUITE_P(Files, LayerTreeOrder, ::testing::Values("pt", "pt2"));
