// How long a torch.export program's values live (--lifetimes eager|graph) against torch.profiler
// (tests/fixtures/lifetimes_truths.py: lifetimes/truth.json): eager, the default, equals the eager module the
// program was exported from; graph equals torch.export.load(FILE).module(), the graph's generated code.
#include "doc_table.h"
#include "fixture_paths.h"
#include "recording/build_report.h"
#include "recording/model.h"
#include "report/report_summary.h"
#include "run_command.h"
#include "support/format.h"
#include "truth_file.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <map>
#include <memory>
#include <string>

using namespace memledger;
using memledger::test::fixture;
using memledger::test::runCommand;

namespace {

const nlohmann::json& truthFile()
{
    static const nlohmann::json t = memledger::test::readTruth("lifetimes/truth.json", "make_lifetimes_truths");
    return t;
}

// The entry's program, opened once per file.
Model& modelFor(const nlohmann::json& entry)
{
    static std::map<std::string, std::shared_ptr<Model>> models;
    auto& model = models[entry["file"].get<std::string>()];
    if (!model)
        model = std::make_shared<Model>(Model::open(fixture(entry["file"].get<std::string>())));
    return *model;
}

// The entry's input, one intra-op thread (as the truth script), inference with the default lifetimes.
RunOptions optionsFor(const nlohmann::json& entry)
{
    RunOptions o;
    auto parsed = parseInputs(entry["input"].get<std::string>());
    o.inputs = parsed.shapes;
    o.input_types = parsed.types;
    o.threads = 1;
    return o;
}

// One training step as the truth's train_peak takes it: next-token loss, `del out, loss` after backward.
RunOptions trainingStepFor(const nlohmann::json& entry, const std::string& optimizer)
{
    auto o = optionsFor(entry);
    o.mode = RunMode::Train;
    o.optimizer = optimizer;
    o.loss = "next_token";
    o.hold_output = "backward";
    return o;
}

Report recorded(const nlohmann::json& entry, const std::string& lifetimes)
{
    auto o = optionsFor(entry);
    o.lifetimes = lifetimes;
    return analyzeModel(modelFor(entry), o);
}

// Bytes allocated in the step and alive when its backward begins: what the forward and the loss left for it.
std::int64_t aliveWhenBackwardBegins(const Report& r)
{
    const auto* backward = findPhase(r.phases, "backward");
    if (!backward)
        return -1;
    const auto live = liveBytesAfterEachEvent(*r.trace);
    return backward->first_event == 0 || backward->first_event > live.size() ? 0 : live[backward->first_event - 1];
}


class Lifetimes : public ::testing::TestWithParam<std::string> {
protected:
    void SetUp() override
    {
        SKIP_IF_TRUTH_IS_NOT_HERE(truthFile(), true);
        const auto& cases = truthFile()["cases"];
        if (GetParam().rfind("moe_", 0) == 0 && !cases.contains(GetParam()))
            GTEST_SKIP() << "the truths' torch (" << truthFile().value("torch", "") << ") has no torch._grouped_mm, "
                         << "the eager experts' matmul";
        ASSERT_TRUE(cases.contains(GetParam())) << "lifetimes/truth.json has no " << GetParam();
        entry = cases[GetParam()];
    }

    nlohmann::json entry;
};

} // namespace

// Each choice's peak is PyTorch's for the code that runs the program that way, to the byte; the report names the
// choice. The row of docs/cli.md's table is this test's.
TEST_P(Lifetimes, PeakIsPyTorchsForTheCodeThatRunsIt)
{
    std::vector<test::PyTorchFigure> figures;
    std::vector<std::string> cells {GetParam(), entry["input"].get<std::string>()};
    for (const std::string lifetimes : {"eager", "graph"}) {
        auto report = recorded(entry, lifetimes);
        EXPECT_EQ(report.run.lifetimes, lifetimes) << "the report names the choice";
        const auto truth = entry[lifetimes + "_peak_bytes"].get<std::int64_t>();
        figures.push_back({"lifetimes_truth " + GetParam() + " " + lifetimes + "_peak_bytes (torch.profiler on "
                + (lifetimes == "eager" ? "the eager module" : "torch.export.load(FILE).module()") + ")",
            report.peak_bytes, truth, 0});
        cells.push_back(test::groupedBytes(truth));
        cells.push_back(test::groupedBytes(report.peak_bytes));
    }
    test::docTableRow("cli.md", "lifetimes", cells, figures);
}

