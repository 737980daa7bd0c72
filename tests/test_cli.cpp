// The memledger executable as a user runs it: exit codes and messages.
#include "fixture_paths.h"
#include "run_command.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include <unistd.h>

using namespace memledger::test;

namespace {

struct BadFile {
    std::string file;
    std::string reason; // a part of the message
};

class BadModelFile : public ::testing::TestWithParam<BadFile> { };

} // namespace

TEST_P(BadModelFile, ExitsThreeNamingTheFileAndTheReason)
{
    auto path = fixture("bad/" + GetParam().file);
    auto r = runCommand(memledgerBinary() + " analyze '" + path + "'");
    EXPECT_EQ(r.exit_code, 3) << r.output;
    EXPECT_NE(r.output.find(path), std::string::npos) << r.output;
    // The reason is looked for in the message without the file's name, which may contain the same word.
    auto message = r.output;
    for (auto at = message.find(path); at != std::string::npos; at = message.find(path))
        message.erase(at, path.size());
    EXPECT_NE(message.find(GetParam().reason), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("terminate called"), std::string::npos) << r.output;
}

INSTANTIATE_TEST_SUITE_P(Files, BadModelFile,
    ::testing::Values(BadFile {"missing.pt", "no such file"}, BadFile {"directory.pt", "is a directory"},
        BadFile {"empty.pt", "empty"}, BadFile {"random.pt", "not a TorchScript model"},
        BadFile {"truncated.pt", "truncated"}, BadFile {"other.zip", "not a TorchScript model"},
        BadFile {"state_dict.pt", "torch.save"}, BadFile {"pickle.pkl", "pickle"}, BadFile {"text.pt", "text file"}),
    [](const auto& info) {
        auto n = info.param.file;
        for (auto& c : n)
            if (!isalnum(static_cast<unsigned char>(c)))
                c = '_';
        return n;
    });

TEST(Cli, DemoRunsWithoutArgumentsAndWritesTheJsonSchema)
{
    std::string json = fixture("demo-report.json");
    auto r = runCommand(memledgerBinary() + " analyze --json '" + json + "'");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("RFBNet"), std::string::npos);
    EXPECT_NE(r.output.find("Load tax: file"), std::string::npos);
    // "Alive at the peak" names the op that made each block, not the allocation helper it called.
    auto alive = r.output.substr(r.output.find("Alive at the peak"));
    EXPECT_EQ(alive.find("aten::empty"), std::string::npos) << alive;
    std::ifstream in(json);
    auto j = nlohmann::json::parse(in);
    EXPECT_EQ(j["format"], "memledger-report");
    EXPECT_EQ(j["version"], 1);
    for (const char* key : {"path", "file_bytes", "parameter_bytes", "buffer_bytes"})
        EXPECT_TRUE(j["model"].contains(key)) << key;
    for (const char* key : {"input_shapes", "batch", "dtype", "mode", "duration_ms"})
        EXPECT_TRUE(j["run"].contains(key)) << key;
    for (const char* key : {"weights", "inputs", "activations", "temporaries"}) {
        EXPECT_TRUE(j["ledgers"][key].contains("at_peak")) << key;
        EXPECT_TRUE(j["ledgers"][key].contains("total")) << key;
    }
    EXPECT_GT(j["peak_bytes"].get<long long>(), 0);
    EXPECT_GT(j["peak_total_bytes"].get<long long>(), j["peak_bytes"].get<long long>());
    ASSERT_FALSE(j["layers"].empty());
    for (const char* key : {"path", "type", "weight_bytes", "activation_bytes", "temporary_peak_bytes", "peak_bytes",
             "calls", "output_shapes"})
        EXPECT_TRUE(j["layers"][0].contains(key)) << key;
    EXPECT_EQ(j["events"]["count"].get<std::size_t>(), j["events"]["time_ns"].size());
    // A saved report opens again without running.
    auto again = runCommand(memledgerBinary() + " analyze '" + json + "'");
    EXPECT_EQ(again.exit_code, 0) << again.output;
    EXPECT_NE(again.output.find("peak total"), std::string::npos);
}

TEST(Cli, UsageErrorsExitTwo)
{
    EXPECT_EQ(runCommand(memledgerBinary() + " analyze --batch zero").exit_code, 2);
    EXPECT_EQ(runCommand(memledgerBinary() + " analyze --frobnicate").exit_code, 2);
    auto help = runCommand(memledgerBinary() + " --help");
    EXPECT_EQ(help.exit_code, 0);
    EXPECT_NE(help.output.find("Usage"), std::string::npos);
    EXPECT_EQ(runCommand(memledgerBinary() + " --version").exit_code, 0);
}

