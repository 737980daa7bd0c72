// Language models with token inputs, as TorchScript (.pt) and as torch.export programs (.pt2), against what
// PyTorch 2 itself reports for the same run or step (tests/fixtures/lm_models.py, lm/lm_truth.json): the peak
// within 1%, weights, gradients and optimizer state exact (a tied LM head counted once), leaf outputs equal to
// forward hooks. Skipped, with the reason, where the fixtures' torch has no torch.export (libtorch 1.13).
#include "demo_model.h"
#include "truth_file.h"
#include "recording/model.h"
#include "recording/build_report.h"
#include "run_command.h"
#include "session/open_file.h"
#include "support/errors.h"
#include "support/format.h"
#include "whatif/whatif.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <map>
#include <string>

using namespace memledger;
using memledger::test::fixture;
using memledger::test::runCommand;

namespace {

const nlohmann::json& lmTruth()
{
    static const nlohmann::json truth = test::readTruth("lm/lm_truth.json", "make_lm_fixtures");
    return truth;
}

// Skips the test, with the reason, when the fixtures could not be made with this build's torch.
#define SKIP_WITHOUT_LM_FIXTURES() SKIP_IF_TRUTH_IS_NOT_HERE(lmTruth(), true)


std::string lmFile(const std::string& model, const std::string& kind)
{
    return fixture("lm/" + lmTruth()["models"][model][kind].get<std::string>());
}

RunOptions optionsFor(const std::string& input)
{
    RunOptions o;
    auto parsed = parseInputs(input);
    o.inputs = parsed.shapes;
    o.input_types = parsed.types;
    o.threads = 1;
    o.lifetimes = "graph"; // the truths run torch.export.load(FILE).module(): the graph's lifetimes
    return o;
}

struct Case {
    std::string model;
    std::string kind; // "pt" | "pt2"
};

void PrintTo(const Case& c, std::ostream* os)
{
    *os << c.model << "." << c.kind;
}

std::string caseName(const ::testing::TestParamInfo<Case>& info)
{
    return info.param.model + "_" + info.param.kind;
}

const std::vector<Case>& cases()
{
    // The zoo's models (tests/fixtures/lm_zoo.py: Llama-style, BERT-style, T5-style) are exported programs only.
    static const std::vector<Case> all {{"gpt_sdpa", "pt"}, {"gpt_sdpa", "pt2"}, {"gpt_mha", "pt"}, {"gpt_mha", "pt2"},
        {"encoder_mask", "pt"}, {"encoder_mask", "pt2"}, {"llama_gqa", "pt2"}, {"bert_mask", "pt2"},
        {"t5_relbias", "pt2"}};
    return all;
}

// One model opened per case, shared by its tests.
Model& opened(const Case& c)
{
    static std::map<std::string, std::unique_ptr<Model>> cache;
    auto key = c.model + "." + c.kind;
    auto it = cache.find(key);
    if (it == cache.end())
        it = cache.emplace(key, std::make_unique<Model>(Model::open(lmFile(c.model, c.kind)))).first;
    return *it->second;
}

// Every comparison made, written as a Markdown table to lm/accuracy.md when the tests end (the README's table).
struct Compared {
    std::string what, truth;
    std::int64_t got, expected;
};
std::vector<Compared>& compared()
{
    static std::vector<Compared> all;
    return all;
}

class AccuracyTable : public ::testing::Environment {
public:
    void TearDown() override
    {
        if (compared().empty())
            return;
        std::ofstream out(fixture("lm/accuracy.md"));
        out << "| run | memledger | " << "truth | difference |\n| --- | --- | --- | --- |\n";
        for (const auto& c : compared()) {
            char diff[32];
            std::snprintf(diff, sizeof diff, "%+.3f%%",
                100.0 * static_cast<double>(c.got - c.expected) / static_cast<double>(c.expected));
            out << "| " << c.what << " | " << c.got << " | " << c.expected << " (" << c.truth << ") | " << diff << " |\n";
        }
    }
};
const auto* const kAccuracyTable = ::testing::AddGlobalTestEnvironment(new AccuracyTable);

void expectWithinOnePercent(std::int64_t got, std::int64_t expected, const std::string& what, const char* truth = "PyTorch")
{
    compared().push_back({what, truth, got, expected});
    auto e = static_cast<double>(expected);
    auto g = static_cast<double>(got);
    EXPECT_LE(std::abs(g - e), 0.01 * e) << what << ": memledger " << got << " " << truth << " " << expected << " ("
                                         << (g - e) / e * 100.0 << "%)";
    std::printf("[ peak     ] %s: memledger %lld %s %lld (%+.3f%%)\n", what.c_str(), static_cast<long long>(got), truth,
        static_cast<long long>(expected), (g - e) / e * 100.0);
}

class LanguageModel : public ::testing::TestWithParam<Case> {
protected:
    void SetUp() override
    {
        SKIP_WITHOUT_LM_FIXTURES();
        // lm_models.py writes every model of cases(): one missing is a broken truth, not a reason to check nothing.
        ASSERT_TRUE(lmTruth()["models"].contains(GetParam().model)) << "lm/lm_truth.json has no " << GetParam().model;
        t = lmTruth()["models"][GetParam().model];
        SKIP_IF_TRUTH_IS_NOT_HERE(t, true);
        ASSERT_TRUE(t.contains(GetParam().kind)) << "lm/lm_truth.json has no " << GetParam().model << "." << GetParam().kind;
    }
    nlohmann::json t;
};

} // namespace

