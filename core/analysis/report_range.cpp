#include "analysis/report_range.h"

#include "recording/build_report.h"
#include "snapshot/snapshot.h"

namespace memledger {

Report reportForRange(const Report& whole, std::uint32_t first, std::uint32_t end)
{
    Report r = whole;
    if (!whole.trace)
        return r;
    const Trace& t = *whole.trace;
    if (whole.snapshot) {
        summarizeSnapshotEvents(r, *whole.snapshot, r.model.path, first, end);
        return r;
    }
    static const std::vector<OpCall> none; // a report read from JSON keeps no ops: no calls in the range
    summarizeRunEvents(r, t, whole.ops ? *whole.ops : none, liveBytesAfterEachEvent(t), first, end);
    if (!whole.ops && !isRangeReport(r))
        return whole;
    return r;
}

bool isRangeReport(const Report& r)
{
    return r.range_end > 0 && r.trace && (r.range_first > 0 || r.range_end < r.trace->size());
}

} // namespace memledger
