// memledger.capture on the CPU against PyTorch's own figures: tests/fixtures/capture_truths.py captures two AdamW
// steps of a small decoder with memledger.capture(path, device="cpu"), and writes apart what PyTorch says of the
// same run: torch.profiler._memory_profiler's category of each allocation, the parameters' bytes, AdamW's step
// counters, the profiler's peak, and the forward / backward / optimizer phases from its own hooks. memledger reads
// only the captured files.
#include "analysis/segment_history.h"
#include "exports/report_json.h"
#include "run_command.h"
#include "snapshot/snapshot.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

using namespace memledger;

namespace {

const std::string kDir = std::string(MEMLEDGER_FIXTURES) + "/capture";

const nlohmann::json& truth()
{
    static const nlohmann::json t = [] {
        std::ifstream in(kDir + "/capture_truths.json");
        return in ? nlohmann::json::parse(in) : nlohmann::json();
    }();
    return t;
}

// Skips with the fixture's reason (torch 1.13: no torch.profiler._memory_profiler), after checking that the file
// capture wrote there, if any, opens.
#define REQUIRE_TRUTH()                                                                                                \
    do {                                                                                                               \
        if (truth().is_null())                                                                                         \
            FAIL() << "no " << kDir << "/capture_truths.json: the fixture make_capture_fixtures did not run";        \
        if (truth().contains("skipped")) {                                                                             \
            if (!truth().value("capture_error", false) && std::ifstream(kDir + "/train.pickle"))                       \
                EXPECT_NO_THROW(readSnapshotReport(kDir + "/train.pickle", false));                                    \
            GTEST_SKIP() << truth()["skipped"].get<std::string>();                                                     \
        }                                                                                                              \
    } while (0)

std::int64_t categoryBytes(const std::string& category)
{
    const auto& c = truth().at("categories");
    return c.contains(category) ? c.at(category).at("bytes").get<std::int64_t>() : 0;
}

std::int64_t ledgerTotal(const Report& r, Ledger l)
{
    return r.ledgers[static_cast<std::size_t>(l)].total;
}

// PyTorch's category of each allocation a capture's profiler recorded, looked up by where and when it was made:
// take(report, event) gives the next one made there then ("" where PyTorch names none), nullopt where the profiler
// did not record it (every_steps: the sessions before the last one).
class Categories {
public:
    explicit Categories(const nlohmann::json& allocs)
    {
        for (const auto& a : allocs)
            byPlace_[{a.at("addr").get<std::uint64_t>(), a.at("time_us").get<std::int64_t>()}].push_back(
                a.at("category").is_null() ? std::string() : a.at("category").get<std::string>());
    }
    std::optional<std::string> take(const Report& r, std::size_t i)
    {
        const Trace& t = *r.trace;
        auto it = byPlace_.find({t.address[i], r.snapshot->trace_start_us + t.time_ns[i] / 1000});
        if (it == byPlace_.end() || it->second.empty())
            return std::nullopt;
        std::string c = it->second.front();
        it->second.erase(it->second.begin());
        return c;
    }

private:
    std::map<std::pair<std::uint64_t, std::int64_t>, std::vector<std::string>> byPlace_;
};

TEST(PythonCapture, LedgersAgreeWithPyTorchCategories)
{
    REQUIRE_TRUTH();
    const Report r = readSnapshotReport(kDir + "/train.pickle", false);
    const Trace& t = *r.trace;
    const auto params = truth().at("parameter_bytes").get<std::int64_t>();
    const auto steps = truth().at("steps").get<std::int64_t>();

    // Each allocation PyTorch calls a gradient or optimizer state is in that ledger of memledger's.
    Categories category(truth().at("allocs"));
    std::map<std::string, std::pair<int, int>> table; // category -> (agree, disagree)
    for (std::size_t i = 0; i < t.size(); ++i) {
        if (t.action[i] != Action::Alloc)
            continue;
        const auto taken = category.take(r, i);
        ASSERT_TRUE(taken) << "event " << i << ": an allocation PyTorch's profiler did not record";
        const std::string c = *taken;
        if (c != "GRADIENT" && c != "OPTIMIZER_STATE")
            continue;
        const Ledger want = c == "GRADIENT" ? Ledger::Gradients : Ledger::OptimizerState;
        auto& row = table[c];
        (t.ledger[i] == want ? row.first : row.second) += 1;
        EXPECT_EQ(t.ledger[i], want) << c << " at event " << i << ", " << t.bytes[i] << " bytes, is "
                                     << ledgerName(t.ledger[i]) << " at " << t.strings.at(t.where[i]);
    }
    for (const std::string c : {"GRADIENT", "OPTIMIZER_STATE"})
        EXPECT_EQ(table[c].first, truth().at("categories").at(c).at("allocations").get<int>()) << c;

    // The ledgers' totals against the categories' bytes: two steps' gradients, each the parameters' size (zero_grad
    // with set_to_none frees them); AdamW's exp_avg and exp_avg_sq, twice the parameters, and its step counters.
    EXPECT_EQ(ledgerTotal(r, Ledger::Gradients), categoryBytes("GRADIENT"));
    EXPECT_EQ(ledgerTotal(r, Ledger::Gradients), steps * params);
    EXPECT_EQ(r.ledgers[static_cast<std::size_t>(Ledger::Gradients)].max, params);
    EXPECT_EQ(ledgerTotal(r, Ledger::OptimizerState), categoryBytes("OPTIMIZER_STATE"));
    EXPECT_EQ(ledgerTotal(r, Ledger::OptimizerState), 2 * params + truth().at("adamw_step_bytes").get<std::int64_t>());
    // The parameters were made before the capture: alive before the trace, found among the live tensors.
    EXPECT_EQ(ledgerTotal(r, Ledger::Resident), params);
    // The peak: what was alive before, plus the most the captured region had alive (the profiler's running peak).
    EXPECT_EQ(r.peak_bytes, params + truth().at("profiler_peak").get<std::int64_t>());
}

// The ranges capture writes (memledger.forward, memledger.backward, and PyTorch's own Optimizer.step#AdamW.step), as
// memledger reads them, against the phases the fixture's own hooks measured on the same clock. torch's global module
// hooks, which capture uses, run before a module's own: capture's forward begins and ends a little before the
// model's hooks say; PyTorch's Optimizer.step range holds the optimizer's own step hooks; capture's backward begins
// at the first gradient of the model's output (after the loss's own backward) and ends with the engine's callback,
// before loss.backward() returns. kSlackUs: the time between two hooks of one call (the profiler is on).
TEST(PythonCapture, RangesAreTheHooksPhases)
{
    REQUIRE_TRUTH();
    constexpr std::int64_t kSlackUs = 5000;
    const Report r = readSnapshotReport(kDir + "/train.pickle", false);
    const auto j = reportToJson(r, false);
    std::vector<std::tuple<std::string, std::int64_t, std::int64_t>> ranges;
    for (const auto& a : j.at("snapshot").at("annotations")) {
        const auto name = a.at("name").get<std::string>();
        const std::string phase = name == "memledger.forward" ? "forward"
            : name == "memledger.backward"                    ? "backward"
            : name.rfind("Optimizer.step#", 0) == 0           ? "optimizer"
                                                              : "";
        if (phase.empty())
            continue;
        ASSERT_FALSE(a.at("end_us").is_null()) << name << " never ends";
        EXPECT_EQ(a.at("device").get<int>(), -1) << name << ": the CPU's device";
        ranges.emplace_back(phase, a.at("start_us").get<std::int64_t>(), a.at("end_us").get<std::int64_t>());
    }
    const auto& phases = truth().at("phases");
    ASSERT_EQ(ranges.size(), phases.size());
    for (std::size_t k = 0; k < ranges.size(); ++k) {
        const auto& [phase, start, end] = ranges[k];
        const auto& h = phases[k];
        const auto hs = h.at("start_us").get<std::int64_t>(), he = h.at("end_us").get<std::int64_t>();
        ASSERT_EQ(phase, h.at("phase").get<std::string>()) << "range " << k;
        SCOPED_TRACE(phase + " " + std::to_string(k) + ": memledger " + std::to_string(start) + ".." + std::to_string(end)
            + ", hooks " + std::to_string(hs) + ".." + std::to_string(he));
        if (phase == "forward") {
            EXPECT_LE(start, hs);
            EXPECT_GE(start, hs - kSlackUs);
            EXPECT_LE(end, he);
            EXPECT_GE(end, he - kSlackUs);
        } else if (phase == "optimizer") {
            EXPECT_LE(start, hs);
            EXPECT_GE(start, hs - kSlackUs);
            EXPECT_GE(end, he);
            EXPECT_LE(end, he + kSlackUs);
        } else {
            EXPECT_GE(start, hs);
            EXPECT_LT(start, end);
            EXPECT_LE(end, he);
            EXPECT_GE(end, he - kSlackUs);
        }
    }
}

// Loops users write, each captured on its own (capture_truths.py's LOOPS), against PyTorch's figures of the same run:
// - each allocation PyTorch calls a gradient is a gradient, optimizer state is optimizer state; an input made
//   outside a forward (the next batch, made after the previous forward) is no activation; an activation of a
//   forward is never optimizer state (LBFGS's closure runs the forward inside the step);
// - the bytes alive before the trace and the peak: a loop already running, captured from its third step with
//   zero_grad() first, frees the gradients made before the capture (the profiler records no such free): PyTorch's
//   figures there come from a profiler that ran from before the model was made;
// - the forward and backward ranges, one per call of the model and of loss.backward(), where torch.utils.checkpoint
//   raises inside each block to stop its recomputation; every_steps writes once a step there too;
// - batches made with NumPy are not alive before the trace (the CPU allocator never made them).
TEST(PythonCapture, LoopsUsersWrite)
{
    REQUIRE_TRUTH();
    ASSERT_TRUE(truth().contains("loops"));
    for (const auto& [name, loop] : truth().at("loops").items()) {
        SCOPED_TRACE(name);
        Report r;
        ASSERT_NO_THROW(r = readSnapshotReport(kDir + "/" + loop.at("file").get<std::string>(), false));
        const Trace& t = *r.trace;
        Categories category(loop.at("allocs"));
        std::vector<std::pair<std::int64_t, std::int64_t>> forwards; // PyTorch calls a constant a forward makes INPUT
        for (const auto& a : r.snapshot->annotations)
            if (a.name == "memledger.forward")
                forwards.emplace_back(r.snapshot->startNs(a), r.snapshot->endNs(a));
        auto inForward = [&](std::int64_t ns) {
            return std::any_of(forwards.begin(), forwards.end(), [&](auto f) { return f.first <= ns && ns <= f.second; });
        };
        std::map<std::string, int> agree;
        for (std::size_t i = 0; i < t.size(); ++i) {
            if (t.action[i] != Action::Alloc)
                continue;
            const auto c = category.take(r, i);
            if (!c)
                continue;
            const std::string at = std::string(" at event ") + std::to_string(i) + ", " + std::to_string(t.bytes[i])
                + " bytes, " + t.strings.at(t.where[i]) + ", is " + ledgerName(t.ledger[i]);
            if (*c == "GRADIENT")
                EXPECT_EQ(t.ledger[i], Ledger::Gradients) << *c << at;
            else if (*c == "OPTIMIZER_STATE")
                EXPECT_EQ(t.ledger[i], Ledger::OptimizerState) << *c << at;
            else if (*c == "INPUT" && !inForward(t.time_ns[i])) // the batch made after a forward
                EXPECT_NE(t.ledger[i], Ledger::Activations) << *c << at;
            else if (*c == "ACTIVATION" && inForward(t.time_ns[i])) // a forward inside a step (a closure's)
                EXPECT_NE(t.ledger[i], Ledger::OptimizerState) << *c << at;
            ++agree[*c];
        }
        if (loop.at("backwards").get<int>() > 0)
            EXPECT_GT(agree["GRADIENT"], 0);
        EXPECT_EQ(aliveBeforeTrace(*r.snapshot), loop.at("alive_before").get<std::int64_t>());
        if (loop.contains("peak"))
            EXPECT_EQ(r.peak_bytes, loop.at("peak").get<std::int64_t>());
        std::map<std::string, int> ranges;
        const auto j = reportToJson(r, false);
        for (const auto& a : j.at("snapshot").at("annotations")) {
            ++ranges[a.at("name").get<std::string>()];
            EXPECT_FALSE(a.at("end_us").is_null()) << a.at("name") << " never ends";
        }
        EXPECT_EQ(ranges["memledger.forward"], loop.at("forwards").get<int>());
        EXPECT_EQ(ranges["memledger.backward"], loop.at("backwards").get<int>());
        if (name == "checkpoint_every")
            EXPECT_EQ(loop.at("writes").get<int>(), 3);
        if (name == "inference") // says so, not "0 optimizer steps"
            EXPECT_TRUE(std::any_of(r.notes.begin(), r.notes.end(),
                [](const std::string& n) { return n.find("no optimizer step:") != std::string::npos; }));
    }
}

// every_steps=1 over three steps: the file was replaced (a new inode each time: written beside it and renamed, never
// rewritten in place) after each step, no temporary file is left, and each version opens with the steps it held.
TEST(PythonCapture, EveryStepsRewritesAtomically)
{
    REQUIRE_TRUTH();
    const auto& every = truth().at("every");
    const auto steps = every.at("steps").get<int>();
    EXPECT_EQ(every.at("writes").get<int>(), steps); // one per step; the last at exit
    EXPECT_TRUE(every.at("temporary_files").empty()) << every.at("temporary_files").dump();
    std::set<std::uint64_t> inodes {every.at("final_inode").get<std::uint64_t>()};
    std::vector<std::pair<std::string, int>> versions;
    for (const auto& v : every.at("versions")) {
        inodes.insert(v.at("inode").get<std::uint64_t>());
        versions.emplace_back(v.at("file").get<std::string>(), v.at("after_steps").get<int>());
    }
    versions.emplace_back("final.pickle", steps);
    EXPECT_EQ(versions.size(), static_cast<std::size_t>(steps));
    EXPECT_EQ(inodes.size(), versions.size());
    std::size_t entries = 0;
    for (std::size_t k = 0; k < versions.size(); ++k) {
        const auto& [file, after] = versions[k];
        EXPECT_EQ(after, static_cast<int>(k) + 1) << file;
        Report r;
        ASSERT_NO_THROW(r = readSnapshotReport(kDir + "/every/" + file, false)) << file;
        EXPECT_GT(r.trace->size(), entries) << file << " holds more than the version before it";
        entries = r.trace->size();
        int optimizerSteps = 0;
        const auto j = reportToJson(r, false);
        for (const auto& a : j.at("snapshot").at("annotations"))
            optimizerSteps += a.at("name").get<std::string>().rfind("Optimizer.step#", 0) == 0;
        EXPECT_EQ(optimizerSteps, after) << file;
        EXPECT_EQ(r.ledgers[static_cast<std::size_t>(Ledger::Gradients)].total,
            after * truth().at("parameter_bytes").get<std::int64_t>())
            << file;
    }
}

// `memledger analyze` opens the capture and says the device is the CPU, and the CPU alone: the file's one trace list
// names no GPU, its annotations are the CPU's and the report calls it a CPU memory snapshot.
TEST(PythonCapture, AnalyzeSaysCpu)
{
    REQUIRE_TRUTH();
    const auto json = std::string(::testing::TempDir()) + "/python_capture.json";
    const auto res = test::runCommand(test::memledgerBinary() + " analyze " + kDir + "/train.pickle --json " + json);
    ASSERT_EQ(res.exit_code, 0) << res.output;
    EXPECT_NE(res.output.find("memledger.forward"), std::string::npos) << res.output;
    std::ifstream in(json);
    const auto j = nlohmann::json::parse(in);
    EXPECT_EQ(j.at("snapshot").at("device_names"), nlohmann::json::array({"cpu"}));
    EXPECT_EQ(j.at("model").at("type"), "CPU memory snapshot");
    EXPECT_NE(res.output.find("CPU memory snapshot"), std::string::npos) << res.output;
    EXPECT_EQ(res.output.find("cuda:"), std::string::npos) << res.output;
    // Its own key read, not read past; no caching allocator modelled for it.
    EXPECT_EQ(j.at("snapshot").at("capture").at("device"), "cpu");
    EXPECT_EQ(j.at("snapshot").at("capture").at("torch"), truth().at("torch"));
    for (const auto& k : j.at("snapshot").value("ignored_keys", nlohmann::json::array()))
        EXPECT_NE(k, "memledger_capture");
    EXPECT_FALSE(j.contains("allocator_model"));
    EXPECT_NE(res.output.find("made by memledger.capture on cpu"), std::string::npos) << res.output;
    EXPECT_NE(res.output.find("before memledger.capture started"), std::string::npos) << res.output;
    std::remove(json.c_str());
}

// The Segments tab of a CPU capture: the CPU allocator keeps no cache, so what it holds is what is allocated at every
// point; nothing simulated, no fragmentation (a CUDA caching allocator's simulated reserve would show megabytes that
// the job never held).
TEST(PythonCapture, ACpuCaptureHasNoSimulatedReserve)
{
    REQUIRE_TRUTH();
    const auto r = readSnapshotReport(kDir + "/train.pickle");
    ASSERT_TRUE(r.snapshot && r.snapshot->onCpu());
    const auto h = SegmentHistory::build(r, TimelineAxis::Milliseconds);
    EXPECT_FALSE(h.simulated);
    const auto reserved = h.reserved.toVector(), allocated = h.allocated.toVector();
    const auto fragmentation = h.fragmentation.toVector();
    ASSERT_GT(reserved.size(), 1u);
    EXPECT_EQ(reserved, allocated);
    EXPECT_EQ(fragmentation, std::vector<double>(reserved.size(), 0.0));
    EXPECT_GT(*std::max_element(allocated.begin(), allocated.end()), 0.0);
    EXPECT_NE(h.cause.find("A CPU capture"), std::string::npos) << h.cause;
}

} // namespace