TEST_P(LanguageModel, InferencePeakWithinOnePercentAndWeightsExact)
{
    auto& model = opened(GetParam());
    auto report = analyzeModel(model, optionsFor(t["input"].get<std::string>()));
    EXPECT_EQ(report.model.parameter_bytes, t["parameter_bytes"].get<std::int64_t>()) << "a tied weight counts once";
    EXPECT_EQ(report.model.buffer_bytes, t["buffer_bytes"].get<std::int64_t>());
    expectWithinOnePercent(report.peak_bytes, t["inference"][GetParam().kind]["peak_bytes"].get<std::int64_t>(),
        GetParam().model + "." + GetParam().kind + " inference");
    // Token ids stay integers: 8 bytes each, whatever the run's precision.
    for (std::size_t i = 0; i < report.run.input_shapes.size(); ++i)
        EXPECT_TRUE(inputTypeAt(report.run.input_types, i).isToken()) << "input " << i;
}

TEST_P(LanguageModel, InferenceAtALongerSequence)
{
    const auto& long_ = t["long"];
    if (!long_["inference"].contains(GetParam().kind))
        GTEST_SKIP() << "no truth at the longer sequence for " << GetParam().kind;
    auto report = analyzeModel(opened(GetParam()), optionsFor(long_["input"].get<std::string>()));
    expectWithinOnePercent(report.peak_bytes, long_["inference"][GetParam().kind]["peak_bytes"].get<std::int64_t>(),
        GetParam().model + "." + GetParam().kind + " inference at " + long_["input"].get<std::string>());
}

TEST_P(LanguageModel, TrainingStepsAgreeWithPyTorch)
{
    for (const char* optimizer : {"sgd", "adamw"}) {
        SCOPED_TRACE(optimizer);
        const auto& truth = t["train"][GetParam().kind][optimizer];
        auto o = optionsFor(t["input"].get<std::string>());
        o.mode = RunMode::Train;
        o.optimizer = optimizer;
        auto report = analyzeModel(opened(GetParam()), o);
        EXPECT_EQ(report.run.loss, truth["loss"].get<std::string>());
        if (GetParam().model.rfind("gpt", 0) == 0)
            EXPECT_EQ(report.run.loss, "next_token");
        expectWithinOnePercent(report.peak_bytes, truth["peak_bytes"].get<std::int64_t>(),
            GetParam().model + "." + GetParam().kind + " " + optimizer + " step");
        EXPECT_EQ(report.gradient_bytes, truth["gradient_bytes"].get<std::int64_t>());
        EXPECT_EQ(report.optimizer_state_bytes, truth["optimizer_state_bytes"].get<std::int64_t>());
        if (GetParam().model.rfind("gpt", 0) == 0)
            EXPECT_EQ(report.gradient_bytes, t["parameter_bytes"].get<std::int64_t>()) << "one gradient per weight, tied once";
    }
}

INSTANTIATE_TEST_SUITE_P(Models, LanguageModel, ::testing::ValuesIn(cases()), caseName);

