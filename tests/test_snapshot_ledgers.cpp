// memledger's snapshot ledgers against PyTorch's own memory categories: tests/fixtures/snapshot_categories.py
// runs a small training loop under torch.profiler, writes its allocations as snapshots (Python frames only, and
// with the C++ frames of a CUDA snapshot) and, apart, the category torch.profiler._memory_profiler gives each.
// memledger reads only the snapshots; every allocation the two share is compared.
#include "exports/report_json.h"
#include "snapshot/snapshot.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

using namespace memledger;

namespace {

const std::string kDir = std::string(MEMLEDGER_FIXTURES) + "/snapshot_categories";

// The ledgers that mean PyTorch's category. PARAMETER: alive before the trace (resident) or weights. ACTIVATION:
// memledger splits what the backward frees off as saved activations. AUTOGRAD_DETAIL (what a backward node makes
// and the backward itself frees): temporaries.
bool agrees(const std::string& category, Ledger l)
{
    if (category == "PARAMETER")
        return l == Ledger::Resident || l == Ledger::Weights;
    if (category == "OPTIMIZER_STATE")
        return l == Ledger::OptimizerState;
    if (category == "GRADIENT")
        return l == Ledger::Gradients;
    if (category == "ACTIVATION")
        return l == Ledger::Activations || l == Ledger::SavedActivations;
    if (category == "TEMPORARY" || category == "AUTOGRAD_DETAIL")
        return l == Ledger::Temporaries;
    if (category == "INPUT")
        return l == Ledger::Inputs;
    return false;
}

nlohmann::json truth()
{
    std::ifstream in(kDir + "/snapshot_categories.json");
    return in ? nlohmann::json::parse(in) : nlohmann::json();
}

struct Tally {
    int agree = 0, disagree = 0;
    std::int64_t agree_bytes = 0, disagree_bytes = 0;
};

void compare(const std::string& variant)
{
    const auto expected = truth();
    if (expected.is_null())
        GTEST_SKIP() << "no " << kDir << "/snapshot_categories.json: the torch of this build has no "
                     << "torch.profiler._memory_profiler (torch 1.13), so PyTorch's categories are not known";
    const auto path = kDir + "/snapshot_categories_" + variant + ".pickle";
    Report r = readSnapshotReport(path, false);
    const Trace& t = *r.trace;
    const auto& allocs = expected.at("allocs");
    std::map<std::string, Tally> table;
    std::ostringstream disagreements;
    std::size_t k = 0;
    for (std::size_t i = 0; i < t.size(); ++i) {
        if (t.action[i] != Action::Alloc)
            continue;
        ASSERT_LT(k, allocs.size());
        const auto& a = allocs[k++];
        ASSERT_EQ(t.address[i], a.at("addr").get<std::uint64_t>()) << "alloc " << k - 1;
        ASSERT_EQ(t.bytes[i], a.at("size").get<std::int64_t>()) << "alloc " << k - 1;
        if (a.at("category").is_null())
            continue; // PyTorch names no category: nothing to compare
        auto category = a.at("category").get<std::string>();
        // PyTorch's data flow cannot place the optimizer's own scratch tensors (AdamW's step scalars on the CPU,
        // its denominators): it calls some of them INPUT, PARAMETER or ACTIVATION although each is made and freed
        // inside one Optimizer.step. memledger calls them temporaries; the table lists them on rows of their own.
        const bool scratch = a.value("optimizer_scratch", false) && category != "TEMPORARY"
            && category != "OPTIMIZER_STATE" && t.ledger[i] == Ledger::Temporaries;
        if (scratch)
            category += " (optimizer scratch)";
        auto& row = table[category];
        if (scratch || agrees(category, t.ledger[i])) {
            ++row.agree;
            row.agree_bytes += t.bytes[i];
        } else {
            ++row.disagree;
            row.disagree_bytes += t.bytes[i];
            disagreements << "  event " << i << ": " << category << " but " << ledgerName(t.ledger[i]) << ", "
                          << t.bytes[i] << " bytes at " << t.strings.at(t.where[i]) << "\n";
        }
    }
    EXPECT_EQ(k, allocs.size());
    // The parameters were alive before the trace and nothing in it frees them: resident.
    std::int64_t parameters = 0;
    for (const auto& p : expected.at("preexisting"))
        parameters += p.at("size").get<std::int64_t>();
    const auto& resident = r.ledgers[static_cast<std::size_t>(Ledger::Resident)];
    EXPECT_EQ(resident.total, parameters);
    auto& params = table["PARAMETER (alive before the trace)"];
    const auto count = static_cast<int>(expected.at("preexisting").size());
    if (resident.total == parameters) {
        params.agree += count;
        params.agree_bytes += parameters;
    } else {
        params.disagree += count;
        params.disagree_bytes += parameters;
    }

    std::ostringstream out;
    out << "snapshot ledgers against torch " << expected.value("torch", "?") << "'s categories, " << variant
        << " frames:\n";
    char header[160];
    std::snprintf(header, sizeof header, "  %-36s %5s %9s %12s %15s\n", "category", "agree", "disagree", "bytes agree",
        "bytes disagree");
    out << header;
    int disagree = 0;
    for (const auto& [category, row] : table) {
        char line[160];
        std::snprintf(line, sizeof line, "  %-36s %5d %9d %12lld %15lld\n", category.c_str(), row.agree, row.disagree,
            static_cast<long long>(row.agree_bytes), static_cast<long long>(row.disagree_bytes));
        out << line;
        disagree += row.disagree;
    }
    std::ofstream(kDir + "/agreement_" + variant + ".txt") << out.str() << disagreements.str();
    std::cout << out.str();
    EXPECT_EQ(disagree, 0) << "disagreements:\n" << disagreements.str();

    // Every byte alive at the peak is in one ledger; the JSON has resident with its three figures.
    std::int64_t atPeak = 0;
    for (const auto& f : r.ledgers)
        atPeak += f.at_peak;
    EXPECT_EQ(atPeak, r.peak_bytes);
    auto j = reportToJson(r, false);
    EXPECT_EQ(j["ledgers"]["resident"]["total"], parameters);
    EXPECT_TRUE(j["ledgers"]["resident"].contains("max"));
}

TEST(SnapshotLedgers, PyTorchCategoriesPythonFrames)
{
    compare("python");
}

TEST(SnapshotLedgers, PyTorchCategoriesCppFrames)
{
    compare("cpp");
}

} // namespace
