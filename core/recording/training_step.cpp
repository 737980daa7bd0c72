// The pieces of a training step that are not recording: the optimizer, the loss and its targets, the state
// the optimizer keeps, gradients set to None. Private to core/recording (libtorch).
#include "recording/autocast_emulation.h"
#include "recording/model_impl.h"

#include "support/errors.h"

#include <algorithm>

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>
#include <torch/nn/functional/loss.h>

namespace memledger {

bool isSupportedOptimizer(const std::string& name)
{
    return name == "sgd" || name == "adam" || name == "adamw" || name == "none";
}

bool isSupportedLoss(const std::string& name)
{
    return name == "auto" || name == "sum" || name == "cross_entropy" || name == "next_token";
}

bool isSupportedHoldOutput(const std::string& name)
{
    return name == "step" || name == "backward" || name == "none";
}

namespace {

void collectTensors(const c10::IValue& v, std::vector<at::Tensor>& out)
{
    if (v.isTensor())
        out.push_back(v.toTensor());
    else if (v.isTuple())
        for (const auto& e : v.toTupleRef().elements())
            collectTensors(e, out);
    else if (v.isList())
        for (const auto& e : v.toListRef())
            collectTensors(e, out);
    else if (v.isGenericDict())
        for (const auto& e : v.toGenericDict())
            collectTensors(e.value(), out);
}

} // namespace

std::vector<HeldOutput::Block> HeldOutput::blocks() const
{
    std::vector<at::Tensor> tensors;
    collectTensors(output, tensors);
    if (loss.defined())
        tensors.push_back(loss);
    std::vector<Block> out;
    for (const auto& t : tensors) {
        if (!t.defined() || !t.has_storage())
            continue;
        const auto& storage = t.storage();
        auto address = reinterpret_cast<std::uint64_t>(storage.data_ptr().get());
        auto bytes = static_cast<std::int64_t>(storage.nbytes());
        if (address == 0 || bytes <= 0)
            continue;
        if (t.is_cuda()) // the caching allocator's blocks are multiples of 512 bytes
            bytes = (bytes + 511) / 512 * 512;
        if (std::none_of(out.begin(), out.end(), [&](const Block& b) { return b.address == address; }))
            out.push_back({address, bytes, storage.getWeakStorageImpl()});
    }
    return out;
}

std::int64_t HeldOutput::bytes() const
{
    std::int64_t sum = 0;
    for (const auto& b : blocks())
        sum += b.bytes;
    return sum;
}

std::vector<at::Tensor> trainableParameters(Model::Impl& model)
{
    std::vector<at::Tensor> out;
    for (const auto& [name, p] : model.namedParameters())
        if (p.is_floating_point() && p.requires_grad())
            out.push_back(p);
    return out;
}

namespace {

std::int64_t bytesOf(const at::Tensor& t)
{
    return t.defined() ? static_cast<std::int64_t>(t.numel() * t.element_size()) : 0;
}

// SGD with momentum 0.9, libtorch's: the same per-parameter loop as PyTorch's _single_tensor_sgd.
class SgdStep final : public TrainOptimizer {
public:
    explicit SgdStep(const std::vector<at::Tensor>& params)
        : sgd_(params, torch::optim::SGDOptions(0.01).momentum(0.9))
    {
    }
    void step() override { sgd_.step(); }
    std::int64_t stateBytes() const override
    {
        std::int64_t bytes = 0;
        for (const auto& [key, state] : sgd_.state())
            if (auto* s = dynamic_cast<const torch::optim::SGDParamState*>(state.get()))
                bytes += bytesOf(s->momentum_buffer());
        return bytes;
    }

private:
    torch::optim::SGD sgd_;
};

// Adam and AdamW as PyTorch's _single_tensor_adam runs them on the CPU (its default there), in its order and
// with its lifetimes: `denom` of one parameter stays alive, as the Python variable does, until the next
// parameter's is made. libtorch's C++ Adam frees it at once, which gives another optimizer peak.
class AdamStep final : public TrainOptimizer {
public:
    AdamStep(const std::vector<at::Tensor>& params, bool decoupled)
        : params_(params)
        , decoupled_(decoupled)
        , weight_decay_(decoupled ? 1e-2 : 0.0)
    {
    }
    void step() override
    {
        torch::NoGradGuard noGrad;
        at::Tensor denom; // lives from one parameter to the next, as in Python
        for (std::size_t i = 0; i < params_.size(); ++i) {
            auto& p = params_[i];
            auto grad = p.grad();
            if (!grad.defined())
                continue;
            if (state_.size() < params_.size())
                state_.resize(params_.size());
            auto& s = state_[i];
            if (!s.exp_avg.defined()) { // PyTorch's lazy state: made on a parameter's first step
                s.exp_avg = torch::zeros_like(p, at::MemoryFormat::Preserve);
                s.exp_avg_sq = torch::zeros_like(p, at::MemoryFormat::Preserve);
            }
            ++s.step;
            if (weight_decay_ != 0.0) {
                if (decoupled_)
                    p.mul_(1 - lr_ * weight_decay_);
                else
                    grad = grad.add(p, weight_decay_);
            }
            s.exp_avg.lerp_(grad, 1 - beta1_);
            s.exp_avg_sq.mul_(beta2_).addcmul_(grad, grad, 1 - beta2_);
            const double step = static_cast<double>(s.step);
            const double correction1 = 1 - std::pow(beta1_, step);
            const double correction2Sqrt = std::sqrt(1 - std::pow(beta2_, step));
            denom = (s.exp_avg_sq.sqrt() / correction2Sqrt).add_(eps_);
            p.addcdiv_(s.exp_avg, denom, -lr_ / correction1);
        }
    }
    std::int64_t stateBytes() const override
    {
        std::int64_t bytes = 0;
        for (const auto& s : state_)
            bytes += bytesOf(s.exp_avg) + bytesOf(s.exp_avg_sq);
        return bytes;
    }

private:
    struct State {
        at::Tensor exp_avg, exp_avg_sq;
        std::int64_t step = 0;
    };
    std::vector<at::Tensor> params_;
    std::vector<State> state_;
    bool decoupled_;
    double lr_ = 1e-3, beta1_ = 0.9, beta2_ = 0.999, eps_ = 1e-8, weight_decay_;
};

} // namespace

std::unique_ptr<TrainOptimizer> makeOptimizer(const std::string& name, const std::vector<at::Tensor>& params)
{
    // PyTorch's defaults, and SGD with momentum 0.9 as the MNIST ConvNet demo's example trains.
    if (name == "sgd")
        return std::make_unique<SgdStep>(params);
    if (name == "adam")
        return std::make_unique<AdamStep>(params, false);
    if (name == "adamw")
        return std::make_unique<AdamStep>(params, true);
    return nullptr; // "none": forward, loss and backward only
}

void setGradientsToNone(const std::vector<at::Tensor>& params)
{
    for (auto p : params)
        p.mutable_grad().reset();
}

at::Tensor firstTensor(const c10::IValue& v)
{
    if (v.isTensor())
        return v.toTensor();
    if (v.isTuple())
        for (const auto& e : v.toTupleRef().elements())
            if (auto t = firstTensor(e); t.defined())
                return t;
    if (v.isList())
        for (const auto& e : v.toListRef())
            if (auto t = firstTensor(e); t.defined())
                return t;
    if (v.isGenericDict())
        for (const auto& e : v.toGenericDict())
            if (auto t = firstTensor(e.value()); t.defined())
                return t;
    return {};
}

LossChoice chooseLoss(const c10::IValue& output, const std::string& requested, bool tokenInputs)
{
    auto out = firstTensor(output);
    if (!out.defined())
        throw RunError("the model's output holds no tensor to take a loss of");
    if (!out.is_floating_point())
        throw RunError("the model's output is " + std::string(c10::toString(out.scalar_type()))
            + ", not floating point: there is no loss to take a gradient of");
    LossChoice c;
    c.name = requested;
    if (requested == "auto") // a language model's [batch, seq, vocab] trains on the next token
        c.name = out.dim() == 2 ? "cross_entropy" : out.dim() == 3 && tokenInputs ? "next_token" : "sum";
    if (c.name == "next_token") {
        if (out.dim() != 3)
            throw RunError("--loss next_token needs an output of [batch, seq, vocab], not " + std::to_string(out.dim()) + "-D");
        c.target_shape = {out.size(0) * out.size(1)};
    }
    if (c.name == "cross_entropy") {
        if (out.dim() != 2)
            throw RunError("--loss cross_entropy needs an output of [batch, classes], not "
                + std::to_string(out.dim()) + "-D");
        c.target_shape = {out.size(0)};
    }
    return c;
}

at::Tensor makeTargets(const LossChoice& loss)
{
    if (loss.name != "cross_entropy" && loss.name != "next_token")
        return {};
    return torch::zeros(loss.target_shape, torch::TensorOptions().dtype(torch::kLong)); // every sample class 0
}

namespace {

// F.cross_entropy(logits [N, C], targets [N]). On the meta device under --autocast the emulation sees what CUDA
// autocast sees of this composite: log_softmax in the logits' own dtype (cross_entropy_loss passes it), then nll_loss,
// on autocast's float32 list, with its input cast to float32.
at::Tensor crossEntropy(const at::Tensor& logits, const at::Tensor& targets)
{
    if (!autocastEmulationActive())
        return torch::nn::functional::cross_entropy(logits, targets);
    auto logp = callUnderAutocast("aten::log_softmax", "int", {logits, std::int64_t {1}, logits.scalar_type()});
    auto loss = callUnderAutocast("aten::nll_loss", "",
        {logp.front(), targets, c10::IValue(), std::int64_t {at::Reduction::Mean}, std::int64_t {-100}});
    return loss.front().toTensor();
}

} // namespace

at::Tensor lossOf(const c10::IValue& output, const LossChoice& loss, const at::Tensor& targets)
{
    auto out = firstTensor(output);
    if (loss.name == "cross_entropy")
        return crossEntropy(out, targets);
    if (loss.name == "next_token") // F.cross_entropy(out.flatten(0, 1), targets), as language models train
        return crossEntropy(out.flatten(0, 1), targets);
    return out.sum();
}

} // namespace memledger