// One process, many runs (the window's re-runs, a what-if's recordings): every run is PyTorch's. libtorch's CPU
// reporter keeps the size of a block allocated during one recording and freed between two, and reports a later
// block at that address with the old size; memledger takes a free's size from its alloc. Twelve training steps
// of one model, each with a meta run between (which moves the CPU's addresses), each equal to the profiler's peak.
TEST(LanguageModelRuns, EveryRunOfOneProcessIsThePyTorchStep)
{
    SKIP_WITHOUT_LM_FIXTURES();
    if (!lmTruth()["models"].contains("llama_gqa") || !lmTruth()["models"]["llama_gqa"].contains("pt2"))
        GTEST_SKIP() << "the fixtures have no llama_gqa.pt2";
    SKIP_IF_TRUTH_IS_NOT_HERE(lmTruth()["models"]["llama_gqa"], true);
    const auto& t = lmTruth()["models"]["llama_gqa"];
    const auto expected = t["train"]["pt2"]["adamw"]["peak_bytes"].get<std::int64_t>();
    for (int i = 0; i < 12; ++i) {
        auto model = Model::open(lmFile("llama_gqa", "pt2"));
        auto o = optionsFor(t["input"].get<std::string>());
        o.mode = RunMode::Train;
        o.optimizer = "adamw";
        EXPECT_EQ(analyzeModel(model, o).peak_bytes, expected) << "run " << i;
        if (metaRunsSupported()) {
            auto onMeta = Model::open(lmFile("llama_gqa", "pt2")); // a model of its own: weights on meta stay there
            o.device = "meta";
            analyzeModel(onMeta, o);
        }
    }
}

TEST(LanguageModelExport, LeafOutputsOfTheProgramEqualForwardHooks)
{
    SKIP_WITHOUT_LM_FIXTURES();
    for (const auto& name : {"gpt_sdpa", "gpt_mha", "encoder_mask", "llama_gqa", "bert_mask", "t5_relbias"}) {
        SCOPED_TRACE(name);
        if (!lmTruth()["models"].contains(name)) {
            ADD_FAILURE() << "lm/lm_truth.json has no " << name << " (lm_models.py writes every model)";
            continue;
        }
        const auto& t = lmTruth()["models"][name];
        auto report = analyzeModel(opened({name, "pt2"}), optionsFor(t["input"].get<std::string>()));
        int checked = 0;
        for (const auto& [path, bytes] : t["leaf_output_bytes"].items()) {
            int i = report.findLayer(path);
            ASSERT_GE(i, 0) << "no layer " << path;
            const auto& layer = report.layers[static_cast<std::size_t>(i)];
            // nn.MultiheadAttention's output is a tuple whose weights are None: the hook counts the tensor.
            EXPECT_EQ(layer.activation_bytes, bytes.get<std::int64_t>()) << path << " (" << layer.type << ")";
            ++checked;
        }
        EXPECT_GT(checked, 0);
    }
}

TEST(LanguageModelExport, ModulePathsAndTypesComeFromTheGraph)
{
    SKIP_WITHOUT_LM_FIXTURES();
    auto& model = opened({"gpt_sdpa", "pt2"});
    EXPECT_EQ(model.info().type, "GPT");
    bool sawLinear = false;
    for (const auto& m : model.modules())
        if (m.path == "blocks.0.attn.qkv")
            sawLinear = m.type == "Linear";
    EXPECT_TRUE(sawLinear);
    // A tied head: one tensor, listed once.
    int tied = 0;
    for (const auto& tensor : model.info().tensors)
        tied += tensor.name == "tok.weight" || tensor.name == "head.weight";
    EXPECT_EQ(tied, 1);
}

TEST(LanguageModelExport, ASequenceOutsideTheExportedRangeIsRefusedWithTheRange)
{
    SKIP_WITHOUT_LM_FIXTURES();
    const auto& range = lmTruth()["models"]["gpt_sdpa"]["dynamic"]["seq"];
    auto max = range[1].get<std::int64_t>();
    try {
        analyzeModel(opened({"gpt_sdpa", "pt2"}), optionsFor("2x" + std::to_string(max * 2) + ":int64"));
        FAIL() << "a sequence beyond the exported range ran";
    } catch (const RunError& e) {
        std::string m = e.what();
        EXPECT_NE(m.find("outside the range " + std::to_string(range[0].get<int>()) + ".." + std::to_string(max)),
            std::string::npos)
            << m;
    }
    // Inside the range: any size runs.
    auto report = analyzeModel(opened({"gpt_sdpa", "pt2"}), optionsFor("3x" + std::to_string(max - 1) + ":int64"));
    EXPECT_GT(report.peak_bytes, 0);
}

TEST(LanguageModelExport, AnAotInductorPackageIsRefusedByName)
{
    SKIP_WITHOUT_LM_FIXTURES();
    try {
        Model::open(fixture("lm/" + lmTruth()["aoti_like"].get<std::string>()));
        FAIL() << "an AOTInductor package opened";
    } catch (const FileError& e) {
        EXPECT_NE(std::string(e.what()).find("AOTInductor"), std::string::npos) << e.what();
    }
}

