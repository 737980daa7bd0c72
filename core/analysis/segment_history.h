#pragma once
#include "report/report.h"
#include "analysis/timeline_series.h"

#include <string>
#include <vector>

namespace memledger {

// Reserved, allocated and active bytes over a report, per point of its TimelineSeries. A snapshot whose
// trace records segment events gives the reserved bytes as recorded; otherwise (older snapshots, model
// runs) they come from the caching-allocator model and are `simulated`.
struct SegmentHistory {
    std::vector<double> keys;
    std::vector<double> reserved;
    std::vector<double> allocated; // live blocks, pending frees excluded
    std::vector<double> active; // allocated + pending frees
    std::vector<double> fragmentation; // reserved - allocated, never below 0
    bool simulated = false;
    std::string cause; // what holds most of the fragmentation, as a sentence

    static SegmentHistory build(const Report& report, TimelineAxis axis, int device = TimelineSeries::kAllDevices);
};

// Model runs: what a CUDA caching allocator would reserve, per point of the TimelineSeries, with the weights
// (one block per tensor) and the inputs allocated before the run.
std::vector<double> simulatedReservedBytes(const Report& report, std::string* cause = nullptr);

} // namespace memledger
