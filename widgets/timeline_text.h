#pragma once
// How the timeline's parts (timeline_plot.cpp, timeline_hover.cpp, timeline_overlays.cpp) write bytes and moments.
#include "bytes_text.h"
#include "report/report.h"
#include "analysis/timeline_series.h"
#include "support/format.h"

#include <QObject>
#include <QString>

namespace memledger {

// When an event happened, as the axis measures it: "12.345 ms (op 7)" for a model run, "12.345 ms" for a
// snapshot, "event 1234" for a trace without timestamps.
inline QString keyText(const Report& r, std::size_t event)
{
    const auto& t = *r.trace;
    if (!timelineHasTime(r))
        return QObject::tr("event %1").arg(event);
    auto ms = static_cast<double>(t.time_ns[event]) / 1e6;
    if (r.snapshot)
        return QObject::tr("%1 ms").arg(ms, 0, 'f', 3);
    return QObject::tr("%1 ms (op %2)").arg(ms, 0, 'f', 3).arg(t.op_seq[event]);
}

} // namespace memledger
