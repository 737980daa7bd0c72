// --autocast on the meta device: memledger applies CUDA autocast's rules to a torch.export program's operators
// (core/recording/autocast_emulation.cpp), against PyTorch's own CUDA autocast run on fake CUDA tensors
// (tests/fixtures/meta_autocast_truths.py, meta_autocast/meta_autocast_truth.json, MemTracker's exact bytes): two GPT
// programs (LayerNorm, and an RMSNorm computed with autocast's float32 ops), and an HF-shaped decoder saved by
// memledger.export whose casts take their type from tensors (against the eager model itself, eager lifetimes);
// bfloat16 and float16, the weight-cast cache on and off; inference, and a training step's autocast region (the
// forward and the loss). Skipped, with the reason, where the truth says so or the build has no meta runs or no CUDA
// autocast lists.
#include "doc_table.h"
#include "fixture_paths.h"
#include "recording/build_report.h"
#include "recording/model.h"
#include "support/errors.h"
#include "support/format.h"
#include "whatif/whatif.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <ostream>
#include <string>
#include <tuple>

using namespace memledger;
using memledger::test::fixture;

namespace {

const nlohmann::json& metaAutocastTruth()
{
    static const nlohmann::json truth
        = test::readTruth("meta_autocast/meta_autocast_truth.json", "make_meta_autocast_fixtures");
    return truth;
}

std::string skipReason()
{
    if (!metaRunsSupported())
        return "this build has no meta runs (" + torchBuildInfo() + ")";
    if (!canRunExportedPrograms())
        return "this build runs no torch.export programs (" + torchBuildInfo() + ")";
    if (metaAutocastTruth().contains("skipped"))
        return metaAutocastTruth()["skipped"].get<std::string>();
    return {};
}

struct MetaCase {
    std::string model; // gpt_ln | gpt_rms
    std::string mode; // inference | train_forward
    std::string dtype; // bfloat16 | float16
    bool cache = true;
};

std::string label(const MetaCase& c)
{
    return c.model + "_" + c.mode + "_" + c.dtype + (c.cache ? "_cache" : "_nocache");
}

void PrintTo(const MetaCase& c, std::ostream* out)
{
    *out << label(c);
}

const nlohmann::json* truthOf(const MetaCase& c)
{
    for (const auto& t : metaAutocastTruth().at("cases"))
        if (t["model"] == c.model && t["mode"] == c.mode && t["dtype"] == c.dtype && t["cache_enabled"] == c.cache)
            return &t;
    return nullptr;
}

RunOptions optionsFor(const MetaCase& c)
{
    RunOptions o;
    auto parsed = parseInputs(metaAutocastTruth()["input"].get<std::string>());
    o.inputs = parsed.shapes;
    o.input_types = parsed.types;
    o.device = "meta";
    o.mode = c.mode == "inference" ? RunMode::Inference : RunMode::Train;
    o.optimizer = "adamw";
    o.loss = "next_token"; // F.cross_entropy(out.flatten(0, 1), targets), as the truth computes it
    o.autocast = c.dtype;
    o.autocast_cache = c.cache;
    // the truths run torch.export.load(FILE).module() (the graph's lifetimes), or the eager model itself
    o.lifetimes = metaAutocastTruth()["programs"][c.model].value("lifetimes", std::string("graph"));
    o.hold_output = "backward"; // the truth's region is the first step's: no previous step's output is alive
    return o;
}

const Report& recorded(const MetaCase& c)
{
    static std::map<std::tuple<std::string, std::string, std::string, bool>, Report> cache;
    auto key = std::make_tuple(c.model, c.mode, c.dtype, c.cache);
    if (auto it = cache.find(key); it != cache.end())
        return it->second;
    auto file = fixture("meta_autocast/" + metaAutocastTruth()["programs"][c.model]["file"].get<std::string>());
    auto model = Model::open(file);
    return cache.emplace(key, analyzeModel(model, optionsFor(c))).first->second;
}

class MetaAutocastTruth : public ::testing::TestWithParam<MetaCase> {
protected:
    void SetUp() override
    {
        if (auto why = skipReason(); !why.empty())
            GTEST_SKIP() << why;
        truth = truthOf(GetParam());
        ASSERT_NE(truth, nullptr) << "the truth has no case " << label(GetParam());
        if (truth->contains("error"))
            FAIL() << "PyTorch's own run failed: " << (*truth)["error"].get<std::string>();
        try {
            report = &recorded(GetParam());
        } catch (const std::exception& e) {
            FAIL() << label(GetParam()) << ": " << e.what();
        }
    }
    const nlohmann::json* truth = nullptr;
    const Report* report = nullptr;
};

std::int64_t truthBytes(const nlohmann::json& j, const char* key)
{
    return j.contains(key) ? j.at(key).get<std::int64_t>() : 0;
}

// The most the autocast region held at once, with the weights (MemTracker counts the parameters it sees): inference's
// whole run; a step's forward and loss phases.
std::int64_t regionPeak(const Report& r, const MetaCase& c)
{
    if (c.mode == "inference")
        return r.weight_bytes + r.peak_bytes;
    std::int64_t peak = 0;
    for (const char* name : {"forward", "loss"})
        if (const auto* p = findPhase(r.phases, name))
            peak = std::max(peak, p->peak_bytes);
    return r.weight_bytes + peak;
}

} // namespace

