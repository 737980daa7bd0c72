// `--dtype` on a torch.export program exported in another precision (tests/fixtures/dtype_exports.py): memledger
// converts its floating weights and the exported type its graph passes, but for the ops whose source names that
// type. The truth is the same model exported after model.to(torch.bfloat16), which PyTorch runs in bfloat16: its
// figures from PyTorch (parameter count, torch.profiler's peaks, an AdamW step's gradients and state) and its
// recorded run, which the converted run must equal ledger by ledger, on the CPU and on the meta device. Skipped,
// with the reason, where the build runs no torch.export programs (1.13).
#include "doc_table.h"
#include "truth_file.h"
#include "recording/build_report.h"
#include "recording/model.h"
#include "run_command.h"
#include "support/format.h"
#include "whatif/whatif.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <string>

using namespace memledger;
using memledger::test::docTableRow;
using memledger::test::fixture;
using memledger::test::groupedBytes;
using memledger::test::runCommand;

namespace {

const nlohmann::json& dtypeTruth()
{
    static const nlohmann::json truth = test::readTruth("dtype/dtype_truth.json", "make_dtype_fixtures");
    return truth;
}

#define SKIP_WITHOUT_DTYPE_FIXTURES() SKIP_IF_TRUTH_IS_NOT_HERE(dtypeTruth(), true)

// The fixtures' input (at `batch` when given) in `dtype` on `device` ("" for the file's default), an AdamW step in
// training.
RunOptions options(const std::string& dtype, const std::string& device, RunMode mode, std::int64_t batch = 0)
{
    RunOptions o;
    auto parsed = parseInputs(dtypeTruth()["input"].get<std::string>());
    o.inputs = parsed.shapes;
    o.input_types = parsed.types;
    o.threads = 1;
    o.dtype = dtype;
    o.device = device;
    o.mode = mode;
    o.optimizer = "adamw";
    o.lifetimes = "graph"; // the truths run torch.export.load(FILE).module(): the graph's lifetimes
    if (batch > 0)
        o.inputs.front().front() = batch;
    return o;
}

Report run(const std::string& file, const std::string& dtype, const std::string& device, RunMode mode, std::int64_t batch = 0)
{
    auto model = Model::open(fixture("dtype/" + file));
    return analyzeModel(model, options(dtype, device, mode, batch));
}

std::string noteWith(const Report& r, const std::string& text)
{
    for (const auto& n : r.notes)
        if (n.find(text) != std::string::npos)
            return n;
    return {};
}

// Every figure of two runs of one step, ledger by ledger; temporaries too unless `temporaries` is false (a meta run
// against the CPU's), when the activations differ by `activations` (what they differ by in the exported precision).
void expectSameRun(const Report& converted, const Report& exported, const std::string& what, bool temporaries = true,
    std::int64_t activations = 0)
{
    EXPECT_EQ(converted.weight_bytes, exported.weight_bytes) << what;
    EXPECT_EQ(converted.input_bytes, exported.input_bytes) << what;
    EXPECT_EQ(converted.gradient_bytes, exported.gradient_bytes) << what;
    EXPECT_EQ(converted.optimizer_state_bytes, exported.optimizer_state_bytes) << what;
    for (int l = 0; l < kLedgerCount; ++l) {
        const auto ledger = static_cast<Ledger>(l);
        if (!temporaries && ledger == Ledger::Temporaries)
            continue;
        const auto& c = converted.ledgers[static_cast<std::size_t>(l)];
        const auto& e = exported.ledgers[static_cast<std::size_t>(l)];
        EXPECT_EQ(c.total, e.total + (ledger == Ledger::Activations ? activations : 0)) << what << ": " << ledgerName(ledger) << " total";
        if (temporaries)
            EXPECT_EQ(c.at_peak, e.at_peak) << what << ": " << ledgerName(ledger) << " at the peak";
    }
    if (temporaries) {
        EXPECT_EQ(converted.peak_bytes, exported.peak_bytes) << what;
        EXPECT_EQ(converted.simulated_reserved_peak_bytes, exported.simulated_reserved_peak_bytes) << what;
    }
}

void expectWithinOnePercent(std::int64_t got, std::int64_t expected, const std::string& what)
{
    const auto g = static_cast<double>(got), e = static_cast<double>(expected);
    std::printf("[ peak     ] %s: memledger %lld PyTorch %lld (%+.3f%%)\n", what.c_str(), static_cast<long long>(got),
        static_cast<long long>(expected), (g - e) / e * 100.0);
    EXPECT_LE(std::abs(g - e), 0.01 * e) << what << ": memledger " << got << ", PyTorch " << expected;
}

} // namespace

