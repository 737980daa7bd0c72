#pragma once
#include "cli_options.h"

namespace memledger {

// `memledger whatif MODEL.pt --batch 1,8,32 --dtype float32,bfloat16 [--budget 16GiB] [--json FILE]`:
// records the model at batch 1 and 2, prints the predicted table; returns the exit code.
int runWhatIf(const CliOptions& options);

} // namespace memledger
