#include "whatif/serving.h"

#include "recording/build_report.h"
#include "recording/model.h"
#include "report/weight_bytes.h"
#include "report/whatif_table.h"
#include "support/dtype.h"
#include "support/errors.h"
#include "support/format.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace memledger {

std::int64_t kvTypeBytes(const std::string& type)
{
    if (type == "float8" || type == "float8_e4m3fn" || type == "float8_e5m2")
        return 1;
    if (type == "bfloat16" || type == "float16")
        return 2;
    if (type == "float32")
        return 4;
    return 0;
}

std::int64_t weightBytesAt(const ModelInfo& model, const std::string& dtype)
{
    std::int64_t bytes = 0;
    for (const auto& t : model.tensors)
        bytes += weightBytesAt(t, dtype);
    return bytes;
}

std::int64_t prefillActivationPeak(Model& model, const std::string& dtype, std::int64_t tokens)
{
    RunOptions o;
    o.inputs = {{1, tokens}};
    o.input_types = {InputType {}};
    o.input_types.front().dtype = "int64";
    o.mode = RunMode::Generate;
    o.new_tokens = 1;
    o.device = "meta";
    o.gpu_attention = true; // a GPU's fused attention, as the engine's kernels: no scores
    o.dtype = dtype;
    // the most bytes alive at once but the cache the prefill fills: an engine's profile run writes none (its blocks
    // are allocated after it, from what is left)
    const auto report = analyzeModel(model, o);
    std::int64_t live = 0, most = 0;
    if (report.trace)
        for (std::size_t i = 0; i < report.trace->size(); ++i) {
            if (report.trace->ledger[i] == Ledger::KvCache)
                continue;
            live += report.trace->action[i] == Action::Alloc ? report.trace->bytes[i] : -report.trace->bytes[i];
            most = std::max(most, live);
        }
    return most;
}

ServePlan planServing(const ModelInfo::Generation& g, std::int64_t fullWeightBytes, std::int64_t activationPeakBytes,
    std::int64_t maxPositions, const ServeRequest& request)
{
    if (g.cache.empty() || g.layers <= 0 || g.kv_heads <= 0 || g.head_dim <= 0)
        throw std::invalid_argument("the file holds no generation programs (memledger.export(..., generate=True)), "
                                    "whose cache the serving answer is sized from");
    if (request.budget <= 0)
        throw std::invalid_argument("serving needs --budget: a GPU or a size");
    if (request.context <= 0)
        throw std::invalid_argument("serving needs --context C: the tokens of one sequence");
    if (request.gpus < 1 || request.block_size < 1 || request.max_batched_tokens < 1)
        throw std::invalid_argument("--gpus, --block-size and --max-batched-tokens take 1 or more");
    if (!(request.memory_fraction > 0.0 && request.memory_fraction <= 1.0))
        throw std::invalid_argument("--memory-fraction takes a share in (0, 1], such as 0.9");
    ServePlan p;
    p.request = request;
    const std::string kvType = request.kv_dtype.empty() ? request.dtype : request.kv_dtype;
    p.kv_type_bytes = kvTypeBytes(kvType);
    if (p.kv_type_bytes == 0)
        throw std::invalid_argument("--kv-dtype '" + kvType + "' is not float32, bfloat16, float16 or float8");
    p.layers = g.layers;
    p.head_dim = g.head_dim;
    p.kv_heads_per_gpu = std::max(1, g.kv_heads / request.gpus);
    p.max_positions = maxPositions;
    p.usable_bytes = static_cast<std::int64_t>(std::floor(static_cast<double>(request.budget) * request.memory_fraction));
    p.weight_bytes = (fullWeightBytes + request.gpus - 1) / request.gpus;
    p.activation_peak_bytes = activationPeakBytes;
    const auto overheads = DeviceOverheads::estimates();
    p.cuda_context_bytes = overheads.cuda_context_bytes;
    p.nccl_bytes = request.gpus > 1 ? overheads.nccl_bytes : 0;
    p.kv_cache_bytes = std::max<std::int64_t>(
        0, p.usable_bytes - p.weight_bytes - p.activation_peak_bytes - p.cuda_context_bytes - p.nccl_bytes);
    // vLLM's AttentionSpec.page_size_bytes per layer, times the layers: one block of the whole model
    p.block_bytes = 2 * request.block_size * p.kv_heads_per_gpu * p.head_dim * p.kv_type_bytes * p.layers;
    p.blocks = p.kv_cache_bytes / p.block_bytes;
    p.blocks_per_sequence = (request.context + request.block_size - 1) / request.block_size;
    // never a sequence the program cannot run
    p.sequences = maxPositions > 0 && request.context > maxPositions ? 0 : p.blocks / p.blocks_per_sequence;
    if (request.batch > 0) {
        p.longest_context = p.blocks / request.batch * request.block_size;
        if (maxPositions > 0)
            p.longest_context = std::min(p.longest_context, maxPositions);
    }
    if (maxPositions > 0 && request.context > maxPositions)
        p.notes.push_back("the context " + std::to_string(request.context) + " is past the model's "
            + std::to_string(maxPositions) + " positions: no sequence of it runs, whatever fits");
    if (g.kv_heads % request.gpus != 0 && g.kv_heads > request.gpus)
        p.notes.push_back(std::to_string(g.kv_heads) + " KV heads do not split evenly over " + std::to_string(request.gpus)
            + " GPUs: vLLM refuses such a layout");
    if (g.kv_heads < request.gpus)
        p.notes.push_back("fewer KV heads (" + std::to_string(g.kv_heads) + ") than GPUs: each GPU keeps one, copied");
    if (request.gpus > 1)
        p.notes.push_back("the weights split evenly over the GPUs (vLLM replicates the norms: a few KiB more each), the "
                          "activation peak not split (an upper bound)");
    return p;
}

std::vector<ServePlan> serveModelOnGpus(Model& model, const ServeRequest& request, const std::vector<int>& gpus)
{
    const auto& info = model.info();
    if (info.generation.cache.empty())
        throw UsageError("serving sizes the KV cache from the generation programs memledger.export saves with "
                         "generate=True, which this file does not hold: export the model again with "
                         "memledger.export(model, (input_ids,), PATH, generate=True)");
    // vLLM's profile run: one prefill of the largest chunk, no longer than a sequence the model takes
    auto chunk = request.max_batched_tokens;
    if (info.generation.max_tokens > 0)
        chunk = std::min(chunk, info.generation.max_tokens);
    // recorded once for every GPU count: its activations are not split (an upper bound per GPU)
    const auto peak = prefillActivationPeak(model, request.dtype, chunk);
    const auto weights = weightBytesAt(info, request.dtype);
    std::vector<ServePlan> plans;
    for (int n : gpus) {
        auto r = request;
        r.gpus = n;
        auto plan = planServing(info.generation, weights, peak, info.generation.max_tokens, r);
        plan.prefill_tokens = chunk;
        if (chunk < request.max_batched_tokens)
            plan.notes.push_back("the prefill chunk recorded is " + std::to_string(chunk)
                + " tokens, the longest sequence the model takes");
        plans.push_back(std::move(plan));
    }
    return plans;
}

ServePlan serveModel(Model& model, const ServeRequest& request)
{
    return serveModelOnGpus(model, request, {request.gpus}).front();
}

} // namespace memledger
