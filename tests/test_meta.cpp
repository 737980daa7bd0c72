// Runs on the meta device (shapes only, no memory) against the same runs on the CPU: the GPT demo, the conv demos
// (MNIST, RFBNet), the language-model fixtures (tests/fixtures/lm_models.py, lm_zoo.py), inference and training
// steps (SGD, AdamW), and the what-if. Every ledger but the temporaries is the CPU's, but for the measured
// differences listed with the language models; the peak is the CPU's less at most the temporaries the CPU kernels
// allocate inside themselves (oneDNN scratch, im2col), which a meta kernel does not. Skipped, with the reason,
// where the build's libtorch has no meta runs (1.13).
#include "demo_model.h"
#include "doc_table.h"
#include "truth_file.h"
#include "recording/build_report.h"
#include "recording/model.h"
#include "report/trace.h"
#include "run_command.h"
#include "session/open_file.h"
#include "support/errors.h"
#include "support/format.h"
#include "whatif/checkpoint.h"
#include "whatif/whatif.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

using namespace memledger;
using memledger::test::fixture;
using memledger::test::runCommand;
using memledger::test::docTableRow;
using memledger::test::groupedBytes;

namespace {

#define SKIP_WITHOUT_META()                                                                                            \
    do {                                                                                                               \
        if (!metaRunsSupported())                                                                                      \
            GTEST_SKIP() << "this build's libtorch (" << torchBuildInfo() << ") has no meta runs (the PyTorch 2 build does)"; \
    } while (0)

const nlohmann::json& lmTruth()
{
    static const nlohmann::json truth = test::readTruth("lm/lm_truth.json", "make_lm_fixtures");
    return truth;
}

RunOptions optionsFor(const std::string& input, const std::string& device)
{
    RunOptions o;
    if (!input.empty()) {
        auto parsed = parseInputs(input);
        o.inputs = parsed.shapes;
        o.input_types = parsed.types;
    }
    o.threads = 1;
    o.device = device;
    o.lifetimes = "graph"; // the truths run torch.export.load(FILE).module(): the graph's lifetimes
    return o;
}

// Every ledger but the temporaries equal over the run; the meta peak at most the CPU's, and short of it by no more
// than the temporaries alive at the CPU's peak (the peak may fall at another moment, so the ledgers at the peak are
// printed, not compared). `extra.activations`: what meta's activations total exceeds the CPU's
// by.
// For the language models (MetaLanguageModel): `extra.saved`, what meta's saved activations differ by, and
// `extra.boundTemporaries` false where meta takes another path than the CPU's fused kernel and makes temporaries of
// its own.
struct Extra {
    std::int64_t activations = 0;
    std::int64_t saved = 0;
    bool boundTemporaries = true;
};

// `pytorch`: PyTorch's own figures for the CPU run (the fixtures' truths), checked with its doc row.
void expectSameButTemporaries(const Report& cpu, const Report& meta, const std::string& what, Extra extra,
    const std::vector<test::PyTorchFigure>& pytorch)
{
    EXPECT_EQ(meta.run.device, "meta");
    EXPECT_EQ(cpu.run.device, "cpu");
    bool noted = false;
    for (const auto& n : meta.notes)
        noted = noted || n.find("meta-device run") != std::string::npos;
    EXPECT_TRUE(noted) << "the report says it is a meta run";
    EXPECT_EQ(meta.weight_bytes, cpu.weight_bytes) << what;
    EXPECT_EQ(meta.input_bytes, cpu.input_bytes) << what;
    EXPECT_EQ(meta.gradient_bytes, cpu.gradient_bytes) << what;
    EXPECT_EQ(meta.optimizer_state_bytes, cpu.optimizer_state_bytes) << what;
    for (int l = 0; l < kLedgerCount; ++l) {
        auto ledger = static_cast<Ledger>(l);
        const auto& c = cpu.ledgers[static_cast<std::size_t>(l)];
        const auto& m = meta.ledgers[static_cast<std::size_t>(l)];
        std::printf("[ ledger   ] %s %-18s cpu %12lld (at peak %12lld)  meta %12lld (at peak %12lld)\n", what.c_str(),
            ledgerName(ledger), static_cast<long long>(c.total), static_cast<long long>(c.at_peak),
            static_cast<long long>(m.total), static_cast<long long>(m.at_peak));
        if (ledger == Ledger::Activations)
            EXPECT_EQ(m.total, c.total + extra.activations) << what << ": " << ledgerName(ledger);
        else if (ledger == Ledger::SavedActivations)
            EXPECT_EQ(m.total, c.total + extra.saved) << what << ": " << ledgerName(ledger);
        else if (ledger != Ledger::Temporaries)
            EXPECT_EQ(m.total, c.total) << what << ": " << ledgerName(ledger);
        else if (extra.boundTemporaries)
            EXPECT_LE(m.total, c.total) << what << ": a meta kernel makes no temporaries the CPU's does not";
    }
    std::printf("[ differs  ] %s: activations %+lld saved %+lld temporaries %+lld\n", what.c_str(),
        static_cast<long long>(meta.ledgers[static_cast<std::size_t>(Ledger::Activations)].total
            - cpu.ledgers[static_cast<std::size_t>(Ledger::Activations)].total),
        static_cast<long long>(meta.ledgers[static_cast<std::size_t>(Ledger::SavedActivations)].total
            - cpu.ledgers[static_cast<std::size_t>(Ledger::SavedActivations)].total),
        static_cast<long long>(meta.ledgers[static_cast<std::size_t>(Ledger::Temporaries)].total
            - cpu.ledgers[static_cast<std::size_t>(Ledger::Temporaries)].total));
    const auto temporariesAtPeak = cpu.ledgers[static_cast<std::size_t>(Ledger::Temporaries)].at_peak;
    std::printf("[ peak     ] %s: cpu %lld meta %lld (cpu temporaries at its peak %lld)\n", what.c_str(),
        static_cast<long long>(cpu.peak_bytes), static_cast<long long>(meta.peak_bytes),
        static_cast<long long>(temporariesAtPeak));
    EXPECT_LE(meta.peak_bytes, cpu.peak_bytes) << what;
    EXPECT_GE(meta.peak_bytes, cpu.peak_bytes - temporariesAtPeak) << what;
    // docs/meta.md, "Measured: CPU against meta": this run's row.
    docTableRow("meta.md", "cpu-vs-meta",
        {what, groupedBytes(cpu.peak_bytes), groupedBytes(meta.peak_bytes),
            groupedBytes(meta.ledgers[static_cast<std::size_t>(Ledger::Activations)].total
                    - cpu.ledgers[static_cast<std::size_t>(Ledger::Activations)].total,
                true)},
        pytorch, cpu.run.threads == 1); // at libtorch's default threads the CPU's peak is this machine's (oneDNN)
}

const nlohmann::json& modelTruth()
{
    static const nlohmann::json truth = test::readTruth("truth.json", "make_fixtures");
    return truth;
}

// The figures of a training step that PyTorch reported for the same network in `entry` (a truth of
// make_fixtures.train_truth or lm_models.train_truth, `sgd`, `adam` or `adamw`): gradients and optimizer state do not
// depend on the input. Adam's state is AdamW's (two moments a parameter).
void addStepFigures(std::vector<test::PyTorchFigure>& figures, const Report& cpu, const nlohmann::json& entry,
    const std::string& where)
{
    figures.push_back({where + " gradient_bytes", cpu.gradient_bytes, entry["gradient_bytes"].get<std::int64_t>(), 0});
    figures.push_back(
        {where + " optimizer_state_bytes", cpu.optimizer_state_bytes, entry["optimizer_state_bytes"].get<std::int64_t>(), 0});
}

// PyTorch's figures for a built-in demo's CPU run, from the fixtures' truth of the same network: demo:rfbnet.pt is
// truth.json's "demo" (RFBNet, float32, at the demo's own 1x1x300x300: its peaks too), demo:mnist-train.pt is
// "mnist" (mnist_net.Net at batch 8: weights, gradients and optimizer state), demo:gpt(-train).pt2 is lm_truth's
// "gpt_sdpa" (resources/gpt.py's GPT(), the same weights' shapes).
std::vector<test::PyTorchFigure> demoFigures(
    const std::string& demo, RunMode mode, const std::string& optimizer, bool ownInput, const Report& cpu)
{
    const bool gpt = demo.rfind("demo:gpt", 0) == 0;
    const std::string name = gpt ? "gpt_sdpa" : demo == "demo:rfbnet.pt" ? "demo" : "mnist";
    const nlohmann::json& t = gpt ? lmTruth()["models"][name] : modelTruth()[name];
    const std::string where = (gpt ? "lm_truth " : "truth.json ") + name;
    std::vector<test::PyTorchFigure> figures {{where + " parameter_bytes + buffer_bytes", cpu.weight_bytes,
        t["parameter_bytes"].get<std::int64_t>() + t["buffer_bytes"].get<std::int64_t>(), 0}};
    const bool sameInput = ownInput && name == "demo";
    if (mode == RunMode::Train) {
        const auto& step = gpt ? t["train"]["pt2"][optimizer] : t["train"][optimizer == "adamw" ? "adam" : optimizer];
        addStepFigures(figures, cpu, step, where + " " + optimizer + " step");
        if (sameInput && optimizer == "sgd")
            figures.push_back({where + " sgd step peak_bytes", cpu.peak_bytes, step["peak_bytes"].get<std::int64_t>(), 0.01});
    } else if (sameInput) {
        figures.push_back({where + " inference peak_bytes", cpu.peak_bytes, t["peak_bytes"].get<std::int64_t>(), 0.01});
    }
    return figures;
}

// The built-in demo run on the CPU and on meta, each from a model of its own (weights on meta do not come back).
void compareDemo(const std::string& demo, RunMode mode, const std::string& optimizer, bool smallInput = true)
{
    auto what = demo + (smallInput ? " (2x64)" : "") + " "
        + (mode == RunMode::Train ? optimizer + " step" : std::string("inference"));
    auto run = [&](const std::string& device) {
        auto file = openFileOrDemo(demo);
        auto o = optionsFor("", device);
        if (smallInput) {
            o.inputs = {{2, 64}}; // smaller than the demo's own, to keep the test quick
            o.input_types = file.default_input_types;
        } else {
            o.threads = 0; // the truth's: libtorch's default (oneDNN's scratch, and so the CPU's peak, varies with it)
        }
        o.mode = mode;
        o.optimizer = optimizer;
        return analyzeOpened(file, o);
    };
    auto cpu = run("cpu");
    auto meta = run("meta");
    expectSameButTemporaries(cpu, meta, what, Extra {}, demoFigures(demo, mode, optimizer, !smallInput, cpu));
}

// A language model of the fixtures (tests/fixtures/lm_models.py, lm_zoo.py) as TorchScript (pt) or an exported
// program (pt2), with what its ledgers on meta differ from the CPU's by, measured.
struct LmCase {
    std::string model;
    std::string kind;
    Extra inference;
    Extra adamw;
};

void PrintTo(const LmCase& c, std::ostream* os)
{
    *os << c.model << "." << c.kind;
}

std::string lmCaseName(const ::testing::TestParamInfo<LmCase>& info)
{
    return info.param.model + "_" + info.param.kind;
}

// gpt_mha.pt's inference: TorchScript's
// nn.MultiheadAttention takes its fused path (_native_multi_head_attention) only for CPU and CUDA tensors, so on
// meta it runs the unfused ops, as the exported program does on both. The few bytes the zoo's models differ by in
// activations (-40, -24, -192 in inference; -40, -8, -184 in training) and saved activations (-16, -8): the 0-dim CPU tensors that wrap a Python scalar
// (RMSNorm's `+ eps`: 8 bytes each, 5 of them in llama_gqa), counted on the CPU but, as on a GPU, outside the
// run's device on meta and so not recorded. Temporaries unbounded where meta makes some the CPU
// does not: ATen's linear, for an input that is not contiguous (MultiheadAttention's in-projection), adds the bias
// into the matmul's output in place, but into a new tensor for a tensor-subclass-like bias, meta's included, so on
// meta the matmul's output is a temporary and the sum an activation (seen in encoder_mask: 72 KiB per layer; the
// activations' total is the same); and SDPA's math path (masked_sdpa's narrow value heads) adds the mask into the
// scores in place on the CPU but into a new tensor on meta (32 KiB per layer there). masked_sdpa's expanded
// boolean mask (stride 0) takes the CPU's flash attention on meta too, and its math path's _safe_softmax writes
// through where.self_out: before memledger's kernels knew both, its meta run was refused, and then took the math
// path for every layer (its inference's activations 24 KiB over the CPU's; held-out ViT's 376 KiB).
std::vector<LmCase> lmCases()
{
    const Extra unfused {0, 0, false};
    return {{"gpt_sdpa", "pt", {}, {}}, {"gpt_sdpa", "pt2", {}, {}}, {"gpt_mha", "pt", {917504, 0, false}, unfused},
        {"gpt_mha", "pt2", unfused, unfused}, {"encoder_mask", "pt", unfused, unfused},
        {"encoder_mask", "pt2", unfused, unfused}, {"llama_gqa", "pt2", {-40}, {-40}},
        {"bert_mask", "pt2", {-24}, {-8, -16}}, {"t5_relbias", "pt2", {-192}, {-184, -8}},
        {"masked_sdpa", "pt2", unfused, unfused}};
}

class MetaLanguageModel : public ::testing::TestWithParam<LmCase> {
protected:
    void SetUp() override
    {
        SKIP_WITHOUT_META();
        SKIP_IF_TRUTH_IS_NOT_HERE(lmTruth(), false);
        const auto& models = lmTruth()["models"];
        if (!models.contains(GetParam().model) || !models[GetParam().model].contains(GetParam().kind))
            GTEST_SKIP() << "the fixtures have no " << GetParam().model << "." << GetParam().kind;
        SKIP_IF_TRUTH_IS_NOT_HERE(models[GetParam().model], GetParam().kind == "pt2");
        file = fixture("lm/" + models[GetParam().model][GetParam().kind].get<std::string>());
        input = models[GetParam().model]["input"].get<std::string>();
        truth = models[GetParam().model];
    }

