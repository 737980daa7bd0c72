#pragma once
#include "analysis/report_diff.h"

#include <string>

namespace memledger {

// `memledger diff --html`: one self-contained page (no script, no network): both sides, the headline figures
// and ledgers with their deltas, both live-bytes timelines overlaid on one axis (inline SVG), and the modules
// or allocation sites that changed, largest change first (at most `maxRows`; the JSON has them all).
std::string diffToHtml(const ReportDiff& d, std::size_t maxRows = 300);

} // namespace memledger
