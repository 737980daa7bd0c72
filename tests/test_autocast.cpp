// --autocast: a run under libtorch's own autocast (around the forward and the loss, as users write
// `with torch.autocast(...)`) against PyTorch's figures for the same runs under torch.autocast("cpu", ...)
// (tests/fixtures/autocast_truths.py, autocast/autocast_truth.json): a torch.export decoder (llama_gqa.pt2), a
// TorchScript CNN (cnn_bn.pt) and an HF-shaped decoder saved by memledger.export whose casts take their type from
// tensors (hf_eager.pt2, against the eager model itself), inference and an AdamW step, bfloat16 and float16 with the weight-cast cache on and
// off, and the same runs without autocast. The peak totals and the step's peak within 1%; the autocast cache's
// ledger is what the region's clear_cache() freed. Skipped, with the reason, where the truth says so or the build
// runs no torch.export programs.
#include "doc_table.h"
#include "exports/report_json.h"
#include "exports/report_text.h"
#include "truth_file.h"
#include "recording/build_report.h"
#include "recording/model.h"
#include "run_command.h"
#include "support/errors.h"
#include "support/format.h"
#include "whatif/whatif.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <ostream>
#include <memory>
#include <string>
#include <tuple>

using namespace memledger;
using memledger::test::fixture;
using memledger::test::runCommand;

namespace {

const nlohmann::json& autocastTruth()
{
    static const nlohmann::json truth = test::readTruth("autocast/autocast_truth.json", "make_autocast_fixtures");
    return truth;
}

// Why the cases cannot run here; "" when they can.
std::string skipReason()
{
    return test::whyTruthIsNotHere(autocastTruth(), true);
}

struct AutocastCase {
    std::string model; // llama_gqa | cnn_bn | hf_eager
    std::string mode; // inference | train
    std::string dtype; // float32 (no autocast) | bfloat16 | float16
    bool cache = true;
};

std::string label(const AutocastCase& c)
{
    return c.model + "_" + c.mode + "_" + c.dtype + (c.dtype == "float32" ? "" : c.cache ? "_cache" : "_nocache");
}

std::string caseName(const ::testing::TestParamInfo<AutocastCase>& info)
{
    return label(info.param);
}

void PrintTo(const AutocastCase& c, std::ostream* out)
{
    *out << label(c);
}

// The truth's case, or null when it has none (float16 where the fixtures' torch has no float16 CPU autocast).
const nlohmann::json* truthOf(const AutocastCase& c)
{
    const auto& all = autocastTruth();
    if (!all.contains("cases"))
        return nullptr;
    for (const auto& t : all["cases"]) {
        if (t["model"] != c.model || t["mode"] != c.mode || t["dtype"] != c.dtype)
            continue;
        if (c.dtype != "float32" && t["cache_enabled"].get<bool>() != c.cache)
            continue;
        return &t;
    }
    return nullptr;
}

RunOptions optionsFor(const AutocastCase& c)
{
    const auto& program = autocastTruth()["programs"][c.model];
    RunOptions o;
    auto parsed = parseInputs(program["input"].get<std::string>());
    o.inputs = parsed.shapes;
    o.input_types = parsed.types;
    o.threads = 1; // as the truths
    o.device = "cpu";
    o.mode = c.mode == "train" ? RunMode::Train : RunMode::Inference;
    o.optimizer = "adamw";
    // the truths run torch.export.load(FILE).module() (the graph's lifetimes), or the eager model itself
    o.lifetimes = program.value("lifetimes", std::string("graph"));
    o.hold_output = "backward"; // autocast_truths.py's loop: `del out, loss` after loss.backward(), before opt.step()
    if (c.dtype != "float32") {
        o.autocast = c.dtype;
        o.autocast_cache = c.cache;
    }
    return o;
}

// One model opened and one run recorded per case, shared by the tests of that case.
const Report& recorded(const AutocastCase& c)
{
    static std::map<std::tuple<std::string, std::string, std::string, bool>, Report> cache;
    auto key = std::make_tuple(c.model, c.mode, c.dtype, c.cache);
    auto it = cache.find(key);
    if (it != cache.end())
        return it->second;
    auto model = Model::open(fixture("autocast/" + autocastTruth()["programs"][c.model]["file"].get<std::string>()));
    return cache.emplace(key, analyzeModel(model, optionsFor(c))).first->second;
}

std::int64_t num(const nlohmann::json& j, const char* key)
{
    return j.value(key, std::int64_t {0});
}

double percentOff(double ours, double theirs)
{
    return theirs != 0.0 ? 100.0 * (ours - theirs) / theirs : 0.0;
}

class AutocastTruth : public ::testing::TestWithParam<AutocastCase> {
protected:
    void SetUp() override
    {
        if (auto why = skipReason(); !why.empty())
            GTEST_SKIP() << why;
        truth = truthOf(GetParam());
        if (!truth)
            GTEST_SKIP() << "the truth has no " << label(GetParam()) << " (its torch's CPU autocast takes "
                         << autocastTruth().value("autocast_dtypes", nlohmann::json::array()).dump() << ")";
        if (truth->contains("error"))
            GTEST_SKIP() << "PyTorch's own run failed: " << (*truth)["error"].get<std::string>();
        try {
            report = &recorded(GetParam());
        } catch (const std::exception& e) {
            FAIL() << label(GetParam()) << ": " << e.what();
        }
    }
    const nlohmann::json* truth = nullptr;
    const Report* report = nullptr;
};

} // namespace