    // The same run on the CPU and on meta, each from a model of its own.
    void compare(RunMode mode, const std::string& optimizer, Extra extra)
    {
        auto what = GetParam().model + "." + GetParam().kind + " " + (mode == RunMode::Train ? optimizer + " step" : "inference");
        auto run = [&](const std::string& device) {
            auto model = Model::open(file);
            auto o = optionsFor(input, device);
            o.mode = mode;
            o.optimizer = optimizer;
            return analyzeModel(model, o);
        };
        auto cpu = run("cpu");
        auto meta = run("meta");
        // PyTorch's peak of the same CPU run (test_lm's check), and a step's gradients and optimizer state.
        const std::string where = "lm_truth " + GetParam().model + "." + GetParam().kind;
        std::vector<test::PyTorchFigure> pytorch;
        if (mode == RunMode::Train) {
            const auto& step = truth["train"][GetParam().kind][optimizer];
            pytorch.push_back({where + " " + optimizer + " step peak_bytes", cpu.peak_bytes,
                step["peak_bytes"].get<std::int64_t>(), 0.01});
            addStepFigures(pytorch, cpu, step, where + " " + optimizer + " step");
        } else {
            pytorch.push_back({where + " inference peak_bytes", cpu.peak_bytes,
                truth["inference"][GetParam().kind]["peak_bytes"].get<std::int64_t>(), 0.01});
        }
        expectSameButTemporaries(cpu, meta, what, extra, pytorch);
    }

