#pragma once
// A model of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp): replays a sequence of
// allocations and frees and tells what a GPU would reserve. Implemented in core/src/caching_allocator.cpp.
#include "memledger/trace.h"

#include <cstdint>
#include <limits>
#include <vector>

namespace memledger {

struct AllocatorSettings {
    std::int64_t max_split_size = std::numeric_limits<std::int64_t>::max(); // max_split_size_mb, in bytes
    int roundup_power2_divisions = 0;                                       // 0: off
    bool expandable_segments = false;
    std::int64_t device_memory = 0; // 0: unlimited; else an OOM frees cached blocks and retries, then fails
};

struct AllocatorReplay {
    std::int64_t peak_reserved = 0;
    std::int64_t peak_allocated = 0; // rounded block sizes
    std::vector<std::int64_t> segment_allocs; // sizes of the segments cudaMalloc'ed, in order
    std::vector<std::int64_t> reserved_after;  // reserved bytes after each event of the trace
    std::int64_t ooms = 0;
};

// Replays the Alloc and Free events of `trace` (others are ignored); frees without their alloc are skipped.
AllocatorReplay replayCachingAllocator(const Trace& trace, const AllocatorSettings& settings = {});

} // namespace memledger
