#include "build_paths.h"

#include <cstdlib>

namespace memledger::test::build {

const char* fixtures()
{
    return MEMLEDGER_BUILD_FIXTURES;
}

const char* binary()
{
    return MEMLEDGER_BUILD_BINARY;
}

const char* python()
{
    return MEMLEDGER_BUILD_PYTHON;
}

namespace {

// Before any test runs, and inherited by the memledger commands a test starts: records counted, not timed
// (core/whatif/whatif_policy.h), unless the environment already says otherwise.
[[maybe_unused]] const bool kCountedRecords = [] { return ::setenv("MEMLEDGER_RECORD_BUDGET", "24", 0) == 0; }();

} // namespace

} // namespace memledger::test::build