    std::string file, input;
    nlohmann::json truth;
};

} // namespace

TEST_P(MetaLanguageModel, Inference)
{
    compare(RunMode::Inference, "sgd", GetParam().inference);
}

TEST_P(MetaLanguageModel, AdamWStep)
{
    compare(RunMode::Train, "adamw", GetParam().adamw);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MetaLanguageModel, ::testing::ValuesIn(lmCases()), lmCaseName);

TEST(MetaDevice, GptDemoInference)
{
    SKIP_WITHOUT_META();
    if (!canRunExportedPrograms())
        GTEST_SKIP() << "this build runs no torch.export programs";
    compareDemo("demo:gpt.pt2", RunMode::Inference, "sgd");
}

// A training step: where a tensor's gradient arrives from two places (a residual connection), autograd sums the
// second into the first in place when it holds the last reference, but never a meta tensor
// (torch/csrc/autograd/input_buffer.cpp: can_accumulate_inplace refuses a tensor-subclass-like one, and MetaBit is
// in at::kTensorSubclassLike). memledger's meta add takes the CPU's decision instead (meta_kernels.cpp), so the
// activations are the CPU's here too; without it, 64 KiB more per residual LayerNorm's backward (524,288 bytes).
TEST(MetaDevice, GptDemoTrainingSteps)
{
    SKIP_WITHOUT_META();
    if (!canRunExportedPrograms())
        GTEST_SKIP() << "this build runs no torch.export programs";
    for (const char* optimizer : {"sgd", "adamw"}) {
        SCOPED_TRACE(optimizer);
        compareDemo("demo:gpt-train.pt2", RunMode::Train, optimizer);
    }
}

