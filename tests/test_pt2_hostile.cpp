// Hostile and broken torch.export programs (.pt2): each is a real exported program (tests/fixtures/lm_models.py's
// GPT) with its JSON or its zip rewritten by tests/fixtures/pt2_hostile.py, and `memledger analyze` must refuse it
// with exit 3 naming the file and the reason, as it refuses a bad snapshot: never a crash, a hang or an allocation
// the file asks for.
#include "fixture_paths.h"
#include "run_command.h"

#include "recording/model.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>

using namespace memledger::test;

namespace {

const std::string kSource = "lm/gpt_sdpa.pt2";

struct Hostile {
    std::string file; // pt2_hostile.py's case
    std::string reason; // a part of the message
    int exit_code = 3;
};

class HostileProgram : public ::testing::TestWithParam<Hostile> { };

// Why case `name` cannot be made here ("" once its file is written): this build runs no .pt2, or the fixture is
// missing; a failure of the script comes back as "pt2_hostile.py failed: ...".
std::string make(const std::string& name)
{
    if (!memledger::canRunExportedPrograms())
        return "this build's libtorch runs no torch.export programs (the PyTorch 2 build does)";
    if (!std::ifstream(fixture(kSource)))
        return fixture(kSource) + " was not made (make_lm_fixtures did not run)";
    auto r = runCommand(std::string(MEMLEDGER_PYTHON) + " " + MEMLEDGER_SOURCE_DIR + "/tests/fixtures/pt2_hostile.py '"
        + fixture(kSource) + "' '" + fixture("pt2_hostile") + "' " + name);
    return r.exit_code == 0 ? std::string() : "pt2_hostile.py failed: " + r.output;
}

} // namespace

TEST_P(HostileProgram, IsRefusedNamingTheFileAndTheReason)
{
    auto why = make(GetParam().file);
    if (why.rfind("pt2_hostile.py failed", 0) == 0)
        FAIL() << why;
    if (!why.empty())
        GTEST_SKIP() << why;
    const auto path = fixture("pt2_hostile/" + GetParam().file + ".pt2");
    auto r = runCommand(memledgerBinary() + " analyze '" + path + "' --input 1x16:int64");
    EXPECT_EQ(r.exit_code, GetParam().exit_code) << r.output;
    EXPECT_NE(r.output.find(path), std::string::npos) << r.output;
    auto message = r.output;
    for (auto at = message.find(path); at != std::string::npos; at = message.find(path))
        message.erase(at, path.size());
    EXPECT_NE(message.find(GetParam().reason), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("terminate called"), std::string::npos) << r.output;
}

namespace {

// Each of the cases `names`, made, runs with each of the argument lists `runs` (after `--input 1x16:int64`), and its
// output says `says` and not `saysNot` where given.
void eachRuns(const std::vector<std::string>& names, const std::vector<std::string>& runs, const std::string& says = "",
    const std::string& saysNot = "")
{
    for (const auto& name : names) {
        SCOPED_TRACE(name);
        auto why = make(name);
        if (why.rfind("pt2_hostile.py failed", 0) == 0)
            FAIL() << why;
        if (!why.empty())
            GTEST_SKIP() << why;
        for (const auto& args : runs) {
            auto r = runCommand(memledgerBinary() + " analyze '" + fixture("pt2_hostile/" + name + ".pt2")
                + "' --input 1x16:int64" + args);
            EXPECT_EQ(r.exit_code, 0) << args << ": " << r.output;
            EXPECT_EQ(r.output.find("terminate called"), std::string::npos) << r.output;
            if (!says.empty())
                EXPECT_NE(r.output.find(says), std::string::npos) << r.output;
            if (!saysNot.empty())
                EXPECT_EQ(r.output.find(saysNot), std::string::npos) << r.output;
        }
    }
}

} // namespace

// Source facts (extra/memledger_sources.json, which memledger.export writes for eager lifetimes) that are not JSON,
// not of the types it writes, absurd, or nested past the JSON reader's limit are ignored: the program runs.
TEST(HostileProgramControl, BadSourceFactsAreIgnored)
{
    eachRuns({"sources_not_json", "sources_wrong_types", "sources_version_text", "sources_absurd", "sources_deep"}, {""},
        "eager lifetimes");
}

// Autocast types (extra/memledger_autocast.json, which memledger.export writes) that are not JSON, not of the types it
// writes, absurd (integer types, counts past any program, indexes that are not numbers), or nested past the JSON
// reader's limit are not used: the program runs under --autocast, on the CPU and on meta.
TEST(HostileProgramControl, BadAutocastTypesAreNotUsed)
{
    eachRuns({"autocast_not_json", "autocast_wrong_types", "autocast_version_text", "autocast_absurd", "autocast_deep"},
        {" --autocast bfloat16 --device cpu", " --autocast bfloat16 --device meta"});
}