// A training step with eager lifetimes is the eager module's step (the forward's locals die when it returns, before
// the backward that peaks).
TEST_P(Lifetimes, TrainingStepIsTheEagerModulesStep)
{
    auto report = analyzeModel(modelFor(entry), trainingStepFor(entry, "sgd"));
    EXPECT_EQ(report.run.lifetimes, "eager");
    EXPECT_EQ(report.peak_bytes, entry["eager_train_peak_bytes"].get<std::int64_t>())
        << GetParam() << ": one SGD step, against torch.profiler on the eager module's";
    EXPECT_EQ(aliveWhenBackwardBegins(report), entry["eager_saved_bytes"].get<std::int64_t>())
        << GetParam() << ": what the forward and the loss leave for the backward";
}

// AdamW steps the parameters one by one, and one parameter's temporaries (its denom) stay alive while the next
// one's are made: the order counts. Eager lifetimes step them as the eager module's parameters() lists them, in
// the order they were registered; graph lifetimes as torch.export.load(FILE).module() lists them, in the
// signature's order, a module's own parameters before its submodules'. encdec, exported strict, reads its
// position table first but registered it third: the two orders peak 768 KiB apart there. own_params reads its
// token table (a submodule's) before the class token and position table that are its own.
TEST_P(Lifetimes, AdamWStepsTheParametersInTheModulesOrder)
{
    auto o = trainingStepFor(entry, "adamw");
    for (const std::string lifetimes : {"eager", "graph"}) {
        const auto key = lifetimes + "_adamw_peak_bytes";
        if (!entry.contains(key))
            continue;
        o.lifetimes = lifetimes;
        auto report = analyzeModel(modelFor(entry), o);
        EXPECT_EQ(report.run.lifetimes, lifetimes);
        EXPECT_EQ(report.peak_bytes, entry[key].get<std::int64_t>())
            << GetParam() << ": one AdamW step with " << lifetimes << " lifetimes, against torch.profiler";
    }
}

INSTANTIATE_TEST_SUITE_P(Programs, Lifetimes,
    ::testing::Values("nanogpt_2x64", "nanogpt_4x32", "gpt_sdpa_2x64", "gpt_sdpa_4x32", "gpt_mha_2x64",
        "gpt_mha_4x32", "llama_2x64", "llama_4x32", "encdec_2x64", "encdec_4x32", "hf_wrapped_2x64",
        "hf_wrapped_4x32", "own_params_2x64", "own_params_4x32", "eager_attn_2x64", "eager_attn_4x32", "neo_tuple_2x64",
        "neo_tuple_4x32", "neo_none_2x64", "neo_none_4x32", "proj_layers_2x64", "proj_layers_4x32", "shared_loop_2x64",
        "shared_loop_4x32", "mask_dict_2x64", "mask_dict_4x32", "moe_2x64", "moe_4x32", "eager_attn_ns_2x64",
        "eager_attn_ns_4x32"));


// A torch.autograd.Function in the model (Bloom's GeLUFunction, exported non-strict as memledger.export exports it):
// eager runs its forward under no_grad and keeps what it saves, its input; the program's nodes hold its forward's ops.
// A training step runs the call as one autograd node that keeps its inputs, as eager: what the forward leaves for the
// backward is the eager module's to the byte, where the graph's module (each op saving its own inputs) holds 2.2 times
// as much. The function's own backward is Python the program does not hold: memledger runs the backward of its ops,
// recomputed from the inputs, which keeps more temporaries alive at once than Bloom's hand-written derivative; the
// step's peak is above the eager one's by those, never below, and far under the graph's.
TEST(LifetimesFunction, AnAutogradFunctionKeepsWhatEagerKeeps)
{
    SKIP_IF_TRUTH_IS_NOT_HERE(truthFile(), true);
    for (const std::string name : {"function_2x64", "function_4x32"}) {
        const auto& entry = truthFile()["cases"][name];
        ASSERT_TRUE(entry.is_object()) << "lifetimes/truth.json has no " << name;
        EXPECT_EQ(recorded(entry, "eager").peak_bytes, entry["eager_peak_bytes"].get<std::int64_t>()) << name;
        EXPECT_EQ(recorded(entry, "graph").peak_bytes, entry["graph_peak_bytes"].get<std::int64_t>()) << name;
        auto step = analyzeModel(modelFor(entry), trainingStepFor(entry, "sgd"));
        EXPECT_EQ(aliveWhenBackwardBegins(step), entry["eager_saved_bytes"].get<std::int64_t>())
            << name << ": what the forward and the loss leave for the backward, against torch.profiler on the eager "
            << "module (the graph's module leaves " << entry["graph_saved_bytes"].get<std::int64_t>() << ")";
        const auto truth = entry["eager_train_peak_bytes"].get<std::int64_t>();
        const double over = 100.0 * static_cast<double>(step.peak_bytes - truth) / static_cast<double>(truth);
        EXPECT_GE(step.peak_bytes, truth) << name << ": one SGD step";
        EXPECT_LE(over, 20.0) << name << ": one SGD step, " << step.peak_bytes << " against the eager " << truth;
        EXPECT_LT(step.peak_bytes, entry["graph_train_peak_bytes"].get<std::int64_t>()) << name;
        std::printf("%s: SGD step %+.2f%% against the eager module (the graph's module: %+.2f%%)\n", name.c_str(), over,
            100.0 * static_cast<double>(entry["graph_train_peak_bytes"].get<std::int64_t>() - truth) / static_cast<double>(truth));
    }
}

