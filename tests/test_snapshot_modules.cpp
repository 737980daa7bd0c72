// A snapshot's module tree (each allocation in the row of its chain of `forward` frames) and its peak remedy
// (what holds the peak, the dominant ledger's owner, an estimated saving), on a snapshot written by
// tests/fixtures/snapshot_modules.py whose answer is known by construction, and on the shared real snapshots.
#include "exports/report_json.h"
#include "snapshot/snapshot.h"
#include "whatif/remedies.h"
#include "exports/remedies_export.h"

#include "run_command.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <unistd.h>

using namespace memledger;

namespace {

const std::string kScript = std::string(MEMLEDGER_SOURCE_DIR) + "/tests/fixtures/snapshot_modules.py";

// The shared snapshots: MEMLEDGER_SNAPSHOTS_DIR in the environment (a worktree whose ../shared is elsewhere),
// else the folder the build names.
std::string snapshotsDir()
{
    const char* env = std::getenv("MEMLEDGER_SNAPSHOTS_DIR");
    return env && *env ? env : MEMLEDGER_SNAPSHOTS;
}

#define SKIP_WITHOUT_SNAPSHOTS()                                                                                   \
    if (!std::filesystem::exists(snapshotsDir()))                                                                  \
    GTEST_SKIP() << "no snapshot folder at " << snapshotsDir()

Report handBuilt(const std::string& variant = "")
{
    const auto path = (std::filesystem::temp_directory_path()
        / ("memledger-snapshot-modules-" + std::to_string(::getpid()) + variant + ".pickle"))
                          .string();
    auto run = test::runCommand("/usr/bin/python3 " + kScript + " " + path + " " + variant + " 2>&1");
    EXPECT_EQ(run.exit_code, 0) << run.output;
    auto r = readSnapshotReport(path);
    std::filesystem::remove(path);
    return r;
}

const std::string kM = "/w/model.py:120 forward";
const std::string kB = kM + " / /w/block.py:48 forward";
const std::string kL = kB + " / /venv/lib/python3.11/site-packages/torch/nn/modules/linear.py:36 forward";
const std::string kOut = "(outside any forward)";
const std::string kEngine = kOut + " / torch::autograd::Engine::evaluate_function(torch::autograd::GraphTask&)";

// The script's allocations as built: the row of each (its innermost forward, or its naming frame outside any),
// its ledger by construction, and whether it is alive at the peak (the gradient's alloc, event 7).
struct Alloc {
    std::int64_t bytes;
    std::string row;
    Ledger ledger;
    bool at_peak;
};
const std::vector<Alloc> kAllocs = {
    {1000, kOut + " / /w/train.py:10 main", Ledger::Inputs, true},
    {4096, kL, Ledger::SavedActivations, true},
    {16384, kB, Ledger::SavedActivations, true},
    {512, kB, Ledger::Temporaries, false},
    {2048, kM, Ledger::SavedActivations, true},
    {8192, kL, Ledger::SavedActivations, true},
    {3000, kEngine, Ledger::Gradients, true},
    {6000, kOut + " / /w/train.py:20 main", Ledger::OptimizerState, false},
};

bool under(const std::string& row, const std::string& path)
{
    return path.empty() || row == path || row.rfind(path + " / ", 0) == 0;
}

TEST(SnapshotModules, EachRowSumsItsForwardFramesAllocations)
{
    const Report r = handBuilt();
    ASSERT_GT(r.layers.size(), 1u);
    const std::vector<std::string> rows = {"", kM, kB, kL, kOut, kEngine, kOut + " / /w/train.py:10 main",
        kOut + " / /w/train.py:20 main"};
    for (const auto& path : rows) {
        SCOPED_TRACE(path.empty() ? "(root)" : path);
        const int i = r.findLayer(path);
        ASSERT_GE(i, 0);
        const auto& l = r.layers[static_cast<std::size_t>(i)];
        std::int64_t allocated = 0, saved = 0, gradients = 0, atPeak = 0, count = 0, largest = 0;
        for (const auto& a : kAllocs)
            if (under(a.row, path)) {
                allocated += a.bytes;
                saved += a.ledger == Ledger::SavedActivations ? a.bytes : 0;
                gradients += a.ledger == Ledger::Gradients ? a.bytes : 0;
                atPeak += a.at_peak ? a.bytes : 0;
                count += 1;
                largest = std::max(largest, a.bytes);
            }
        EXPECT_EQ(l.activation_bytes, allocated);
        EXPECT_EQ(l.saved_activation_bytes, saved);
        EXPECT_EQ(l.gradient_bytes, gradients);
        EXPECT_EQ(l.peak_bytes, atPeak);
        EXPECT_EQ(l.calls, count);
        EXPECT_EQ(l.largest_block_bytes, largest);
    }
    EXPECT_EQ(r.layers[static_cast<std::size_t>(r.findLayer(kB))].name, "block.py:48 forward");
    EXPECT_EQ(r.layers[static_cast<std::size_t>(r.findLayer(kL))].depth, 3);
    EXPECT_EQ(r.layers[static_cast<std::size_t>(r.findLayer(kL))].type, "forward");
    // The ledgers the allocations were built to have.
    for (std::size_t i = 0, k = 0; i < r.trace->size(); ++i)
        if (r.trace->action[i] == Action::Alloc)
            EXPECT_EQ(r.trace->ledger[i], kAllocs[k++].ledger) << "alloc " << k - 1;
    // The JSON carries the ledger columns of a snapshot's rows.
    auto j = reportToJson(r, false);
    bool found = false;
    for (const auto& l : j["layers"])
        if (l["path"] == kB) {
            found = true;
            EXPECT_EQ(l["saved_activation_bytes"], 28672);
        }
    EXPECT_TRUE(found);
}

TEST(SnapshotModules, ThePeakRemedyNamesTheRangeTheLedgerAndTheBlock)
{
    const Report r = handBuilt();
    EXPECT_EQ(r.peak_bytes, 34720);
    auto m = snapshotPeakRemedy(r);
    ASSERT_TRUE(m);
    EXPECT_EQ(m->kind, RemedyKind::SnapshotPeak);
    EXPECT_EQ(m->method, FigureMethod::Estimate);
    EXPECT_NE(m->title.find("step#1"), std::string::npos) << m->title;
    EXPECT_NE(m->title.find("(backward)"), std::string::npos) << m->title;
    EXPECT_NE(m->title.find("saved for backward"), std::string::npos) << m->title;
    // block.py:48 holds 28672 of the 30720 saved bytes (more than half); its linear 12288 (less): the owner is the
    // block, whose largest saved block is 16384.
    EXPECT_NE(m->change.find("block.py:48 forward"), std::string::npos) << m->change;
    EXPECT_EQ(m->change.find("linear.py"), std::string::npos) << m->change;
    EXPECT_EQ(m->peakSaving(), 28672 - 16384);
    EXPECT_EQ(m->peak_total_after, 34720 - 12288);
    EXPECT_NE(m->change.find("(estimate)"), std::string::npos);
    // Listed with the others, labelled as an estimate in the JSON and the text.
    auto all = computeRemedies(r);
    ASSERT_FALSE(all.empty());
    auto j = remediesToJson(all);
    bool listed = false;
    for (const auto& e : j)
        if (e["kind"] == "snapshot_peak") {
            listed = true;
            EXPECT_EQ(e["method"], "estimate");
            EXPECT_EQ(e["peak_total_saving_bytes"], 12288);
        }
    EXPECT_TRUE(listed);
    EXPECT_NE(remediesToText(all).find("[estimate]"), std::string::npos);
    auto back = remediesFromJson(j);
    EXPECT_EQ(back.front().method, all.front().method);
}

TEST(SnapshotModules, GradientsAndOptimizerStateGetTheirRemedies)
{
    {
        const Report r = handBuilt("gradients");
        auto m = snapshotPeakRemedy(r);
        ASSERT_TRUE(m);
        EXPECT_EQ(r.peak_bytes, 1000 + 30720 + 200000);
        EXPECT_NE(m->title.find("gradients"), std::string::npos) << m->title;
        EXPECT_NE(m->change.find("ZeRO-2"), std::string::npos) << m->change;
        EXPECT_EQ(m->peakSaving(), 100000);
        EXPECT_EQ(m->method, FigureMethod::Estimate);
    }
    {
        const Report r = handBuilt("optimizer");
        auto m = snapshotPeakRemedy(r);
        ASSERT_TRUE(m);
        EXPECT_EQ(r.peak_bytes, 1000 + 3000 + 400000);
        EXPECT_NE(m->title.find("optimizer state"), std::string::npos) << m->title;
        EXPECT_NE(m->title.find("(optimizer)"), std::string::npos) << m->title;
        EXPECT_NE(m->change.find("8-bit"), std::string::npos) << m->change;
        EXPECT_EQ(m->peakSaving(), 300000);
    }
}

// A real training step: the tree's totals per ledger are the report's ledgers, its top rows hold the peak.
TEST(SnapshotModules, ARealTrainingStepsTreeAddsUpToItsLedgers)
{
    SKIP_WITHOUT_SNAPSHOTS();
    for (const char* file : {"training-step-annotated.pickle", "training-loop-annotations-python-frames.pickle"}) {
        SCOPED_TRACE(file);
        const Report r = readSnapshotReport(snapshotsDir() + "/" + file, false);
        const auto& root = r.layers[0];
        auto total = [&](Ledger l) { return r.ledgers[static_cast<std::size_t>(l)].total; };
        EXPECT_EQ(root.saved_activation_bytes, total(Ledger::SavedActivations));
        EXPECT_EQ(root.gradient_bytes, total(Ledger::Gradients));
        std::int64_t allocated = 0;
        for (int l = 0; l < kLedgerKinds; ++l)
            if (static_cast<Ledger>(l) != Ledger::Resident)
                allocated += total(static_cast<Ledger>(l));
        EXPECT_EQ(root.activation_bytes, allocated);
        std::int64_t atPeak = 0, saved = 0, forwardRows = 0;
        for (int c : root.children) {
            const auto& l = r.layers[static_cast<std::size_t>(c)];
            atPeak += l.peak_bytes;
            saved += l.saved_activation_bytes;
            forwardRows += l.type == "forward";
        }
        EXPECT_EQ(atPeak, r.peak_bytes);
        EXPECT_EQ(saved, total(Ledger::SavedActivations));
        EXPECT_GT(forwardRows, 0);
        // Every row holds at least what its children hold.
        for (const auto& l : r.layers) {
            std::int64_t kids = 0;
            for (int c : l.children)
                kids += r.layers[static_cast<std::size_t>(c)].saved_activation_bytes;
            EXPECT_LE(kids, l.saved_activation_bytes) << l.path;
        }
        auto remedies = computeRemedies(r);
        std::cout << file << ":\n" << remediesToText(remedies);
        auto m = snapshotPeakRemedy(r);
        ASSERT_TRUE(m);
        EXPECT_EQ(m->method, FigureMethod::Estimate);
    }
}

} // namespace
