// memledger's kernels for the meta device: the aten ops that PyTorch's C++ runs only on real devices (their meta
// versions live in Python, torch/_meta_registrations.py). Each allocates exactly the tensors its CPU kernel
// returns: the same sizes and dtypes, and the same saved statistics (layer norm's mean and rstd, flash
// attention's logsumexp), so that a meta run's ledgers equal a CPU run's but for the temporaries a CPU kernel
// makes inside itself. Where a composite op picks a CPU-only path (scaled_dot_product_attention), the meta run
// takes the path the CPU would.
#include "recording/meta_device.h"
#include "recording/torch_compat.h"

namespace memledger {
namespace {
thread_local bool tlsGpuAttention = false; // GpuAttentionOnMeta
} // namespace

GpuAttentionOnMeta::GpuAttentionOnMeta()
    : before_(tlsGpuAttention)
{
    tlsGpuAttention = true;
}

GpuAttentionOnMeta::~GpuAttentionOnMeta()
{
    tlsGpuAttention = before_;
}

} // namespace memledger

#if MEMLEDGER_META_RUNS // decided in core/CMakeLists.txt

#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/OpMathType.h>
#include <ATen/SDPBackend.h>
#include <ATen/core/grad_mode.h>
#include <ATen/native/ConvUtils.h>
#include <ATen/record_function.h>
#include <ATen/ops/_fused_sdp_choice_native.h>
#include <c10/core/SymIntArrayRef.h>
#include <torch/csrc/autograd/graph_task.h>
#include <torch/library.h>

#include <array>
#include <limits>
#include <optional>
#include <tuple>

