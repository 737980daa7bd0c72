#pragma once
#include "cli_options.h"

#include <functional>

namespace memledger {

enum ExitCode { kExitOk = 0, kExitUsage = 2, kExitBadFile = 3, kExitRunFailed = 4 };

// `memledger analyze` and `memledger whatif`; returns the exit code.
int runCli(const CliOptions& options);
// Renders the timeline of a report to PNG for `analyze --png`; returns "" or an error naming the file.
// main() sets it when the widgets are built; without it --png is refused.
using PngRenderer = std::function<std::string(const Report&, const std::string& path)>;
void setPngRenderer(PngRenderer renderer);

} // namespace memledger
