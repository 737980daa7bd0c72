#pragma once
#include "cli_options.h"

#include <string>
#include <vector>

namespace memledger {

// `memledger diff A B [RUN] [--b-RUN ...] [--json OUT] [--html OUT] [--rows N]`, the arguments after "diff".
// A and B are models, JSON reports or CUDA snapshots. The run options (--input, --batch, --dtype, --mode,
// --optimizer, --loss, --threads, --device, --cudnn-benchmark) apply to both; the same option spelled --b-...
// (--b-dtype bfloat16) applies to B only, over the shared one. Throws std::invalid_argument on a usage error.
CliOptions parseDiffCli(const std::vector<std::string>& args);

// Runs or reads both sides, prints the comparison, writes --json/--html; returns the exit code (3 when a file
// cannot be read, 4 when a run fails: the message names the file and its side).
int runDiff(const CliOptions& options);

} // namespace memledger
