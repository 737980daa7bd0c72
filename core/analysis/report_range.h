#pragma once
#include "report/report.h"

#include <cstdint>

namespace memledger {

// The report of a model run or a snapshot seen through events [first, end) of its trace (clipped to it):
// the ledger totals and the tree count the allocations made in the range; the peak is the most live bytes at
// a moment inside it (as the timeline draws them), and "at the peak" is everything alive at that moment.
// The rest (weights, phases, notes, the trace itself) stays as in `whole`. A range covering the whole trace
// gives the whole report's figures. Report::range_first/range_end say which range a report is for.
Report reportForRange(const Report& whole, std::uint32_t first, std::uint32_t end);

// True when `r` is for a part of its trace only.
bool isRangeReport(const Report& r);

} // namespace memledger
