#pragma once
// The ranks of one job (report/rank_table.h, read by session/ranks.h) for programs and people: the JSON and text
// of `memledger ranks` and its HTML page.
#include "report/rank_table.h"

#include <nlohmann/json_fwd.hpp>
#include <string>

namespace memledger {

// Rank i's colour in every view of ranks (the HTML, the window): "#1f77b4", ...; eight, then again.
const char* rankColourHex(std::size_t rank);

nlohmann::json ranksToJson(const RankTable& t);
std::string ranksToText(const RankTable& t);
std::string ranksToHtml(const RankTable& t);

} // namespace memledger
