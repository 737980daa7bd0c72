#include "exports/diff_html.h"
#include "exports/html_style.h"

#include "exports/diff_palette.h"
#include "exports/diff_text.h"
#include "exports/report_html.h"
#include "support/format.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace memledger {

namespace {

constexpr int kChartWidth = 1100;
constexpr int kChartHeight = 360;
constexpr int kLeft = 80, kRight = 20, kTop = 20, kBottom = 40;

// After kHtmlBaseStyle (exports/html_style.h).
const char* kStyle = R"(
.grew{color:#b03a2e} .shrank{color:#1e7b4a}
.sw{display:inline-block;width:14px;height:3px;margin-right:6px;vertical-align:middle}
svg{border:1px solid #ddd;max-width:100%;height:auto}
)";

std::string num(double v)
{
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f", v);
    return buf;
}

std::string deltaCell(std::int64_t delta, bool bytes)
{
    std::string cls = delta > 0 ? " class=\"grew\"" : delta < 0 ? " class=\"shrank\"" : "";
    std::string text = bytes ? formatByteDelta(delta) : (delta > 0 ? "+" : "") + std::to_string(delta);
    return "<td" + cls + ">" + htmlEscape(text) + "</td>";
}

std::string percentText(const DiffFigure& f)
{
    if (f.a == 0 || f.delta() == 0)
        return "";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%+.1f%%", 100.0 * static_cast<double>(f.delta()) / static_cast<double>(f.a));
    return buf;
}

// Both series as step lines over one axis, with their peaks marked.
std::string chartSvg(const ReportDiff& d)
{
    const DiffSeries* sides[] = {&d.series_a, &d.series_b};
    double lo = 0, hi = 0, top = 0;
    bool any = false;
    for (const auto* s : sides)
        if (!s->keys.empty()) {
            lo = any ? std::min(lo, s->keys.front()) : s->keys.front();
            hi = any ? std::max(hi, s->keys.back()) : s->keys.back();
            top = std::max(top, s->peak_value);
            any = true;
        }
    if (hi <= lo)
        hi = lo + 1;
    top = std::max(1.0, top * 1.08);
    auto ticks = byteTicks(0, top, 5);
    if (!ticks.values.empty())
        top = std::max(top, ticks.values.back());
    const double plotW = kChartWidth - kLeft - kRight, plotH = kChartHeight - kTop - kBottom;
    auto X = [&](double k) { return kLeft + (k - lo) / (hi - lo) * plotW; };
    auto Y = [&](double v) { return kTop + plotH - v / top * plotH; };

    std::ostringstream svg;
    svg << "<svg id=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kChartWidth << "\" height=\""
        << kChartHeight << "\" viewBox=\"0 0 " << kChartWidth << ' ' << kChartHeight
        << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
    svg << "<rect x=\"0\" y=\"0\" width=\"" << kChartWidth << "\" height=\"" << kChartHeight << "\" fill=\"#fff\"/>\n";
    for (std::size_t i = 0; i < ticks.values.size(); ++i) {
        auto y = Y(ticks.values[i]);
        svg << "<line x1=\"" << kLeft << "\" x2=\"" << kChartWidth - kRight << "\" y1=\"" << num(y) << "\" y2=\""
            << num(y) << "\" stroke=\"#eee\"/><text x=\"" << kLeft - 6 << "\" y=\"" << num(y + 4)
            << "\" text-anchor=\"end\" fill=\"#444\">" << htmlEscape(ticks.labels[i]) << "</text>\n";
    }
    for (double v : niceTicks(lo, hi, 8)) {
        auto x = X(v);
        char label[32];
        std::snprintf(label, sizeof label, "%g", v);
        svg << "<line x1=\"" << num(x) << "\" x2=\"" << num(x) << "\" y1=\"" << kTop << "\" y2=\"" << kTop + plotH
            << "\" stroke=\"#f3f3f3\"/><text x=\"" << num(x) << "\" y=\"" << num(kTop + plotH + 16)
            << "\" text-anchor=\"middle\" fill=\"#444\">" << label << "</text>\n";
    }
    svg << "<text x=\"" << kLeft + plotW / 2 << "\" y=\"" << kChartHeight - 6 << "\" text-anchor=\"middle\" fill=\"#444\">"
        << (d.axis == TimelineAxis::OpSequence ? "op sequence" : "milliseconds since the run began") << "</text>\n";
    svg << "<line x1=\"" << kLeft << "\" x2=\"" << kLeft << "\" y1=\"" << kTop << "\" y2=\"" << kTop + plotH
        << "\" stroke=\"#999\"/><line x1=\"" << kLeft << "\" x2=\"" << kChartWidth - kRight << "\" y1=\""
        << kTop + plotH << "\" y2=\"" << kTop + plotH << "\" stroke=\"#999\"/>\n";
    const char* colours[] = {kDiffAColourHex, kDiffBColourHex};
    const char* names[] = {"A", "B"};
    for (int k = 0; k < 2; ++k) {
        const auto& s = *sides[k];
        auto r = reduceSteps(s.keys, s.values, lo, hi, static_cast<int>(plotW));
        if (r.keys.empty())
            continue;
        svg << "<path fill=\"none\" stroke=\"" << colours[k] << "\" stroke-width=\"1.6\" d=\"M" << num(X(r.keys[0]))
            << ' ' << num(Y(r.values[0]));
        for (std::size_t i = 1; i < r.keys.size(); ++i)
            svg << "H" << num(X(r.keys[i])) << "V" << num(Y(r.values[i]));
        svg << "H" << num(X(s.keys.back())) << "\"><title>" << names[k] << "</title></path>\n";
        auto px = X(s.peak_key), py = Y(s.peak_value);
        const bool nearRight = px > kChartWidth - kRight - 160; // the label goes left of its point there
        svg << "<circle cx=\"" << num(px) << "\" cy=\"" << num(py) << "\" r=\"4\" fill=\"" << colours[k]
            << "\"><title>peak of " << names[k] << ": " << htmlEscape(formatBytes(static_cast<std::int64_t>(s.peak_value)))
            << "</title></circle><text x=\"" << num(nearRight ? px - 6 : px + 6) << "\" y=\"" << num(py - 6 - 12 * k)
            << "\" text-anchor=\"" << (nearRight ? "end" : "start") << "\" fill=\"" << colours[k] << "\">peak " << names[k] << " "
            << htmlEscape(formatBytes(static_cast<std::int64_t>(s.peak_value))) << "</text>\n";
    }
    svg << "</svg>\n";
    return svg.str();
}

} // namespace

std::string diffToHtml(const ReportDiff& d, std::size_t maxRows)
{
    std::ostringstream out;
    out << "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>memledger diff: " << htmlEscape(d.a.name)
        << " vs " << htmlEscape(d.b.name) << "</title><style>" << kHtmlBaseStyle << kStyle << "</style></head><body>\n";
    out << "<h1>memledger diff</h1>\n<table>\n";
    out << "<tr><td><span class=\"sw\" style=\"background:" << kDiffAColourHex << "\"></span><b>A</b></td><td class=\"l\">"
        << htmlEscape(d.a.name) << "</td><td class=\"l muted\">" << htmlEscape(d.a.describe()) << "</td></tr>\n";
    out << "<tr><td><span class=\"sw\" style=\"background:" << kDiffBColourHex << "\"></span><b>B</b></td><td class=\"l\">"
        << htmlEscape(d.b.name) << "</td><td class=\"l muted\">" << htmlEscape(d.b.describe()) << "</td></tr>\n";
    out << "</table>\n<p class=\"muted\">Deltas are B &minus; A; red grew, green shrank.</p>\n";

    out << "<h2>Peaks</h2>\n<table><tr><th></th><th>A</th><th>B</th><th>delta</th><th></th></tr>\n";
    for (const auto& t : d.totals) {
        const auto& f = t.figure;
        if (f.a == 0 && f.b == 0 && t.name != "peak_bytes" && t.name != "peak_total_bytes")
            continue;
        std::string label = t.label;
        if (t.name == "reserved_bytes" && d.a.reserved_kind != ReserveKind::None)
            label += " (" + std::string(nameOf(d.a.reserved_kind))
                + (d.b.reserved_kind == d.a.reserved_kind ? "" : " / " + std::string(nameOf(d.b.reserved_kind)))
                + ")";
        out << "<tr><td>" << htmlEscape(label) << "</td><td>" << formatBytes(f.a) << "</td><td>" << formatBytes(f.b)
            << "</td>" << deltaCell(f.delta(), true) << "<td class=\"muted\">" << percentText(f) << "</td></tr>\n";
    }
    out << "</table>\n";

    out << "<h2>Ledgers</h2>\n";
    if (!d.ledgers_sum.empty())
        out << "<p class=\"muted\">" << htmlEscape(d.ledgers_sum) << "</p>\n";
    out << "<table><tr><th>ledger</th><th>A at peak</th><th>B at peak</th><th>delta</th>"
           "<th>A allocated</th><th>B allocated</th><th>delta</th></tr>\n";
    for (const auto& l : d.ledgers)
        out << "<tr><td>" << htmlEscape(l.label) << "</td><td>" << formatBytes(l.at_peak.a) << "</td><td>"
            << formatBytes(l.at_peak.b) << "</td>" << deltaCell(l.at_peak.delta(), true) << "<td>"
            << formatBytes(l.total.a) << "</td><td>" << formatBytes(l.total.b) << "</td>"
            << deltaCell(l.total.delta(), true) << "</tr>\n";
    out << "</table>\n";

    out << "<h2>Live bytes over the run</h2>\n<p class=\"muted\">x: "
        << (d.axis == TimelineAxis::OpSequence ? "op sequence" : "milliseconds since each run began") << " ("
        << htmlEscape(d.axis_reason) << ")</p>\n<p>"
        << "<span class=\"sw\" style=\"background:" << kDiffAColourHex << "\"></span>A " << htmlEscape(d.a.name)
        << " &nbsp; <span class=\"sw\" style=\"background:" << kDiffBColourHex << "\"></span>B "
        << htmlEscape(d.b.name) << "</p>\n";
    out << chartSvg(d);

    const bool modules = d.entry_kind == DiffEntryKind::Module;
    const auto changed = d.changedEntries();
    out << "<h2>" << (modules ? "Modules" : "Allocation sites") << ", largest change first</h2>\n<p class=\"muted\">"
        << changed << " of " << d.entries.size() << " changed";
    if (changed > maxRows)
        out << "; the first " << maxRows << " shown (the JSON lists all)";
    out << ". Each cell is B &minus; A; &ldquo;change&rdquo; is the largest of them.</p>\n";
    out << "<table><tr><th>" << (modules ? "module" : "site (top stack frame)") << "</th><th>type</th><th>change</th>";
    for (const auto& c : d.columns)
        out << "<th>" << htmlEscape(c.label) << "</th>";
    out << "<th class=\"l\">A &rarr; B of the change</th></tr>\n";
    std::size_t shown = 0;
    for (const auto& e : d.entries) {
        if (shown == maxRows)
            break;
        if (!e.changed())
            continue;
        ++shown;
        std::string status = e.in_a && e.in_b ? "" : e.in_b ? " <span class=\"grew\">(added)</span>" : " <span class=\"shrank\">(removed)</span>";
        out << "<tr><td>" << htmlEscape(e.label) << status << "</td><td class=\"l muted\">" << htmlEscape(e.type)
            << "</td>" << deltaCell(e.change, true);
        for (std::size_t c = 0; c < d.columns.size(); ++c)
            out << deltaCell(e.figures[c].delta(), d.columns[c].bytes);
        out << "<td class=\"l muted\">";
        if (e.change_column >= 0) {
            const auto c = static_cast<std::size_t>(e.change_column);
            out << htmlEscape(d.columns[c].label) << ": " << formatBytes(e.figures[c].a) << " &rarr; "
                << formatBytes(e.figures[c].b);
        }
        out << "</td></tr>\n";
    }
    if (changed == 0)
        out << "<tr><td colspan=\"9\" class=\"l\">none: every entry is the same in A and B</td></tr>\n";
    out << "</table>\n";
    if (!d.notes.empty()) {
        out << "<h2>Notes</h2>\n<ul>\n";
        for (const auto& n : d.notes)
            out << "<li>" << htmlEscape(n) << "</li>\n";
        out << "</ul>\n";
    }
    out << "</body></html>\n";
    return out.str();
}

} // namespace memledger
