// Programs whose weights are meta tensors (a model built under torch.device("meta"), exported and saved:
// tests/fixtures/meta_weights.py): they open, run on the meta device by default and say so, refuse the CPU, and
// record what the same program with real weights records; and a larger one against PyTorch's own estimate,
// torch.distributed._tools.mem_tracker.MemTracker under FakeTensorMode. Skipped, with the reason, where the build's
// libtorch has no meta runs (1.13) or the fixtures' PyTorch has no MemTracker.
#include "doc_table.h"
#include "truth_file.h"
#include "recording/build_report.h"
#include "recording/model.h"
#include "run_command.h"
#include "session/open_file.h"
#include "support/errors.h"
#include "support/format.h"

#include <gtest/gtest.h>

#include <optional>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

using namespace memledger;
using memledger::test::fixture;
using memledger::test::runCommand;

namespace {

const nlohmann::json& metaTruth()
{
    static const nlohmann::json truth = test::readTruth("meta/meta_truth.json", "make_meta_fixtures");
    return truth;
}

class MetaWeights : public ::testing::Test {
protected:
    void SetUp() override
    {
        if (torchBuildInfo().rfind("libtorch 1.", 0) == 0)
            GTEST_SKIP() << "this build's libtorch (" << torchBuildInfo() << ") has no meta runs";
        SKIP_IF_TRUTH_IS_NOT_HERE(metaTruth(), true);
    }

    static RunOptions options(const std::string& input, const std::string& device, RunMode mode)
    {
        RunOptions o;
        auto parsed = parseInputs(input);
        o.inputs = parsed.shapes;
        o.input_types = parsed.types;
        o.threads = 1;
        o.device = device;
        o.mode = mode;
        o.optimizer = "adamw";
        return o;
    }
};

void printLedgers(const std::string& what, const Report& r)
{
    for (int l = 0; l < kLedgerCount; ++l)
        std::printf("[ ledger   ] %-28s %-18s %14lld (at peak %14lld)\n", what.c_str(), ledgerName(static_cast<Ledger>(l)),
            static_cast<long long>(r.ledgers[static_cast<std::size_t>(l)].total),
            static_cast<long long>(r.ledgers[static_cast<std::size_t>(l)].at_peak));
    std::printf("[ figures  ] %-28s weights %lld inputs %lld gradients %lld optimizer %lld peak %lld peak total %lld\n",
        what.c_str(), static_cast<long long>(r.weight_bytes), static_cast<long long>(r.input_bytes),
        static_cast<long long>(r.gradient_bytes), static_cast<long long>(r.optimizer_state_bytes),
        static_cast<long long>(r.peak_bytes), static_cast<long long>(r.peak_total_bytes));
}

bool hasNote(const Report& r, const std::string& text)
{
    for (const auto& n : r.notes)
        if (n.find(text) != std::string::npos)
            return true;
    return false;
}

} // namespace

// The meta-weights file, run with no device named, is on meta and says why; every ledger, the peak and the byte
// figures are those of the real-weights file's meta run; and, but for the temporaries (which CPU kernels make
// inside themselves and meta kernels do not), those of its CPU run.
TEST_F(MetaWeights, RunsOnMetaByDefaultAsTheRealWeightsDo)
{
    const auto input = metaTruth()["small_input"].get<std::string>();
    for (auto mode : {RunMode::Inference, RunMode::Train}) {
        const std::string what = mode == RunMode::Train ? "adamw step" : "inference";
        SCOPED_TRACE(what);
        auto metaFile = Model::open(fixture("meta/llama_meta.pt2"));
        EXPECT_TRUE(metaFile.metaWeights());
        auto fromShapes = analyzeModel(metaFile, options(input, "", mode));
        auto real = Model::open(fixture("meta/llama_real.pt2"));
        EXPECT_FALSE(real.metaWeights());
        auto realMeta = analyzeModel(real, options(input, "meta", mode));
        auto realCpuModel = Model::open(fixture("meta/llama_real.pt2"));
        auto realCpu = analyzeModel(realCpuModel, options(input, "cpu", mode));
        printLedgers("meta weights, " + what, fromShapes);
        printLedgers("real weights on meta, " + what, realMeta);
        printLedgers("real weights on cpu, " + what, realCpu);

        EXPECT_EQ(fromShapes.run.device, "meta");
        EXPECT_TRUE(hasNote(fromShapes, "the weights are meta tensors: this run is on the meta device, shapes only"));
        EXPECT_TRUE(hasNote(fromShapes, "meta-device run"));
        EXPECT_FALSE(hasNote(realMeta, "the weights are meta tensors"));
        for (const Report* other : {&realMeta, &realCpu}) {
            const bool cpu = other == &realCpu;
            EXPECT_EQ(fromShapes.weight_bytes, other->weight_bytes);
            EXPECT_EQ(fromShapes.input_bytes, other->input_bytes);
            EXPECT_EQ(fromShapes.gradient_bytes, other->gradient_bytes);
            EXPECT_EQ(fromShapes.optimizer_state_bytes, other->optimizer_state_bytes);
            for (int l = 0; l < kLedgerCount; ++l) {
                auto ledger = static_cast<Ledger>(l);
                const auto& m = fromShapes.ledgers[static_cast<std::size_t>(l)];
                const auto& o = other->ledgers[static_cast<std::size_t>(l)];
                if (cpu && ledger == Ledger::Temporaries) {
                    EXPECT_LE(m.total, o.total);
                    continue;
                }
                // RMSNorm's `+ eps` wraps a Python float in a 0-dim CPU tensor: 8 bytes each, recorded on the CPU,
                // outside the run's device on meta (tests/test_meta.cpp, llama_gqa: 5 of them).
                const std::int64_t scalars = cpu && ledger == Ledger::Activations ? -40 : 0;
                EXPECT_EQ(m.total, o.total + scalars) << ledgerName(ledger) << (cpu ? " (cpu)" : " (meta)");
                if (!cpu)
                    EXPECT_EQ(m.at_peak, o.at_peak) << ledgerName(ledger) << " at the peak";
            }
            if (!cpu)
                EXPECT_EQ(fromShapes.peak_bytes, other->peak_bytes);
        }
    }
}

