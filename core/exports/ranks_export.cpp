#include "exports/ranks_export.h"

#include "exports/report_html.h"
#include "support/format.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <sstream>

namespace memledger {

namespace fs = std::filesystem;

const char* rankColourHex(std::size_t rank)
{
    static const char* kColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"};
    return kColours[rank % 8];
}

nlohmann::json ranksToJson(const RankTable& t)
{
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& r : t.ranks) {
        nlohmann::json ledgers = nlohmann::json::object();
        for (int l = 0; l < kLedgerCount; ++l)
            if (auto v = r.ledgers_at_peak[static_cast<std::size_t>(l)])
                ledgers[ledgerName(static_cast<Ledger>(l))] = v;
        rows.push_back({{"file", r.file}, {"peak_bytes", r.peak_bytes}, {"peak_total_bytes", r.peak_total_bytes},
            {"reserved_peak_bytes", r.reserved_peak_bytes}, {"reserved_simulated", r.reserved_simulated},
            {"peak_time_ms", static_cast<double>(r.peak_time_ns) / 1e6}, {"ledgers_at_peak", ledgers},
            {"peak_phase", r.peak_phase}});
    }
    nlohmann::json leftOut = nlohmann::json::array();
    for (const auto& l : t.left_out)
        leftOut.push_back({{"file", l.file}, {"reason", l.reason}});
    return {{"format", "memledger-ranks"}, {"version", 1}, {"ranks", rows}, {"highest_peak_rank", t.highest_peak_rank},
        {"peak_spread", t.peak_spread > 0 ? nlohmann::json(t.peak_spread) : nlohmann::json(nullptr)},
        {"left_out", leftOut}};
}

std::string ranksToText(const RankTable& t)
{
    std::ostringstream out;
    out << padCell("rank", 5) << padCell("file", 34) << padCell("peak total", 12, true) << padCell("reserved", 12, true)
        << padCell("peak at", 12, true) << "  phase at the peak\n";
    // The files' names, told apart within the column: by the whole path where two ranks' files share a name.
    std::vector<std::string> names;
    for (const auto& r : t.ranks)
        names.push_back(fs::path(r.file).filename().string());
    for (std::size_t i = 0; i < names.size(); ++i)
        if (std::count(names.begin(), names.end(), names[i]) > 1) {
            names.clear();
            for (const auto& r : t.ranks)
                names.push_back(r.file);
            break;
        }
    const auto labels = distinctLabels(names, 33);
    for (std::size_t i = 0; i < t.ranks.size(); ++i) {
        const auto& r = t.ranks[i];
        char at[32];
        std::snprintf(at, sizeof at, "%.1f ms", static_cast<double>(r.peak_time_ns) / 1e6);
        out << padCell(std::to_string(i) + (static_cast<int>(i) == t.highest_peak_rank ? "*" : ""), 5)
            << padCell(labels[i], 34) << padCell(formatBytes(r.peak_total_bytes), 12, true)
            << padCell(formatBytes(r.reserved_peak_bytes) + (r.reserved_simulated ? "~" : ""), 12, true)
            << padCell(at, 12, true) << "  " << (r.peak_phase.empty() ? "-" : r.peak_phase) << "\n";
    }
    if (t.highest_peak_rank >= 0) {
        const auto& h = t.ranks[static_cast<std::size_t>(t.highest_peak_rank)];
        char spread[32];
        std::snprintf(spread, sizeof spread, "%.3fx", t.peak_spread);
        if (t.peak_spread <= 0) // a rank holds nothing: no ratio to give
            std::snprintf(spread, sizeof spread, "not defined");
        out << "\nHighest peak: rank " << t.highest_peak_rank << " (" << fs::path(h.file).filename().string() << "), "
            << formatBytes(h.peak_total_bytes) << "; spread " << spread
            << (t.peak_spread > 0 ? " (highest / lowest peak total)\n" : " (a rank holds nothing)\n");
    }
    out << "(~: reserved simulated by the caching-allocator model; the file records no segment events)\n";
    for (const auto& l : t.left_out)
        out << "left out: " << l.reason << "\n";
    return out.str();
}

