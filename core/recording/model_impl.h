#pragma once
// Private to memledger's libtorch part (libmemledger_torch.so): the libtorch side of Model. Core reaches these
// through recording/torch_library.h.
#include "recording/exported_program.h"
#include "recording/model.h"

#include <torch/optim/optimizer.h>
#include <torch/script.h>

#include <mutex>

namespace memledger {

struct Model::Impl {
    torch::jit::Module module; // a TorchScript model (torch.jit.save)
    std::unique_ptr<ExportedProgram> program; // or a torch.export program (.pt2); then `module` is unused
    ModelInfo info;
    std::vector<LayerStats> modules;
    std::string current_dtype; // dtype the weights are converted to now; "" = as loaded
    std::string current_device = "cpu"; // where the weights are now
    mutable std::mutex run_mutex; // one run at a time: a run converts the weights and records thread-locally

    // What both kinds of model do alike.
    using Named = std::vector<std::pair<std::string, at::Tensor>>;
    Named namedParameters(); // each tensor once (a tied weight under its first name)
    Named namedBuffers();
    struct Signature {
        std::vector<std::string> names; // forward's inputs, `self` left out
        std::size_t required = 0; // those without a default value
    };
    Signature signature();
    // Runs forward; `onNode` (an exported program) is told each node's module path before it runs.
    c10::IValue forward(const std::vector<c10::IValue>& inputs, const std::function<void(const std::string&)>& onNode = {});
    void setTraining(bool train);
    void convertFloating(c10::ScalarType scalar); // floating-point weights only, as nn.Module.to(dtype)
    void moveTo(c10::Device device);
};

// What Model's members do, for torch_entry_points.cpp: the model file read (throws FileError), its input guessed
// (under run_mutex), a recorded run (throws RunError, Cancelled).
Model::Impl* openModel(const std::string& path);
Model::Impl* openModelBytes(const std::string& bytes, const std::string& name);
std::vector<Shape> guessModelInputs(Model::Impl& d, std::string* how, std::vector<InputType>* types);
RawRun runModel(Model::Impl& d, const RunOptions& options);
// Model::guessInputs for a caller that holds run_mutex already.
std::vector<Shape> guessInputsLocked(Model::Impl& d, std::string* how, std::vector<InputType>* types = nullptr);
// A training step's pieces (training_step.cpp).
bool isSupportedOptimizer(const std::string& name);
bool isSupportedLoss(const std::string& name);
bool isSupportedHoldOutput(const std::string& name); // step | backward | none (RunOptions::hold_output)
// What a training loop that holds `logits, loss` past the step keeps of it (--hold-output step), and the blocks
// those tensors hold: one per storage, as the allocator reported it (a CUDA block rounded up to 512 bytes).
// The CPU allocator reports no free of a block allocated while no one recorded (the warm-up's): `freed` tells,
// once the loop has let go of a tensor, whether its storage died with it.
struct HeldOutput {
    c10::IValue output;
    at::Tensor loss;
    struct Block {
        std::uint64_t address = 0;
        std::int64_t bytes = 0;
        c10::weak_intrusive_ptr<c10::StorageImpl> storage;
        bool freed() const { return storage.expired(); }
    };
    std::vector<Block> blocks() const;
    std::int64_t bytes() const;
};
std::vector<at::Tensor> trainableParameters(Model::Impl& model);
// The optimizer of a training step: SGD (momentum 0.9), Adam or AdamW with PyTorch's defaults, stepping as
// PyTorch's per-parameter CPU loop does.
class TrainOptimizer {
public:
    virtual ~TrainOptimizer() = default;
    virtual void step() = 0;
    virtual std::int64_t stateBytes() const = 0; // momentum buffers, exp_avg and exp_avg_sq
};
std::unique_ptr<TrainOptimizer> makeOptimizer(const std::string& name, const std::vector<at::Tensor>& params);
void setGradientsToNone(const std::vector<at::Tensor>& params); // PyTorch 2's zero_grad()
at::Tensor firstTensor(const c10::IValue& v);
struct LossChoice {
    std::string name; // "sum" | "cross_entropy" | "next_token"
    std::vector<std::int64_t> target_shape;
};
// `tokenInputs`: the model takes integer inputs (token ids). Throws RunError.
LossChoice chooseLoss(const c10::IValue& output, const std::string& requested, bool tokenInputs);
at::Tensor makeTargets(const LossChoice& loss); // class-0 targets for cross-entropy; undefined for sum
at::Tensor lossOf(const c10::IValue& output, const LossChoice& loss, const at::Tensor& targets);

c10::ScalarType scalarTypeFor(const std::string& dtype);
std::string dtypeName(c10::ScalarType t);
// dtypeName's inverse: nullopt for a name it does not give.
std::optional<c10::ScalarType> scalarTypeNamed(const std::string& name);

} // namespace memledger