namespace memledger {

namespace {

using at::Tensor;
using OptionalTensor = std::optional<Tensor>;

// A CPU kernel's `input.expect_contiguous()`: a copy only when the input is not contiguous already.
Tensor contiguousAsTheCpuReadsIt(const Tensor& t)
{
    return t.is_contiguous() ? t : t.contiguous();
}

bool defined(const OptionalTensor& t)
{
    return t.has_value() && t->defined();
}

// The dtype of a normalisation's statistics: the input's, or its math type where the weights are of another
// (bfloat16 activations with float32 weights: float32), as at::native::param_scalar_type chooses.
c10::ScalarType statisticsType(const Tensor& input, const OptionalTensor& weight, const OptionalTensor& bias)
{
    auto parameter = defined(weight) ? weight->scalar_type() : defined(bias) ? bias->scalar_type() : input.scalar_type();
    return parameter != input.scalar_type() ? at::toOpMathType(input.scalar_type()) : input.scalar_type();
}

// relu: clamp_min's output, shaped as the input.
Tensor relu(const Tensor& self)
{
    return at::empty_like(self);
}

// hardswish's and hardsigmoid's backward (MobileNetV3): the input's gradient, as the CPU's elementwise kernel
// makes it.
Tensor hardBackward(const Tensor& gradOutput, const Tensor& self)
{
    return at::empty_like(gradOutput);
}

// hardtanh's backward (ReLU6: MobileNetV2): the input's gradient, as hardswish's.
Tensor hardtanhBackward(const Tensor& gradOutput, const Tensor& self, const at::Scalar& minValue, const at::Scalar& maxValue)
{
    return at::empty_like(gradOutput);
}

// roll (Swin's shifted windows) as the CPU's roll_cpu and roll_common make it: several dims rolled one after another
// (each roll a tensor of its own), no dims rolls the flattened tensor, one dim a contiguous copy of the input.
Tensor roll(const Tensor& self, at::IntArrayRef shifts, at::IntArrayRef dims)
{
    if (dims.empty() && shifts.size() == 1)
        return at::roll(self.flatten(), shifts[0], 0).view(self.sizes());
    if (shifts.size() > 1 && dims.size() == shifts.size()) {
        auto first = at::roll(self, shifts[0], dims[0]);
        return at::roll(first, shifts.slice(1), dims.slice(1));
    }
    const auto in = self.is_contiguous() ? self : self.contiguous();
    return at::empty_like(in, at::MemoryFormat::Contiguous);
}

Tensor logicalNot(const Tensor& self)
{
    return at::empty_like(self, self.options().dtype(at::kBool));
}

// floor_divide (transformers' mixture of experts: `perm // num_top_k`, the token of each sorted expert slot): the
// broadcast of its arguments in their promoted type. PyTorch's own meta function is Python's (torch._refs).
Tensor floorDivide(const Tensor& self, const Tensor& other)
{
    return at::empty(at::infer_size(self.sizes(), other.sizes()), self.options().dtype(at::result_type(self, other)));
}

Tensor floorDivideScalar(const Tensor& self, const at::Scalar& other)
{
    return at::empty_like(self, self.options().dtype(at::result_type(self, other)));
}

// histc (the tokens per expert, counted over the sorted expert ids): `bins` counts of the input's type.
Tensor histogramCounts(const Tensor& self, int64_t bins, const at::Scalar&, const at::Scalar&)
{
    return at::empty({bins}, self.options());
}

// _grouped_mm (a mixture of experts' matmul of the tokens sorted by expert, offs their cumulative counts), whose
// C++ function reads the offsets on the CPU: the output as PyTorch's meta function shapes it (2-D x 3-D [M, N]; 2-D x
// 2-D, a backward's weight gradient, [groups, M, N]; 3-D x 2-D [M, N]; 3-D x 3-D batched), contiguous as the CPU's.
Tensor groupedMatmul(const Tensor& self, const Tensor& mat2, const OptionalTensor& offs, const OptionalTensor&,
    std::optional<c10::ScalarType> outDtype)
{
    std::vector<int64_t> size;
    if (self.dim() == 2 && mat2.dim() == 2)
        size = {defined(offs) ? offs->size(0) : 1, self.size(0), mat2.size(1)};
    else if (self.dim() == 2)
        size = {self.size(0), mat2.size(-1)};
    else if (mat2.dim() == 2)
        size = {self.size(1), mat2.size(1)};
    else
        size = {self.size(0), self.size(1), mat2.size(-1)};
    return at::empty(size, self.options().dtype(outDtype.value_or(self.scalar_type())));
}

// abs (T5's relative positions): shaped as the input, a complex one's magnitudes real.
Tensor absolute(const Tensor& self)
{
    return at::empty_like(self, self.options().dtype(c10::toRealValueType(self.scalar_type())));
}

// How many autograd nodes this thread is inside (their BACKWARD_FUNCTION records), so that an add of the backward
// outside every node is known for autograd's engine summing a gradient that arrived twice.
thread_local int nodesEntered = 0;

std::unique_ptr<at::ObserverContext> enterNode(const at::RecordFunction&)
{
    ++nodesEntered;
    return nullptr;
}

void leaveNode(const at::RecordFunction&, at::ObserverContext*)
{
    --nodesEntered;
}

// add on meta. Autograd's engine sums a gradient that arrives twice (a residual connection) in place when it
// holds the last reference to the first (torch/csrc/autograd/input_buffer.cpp, accumulate), but never a meta
// one: can_accumulate_inplace refuses a tensor-subclass-like tensor, and meta tensors count as such. So where the
// engine, between nodes of a backward without grad mode, adds into a tensor the CPU's engine would have summed
// into (dense, its last reference, its storage's too, the sum of its own size and type), the sum is that tensor,
// as on the CPU; any other add allocates what PyTorch's own meta add does.
Tensor add(const Tensor& self, const Tensor& other, const at::Scalar& alpha)
{
    const bool engineSum = !at::GradMode::is_enabled() && nodesEntered == 0
        && torch::autograd::get_current_graph_task_id() != -1;
    if (engineSum && self.is_non_overlapping_and_dense() && self.use_count() == 1 && self.has_storage()
        && self.storage().use_count() == 1 && self.sizes().equals(other.sizes())
        && self.scalar_type() == other.scalar_type())
        return self;
    // PyTorch's meta add.out gives an empty tensor the sum's sizes and strides, but a meta resize allocates
    // nothing; the sum is then allocated as those.
    auto shape = at::empty({0}, self.options().dtype(at::result_type(self, other)));
    at::add_out(shape, self, other, alpha);
    return at::empty_strided(shape.sizes(), shape.strides(), shape.options());
}

// index_select (embedding's lookup): the input with `dim` as long as the index.
Tensor indexSelect(const Tensor& self, int64_t dim, const Tensor& index)
{
    auto sizes = self.sizes().vec();
    if (!sizes.empty())
        sizes[static_cast<std::size_t>(c10::maybe_wrap_dim(dim, self.dim()))] = index.numel();
    return at::empty(sizes, self.options());
}

// The embedding's gradient: a zeroed [num_weights, dim] that the rows are added into.
Tensor embeddingDenseBackward(
    const Tensor& grad, const Tensor& indices, c10::SymInt numWeights, c10::SymInt paddingIdx, bool scaleGradByFreq)
{
    contiguousAsTheCpuReadsIt(grad); // the CPU reads a non-contiguous gradient through a copy
    return at::zeros({numWeights.expect_int(), grad.size(-1)}, grad.options());
}

// where(condition, self, other): the three broadcast, in their common type (each converted first, as the CPU does).
Tensor where(const Tensor& condition, const Tensor& self, const Tensor& other)
{
    auto type = at::result_type(self, other);
    auto a = self.scalar_type() == type ? self : self.to(type);
    auto b = other.scalar_type() == type ? other : other.to(type);
    auto shape = at::infer_size_dimvector(at::infer_size_dimvector(condition.sizes(), a.sizes()), b.sizes());
    return at::empty(shape, a.options());
}

// where.self_out: into `out`, which the math attention's _safe_softmax passes as both the result and its source
// (`where_out(out, masked_rows, zero, out)`: the CPU writes in place). An `out` of another shape takes storage of
// the result's, as the CPU's resize would allocate it (a meta resize allocates nothing).
Tensor& whereOut(const Tensor& condition, const Tensor& self, const Tensor& other, Tensor& out)
{
    auto shape = at::infer_size_dimvector(at::infer_size_dimvector(condition.sizes(), self.sizes()), other.sizes());
    if (!out.sizes().equals(shape))
        out.set_(at::empty(shape, out.options()));
    return out;
}

// native_layer_norm: the output (contiguous) and the statistics of every normalised row, [M] viewed as the
// input's leading sizes followed by ones.
std::tuple<Tensor, Tensor, Tensor> nativeLayerNorm(const Tensor& input, c10::SymIntArrayRef normalizedShape,
    const OptionalTensor& weight, const OptionalTensor& bias, double eps)
{
    auto x = contiguousAsTheCpuReadsIt(input);
    const auto axis = input.dim() - static_cast<int64_t>(normalizedShape.size());
    int64_t rows = 1;
    std::vector<int64_t> statShape;
    for (int64_t i = 0; i < input.dim(); ++i) {
        if (i < axis)
            rows *= input.size(i);
        statShape.push_back(i < axis ? input.size(i) : 1);
    }
    auto out = at::empty_like(x, at::MemoryFormat::Contiguous);
    auto statistics = x.options().dtype(statisticsType(input, weight, bias));
    auto mean = at::empty({rows}, statistics).view(statShape);
    auto rstd = at::empty({rows}, statistics).view(statShape);
    return {out, mean, rstd};
}

std::tuple<Tensor, Tensor, Tensor> nativeLayerNormBackward(const Tensor& gradOut, const Tensor& input,
    c10::SymIntArrayRef normalizedShape, const Tensor& mean, const Tensor& rstd, const OptionalTensor& weight,
    const OptionalTensor& bias, std::array<bool, 3> mask)
{
    auto x = contiguousAsTheCpuReadsIt(input);
    Tensor dx, dweight, dbias;
    if (mask[0])
        dx = at::empty_like(x, at::MemoryFormat::Contiguous);
    if (mask[1] && defined(weight))
        dweight = at::empty_like(*weight, at::MemoryFormat::Contiguous);
    if (mask[2] && defined(bias))
        dbias = at::empty_like(*bias, at::MemoryFormat::Contiguous);
    return {dx, dweight, dbias};
}

// The CPU's flash attention: the output shaped as the query, and the logsumexp of each query row in the math
// type, [batch, heads, length] as a transposed [batch, length, heads].
std::tuple<Tensor, Tensor> flashAttentionForCpu(const Tensor& query, const Tensor& key, const Tensor& value,
    double dropoutP, bool isCausal, const OptionalTensor& attnMask, std::optional<double> scale)
{
    auto out = at::empty_like(query);
    auto logsumexp = at::empty({query.size(0), query.size(2), query.size(1)},
        query.options().dtype(at::toOpMathType(query.scalar_type())))
                         .transpose(1, 2);
    return {out, logsumexp};
}

// Its backward: the three gradients, zeroed, [batch, length, heads, dim] transposed as the inputs.
std::tuple<Tensor, Tensor, Tensor> flashAttentionForCpuBackward(const Tensor& gradOut, const Tensor& query,
    const Tensor& key, const Tensor& value, const Tensor& out, const Tensor& logsumexp, double dropoutP,
    bool isCausal, const OptionalTensor& attnMask, std::optional<double> scale)
{
    if (!gradOut.defined())
        return {};
    auto gradientOf = [](const Tensor& t) {
        return at::zeros({t.size(0), t.size(2), t.size(1), t.size(3)}, t.options()).transpose(1, 2);
    };
    return {gradientOf(query), gradientOf(key), gradientOf(value)};
}

// The mask as the CPU's backend choice sees it. The choice asks a mask's last dimension to have stride 1, but on
// the CPU it does not look (sdp_utils check_last_dim_stride_equals_1_dense, `is_cpu`): Hugging Face's expanded
// masks, stride 0 there, take the CPU's flash attention. On meta the same mask is seen with stride 1 (a view of its
// storage, nothing allocated), so that the choice is the CPU's.
OptionalTensor asTheCpuChecksIt(const OptionalTensor& mask)
{
    if (!defined(mask) || mask->dim() == 0 || mask->stride(-1) == 1)
        return mask;
    auto strides = mask->strides().vec();
    strides.back() = 1;
    return mask->as_strided(mask->sizes(), strides, mask->storage_offset());
}

// scaled_dot_product_attention on meta tensors, as on the CPU: the backend the CPU would choose for these shapes
// (its flash attention, else the math path), a boolean mask turned into an additive one first. The math path adds
// the mask into the scores in place on the CPU but into a new tensor on meta (a meta tensor counts as a tensor
// subclass there): one temporary of the scores' size the CPU does not make. Registered for
// autograd on meta, in place of the composite (which would take the math path on any device but the CPU's).
Tensor scaledDotProductAttention(const Tensor& query, const Tensor& key, const Tensor& value,
    const OptionalTensor& attnMask, double dropoutP, bool isCausal, std::optional<double> scale, bool enableGqa)
{
    if (tlsGpuAttention && dropoutP == 0.0 && query.dim() == 4) {
        // a GPU's fused attention: the output (the query's rows, the value's head size) and the log-sum-exp
        auto out = at::empty({query.size(0), query.size(1), query.size(2), value.size(-1)}, query.options());
        auto logsumexp = at::empty({query.size(0), query.size(1), query.size(2)}, query.options().dtype(at::kFloat));
        return out;
    }
    auto choice = static_cast<at::SDPBackend>(at::native::_fused_sdp_choice_cpp(
        query, key, value, asTheCpuChecksIt(attnMask), dropoutP, isCausal, scale, enableGqa));
    OptionalTensor mask = attnMask;
    if (defined(mask) && mask->scalar_type() == at::kBool) // as attention.cpp's convert_boolean_attn_mask
        mask = at::where(*mask, 0.0,
            at::scalar_tensor(-std::numeric_limits<double>::infinity(), mask->options().dtype(query.scalar_type())));
    if (choice == at::SDPBackend::flash_attention)
        return std::get<0>(
            at::_scaled_dot_product_flash_attention_for_cpu(query, key, value, dropoutP, isCausal, mask, scale));
    return std::get<0>(at::_scaled_dot_product_attention_math(
        query, key, value, mask, dropoutP, isCausal, std::nullopt, scale, enableGqa));
}


// convolution: the output the CPU's backends allocate, [batch, out channels, spatial sizes] (transposed: the
// sizes the input would have had); bias and scratch are the backend's own.
Tensor convolution(const Tensor& input, const Tensor& weight, const OptionalTensor& bias, c10::SymIntArrayRef stride,
    c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed, c10::SymIntArrayRef outputPadding,
    c10::SymInt groups)
{
    auto ints = [](c10::SymIntArrayRef a) { return c10::asIntArrayRefUnchecked(a).vec(); };
    std::vector<int64_t> sizes = transposed
        ? at::native::conv_input_size(input.sizes(), weight.sizes(), ints(padding), ints(outputPadding), ints(stride),
              ints(dilation), groups.expect_int())
        : at::native::conv_output_size(input.sizes(), weight.sizes(), ints(padding), ints(stride), ints(dilation));
    return at::empty(sizes, input.options().memory_format(input.suggest_memory_format()));
}

std::tuple<Tensor, Tensor, Tensor> convolutionBackward(const Tensor& gradOutput, const Tensor& input,
    const Tensor& weight, at::OptionalSymIntArrayRef biasSizes, c10::SymIntArrayRef stride, c10::SymIntArrayRef padding,
    c10::SymIntArrayRef dilation, bool transposed, c10::SymIntArrayRef outputPadding, c10::SymInt groups,
    std::array<bool, 3> mask)
{
    Tensor dinput, dweight, dbias;
    if (mask[0])
        dinput = at::empty_like(input, input.suggest_memory_format());
    if (mask[1])
        dweight = at::empty_like(weight, weight.suggest_memory_format());
    if (mask[2])
        dbias = at::empty({gradOutput.size(1)}, gradOutput.options());
    return {dinput, dweight, dbias};
}

// Batch norm as the CPU's batch_norm_cpu: the output, and the batch's mean and inverse deviation per channel when
// training ([0] otherwise), in the statistics' type.
std::tuple<Tensor, Tensor, Tensor> batchNormAsTheCpu(const Tensor& input, const OptionalTensor& weight,
    const OptionalTensor& bias, const OptionalTensor& runningMean, bool train)
{
    auto out = at::empty_like(input, input.suggest_memory_format());
    auto parameter = defined(weight) ? weight->scalar_type()
        : defined(bias)              ? bias->scalar_type()
        : defined(runningMean)       ? runningMean->scalar_type()
                                     : input.scalar_type();
    auto statistics = input.options().dtype(parameter != input.scalar_type() ? at::kFloat : input.scalar_type());
    const int64_t channels = train ? input.size(1) : 0;
    return {out, at::empty({channels}, statistics), at::empty({channels}, statistics)};
}

std::tuple<Tensor, Tensor, Tensor> nativeBatchNorm(const Tensor& input, const OptionalTensor& weight,
    const OptionalTensor& bias, const OptionalTensor& runningMean, const OptionalTensor& runningVar, bool training,
    double momentum, double eps)
{
    return batchNormAsTheCpu(input, weight, bias, runningMean, training);
}

std::tuple<Tensor, Tensor, Tensor> nativeBatchNormLegit(const Tensor& input, const OptionalTensor& weight,
    const OptionalTensor& bias, Tensor& runningMean, Tensor& runningVar, bool training, double momentum, double eps)
{
    return batchNormAsTheCpu(input, weight, bias, runningMean, training);
}

std::tuple<Tensor, Tensor, Tensor> nativeBatchNormLegitNoStats(const Tensor& input, const OptionalTensor& weight,
    const OptionalTensor& bias, bool training, double momentum, double eps)
{
    return batchNormAsTheCpu(input, weight, bias, std::nullopt, training);
}

std::tuple<Tensor, Tensor, Tensor, Tensor> batchNormWithUpdate(const Tensor& input, const OptionalTensor& weight,
    const OptionalTensor& bias, Tensor& runningMean, Tensor& runningVar, double momentum, double eps)
{
    auto [out, mean, invstd] = batchNormAsTheCpu(input, weight, bias, runningMean, true);
    return {out, mean, invstd, at::empty({0}, input.options().dtype(at::kByte))};
}

std::tuple<Tensor, Tensor, Tensor, Tensor> batchNormNoUpdate(const Tensor& input, const OptionalTensor& weight,
    const OptionalTensor& bias, const OptionalTensor& runningMean, const OptionalTensor& runningVar, double momentum,
    double eps)
{
    auto [out, mean, invstd] = batchNormAsTheCpu(input, weight, bias, runningMean, false);
    return {out, mean, invstd, at::empty({0}, input.options().dtype(at::kByte))};
}

// Its backward: the input's gradient, and the weight's and bias's per channel.
std::tuple<Tensor, Tensor, Tensor> batchNormGradients(
    const Tensor& input, const OptionalTensor& weight, std::array<bool, 3> mask)
{
    Tensor dinput, dweight, dbias;
    auto perChannel = defined(weight) ? weight->options() : input.options();
    if (mask[0])
        dinput = at::empty_like(input, input.suggest_memory_format());
    if (mask[1])
        dweight = at::empty({input.size(1)}, perChannel);
    if (mask[2])
        dbias = at::empty({input.size(1)}, perChannel);
    return {dinput, dweight, dbias};
}

std::tuple<Tensor, Tensor, Tensor> nativeBatchNormBackward(const Tensor& gradOut, const Tensor& input,
    const OptionalTensor& weight, const OptionalTensor& runningMean, const OptionalTensor& runningVar,
    const OptionalTensor& saveMean, const OptionalTensor& saveInvstd, bool train, double eps, std::array<bool, 3> mask)
{
    return batchNormGradients(input, weight, mask);
}

std::tuple<Tensor, Tensor, Tensor> batchNormBackward(const Tensor& gradOut, const Tensor& input, const Tensor& weight,
    const OptionalTensor& runningMean, const OptionalTensor& runningVar, const OptionalTensor& saveMean,
    const OptionalTensor& saveVar, bool update, double eps, std::array<bool, 3> mask, const Tensor& reserve)
{
    return batchNormGradients(input, weight, mask);
}

} // namespace

void registerMetaKernels() // the registrations below are static; this keeps them linked
{
    at::addGlobalCallback(
        at::RecordFunctionCallback(&enterNode, &leaveNode).scopes({at::RecordScope::BACKWARD_FUNCTION}));
}

} // namespace memledger

