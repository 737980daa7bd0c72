#pragma once
// What a CPU run would reserve on a GPU: the run replayed through the model of PyTorch's CUDA caching
// allocator, with the weights (one block per tensor) and the inputs allocated before it, as on a GPU.
#include "allocator/caching_allocator.h"
#include "report/report.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace memledger {

struct SimulatedGpu {
    AllocatorReplay replay; // over `preloaded` weight and input blocks, then the run's events
    std::size_t preloaded = 0; // the first events of the replay are weights and inputs
    std::int64_t reserved_before_run = 0;
    std::int64_t peak_reserved = 0;
};

// Empty replay when the report has no trace.
SimulatedGpu simulateGpu(const Report& r, const AllocatorSettings& settings = {});
// The report's own replay (made off the GUI thread with the report), or a new one when it has none.
std::shared_ptr<const SimulatedGpu> simulatedGpuOf(const Report& r);

} // namespace memledger
