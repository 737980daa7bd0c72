#pragma once
// A model of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp): replays a sequence of
// allocations and frees and tells what a GPU would reserve. Implemented in allocator/caching_allocator.cpp.
#include "report/trace.h"

#include <cstdint>
#include <limits>
#include <vector>

namespace memledger {

struct AllocatorSettings {
    std::int64_t max_split_size = std::numeric_limits<std::int64_t>::max(); // max_split_size_mb, in bytes
    int roundup_power2_divisions = 0; // 0: off
    bool expandable_segments = false;
    std::int64_t device_memory = 0; // 0: unlimited; else an OOM frees cached blocks and retries, then fails
};

// Where a segment is and which pool it belongs to.
struct SegmentPlace {
    std::int8_t device = 0;
    std::uint64_t stream = 0;
    std::uint64_t address = 0;
    std::int64_t size = 0;
    bool small_pool = false;
    bool expandable = false;
};

// A segment as the model leaves it after the replay (blocks cover it, in address order).
struct ReplaySegment : SegmentPlace {
    struct Block {
        std::uint64_t address = 0;
        std::int64_t size = 0;
        bool allocated = false;
        std::int32_t event = -1; // the Alloc event that holds it; -1 when free or alive before the trace
    };
    std::vector<Block> blocks;
};

struct AllocatorReplay {
    std::int64_t peak_reserved = 0;
    std::int64_t peak_allocated = 0; // rounded block sizes
    std::vector<std::int64_t> segment_allocs; // sizes of the segments cudaMalloc'ed, in order
    std::vector<std::int64_t> reserved_after; // reserved bytes after each event of the trace
    std::int64_t ooms = 0;
    // Segment growth in event order: segment_allocs (cudaMalloc) above, and with expandable segments the
    // sizes mapped into a segment. segment_alloc_event[i]: index of the trace event that caused it.
    std::vector<std::int64_t> segment_maps;
    std::vector<std::int32_t> segment_alloc_event;
    std::vector<std::int32_t> segment_map_event;
    std::vector<std::int8_t> segment_alloc_device;
    std::vector<std::uint64_t> segment_alloc_address;
    std::vector<std::int8_t> segment_map_device;
    std::int64_t segment_frees = 0; // segments released (recorded segment_free, OOM retries)
    std::int64_t frees_without_alloc = 0; // frees of blocks the replay never saw allocated
    std::vector<ReplaySegment> final_segments;
    std::vector<std::uint64_t> model_address; // with ReplayOptions::record_addresses: per event, 0 if none
};

// A segment that existed when the trace began (a trace is a ring buffer and can start mid-run).
struct PreloadedSegment : SegmentPlace {
    struct Block {
        std::uint64_t address = 0;
        std::int64_t size = 0;
    };
    std::vector<Block> allocated; // blocks in use at the start, sorted by address; the rest is free
};

struct ReplayOptions {
    const StreamColumn* streams = nullptr; // stream of each event; nullptr: all on stream 0
    std::vector<PreloadedSegment> initial;
    // The address cudaMalloc returns is the driver's choice: take it from the recorded segment_alloc
    // events, in order, so that best-fit ties between equal blocks break as on the GPU.
    bool use_recorded_segment_addresses = true;
    // Recorded segment_free / segment_unmap events (torch.cuda.empty_cache()) release cached segments.
    bool follow_segment_frees = true;
    bool record_addresses = false; // fill AllocatorReplay::model_address
    bool record_reserved_after = true; // fill AllocatorReplay::reserved_after
};

// Replays the Alloc and Free events of `trace` (others are ignored); frees without their alloc are skipped.
AllocatorReplay replayCachingAllocator(const Trace& trace, const AllocatorSettings& settings = {});
AllocatorReplay replayCachingAllocator(
    const Trace& trace, const AllocatorSettings& settings, const ReplayOptions& options);

// The allocator's size rules, exposed for tests and the what-if model.
std::int64_t allocatorRoundSize(std::int64_t requested, const AllocatorSettings& settings = {});
std::int64_t allocatorSegmentSize(std::int64_t rounded); // bytes cudaMalloc'ed for a new segment

} // namespace memledger
