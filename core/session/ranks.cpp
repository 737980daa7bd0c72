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

} // namespace memledger
