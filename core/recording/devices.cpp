// Which devices a run can use (the libtorch part; what the build has is known in torch_library.cpp).
#include "recording/cuda_session.h"
#include "recording/meta_device.h"
#include "recording/torch_compat.h"

#include "support/errors.h"

#include <torch/cuda.h>


namespace memledger {

c10::Device resolveDevice(const std::string& device)
{
    if (device.empty() || device == "cpu")
        return c10::Device(c10::kCPU);
    if (device == "meta") { // shapes only: every storage's size and lifetime, no memory
        installMetaDevice(); // throws RunError in a build whose libtorch has no meta runs
        return c10::Device(c10::kMeta);
    }
    if (device.rfind("cuda", 0) != 0)
        throw RunError("unknown device '" + device + "' (use cpu, meta, cuda or cuda:N)");
    int index = 0;
    if (device != "cuda") {
        std::size_t used = 0;
        std::string number = device.size() > 5 && device[4] == ':' ? device.substr(5) : std::string();
        try {
            index = std::stoi(number, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (number.empty() || used != number.size() || index < 0)
            throw RunError("unknown device '" + device + "' (use cpu, meta, cuda or cuda:N)");
    }
    if (!builtWithCuda())
        throw RunError("--device " + device + ": this memledger was built without CUDA (" + torchBuildInfo()
            + "); build it against a libtorch with CUDA (the default build, ./packaging/build.sh)");
    auto count = static_cast<int>(torch::cuda::device_count());
    if (count == 0)
        throw RunError("--device " + device + ": no CUDA GPU was found (" + torchBuildInfo()
            + "; check nvidia-smi and CUDA_VISIBLE_DEVICES)");
    if (index >= count)
        throw RunError("--device " + device + ": there is no GPU " + std::to_string(index) + " (this machine has "
            + std::to_string(count) + (count == 1 ? " GPU)" : " GPUs)"));
    return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
}

#ifndef MEMLEDGER_HAS_CUDA
std::vector<DeviceInfo> cudaDevices()
{
    return {};
}

CudaRecording::CudaRecording(c10::Device device, bool)
    : device_(device)
{
    throw RunError("this memledger was built without CUDA (" + torchBuildInfo() + ")");
}
CudaRecording::~CudaRecording() = default;
std::int64_t CudaRecording::begin()
{
    return 0;
}
void CudaRecording::end(GpuRun&) { }
void CudaRecording::synchronize(c10::Device) { }
#endif

} // namespace memledger