// The run says what it ran: the weights' dtype, autocast's and its cache, in RunInfo, the text header and the JSON
// (which reads back).
TEST_P(AutocastTruth, TheRunSaysItsAutocast)
{
    const auto& c = GetParam();
    const auto& run = report->run;
    EXPECT_EQ(run.dtype, "float32");
    const std::string header = reportToText(*report).substr(0, 400);
    auto json = reportToJson(*report, false);
    if (c.dtype == "float32") {
        EXPECT_EQ(run.autocast, "");
        EXPECT_EQ(header.find("under autocast"), std::string::npos) << header;
        EXPECT_FALSE(json["run"].contains("autocast"));
        return;
    }
    EXPECT_EQ(run.autocast, c.dtype);
    EXPECT_EQ(run.autocast_cache, c.cache);
    const std::string line
        = "float32 weights under autocast " + c.dtype + " (weight-cast cache " + (c.cache ? "on" : "off") + ")";
    EXPECT_NE(header.find(line), std::string::npos) << header;
    EXPECT_EQ(json["run"]["autocast"], c.dtype);
    EXPECT_EQ(json["run"]["autocast_cache"], c.cache);
    auto back = reportFromJson(reportToJson(*report), "autocast.json");
    EXPECT_EQ(back.run.autocast, c.dtype);
    EXPECT_EQ(back.run.autocast_cache, c.cache);
    EXPECT_EQ(back.ledgers[static_cast<std::size_t>(Ledger::AutocastCache)].total,
        report->ledgers[static_cast<std::size_t>(Ledger::AutocastCache)].total);
}

// What is resident before the run (weights, inputs and targets, AdamW's moments) is PyTorch's, byte for byte; AdamW's
// `step` counters are 0-dim float32 tensors in PyTorch and a number in memledger.
TEST_P(AutocastTruth, ResidentBytesAreExact)
{
    EXPECT_EQ(report->weight_bytes, num(*truth, "parameter_bytes") + num(*truth, "buffer_bytes"));
    EXPECT_EQ(report->input_bytes, num(*truth, "input_bytes") + num(*truth, "target_bytes"));
    EXPECT_EQ(report->optimizer_state_bytes, num(*truth, "optimizer_state_bytes"));
}

