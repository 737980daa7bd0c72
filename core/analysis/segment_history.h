#pragma once
#include "report/report.h"
#include "analysis/timeline_series.h"

#include <string>
#include <vector>

namespace memledger {

// Reserved, allocated and active bytes over a report, per point of its TimelineSeries (whose keys and bands it
// shares). A snapshot whose trace records segment events gives the reserved bytes as recorded; otherwise (older
// snapshots, model runs) they come from the caching-allocator model and are `simulated`. A snapshot's values are
// read from its trace a block at a time (core/analysis/step_values.h), a model run's are kept.
struct SegmentHistory {
    TimelineKeys keys;
    StepValues reserved;
    StepValues allocated; // live blocks, pending frees excluded
    StepValues active; // allocated + pending frees
    StepValues fragmentation; // reserved - allocated, never below 0
    bool simulated = false;
    std::string cause; // what holds most of the fragmentation, as a sentence

    static SegmentHistory build(const Report& report, TimelineAxis axis, int device = TimelineSeries::kAllDevices);
};

// Model runs: what a CUDA caching allocator would reserve, per point of the TimelineSeries, with the weights
// (one block per tensor) and the inputs allocated before the run.
std::vector<double> simulatedReservedBytes(const Report& report, std::string* cause = nullptr);

} // namespace memledger