// The run says what it ran, as a CPU or GPU run under autocast does.
TEST_P(MetaAutocastTruth, TheRunSaysItsAutocast)
{
    EXPECT_EQ(report->run.autocast, GetParam().dtype);
    EXPECT_EQ(report->run.autocast_cache, GetParam().cache);
    EXPECT_EQ(report->run.device, "meta");
    const auto& program = metaAutocastTruth()["programs"][GetParam().model];
    EXPECT_EQ(report->weight_bytes, truthBytes(program, "parameter_bytes") + truthBytes(program, "buffer_bytes"));
}

// The peak of the autocast region is PyTorch's CUDA autocast's, to the byte: the same casts (the lower-precision
// list's inputs, the float32 list's, softmax's dtype), the same cache.
TEST_P(MetaAutocastTruth, TheRegionsPeakIsCudaAutocasts)
{
    const auto ours = regionPeak(*report, GetParam());
    const auto theirs = truthBytes(*truth, "peak_bytes");
    std::printf("[ meta autocast ] %-34s memledger %10lld PyTorch (fake CUDA) %10lld\n", label(GetParam()).c_str(),
        static_cast<long long>(ours), static_cast<long long>(theirs));
    EXPECT_EQ(ours, theirs);
    test::docTableRow("cli.md", "meta-autocast", {label(GetParam()), test::groupedBytes(theirs), test::groupedBytes(ours)},
        {{"meta_autocast_truth " + label(GetParam()) + " peak_bytes", ours, theirs, 0}});
}

// The weight-cast cache's ledger is what the region's end freed: every weight's cast in inference (the cache holds the
// only reference), in a step the casts autograd did not save (none where it saves them all: a model without biases);
// nothing with the cache off.
TEST_P(MetaAutocastTruth, TheCacheLedgerIsWhatTheRegionsEndFreed)
{
    const auto& ledger = report->ledgers[static_cast<std::size_t>(Ledger::AutocastCache)];
    if (GetParam().mode == "train_forward")
        EXPECT_EQ(ledger.total, truthBytes(*truth, "exit_freed_bytes"));
    if (!GetParam().cache)
        EXPECT_EQ(ledger.total, 0);
    else if (GetParam().mode == "inference")
        EXPECT_GT(ledger.total, 0);
}

INSTANTIATE_TEST_SUITE_P(Runs, MetaAutocastTruth,
    ::testing::Values(MetaCase {"gpt_ln", "inference", "bfloat16", true}, MetaCase {"gpt_ln", "inference", "bfloat16", false},
        MetaCase {"gpt_ln", "inference", "float16", true}, MetaCase {"gpt_ln", "inference", "float16", false},
        MetaCase {"gpt_ln", "train_forward", "bfloat16", true}, MetaCase {"gpt_ln", "train_forward", "bfloat16", false},
        MetaCase {"gpt_ln", "train_forward", "float16", true}, MetaCase {"gpt_ln", "train_forward", "float16", false},
        MetaCase {"gpt_rms", "inference", "bfloat16", true}, MetaCase {"gpt_rms", "inference", "bfloat16", false},
        MetaCase {"gpt_rms", "train_forward", "bfloat16", true}, MetaCase {"gpt_rms", "train_forward", "bfloat16", false},
        MetaCase {"hf_eager", "inference", "bfloat16", true}, MetaCase {"hf_eager", "inference", "bfloat16", false},
        MetaCase {"hf_eager", "inference", "float16", true}, MetaCase {"hf_eager", "train_forward", "bfloat16", true},
        MetaCase {"hf_eager", "train_forward", "bfloat16", false}),
    [](const ::testing::TestParamInfo<MetaCase>& info) { return label(info.param); });

// A TorchScript model's operators are not memledger's to call one by one: on the meta device --autocast is refused,
// saying what runs instead.
TEST(MetaAutocast, ATorchScriptModelIsRefusedWithTheWayOut)
{
    if (!metaRunsSupported())
        GTEST_SKIP() << "this build has no meta runs (" << torchBuildInfo() << ")";
    auto model = Model::open(fixture("mnist.pt"));
    RunOptions o;
    o.inputs = {{1, 1, 28, 28}};
    o.device = "meta";
    o.autocast = "bfloat16";
    try {
        analyzeModel(model, o);
        ADD_FAILURE() << "a TorchScript meta run under autocast ran";
    } catch (const RunError& e) {
        EXPECT_NE(std::string(e.what()).find("torch.export programs"), std::string::npos) << e.what();
    }
}
