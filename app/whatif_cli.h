#pragma once
#include "cli_options.h"
#include "session/open_file.h"

#include <string>
#include <vector>

namespace memledger {

// `memledger whatif MODEL.pt --batch 1,8,32 --dtype float32,bfloat16 [--budget 16GiB] [--json FILE]`:
// records the model at batch 1 and 2, prints the predicted table; returns the exit code.
int runWhatIf(const CliOptions& options);

// The what-if table of an opened model for options.batches x options.dtypes: records at batch 1 and 2, and
// a run instead of any prediction the records do not back. Throws RunError.
// `memledger whatif MODEL --mode train --checkpoint PATH,PATH|auto [--budget SIZE] [--checkpoint-impl I]`:
// records the plain step once and prints the step predicted with torch.utils.checkpoint around those modules
// (or the plan that fits the budget with the least recompute); returns the exit code.
int runCheckpointWhatIf(const CliOptions& options);

WhatIfTable computeWhatIfTable(const OpenedFile& file, const CliOptions& options, std::vector<std::string>* notes = nullptr);

} // namespace memledger
