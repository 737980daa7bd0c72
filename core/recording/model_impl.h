#pragma once
// Private to core: the libtorch side of Model. Included by model_loader.cpp and run_recorder.cpp only.
#include "recording/model.h"

#include <torch/optim/optimizer.h>
#include <torch/script.h>

#include <mutex>

namespace memledger {

struct Model::Impl {
    torch::jit::Module module;
    ModelInfo info;
    std::vector<LayerStats> modules;
    std::string current_dtype; // dtype the weights are converted to now; "" = as loaded
    std::string current_device = "cpu"; // where the weights are now
    mutable std::mutex run_mutex; // one run at a time: a run converts the weights and records thread-locally
};

// Model::guessInputs for a caller that holds run_mutex already.
std::vector<Shape> guessInputsLocked(Model::Impl& d, std::string* how);
// A training step's pieces (training_step.cpp).
bool isSupportedOptimizer(const std::string& name);
bool isSupportedLoss(const std::string& name);
std::vector<at::Tensor> trainableParameters(torch::jit::Module& module);
std::unique_ptr<torch::optim::Optimizer> makeOptimizer(const std::string& name, const std::vector<at::Tensor>& params);
std::int64_t optimizerStateBytes(const torch::optim::Optimizer* optimizer); // its state tensors
void setGradientsToNone(const std::vector<at::Tensor>& params); // PyTorch 2's zero_grad()
at::Tensor firstTensor(const c10::IValue& v);
struct LossChoice {
    std::string name; // "sum" | "cross_entropy"
    std::vector<std::int64_t> target_shape;
};
LossChoice chooseLoss(const c10::IValue& output, const std::string& requested); // throws RunError
at::Tensor makeTargets(const LossChoice& loss); // class-0 targets for cross-entropy; undefined for sum
at::Tensor lossOf(const c10::IValue& output, const LossChoice& loss, const at::Tensor& targets);

c10::ScalarType scalarTypeFor(const std::string& dtype);
std::string dtypeName(c10::ScalarType t);

} // namespace memledger