// Conv nets: the MNIST training demo (conv, relu, max-pool, dropout) and the RFBNet demo (conv, batch norm, shortcuts).
TEST(MetaDevice, ConvDemos)
{
    SKIP_WITHOUT_META();
    compareDemo("demo:rfbnet.pt", RunMode::Inference, "sgd", false);
    compareDemo("demo:mnist-train.pt", RunMode::Inference, "sgd", false);
    for (const char* optimizer : {"sgd", "adamw"}) {
        SCOPED_TRACE(optimizer);
        compareDemo("demo:mnist-train.pt", RunMode::Train, optimizer, false);
        compareDemo("demo:rfbnet.pt", RunMode::Train, optimizer, false); // batch norm's training kernels, shortcuts
    }
}

TEST(MetaDevice, TheCliSaysItIsAMetaRun)
{
    SKIP_WITHOUT_META();
    if (!canRunExportedPrograms())
        GTEST_SKIP() << "this build runs no torch.export programs";
    auto json = ::testing::TempDir() + "meta_gpt.json";
    auto r = runCommand(std::string(MEMLEDGER_BINARY) + " analyze demo:gpt.pt2 --input 2x32:int64 --threads 1 "
        "--device meta --json " + json);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("meta-device run"), std::string::npos) << r.output;
    std::ifstream in(json);
    auto j = nlohmann::json::parse(in);
    EXPECT_EQ(j["run"]["device"], "meta");
}

// `whatif --device meta` records every batch on meta: each row is the CPU what-if's but for the temporaries. The GPT
// demo's float32 inference has none at its peak, so its float32 rows are equal throughout; its bfloat16 rows (the
// program converted) and the MNIST training step's rows hold kernel temporaries at the CPU's peak (bfloat16 matmul
// scratch, oneDNN, im2col), so there the meta peak may be lower, by no more than those.
TEST(MetaDevice, WhatIfRowsAreTheCpusButTemporaries)
{
    SKIP_WITHOUT_META();
    struct Run {
        std::string model, args;
        bool peakEqual;
    };
    std::vector<Run> runs {{"demo:mnist-train.pt", "--batch 1,2,4", false}};
    if (canRunExportedPrograms())
        runs.push_back({"demo:gpt.pt2", "--input 2x32:int64 --batch 1,2,4,8", true});
    for (const auto& run : runs) {
        SCOPED_TRACE(run.model);
        auto whatIf = [&](const std::string& device) {
            auto json = ::testing::TempDir() + "meta_whatif_" + device + ".json";
            auto r = runCommand(std::string(MEMLEDGER_BINARY) + " whatif " + run.model + " " + run.args
                + " --threads 1 --lifetimes graph --device " + device + " --json " + json);
            EXPECT_EQ(r.exit_code, 0) << r.output;
            if (device == "meta") {
                EXPECT_NE(r.output.find("on the meta device"), std::string::npos) << r.output;
                // A row run at exactly its setting is computed on meta, never "measured".
                EXPECT_NE(r.output.find("computed on meta"), std::string::npos) << r.output;
                EXPECT_EQ(r.output.find(" measured "), std::string::npos) << r.output;
            }
            std::ifstream in(json);
            return nlohmann::json::parse(in);
        };
        auto cpu = whatIf("cpu");
        auto meta = whatIf("meta");
        EXPECT_EQ(meta.value("device", ""), "meta");
        EXPECT_FALSE(cpu.contains("device"));
        EXPECT_EQ(meta["recorded_batches"], cpu["recorded_batches"]);
        ASSERT_EQ(meta["predictions"].size(), cpu["predictions"].size());
        for (std::size_t i = 0; i < cpu["predictions"].size(); ++i) {
            const auto& c = cpu["predictions"][i];
            const auto& m = meta["predictions"][i];
            auto row = run.model + " batch " + std::to_string(c["batch"].get<int>()) + " " + c["dtype"].get<std::string>();
            std::printf("[ whatif   ] %s %s: peak cpu %lld meta %lld, reserved cpu %lld meta %lld\n", row.c_str(),
                c["method"].get<std::string>().c_str(), c["predicted_peak_bytes"].get<long long>(),
                m["predicted_peak_bytes"].get<long long>(), c["predicted_reserved_bytes"].get<long long>(),
                m["predicted_reserved_bytes"].get<long long>());
            // PyTorch's figures: the network's weights (the fixtures' truth of the same network, in the row's
            // precision), and for the GPT's float32 row at the truth's own 2x32, its inference peak.
            const bool gpt = run.model == "demo:gpt.pt2";
            const auto& t = gpt ? lmTruth()["models"]["gpt_sdpa"] : modelTruth()["mnist"];
            const std::string where = gpt ? "lm_truth gpt_sdpa" : "truth.json mnist";
            const auto dtype = c["dtype"].get<std::string>();
            const auto float32Weights = t["parameter_bytes"].get<std::int64_t>() + t["buffer_bytes"].get<std::int64_t>();
            std::vector<test::PyTorchFigure> pytorch {{where + " parameter_bytes + buffer_bytes in " + dtype,
                c["weight_bytes"].get<std::int64_t>(), dtype == "float32" ? float32Weights : float32Weights / 2, 0}};
            if (gpt && dtype == "float32" && c["batch"].get<int>() == 2)
                pytorch.push_back({where + ".pt2 inference peak_bytes at 2x32", c["predicted_peak_bytes"].get<std::int64_t>(),
                    t["inference"]["pt2"]["peak_bytes"].get<std::int64_t>(), 0.01});
            // A CPU peak in bfloat16 or float16 is this CPU's: oneDNN picks its kernels, and their scratch, by the
            // instructions the CPU has (avx512_bf16, avx512_fp16, AMX; a CPU with AMX ran the MNIST float16 row
            // without the scratch another one measured), so such a row is checked for its key only here (the bounds
            // below check its figures); every float32 row to the byte.
            const bool cpuKernels = dtype != "float32";
            docTableRow("meta.md", "whatif-cpu-vs-meta",
                {row, m["method"] == "measured" ? "computed on meta" : m["method"].get<std::string>(),
                    groupedBytes(c["predicted_peak_bytes"].get<std::int64_t>()),
                    groupedBytes(m["predicted_peak_bytes"].get<std::int64_t>()),
                    groupedBytes(c["predicted_reserved_bytes"].get<std::int64_t>()),
                    groupedBytes(m["predicted_reserved_bytes"].get<std::int64_t>())},
                pytorch, !cpuKernels);
            EXPECT_EQ(m["batch"], c["batch"]) << row;
            EXPECT_EQ(m["dtype"], c["dtype"]) << row;
            EXPECT_EQ(m["method"], c["method"]) << row;
            EXPECT_EQ(m["weight_bytes"], c["weight_bytes"]) << row;
            EXPECT_EQ(m["input_bytes"], c["input_bytes"]) << row;
            const auto cpuPeak = c["predicted_peak_bytes"].get<std::int64_t>();
            const auto metaPeak = m["predicted_peak_bytes"].get<std::int64_t>();
            if (run.peakEqual && c["ledgers_at_peak"]["temporaries"].get<std::int64_t>() == 0) {
                EXPECT_EQ(metaPeak, cpuPeak) << row;
                EXPECT_EQ(m["predicted_reserved_bytes"], c["predicted_reserved_bytes"]) << row;
                for (const auto& [ledger, bytes] : c["ledgers_at_peak"].items())
                    if (ledger != "temporaries")
                        EXPECT_EQ(m["ledgers_at_peak"][ledger], bytes) << row << ": " << ledger << " at the peak";
            } else {
                EXPECT_LE(metaPeak, cpuPeak) << row;
                EXPECT_GE(metaPeak, cpuPeak - c["ledgers_at_peak"]["temporaries"].get<std::int64_t>()) << row;
            }
        }
    }
}

