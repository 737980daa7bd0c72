#pragma once
#include "cli_options.h"

#include <functional>

namespace memledger {

enum ExitCode { kExitOk = 0, kExitUsage = 2, kExitBadFile = 3, kExitRunFailed = 4 };

// The one rule for how a command's failure reads and exits; call it inside a catch block. It prints
// "memledger: [where: ][run: ]message" on stderr and returns the exit code: kExitBadFile for a file that cannot
// be read (its message names the file), kExitUsage for a bad option, kExitRunFailed for anything else (a run
// that failed, a file that cannot be written). `where` says which part failed ("B", "what-if"); `run` names
// the model a run or an option was for (a bad file's message names the file itself).
int failureExit(const std::string& where = {}, const std::string& run = {});

// A command's --json and --html, where given: each text made only then, written atomically, and "Wrote PATH" said;
// returns kExitOk, or failureExit() where one cannot be written.
int writeOutputs(const CliOptions& o, const std::function<std::string()>& json, const std::function<std::string()>& html);

// `memledger analyze` and `memledger whatif`; returns the exit code.
int runCli(const CliOptions& options);
// Renders the timeline of a report to PNG for `analyze --png`; returns "" or an error naming the file.
// main() sets it when the widgets are built; without it --png is refused.
using PngRenderer = std::function<std::string(const Report&, const std::string& path)>;
void setPngRenderer(PngRenderer renderer);

} // namespace memledger
