#include "whatif/whatif.h"

#include <nlohmann/json.hpp>

namespace memledger {

nlohmann::json predictionToJson(const Prediction& p)
{
    nlohmann::json j = {
        {"batch", p.batch},
        {"dtype", p.dtype},
        {"method", p.method},
        {"predicted_peak_bytes", p.predicted_peak_bytes},
        {"predicted_peak_total_bytes", p.predicted_peak_total_bytes},
        {"predicted_reserved_bytes", p.predicted_reserved_bytes},
        {"weight_bytes", p.weight_bytes},
        {"input_bytes", p.input_bytes},
        {"reliable", p.reliable},
        {"notes", p.notes},
    };
    auto& ledgers = j["ledgers_at_peak"] = nlohmann::json::object();
    for (int l = 0; l < kLedgerCount; ++l)
        ledgers[ledgerName(static_cast<Ledger>(l))] = p.ledgers_at_peak[static_cast<std::size_t>(l)];
    if (p.measured_peak_bytes)
        j["measured_peak_bytes"] = *p.measured_peak_bytes;
    if (p.measured_peak_total_bytes)
        j["measured_peak_total_bytes"] = *p.measured_peak_total_bytes;
    if (p.error_percent)
        j["error_percent"] = *p.error_percent;
    return j;
}

nlohmann::json whatIfToJson(const std::vector<Prediction>& predictions, std::int64_t budget,
    const std::vector<std::pair<std::string, std::int64_t>>& maxBatch)
{
    nlohmann::json j = {{"format", "memledger-whatif"}, {"version", 1}};
    auto& rows = j["predictions"] = nlohmann::json::array();
    for (const auto& p : predictions) {
        auto row = predictionToJson(p);
        if (budget > 0) {
            auto total = p.measured_peak_total_bytes.value_or(p.predicted_peak_total_bytes);
            row["fits"] = total <= budget && p.predicted_reserved_bytes <= budget;
        }
        rows.push_back(std::move(row));
    }
    if (budget > 0) {
        j["budget_bytes"] = budget;
        auto& mb = j["max_batch"] = nlohmann::json::object();
        for (const auto& [dtype, n] : maxBatch)
            mb[dtype] = n;
    }
    return j;
}

} // namespace memledger
