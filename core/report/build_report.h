#pragma once
#include "recording/model.h"
#include "report/report.h"

namespace memledger {

// Sorts every allocation of a recorded run into its ledger and sums it up per module.
// `modules` is the model's module tree (Model::modules()).
Report buildReport(const ModelInfo& model, const std::vector<LayerStats>& modules, RawRun raw);

// Live bytes after each event, counting only allocations made inside the trace.
std::vector<std::int64_t> liveBytesAfterEachEvent(const Trace& trace);

// A report's peak from a trace: peak_bytes, peak_event, peak_time_ns, peak_total_bytes (weights, optimizer
// state, inputs and a GPU's library bytes added), the ledgers (over the run and at the peak), each phase's peak
// and what is alive at the peak. Returns the live bytes after each event.
std::vector<std::int64_t> setPeakFromTrace(Report& r, const Trace& trace);

} // namespace memledger

namespace memledger {
// Runs the model under the recorder and builds its report.
Report analyzeModel(Model& model, const RunOptions& options);
} // namespace memledger
