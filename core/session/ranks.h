#pragma once
// Several recordings of one job side by side: the snapshots (or reports) of a multi-GPU run, one per rank.
// Which rank peaks highest, by how much the ranks differ, and where each peak falls.
#include "report/rank_table.h"
#include "report/report.h"

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace memledger {

// Reads every file (CUDA snapshots or memledger JSON reports; a folder stands for its .pickle/.pkl/.json files,
// sorted) with the streaming reader, `threads` at a time. A file that cannot be read is left out and listed
// (RankTable::left_out); when none can be read, throws the first one's FileError.
RankTable compareRanks(const std::vector<std::string>& files, int threads = 0);
// The files a list of paths stands for (folders expanded). Throws FileError for a folder without recordings.
std::vector<std::string> rankFiles(const std::vector<std::string>& paths);

} // namespace memledger