TEST(LanguageModelExport, TheProgramsExampleIsTheGuessedInput)
{
    SKIP_WITHOUT_LM_FIXTURES();
    std::string how;
    std::vector<InputType> types;
    auto shapes = opened({"encoder_mask", "pt2"}).guessInputs(&how, &types);
    ASSERT_EQ(shapes.size(), 2u);
    ASSERT_EQ(types.size(), 2u);
    EXPECT_EQ(types[0].dtype, "int64");
    EXPECT_EQ(types[1].dtype, "bool");
}

TEST(LanguageModelScript, AnEmbeddingFirstModelGuessesTokenIds)
{
    SKIP_WITHOUT_LM_FIXTURES();
    std::string how;
    std::vector<InputType> types;
    auto shapes = opened({"gpt_sdpa", "pt"}).guessInputs(&how, &types);
    ASSERT_EQ(shapes.size(), 1u);
    EXPECT_EQ(shapes[0], (Shape {1, 128}));
    ASSERT_EQ(types.size(), 1u);
    EXPECT_EQ(types[0].dtype, "int64");
    EXPECT_NE(how.find("Embedding"), std::string::npos) << how;
    // And the guess runs: a language model's first run needs no --input.
    auto report = analyzeModel(opened({"gpt_sdpa", "pt"}), RunOptions {});
    EXPECT_TRUE(report.run.input_guessed);
}

TEST(LanguageModelScript, AWrongNumberOfInputsIsCountedWithoutSelf)
{
    SKIP_WITHOUT_LM_FIXTURES();
    for (const char* kind : {"pt", "pt2"}) {
        try {
            analyzeModel(opened({"gpt_sdpa", kind}), optionsFor("2x16:int64,2x16:bool"));
            FAIL() << kind << ": two inputs ran";
        } catch (const RunError& e) {
            EXPECT_NE(std::string(e.what()).find("forward takes 1 input (idx) but 2 were given"), std::string::npos)
                << kind << ": " << e.what();
        }
    }
}

TEST(LanguageModelCli, AnalyzeAProgramWithTypedInputs)
{
    SKIP_WITHOUT_LM_FIXTURES();
    auto json = fixture("lm/cli_gpt.json");
    auto r = runCommand(std::string(MEMLEDGER_BINARY) + " analyze " + lmFile("gpt_sdpa", "pt2")
        + " --input 2x32:int64 --threads 1 --lifetimes graph --json " + json);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("2x32:int64"), std::string::npos) << r.output;
    std::ifstream in(json);
    auto j = nlohmann::json::parse(in);
    EXPECT_EQ(j["run"]["inputs"][0], "2x32:int64");
    auto back = optionsFor(j["run"]["inputs"][0].get<std::string>());
    EXPECT_EQ(back.input_types[0].dtype, "int64");
}

// The sequence what-if, recorded at short sequences, against PyTorch's own peak at the longer one of the fixtures
// (lm_truth "long") and against real runs beyond the records: the peak within 1%, the reserve within 2%.
TEST(LanguageModelWhatIf, SequencePredictionsAgreeWithRunsAtLongerSequences)
{
    SKIP_WITHOUT_LM_FIXTURES();
    for (const auto& c : std::vector<Case> {{"gpt_sdpa", "pt2"}, {"gpt_mha", "pt"}, {"gpt_mha", "pt2"}, {"encoder_mask", "pt2"}}) {
        SCOPED_TRACE(c.model + "." + c.kind);
        const auto& t = lmTruth()["models"][c.model];
        auto& model = opened(c);
        auto base = optionsFor(t["input"].get<std::string>());
        auto w = WhatIf::recordSeq(model, base, {8, 16, 32}, {"float32"});
        ASSERT_EQ(w.axis(), WhatIfAxis::Seq);
        // PyTorch's peak at the fixtures' longer sequence (4x the largest record).
        const auto& long_ = t["long"];
        auto longInput = parseInputs(long_["input"].get<std::string>());
        auto longSeq = longInput.shapes.front()[1];
        auto p = w.predict(longSeq, "float32");
        EXPECT_TRUE(p.extrapolated);
        EXPECT_EQ(p.seq, longSeq);
        expectWithinOnePercent(p.predicted_peak_bytes, long_["inference"][c.kind]["peak_bytes"].get<std::int64_t>(),
            c.model + "." + c.kind + " predicted at sequence " + std::to_string(longSeq) + " from 8, 16, 32");
        // A real run at a length between and beyond: peak and the simulated reserve.
        for (std::int64_t seq : {24, 200}) {
            auto predicted = w.predict(seq, "float32");
            auto o = base;
            o.seq = seq;
            auto measured = analyzeModel(model, o);
            expectWithinOnePercent(predicted.predicted_peak_bytes, measured.peak_bytes,
                c.model + "." + c.kind + " sequence " + std::to_string(seq), "measured run");
            auto reserveError = std::abs(static_cast<double>(predicted.predicted_reserved_bytes - measured.simulated_reserved_peak_bytes))
                / static_cast<double>(measured.simulated_reserved_peak_bytes);
            EXPECT_LE(reserveError, 0.02) << "reserve: predicted " << predicted.predicted_reserved_bytes << " run "
                                          << measured.simulated_reserved_peak_bytes;
        }
    }
}

