#pragma once
#include "analysis/report_diff.h"

#include <nlohmann/json.hpp>

namespace memledger {

// `memledger diff --json`: {"format": "memledger-diff", "version": 1, "a", "b", "totals", "ledgers", "entries",
// "timeline", "notes"} (README.md, "Comparing two recordings"). Both timelines are reduced to at most four
// points per one of `chartColumns` columns of the shared axis, so that no peak is lost.
nlohmann::json diffToJson(const ReportDiff& d, int chartColumns = 2000);

} // namespace memledger