// An output never overwrites what is read: `analyze --json run.pickle` (the snapshot meant as the input) once
// ran the demo and wrote its report over the snapshot. Now it exits 2, names the file and leaves it as it was.
TEST(Cli, AnOutputNeverOverwritesTheFileBeingReadOrAModel)
{
    const std::string dir = "/tmp/memledger-test-output-" + std::to_string(::getpid());
    std::filesystem::create_directories(dir);
    const std::string snapshot = dir + "/run.pickle", model = dir + "/model.pt2";
    std::ofstream(snapshot) << "not read: the command is refused first";
    std::ofstream(model) << "a model the user keeps";
    struct Case {
        std::string args, says;
    };
    for (const Case& c : {Case {"analyze --json " + snapshot, "would overwrite an existing model or snapshot file"},
             Case {"analyze --html " + model, "would overwrite an existing model or snapshot file"},
             Case {"analyze " + snapshot + " --png " + snapshot, "is the file being opened"},
             Case {"analyze " + snapshot + " --snapshot " + snapshot, "is the file being opened"},
             Case {"diff " + snapshot + " demo:gpt.pt2 --json " + snapshot, "is the file being opened"},
             Case {"whatif " + model + " --batch 1,2 --json " + model, "is the file being opened"}}) {
        SCOPED_TRACE(c.args);
        auto r = runCommand(memledgerBinary() + " " + c.args);
        EXPECT_EQ(r.exit_code, 2);
        EXPECT_NE(r.output.find(c.says), std::string::npos) << r.output;
    }
    std::stringstream kept;
    kept << std::ifstream(snapshot).rdbuf();
    EXPECT_EQ(kept.str(), "not read: the command is refused first");
    std::filesystem::remove_all(dir);
}

TEST(Cli, RejectedShapeExitsFourWithTheModelsMessage)
{
    auto r = runCommand(memledgerBinary() + " analyze '" + fixture("small_inplace.pt") + "' --input 1x3x40x40");
    EXPECT_EQ(r.exit_code, 4) << r.output;
    EXPECT_NE(r.output.find("mat1 and mat2"), std::string::npos) << r.output;
}

namespace {

// Whether this libtorch runs a float16 convolution on the CPU (1.13's CPU build has none; PyTorch 2's has):
// asked of the libtorch itself, by a float16 run.
CommandResult float16Run(const std::string& json)
{
    return runCommand(memledgerBinary() + " analyze '" + fixture("small_inplace.pt")
        + "' --input 1x3x32x32 --dtype float16 --json '" + json + "'");
}

} // namespace

// Whichever this libtorch does, the run either is a float16 run or fails with a plain message (exit 4).
TEST(Cli, Float16ConvolutionRunsOrSaysTheKernelIsMissing)
{
    auto json = fixture("small-float16-run.json");
    auto r = float16Run(json);
    if (r.exit_code == 0) {
        std::ifstream in(json);
        auto j = nlohmann::json::parse(in);
        EXPECT_EQ(j["run"]["dtype"], "float16");
        EXPECT_EQ(j["load_tax"]["resident_dtype"], "float16");
        EXPECT_GT(j["peak_bytes"].get<std::int64_t>(), 0);
        return;
    }
    EXPECT_EQ(r.exit_code, 4) << r.output;
    EXPECT_NE(r.output.find("no float16 kernel"), std::string::npos) << r.output;
}

TEST(Cli, RecordedRunsWriteNoLibtorchLogLines)
{
    // A training step frees blocks allocated before the recording (the warm-up's gradients); libtorch's CPU
    // allocator logs that once per process ("Memory block of unknown size ..."), which is noise to a user.
    for (const char* mode : {"train", "inference"}) {
        auto r = runCommand(memledgerBinary() + " analyze '" + fixture("mnist.pt") + "' --mode " + mode);
        EXPECT_EQ(r.exit_code, 0) << r.output;
        EXPECT_EQ(r.output.find("Memory block of unknown size"), std::string::npos) << mode << "\n" << r.output;
        EXPECT_EQ(r.output.find("CPUAllocator.cpp"), std::string::npos) << mode << "\n" << r.output;
    }
}

TEST(Cli, GuessedInputIsSaidToBeAGuess)
{
    auto r = runCommand(memledgerBinary() + " analyze '" + fixture("resnet18_traced.pt") + "'");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("(guessed)"), std::string::npos) << r.output;
}

