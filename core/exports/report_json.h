#pragma once
#include "report/report.h"

#include <nlohmann/json_fwd.hpp>
#include <string>

namespace memledger {

constexpr int kReportVersion = 1;

nlohmann::json reportToJson(const Report& r, bool withEvents = true);
// The report's JSON as text, ending in a newline: the same document as reportToJson(r).dump(), with the events'
// columns written straight to the text (what `analyze --json` and the window's Save write).
std::string reportToJsonText(const Report& r);
// Throws FileError (with `name`) when the JSON is not a memledger report.
Report reportFromJson(const nlohmann::json& j, const std::string& name);
Report readReportFile(const std::string& path);

} // namespace memledger
