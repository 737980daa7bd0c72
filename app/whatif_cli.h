#pragma once
#include "cli_options.h"

#include <iosfwd>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace memledger {

// `memledger whatif MODEL.pt --batch 1,8,32 --dtype float32,bfloat16 [--budget 16GiB] [--json FILE]`:
// records the model at batch 1 and 2, prints the predicted table; returns the exit code.
int runWhatIf(const CliOptions& options);

// The what-if table of the model in options.model (the demo when empty) for options.batches x
// options.dtypes, as whatIfToJson writes it. Throws FileError, RunError.
nlohmann::json computeWhatIfTable(const CliOptions& options, std::vector<std::string>* notes = nullptr);

} // namespace memledger

namespace memledger {
// Prints the table that computeWhatIfTable made: one row per batch and dtype, then the largest batch per dtype.
void printWhatIfTable(const nlohmann::json& table, std::ostream& out);
} // namespace memledger
