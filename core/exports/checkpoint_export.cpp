#include "exports/checkpoint_export.h"

#include "support/format.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <sstream>

namespace memledger {

nlohmann::json checkpointToJson(const CheckpointPrediction& p)
{
    nlohmann::json j;
    j["checkpoint"] = p.checkpoint;
    j["implementation"] = checkpointImplName(p.impl);
    j["predicted_peak_bytes"] = p.predicted_peak_bytes;
    j["predicted_peak_total_bytes"] = p.predicted_peak_total_bytes;
    j["predicted_reserved_bytes"] = p.predicted_reserved_bytes;
    j["recompute_ms"] = p.recompute_ms;
    j["recorded_peak_bytes"] = p.recorded_peak_bytes;
    j["recorded_peak_total_bytes"] = p.recorded_peak_total_bytes;
    j["saving_bytes"] = p.saving_bytes;
    j["worse"] = p.worse();
    j["notes"] = p.notes;
    return j;
}

std::string checkpointToText(const CheckpointPrediction& p)
{
    std::ostringstream o;
    std::string names;
    for (std::size_t i = 0; i < p.checkpoint.size(); ++i)
        names += (i ? ", " : "") + p.checkpoint[i];
    o << "Checkpointing " << (names.empty() ? std::string("nothing") : names) << " (" << checkpointImplName(p.impl)
      << "):\n";
    o << "  predicted peak        " << formatBytes(p.predicted_peak_bytes) << "  (recorded without: "
      << formatBytes(p.recorded_peak_bytes) << ")\n";
    if (p.saving_bytes >= 0)
        o << "  saving                " << formatBytes(p.saving_bytes) << "\n";
    else
        o << "  WORSE by              " << formatBytes(-p.saving_bytes)
          << "  the checkpoint makes the peak higher, not lower\n";
    o << "  predicted peak total  " << formatBytes(p.predicted_peak_total_bytes) << "\n";
    if (p.predicted_reserved_bytes > 0)
        o << "  reserved on a GPU     " << formatBytes(p.predicted_reserved_bytes) << "  (simulated)\n";
    char ms[32];
    std::snprintf(ms, sizeof ms, "%.2f ms", p.recompute_ms);
    o << "  recompute             " << ms << "  (the recorded forward time of the checkpointed modules)\n";
    return o.str();
}

} // namespace memledger