// The peak total (what is resident plus the most the run holds besides) and the run's own peak within 1% of the
// profiler's.
TEST_P(AutocastTruth, PeaksWithinOnePercentOfTheProfiler)
{
    const auto name = label(GetParam());
    const double theirsTotal = static_cast<double>(num(*truth, "peak_total_bytes") - num(*truth, "step_tensor_bytes"));
    const double oursTotal = static_cast<double>(report->peak_total_bytes);
    const double theirsPeak = static_cast<double>(num(*truth, "peak_bytes"));
    const double oursPeak = static_cast<double>(report->peak_bytes);
    std::printf("[ autocast ] %-36s peak total memledger %10lld profiler %10lld (%+.3f%%); peak memledger %10lld "
                "profiler %10lld (%+.3f%%)\n",
        name.c_str(), static_cast<long long>(oursTotal), static_cast<long long>(theirsTotal),
        percentOff(oursTotal, theirsTotal), static_cast<long long>(oursPeak), static_cast<long long>(theirsPeak),
        percentOff(oursPeak, theirsPeak));
    EXPECT_NEAR(oursTotal, theirsTotal, 0.01 * theirsTotal) << name;
    EXPECT_NEAR(oursPeak, theirsPeak, 0.01 * theirsPeak) << name;
    auto withOff = [](double ours, double theirs) {
        char pct[32];
        std::snprintf(pct, sizeof pct, " (%+.2f%%)", percentOff(ours, theirs));
        return test::groupedBytes(static_cast<std::int64_t>(ours)) + pct;
    };
    const auto cache = report->ledgers[static_cast<std::size_t>(Ledger::AutocastCache)].total;
    test::docTableRow("cli.md", "autocast",
        {name, test::groupedBytes(static_cast<std::int64_t>(theirsTotal)), withOff(oursTotal, theirsTotal),
            test::groupedBytes(static_cast<std::int64_t>(theirsPeak)), withOff(oursPeak, theirsPeak),
            test::groupedBytes(cache)},
        {{"autocast_truth " + name + " peak total", static_cast<std::int64_t>(oursTotal),
             static_cast<std::int64_t>(theirsTotal), 0.01},
            {"autocast_truth " + name + " peak", static_cast<std::int64_t>(oursPeak), static_cast<std::int64_t>(theirsPeak), 0.01},
            {"autocast_truth " + name + " freed at the region's exit", cache, -num(*truth, "autocast_exit_bytes"), 0}},
        // bfloat16 and float16 on the CPU: oneDNN picks its kernels, and their scratch, by the instructions the CPU
        // has (avx512_bf16, avx512_fp16, AMX), so the figures are this CPU's; the row is checked for its key here, the
        // figures against PyTorch's above
        false);
}

// The autocast cache's ledger is what the region's end freed: in inference the casts of every float32 weight that
// requires grad (the cache holds the only reference), in a training step the casts that autograd did not save (a
// convolution's bias); nothing with the cache off or without autocast.
TEST_P(AutocastTruth, AutocastCacheLedgerIsWhatTheRegionsEndFreed)
{
    const auto& c = GetParam();
    const auto& ledger = report->ledgers[static_cast<std::size_t>(Ledger::AutocastCache)];
    const auto freedAtExit = -num(*truth, "autocast_exit_bytes");
    std::printf("[ cache    ] %-36s memledger %lld profiler (freed at the region's exit) %lld\n",
        label(c).c_str(), static_cast<long long>(ledger.total), static_cast<long long>(freedAtExit));
    EXPECT_EQ(ledger.total, freedAtExit);
    if (c.dtype == "float32" || !c.cache)
        EXPECT_EQ(ledger.total, 0);
    else if (c.mode == "inference")
        EXPECT_EQ(ledger.total, autocastTruth()["programs"][c.model]["weight_casts"]["bytes_16bit"].get<std::int64_t>());
    // Every cached cast is alive from its first use to the region's end: all of them at once before it ends.
    EXPECT_EQ(ledger.max, ledger.total);
}

// A torch.export program's dtype checks (aten._assert_tensor_metadata after a cast) fail under autocast in PyTorch;
// memledger skips them and its report says so.
TEST_P(AutocastTruth, AProgramsDtypeChecksAreSkippedAndSaidSo)
{
    const auto& c = GetParam();
    bool noted = false;
    for (const auto& n : report->notes)
        noted = noted || n.find("_assert_tensor_metadata") != std::string::npos;
    if (c.model == "hf_eager")
        GTEST_SKIP() << "its truths run the eager model, which has no dtype checks to fail";
    if (c.model != "llama_gqa" || c.dtype == "float32") {
        EXPECT_FALSE(noted);
        return;
    }
    const auto& program = autocastTruth()["programs"][c.model];
    ASSERT_TRUE(program.contains("plain_error"));
    EXPECT_NE(program["plain_error"][c.mode].get<std::string>().find("dtype mismatch"), std::string::npos);
    const auto count = std::to_string(num(*truth, "asserts_removed"));
    bool counted = false;
    for (const auto& n : report->notes)
        counted = counted || (n.find("_assert_tensor_metadata") != std::string::npos && n.find(count + " dtype") != std::string::npos);
    EXPECT_TRUE(counted) << "no note that the program's " << count << " dtype checks were skipped";
}