// A float32 program run in bfloat16 (--dtype bfloat16) is the eager model.to(torch.bfloat16), to the byte, in
// inference and an SGD step: transformers' eager attention computes its softmax in float32 and casts back
// (`softmax(w, dim=-1, dtype=torch.float32).to(query.dtype)`), which the program's nodes tell only in their source
// line, under which Python 3.11 prints carets.
TEST(LifetimesBfloat16, TheProgramConvertedIsTheEagerModelConverted)
{
    SKIP_IF_TRUTH_IS_NOT_HERE(truthFile(), true);
    int checked = 0;
    for (const auto& [name, entry] : truthFile()["cases"].items()) {
        if (!entry.contains("bf16_eager_peak_bytes"))
            continue;
        auto o = optionsFor(entry);
        o.dtype = "bfloat16";
        EXPECT_EQ(analyzeModel(modelFor(entry), o).peak_bytes, entry["bf16_eager_peak_bytes"].get<std::int64_t>())
            << name;
        auto t = trainingStepFor(entry, "sgd");
        t.dtype = "bfloat16";
        EXPECT_EQ(analyzeModel(modelFor(entry), t).peak_bytes, entry["bf16_eager_train_peak_bytes"].get<std::int64_t>())
            << name << ": one SGD step";
        ++checked;
    }
    EXPECT_GE(checked, 4);
}

// transformers 5's mixture of experts on the meta device, where a 47B Mixtral is asked about: the sorted tokens'
// `perm // top_k` (floor_divide, whose meta function PyTorch writes in Python), the expert histogram and the grouped
// matmul run on shapes alone, and the peaks are the profiler's of the eager model: in inference to the byte; in an
// SGD step but for the 8-byte CPU scalar each layer's attention saves for the backward (`* scaling`, a wrapped
// Python number), which a CPU run counts and a meta run, standing for a GPU, leaves in host memory (docs/meta.md).
TEST(LifetimesMeta, MixtureOfExpertsRunsOnMetaAsTheEagerModel)
{
    SKIP_IF_TRUTH_IS_NOT_HERE(truthFile(), true);
    const auto& cases = truthFile()["cases"];
    if (!cases.contains("moe_2x64"))
        GTEST_SKIP() << "the truths' torch has no torch._grouped_mm";
    for (const std::string name : {"moe_2x64", "moe_4x32"}) {
        const auto& entry = cases[name];
        // a model of its own: a run on meta leaves its weights there, and the other tests' shared one runs on the CPU
        auto model = Model::open(fixture(entry["file"].get<std::string>()));
        auto o = optionsFor(entry);
        o.device = "meta";
        EXPECT_EQ(analyzeModel(model, o).peak_bytes, entry["eager_peak_bytes"].get<std::int64_t>()) << name;
        auto t = trainingStepFor(entry, "sgd");
        t.device = "meta";
        const auto short_ = entry["eager_train_peak_bytes"].get<std::int64_t>() - analyzeModel(model, t).peak_bytes;
        EXPECT_TRUE(short_ >= 0 && short_ <= 3 * 8) << name << ": one SGD step on meta, " << short_
                                                   << " bytes under the profiler's (three layers' 8-byte scalars at most)";
    }
}

// Eager is what a run does unless told otherwise, and the eager module's peak is the higher: the Python code keeps
// its locals (q, k, v, att) until its forward returns, the graph drops each after its last reader.
TEST(LifetimesDefault, IsEagerAndHoldsMoreThanTheGraph)
{
    SKIP_IF_TRUTH_IS_NOT_HERE(truthFile(), true);
    const auto& entry = truthFile()["cases"]["nanogpt_2x64"];
    auto report = analyzeModel(modelFor(entry), optionsFor(entry));
    EXPECT_EQ(report.run.lifetimes, "eager");
    EXPECT_EQ(report.peak_bytes, entry["eager_peak_bytes"].get<std::int64_t>());
    EXPECT_GT(entry["eager_peak_bytes"].get<std::int64_t>(), entry["graph_peak_bytes"].get<std::int64_t>());
}

