#pragma once
// What a user watching a running job compares between two loads of the same file: the steps and events it
// gained, the peak, the bytes allocated and reserved at the end, and where the previous load ended on the
// trace's clock (so that the timeline can mark it).
#include "report/report.h"

#include <QDateTime>
#include <QString>

#include <cstdint>

namespace memledger {

struct LoadFigures {
    QDateTime loaded_at;
    std::int64_t events = 0; // trace events
    std::int64_t steps = -1; // optimizer or profiler steps the snapshot's annotations name; -1: it names none
    std::int64_t peak_bytes = 0; // the peak the status bar shows: a snapshot's live peak, a run's peak total
    std::int64_t end_bytes = -1; // a snapshot's blocks allocated at the end; -1: not a snapshot
    std::int64_t reserved_bytes = -1; // a snapshot's segments at the end; -1: not a snapshot
    // The last event on the file's clock (microseconds, as the snapshot writes time_us); -1 without timestamps.
    std::int64_t end_us = -1;
    double plotted_peak = 0; // the top of the timeline's stack at its peak (the y of the previous peak's mark)
};

LoadFigures loadFigures(const Report& report, double plottedPeak, const QDateTime& loadedAt);

// "reloaded 12:03:04: +2 steps (14), +1,204 events, peak 1.20 GiB (+80.00 MiB), allocated at the end 900.00 MiB
// (−12.00 MiB), reserved 2.00 GiB (no change)"
QString reloadChangeText(const LoadFigures& before, const LoadFigures& after);

// Steps named by a snapshot's record_function ranges: "Optimizer.step#SGD.step" once per step, or the
// profiler's "ProfilerStep#N"; -1 when it has neither.
std::int64_t annotatedSteps(const Report& report);

} // namespace memledger
