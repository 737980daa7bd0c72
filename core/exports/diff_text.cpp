#include "exports/diff_text.h"

#include "support/format.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace memledger {

namespace {


std::string percent(const DiffFigure& f)
{
    if (f.a == 0 || f.delta() == 0)
        return "";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%+.1f%%", 100.0 * static_cast<double>(f.delta()) / static_cast<double>(f.a));
    return buf;
}

std::string countDelta(std::int64_t d)
{
    return d == 0 ? "0" : (d > 0 ? "+" : "") + std::to_string(d);
}

} // namespace

std::string formatByteDelta(std::int64_t delta)
{
    if (delta == 0)
        return "0";
    return (delta > 0 ? "+" : "") + formatBytes(delta);
}

std::string diffToText(const ReportDiff& d, std::size_t maxRows)
{
    std::ostringstream out;
    out << "memledger diff (B - A)\n";
    out << "  A  " << d.a.name << "  (" << d.a.describe() << ")\n";
    out << "  B  " << d.b.name << "  (" << d.b.describe() << ")\n\n";

    out << padCell("", 24) << ' ' << padCell("A", 12, true) << ' ' << padCell("B", 12, true) << ' ' << padCell("delta", 12, true)
        << "\n";
    for (const auto& t : d.totals) {
        const auto& f = t.figure;
        if (f.a == 0 && f.b == 0 && t.name != "peak_bytes" && t.name != "peak_total_bytes")
            continue;
        std::string label = t.label;
        if (t.name == "reserved_bytes" && d.a.reserved_kind == d.b.reserved_kind && d.a.reserved_kind == ReserveKind::Simulated)
            label += " (sim.)";
        out << padCell(label, 24) << ' ' << padCell(formatBytes(f.a), 12, true) << ' ' << padCell(formatBytes(f.b), 12, true)
            << ' ' << padCell(formatByteDelta(f.delta()), 12, true) << "  " << percent(f) << "\n";
    }
    out << "\nLedgers at the peak (allocated over the run):\n";
    if (!d.ledgers_sum.empty())
        out << "  (" << d.ledgers_sum << ")\n";
    for (const auto& l : d.ledgers) {
        out << "  " << padCell(l.label, 22) << ' ' << padCell(formatBytes(l.at_peak.a), 12, true) << ' '
            << padCell(formatBytes(l.at_peak.b), 12, true) << ' ' << padCell(formatByteDelta(l.at_peak.delta()), 12, true)
            << "  (" << formatBytes(l.total.a) << " -> " << formatBytes(l.total.b) << ", "
            << formatByteDelta(l.total.delta()) << ")\n";
    }
    out << "\nTimeline axis: " << (d.axis == TimelineAxis::OpSequence ? "op sequence" : "milliseconds since each run began")
        << " (" << d.axis_reason << ")\n";
    auto at = [&](double key) {
        char buf[48];
        if (d.axis == TimelineAxis::OpSequence)
            std::snprintf(buf, sizeof buf, "op %lld", static_cast<long long>(key));
        else
            std::snprintf(buf, sizeof buf, "%.2f ms", key);
        return std::string(buf);
    };
    out << "  peak of A " << formatBytes(static_cast<std::int64_t>(d.series_a.peak_value)) << " at "
        << at(d.series_a.peak_key) << ", of B " << formatBytes(static_cast<std::int64_t>(d.series_b.peak_value))
        << " at " << at(d.series_b.peak_key) << "\n";

    const bool modules = d.entry_kind == DiffEntryKind::Module;
    const auto changed = d.changedEntries();
    out << "\n" << (modules ? "Modules" : "Allocation sites") << ", largest change first (" << changed << " of "
        << d.entries.size() << " changed";
    if (changed > maxRows)
        out << ", " << maxRows << " shown";
    out << "):\n";
    const std::size_t keyWidth = modules ? 34 : 56;
    out << padCell(modules ? "module" : "site (top stack frame)", keyWidth) << ' ' << padCell("change", 11, true);
    for (const auto& c : d.columns)
        out << ' ' << padCell(c.label, c.bytes ? 11 : std::max<std::size_t>(7, c.label.size()), true);
    out << "\n";
    std::size_t shown = 0;
    for (const auto& e : d.entries) {
        if (shown == maxRows)
            break;
        if (!e.changed())
            continue;
        ++shown;
        std::string key = e.label;
        if (!e.in_a || !e.in_b)
            key += e.in_b ? " (added)" : " (removed)";
        // A long stack frame keeps its end (file name, line and function): "~" stands for what is left out.
        if (!modules && key.size() > keyWidth)
            key = "~" + key.substr(key.size() - (keyWidth - 1));
        out << padCell(key, keyWidth) << ' ' << padCell(formatByteDelta(e.change), 11, true);
        for (std::size_t c = 0; c < d.columns.size(); ++c) {
            auto delta = e.figures[c].delta();
            out << ' '
                << (d.columns[c].bytes ? padCell(formatByteDelta(delta), 11, true)
                                       : padCell(countDelta(delta), std::max<std::size_t>(7, d.columns[c].label.size()), true));
        }
        out << "\n";
    }
    if (changed == 0)
        out << "  (none: every entry is the same in A and B)\n";
    for (const auto& n : d.notes)
        out << "Note: " << n << "\n";
    return out.str();
}

} // namespace memledger
