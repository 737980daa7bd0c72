#pragma once
// Several recordings of one job side by side: the snapshots (or reports) of a multi-GPU run, one per rank.
// Which rank peaks highest, by how much the ranks differ, and where each peak falls.
#include "report/report.h"

#include <nlohmann/json_fwd.hpp>

#include <array>
#include <cstdint>
#include <string>
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

// Reads every file (CUDA snapshots or memledger JSON reports; a folder stands for its .pickle/.pkl/.json files,
// sorted) with the streaming reader, `threads` at a time. A file that cannot be read is left out and listed
// (RankTable::left_out); when none can be read, throws the first one's FileError.
RankTable compareRanks(const std::vector<std::string>& files, int threads = 0);
// The files a list of paths stands for (folders expanded). Throws FileError for a folder without recordings.
std::vector<std::string> rankFiles(const std::vector<std::string>& paths);

// Rank i's colour in every view of ranks (the HTML, the window): "#1f77b4", ...; eight, then again.
const char* rankColourHex(std::size_t rank);

nlohmann::json ranksToJson(const RankTable& t);
std::string ranksToText(const RankTable& t);
std::string ranksToHtml(const RankTable& t);

} // namespace memledger
