#pragma once
// The what-if table as plain values: what the report carries, the exports write and a reopened report reads.
#include "report/kinds.h"
#include "report/trace.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace memledger {

struct Prediction {
    std::int64_t batch = 1;
    std::int64_t seq = 0; // a sequence what-if's row: the token inputs' dimension 1 (0: batch what-if)
    std::string dtype = "float32";
    FigureMethod method = FigureMethod::Predicted; // Measured: a run at exactly this batch and dtype
    std::int64_t predicted_peak_bytes = 0; // most bytes live at once during the run
    std::int64_t predicted_peak_total_bytes = 0; // weights + inputs + peak
    std::int64_t predicted_reserved_bytes = 0; // a GPU's caching allocator, weights and inputs included
    std::int64_t weight_bytes = 0;
    std::int64_t input_bytes = 0;
    std::array<std::int64_t, kLedgerCount> ledgers_at_peak {}; // weights, inputs, activations, temporaries
    std::int32_t peak_event = -1; // in the predicted trace
    bool reliable = true; // false: the two records did not align; measure() instead
    bool extrapolated = false; // beyond the largest record: the last fit carried on
    std::vector<std::string> notes;

    // Set by WhatIf::measure() only.
    std::optional<std::int64_t> measured_peak_bytes;
    std::optional<std::int64_t> measured_peak_total_bytes;
    std::optional<double> error_percent; // (predicted - measured) / measured of the peak, in percent
};

struct WhatIfTable {
    std::vector<Prediction> predictions;
    std::int64_t budget_bytes = 0; // 0: no budget was given
    std::vector<std::pair<std::string, std::int64_t>> max_batch; // per dtype, with a budget
    // Per dtype of max_batch: how the largest batch that fits is known: measured (a real run at that batch
    // fits), predicted (within the records) or extrapolated (beyond the largest record).
    std::vector<std::pair<std::string, FigureMethod>> max_batch_method;
    std::int64_t recorded_batch1 = 1; // the smallest and largest records the predictions come from
    std::int64_t recorded_batch2 = 2;
    std::vector<std::int64_t> recorded_batches; // every record
    RunMode mode = RunMode::Inference; // of the recorded runs: Train predicts a training step
    // Batch, or Seq: the rows vary the sequence length (Prediction::seq), recorded_batches are sequence
    // lengths and max_batch is the longest sequence within the budget, at each row's batch (max_seq_batch).
    WhatIfAxis axis = WhatIfAxis::Batch;
    std::vector<std::int64_t> max_seq_batch; // axis "seq": the batch of each max_batch entry
    std::string device = "cpu"; // where the records ran; "meta": figures computed from shapes, never measured

    // How a row is known, for people: "measured", "predicted", "extrapolated", or "computed on meta" for a row
    // run at exactly its setting on the meta device.
    std::string methodText(const Prediction& p) const
    {
        return figureMethodText(p.method, device == "meta");
    }

    // Peak total (measured where there is a measurement) and reserved within the budget.
    bool fits(const Prediction& p) const;
};

} // namespace memledger