TEST(Cli, ReportsCarryTheWhatIfTable)
{
    auto json = fixture("small-whatif.json"), html = fixture("small-whatif.html");
    auto r = runCommand(memledgerBinary() + " analyze '" + fixture("small_inplace.pt")
        + "' --input 1x3x32x32 --whatif 8,64 "
          "--budget 640MiB --json '"
        + json + "' --html '" + html + "'");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    // 128 MiB to the allocator once the CUDA context is off: records up to a batch of about a thousand (a budget of
    // gigabytes records this small model up to tens of thousands, a minute and a half of runs)
    EXPECT_NE(r.output.find("Largest batch within 640.0 MiB"), std::string::npos) << r.output;
    std::ifstream in(json);
    auto j = nlohmann::json::parse(in);
    ASSERT_TRUE(j.contains("whatif"));
    // Each largest batch says how it is known, as the JSON's max_batch_method does (issue 60: no unmarked
    // extrapolation in the text).
    for (const auto& [dtype, method] : j["whatif"]["max_batch_method"].items()) {
        const auto m = method.get<std::string>();
        const std::string mark = m == "measured" ? "(measured: a run at it fits)"
            : m == "extrapolated"               ? "(extrapolated beyond the records: rough)"
                                                : "(interpolated between records)";
        EXPECT_NE(r.output.find(mark), std::string::npos) << dtype << " " << m << "\n" << r.output;
    }
    EXPECT_EQ(j["whatif"]["predictions"].size(), 6u); // 2 batches x 3 dtypes
    for (const auto& p : j["whatif"]["predictions"]) {
        for (const char* key : {"batch", "dtype", "method", "predicted_peak_bytes", "predicted_peak_total_bytes",
                 "predicted_reserved_bytes"})
            EXPECT_TRUE(p.contains(key)) << key;
    }
    // float16 is measured like float32 where this libtorch runs it, else predicted.
    const bool float16Runs = float16Run(fixture("small-float16-probe.json")).exit_code == 0;
    for (const auto& p : j["whatif"]["predictions"]) {
        if (p["dtype"] != "float16")
            continue;
        if (!float16Runs) {
            EXPECT_EQ(p["method"], "predicted") << p.dump();
            continue;
        }
        for (const auto& q : j["whatif"]["predictions"])
            if (q["dtype"] == "float32" && q["batch"] == p["batch"])
                EXPECT_EQ(p["method"], q["method"]) << p.dump();
    }
    EXPECT_TRUE(j["whatif"]["max_batch"].contains("float32"));
    std::ifstream hin(html);
    std::stringstream page;
    page << hin.rdbuf();
    EXPECT_NE(page.str().find("id=whatif"), std::string::npos);
}

TEST(Cli, TensorsListsEveryParameterAndBuffer)
{
    auto r
        = runCommand(memledgerBinary() + " analyze '" + fixture("small_inplace.pt") + "' --input 1x3x32x32 --tensors");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    for (const char* name : {"conv1.weight", "bn1.running_mean", "bn1.num_batches_tracked", "fc.bias"})
        EXPECT_NE(r.output.find(name), std::string::npos) << name;
    EXPECT_NE(r.output.find("total int64: 8 B"), std::string::npos) << r.output;
}

TEST(Cli, SeveralInputsAreGivenCommaSeparatedAndNeverGuessed)
{
    auto r = runCommand(memledgerBinary() + " analyze '" + fixture("two_inputs.pt") + "' --input 2x16,2x4");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("input 2x16, 2x4"), std::string::npos) << r.output;
    auto guessed = runCommand(memledgerBinary() + " analyze '" + fixture("two_inputs.pt") + "'");
    EXPECT_EQ(guessed.exit_code, 2) << guessed.output; // the command line is wrong: a usage error
    EXPECT_NE(guessed.output.find("forward takes 2 inputs (x, y)"), std::string::npos) << guessed.output;
}