TEST(MetaDevice, AnUnknownDeviceNamesMeta)
{
    auto r = runCommand(std::string(MEMLEDGER_BINARY) + " analyze demo:gpt.pt2 --device metal");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("meta"), std::string::npos) << r.output;
}

namespace {

const nlohmann::json& metaTruth()
{
    static const nlohmann::json truth = test::readTruth("meta/meta_truth.json", "make_meta_fixtures");
    return truth;
}

// The tied decoder of tests/fixtures/meta_weights.py (its LM head is its token embedding), exported on meta and on
// the CPU; skips with the reason where there is none.
#define SKIP_WITHOUT_TIED_FIXTURE()                                                                                    \
    do {                                                                                                               \
        SKIP_WITHOUT_META();                                                                                           \
        SKIP_IF_TRUTH_IS_NOT_HERE(metaTruth(), true);                                                                  \
        if (!metaTruth().contains("tied"))                                                                             \
            GTEST_SKIP() << "meta/meta_truth.json has no tied model (make_meta_fixtures is older)";                   \
    } while (0)

// PyTorch's count of the tied decoder's weights (parameters() lists a tied weight once) against ours.
test::PyTorchFigure tiedWeights(std::int64_t ours)
{
    const auto& tied = metaTruth()["tied"];
    return {"meta_truth tied parameters() + buffers()", ours,
        tied["parameter_bytes"].get<std::int64_t>() + tied["buffer_bytes"].get<std::int64_t>(), 0};
}

std::string tiedInput()
{
    return metaTruth()["tied"]["input"].get<std::string>();
}

Report runTied(const std::string& file, const std::string& device, RunMode mode, std::optional<Shape> input = {})
{
    auto model = Model::open(fixture("meta/" + file));
    auto o = optionsFor(tiedInput(), device);
    if (input)
        o.inputs = {*input};
    o.mode = mode;
    o.optimizer = "adamw";
    return analyzeModel(model, o);
}

} // namespace

// A tied LM head (output.weight is tok_embeddings.weight) in a program exported on meta. torch.export.save keys
// weights by storage, which a meta tensor lacks (every meta weight names the same record), but the graph uses a
// tied parameter through one placeholder only: the other name's placeholder is read by no node. memledger takes
// such a parameter as the storage of the one used parameter of its shape, dtype and strides, so the weights are
// counted once, as PyTorch's parameters() counts them and as the CPU run of the same model exported with real
// weights (where the file names one record for both) does; gradients and optimizer state too.
// An op with a meta kernel in Python only (torch/_meta_registrations.py) cannot run in memledger's meta run: the
// error names it, says why, and says what to do (PyTorch 2 words the failure "OP: attempted to run this operator
// with Meta tensors, but there was no fake impl or Meta kernel registered", which once read as a model reading a
// tensor's values).
TEST(MetaDevice, AnOpWithoutAMetaKernelIsNamed)
{
    SKIP_WITHOUT_META();
    const auto& truth = metaTruth();
    SKIP_IF_TRUTH_IS_NOT_HERE(truth, true);
    if (!truth.contains("no_meta_kernel"))
        GTEST_SKIP() << "meta/meta_truth.json has no no_meta_kernel (make_meta_fixtures is older)";
    const auto& entry = truth["no_meta_kernel"];
    auto model = Model::open(fixture("meta/" + entry["file"].get<std::string>()));
    try {
        analyzeModel(model, optionsFor(entry["input"].get<std::string>(), "meta"));
        GTEST_SKIP() << "this libtorch runs " << entry["op"].get<std::string>() << " on meta";
    } catch (const std::exception& e) {
        const std::string message = e.what();
        EXPECT_NE(message.find(entry["op"].get<std::string>() + " has no meta kernel"), std::string::npos) << message;
        EXPECT_NE(message.find("run it on the cpu"), std::string::npos) << message;
        EXPECT_EQ(message.find("reads a tensor's values"), std::string::npos) << message;
    }
}