INSTANTIATE_TEST_SUITE_P(Runs, AutocastTruth,
    ::testing::Values(AutocastCase {"llama_gqa", "inference", "float32"}, AutocastCase {"llama_gqa", "inference", "bfloat16", true},
        AutocastCase {"llama_gqa", "inference", "bfloat16", false}, AutocastCase {"llama_gqa", "inference", "float16", true},
        AutocastCase {"llama_gqa", "inference", "float16", false}, AutocastCase {"llama_gqa", "train", "float32"},
        AutocastCase {"llama_gqa", "train", "bfloat16", true}, AutocastCase {"llama_gqa", "train", "bfloat16", false},
        AutocastCase {"llama_gqa", "train", "float16", true}, AutocastCase {"llama_gqa", "train", "float16", false},
        AutocastCase {"cnn_bn", "inference", "float32"}, AutocastCase {"cnn_bn", "inference", "bfloat16", true},
        AutocastCase {"cnn_bn", "inference", "bfloat16", false}, AutocastCase {"cnn_bn", "inference", "float16", true},
        AutocastCase {"cnn_bn", "inference", "float16", false}, AutocastCase {"cnn_bn", "train", "float32"},
        AutocastCase {"cnn_bn", "train", "bfloat16", true}, AutocastCase {"cnn_bn", "train", "bfloat16", false},
        AutocastCase {"cnn_bn", "train", "float16", true}, AutocastCase {"cnn_bn", "train", "float16", false},
        AutocastCase {"hf_eager", "inference", "float32"}, AutocastCase {"hf_eager", "inference", "bfloat16", true},
        AutocastCase {"hf_eager", "inference", "bfloat16", false}, AutocastCase {"hf_eager", "inference", "float16", true},
        AutocastCase {"hf_eager", "inference", "float16", false}, AutocastCase {"hf_eager", "train", "float32"},
        AutocastCase {"hf_eager", "train", "bfloat16", true}, AutocastCase {"hf_eager", "train", "bfloat16", false},
        AutocastCase {"hf_eager", "train", "float16", true}, AutocastCase {"hf_eager", "train", "float16", false}),
    caseName);

namespace {

class Autocast : public ::testing::Test {
protected:
    void SetUp() override
    {
        if (auto why = skipReason(); !why.empty())
            GTEST_SKIP() << why;
    }
    static std::string file(const std::string& model)
    {
        return fixture("autocast/" + autocastTruth()["programs"][model]["file"].get<std::string>());
    }
};

} // namespace

// The region restores autocast's state however it ends: after a run that failed inside it, and after one that
// ended, a run without autocast is the float32 run (bfloat16 casts would change its peak by a fifth).
TEST_F(Autocast, TheStateBeforeIsRestored)
{
    const AutocastCase plain {"cnn_bn", "inference", "float32"};
    const auto* truth = truthOf(plain);
    ASSERT_NE(truth, nullptr);
    auto model = Model::open(file("cnn_bn"));
    auto bad = optionsFor({"cnn_bn", "inference", "bfloat16", true});
    bad.inputs = {{1, 5, 64, 64}}; // five channels for a convolution of three: the forward fails under autocast
    EXPECT_THROW(analyzeModel(model, bad), RunError);
    auto after = analyzeModel(model, optionsFor(plain));
    EXPECT_EQ(after.run.autocast, "");
    EXPECT_EQ(after.ledgers[static_cast<std::size_t>(Ledger::AutocastCache)].total, 0);
    EXPECT_NEAR(static_cast<double>(after.peak_bytes), static_cast<double>(num(*truth, "peak_bytes")),
        0.01 * static_cast<double>(num(*truth, "peak_bytes")));
    auto ok = optionsFor({"cnn_bn", "inference", "bfloat16", true});
    analyzeModel(model, ok);
    auto again = analyzeModel(model, optionsFor(plain));
    EXPECT_EQ(again.peak_bytes, after.peak_bytes);
}

// The command line: --autocast and --autocast-cache reach the run and the JSON; values it does not take are usage
// errors (exit 2).
TEST_F(Autocast, TheCliTakesAutocastAndItsCache)
{
    const auto json = ::testing::TempDir() + "autocast_cli.json";
    const auto bin = test::memledgerBinary() + " analyze '" + file("cnn_bn") + "' --input 1x3x64x64 --threads 1 ";
    auto r = runCommand(bin + "--autocast bfloat16 --autocast-cache off --json " + json);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("float32 weights under autocast bfloat16 (weight-cast cache off)"), std::string::npos)
        << r.output;
    std::ifstream in(json);
    auto j = nlohmann::json::parse(in);
    EXPECT_EQ(j["run"]["autocast"], "bfloat16");
    EXPECT_EQ(j["run"]["autocast_cache"], false);
    auto cached = runCommand(bin + "--autocast bfloat16");
    ASSERT_EQ(cached.exit_code, 0) << cached.output;
    EXPECT_NE(cached.output.find("autocast weight casts"), std::string::npos) << cached.output;
    auto wrong = runCommand(bin + "--autocast float32");
    EXPECT_EQ(wrong.exit_code, 2) << wrong.output;
    EXPECT_NE(wrong.output.find("--autocast 'float32' is not bfloat16 or float16"), std::string::npos) << wrong.output;
    auto cache = runCommand(bin + "--autocast bfloat16 --autocast-cache maybe");
    EXPECT_EQ(cache.exit_code, 2) << cache.output;
    EXPECT_NE(cache.output.find("--autocast-cache 'maybe' is not on or off"), std::string::npos) << cache.output;
}

