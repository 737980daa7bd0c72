#pragma once
// Serving: "how many sequences of C tokens fit on this GPU, and how long a context at batch B?" A serving engine's
// layout of one GPU (vLLM's, v1: vllm/v1/worker/gpu_worker.py determine_available_memory and
// vllm/v1/core/kv_cache_utils.py), said in the answer:
//   the usable memory, the GPU's memory times --memory-fraction (gpu_memory_utilization, 0.9);
//   less the weights at the serving precision (split over the tensor-parallel GPUs);
//   less the activation peak of the largest prefill chunk (--max-batched-tokens tokens at once: vLLM's profile run);
//   less the CUDA context (and NCCL's buffers on more than one GPU): estimates, as the fit table takes them off;
//   what is left holds the KV cache, in blocks of --block-size tokens of every layer: a block is
//   2 x block_size x KV heads per GPU x head dim x the cache type's bytes per layer (vLLM's AttentionSpec
//   page_size_bytes), and a sequence of C tokens takes ceil(C / block_size) of them.
// Not modelled, and said: CUDA graphs' memory, the sampler's buffers, prefix caching; the activation peak is the
// exported model's own prefill (transformers' attention, recorded on the meta device), not vLLM's kernels.
#include "report/report.h"

#include <cstdint>
#include <string>
#include <vector>

namespace memledger {

class Model;

struct ServeRequest {
    std::int64_t budget = 0; // one GPU's memory, bytes
    std::string budget_text; // as given: "H100-80GB"
    int gpus = 1; // tensor-parallel: the KV heads and the weights split over them
    std::int64_t context = 0; // tokens per sequence (prompt and generated): the most sequences at it
    std::int64_t batch = 0; // sequences at once: the longest context at it (0: not asked)
    std::string dtype = "bfloat16"; // the weights and the activations
    std::string kv_dtype; // the cache's type: float32 | bfloat16 | float16 | float8; "" = dtype
    std::int64_t block_size = 16; // tokens per block (vLLM's default)
    double memory_fraction = 0.9; // the share of the GPU the engine may use (vLLM's gpu_memory_utilization)
    std::int64_t max_batched_tokens = 8192; // the largest prefill chunk (vLLM's max_num_batched_tokens)
};

struct ServePlan {
    ServeRequest request;
    int kv_heads_per_gpu = 0; // max(1, KV heads / GPUs): a head is not split
    int layers = 0;
    int head_dim = 0;
    std::int64_t kv_type_bytes = 0;
    std::int64_t usable_bytes = 0; // budget x memory_fraction
    std::int64_t weight_bytes = 0; // per GPU
    std::int64_t activation_peak_bytes = 0; // the prefill chunk's, per GPU (not split: an upper bound)
    std::int64_t prefill_tokens = 0; // the chunk recorded: max_batched_tokens, or the model's positions if fewer
    std::int64_t cuda_context_bytes = 0;
    std::int64_t nccl_bytes = 0;
    std::int64_t kv_cache_bytes = 0; // what is left for the cache (0 when nothing is)
    std::int64_t block_bytes = 0; // one block of every layer
    std::int64_t blocks = 0;
    std::int64_t blocks_per_sequence = 0; // ceil(context / block_size)
    std::int64_t sequences = 0; // at the context
    std::int64_t longest_context = 0; // at the batch (0: not asked, or not one sequence fits)
    std::int64_t max_positions = 0; // the model's own bound on a sequence (0: not known)
    std::vector<std::string> notes;
};

// The bytes one element of a cache type takes: float8 1, bfloat16 and float16 2, float32 4; 0 for another name.
std::int64_t kvTypeBytes(const std::string& type);

// The layout of one GPU for `g` (the model's cache) with `fullWeightBytes` (every weight at request.dtype) and the
// prefill chunk's `activationPeakBytes`. Throws std::invalid_argument on a request it cannot answer (no cache
// facts, a zero budget or context).
ServePlan planServing(const ModelInfo::Generation& g, std::int64_t fullWeightBytes, std::int64_t activationPeakBytes,
    std::int64_t maxPositions, const ServeRequest& request);

// Every weight of `model` at `dtype`: floating-point tensors take its width, the rest stay as stored.
std::int64_t weightBytesAt(const ModelInfo& model, const std::string& dtype);

// The activation peak of one prefill of `tokens` tokens (one sequence) at `dtype`, recorded on the meta device from
// the file's prefill program (--mode generate, one new token) with a GPU's fused attention: the most bytes alive at
// once but the KV cache the prefill fills (an engine's profile run writes none). Throws RunError.
std::int64_t prefillActivationPeak(Model& model, const std::string& dtype, std::int64_t tokens);

// The whole answer for a model file, as `fit --serve` and the window's GPUs tab give it: vLLM's profile run (one
// prefill of the largest chunk, no longer than a sequence the model takes, recorded on the meta device), the model's
// weights at request.dtype, then planServing. Throws UsageError where the file holds no generation programs, RunError
// where the prefill cannot be recorded, std::invalid_argument on a request planServing refuses.
ServePlan serveModel(Model& model, const ServeRequest& request);
// The same answer on each tensor-parallel GPU count of `gpus` (request.gpus ignored; at least one), from one recorded
// prefill: the window's GPUs tab, a row per count. serveModel is its one count, request.gpus.
std::vector<ServePlan> serveModelOnGpus(Model& model, const ServeRequest& request, const std::vector<int>& gpus);

} // namespace memledger
