#pragma once
// The ranks of one job side by side (session/ranks.h reads them, exports/ranks_export.h writes them) as plain
// values: which rank peaks highest, by how much the ranks differ, and where each peak falls.
#include "report/trace.h"

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace memledger {

struct RankRow {
    std::string file;
    std::int64_t peak_bytes = 0; // the most bytes allocated in the trace at once
    std::int64_t peak_total_bytes = 0; // the report's peak total (what analyze says)
    std::int64_t reserved_peak_bytes = 0; // the most the caching allocator held (recorded, or simulated)
    bool reserved_simulated = false;
    std::int64_t peak_time_ns = 0; // from the trace's start
    std::array<std::int64_t, kLedgerCount> ledgers_at_peak {};
    std::string peak_phase; // the annotation (record_function range) or phase holding the peak; "" if none
    // The live bytes over time from the trace's start, thinned to a few hundred points: (ms, bytes).
    std::vector<std::pair<double, double>> timeline;
};

struct RankTable {
    std::vector<RankRow> ranks; // in the order the files were given, those that could be read
    struct LeftOut {
        std::string file;
        std::string reason; // the reader's error, naming the file
    };
    std::vector<LeftOut> left_out; // files that could not be read (not a snapshot, damaged): listed, not ranked
    int highest_peak_rank = -1; // index into ranks
    double peak_spread = 0.0; // highest peak total / lowest peak total; 0 when a rank holds nothing (JSON null)
};

} // namespace memledger
