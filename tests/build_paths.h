#pragma once
// The paths that differ between the two builds (build/, build-debian/): this build's fixtures folder, its memledger
// binary and the Python that makes its truths. Every test source sees this header (memledger_test's -include) and
// reads them at run time from tests/build_paths.cpp, the one test source compiled with them, so that every other
// test object is the same in both builds and ccache compiles it once (issue 58).

namespace memledger::test::build {
const char* fixtures(); // the generated fixtures (tests/fixtures/*.py write them before the tests run)
const char* binary(); // this build's memledger
const char* python(); // the Python whose torch is this build's libtorch
} // namespace memledger::test::build

#define MEMLEDGER_FIXTURES (::memledger::test::build::fixtures())
#define MEMLEDGER_BINARY (::memledger::test::build::binary())
#define MEMLEDGER_PYTHON (::memledger::test::build::python())