std::string ranksToHtml(const RankTable& t)
{
    std::ostringstream out;
    out << "<!DOCTYPE html><html><head><meta charset=utf-8><title>memledger ranks</title><style>"
           "body{font:14px sans-serif;margin:24px;color:#222}table{border-collapse:collapse}"
           "td,th{padding:4px 10px;border-bottom:1px solid #ddd;text-align:right}td.l,th.l{text-align:left}"
           "tr.top td{font-weight:bold}svg{border:1px solid #ddd;background:#fff}</style></head><body>\n";
    out << "<h1>Ranks</h1>\n";
    if (t.highest_peak_rank >= 0) {
        const auto& h = t.ranks[static_cast<std::size_t>(t.highest_peak_rank)];
        char spread[32];
        std::snprintf(spread, sizeof spread, "%.3f&times;", t.peak_spread);
        if (t.peak_spread <= 0)
            std::snprintf(spread, sizeof spread, "not defined");
        out << "<p>Highest peak: rank " << t.highest_peak_rank << " (" << htmlEscape(h.file) << "), "
            << formatBytes(h.peak_total_bytes) << "; spread " << spread
            << (t.peak_spread > 0 ? " (highest / lowest peak total).</p>\n" : " (a rank holds nothing).</p>\n");
    }
    for (const auto& l : t.left_out)
        out << "<p>Left out: " << htmlEscape(l.reason) << "</p>\n";
    out << "<table><tr><th>rank</th><th class=l>file</th><th>peak total</th><th>reserved peak</th><th>peak at</th>"
           "<th class=l>phase at the peak</th></tr>\n";
    for (std::size_t i = 0; i < t.ranks.size(); ++i) {
        const auto& r = t.ranks[i];
        char at[32];
        std::snprintf(at, sizeof at, "%.1f ms", static_cast<double>(r.peak_time_ns) / 1e6);
        out << "<tr" << (static_cast<int>(i) == t.highest_peak_rank ? " class=top" : "") << "><td style=\"color:"
            << rankColourHex(i) << "\">" << i << "</td><td class=l>" << htmlEscape(r.file) << "</td><td>"
            << formatBytes(r.peak_total_bytes) << "</td><td>" << formatBytes(r.reserved_peak_bytes)
            << (r.reserved_simulated ? " (simulated)" : "") << "</td><td>" << at << "</td><td class=l>"
            << htmlEscape(r.peak_phase) << "</td></tr>\n";
    }
    out << "</table>\n<h2>Live bytes from each trace's start</h2>\n";
    double end = 1e-9, top = 1;
    for (const auto& r : t.ranks)
        for (const auto& [x, y] : r.timeline) {
            end = std::max(end, x);
            top = std::max(top, y);
        }
    const int W = 960, H = 320, L = 70, B = 28;
    out << "<svg width=" << W << " height=" << H << " viewBox=\"0 0 " << W << ' ' << H << "\">";
    out << "<text x=4 y=14 font-size=11>" << formatBytes(static_cast<std::int64_t>(top)) << "</text><text x=" << W - 90
        << " y=" << H - 8 << " font-size=11>" << static_cast<std::int64_t>(end) << " ms</text>";
    out << "<line x1=" << L << " y1=" << H - B << " x2=" << W << " y2=" << H - B << " stroke=#999 />";
    for (std::size_t i = 0; i < t.ranks.size(); ++i) {
        out << "<polyline fill=none stroke-width=1.5 stroke=\"" << rankColourHex(i) << "\" points=\"";
        for (const auto& [x, y] : t.ranks[i].timeline)
            out << static_cast<int>(L + (W - L - 10) * x / end) << ',' << static_cast<int>(H - B - (H - B - 20) * y / top)
                << ' ';
        out << "\"><title>rank " << i << "</title></polyline>";
    }
    out << "</svg>\n</body></html>\n";
    return out.str();
}

} // namespace memledger