// An installed package's frames (torchvision's SqueezeExcitation, which the profiler names relative to site-packages) are written
// as absolute paths to files that exist (issue 60: they were the working directory plus the relative path).
TEST(PythonCapture, AnInstalledPackagesFramesAreItsFiles)
{
    REQUIRE_TRUTH();
    if (!truth().contains("package_frames"))
        GTEST_SKIP() << "capture_truths.json has no package_frames (written before this check)";
    const auto& t = truth().at("package_frames");
    if (t.contains("skipped"))
        GTEST_SKIP() << t.at("skipped").get<std::string>();
    ASSERT_FALSE(t.at("torchvision_files").empty()) << "the capture names no torchvision frame: nothing is checked";
    for (const auto& f : t.at("torchvision_files")) {
        const auto name = f.get<std::string>();
        EXPECT_EQ(name.front(), '/') << name;
        EXPECT_TRUE(std::filesystem::exists(name)) << name;
    }
    // Its tree is the module's own: a row per path of named_modules() (module hooks name each call's forward), each
    // under its parent, whichever line of the parent's forward called it.
    if (!t.contains("modules"))
        return;
    const auto json = ::testing::TempDir() + "capture_package.json";
    auto r = test::runCommand(test::memledgerBinary() + " analyze " + kDir + "/" + t.at("file").get<std::string>()
        + " --json " + json);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ifstream in(json);
    const auto report = nlohmann::json::parse(in);
    std::map<std::string, int> rows; // name: how many rows have it
    for (const auto& l : report.at("layers"))
        rows[l.at("name").get<std::string>()] += 1;
    for (const auto& m : t.at("modules")) {
        const auto name = m.get<std::string>();
        EXPECT_EQ(rows[name], 1) << name << " in " << r.output;
    }
}
