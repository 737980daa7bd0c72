#pragma once
#include "analysis/report_diff.h"

#include <cstddef>
#include <string>

namespace memledger {

// What `memledger diff` prints: both sides, the headline figures and ledgers (A, B, delta), the timeline's
// axis, then the modules or allocation sites whose figures changed, largest change first (at most `maxRows`).
std::string diffToText(const ReportDiff& d, std::size_t maxRows = 40);

// "+1.50 MiB", "-512 B", "0": a byte delta with its sign.
std::string formatByteDelta(std::int64_t delta);

} // namespace memledger
