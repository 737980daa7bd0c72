#pragma once
#include "cli_options.h"

namespace memledger {

// `memledger fit MODEL --serve --budget SIZE --context C`: a serving engine's layout of one GPU and the most
// sequences that fit (whatif/serving.h); returns the exit code.
int runServe(const CliOptions& o);

} // namespace memledger