TEST(MetaDevice, TiedWeightsAreCountedOnce)
{
    SKIP_WITHOUT_TIED_FIXTURE();
    const auto& tied = metaTruth()["tied"];
    const auto pytorch = tied["parameter_bytes"].get<std::int64_t>() + tied["buffer_bytes"].get<std::int64_t>();
    EXPECT_EQ(tied["parameter_bytes_meta"], tied["parameter_bytes"]);
    EXPECT_LT(tied["parameter_bytes"].get<std::int64_t>(), tied["untied_parameter_bytes"].get<std::int64_t>());
    for (auto mode : {RunMode::Inference, RunMode::Train}) {
        const std::string what = std::string("tied_meta.pt2 ") + (mode == RunMode::Train ? "adamw step" : "inference");
        SCOPED_TRACE(what);
        auto meta = runTied("tied_meta.pt2", "", mode);
        auto cpu = runTied("tied_real.pt2", "cpu", mode);
        std::printf("[ tied     ] %s: weights meta %lld cpu %lld pytorch %lld (untied count %lld)\n", what.c_str(),
            static_cast<long long>(meta.weight_bytes), static_cast<long long>(cpu.weight_bytes),
            static_cast<long long>(pytorch),
            static_cast<long long>(tied["untied_parameter_bytes"].get<std::int64_t>() + tied["buffer_bytes"].get<std::int64_t>()));
        EXPECT_EQ(meta.weight_bytes, pytorch);
        EXPECT_EQ(meta.ledgers[static_cast<std::size_t>(Ledger::Weights)].total, pytorch);
        EXPECT_EQ(cpu.weight_bytes, pytorch);
        // The report says the rule applied, naming both weights; the real-weights file needs no rule.
        bool noted = false;
        for (const auto& n : meta.notes)
            noted = noted || (n.find("is read by no node") != std::string::npos && n.find("output.weight") != std::string::npos
                                 && n.find("tok_embeddings.weight") != std::string::npos);
        EXPECT_TRUE(noted) << "the meta report notes the tied weight";
        for (const auto& n : cpu.notes)
            EXPECT_EQ(n.find("read by no node"), std::string::npos) << n;
        if (mode == RunMode::Train) {
            EXPECT_EQ(meta.gradient_bytes, tied["parameter_bytes"].get<std::int64_t>());
            EXPECT_EQ(meta.optimizer_state_bytes, 2 * tied["parameter_bytes"].get<std::int64_t>()); // AdamW: 2 moments
        }
        // The rest as any CPU-against-meta pair: RMSNorm's `+ eps` scalars (5, 8 bytes each) as llama_gqa's.
        expectSameButTemporaries(cpu, meta, what, Extra {-40},
            {{"meta_truth tied parameters() + buffers()", cpu.weight_bytes, pytorch, 0}});
    }
}

