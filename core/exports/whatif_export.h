#pragma once
// The what-if table (whatif/whatif.h) for programs and people: the JSON of `memledger whatif --json` and of a
// report that carries one, and the CLI's text.
#include "report/whatif_table.h"

#include <nlohmann/json_fwd.hpp>
#include <string>

namespace memledger {

// {"format":"memledger-whatif","version":1,"budget_bytes":..,"predictions":[..],"max_batch":{dtype:n}}.
// budget 0: no budget, max_batch is left out.
nlohmann::json whatIfToJson(const WhatIfTable& table);
WhatIfTable whatIfFromJson(const nlohmann::json& j); // throws nlohmann::json::exception on a damaged table
nlohmann::json predictionToJson(const Prediction& p);
// One row per batch (or sequence) and dtype, then the largest batch per dtype within the budget.
std::string whatIfToText(const WhatIfTable& table);

} // namespace memledger