TEST(LanguageModelWhatIf, TheCliVariesTheSequenceAndWritesItInEveryRow)
{
    SKIP_WITHOUT_LM_FIXTURES();
    auto json = fixture("lm/cli_seq.json");
    auto r = runCommand(std::string(MEMLEDGER_BINARY) + " whatif " + lmFile("gpt_sdpa", "pt2")
        + " --input 2x16:int64 --seq 16,48,256 --dtype float32 --threads 1 --lifetimes graph --budget 541870912 --json " + json);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ifstream in(json);
    auto j = nlohmann::json::parse(in);
    EXPECT_EQ(j["axis"], "seq");
    ASSERT_EQ(j["predictions"].size(), 3u);
    std::vector<std::int64_t> seqs;
    for (const auto& row : j["predictions"]) {
        seqs.push_back(row["seq"].get<std::int64_t>());
        EXPECT_EQ(row["batch"], 2);
    }
    EXPECT_EQ(seqs, (std::vector<std::int64_t> {16, 48, 256}));
    ASSERT_TRUE(j.contains("max_seq"));
    EXPECT_EQ(j["max_seq"][0]["batch"], 2);
}

// The built-in GPT demo (resources/demo_gpt.pt2): it runs in the PyTorch 2 build; libtorch 1.13's build says
// which build opens it.
TEST(LanguageModelDemo, TheGptDemoRunsOrNamesTheBuildThatRunsIt)
{
    if (!canRunExportedPrograms()) {
        try {
            openFileOrDemo("demo:gpt.pt2");
            FAIL() << "libtorch 1.13 opened a torch.export program";
        } catch (const FileError& e) {
            EXPECT_NE(std::string(e.what()).find("needs memledger's PyTorch 2 build"), std::string::npos) << e.what();
        }
        return;
    }
    auto file = openFileOrDemo("demo:gpt-train.pt2");
    ASSERT_EQ(file.default_input_types.size(), 1u);
    EXPECT_EQ(file.default_input_types[0].dtype, "int64");
    RunOptions o;
    o.threads = 1;
    o.inputs = {{2, 64}}; // smaller than the demo's own, to keep the test quick
    o.input_types = file.default_input_types;
    auto report = analyzeOpened(file, o);
    EXPECT_EQ(report.run.mode, RunMode::Train);
    EXPECT_EQ(report.run.optimizer, "adamw");
    EXPECT_EQ(report.run.loss, "next_token");
    EXPECT_EQ(report.optimizer_state_bytes, 2 * report.gradient_bytes) << "AdamW's two moments, the tied head once";
}

// A TorchScript file that PyTorch 2 wrote with an op libtorch 1.13 lacks: the 1.13 build says it needs the PyTorch
// 2 build (not "not a TorchScript model"). The file is written by .venv-torch's PyTorch 2, when it is there.
TEST(LanguageModelScript, AFileFromPyTorch2NamesTheBuildThatReadsIt)
{
    if (canRunExportedPrograms())
        GTEST_SKIP() << "this build reads PyTorch 2's files (the case is libtorch 1.13's)";
    std::string python = std::string(MEMLEDGER_SOURCE_DIR) + "/.venv-torch/bin/python";
    if (!std::ifstream(python))
        GTEST_SKIP() << "no PyTorch 2 to write the file with (" << python << " is made by the default build)";
    std::string out = fixture("gpt_by_pytorch2.pt");
    auto made = runCommand(python + " " + MEMLEDGER_SOURCE_DIR + "/resources/gpt.py " + out);
    ASSERT_EQ(made.exit_code, 0) << made.output;
    try {
        Model::open(out);
        FAIL() << "libtorch 1.13 opened a model with scaled_dot_product_attention";
    } catch (const FileError& e) {
        std::string m = e.what();
        EXPECT_NE(m.find("written by PyTorch 2"), std::string::npos) << m;
        EXPECT_NE(m.find("PyTorch 2 build"), std::string::npos) << m;
    }
}
