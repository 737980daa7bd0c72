#pragma once
#include "cli_options.h"

namespace memledger {

enum ExitCode { kExitOk = 0, kExitUsage = 2, kExitBadFile = 3, kExitRunFailed = 4 };

// `memledger analyze` and `memledger whatif`; returns the exit code.
int runCli(const CliOptions& options);
// Opens a model (or the demo when path is empty), runs it and builds the report.
Report analyzeFile(const std::string& path, RunOptions options);

} // namespace memledger
