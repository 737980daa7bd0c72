#pragma once
// The seam between core and memledger's libtorch part. Everything that includes libtorch's headers (the rest of
// core/recording: loading, the recorder, devices, meta) is built into a library of its own, libmemledger_torch.so,
// which core loads the first time a model is opened or run (torchLibrary()). Snapshots, reports, diffs and ranks
// never load it: the command line starts in milliseconds for them, without libtorch's (and CUDA's) libraries.
//
// Both sides include this header; it names no libtorch type. The library exports one C function,
// memledger_torch_entry_points(), that returns the table below; core's Model and availableDevices() call through it.
#include "recording/model.h"

#include <string>
#include <vector>

namespace memledger {

// Changes whenever TorchEntryPoints changes: a library from another build is refused rather than called.
inline constexpr int kTorchEntryPointsVersion = 1;

struct TorchEntryPoints {
    int version = kTorchEntryPointsVersion;
    // Model (model.h); each throws what the Model member of the same name says.
    Model::Impl* (*open)(const std::string& path) = nullptr;
    Model::Impl* (*openBytes)(const std::string& bytes, const std::string& name) = nullptr;
    void (*destroy)(Model::Impl* d) = nullptr;
    const ModelInfo& (*info)(const Model::Impl& d) = nullptr;
    bool (*metaWeights)(const Model::Impl& d) = nullptr;
    const std::vector<LayerStats>& (*modules)(const Model::Impl& d) = nullptr;
    std::vector<Shape> (*guessInputs)(Model::Impl& d, std::string* how, std::vector<InputType>* types) = nullptr;
    RawRun (*run)(Model::Impl& d, const RunOptions& options) = nullptr;
    // The CUDA GPUs this libtorch sees (none without CUDA or a GPU).
    std::vector<DeviceInfo> (*cudaDevices)() = nullptr;
};

// The library's table, loaded on the first call (thread-safe). Throws RunError naming the library and why it
// cannot be loaded; a later call tries again.
const TorchEntryPoints& torchLibrary();
// Whether the library is loaded (nothing is loaded to answer).
bool torchLibraryLoaded();

} // namespace memledger

extern "C" const memledger::TorchEntryPoints* memledger_torch_entry_points();
