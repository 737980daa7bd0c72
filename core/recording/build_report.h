#pragma once
#include "recording/model.h"
#include "report/report.h"
#include "report/report_summary.h"

namespace memledger {

// Sorts every allocation of a recorded run into its ledger and sums it up per module.
// `modules` is the model's module tree (Model::modules()).
Report buildReport(const ModelInfo& model, const std::vector<LayerStats>& modules, RawRun raw);

} // namespace memledger

namespace memledger {
// Runs the model under the recorder and builds its report.
Report analyzeModel(Model& model, const RunOptions& options);
} // namespace memledger