// A float32 program run with --dtype bfloat16 against the program exported from the bfloat16 model: every ledger,
// the peak and the simulated reserve equal; and both against PyTorch's own figures for the bfloat16 program. GPT
// passes no type of its own; the Llama computes its RMSNorm in float32 (x.float(), then type_as(x)) and returns
// logits.float(), which the converted run keeps as its source says; the Hugging Face-style decoder upcasts with
// .to(torch.float32) and softmax(dtype=torch.float32) and fills its mask with torch.finfo(dtype).min; olmo's norm
// casts twice on one line, once per norm (each norm's first cast keeps float32: memledger counted the line's casts
// over the whole program, and from the second norm on converted them too, 2.7% under in its training step).
TEST(ExportDtype, ConvertedProgramsAreTheirBfloat16Exports)
{
    SKIP_WITHOUT_DTYPE_FIXTURES();
    for (const std::string name : {"gpt", "llama", "hf", "olmo"}) {
        const auto& t = dtypeTruth()["models"][name];
        for (auto mode : {RunMode::Inference, RunMode::Train}) {
            const std::string what = name + (mode == RunMode::Train ? " adamw step" : " inference");
            SCOPED_TRACE(what);
            auto converted = run(name + "_f32.pt2", "bfloat16", "cpu", mode);
            auto exported = run(name + "_bf16.pt2", "bfloat16", "cpu", mode);
            auto asFloat = run(name + "_f32.pt2", "float32", "cpu", mode);
            auto note = noteWith(converted, "converted: exported in float32, run in bfloat16");
            EXPECT_FALSE(note.empty()) << "the report says the run was converted";
            EXPECT_TRUE(noteWith(exported, "converted").empty()) << "a run in the exported precision is not converted";
            EXPECT_EQ(converted.run.dtype, "bfloat16");
            expectSameRun(converted, exported, what);
            EXPECT_EQ(converted.weight_bytes, t["parameter_bytes"].get<std::int64_t>() + t["buffer_bytes"].get<std::int64_t>());
            const auto truthPeak = mode == RunMode::Train ? t["adamw"]["peak_bytes"].get<std::int64_t>()
                                                          : t["inference_peak_bytes"].get<std::int64_t>();
            expectWithinOnePercent(converted.peak_bytes, truthPeak, what);
            if (mode == RunMode::Train) {
                const auto& step = t["adamw"];
                EXPECT_EQ(converted.gradient_bytes, step["gradient_bytes"].get<std::int64_t>());
                EXPECT_EQ(converted.optimizer_state_bytes, step["optimizer_state_bytes"].get<std::int64_t>());
            }
            std::printf("[ convert  ] %s: float32 peak %lld, bfloat16 converted %lld, exported in bfloat16 %lld; %s\n",
                what.c_str(), static_cast<long long>(asFloat.peak_bytes), static_cast<long long>(converted.peak_bytes),
                static_cast<long long>(exported.peak_bytes), note.c_str());
            // docs/meta.md, "--dtype on a .pt2": this run's row. Its bfloat16 figures are this CPU's kernels' (oneDNN
            // picks them by the CPU's instructions: avx512_bf16, AMX), checked here against PyTorch's run on the same
            // machine; the row itself is checked for its key only.
            auto kept = note.substr(note.find("; ") == std::string::npos ? note.size() : note.find("; ") + 2);
            docTableRow("meta.md", "dtype-conversion",
                {what, groupedBytes(asFloat.peak_bytes), groupedBytes(converted.peak_bytes), groupedBytes(exported.peak_bytes),
                    groupedBytes(truthPeak),
                    kept.substr(0, kept.find(" because"))},
                {{"dtype_truth " + name + (mode == RunMode::Train ? " adamw step peak" : " inference peak")
                        + " (bfloat16 program)",
                    converted.peak_bytes, truthPeak, 0.01}},
                false);
        }
    }
}

// The same on the meta device: the float32 program built on meta, run in bfloat16, is the program exported from
// the bfloat16 model on meta, ledger by ledger; and every ledger but the temporaries is the CPU's converted run, the
// activations but for what meta's differ from the CPU's by in float32 (test_meta's llama_gqa rows: a few bytes).
TEST(ExportDtype, MetaWeightsConvertToo)
{
    SKIP_WITHOUT_DTYPE_FIXTURES();
    if (!metaRunsSupported())
        GTEST_SKIP() << "this build's libtorch has no meta runs";
    for (auto mode : {RunMode::Inference, RunMode::Train}) {
        const std::string what = std::string("llama on meta") + (mode == RunMode::Train ? " adamw step" : " inference");
        SCOPED_TRACE(what);
        auto converted = run("llama_meta_f32.pt2", "bfloat16", "", mode);
        auto exported = run("llama_meta_bf16.pt2", "bfloat16", "", mode);
        auto cpu = run("llama_f32.pt2", "bfloat16", "cpu", mode);
        auto activations = [](const Report& r) { return r.ledgers[static_cast<std::size_t>(Ledger::Activations)].total; };
        const auto inFloat32 = activations(run("llama_meta_f32.pt2", "float32", "", mode))
            - activations(run("llama_f32.pt2", "float32", "cpu", mode));
        EXPECT_EQ(converted.run.device, "meta");
        EXPECT_FALSE(noteWith(converted, "converted").empty());
        expectSameRun(converted, exported, what);
        expectSameRun(converted, cpu, what + " against the CPU", false, inFloat32);
        EXPECT_LE(converted.peak_bytes, cpu.peak_bytes) << "a meta kernel makes no temporaries the CPU's does not";
    }
}

