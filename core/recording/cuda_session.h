#pragma once
// Private to core/recording: a recorded run on a CUDA GPU. cuda_session.cpp is compiled only when the libtorch
// has CUDA (MEMLEDGER_HAS_CUDA); without it, devices.cpp says why --device cuda cannot run.
#include "recording/model.h"

#include <c10/core/Device.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace memledger {

// "cpu", "cuda" or "cuda:N" as a device this memledger can run on; throws RunError saying why not (built
// without CUDA, no CUDA GPU found, no such GPU, unknown device).
c10::Device resolveDevice(const std::string& device);

// The CUDA GPUs this libtorch sees (none without CUDA or a GPU).
std::vector<DeviceInfo> cudaDevices();

// Around the recorded run on a GPU: the allocator's history on, peak statistics reset, and afterwards its own
// snapshot decoded into the reserve over time. Never used on the CPU.
class CudaRecording {
public:
    // Checks the allocator backend (cudaMallocAsync is refused), sets cuDNN's benchmark mode and waits for the
    // device. Throws RunError.
    CudaRecording(c10::Device device, bool cudnnBenchmark);
    ~CudaRecording(); // history off, whatever happened
    CudaRecording(const CudaRecording&) = delete;
    CudaRecording& operator=(const CudaRecording&) = delete;

    // Right before the recorded run: bytes allocated on the device now (weights, inputs, what the libraries
    // kept from the warm-up), then peak statistics reset and history on.
    std::int64_t begin();
    // Right after the run: waits for the device, takes the allocator's snapshot and fills `gpu`; the pickle
    // itself is kept for --snapshot.
    void end(GpuRun& gpu);
    const std::string& pickle() const { return pickle_; }
    static void synchronize(c10::Device device);

private:
    c10::Device device_;
    bool recording_ = false;
    std::int64_t start_unix_us_ = 0;
    std::string pickle_;
};

} // namespace memledger