TEST_F(MetaWeights, RefusesTheCpuByName)
{
    auto model = Model::open(fixture("meta/llama_meta.pt2"));
    try {
        analyzeModel(model, options(metaTruth()["small_input"].get<std::string>(), "cpu", RunMode::Inference));
        FAIL() << "a program with meta weights ran on the cpu";
    } catch (const RunError& e) {
        EXPECT_NE(std::string(e.what()).find("its weights are meta tensors"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("--device meta"), std::string::npos) << e.what();
    }
    auto r = runCommand(std::string(MEMLEDGER_BINARY) + " analyze " + fixture("meta/llama_meta.pt2") + " --device cpu");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("--device meta"), std::string::npos) << r.output;
}

// The CLI with no --device: a meta run, said so; the what-if's other precisions are predicted from it.
TEST_F(MetaWeights, TheCliRunsItOnMeta)
{
    const auto file = fixture("meta/llama_meta.pt2");
    auto json = ::testing::TempDir() + "meta_weights.json";
    auto r = runCommand(std::string(MEMLEDGER_BINARY) + " analyze " + file + " --threads 1 --json " + json);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("the weights are meta tensors"), std::string::npos) << r.output;
    std::ifstream in(json);
    EXPECT_EQ(nlohmann::json::parse(in)["run"]["device"], "meta");
    auto w = runCommand(std::string(MEMLEDGER_BINARY) + " whatif " + file + " --batch 2,4 --dtype float32,bfloat16 --threads 1");
    EXPECT_EQ(w.exit_code, 0) << w.output;
    EXPECT_NE(w.output.find("on the meta device"), std::string::npos) << w.output;
    EXPECT_NE(w.output.find("bfloat16"), std::string::npos) << w.output;
}

