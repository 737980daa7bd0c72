#pragma once
// Private to core: the libtorch side of Model. Included by model_loader.cpp and run_recorder.cpp only.
#include "recording/model.h"

#include <torch/script.h>

#include <mutex>

namespace memledger {

struct Model::Impl {
    torch::jit::Module module;
    ModelInfo info;
    std::vector<LayerStats> modules;
    std::string current_dtype; // dtype the weights are converted to now; "" = as loaded
    mutable std::mutex run_mutex; // one run at a time: a run converts the weights and records thread-locally
};

// Model::guessInputs for a caller that holds run_mutex already.
std::vector<Shape> guessInputsLocked(Model::Impl& d, std::string* how);
c10::ScalarType scalarTypeFor(const std::string& dtype);
std::string dtypeName(c10::ScalarType t);

} // namespace memledger
