// The pieces of a training step that are not recording: the optimizer, the loss and its targets, the state
// the optimizer keeps, gradients set to None. Private to core/recording (libtorch).
#include "recording/model_impl.h"

#include "support/errors.h"

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
    return name == "auto" || name == "sum" || name == "cross_entropy";
}

std::vector<at::Tensor> trainableParameters(torch::jit::Module& module)
{
    std::vector<at::Tensor> out;
    for (const auto& p : module.parameters(true))
        if (p.is_floating_point() && p.requires_grad())
            out.push_back(p);
    return out;
}

std::unique_ptr<torch::optim::Optimizer> makeOptimizer(const std::string& name, const std::vector<at::Tensor>& params)
{
    // PyTorch's defaults, and SGD with momentum 0.9 as seed 003 trains.
    if (name == "sgd")
        return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.01).momentum(0.9));
    if (name == "adam")
        return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(1e-3));
    if (name == "adamw")
        return std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(1e-3));
    return nullptr; // "none": forward, loss and backward only
}

std::int64_t optimizerStateBytes(const torch::optim::Optimizer* optimizer)
{
    if (!optimizer)
        return 0;
    std::int64_t bytes = 0;
    auto add = [&bytes](const at::Tensor& t) {
        if (t.defined())
            bytes += static_cast<std::int64_t>(t.numel() * t.element_size());
    };
    for (const auto& [key, state] : optimizer->state()) {
        if (auto* s = dynamic_cast<const torch::optim::SGDParamState*>(state.get()))
            add(s->momentum_buffer());
        else if (auto* a = dynamic_cast<const torch::optim::AdamParamState*>(state.get())) {
            add(a->exp_avg());
            add(a->exp_avg_sq());
            add(a->max_exp_avg_sq());
        } else if (auto* w = dynamic_cast<const torch::optim::AdamWParamState*>(state.get())) {
            add(w->exp_avg());
            add(w->exp_avg_sq());
            add(w->max_exp_avg_sq());
        }
    }
    return bytes;
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

LossChoice chooseLoss(const c10::IValue& output, const std::string& requested)
{
    auto out = firstTensor(output);
    if (!out.defined())
        throw RunError("the model's output holds no tensor to take a loss of");
    if (!out.is_floating_point())
        throw RunError("the model's output is " + std::string(c10::toString(out.scalar_type()))
            + ", not floating point: there is no loss to take a gradient of");
    LossChoice c;
    c.name = requested;
    if (requested == "auto")
        c.name = out.dim() == 2 ? "cross_entropy" : "sum";
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
    if (loss.name != "cross_entropy")
        return {};
    return torch::zeros(loss.target_shape, torch::TensorOptions().dtype(torch::kLong)); // every sample class 0
}

at::Tensor lossOf(const c10::IValue& output, const LossChoice& loss, const at::Tensor& targets)
{
    auto out = firstTensor(output);
    if (loss.name == "cross_entropy")
        return torch::nn::functional::cross_entropy(out, targets);
    return out.sum();
}

} // namespace memledger
