// A recorded run on a CUDA GPU: PyTorch's caching allocator with its history on, and afterwards its own
// snapshot, decoded by core/snapshot, for the reserve over time. Compiled only against a libtorch with CUDA
// (PyTorch 2.x: the history and snapshot calls below are its API; 1.13 from Debian has no CUDA).
#include "recording/cuda_session.h"
#include "recording/torch_compat.h"

#include "snapshot/snapshot.h"
#include "support/errors.h"

#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/cuda/memory_snapshot.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>

namespace memledger {

namespace {

constexpr auto kAggregate = static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE);

std::int64_t unixMicroseconds()
{
    return std::chrono::duration_cast<std::chrono::microseconds>(
        std::chrono::system_clock::now().time_since_epoch())
        .count();
}

} // namespace

std::vector<DeviceInfo> cudaDevices()
{
    std::vector<DeviceInfo> devices;
    int count = 0;
    try {
        count = static_cast<int>(torch::cuda::device_count());
    } catch (const std::exception&) {
        return devices;
    }
    for (int i = 0; i < count; ++i) {
        const auto* p = at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(i));
        DeviceInfo d;
        d.id = "cuda:" + std::to_string(i);
        d.name = p ? p->name : "CUDA GPU";
        d.total_memory_bytes = p ? static_cast<std::int64_t>(p->totalGlobalMem) : 0;
        devices.push_back(std::move(d));
    }
    return devices;
}

CudaRecording::CudaRecording(c10::Device device, bool cudnnBenchmark)
    : device_(device)
{
    auto backend = c10::cuda::CUDACachingAllocator::name();
    if (backend != "native")
        throw RunError("PyTorch's CUDA allocator backend is '" + backend
            + "': memledger records the native caching allocator only; unset backend:cudaMallocAsync in "
              "PYTORCH_CUDA_ALLOC_CONF");
    c10::cuda::set_device(device_.index());
    at::globalContext().setBenchmarkCuDNN(cudnnBenchmark);
}

CudaRecording::~CudaRecording()
{
    if (!recording_)
        return;
    try {
        torch::cuda::_record_memory_history(std::nullopt);
    } catch (...) {
    }
}

void CudaRecording::synchronize(c10::Device device)
{
    c10::cuda::device_synchronize();
}

std::int64_t CudaRecording::begin()
{
    synchronize(device_);
    auto index = device_.index();
    auto allocated = c10::cuda::CUDACachingAllocator::getDeviceStats(index).allocated_bytes[kAggregate].current;
    c10::cuda::CUDACachingAllocator::resetPeakStats(index);
    // Every alloc, free and segment event, without stacks (context off): the run is not slowed by unwinding.
    torch::cuda::_record_memory_history(std::string("all"), std::nullopt, "python", SIZE_MAX, true);
    recording_ = true;
    start_unix_us_ = unixMicroseconds();
    return allocated;
}

void CudaRecording::end(GpuRun& gpu)
{
    synchronize(device_);
    auto index = device_.index();
    auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index);
    pickle_ = torch::cuda::_memory_snapshot_pickled();
    torch::cuda::_record_memory_history(std::nullopt);
    recording_ = false;

    const auto* p = at::cuda::getDeviceProperties(index);
    gpu.name = p ? p->name : "CUDA GPU";
    gpu.total_memory_bytes = p ? static_cast<std::int64_t>(p->totalGlobalMem) : 0;
    gpu.reserved_peak_bytes = stats.reserved_bytes[kAggregate].peak;

    // The reserve over the run from the allocator's own trace: the reserve at the end, walked back over the
    // segment events of this device to where the run began, then forward.
    auto snapshot = decodeSnapshot(pickle_, "the CUDA allocator's snapshot");
    const auto& t = *snapshot.trace;
    std::int64_t reservedEnd = 0;
    for (const auto& s : snapshot.segments)
        if (s.device == index)
            reservedEnd += s.total_size;
    auto grows = [](Action a) { return a == Action::SegmentAlloc || a == Action::SegmentMap; };
    auto shrinks = [](Action a) { return a == Action::SegmentFree || a == Action::SegmentUnmap; };
    std::int64_t reserved = reservedEnd;
    for (std::size_t i = 0; i < t.size(); ++i) {
        if (t.device[i] != index)
            continue;
        if (grows(t.action[i]))
            reserved -= t.bytes[i];
        else if (shrinks(t.action[i]))
            reserved += t.bytes[i];
    }
    // Trace times are microseconds since the epoch (from trace_start_us); the run began at start_unix_us_.
    auto offsetNs = snapshot.trace_has_time ? (snapshot.trace_start_us - start_unix_us_) * 1000 : 0;
    gpu.reserved_over_time.clear();
    gpu.reserved_over_time.emplace_back(0, reserved);
    std::int64_t peak = reserved;
    for (std::size_t i = 0; i < t.size(); ++i) {
        if (t.device[i] != index || !(grows(t.action[i]) || shrinks(t.action[i])))
            continue;
        reserved += grows(t.action[i]) ? t.bytes[i] : -t.bytes[i];
        peak = std::max(peak, reserved);
        gpu.reserved_over_time.emplace_back(std::max<std::int64_t>(0, t.time_ns[i] + offsetNs), reserved);
    }
    gpu.reserved_peak_bytes = std::max(gpu.reserved_peak_bytes, peak);
}

} // namespace memledger
