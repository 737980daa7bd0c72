// Runs on the meta device (shapes only, no memory) against the same runs on the CPU: the GPT demo, the conv demos
// (MNIST, RFBNet), the language-model fixtures (tests/fixtures/lm_models.py, lm_zoo.py), inference and training
// steps (SGD, AdamW), and the what-if. Every ledger but the temporaries is the CPU's, but for the measured
// differences listed with the language models; the peak is the CPU's less at most the temporaries the CPU kernels
// allocate inside themselves (oneDNN scratch, im2col), which a meta kernel does not. Skipped, with the reason,
// where the build's libtorch has no meta runs (1.13).
#include "demo_model.h"
#include "fixture_paths.h"
#include "recording/build_report.h"
#include "recording/model.h"
#include "report/trace.h"
#include "run_command.h"
#include "session/open_file.h"
#include "support/errors.h"
#include "support/format.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

using namespace memledger;
using memledger::test::fixture;
using memledger::test::runCommand;

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

void expectSameButTemporaries(const Report& cpu, const Report& meta, const std::string& what, Extra extra)
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
}

// The built-in demo run on the CPU and on meta, each from a model of its own (weights on meta do not come back).
void compareDemo(const std::string& demo, RunMode mode, const std::string& optimizer, bool smallInput = true)
{
    auto what = demo + " " + (mode == RunMode::Train ? optimizer + " step" : std::string("inference"));
    auto run = [&](const std::string& device) {
        auto file = openFileOrDemo(demo);
        auto o = optionsFor("", device);
        if (smallInput) {
            o.inputs = {{2, 64}}; // smaller than the demo's own, to keep the test quick
            o.input_types = file.default_input_types;
        }
        o.mode = mode;
        o.optimizer = optimizer;
        return analyzeOpened(file, o);
    };
    auto cpu = run("cpu");
    auto meta = run("meta");
    expectSameButTemporaries(cpu, meta, what, Extra {});
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
// activations' total is the same).
std::vector<LmCase> lmCases()
{
    const Extra unfused {0, 0, false};
    return {{"gpt_sdpa", "pt", {}, {}}, {"gpt_sdpa", "pt2", {}, {}}, {"gpt_mha", "pt", {917504, 0, false}, unfused},
        {"gpt_mha", "pt2", unfused, unfused}, {"encoder_mask", "pt", unfused, unfused},
        {"encoder_mask", "pt2", unfused, unfused}, {"llama_gqa", "pt2", {-40}, {-40}},
        {"bert_mask", "pt2", {-24}, {-8, -16}}, {"t5_relbias", "pt2", {-192}, {-184, -8}}};
}

class MetaLanguageModel : public ::testing::TestWithParam<LmCase> {
protected:
    void SetUp() override
    {
        SKIP_WITHOUT_META();
        if (lmTruth().contains("skipped"))
            GTEST_SKIP() << lmTruth()["skipped"].get<std::string>();
        const auto& models = lmTruth()["models"];
        if (!models.contains(GetParam().model) || !models[GetParam().model].contains(GetParam().kind))
            GTEST_SKIP() << "the fixtures have no " << GetParam().model << "." << GetParam().kind;
        if (GetParam().kind == "pt2" && !canRunExportedPrograms())
            GTEST_SKIP() << "this build runs no torch.export programs";
        file = fixture("lm/" + models[GetParam().model][GetParam().kind].get<std::string>());
        input = models[GetParam().model]["input"].get<std::string>();
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
        expectSameButTemporaries(cpu, meta, what, extra);
    }

    std::string file, input;
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
// demo's inference has none at its peak, so its rows are equal throughout; the MNIST training step's CPU peak holds
// kernel temporaries (oneDNN, im2col), so there the meta peak may be lower, by no more than those.
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
                + " --threads 1 --device " + device + " --json " + json);
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
            EXPECT_EQ(m["batch"], c["batch"]) << row;
            EXPECT_EQ(m["dtype"], c["dtype"]) << row;
            EXPECT_EQ(m["method"], c["method"]) << row;
            EXPECT_EQ(m["weight_bytes"], c["weight_bytes"]) << row;
            EXPECT_EQ(m["input_bytes"], c["input_bytes"]) << row;
            const auto cpuPeak = c["predicted_peak_bytes"].get<std::int64_t>();
            const auto metaPeak = m["predicted_peak_bytes"].get<std::int64_t>();
            if (run.peakEqual) {
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
