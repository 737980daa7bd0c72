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
WhatIfTable computeWhatIfTable(const OpenedFile& file, const CliOptions& options, std::vector<std::string>* notes = nullptr);

} // namespace memledger
