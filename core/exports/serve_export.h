#pragma once
// The serving answer (whatif/serving.h) for people and programs: the CLI's text, the JSON of
// `memledger fit --serve --json` and a page of its own (--html).
#include "whatif/serving.h"

#include <nlohmann/json_fwd.hpp>
#include <string>

namespace memledger {

std::string servePlanToText(const ServePlan& p, const std::string& model);
nlohmann::json servePlanToJson(const ServePlan& p, const std::string& model);
std::string servePlanToHtml(const ServePlan& p, const std::string& model);

} // namespace memledger