// PyTorch's own estimate of an AdamW step (MemTracker under FakeTensorMode, foreach=False) for a decoder of about
// 270 M parameters at 1x512, against memledger's meta run of the same model exported on meta.
// One AdamW step of llama_mt.pt2 on meta (`r`) against MemTracker's figures `mt` for the same step; rows of the
// doc table `table`. The peak totals are within `within` of each other when it is given; they always differ by
// exactly what the script holds that memledger's step does not.
void expectMemTrackerFigures(const nlohmann::json& mt, const Report& r, const std::string& table, std::optional<double> within)
{
    printLedgers("memledger, meta", r);
    std::printf("[ memtrack ] %s\n", mt.dump().c_str());
    const auto& after = mt["after_step"];
    EXPECT_EQ(r.weight_bytes, after["Parameter"].get<std::int64_t>() + after["Buffer"].get<std::int64_t>());
    EXPECT_EQ(r.gradient_bytes, after["Gradient"].get<std::int64_t>());
    // MemTracker's Optstate holds AdamW's `step` counters too: a 0-dim float32 tensor per parameter, on the host
    // even for a GPU model (not capturable or fused), which memledger keeps as a number.
    EXPECT_EQ(r.optimizer_state_bytes,
        after["Optstate"].get<std::int64_t>() - mt["step_tensor_bytes"].get<std::int64_t>());
    const double theirs = static_cast<double>(mt["peak"]["Total"].get<std::int64_t>());
    // memledger's peak_total_bytes: weights, optimizer state, inputs and the most the step holds besides.
    const double ours = static_cast<double>(r.peak_total_bytes);
    std::printf("[ peak     ] memledger %.0f MemTracker %.0f (%+.3f%%)\n", ours, theirs, 100.0 * (ours - theirs) / theirs);
    if (within)
        EXPECT_NEAR(ours, theirs, *within * theirs);
    // The script holds the logits, the targets and the loss through opt.step() (MemTracker's "Activation"). With
    // --hold-output step (the default) memledger holds them too, and the peaks differ by the step tensors alone;
    // otherwise also by what the script holds, less the targets, which memledger counts as an input.
    const auto held = after["Activation"].get<std::int64_t>();
    const auto steps = mt["step_tensor_bytes"].get<std::int64_t>();
    const auto targets = r.input_bytes - after["Other"].get<std::int64_t>();
    EXPECT_EQ(mt["peak"]["Total"].get<std::int64_t>() - r.peak_total_bytes,
        r.run.hold_output == "step" ? steps : held - targets + steps);

    // docs/meta.md, "Against PyTorch's own estimate: MemTracker".
    using test::docTableRow;
    using test::groupedBytes;
    using test::PyTorchFigure;
    // Each row's figures against MemTracker's (meta_truth); the rows of what memledger does not hold against
    // MemTracker's peak total (within `within`, else 2%: what the script holds is a few percent of it).
    const PyTorchFigure weights {"MemTracker Parameter + Buffer", r.weight_bytes,
        after["Parameter"].get<std::int64_t>() + after["Buffer"].get<std::int64_t>(), 0};
    const PyTorchFigure optimizer {"MemTracker Optstate (memledger's optimizer state and the step tensors)",
        r.optimizer_state_bytes + steps, after["Optstate"].get<std::int64_t>(), 0};
    const PyTorchFigure peakTotal {"MemTracker peak total", r.peak_total_bytes, mt["peak"]["Total"].get<std::int64_t>(),
        within ? *within : 0.02};
    docTableRow("meta.md", table,
        {"parameters + buffers", groupedBytes(after["Parameter"].get<std::int64_t>()) + " + " + groupedBytes(after["Buffer"].get<std::int64_t>()),
            groupedBytes(r.weight_bytes)},
        {weights});
    docTableRow("meta.md", table, {"gradients", groupedBytes(after["Gradient"].get<std::int64_t>()), groupedBytes(r.gradient_bytes)},
        {{"MemTracker Gradient", r.gradient_bytes, after["Gradient"].get<std::int64_t>(), 0}});
    docTableRow("meta.md", table,
        {"optimizer state", groupedBytes(after["Optstate"].get<std::int64_t>()), groupedBytes(r.optimizer_state_bytes)},
        {optimizer});
    docTableRow("meta.md", table, {"of it, AdamW's `step` tensors (host)", groupedBytes(steps), "0 (a number)"}, {optimizer});
    docTableRow("meta.md", table,
        {"inputs", groupedBytes(after["Other"].get<std::int64_t>()) + " (\"Other\": the tokens)",
            groupedBytes(r.input_bytes) + " (tokens and the loss's targets)"},
        {peakTotal});
    docTableRow("meta.md", table,
        {"held by the script through `opt.step()`", groupedBytes(held) + " (\"Activation\")",
            r.run.hold_output == "step" ? "held too (`--hold-output step`)" : "0"},
        {peakTotal});
    char percent[32];
    std::snprintf(percent, sizeof percent, " (%+.2f%%)", 100.0 * (ours - theirs) / theirs);
    std::string pct = percent;
    if (auto minus = pct.find('-'); minus != std::string::npos)
        pct.replace(minus, 1, "\u2212");
    docTableRow("meta.md", table,
        {"peak total", groupedBytes(mt["peak"]["Total"].get<std::int64_t>()), groupedBytes(r.peak_total_bytes) + pct},
        {peakTotal});
}

TEST_F(MetaWeights, MemTrackerAgrees)
{
    if (!metaTruth().contains("mem_tracker"))
        GTEST_SKIP() << metaTruth().value("mem_tracker_skipped", std::string("no MemTracker figures"));
    auto model = Model::open(fixture("meta/llama_mt.pt2"));
    auto r = analyzeModel(model, options(metaTruth()["mt_input"].get<std::string>(), "", RunMode::Train));
    expectMemTrackerFigures(metaTruth()["mem_tracker"], r, "memtracker", 0.02);
}

// The float32 program run with --dtype bfloat16 (converted on meta) against MemTracker's step of the model after
// model.to(torch.bfloat16): the question a fine-tune in bfloat16 asks. Weights, gradients and state are equal; the
// peaks differ by exactly what the script holds (the float32 logits, 2.8% of this smaller total), so no percentage
// is asked of them.
TEST_F(MetaWeights, MemTrackerAgreesInBfloat16)
{
    if (!metaTruth().contains("mem_tracker_bf16"))
        GTEST_SKIP() << metaTruth().value("mem_tracker_skipped", std::string("no MemTracker figures in bfloat16 (make_meta_fixtures is older)"));
    auto model = Model::open(fixture("meta/llama_mt.pt2"));
    auto o = options(metaTruth()["mt_input"].get<std::string>(), "", RunMode::Train);
    o.dtype = "bfloat16";
    auto r = analyzeModel(model, o);
    expectMemTrackerFigures(metaTruth()["mem_tracker_bf16"], r, "memtracker-bf16", std::nullopt);
}