namespace {

bool saysSomewhere(const Report& r, const std::string& words)
{
    for (const auto& note : r.notes)
        if (note.find(words) != std::string::npos)
            return true;
    return false;
}

// The fixture file's inference with one thread and the default lifetimes.
Report defaultRun(const std::string& file)
{
    auto model = Model::open(fixture(file));
    RunOptions o;
    o.threads = 1;
    return analyzeModel(model, o);
}

} // namespace

// A program whose nodes carry no source lines cannot be told eager lifetimes: it runs with the graph's, and the
// report says so and why.
TEST(LifetimesDefault, WithoutSourceLinesTheGraphsAndTheReportSaysWhy)
{
    SKIP_IF_TRUTH_IS_NOT_HERE(truthFile(), true);
    auto report = defaultRun("dtype/llama_f32_nosrc.pt2");
    EXPECT_EQ(report.run.lifetimes, "graph");
    EXPECT_TRUE(saysSomewhere(report, "carry no source lines (stack_trace)")) << "no note says why the lifetimes are the graph's";
}

// A file torch.export.save wrote alone (no memledger.export source facts), traced non-strict: its report says what
// eager lifetimes cannot see there and how to get a file without the limit; one memledger.export wrote says nothing.
TEST(LifetimesDefault, AFileWithoutSourceFactsSaysWhatItsLifetimesCannotSee)
{
    SKIP_IF_TRUTH_IS_NOT_HERE(truthFile(), true);
    auto report = defaultRun("dtype/llama_f32.pt2");
    EXPECT_EQ(report.run.lifetimes, "eager");
    EXPECT_TRUE(saysSomewhere(report, "not saved by memledger.export")) << "no note on the missing source facts";
    EXPECT_TRUE(saysSomewhere(report, "a helper function's lines are not seen")) << "no note on the non-strict trace";
    const auto& entry = truthFile()["cases"]["eager_attn_ns_2x64"];
    EXPECT_FALSE(saysSomewhere(recorded(entry, "eager"), "not saved by memledger.export"));
    // What the file cannot tell qualifies every answer built on its runs: the what-if table's and the fit table's.
    const auto file = fixture("dtype/llama_f32.pt2");
    for (const auto& command : {" whatif " + file + " --batch 1,2", " fit " + file + " --budget 1GB --gpus 1,2 --precision float32"}) {
        auto out = runCommand(memledger::test::memledgerBinary() + command);
        EXPECT_EQ(out.exit_code, 0) << command << "\n" << out.output;
        EXPECT_NE(out.output.find("not saved by memledger.export"), std::string::npos) << command << "\n" << out.output;
    }
}

// A training step of a program with torch.autograd.Function calls says how they ran and that the step errs high;
// inference runs them as any nodes and says nothing.
TEST(LifetimesFunction, ATrainingStepSaysHowTheFunctionsRan)
{
    SKIP_IF_TRUTH_IS_NOT_HERE(truthFile(), true);
    const auto& entry = truthFile()["cases"]["function_2x64"];
    EXPECT_TRUE(saysSomewhere(analyzeModel(modelFor(entry), trainingStepFor(entry, "sgd")),
        "4 calls of a torch.autograd.Function (TanhGeluFunction)"));
    EXPECT_FALSE(saysSomewhere(recorded(entry, "eager"), "torch.autograd.Function"));
}

// The CLI: --lifetimes names the choice in the text report, and refuses anything else with a usage error.
TEST(LifetimesCli, TheTextReportNamesItAndABadValueIsAUsageError)
{
    SKIP_IF_TRUTH_IS_NOT_HERE(truthFile(), true);
    const auto& entry = truthFile()["cases"]["gpt_sdpa_2x64"];
    const auto base = memledger::test::memledgerBinary() + " analyze " + fixture(entry["file"].get<std::string>())
        + " --input " + entry["input"].get<std::string>() + " --threads 1";
    auto graph = runCommand(base + " --lifetimes graph");
    EXPECT_EQ(graph.exit_code, 0) << graph.output;
    EXPECT_NE(graph.output.find("graph lifetimes"), std::string::npos) << graph.output;
    auto eager = runCommand(base);
    EXPECT_EQ(eager.exit_code, 0) << eager.output;
    EXPECT_NE(eager.output.find("eager lifetimes"), std::string::npos) << eager.output;
    auto bad = runCommand(base + " --lifetimes python");
    EXPECT_EQ(bad.exit_code, 2) << bad.output;
    EXPECT_NE(bad.output.find("--lifetimes 'python' is not eager or graph"), std::string::npos) << bad.output;
}
