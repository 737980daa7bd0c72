#pragma once
#include "report/report.h"

#include <nlohmann/json_fwd.hpp>
#include <cstddef>
#include <functional>
#include <string>

namespace memledger {

constexpr int kReportVersion = 1;

nlohmann::json reportToJson(const Report& r, bool withEvents = true);
// The report's JSON as text, ending in a newline: the same document as reportToJson(r).dump(), with the events'
// columns written straight to the text, handed to `sink` in pieces of about 1 MiB (what `analyze --json` and the
// window's Save write).
using JsonSink = std::function<void(const char* data, std::size_t n)>;
void writeReportJson(const Report& r, const JsonSink& sink);
std::string reportToJsonText(const Report& r);
// Into a file, atomically (support/atomic_file.h); throws std::runtime_error naming the path.
void writeReportJsonFile(const Report& r, const std::string& path);
// Throws FileError (with `name`) when the JSON is not a memledger report.
Report reportFromJson(const nlohmann::json& j, const std::string& name);
Report readReportFile(const std::string& path);

} // namespace memledger
