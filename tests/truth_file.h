#pragma once
// A truth file's set-up skip, in one place: a test of a truth that a fixture script (tests/fixtures/*.py) wrote
// skips, with the reason, where the script could not measure it here ({"skipped": why}, torch_truths.skipped, or
// readTruth's "was not written"), or where the test needs torch.export programs and this build's libtorch runs
// none. Anything else missing from a truth is a failure, not a skip: a test must not pass having checked nothing.
#include "fixture_paths.h"
#include "recording/model.h"

#include <nlohmann/json.hpp>
#include <string>

namespace memledger::test {

// Why a test of `truth` (a truth file, or an entry of one) cannot run here, "" when it can. `needsExport`: the
// test runs torch.export programs (.pt2).
inline std::string whyTruthIsNotHere(const nlohmann::json& truth, bool needsExport = false)
{
    if (truth.is_object() && truth.contains("skipped"))
        return truth["skipped"].is_string() ? truth["skipped"].get<std::string>() : truth["skipped"].dump();
    if (needsExport && !canRunExportedPrograms())
        return "this build's libtorch runs no torch.export programs (" + torchBuildInfo() + "; the PyTorch 2 build does)";
    return {};
}

} // namespace memledger::test

// In a test body or SetUp(): GTEST_SKIP() with whyTruthIsNotHere's reason, if there is one.
#define SKIP_IF_TRUTH_IS_NOT_HERE(truth, needsExport)                                                                  \
    do {                                                                                                               \
        const std::string whyNotHere_ = ::memledger::test::whyTruthIsNotHere((truth), (needsExport));                  \
        if (!whyNotHere_.empty())                                                                                      \
            GTEST_SKIP() << whyNotHere_;                                                                               \
    } while (0)