// The what-if records bfloat16 itself for a float32 program (it used to rescale the float32 records), and its
// bfloat16 rows are the direct converted runs.
TEST(ExportDtype, WhatIfRecordsTheConvertedPrecision)
{
    SKIP_WITHOUT_DTYPE_FIXTURES();
    if (!metaRunsSupported())
        GTEST_SKIP() << "this build's libtorch has no meta runs";
    auto model = Model::open(fixture("dtype/llama_meta_f32.pt2"));
    auto base = options("float32", "", RunMode::Train);
    auto w = WhatIf::record(model, base, {2, 4}, {"float32", "bfloat16"});
    EXPECT_TRUE(w.isRecorded("bfloat16")) << "bfloat16 recorded, not rescaled from float32";
    for (std::int64_t batch : {1, 3, 8}) {
        auto p = w.predict(batch, "bfloat16");
        auto direct = run("llama_meta_f32.pt2", "bfloat16", "", RunMode::Train, batch);
        EXPECT_EQ(p.predicted_peak_bytes, direct.peak_bytes) << "batch " << batch;
        EXPECT_EQ(p.predicted_peak_total_bytes, direct.peak_total_bytes) << "batch " << batch;
    }
}

// A graph without source lines cannot tell a cast the model makes on purpose: everything runs converted, and the
// report says what that leaves out. The CLI says it too.
TEST(ExportDtype, WithoutSourceLinesTheNoteSaysWhatIsMissed)
{
    SKIP_WITHOUT_DTYPE_FIXTURES();
    auto bare = run("llama_f32_nosrc.pt2", "bfloat16", "cpu", RunMode::Inference);
    auto exported = run("llama_bf16.pt2", "bfloat16", "cpu", RunMode::Inference);
    EXPECT_FALSE(noteWith(bare, "carry no source lines").empty());
    EXPECT_EQ(bare.weight_bytes, exported.weight_bytes);
    EXPECT_LT(bare.peak_bytes, exported.peak_bytes) << "the RMSNorm's float32 copies are missed";
    auto r = runCommand(std::string(MEMLEDGER_BINARY) + " analyze " + fixture("dtype/llama_f32.pt2") + " --input "
        + dtypeTruth()["input"].get<std::string>() + " --threads 1 --dtype bfloat16");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("ops keep float32 because the model's source names it"), std::string::npos) << r.output;
}

// A precision the what-if did not record is rescaled from another by element width: the gradients and the optimizer
// state too (they are the parameters' type). GPT passes no type of its own, so on meta (no kernel scratch) the
// bfloat16 rows rescaled from float32 records are the converted program's direct runs: the optimizer state to the
// byte, the peak total within 0.5% (the rescaling scales every allocation, the loss's integer targets too).
TEST(ExportDtype, RescaledPrecisionsScaleTheOptimizerState)
{
    SKIP_WITHOUT_DTYPE_FIXTURES();
    if (!metaRunsSupported())
        GTEST_SKIP() << "this build's libtorch has no meta runs";
    auto model = Model::open(fixture("dtype/gpt_f32.pt2"));
    auto base = options("float32", "meta", RunMode::Train);
    auto w = WhatIf::record(model, base, {2, 4}, {"float32"});
    ASSERT_FALSE(w.isRecorded("bfloat16"));
    for (std::int64_t batch : {2, 4}) {
        auto p = w.predict(batch, "bfloat16");
        auto direct = run("gpt_f32.pt2", "bfloat16", "meta", RunMode::Train, batch);
        EXPECT_EQ(p.ledgers_at_peak[static_cast<std::size_t>(Ledger::OptimizerState)], direct.optimizer_state_bytes)
            << "batch " << batch;
        std::printf("[ rescaled ] batch %lld: predicted peak total %lld, direct %lld\n", static_cast<long long>(batch),
            static_cast<long long>(p.predicted_peak_total_bytes), static_cast<long long>(direct.peak_total_bytes));
        EXPECT_NEAR(static_cast<double>(p.predicted_peak_total_bytes), static_cast<double>(direct.peak_total_bytes),
            0.005 * static_cast<double>(direct.peak_total_bytes))
            << "batch " << batch;
    }
}