TORCH_LIBRARY_IMPL(aten, Meta, m)
{
    using namespace memledger;
    m.impl("relu", TORCH_FN(relu));
    m.impl("hardswish_backward", TORCH_FN(hardBackward));
    m.impl("hardsigmoid_backward", TORCH_FN(hardBackward));
    m.impl("hardtanh_backward", TORCH_FN(hardtanhBackward));
    m.impl("roll", TORCH_FN(roll));
    m.impl("logical_not", TORCH_FN(logicalNot));
    m.impl("index_select", TORCH_FN(indexSelect));
    m.impl("embedding_dense_backward", TORCH_FN(embeddingDenseBackward));
    m.impl("where.self", TORCH_FN(where));
    m.impl("where.self_out", TORCH_FN(whereOut));
    m.impl("native_layer_norm", TORCH_FN(nativeLayerNorm));
    m.impl("native_layer_norm_backward", TORCH_FN(nativeLayerNormBackward));
    m.impl("_scaled_dot_product_flash_attention_for_cpu", TORCH_FN(flashAttentionForCpu));
    m.impl("_scaled_dot_product_flash_attention_for_cpu_backward", TORCH_FN(flashAttentionForCpuBackward));
    m.impl("abs", TORCH_FN(absolute));
    m.impl("floor_divide", TORCH_FN(floorDivide));
    m.impl("floor_divide.Scalar", TORCH_FN(floorDivideScalar));
    m.impl("histc", TORCH_FN(histogramCounts));
#if MEMLEDGER_HAS_GROUPED_MM
    m.impl("_grouped_mm", TORCH_FN(groupedMatmul));
#endif
    m.impl("add.Tensor", TORCH_FN(add));
    m.impl("convolution", TORCH_FN(convolution));
    m.impl("convolution_backward", TORCH_FN(convolutionBackward));
    m.impl("native_batch_norm", TORCH_FN(nativeBatchNorm));
    m.impl("_native_batch_norm_legit", TORCH_FN(nativeBatchNormLegit));
    m.impl("_native_batch_norm_legit.no_stats", TORCH_FN(nativeBatchNormLegitNoStats));
    m.impl("_batch_norm_with_update", TORCH_FN(batchNormWithUpdate));
    m.impl("_batch_norm_no_update", TORCH_FN(batchNormNoUpdate));
    m.impl("native_batch_norm_backward", TORCH_FN(nativeBatchNormBackward));
    m.impl("batch_norm_backward", TORCH_FN(batchNormBackward));
}

TORCH_LIBRARY_IMPL(aten, AutogradMeta, m)
{
    m.impl("scaled_dot_product_attention", TORCH_FN(memledger::scaledDotProductAttention));
}

#endif
