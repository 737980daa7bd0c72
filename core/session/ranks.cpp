#include "session/ranks.h"

#include "snapshot/snapshot_ledgers.h"

#include "analysis/segment_history.h"
#include "exports/report_html.h"
#include "session/open_file.h"
#include "snapshot/snapshot.h"
#include "support/errors.h"
#include "support/format.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <thread>

namespace memledger {

namespace fs = std::filesystem;

namespace {

// Where the peak falls: a snapshot's innermost annotation (record_function range) holding it, else the phase its
// ledgers tell (forward, backward, optimizer...); a model run's phase.
std::string peakPhase(const Report& r)
{
    if (r.snapshot) {
        std::string found = annotationAt(*r.snapshot, r.peak_time_ns);
        if (found.empty() && r.trace && r.peak_event >= 0 && static_cast<std::size_t>(r.peak_event) < r.trace->size())
            found = snapshotPhaseAt(*r.trace, *r.snapshot, static_cast<std::size_t>(r.peak_event));
        return found;
    }
    for (const auto& p : r.phases)
        if (p.start_ns <= r.peak_time_ns && r.peak_time_ns <= p.end_ns)
            return p.name;
    return {};
}

RankRow rowOf(const std::string& file)
{
    auto opened = openFile(file);
    if (!opened.report)
        throw FileError(file, "a model, not a snapshot or report: ranks compares recordings (run it with analyze "
                              "--json first)");
    const Report& r = *opened.report;
    RankRow row;
    row.file = file;
    row.peak_bytes = r.peak_bytes;
    row.peak_total_bytes = r.peak_total_bytes;
    row.peak_time_ns = r.peak_time_ns;
    for (int l = 0; l < kLedgerCount; ++l)
        row.ledgers_at_peak[static_cast<std::size_t>(l)] = r.ledgers[static_cast<std::size_t>(l)].at_peak;
    row.peak_phase = peakPhase(r);
    // One series for the reserve and the live bytes (SegmentHistory reads its bands).
    const auto series = TimelineSeries::shared(r, TimelineAxis::Milliseconds);
    auto history = SegmentHistory::build(r, TimelineAxis::Milliseconds);
    if (!history.reserved.empty())
        row.reserved_peak_bytes = std::max<std::int64_t>(0, static_cast<std::int64_t>(history.reserved.extremes().high));
    row.reserved_simulated = history.simulated;
    if (r.gpu)
        row.reserved_peak_bytes = r.gpu->reserved_peak_bytes;
    // The live bytes, thinned: the largest value in each of 400 slices of the time axis.
    const auto& keys = series->keys;
    if (!keys.empty()) {
        const auto& top = series->tops[static_cast<std::size_t>(TimelineSeries::kStackOrder.back())];
        const double end = std::max(keys.back(), 1e-9);
        constexpr int kSlices = 400;
        std::vector<double> best(kSlices, -1);
        top.forEach(0, std::min(keys.size(), top.size()), [&](std::size_t p, double v) {
            auto s = std::min(kSlices - 1, static_cast<int>(keys[p] / end * kSlices));
            best[static_cast<std::size_t>(s)] = std::max(best[static_cast<std::size_t>(s)], v);
        });
        for (int s = 0; s < kSlices; ++s)
            if (best[static_cast<std::size_t>(s)] >= 0)
                row.timeline.emplace_back(end * (s + 0.5) / kSlices, best[static_cast<std::size_t>(s)]);
    }
    return row;
}

} // namespace

std::vector<std::string> rankFiles(const std::vector<std::string>& paths)
{
    std::vector<std::string> out;
    for (const auto& p : paths) {
        std::error_code ec;
        if (fs::is_directory(p, ec)) {
            std::vector<std::string> inside;
            for (const auto& e : fs::directory_iterator(p, ec)) {
                auto ext = e.path().extension().string();
                if (e.is_regular_file() && (ext == ".pickle" || ext == ".pkl" || ext == ".json"))
                    inside.push_back(e.path().string());
            }
            std::sort(inside.begin(), inside.end());
            if (inside.empty())
                throw FileError(p, "a folder without snapshots (.pickle, .pkl) or reports (.json)");
            out.insert(out.end(), inside.begin(), inside.end());
        } else {
            out.push_back(p); // a missing file or a model: its reader says so (compareRanks lists it)
        }
    }
    return out;
}

RankTable compareRanks(const std::vector<std::string>& files, int threads)
{
    RankTable t;
    t.ranks.resize(files.size());
    std::vector<std::exception_ptr> errors(files.size());
    std::atomic<std::size_t> next {0};
    auto work = [&] {
        for (std::size_t i; (i = next++) < files.size();) {
            try {
                t.ranks[i] = rowOf(files[i]);
            } catch (...) {
                errors[i] = std::current_exception();
            }
        }
    };
    int n = threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    n = std::min<int>(n, static_cast<int>(files.size()));
    std::vector<std::thread> pool;
    for (int k = 1; k < n; ++k)
        pool.emplace_back(work);
    work();
    for (auto& th : pool)
        th.join();
    std::exception_ptr first;
    std::vector<RankRow> read;
    for (std::size_t i = 0; i < files.size(); ++i) {
        if (!errors[i]) {
            read.push_back(std::move(t.ranks[i]));
            continue;
        }
        first = first ? first : errors[i];
        try {
            std::rethrow_exception(errors[i]);
        } catch (const std::exception& e) {
            t.left_out.push_back({files[i], e.what()});
        } catch (...) {
            t.left_out.push_back({files[i], "could not be read"});
        }
    }
    if (read.empty() && first)
        std::rethrow_exception(first);
    t.ranks = std::move(read);
    if (t.ranks.empty())
        return t;
    std::int64_t lowest = INT64_MAX, highest = -1;
    for (std::size_t i = 0; i < t.ranks.size(); ++i) {
        auto v = t.ranks[i].peak_total_bytes;
        if (v > highest) {
            highest = v;
            t.highest_peak_rank = static_cast<int>(i);
        }
        lowest = std::min(lowest, v);
    }
    t.peak_spread = lowest > 0 ? static_cast<double>(highest) / static_cast<double>(lowest) : 0.0;
    return t;
}

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
    for (std::size_t i = 0; i < t.ranks.size(); ++i) {
        const auto& r = t.ranks[i];
        char at[32];
        std::snprintf(at, sizeof at, "%.1f ms", static_cast<double>(r.peak_time_ns) / 1e6);
        out << padCell(std::to_string(i) + (static_cast<int>(i) == t.highest_peak_rank ? "*" : ""), 5)
            << padCell(fs::path(r.file).filename().string(), 34) << padCell(formatBytes(r.peak_total_bytes), 12, true)
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
