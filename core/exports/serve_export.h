#pragma once
// The serving answer (whatif/serving.h) for people and programs: the CLI's text, the JSON of
// `memledger fit --serve --json` and a page of its own (--html).
#include "whatif/serving.h"

#include <nlohmann/json_fwd.hpp>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

namespace memledger {

// The layout's lines, in the order the engine takes them off: (what, bytes: negative where taken off, where the
// figure comes from). The text, the HTML and the window's GPUs tab show these.
std::vector<std::tuple<std::string, std::int64_t, std::string>> servePlanLayout(const ServePlan& p);
// "Serving MODEL on H100-80GB (79.11 GiB each), bfloat16 weights, bfloat16 KV cache"
std::string servePlanTitle(const ServePlan& p, const std::string& model);
// "Sequences of C tokens at once: N (B blocks each)", and the longest context at the batch where asked.
std::string servePlanAnswer(const ServePlan& p);
extern const char* const kServeNotModelled; // what the answer leaves out, said under it

std::string servePlanToText(const ServePlan& p, const std::string& model);
nlohmann::json servePlanToJson(const ServePlan& p, const std::string& model);
std::string servePlanToHtml(const ServePlan& p, const std::string& model);

} // namespace memledger