// memledger.export's record of the export (extra/memledger_export.json) that is not JSON, not of the types it writes,
// absurd, or nested past the JSON reader's limit says nothing: the program runs without the causal-mask note. A
// well-formed one that says the mask was built gets the note, and the model's sliding window where it names one.
TEST(HostileProgramControl, BadExportRecordsSayNothing)
{
    const std::string note = "the causal mask is built";
    eachRuns({"export_record_not_json", "export_record_absurd", "export_record_wrong_types", "export_record_deep"}, {""},
        "", note);
    eachRuns({"export_record_built"}, {""}, note);
    // A sliding window (Mistral's, Gemma's): eager builds the mask from the window's length on, unpadded or not, and
    // causal_mask="skipped" cannot export the model; a window that is not a length is not one.
    eachRuns({"export_record_window"}, {""}, "shorter than the model's sliding window (4096 tokens)", "causal_mask=");
    // Eager attention: no call takes the mask by itself, the masks an unpadded batch does not build are counted.
    eachRuns({"export_record_eager"}, {""}, "3 masks that an unpadded batch", "attention call");
    eachRuns({"export_record_bad_window"}, {""}, "causal_mask=\"skipped\") exports that batch", "sliding window");
}

// A module the model does not hold, called from a global (TorchDynamo's `G['__import_...'].fn`: a function that
// transformers' kernel hub wraps in a module), is not a layer of the model: the layer tree and the peak are those of
// the same program without it.
TEST(HostileProgramControl, AModuleOutsideTheModelIsNotALayer)
{
    for (const char* name : {"unchanged", "global_module_frame"}) {
        auto why = make(name);
        if (why.rfind("pt2_hostile.py failed", 0) == 0)
            FAIL() << why;
        if (!why.empty())
            GTEST_SKIP() << why;
    }
    auto report = [](const std::string& name) {
        const auto json = fixture("pt2_hostile/" + name + ".report.json");
        std::remove(json.c_str());
        auto r = runCommand(memledgerBinary() + " analyze '" + fixture("pt2_hostile/" + name + ".pt2")
            + "' --input 1x16:int64 --json '" + json + "'");
        EXPECT_EQ(r.exit_code, 0) << r.output;
        std::ifstream in(json);
        return nlohmann::json::parse(in, nullptr, false);
    };
    auto plain = report("unchanged"), global = report("global_module_frame");
    ASSERT_TRUE(plain.is_object() && global.is_object());
    std::vector<std::string> plainPaths, globalPaths;
    for (const auto& l : plain["layers"])
        plainPaths.push_back(l["path"].get<std::string>());
    for (const auto& l : global["layers"])
        globalPaths.push_back(l["path"].get<std::string>());
    EXPECT_EQ(globalPaths, plainPaths);
    EXPECT_EQ(global["peak_bytes"], plain["peak_bytes"]);
}

// The rewriting itself keeps a program whole: the same records written again run.
TEST(HostileProgramControl, TheProgramRewrittenUnchangedRuns)
{
    auto why = make("unchanged");
    if (why.rfind("pt2_hostile.py failed", 0) == 0)
        FAIL() << why;
    if (!why.empty())
        GTEST_SKIP() << why;
    auto r = runCommand(memledgerBinary() + " analyze '" + fixture("pt2_hostile/unchanged.pt2") + "' --input 1x16:int64");
    EXPECT_EQ(r.exit_code, 0) << r.output;
}

INSTANTIATE_TEST_SUITE_P(Cases, HostileProgram,
    ::testing::Values(
        // A weight's layout.
        Hostile {"strides_shorter", "sizes but"}, Hostile {"stride_overflow", "reach past 2^63 elements"},
        Hostile {"negative_stride", "negative stride"}, Hostile {"negative_offset", "negative storage offset"},
        Hostile {"short_record", "fewer than its shape needs"},
        // Tagged values without a tag.
        Hostile {"empty_input_spec", "an input spec is an empty object"},
        Hostile {"empty_output_spec", "an output spec is an empty object"},
        Hostile {"empty_argument", "is an empty object where a tagged value"},
        // Nesting, and JSON that is not.
        Hostile {"deep_json", "nests lists and objects deeper than"},
        Hostile {"deep_weights_config", "nests lists and objects deeper than"}, Hostile {"not_json", "is not valid JSON"},
        // Names read before anything makes them.
        Hostile {"undefined_name", "reads 'made_by_nobody', which no input and no earlier node makes"},
        Hostile {"cycle", "which no input and no earlier node makes"},
        Hostile {"name_made_twice", "which an input or an earlier node made already"},
        // Python's arithmetic on sizes.
        Hostile {"floordiv_by_zero", "divisor of zero"}, Hostile {"mod_by_zero", "divisor of zero"},
        Hostile {"truediv_by_zero", "divisor of zero"}, Hostile {"floordiv_int_min", "does not fit 64 bits"},
        Hostile {"add_overflow", "does not fit 64 bits"}, Hostile {"sub_overflow", "does not fit 64 bits"},
        Hostile {"mul_overflow", "does not fit 64 bits"}, Hostile {"nan_to_int", "not finite"},
        Hostile {"infinity_to_int", "not finite"},
        // A divisor only the run makes zero: the run fails (exit 4) saying why.
        Hostile {"zero_at_run", "divisor of zero", 4},
        // The zip.
        Hostile {"duplicate_record", "twice"}, Hostile {"huge_declared_size", "corrupted"},
        Hostile {"unknown_compression", "a torch.export program that memledger cannot read"},
        Hostile {"truncated", "truncated"}),
    [](const auto& info) { return info.param.file; });
