#pragma once
// The checkpointing what-if (whatif/checkpoint.h) for programs and people: a row of `memledger whatif
// --checkpoint --json`, and its text.
#include "whatif/checkpoint.h"

#include <nlohmann/json_fwd.hpp>
#include <string>

namespace memledger {

// One row: {checkpoint: [...], implementation, predicted_peak_bytes, predicted_peak_total_bytes,
// predicted_reserved_bytes, recompute_ms, recorded_peak_bytes, saving_bytes, worse, notes}.
nlohmann::json checkpointToJson(const CheckpointPrediction& p);
// For people: "checkpointing conv2 (reentrant): peak 25.8 MB, 3.2 MB MORE than without (22.6 MB) ...".
std::string checkpointToText(const CheckpointPrediction& p);

} // namespace memledger
