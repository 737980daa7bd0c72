#pragma once
// The remedies (whatif/remedies.h) for programs and people: the JSON a report carries them in, and the text of
// `memledger analyze --remedies`.
#include "report/remedy.h"

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace memledger {

nlohmann::json remediesToJson(const std::vector<Remedy>& remedies);
std::vector<Remedy> remediesFromJson(const nlohmann::json& j); // throws nlohmann::json::exception
// `device` "meta": a figure a run made is "computed on meta", never "measured" (a meta run has no memory).
std::string remediesToText(const std::vector<Remedy>& remedies, const std::string& device = "cpu");

} // namespace memledger