// A type the model's source takes from a tensor (`q_type = q.dtype; ... .to(q_type)`, `.to(value.dtype)`) is the
// exported float32 in the program; under autocast eager PyTorch passes bfloat16 where that tensor is bfloat16.
// memledger.export records which (python/memledger/autocast_types.py) and the run follows the record: the peak is the
// eager model's, and nothing is said. The same archive without the record runs those casts in float32 (no copy where
// eager makes one, a float32 result where eager's is half the size), misses the peak, and says that its figures may
// be off, in the report and in the what-if's notes.
TEST_F(Autocast, ATypeTheSourceTakesFromATensorFollowsItUnderAutocast)
{
    const AutocastCase c {"hf_eager", "inference", "bfloat16", false};
    const auto* truth = truthOf(c);
    ASSERT_NE(truth, nullptr);
    auto saysMayErr = [](const std::vector<std::string>& notes) {
        return std::any_of(notes.begin(), notes.end(), [](const std::string& n) {
            return n.find("take the type from a tensor") != std::string::npos && n.find("may be off") != std::string::npos;
        });
    };
    const auto& recordedRun = recorded(c);
    EXPECT_EQ(recordedRun.peak_bytes, num(*truth, "peak_bytes"));
    EXPECT_FALSE(saysMayErr(recordedRun.notes));

    auto unrecorded = Model::open(fixture("autocast/" + autocastTruth()["programs"]["hf_eager"]["unrecorded"].get<std::string>()));
    auto plain = analyzeModel(unrecorded, optionsFor(c));
    EXPECT_NE(plain.peak_bytes, num(*truth, "peak_bytes"));
    EXPECT_TRUE(saysMayErr(plain.notes));
    auto w = WhatIf::record(unrecorded, optionsFor(c), 1, 2, {});
    EXPECT_TRUE(saysMayErr(w.figureNotes()));
    // without autocast there is nothing to say
    EXPECT_FALSE(saysMayErr(analyzeModel(unrecorded, optionsFor({"hf_eager", "inference", "float32"})).notes));
}

// The what-if keeps the run's autocast: its records run under it, a predicted report keeps the cache's ledger, and
// a measured row runs under it too.
TEST_F(Autocast, TheWhatIfKeepsAutocast)
{
    const AutocastCase c {"cnn_bn", "inference", "bfloat16", true};
    const auto* truth = truthOf(c);
    ASSERT_NE(truth, nullptr);
    auto model = Model::open(file("cnn_bn"));
    // The run's precision is "bfloat16-mixed" (float32 weights under bfloat16 autocast); "float32" beside it is the
    // model without autocast.
    auto w = WhatIf::record(model, optionsFor(c), 1, 2, {"float32"});
    const auto dtypes = w.dtypes();
    ASSERT_NE(std::find(dtypes.begin(), dtypes.end(), "bfloat16-mixed"), dtypes.end());
    auto predicted = w.predictedReport(1, "bfloat16-mixed");
    EXPECT_EQ(predicted.run.autocast, "bfloat16");
    EXPECT_EQ(predicted.run.dtype, "float32");
    EXPECT_EQ(predicted.ledgers[static_cast<std::size_t>(Ledger::AutocastCache)].total,
        autocastTruth()["programs"]["cnn_bn"]["weight_casts"]["bytes_16bit"].get<std::int64_t>());
    EXPECT_EQ(w.predictedReport(1, "float32").run.autocast, "");
    auto measured = w.measure(model, 1, "bfloat16-mixed");
    ASSERT_TRUE(measured.measured_peak_total_bytes.has_value());
    const double theirs = static_cast<double>(num(*truth, "peak_total_bytes"));
    EXPECT_NEAR(static_cast<double>(*measured.measured_peak_total_bytes), theirs, 0.01 * theirs);
}