// The sequence what-if on meta (`whatif --device meta --seq`): each row it ran at exactly its length is a direct meta
// analyze at that length, figure for figure; and a length between or beyond its records, predicted from the
// records' fit (a * T^2 + b * T + c through three neighbours), against a direct meta analyze there.
TEST(MetaDevice, SequenceWhatIfRowsAreDirectMetaRuns)
{
    SKIP_WITHOUT_TIED_FIXTURE();
    const auto file = fixture("meta/tied_meta.pt2");
    auto json = ::testing::TempDir() + "meta_seq_whatif.json";
    auto r = runCommand(std::string(MEMLEDGER_BINARY) + " whatif " + file
        + " --device meta --input 1x128:int64 --seq 128,256,512 --dtype float32 --threads 1 --lifetimes graph --json " + json);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("on the meta device"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find(" measured "), std::string::npos) << r.output;
    std::ifstream in(json);
    auto table = nlohmann::json::parse(in);
    EXPECT_EQ(table.value("device", ""), "meta");
    EXPECT_EQ(table["axis"], "seq");
    int direct = 0;
    for (const auto& row : table["predictions"]) {
        const auto seq = row["seq"].get<std::int64_t>();
        SCOPED_TRACE("seq " + std::to_string(seq));
        if (row["method"] != "measured")
            continue;
        ++direct;
        auto a = runTied("tied_meta.pt2", "meta", RunMode::Inference, Shape {1, seq});
        std::printf("[ seq      ] %lld: whatif peak %lld total %lld reserved %lld; analyze %lld %lld %lld\n",
            static_cast<long long>(seq), row["predicted_peak_bytes"].get<long long>(),
            row["predicted_peak_total_bytes"].get<long long>(), row["predicted_reserved_bytes"].get<long long>(),
            static_cast<long long>(a.peak_bytes), static_cast<long long>(a.peak_total_bytes),
            static_cast<long long>(a.simulated_reserved_peak_bytes));
        docTableRow("meta.md", "seq-whatif",
            {std::to_string(seq), "computed on meta (`whatif --seq`)",
                groupedBytes(row["predicted_peak_bytes"].get<std::int64_t>()), groupedBytes(a.peak_bytes),
                groupedBytes(row["predicted_peak_bytes"].get<std::int64_t>() - a.peak_bytes, true)},
            {tiedWeights(row["weight_bytes"].get<std::int64_t>())});
        EXPECT_EQ(row["predicted_peak_bytes"].get<std::int64_t>(), a.peak_bytes);
        EXPECT_EQ(row["predicted_peak_total_bytes"].get<std::int64_t>(), a.peak_total_bytes);
        EXPECT_EQ(row["predicted_reserved_bytes"].get<std::int64_t>(), a.simulated_reserved_peak_bytes);
        EXPECT_EQ(row["weight_bytes"].get<std::int64_t>(), a.weight_bytes);
        EXPECT_EQ(row["input_bytes"].get<std::int64_t>(), a.input_bytes);
        for (int l = 0; l < kLedgerCount; ++l)
            EXPECT_EQ(row["ledgers_at_peak"][ledgerName(static_cast<Ledger>(l))].get<std::int64_t>(),
                a.ledgers[static_cast<std::size_t>(l)].at_peak)
                << ledgerName(static_cast<Ledger>(l));
    }
    EXPECT_EQ(direct, 3) << "128, 256 and 512 are each run on meta";

    // Predicted lengths: the records at 128, 256 and 512 on meta, asked for lengths they do not hold.
    auto model = Model::open(file);
    auto base = optionsFor("1x128:int64", "meta");
    auto w = WhatIf::recordSeq(model, base, {128, 256, 512}, {"float32"});
    EXPECT_EQ(w.device(), "meta");
    for (std::int64_t seq : {64, 160, 192, 320, 384, 448}) {
        auto p = w.predict(seq, "float32");
        auto a = runTied("tied_meta.pt2", "meta", RunMode::Inference, Shape {1, seq});
        const double error = 100.0 * static_cast<double>(p.predicted_peak_bytes - a.peak_bytes) / static_cast<double>(a.peak_bytes);
        std::printf("[ seq pred ] %lld (%s): predicted peak %lld, analyze %lld (%+.4f%%); reserved %lld, %lld\n",
            static_cast<long long>(seq), nameOf(p.method), static_cast<long long>(p.predicted_peak_bytes),
            static_cast<long long>(a.peak_bytes), error, static_cast<long long>(p.predicted_reserved_bytes),
            static_cast<long long>(a.simulated_reserved_peak_bytes));
        char percent[32];
        std::snprintf(percent, sizeof percent, " (%+.4f%%)", error);
        docTableRow("meta.md", "seq-whatif",
            {std::to_string(seq), std::string(nameOf(p.method)) + " from 128, 256, 512",
                groupedBytes(p.predicted_peak_bytes), groupedBytes(a.peak_bytes),
                groupedBytes(p.predicted_peak_bytes - a.peak_bytes, true) + (p.predicted_peak_bytes == a.peak_bytes ? "" : percent)},
            {tiedWeights(a.weight_bytes)});
        EXPECT_EQ(p.predicted_peak_bytes, a.peak_bytes) << "seq " << seq;
        EXPECT_EQ(p.predicted_peak_total_bytes, a.peak_total_bytes) << "seq " << seq;
    }
}

// The checkpointing what-if and the remedies on a meta run: they run, say their figures are computed on meta
// (never "measured"), and checkpointing a decoder layer predicts the peak the CPU run of the same model predicts,
// but for the kernel temporaries the CPU's peak holds (test_meta's CPU-against-meta rule).
TEST(MetaDevice, CheckpointingAndRemediesOnMeta)
{
    SKIP_WITHOUT_TIED_FIXTURE();
    const auto file = fixture("meta/tied_meta.pt2");
    auto meta = runTied("tied_meta.pt2", "", RunMode::Train);
    auto cpu = runTied("tied_real.pt2", "cpu", RunMode::Train);
    for (const std::string module : {"layers.0", "layers.1", "layers.0.feed_forward"}) {
        SCOPED_TRACE(module);
        auto m = predictCheckpoint(meta, {module});
        auto c = predictCheckpoint(cpu, {module});
        const auto temporaries = c.report->ledgers[static_cast<std::size_t>(Ledger::Temporaries)].at_peak;
        std::printf("[ ckpt     ] %s: predicted peak cpu %lld meta %lld (cpu temporaries at its peak %lld), "
                    "total cpu %lld meta %lld\n",
            module.c_str(), static_cast<long long>(c.predicted_peak_bytes), static_cast<long long>(m.predicted_peak_bytes),
            static_cast<long long>(temporaries), static_cast<long long>(c.predicted_peak_total_bytes),
            static_cast<long long>(m.predicted_peak_total_bytes));
        docTableRow("meta.md", "checkpoint-meta",
            {module, groupedBytes(c.predicted_peak_bytes), groupedBytes(m.predicted_peak_bytes), groupedBytes(temporaries)},
            {tiedWeights(cpu.weight_bytes), tiedWeights(meta.weight_bytes)});
        EXPECT_LE(m.predicted_peak_bytes, c.predicted_peak_bytes);
        EXPECT_GE(m.predicted_peak_bytes, c.predicted_peak_bytes - temporaries);
        EXPECT_EQ(m.predicted_peak_total_bytes - m.predicted_peak_bytes, c.predicted_peak_total_bytes - c.predicted_peak_bytes)
            << "weights, optimizer state and inputs";
    }

    auto json = ::testing::TempDir() + "meta_ckpt.json";
    auto r = runCommand(std::string(MEMLEDGER_BINARY) + " whatif " + file + " --device meta --input " + tiedInput()
        + " --mode train --optimizer adamw --checkpoint auto --budget "
        + std::to_string(meta.peak_total_bytes - 1 + DeviceOverheads::estimates().cuda_context_bytes)
        + " --threads 1 --lifetimes graph --json " + json);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("on the meta device"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("measured"), std::string::npos) << r.output;
    std::ifstream in(json);
    auto ckpt = nlohmann::json::parse(in);
    EXPECT_EQ(ckpt.value("device", ""), "meta");
    EXPECT_EQ(ckpt["recorded_peak_total_bytes"].get<std::int64_t>(), meta.peak_total_bytes);

    auto rem = runCommand(std::string(MEMLEDGER_BINARY) + " analyze " + file + " --device meta --input " + tiedInput()
        + " --remedies --budget "
        + std::to_string(meta.peak_total_bytes + DeviceOverheads::estimates().cuda_context_bytes) + " --threads 1 --lifetimes graph");
    ASSERT_EQ(rem.exit_code, 0) << rem.output;
    EXPECT_NE(rem.output.find("What would help"), std::string::npos) << rem.output;
    EXPECT_NE(rem.output.find("computed on the meta device"), std::string::npos) << rem.output;
    EXPECT_EQ(rem.output.find("[measured]"), std::string::npos) << rem.output;
    EXPECT_EQ(rem.output.find("     measured: "), std::string::npos) << rem.output;
}

