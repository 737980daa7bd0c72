#pragma once
// The fit table (whatif/gpu_fit.h) for people and programs: the CLI's text, the JSON of `memledger fit --json`
// and of a report that carries one.
#include "report/whatif_table.h"

#include <nlohmann/json_fwd.hpp>
#include <string>

namespace memledger {

std::string gpuFitToText(const GpuFitTable& t);
nlohmann::json gpuFitToJson(const GpuFitTable& t);
GpuFitTable gpuFitFromJson(const nlohmann::json& j); // throws nlohmann::json::exception on a damaged table
// A page of its own: `title` (the model), the budget and what comes off it, the answers, the largest micro-batch
// per GPU count.
std::string gpuFitToHtml(const GpuFitTable& t, const std::string& title);

} // namespace memledger