// `memledger ranks`: one row per snapshot, each equal to analyze of that file alone; the highest peak and the
// spread; a folder stands for its snapshots.
TEST(Cli, RanksCompareSnapshotsAsAnalyzeReadsThemOneByOne)
{
    const std::string dir = MEMLEDGER_SNAPSHOTS;
    std::ifstream probe(dir + "/training-step-annotated.pickle");
    if (!probe)
        GTEST_SKIP() << "the shared snapshots are absent: ranks checks skipped";
    const std::vector<std::string> files {dir + "/training-step-annotated.pickle",
        dir + "/training-loop-annotations-python-frames.pickle", dir + "/segment-alloc-and-free.pickle"};
    std::string json = memledger::test::fixture("ranks.json");
    std::string command = memledgerBinary() + " ranks";
    for (const auto& f : files)
        command += " " + f;
    auto r = runCommand(command + " --json " + json + " --html " + json + ".html");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ifstream in(json);
    auto j = nlohmann::json::parse(in);
    ASSERT_EQ(j["ranks"].size(), files.size());
    std::int64_t highest = -1, lowest = INT64_MAX;
    int highestRank = -1;
    for (std::size_t i = 0; i < files.size(); ++i) {
        auto one = memledger::test::fixture("rank" + std::to_string(i) + ".json");
        auto a = runCommand(memledgerBinary() + " analyze " + files[i] + " --json " + one);
        ASSERT_EQ(a.exit_code, 0) << a.output;
        std::ifstream oneIn(one);
        auto report = nlohmann::json::parse(oneIn);
        auto total = report["peak_total_bytes"].get<std::int64_t>();
        EXPECT_EQ(j["ranks"][i]["peak_total_bytes"], total) << files[i];
        EXPECT_EQ(j["ranks"][i]["peak_bytes"], report["peak_bytes"]) << files[i];
        if (total > highest) {
            highest = total;
            highestRank = static_cast<int>(i);
        }
        lowest = std::min(lowest, total);
        EXPECT_GE(j["ranks"][i]["reserved_peak_bytes"].get<std::int64_t>(), report["peak_bytes"].get<std::int64_t>());
    }
    EXPECT_EQ(j["highest_peak_rank"], highestRank);
    EXPECT_NEAR(j["peak_spread"].get<double>(), static_cast<double>(highest) / static_cast<double>(lowest), 1e-9);
    EXPECT_NE(r.output.find("Highest peak: rank " + std::to_string(highestRank)), std::string::npos) << r.output;
    // A folder: every snapshot in it.
    auto folder = runCommand(memledgerBinary() + " ranks " + dir + " --json " + json);
    ASSERT_EQ(folder.exit_code, 0) << folder.output;
    std::ifstream again(json);
    EXPECT_GE(nlohmann::json::parse(again)["ranks"].size(), 10u);
    // A model is not a recording: exit 3, naming it.
    auto model = runCommand(memledgerBinary() + " ranks demo:rfbnet.pt");
    EXPECT_NE(model.exit_code, 0);
    EXPECT_NE(model.output.find("demo:rfbnet.pt"), std::string::npos) << model.output;
    // Beside recordings, a file that is none is left out and named; the others are ranked.
    auto mixed = runCommand(memledgerBinary() + " ranks " + files[0] + " demo:rfbnet.pt --json " + json);
    ASSERT_EQ(mixed.exit_code, 0) << mixed.output;
    EXPECT_NE(mixed.output.find("left out: "), std::string::npos) << mixed.output;
    std::ifstream mixedIn(json);
    auto mj = nlohmann::json::parse(mixedIn);
    EXPECT_EQ(mj["ranks"].size(), 1u);
    ASSERT_EQ(mj["left_out"].size(), 1u);
    EXPECT_EQ(mj["left_out"][0]["file"], "demo:rfbnet.pt");
    // A rank that holds nothing (an empty snapshot): the spread is not defined, not 0.
    const std::string empty = memledger::test::fixture("empty-rank.pickle");
    ASSERT_EQ(runCommand("/usr/bin/python3 -c \"import pickle; pickle.dump({'segments': [], 'device_traces': [[]]}, "
                         "open('" + empty + "', 'wb'), protocol=4)\"").exit_code, 0);
    auto withEmpty = runCommand(memledgerBinary() + " ranks " + files[0] + " " + empty + " --json " + json);
    ASSERT_EQ(withEmpty.exit_code, 0) << withEmpty.output;
    EXPECT_NE(withEmpty.output.find("spread not defined"), std::string::npos) << withEmpty.output;
    std::ifstream emptyIn(json);
    EXPECT_TRUE(nlohmann::json::parse(emptyIn)["peak_spread"].is_null());
}

// Under --budget the what-if records a further round past the largest batch; the first round's records are kept, not
// run (nor announced) again: each precision and batch is told once (issue 60: "records twice").
TEST(Cli, AWhatIfAnnouncesEachRecordOnce)
{
    auto r = runCommand(memledgerBinary() + " whatif '" + fixture("small_inplace.pt")
        + "' --input 1x3x32x32 --budget 576MiB --dtype float32");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::map<std::string, int> told;
    std::istringstream lines(r.output);
    for (std::string line; std::getline(lines, line);)
        if (auto at = line.find("what-if record "); at != std::string::npos)
            ++told[line.substr(line.find(" in ", at))];
    EXPECT_GT(told.size(), 4u) << r.output; // a further round was made
    for (const auto& [what, n] : told)
        EXPECT_EQ(n, 1) << what;
}

// A range torch.export recorded is said in the user's words: no internal symbol (s0, s27) reaches the message.
TEST(Cli, AnExportedRangeNamesNoInternalSymbol)
{
    auto r = runCommand(memledgerBinary() + " whatif demo:gpt.pt2 --batch 4,128 --dtype float32");
    if (r.exit_code == 3 && r.output.find("needs memledger's PyTorch 2 build") != std::string::npos)
        GTEST_SKIP() << "this build runs no torch.export programs";
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("was exported for 1..64"), std::string::npos) << r.output;
    EXPECT_FALSE(std::regex_search(r.output, std::regex(R"(\(s[0-9]+\))"))) << r.output;
}
