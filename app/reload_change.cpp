#include "reload_change.h"

#include "bytes_text.h"
#include "snapshot/snapshot.h"
#include "support/format.h"

#include <QLocale>
#include <QStringList>

#include <cstdlib>

#include <algorithm>

namespace memledger {

namespace {

bool startsWith(const std::string& s, const char* prefix)
{
    return s.rfind(prefix, 0) == 0;
}

// "1.20 GiB (+80.00 MiB)"
QString bytesAndChange(std::int64_t before, std::int64_t after)
{
    return QStringLiteral("%1 (%2)").arg(
        bytesText(after), QString::fromStdString(formatByteChange(before, after, "\u2212")));
}

// "1,204": the C locale with its thousands separator, whatever the user's locale.
QString groupedCount(std::int64_t n)
{
    QLocale c = QLocale::c();
    c.setNumberOptions(QLocale::DefaultNumberOptions);
    return c.toString(static_cast<qlonglong>(n));
}

QString signedCount(std::int64_t n)
{
    return (n >= 0 ? QStringLiteral("+") : QStringLiteral("\u2212")) + groupedCount(std::abs(n));
}

} // namespace

std::int64_t annotatedSteps(const Report& report)
{
    if (!report.snapshot)
        return -1;
    std::int64_t optimizer = 0, profiler = 0;
    for (const auto& a : report.snapshot->annotations) {
        optimizer += startsWith(a.name, "Optimizer.step");
        profiler += startsWith(a.name, "ProfilerStep");
    }
    if (optimizer == 0 && profiler == 0)
        return -1;
    return std::max(optimizer, profiler);
}

LoadFigures loadFigures(const Report& report, double plottedPeak, const QDateTime& loadedAt)
{
    LoadFigures f;
    f.loaded_at = loadedAt;
    f.events = report.trace ? static_cast<std::int64_t>(report.trace->size()) : 0;
    f.steps = annotatedSteps(report);
    f.plotted_peak = plottedPeak;
    if (report.snapshot) {
        const auto& s = *report.snapshot;
        f.peak_bytes = report.peak_bytes;
        f.end_bytes = s.allocatedBytes();
        f.reserved_bytes = s.reservedBytes();
        if (s.trace_has_time && f.events > 0)
            f.end_us = s.trace_start_us + report.trace->time_ns.back() / 1000;
    } else {
        f.peak_bytes = report.peak_total_bytes > 0 ? report.peak_total_bytes : report.peak_bytes;
    }
    return f;
}

QString reloadChangeText(const LoadFigures& before, const LoadFigures& after)
{
    QStringList parts;
    if (after.steps >= 0 && before.steps >= 0 && after.steps != before.steps)
        parts << (std::abs(after.steps - before.steps) == 1 ? QObject::tr("%1 step (%2)")
                                                            : QObject::tr("%1 steps (%2)"))
                     .arg(signedCount(after.steps - before.steps))
                     .arg(after.steps);
    if (after.events != before.events)
        parts << QObject::tr("%1 events").arg(signedCount(after.events - before.events));
    else
        parts << QObject::tr("the same number of events");
    parts << QObject::tr("peak %1").arg(bytesAndChange(before.peak_bytes, after.peak_bytes));
    if (before.end_bytes >= 0 && after.end_bytes >= 0)
        parts << QObject::tr("allocated at the end %1").arg(bytesAndChange(before.end_bytes, after.end_bytes));
    if (before.reserved_bytes >= 0 && after.reserved_bytes >= 0)
        parts << QObject::tr("reserved %1").arg(bytesAndChange(before.reserved_bytes, after.reserved_bytes));
    return QObject::tr("reloaded %1: %2")
        .arg(after.loaded_at.toString(QStringLiteral("HH:mm:ss")), parts.join(QStringLiteral(", ")));
}

} // namespace memledger