// A batch what-if of a training step on meta, from records at batch 2 and 4, against direct meta runs: between the
// records, below them and far beyond them, where the peak moves to another moment of the backward (it grows slowly up
// to batch 8, then in proportion to the batch). Equal to the byte. (docs/meta.md's 7B float32 step, whose peak moves
// from the optimizer step at batch 4 to the backward at batch 8, was checked the same way by hand.)
TEST(MetaDevice, BatchWhatIfOnMetaPredictsDirectRuns)
{
    SKIP_WITHOUT_TIED_FIXTURE();
    auto model = Model::open(fixture("meta/tied_meta.pt2"));
    // 8 tokens: at a small batch the activations are small beside the optimizer step's temporaries.
    auto base = optionsFor("2x8:int64", "meta");
    base.mode = RunMode::Train;
    base.optimizer = "adamw";
    auto w = WhatIf::record(model, base, {2, 4}, {"float32"});
    for (std::int64_t batch : {1, 3, 8, 16, 32, 64}) {
        auto p = w.predict(batch, "float32");
        Shape shape {batch, 8};
        auto a = runTied("tied_meta.pt2", "meta", RunMode::Train, shape);
        std::string phase;
        for (const auto& ph : a.phases)
            if (ph.peak_bytes == a.peak_bytes)
                phase = ph.name;
        std::printf("[ batch    ] %lld (%s): predicted peak %lld total %lld reserved %lld; analyze %lld %lld %lld (peak in %s)\n",
            static_cast<long long>(batch), nameOf(p.method), static_cast<long long>(p.predicted_peak_bytes),
            static_cast<long long>(p.predicted_peak_total_bytes), static_cast<long long>(p.predicted_reserved_bytes),
            static_cast<long long>(a.peak_bytes), static_cast<long long>(a.peak_total_bytes),
            static_cast<long long>(a.simulated_reserved_peak_bytes), phase.c_str());
        docTableRow("meta.md", "batch-whatif",
            {std::to_string(batch), std::string(nameOf(p.method)) + " from 2, 4", groupedBytes(p.predicted_peak_bytes),
                groupedBytes(a.peak_bytes), phase},
            {tiedWeights(a.weight_bytes)});
        EXPECT_EQ(p.predicted_peak_bytes, a.peak_bytes) << "batch " << batch;
        EXPECT_EQ(p.predicted_peak_total_bytes, a.peak_total_bytes) << "batch " << batch;
    }
}

// MobileNetV3 and MobileNetV2 (torchvision's, exported by tests/fixtures/vision_truths.py): their training steps run
// on meta (hardswish's, hardsigmoid's and hardtanh's backward have memledger's meta kernels), every ledger but the
// temporaries the CPU's.
TEST(MetaDevice, MobileNetsTrainOnMeta)
{
    SKIP_WITHOUT_META();
    const auto truth = test::readTruth("vision/vision_truth.json", "make_vision_fixtures");
    if (truth.contains("skipped"))
        GTEST_SKIP() << truth["skipped"].get<std::string>();
    ASSERT_TRUE(truth.contains("meta_models")) << "vision_truth.json was written before its meta models";
    for (const auto& [name, c] : truth["meta_models"].items()) {
        SCOPED_TRACE(name);
        if (c.contains("skipped")) {
            ADD_FAILURE() << c["skipped"].get<std::string>();
            continue;
        }
        auto run = [&](const std::string& device) {
            auto file = openFileOrDemo(test::fixture(c["file"].get<std::string>()));
            auto o = optionsFor("", device);
            o.inputs = parseShapes(c["input"].get<std::string>());
            o.mode = RunMode::Train;
            o.optimizer = "sgd";
            return analyzeOpened(file, o);
        };
        auto cpu = run("cpu");
        auto meta = run("meta");
        EXPECT_EQ(meta.run.device, "meta");
        EXPECT_EQ(meta.weight_bytes, cpu.weight_bytes);
        EXPECT_EQ(meta.gradient_bytes, cpu.gradient_bytes);
        for (auto ledger : {Ledger::Activations, Ledger::SavedActivations, Ledger::Gradients})
            EXPECT_EQ(meta.ledgers[static_cast<std::size_t>(ledger)].total,
                cpu.ledgers[static_cast<std::size_t>(ledger)].total)
                << ledgerName(ledger);
        EXPECT_LE(meta.peak_bytes, cpu.peak_bytes);
        EXPECT_GE(meta.peak_bytes, cpu.peak_bytes - cpu.ledgers[static_cast<std::size_t>(Ledger::Temporaries)].at_peak);
    }
}
