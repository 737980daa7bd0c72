#pragma once
// From a classified trace to a report's figures: the peak, the ledgers, each module's and each phase's. A model
// run's report (recording/build_report.h) and a snapshot's (snapshot/snapshot_report.cpp) are both made with these.
#include "report/report.h"

#include <cstdint>
#include <vector>

namespace memledger {

// Sorts every allocation of the trace into its ledger from the ops that made it (outer and inner op, phase).
void classifyTrace(Trace& t, const std::vector<OpCall>& ops);

// The figures of a report that come from events [first, end) of its classified trace: ledger totals and the
// module figures count what the range allocated (and the ops wholly inside it); the peak is the most live
// bytes at a moment of the range, and the ledgers at the peak and alive_at_peak are everything alive then.
// `live`: liveBytesAfterEachEvent(t). buildReport calls it for the whole run, reportForRange for a range.
void summarizeRunEvents(Report& r, const Trace& t, const std::vector<OpCall>& ops,
    const std::vector<std::int64_t>& live, std::uint32_t first, std::uint32_t end);

// The ledger columns of a layer tree, one allocation at a time: its bytes go into its layer and every parent of
// it (layer -1: none), into gradient_bytes for a gradient, saved_activation_bytes for a saved activation, and
// activation_bytes where `activation` says (a model run: an activation its forward made; a snapshot: every
// allocation, its tree's "allocated in total"). summarizeRunEvents and a snapshot's module tree both sum with it.
void addToLedgerColumns(std::vector<LayerStats>& layers, int layer, Ledger ledger, std::int64_t bytes, bool activation);

// Live bytes after each event, counting only allocations made inside the trace.
std::vector<std::int64_t> liveBytesAfterEachEvent(const Trace& trace);

// A report's peak from a trace: peak_bytes, peak_event, peak_time_ns, peak_total_bytes (weights, optimizer
// state, inputs and a GPU's library bytes added), the ledgers (over the run and at the peak), each phase's peak
// and what is alive at the peak. Returns the live bytes after each event.
std::vector<std::int64_t> setPeakFromTrace(Report& r, const Trace& trace);
// The samples one optimizer step sees: the micro-batch x the micro-batches accumulated x the data-parallel ranks.
std::int64_t globalBatch(const RunInfo& run);

} // namespace memledger
