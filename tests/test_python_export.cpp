// memledger.export (python/memledger/export_program.py) against PyTorch's own figures for the programs it writes
// (tests/fixtures/python_export_truths.py, python_export/python_export_truth.json): a GPT, a Llama and a Hugging
// Face-shaped causal LM (keyword inputs, an output object with logits and a cache, a tied head), each exported
// with real weights and built on meta, and transformers' LlamaForCausalLM where transformers is installed.
// `memledger analyze --json` of each file: the weights counted once equal the model's parameter bytes, the peak
// equals PyTorch's profiler peak of torch.export.load(file).module(), and every module path and tensor name is
// the model's own (no wrapper prefix); the command memledger.export prints runs; a model that cannot be exported
// gets PyTorch's reason and the advice to use memledger.capture. Skipped, with the reason, where the fixtures'
// torch has no torch.export (Debian's 1.13) or this build runs no exported programs.
#include "fixture_paths.h"
#include "recording/model.h"
#include "run_command.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

using memledger::test::fixture;
using memledger::test::runCommand;

namespace {

const nlohmann::json& exportTruth()
{
    static const nlohmann::json truth
        = memledger::test::readTruth("python_export/python_export_truth.json", "make_python_export_fixtures");
    return truth;
}

#define SKIP_WITHOUT_EXPORT_FIXTURES()                                                                                 \
    do {                                                                                                               \
        if (exportTruth().contains("skipped"))                                                                         \
            GTEST_SKIP() << exportTruth()["skipped"].get<std::string>();                                               \
        if (!memledger::canRunExportedPrograms())                                                                      \
            GTEST_SKIP() << "this build's libtorch runs no torch.export programs (the PyTorch 2 build does)";          \
    } while (0)

// Binds `t` to the export truths' edge program `name`, or skips the test with the reason that program was not made
// (a transformers model this Python does not have).
#define EDGE_PROGRAM_OR_SKIP(t, name)                                                                                  \
    SKIP_WITHOUT_EXPORT_FIXTURES();                                                                                    \
    const auto& t = exportTruth()["edge_programs"][name];                                                              \
    ASSERT_TRUE(t.is_object()) << exportTruth()["edge_programs"].dump();                                               \
    if (t.contains("skipped"))                                                                                         \
        GTEST_SKIP() << t["skipped"].get<std::string>()

std::string exportFile(const std::string& file)
{
    return fixture("python_export/" + file);
}

std::string shellQuoted(const std::string& s)
{
    std::string out = "'";
    for (char c : s)
        out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

bool contains(const std::string& text, const std::string& what)
{
    return text.find(what) != std::string::npos;
}

class ExportedByMemledger : public ::testing::TestWithParam<std::string> {
protected:
    void SetUp() override
    {
        SKIP_WITHOUT_EXPORT_FIXTURES();
        const auto& models = exportTruth()["models"];
        if (!models.contains(GetParam())) {
            // NAME_meta is made beside NAME: when NAME was skipped, it says why.
            auto base = GetParam().substr(0, GetParam().rfind("_meta"));
            if (models.contains(base) && models[base].contains("skipped"))
                GTEST_SKIP() << GetParam() << ": " << models[base]["skipped"].get<std::string>();
            GTEST_SKIP() << "the fixtures have no " << GetParam();
        }
        t = models[GetParam()];
        if (t.contains("skipped"))
            GTEST_SKIP() << GetParam() << ": " << t["skipped"].get<std::string>();
    }

    // `memledger analyze FILE --input SPEC --threads 1 [--lifetimes L] --json OUT`, read back.
    nlohmann::json analyze(const std::string& lifetimes = "")
    {
        auto json = fixture("python_export/" + GetParam() + lifetimes + ".report.json");
        std::remove(json.c_str());
        auto r = runCommand(memledger::test::memledgerBinary() + " analyze " + exportFile(t["file"].get<std::string>())
            + " --input " + t["input"].get<std::string>() + " --threads 1"
            + (lifetimes.empty() ? "" : " --lifetimes " + lifetimes) + " --json " + json);
        EXPECT_EQ(r.exit_code, 0) << r.output;
        std::ifstream in(json);
        if (!in)
            return nlohmann::json();
        return nlohmann::json::parse(in);
    }

    nlohmann::json t;
};

TEST_P(ExportedByMemledger, WeightsCountedOnceAndThePeakArePyTorchs)
{
    auto j = analyze();
    ASSERT_TRUE(j.is_object());
    EXPECT_EQ(j["model"]["parameter_bytes"].get<std::int64_t>(), t["parameter_bytes"].get<std::int64_t>())
        << "a tied weight counts once, as model.parameters() yields it once";
    EXPECT_EQ(j["model"]["buffer_bytes"].get<std::int64_t>(), t["buffer_bytes"].get<std::int64_t>());
    // Buffers the eager model holds that the program does not (left out by torch.export): said by the export.
    if (t.value("eager_buffer_bytes", std::int64_t {0}) > t["buffer_bytes"].get<std::int64_t>())
        EXPECT_NE(t["printed"].get<std::string>().find("not in the program: "), std::string::npos) << t["printed"];
    const auto& peakOf = t.contains("peak_of") ? exportTruth()["models"][t["peak_of"].get<std::string>()] : t;
    ASSERT_TRUE(peakOf.contains("peak_bytes") && peakOf.contains("eager_peak_bytes")) << peakOf.dump();
    EXPECT_EQ(j["run"]["lifetimes"], "eager") << "eager lifetimes are the default for a program exported from eager code";
    const auto eagerPeak = peakOf["eager_peak_bytes"].get<std::int64_t>();
    if (peakOf.contains("eager_tolerance"))
        EXPECT_NEAR(static_cast<double>(j["peak_bytes"].get<std::int64_t>()), static_cast<double>(eagerPeak),
            peakOf["eager_tolerance"].get<double>() * static_cast<double>(eagerPeak))
            << peakOf["eager_differs"].get<std::string>();
    else
        EXPECT_EQ(j["peak_bytes"].get<std::int64_t>(), eagerPeak)
            << "PyTorch's profiler peak of the eager model at " << t["input"].get<std::string>();
    auto graph = analyze("graph");
    ASSERT_TRUE(graph.is_object());
    EXPECT_EQ(graph["run"]["lifetimes"], "graph");
    EXPECT_EQ(graph["peak_bytes"].get<std::int64_t>(), peakOf["peak_bytes"].get<std::int64_t>())
        << "PyTorch's profiler peak of torch.export.load(" << peakOf["file"].get<std::string>() << ").module() at "
        << t["input"].get<std::string>();
    if (t.contains("peak_of")) // built on meta: the weights are shapes only and memledger runs it on meta
        EXPECT_EQ(j["run"]["device"], "meta");
}

TEST_P(ExportedByMemledger, ModulePathsAndTensorNamesAreTheModelsOwn)
{
    auto j = analyze();
    ASSERT_TRUE(j.is_object());
    std::set<std::string> own;
    for (const auto& p : t["module_paths"])
        own.insert(p.get<std::string>());
    std::set<std::string> seen;
    for (const auto& layer : j["layers"]) {
        auto path = layer["path"].get<std::string>();
        if (path.empty())
            continue;
        seen.insert(path);
        EXPECT_TRUE(own.count(path)) << "the layer tree has " << path << ", not a module path of the model";
    }
    for (const auto& leaf : t["leaf_paths"])
        EXPECT_TRUE(seen.count(leaf.get<std::string>())) << "the layer tree has no " << leaf.get<std::string>();
    std::set<std::string> names;
    for (const auto& n : t["tensor_names"])
        names.insert(n.get<std::string>());
    ASSERT_FALSE(j["model"]["tensors"].empty());
    for (const auto& tensor : j["model"]["tensors"]) {
        auto name = tensor["name"].get<std::string>();
        EXPECT_TRUE(names.count(name)) << "the file names a tensor " << name << ", not the model's";
    }
}

TEST_P(ExportedByMemledger, TheCommandItPrintsRuns)
{
    ASSERT_TRUE(t["next_analyze"].is_string()) << "memledger.export printed no analyze command:\n"
                                               << t["printed"].get<std::string>();
    // "Next: python -m memledger analyze FILE --input SPEC": the arguments after the file, run by the binary.
    auto args = t["next_analyze"].get<std::string>();
    EXPECT_TRUE(contains(args, "--input " + t["input"].get<std::string>())) << args;
    auto r = runCommand(memledger::test::memledgerBinary() + " analyze " + exportFile(t["file"].get<std::string>())
        + " " + args + " --threads 1");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    // The header lists the inputs run, ", " between them.
    auto inputs = t["input"].get<std::string>();
    for (auto comma = inputs.find(','); comma != std::string::npos; comma = inputs.find(',', comma + 2))
        inputs.replace(comma, 1, ", ");
    EXPECT_TRUE(contains(r.output, "input " + inputs)) << r.output;
}

// `memledger analyze FILE --input INPUT ARGS --threads 1 --json python_export/JSON_NAME` of an exported file, read
// back (null where it did not run).
nlohmann::json analyzed(const nlohmann::json& t, const std::string& args, const std::string& jsonName)
{
    const auto json = exportFile(jsonName);
    std::remove(json.c_str());
    auto r = runCommand(memledger::test::memledgerBinary() + " analyze " + exportFile(t["file"].get<std::string>())
        + " --input " + t["input"].get<std::string>() + args + " --threads 1 --json " + json);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::ifstream in(json);
    return nlohmann::json::parse(in, nullptr, false);
}

// analyzed(t, args, jsonName), expecting its peak to equal `truth`, PyTorch's profiler peak of the eager model
// (`what` names the eager run); returns the report.
nlohmann::json analyzedAtEagerPeak(const nlohmann::json& t, const std::string& args, const std::string& jsonName,
    std::int64_t truth, const std::string& what = "PyTorch's profiler peak of the eager model")
{
    auto j = analyzed(t, args, jsonName);
    EXPECT_EQ(j.value("peak_bytes", std::int64_t {0}), truth) << t["input"].get<std::string>() << ": " << what;
    return j;
}

std::string notesOf(const nlohmann::json& report)
{
    std::string out;
    if (report.is_object())
        for (const auto& n : report.value("notes", nlohmann::json::array()))
            out += n.get<std::string>() + "\n";
    return out;
}

std::vector<std::string> exportedModels()
{
    return {"gpt", "gpt_meta", "llama", "llama_meta", "hf", "hf_meta", "hf_padcheck", "transformers_llama",
        "transformers_llama_meta", "transformers_llama_unpadded", "transformers_llama_unpadded_meta"};
}

INSTANTIATE_TEST_SUITE_P(Models, ExportedByMemledger, ::testing::ValuesIn(exportedModels()),
    [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// The HF-shaped model's output object (logits and a cache) exported as its logits, use_cache off, its head tied.
TEST(MemledgerExport, SaysWhatItDidForAHuggingFaceShapedModel)
{
    SKIP_WITHOUT_EXPORT_FIXTURES();
    auto printed = exportTruth()["models"]["hf"]["printed"].get<std::string>();
    EXPECT_TRUE(contains(printed, "logits of CausalLMOutputWithPast")) << printed;
    EXPECT_TRUE(contains(printed, "use_cache=False")) << printed;
    EXPECT_TRUE(contains(printed, "lm_head.weight is model.embed_tokens.weight")) << printed;
    EXPECT_TRUE(contains(printed, "seq: 1..128")) << printed; // config.max_position_embeddings
    auto gpt = exportTruth()["models"]["gpt"]["printed"].get<std::string>();
    EXPECT_TRUE(contains(gpt, "size 1 in batch was traced as 2")) << gpt;
}

// A position table that keeps rows for padding (RoBERTa's: 130 rows, padding_idx 1, positions from 2): the range
// printed is the sequences the eager model runs, found by running it, not the table's rows.
TEST(MemledgerExport, APositionTablesPaddingRowsAreNotSequence)
{
    SKIP_WITHOUT_EXPORT_FIXTURES();
    const auto& padded = exportTruth()["edge_programs"]["padded_positions"];
    const auto printed = padded["printed"].get<std::string>();
    const auto longest = padded["longest_that_runs"].get<std::int64_t>();
    EXPECT_EQ(longest, 128);
    EXPECT_TRUE(contains(printed, "seq: 1.." + std::to_string(longest) + " ")) << printed;
}

// A branch on the sequence being the model's full length (GPT-Neo's): torch.export guards seq != 64 without a
// suggested fix. The range stops short of that size, says why, and the program runs at its longest.
TEST(MemledgerExport, AGuardOnOneSizeEndsTheRangeBeforeIt)
{
    SKIP_WITHOUT_EXPORT_FIXTURES();
    const auto& full = exportTruth()["edge_programs"]["full_length"];
    const auto printed = full["printed"].get<std::string>();
    ASSERT_FALSE(full.contains("error")) << full["error"].get<std::string>() << "\n" << printed;
    EXPECT_TRUE(contains(printed, "seq: 1..63 (torch.export: the model's code branches on seq == 64)")) << printed;
    const auto file = exportFile(full["file"].get<std::string>());
    auto at = runCommand(memledger::test::memledgerBinary() + " analyze " + file + " --input 2x63:int64 --threads 1");
    EXPECT_EQ(at.exit_code, 0) << at.output;
    auto past = runCommand(memledger::test::memledgerBinary() + " analyze " + file + " --input 2x64:int64 --threads 1");
    EXPECT_NE(past.exit_code, 0) << past.output;
}

// A range the model's code bounds (diffusers' Upsample2D: `if hidden_states.shape[0] >= 64`) is named with its line
// and guard, where memledger.export prints it and in memledger's messages; never with torch.export's symbol.
TEST(MemledgerExport, ARangeFromTheModelsCodeNamesItsLine)
{
    SKIP_WITHOUT_EXPORT_FIXTURES();
    const auto& guard = exportTruth()["edge_programs"]["batch_guard"];
    if (guard.is_null())
        GTEST_SKIP() << "python_export_truths.json has no batch_guard (written before this check)";
    const auto printed = guard["printed"].get<std::string>();
    ASSERT_FALSE(guard.contains("error")) << guard["error"].get<std::string>() << "\n" << printed;
    const std::string why = "the model's code at python_export_truths.py:";
    EXPECT_TRUE(contains(printed, "batch: 1..63 (" + why)) << printed;
    EXPECT_TRUE(contains(printed, "(`if x.shape[0] >= 64:`)")) << printed;
    auto r = runCommand(memledger::test::memledgerBinary() + " whatif " + exportFile(guard["file"].get<std::string>())
        + " --input 4x8 --batch 4,64 --dtype float32 --threads 1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(contains(r.output, "exported for 1..63 (" + why)) << r.output;
    EXPECT_TRUE(contains(r.output, "torch.export's guard x.size()[0] < 64")) << r.output;
    EXPECT_FALSE(std::regex_search(r.output, std::regex(R"(\bs[0-9]+\b)"))) << r.output;
}

// A custom autograd.Function, which strict export wraps in a grad-mode region that would cut its gradient, is
// exported non-strict instead, with the reason: its inference equals PyTorch's profiler of the eager model, and its
// AdamW step errs high (memledger differentiates the Function's forward ops, not its own backward). A torch.no_grad()
// region in the forward (wrap_with_set_grad_enabled either way) is saved and run with autograd off inside: its
// inference and AdamW step equal the profiler's of the eager model.
TEST(MemledgerExport, GradModeRegionsAndFunctionsRunAsTheEagerModel)
{
    SKIP_WITHOUT_EXPORT_FIXTURES();
    const auto& edges = exportTruth()["edge_programs"];
    auto peaks = [](const nlohmann::json& t, const std::string& mode) {
        auto json = std::string(::testing::TempDir()) + "/edge_" + t["file"].get<std::string>() + mode + ".json";
        auto r = runCommand(memledger::test::memledgerBinary() + " analyze " + exportFile(t["file"].get<std::string>())
            + " --input " + t["input"].get<std::string>() + " --threads 1 --json " + json
            + (mode == "train" ? " --mode train --optimizer adamw" : ""));
        EXPECT_EQ(r.exit_code, 0) << r.output;
        std::ifstream in(json);
        return r.exit_code == 0 ? nlohmann::json::parse(in)["peak_bytes"].get<std::int64_t>() : -1;
    };
    const auto& fn = edges["with_function"];
    ASSERT_FALSE(fn.contains("error")) << fn["error"].get<std::string>();
    const auto printed = fn["printed"].get<std::string>();
    EXPECT_TRUE(contains(printed, "wrap_with_set_grad_enabled, which a strict trace makes of a torch.autograd.Function"))
        << printed;
    EXPECT_TRUE(contains(printed, "(non-strict)")) << printed;
    EXPECT_EQ(peaks(fn, "infer"), fn["peak_bytes"].get<std::int64_t>());
    const auto step = peaks(fn, "train"), truth = fn["adamw_peak_bytes"].get<std::int64_t>();
    EXPECT_GE(step, truth) << "the Function's AdamW step errs high, never low";
    EXPECT_LE(static_cast<double>(step), 1.2 * static_cast<double>(truth)) << step << " against " << truth;
    const auto& region = edges["no_grad_region"];
    ASSERT_FALSE(region.contains("error")) << region["error"].get<std::string>();
    EXPECT_TRUE(region["saved"].get<bool>());
    EXPECT_EQ(peaks(region, "infer"), region["peak_bytes"].get<std::int64_t>());
    EXPECT_EQ(peaks(region, "train"), region["adamw_peak_bytes"].get<std::int64_t>())
        << "the AdamW step: the region's ops keep nothing for the backward";
}

// A model with data-dependent control flow: no .pt2, PyTorch's reason with the user's line, and the advice to use
// memledger.capture, as an ExportError. Under a torch without torch.export the error says that instead.
TEST(MemledgerExport, AModelItCannotExportGetsTheReasonAndTheAdviceToCapture)
{
    const std::string dir = fixture("python_export/failure");
    const std::string bad = dir + "/bad.pt2";
    std::remove(bad.c_str());
    auto r = runCommand("PYTHONPATH=" + shellQuoted(std::string(MEMLEDGER_SOURCE_DIR) + "/python") + " "
        + shellQuoted(MEMLEDGER_PYTHON) + " " + shellQuoted(std::string(MEMLEDGER_SOURCE_DIR)
        + "/tests/fixtures/python_export_truths.py") + " --failure " + shellQuoted(dir));
    EXPECT_EQ(r.exit_code, 3) << r.output;
    EXPECT_TRUE(contains(r.output, "ExportError: memledger.export: ")) << r.output;
    EXPECT_TRUE(contains(r.output, "memledger.capture")) << r.output;
    EXPECT_FALSE(std::ifstream(bad).good()) << bad << " was written";
    if (exportTruth().contains("skipped")) {
        EXPECT_TRUE(contains(r.output, "has no torch.export")) << r.output;
        return;
    }
    EXPECT_TRUE(contains(r.output, "cannot trace DataDependent")) << r.output;
    EXPECT_TRUE(contains(r.output, "if x.sum() > 0:")) << r.output; // the user's line that branches on a value
    EXPECT_TRUE(contains(r.output, "strict export")) << r.output;
}

// A model that only a non-strict export traces (a function TorchDynamo must not trace): the strict attempt's reason
// is printed, the non-strict program is saved and memledger runs it.
TEST(MemledgerExport, AStrictFailureIsRetriedNonStrictWithTheReason)
{
    SKIP_WITHOUT_EXPORT_FIXTURES();
    const std::string dir = fixture("python_export/non_strict");
    const std::string file = dir + "/non_strict.pt2";
    std::remove(file.c_str());
    auto r = runCommand("PYTHONPATH=" + shellQuoted(std::string(MEMLEDGER_SOURCE_DIR) + "/python") + " "
        + shellQuoted(MEMLEDGER_PYTHON) + " " + shellQuoted(std::string(MEMLEDGER_SOURCE_DIR)
        + "/tests/fixtures/python_export_truths.py") + " --non-strict " + shellQuoted(dir));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(contains(r.output, "strict export failed: ")) << r.output;
    EXPECT_TRUE(contains(r.output, "torch.compiler.disable")) << r.output; // PyTorch's reason
    EXPECT_TRUE(contains(r.output, "retrying non-strict")) << r.output;
    EXPECT_TRUE(contains(r.output, "(non-strict)")) << r.output;
    auto run = runCommand(memledger::test::memledgerBinary() + " analyze " + file + " --input 2x8:float32 --threads 1");
    EXPECT_EQ(run.exit_code, 0) << run.output;
    EXPECT_TRUE(contains(run.output, "proj")) << run.output;
}

// transformers' LlamaForCausalLM called with input_ids only is an unpadded batch: eager transformers builds no causal
// mask (sdpa's is_causal) and lets sdpa repeat the key/value heads. Exported with causal_mask="skipped", memledger's
// AdamW step equals PyTorch's profiler of the eager model's, to the byte (its inference peak: the parametrized test).
TEST(MemledgerExport, AnUnpaddedTransformersBatchTrainsAsEagerPyTorch)
{
    SKIP_WITHOUT_EXPORT_FIXTURES();
    const auto& t = exportTruth()["models"]["transformers_llama_unpadded"];
    if (t.contains("skipped"))
        GTEST_SKIP() << t["skipped"].get<std::string>();
    EXPECT_TRUE(contains(t["printed"].get<std::string>(), "causal_mask='skipped': the batch unpadded")) << t["printed"];
    auto j = analyzed(t, " --mode train --optimizer adamw --loss next_token", "transformers_llama_unpadded_train.json");
    EXPECT_EQ(j.value("peak_bytes", std::int64_t {0}), t["eager_train_adamw_peak_bytes"].get<std::int64_t>())
        << "PyTorch's profiler peak of the eager model's AdamW step";
    // The unpadded program has no mask to note; the one exported with an attention_mask (built) says its figures err
    // high for an unpadded batch.
    EXPECT_FALSE(contains(notesOf(j), "the causal mask is built")) << notesOf(j);
    auto built = analyzed(exportTruth()["models"]["transformers_llama"], "", "transformers_llama_notes.json");
    EXPECT_TRUE(contains(notesOf(built), "the causal mask is built (memledger.export's default, as a padded batch runs "
                                         "the model): 2 attention calls take it")) << notesOf(built);
    EXPECT_TRUE(contains(notesOf(built), "without attention_mask")) << notesOf(built);
}

// transformers' activation_checkpointing_enable() before memledger.export: torch.export keeps no checkpoint, so the file
// records it and memledger's training step has it. Its peak is PyTorch's profiler of the eager checkpointed model's
// AdamW step within 1%, the report says where the checkpointing came from, and the figures are those of the same
// model exported without it and analysed with --checkpoint full; --checkpoint none gives the step without.
TEST(MemledgerExport, ACheckpointedTransformersModelTrainsCheckpointed)
{
    SKIP_WITHOUT_EXPORT_FIXTURES();
    const auto& t = exportTruth()["models"]["transformers_llama_unpadded_checkpointed"];
    if (t.contains("skipped"))
        GTEST_SKIP() << t["skipped"].get<std::string>();
    EXPECT_TRUE(contains(t["printed"].get<std::string>(), "activation checkpointing (transformers")) << t["printed"];
    const std::string train = " --mode train --optimizer adamw --loss next_token";
    auto j = analyzed(t, train, "transformers_llama_checkpointed_train.json");
    const double truth = t["eager_train_adamw_peak_bytes"].get<double>();
    const double ours = static_cast<double>(j.value("peak_bytes", std::int64_t {0}));
    std::printf("[ export   ] checkpointed LlamaForCausalLM AdamW step: memledger %.0f, PyTorch's profiler %.0f (%+.2f%%)\n",
        ours, truth, 100.0 * (ours - truth) / truth);
    EXPECT_NEAR(ours, truth, 0.01 * truth) << "PyTorch's profiler peak of the eager checkpointed model's AdamW step";
    EXPECT_TRUE(contains(notesOf(j), "exported with activation checkpointing on (transformers")) << notesOf(j);
    auto full = analyzed(exportTruth()["models"]["transformers_llama_unpadded"], train + " --checkpoint full",
        "transformers_llama_full_train.json");
    EXPECT_EQ(full.value("peak_bytes", std::int64_t {0}), j.value("peak_bytes", std::int64_t {-1}));
    auto none = analyzed(t, train + " --checkpoint none", "transformers_llama_checkpointed_none.json");
    EXPECT_GT(none.value("peak_bytes", std::int64_t {0}), j.value("peak_bytes", std::int64_t {0}));
    EXPECT_FALSE(contains(notesOf(none), "exported with activation checkpointing on")) << notesOf(none);
}

// causal_mask="skipped" on a model that is not a transformers one, and a causal_mask that is not a choice: an
// ExportError that says why, and no file.
TEST(MemledgerExport, ACausalMaskChoiceThatCannotApplyIsRefused)
{
    SKIP_WITHOUT_EXPORT_FIXTURES();
    const auto& t = exportTruth()["edge_programs"]["causal_mask_refused"];
    ASSERT_TRUE(t.is_object()) << exportTruth()["edge_programs"].dump();
    ASSERT_TRUE(t["not_transformers"]["error"].is_string()) << t.dump();
    EXPECT_TRUE(contains(t["not_transformers"]["error"].get<std::string>(),
        "causal_mask='skipped': FrozenMLP is not a transformers model")) << t.dump();
    ASSERT_TRUE(t["unknown"]["error"].is_string()) << t.dump();
    EXPECT_TRUE(contains(t["unknown"]["error"].get<std::string>(), "causal_mask is 'sometimes': use one of 'built', 'skipped'"))
        << t.dump();
    EXPECT_FALSE(t["not_transformers"]["saved"].get<bool>());
    EXPECT_FALSE(t["unknown"]["saved"].get<bool>());
}

// causal_mask="skipped" on a model with a sliding window shorter than its positions (transformers' Mistral): eager
// builds the mask from the window's length on, so the export falls back to the mask built and says so; its record
// says "skipped" does not apply and names the window, and memledger's note says an unpadded batch skips the mask only
// below the window, without advising causal_mask="skipped".
TEST(MemledgerExport, ASlidingWindowKeepsTheCausalMask)
{
    EDGE_PROGRAM_OR_SKIP(t, "causal_mask_sliding_window");
    const auto printed = t["printed"].get<std::string>();
    EXPECT_TRUE(contains(printed, "causal_mask='skipped' not applied")) << printed;
    EXPECT_FALSE(contains(printed, "causal_mask='skipped' exports that")) << printed;
    const auto& record = t["record"];
    ASSERT_TRUE(record.is_object()) << t.dump();
    EXPECT_EQ(record["causal_mask"], "built");
    EXPECT_EQ(record["skippable"], false);
    EXPECT_EQ(record["sliding_window"], 16);
    EXPECT_GT(record["masked_attention_calls"].get<int>(), 0);
    auto j = analyzed(t, "", "mistral_sliding_window.json");
    EXPECT_TRUE(contains(notesOf(j), "shorter than the model's sliding window (16 tokens)")) << notesOf(j);
    EXPECT_FALSE(contains(notesOf(j), "causal_mask=")) << notesOf(j);
}

// A sequence range that torch.export narrows on both branches is no sliding window's: transformers' MPT branches on
// seq == max_seq_len with or without its mask, so the unpadded branch and the built one both run up to 255 tokens.
// causal_mask="skipped" is kept (it fell back before, and the program read high with a mask an unpadded batch never
// builds); the program equals PyTorch's profiler of the eager model at the example and at twice its sequence.
TEST(MemledgerExport, ARangeBothBranchesNarrowKeepsTheSkip)
{
    EDGE_PROGRAM_OR_SKIP(t, "range_narrowed_either_way");
    const auto printed = t["printed"].get<std::string>();
    EXPECT_FALSE(contains(printed, "not applied")) << printed;
    EXPECT_TRUE(contains(printed, "causal_mask='skipped': the batch unpadded")) << printed;
    EXPECT_TRUE(contains(printed, "seq: 1..255")) << printed;
    for (const auto& [input, truth] : t["eager_peak_bytes"].items()) {
        nlohmann::json at = t;
        at["input"] = input;
        analyzedAtEagerPeak(at, "", "mpt_range.json", truth.get<std::int64_t>());
    }
}

// A statement over two lines whose second line is traced first: XGLM's attention binds `attn_weights = torch.max(\n
// attn_weights, torch.full(...))`, and torch.full (line two) runs before torch.max (line one). The name it binds is
// the statement's, which the source facts give for either line: the value is held until the view and the softmax
// rebind attn_weights, not until the attention returns (the inference read 13% high). Equal to PyTorch's profiler
// of the eager model.
TEST(MemledgerExport, AStatementTracedFromItsSecondLineBindsItsName)
{
    EDGE_PROGRAM_OR_SKIP(t, "statement_traced_from_its_second_line");
    analyzedAtEagerPeak(t, "", "xglm.json", t["eager_peak_bytes"].get<std::int64_t>());
}

// A mask the model hands its attention itself is no causal mask an unpadded batch skips: transformers' BEiT passes its
// relative position bias as sdpa's attn_mask, on the unpadded branch too, so the export falls back to the program
// as traced and records no mask to skip; memledger's report then says nothing of a causal mask (it said the figures
// erred high by one, which eager builds as well).
TEST(MemledgerExport, AModelsOwnAttentionMaskIsNoCausalMask)
{
    EDGE_PROGRAM_OR_SKIP(t, "own_attention_masks");
    EXPECT_TRUE(contains(t["printed"].get<std::string>(), "causal_mask='skipped' not applied: 2 of 2 attention calls"))
        << t["printed"];
    ASSERT_TRUE(t["record"].is_object()) << t.dump();
    EXPECT_EQ(t["record"]["masked_attention_calls"], 0);
    EXPECT_EQ(t["record"]["attention_calls"], 2);
    auto j = analyzed(t, "", "beit.json");
    EXPECT_GT(j.value("peak_bytes", std::int64_t {0}), 0);
    EXPECT_FALSE(contains(notesOf(j), "mask is built")) << notesOf(j);
}

// An image model (transformers' ViT) exported with memledger.export's defaults: its input holds no token ids, no
// batch of it is padded, and eager transformers builds no attention mask for it (nor does FakeTensorMode), so the
// program builds none either. Its inference and AdamW step equal PyTorch's profiler of the eager model to the byte
// (with the mask built, as torch.export traces it, the step read 3.7% high).
TEST(MemledgerExport, AnImageModelExportsWithoutTheMask)
{
    EDGE_PROGRAM_OR_SKIP(t, "vision_default");
    const auto printed = t["printed"].get<std::string>();
    EXPECT_TRUE(contains(printed, "causal_mask='skipped' (the default where the inputs hold no token ids: pixels")) << printed;
    ASSERT_TRUE(t["record"].is_object()) << t.dump();
    EXPECT_EQ(t["record"]["causal_mask"], "skipped");
    EXPECT_EQ(t["record"]["masked_attention_calls"], 0);
    // held by a user's module, as a vision fine-tune wraps it
    ASSERT_TRUE(t["wrapped_record"].is_object()) << t.dump();
    EXPECT_EQ(t["wrapped_record"]["causal_mask"], "skipped");
    analyzedAtEagerPeak(t, "", "vit_default.json", t["eager_peak_bytes"].get<std::int64_t>());
    auto step = analyzedAtEagerPeak(t, " --mode train --optimizer adamw", "vit_default_train.json",
        t["eager_train_adamw_peak_bytes"].get<std::int64_t>(), "PyTorch's profiler peak of the eager model's AdamW step");
    EXPECT_FALSE(contains(notesOf(step), "the causal mask is built")) << notesOf(step);
}

// Eager attention (transformers' T5: no scaled_dot_product_attention call to count) with token inputs: the default
// builds the masks, as a padded batch does; export counts those an unpadded batch does not build (its program traced
// again on the unpadded branch) and says so, and memledger's note says it. The program exported with
// causal_mask="skipped" equals PyTorch's profiler of the eager model called without an attention_mask, to the byte
// (with the masks built it read 4% high at seq 128).
TEST(MemledgerExport, EagerAttentionsMasksAreCountedAndSkipped)
{
    EDGE_PROGRAM_OR_SKIP(t, "eager_attention_masks");
    const auto printed = t["printed"].get<std::string>();
    EXPECT_TRUE(contains(printed, "masks an unpadded batch does not build")) << printed;
    ASSERT_TRUE(t["record"].is_object()) << t.dump();
    EXPECT_EQ(t["record"]["causal_mask"], "built");
    EXPECT_EQ(t["record"]["attention_calls"], 0);
    EXPECT_GT(t["record"]["unpadded_skips"].get<int>(), 0);
    auto built = analyzed(t, "", "t5_masks_built.json");
    EXPECT_TRUE(contains(notesOf(built), "masks that an unpadded batch")) << notesOf(built);
    EXPECT_GT(built.value("peak_bytes", std::int64_t {0}), t["eager_peak_bytes"].get<std::int64_t>())
        << "the masks an unpadded batch does not build";
    nlohmann::json skipped = t;
    skipped["file"] = t["skipped_file"];
    auto unpadded = analyzedAtEagerPeak(skipped, "", "t5_masks_skipped.json", t["eager_peak_bytes"].get<std::int64_t>());
    EXPECT_FALSE(contains(notesOf(unpadded), "is built")) << notesOf(unpadded);
}

// An object a function makes by its class's name holds what its arguments read: transformers' BartModel returns a
// Seq2SeqModelOutput of `encoder_outputs.last_hidden_state` and the decoder's, and the caller's `outputs` holds both
// until it returns. memledger's inference of BART equals PyTorch's profiler of the eager model to the byte (it read
// 8.3% low when the returned object was taken to hold nothing).
TEST(MemledgerExport, AReturnedOutputObjectHoldsItsArguments)
{
    EDGE_PROGRAM_OR_SKIP(t, "encoder_decoder_outputs");
    analyzedAtEagerPeak(t, "", "bart_skipped.json", t["eager_peak_bytes"].get<std::int64_t>());
}

// A program runs in the mode it was exported in. DropNet (a dropout of p 0.25, a BatchNorm, a dropout of p 0) exported
// from model.train() trains as the eager model in model.train() does (PyTorch's profiler of its AdamW step, to the
// byte); exported from model.eval() it trains without the dropout's mask and BatchNorm's batch statistics, and
// both memledger.export and the training report say so, counting the dropout of p 0 out. Its inference equals the
// eager model's in model.eval(). The program exported from model.train() runs an inference with the dropout's mask
// and the batch's statistics, and export and the inference's report say so (transformers' GPT-BigCode, exported
// from model.train(), read 52% above its model.eval() inference without a word: its attention's dropout_p).
TEST(MemledgerExport, AProgramExportedInEvalModeSaysSoWhenItTrains)
{
    SKIP_WITHOUT_EXPORT_FIXTURES();
    const auto& t = exportTruth()["training_modes"];
    EXPECT_TRUE(contains(t["eval"]["printed"].get<std::string>(), "eval mode: 1 dropout (p > 0) and 1 BatchNorm run as in eval"))
        << t["eval"]["printed"];
    EXPECT_FALSE(contains(t["train"]["printed"].get<std::string>(), "eval mode")) << t["train"]["printed"];
    auto step = [&](const std::string& mode, const std::string& run) {
        const auto json = exportFile("modes_" + mode + "_" + run + ".json");
        auto r = runCommand(memledger::test::memledgerBinary() + " analyze " + exportFile(t[mode]["file"].get<std::string>())
            + " --input " + t["input"].get<std::string>() + " --mode " + run + (run == "train" ? " --optimizer adamw" : "") + " --threads 1 --json " + json);
        EXPECT_EQ(r.exit_code, 0) << r.output;
        std::ifstream in(json);
        auto j = nlohmann::json::parse(in, nullptr, false);
        std::string notes;
        for (const auto& n : j.value("notes", nlohmann::json::array()))
            notes += n.get<std::string>() + "\n";
        return std::make_pair(j.value("peak_bytes", std::int64_t {0}), notes);
    };
    const auto truth = t["eager_train_adamw_peak_bytes"].get<std::int64_t>();
    auto [trained, trainNotes] = step("train", "train");
    EXPECT_EQ(trained, truth) << "PyTorch's profiler peak of the eager model's AdamW step in model.train()";
    EXPECT_FALSE(contains(trainNotes, "exported from model.eval()")) << trainNotes;
    auto [evalTrained, evalNotes] = step("eval", "train");
    EXPECT_TRUE(contains(evalNotes, "exported from model.eval(): in this training step 1 dropout runs as the identity and "
        "1 BatchNorm uses the running statistics")) << evalNotes;
    EXPECT_LT(evalTrained, truth) << "no dropout mask, no saved batch statistics";
    auto [inferred, inferenceNotes] = step("eval", "inference");
    EXPECT_EQ(inferred, t["eager_eval_peak_bytes"].get<std::int64_t>()) << "PyTorch's profiler peak of the eager model in model.eval()";
    EXPECT_FALSE(contains(inferenceNotes, "exported from model.")) << inferenceNotes;
    // and the other way round: an inference of the program exported from model.train() runs its dropout and its
    // BatchNorm as in training, above the eager model's inference in model.eval(); export and report say so
    EXPECT_TRUE(contains(t["train"]["printed"].get<std::string>(), "train mode: 1 dropout (p > 0) and 1 BatchNorm on "
        "the batch's statistics run as in training in this file, in an inference too")) << t["train"]["printed"];
    EXPECT_FALSE(contains(t["eval"]["printed"].get<std::string>(), "train mode")) << t["eval"]["printed"];
    auto [trainInferred, trainInferenceNotes] = step("train", "inference");
    EXPECT_TRUE(contains(trainInferenceNotes, "exported from model.train(): in this inference 1 dropout drops and 1 "
        "BatchNorm takes the batch's statistics")) << trainInferenceNotes;
    EXPECT_GT(trainInferred, t["eager_eval_peak_bytes"].get<std::int64_t>()) << "the dropout's mask";
}

// A frozen layer (requires_grad_(False), as a fine-tune freezes a backbone) is stored with requires_grad false:
// it takes no gradient and no optimizer state, and the AdamW step equals PyTorch's profiler of the eager model to
// the byte (a parameter taken as trainable added its gradient, its moments and its backward's matmuls: +54%).
TEST(MemledgerExport, FrozenParametersTakeNoGradients)
{
    SKIP_WITHOUT_EXPORT_FIXTURES();
    const auto& t = exportTruth()["edge_programs"]["frozen"];
    const auto json = exportFile("frozen_train.json");
    auto r = runCommand(memledger::test::memledgerBinary() + " analyze " + exportFile(t["file"].get<std::string>())
        + " --input " + t["input"].get<std::string>() + " --mode train --optimizer adamw --threads 1 --json " + json);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ifstream in(json);
    const auto j = nlohmann::json::parse(in);
    EXPECT_EQ(j["model"]["parameter_bytes"], t["parameter_bytes"]) << "the frozen weights are still weights";
    EXPECT_EQ(j["gradient_bytes"], t["gradient_bytes"]);
    EXPECT_EQ(j["optimizer_state_bytes"], t["optimizer_state_bytes"]);
    EXPECT_EQ(j["peak_bytes"], t["peak_bytes"]) << "PyTorch's profiler peak of the eager model's AdamW step";
    EXPECT_LT(t["gradient_bytes"].get<std::int64_t>(), t["parameter_bytes"].get<std::int64_t>());
    // The report and --tensors say which parameters are frozen.
    std::set<std::string> frozen;
    for (const auto& tensor : j["model"]["tensors"])
        if (!tensor.value("requires_grad", true))
            frozen.insert(tensor["name"].get<std::string>());
    EXPECT_EQ(frozen, (std::set<std::string> {"backbone.weight", "backbone.bias"}));
    auto listed = runCommand(memledger::test::memledgerBinary() + " analyze " + exportFile(t["file"].get<std::string>())
        + " --input " + t["input"].get<std::string>() + " --threads 1 --tensors");
    ASSERT_EQ(listed.exit_code, 0) << listed.output;
    EXPECT_NE(listed.output.find("2 parameters frozen: no gradient, no optimizer state"), std::string::npos) << listed.output;
    EXPECT_NE(listed.output.find("frozen   "), std::string::npos) << listed.output;
}

// A higher-order operator (torch.cond, a region with autocast turned off) has a subgraph of its own: memledger
// refuses the program naming the operator and what to use instead, as a model file it cannot run (exit 3), not as
// a damaged graph (the subgraph's own names were once taken for values of the program it never made).
TEST(MemledgerExport, HigherOrderOperatorsAreRefusedWithTheReason)
{
    SKIP_WITHOUT_EXPORT_FIXTURES();
    int checked = 0;
    for (const auto& [name, t] : exportTruth()["edge_programs"]["higher_order"].items()) {
        SCOPED_TRACE(name);
        if (t.contains("skipped"))
            continue;
        auto r = runCommand(memledger::test::memledgerBinary() + " analyze " + exportFile(t["file"].get<std::string>())
            + " --input " + t["input"].get<std::string>() + " --threads 1");
        EXPECT_EQ(r.exit_code, 3) << r.output;
        EXPECT_TRUE(contains(r.output, "a higher-order operator with a subgraph of its own")) << r.output;
        EXPECT_TRUE(contains(r.output, t["targets"][0].get<std::string>())) << r.output;
        EXPECT_TRUE(contains(r.output, "memledger.capture")) << r.output;
        EXPECT_FALSE(contains(r.output, "damaged")) << r.output;
        ++checked;
    }
    if (checked == 0)
        GTEST_SKIP() << "this torch.export wrote no higher-order operator: "
                     << exportTruth()["edge_programs"]["higher_order"].dump();
}

} // namespace
