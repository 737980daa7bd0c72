// Devices: what --version says about the libtorch, --device on a machine with or without a CUDA GPU, and a
// recorded run on a GPU (skipped, with the reason, where there is none).
#include "fixture_paths.h"
#include "run_command.h"

#include "recording/model.h"
#include "snapshot/snapshot.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

using namespace memledger;
using namespace memledger::test;

namespace {

bool hasCudaGpu()
{
    for (const auto& d : availableDevices())
        if (d.id.rfind("cuda", 0) == 0)
            return true;
    return false;
}

nlohmann::json readJson(const std::string& path)
{
    std::ifstream in(path);
    return nlohmann::json::parse(in);
}

} // namespace

TEST(Device, VersionNamesTheLibtorchAndWhetherCudaIsIn)
{
    auto r = runCommand(memledgerBinary() + " --version");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.output.rfind("memledger 0.4.0 (libtorch ", 0), 0u) << r.output;
    if (builtWithCuda())
        EXPECT_NE(r.output.find(", CUDA "), std::string::npos) << r.output;
    else
        EXPECT_NE(r.output.find(", CPU only)"), std::string::npos) << r.output;
}

TEST(Device, TheCpuComesFirstWithItsMemory)
{
    auto devices = availableDevices();
    ASSERT_FALSE(devices.empty());
    EXPECT_EQ(devices[0].id, "cpu");
    EXPECT_GT(devices[0].total_memory_bytes, std::int64_t {0});
    for (std::size_t i = 1; i < devices.size(); ++i) {
        EXPECT_EQ(devices[i].id, "cuda:" + std::to_string(i - 1));
        EXPECT_FALSE(devices[i].name.empty());
        EXPECT_GT(devices[i].total_memory_bytes, std::int64_t {0});
    }
    if (!builtWithCuda())
        EXPECT_EQ(devices.size(), 1u);
}

TEST(Device, UnknownDeviceIsAUsageError)
{
    for (const char* bad : {"tpu", "cuda:", "cuda:x", "gpu"}) {
        auto r = runCommand(memledgerBinary() + " analyze '" + fixture("small_inplace.pt") + "' --device " + bad);
        EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.output;
        EXPECT_NE(r.output.find("--device"), std::string::npos) << r.output;
    }
    auto r = runCommand(memledgerBinary() + " analyze '" + fixture("small_inplace.pt") + "' --cudnn-benchmark maybe");
    EXPECT_EQ(r.exit_code, 2) << r.output;
}

TEST(Device, CudaWithoutAGpuExitsFourSayingWhy)
{
    if (hasCudaGpu())
        GTEST_SKIP() << "this machine has a CUDA GPU: the run is tested by Device.CudaRunRecordsTheAllocator";
    for (const std::string command : {"analyze", "whatif"}) {
        auto r = runCommand(memledgerBinary() + " " + command + " '" + fixture("small_inplace.pt")
            + "' --input 1x3x32x32 --device cuda" + (command == "whatif" ? " --batch 1,4" : ""));
        EXPECT_EQ(r.exit_code, 4) << r.output;
        if (builtWithCuda())
            EXPECT_NE(r.output.find("no CUDA GPU was found"), std::string::npos) << r.output;
        else
            EXPECT_NE(r.output.find("built without CUDA"), std::string::npos) << r.output;
        EXPECT_EQ(r.output.find("terminate called"), std::string::npos) << r.output;
    }
}

TEST(Device, CpuIsTheDefaultAndIsReported)
{
    auto json = fixture("device-cpu.json");
    auto r = runCommand(memledgerBinary() + " analyze '" + fixture("small_inplace.pt")
        + "' --input 1x3x32x32 --device cpu --json '" + json + "'");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto j = readJson(json);
    EXPECT_EQ(j["run"]["device"], "cpu");
    EXPECT_FALSE(j.contains("gpu"));
}

// On a GPU: the allocator's reserve, the GPU's name and memory, and --snapshot as the allocator's own pickle.
TEST(Device, CudaRunRecordsTheAllocator)
{
    if (!builtWithCuda())
        GTEST_SKIP() << "built without CUDA (" << torchBuildInfo() << ")";
    if (!hasCudaGpu())
        GTEST_SKIP() << "no CUDA GPU on this machine (" << torchBuildInfo() << "): run packaging/gpu-check.sh on one";
    for (const std::string mode : {"inference", "train"}) {
        auto json = fixture("device-cuda-" + mode + ".json"), pickle = fixture("device-cuda-" + mode + ".pickle");
        auto r = runCommand(memledgerBinary() + " analyze '" + fixture("small_inplace.pt")
            + "' --input 1x3x32x32 --device cuda --mode " + mode + " --json '" + json + "' --snapshot '" + pickle
            + "'");
        ASSERT_EQ(r.exit_code, 0) << r.output;
        auto j = readJson(json);
        EXPECT_EQ(j["run"]["device"], "cuda:0");
        ASSERT_TRUE(j.contains("gpu")) << j.dump();
        EXPECT_FALSE(j["gpu"]["name"].get<std::string>().empty());
        EXPECT_GT(j["gpu"]["total_memory_bytes"].get<std::int64_t>(), 0);
        EXPECT_GE(j["reserved_peak_bytes"].get<std::int64_t>(), j["peak_total_bytes"].get<std::int64_t>());
        EXPECT_GT(j["peak_bytes"].get<std::int64_t>(), 0);
        auto snapshot = readSnapshotFile(pickle);
        EXPECT_GT(snapshot.reservedBytes(), 0);
    }
}
