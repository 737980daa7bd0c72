#pragma once
#include "report/kinds.h"
#include "report/remedy.h"
#include "report/trace.h"
#include "report/whatif_table.h"
#include "support/dtype.h"

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace memledger {

struct SimulatedGpu;

struct Snapshot; // memledger/snapshot.h

// Whether module path `path` is `module` or inside it ("layers.0.mlp" is inside "layers.0"; everything is
// inside the root, "").
bool isInsideModule(const std::string& path, const std::string& module);
struct LayerStats;
// The blocks a model repeats, as users wrap them (checkpointing, FSDP's units): of the sets of two or more siblings
// of one type, those that are a list's items ("layers.0", "layers.1": a ModuleList's or a Sequential's) where
// there are any, and of these the set holding the most weights, then the most blocks, then the first in the tree;
// in item order; only paths `usable` accepts (empty: every one). So a 2-layer decoder's layers win over the four
// Linears of its attention (named, and lighter), an MoE's blocks over each block's experts (lighter), and a
// model's encoder and decoder lists (named) lose to the heavier list's blocks. Empty when no module has two
// children of one type.
std::vector<std::string> largestRepeatedBlocks(
    const std::vector<LayerStats>& layers, const std::function<bool(const std::string&)>& usable = {});
// The module paths (never the root) that `patterns` names, in the tree's order: a comma-separated list of paths any
// component of which may be "*" (any one module name): "layers.*", "layers.*.feed_forward,tok_embeddings". Throws
// std::invalid_argument, starting with `flag` ("--shard-units"), naming a pattern that matches no module.
std::vector<std::string> modulesMatching(
    const std::vector<LayerStats>& layers, const std::string& patterns, const std::string& flag);
using Shape = std::vector<std::int64_t>;
std::string shapeToString(const Shape& s); // "1x3x224x224"

// One outermost ATen op of the run.
struct OpCall {
    std::uint32_t name = 0; // string id in the trace
    std::uint32_t module = 0; // string id of the module path
    std::int64_t start_ns = 0;
    std::int64_t end_ns = 0;
    std::uint32_t first_event = 0; // events [first_event, end_event) happened inside it
    std::uint32_t end_event = 0;
    std::vector<Shape> outputs;
    std::vector<std::int64_t> output_bytes;
    bool backward = false; // an autograd node of the backward pass (name: the node, module: its forward's)
};

struct TensorInfo {
    std::string name; // qualified, as PyTorch prints it: "layer1.0.bn1.running_mean"
    Shape shape;
    std::string dtype; // as stored in the file: "float16"
    std::int64_t bytes = 0;
    bool is_buffer = false;
    // A parameter that takes a gradient (requires_grad in the file; false for a frozen one). Buffers take none.
    bool requires_grad = true;
    bool trainable() const { return !is_buffer && requires_grad; }
};

struct LayerStats {
    std::string path; // "" for the root, else "layer1.0.conv1"
    std::string name; // last component of the path, or the root's type
    std::string type; // "Conv2d"
    int parent = -1;
    int depth = 0;
    std::vector<int> children;
    std::int64_t weight_bytes = 0;
    std::int64_t activation_bytes = 0;
    std::int64_t temporary_peak_bytes = 0;
    std::int64_t peak_bytes = 0;
    std::int64_t calls = 0;
    std::vector<std::string> output_shapes;
    // A training step (0 in inference): the .grad of its parameters; its forward's activations still alive
    // when the backward starts; the most temporary bytes alive at once in its backward nodes; the most live
    // bytes during its backward nodes minus the live bytes when the first began.
    std::int64_t gradient_bytes = 0;
    std::int64_t saved_activation_bytes = 0;
    std::int64_t backward_temporary_peak_bytes = 0;
    std::int64_t backward_peak_bytes = 0;
    // A snapshot's frame: its largest block (the other byte figures of a frame: peak_bytes is what it holds at
    // the peak, activation_bytes what it allocated in total, calls how many blocks).
    std::int64_t largest_block_bytes = 0;
    std::int64_t forward_ns = 0; // time of its forward ops (what a checkpoint recomputes)
};

// A forward (or loss) op that took an allocation of the run as an input (its storage, so a view's use counts),
// in inference and in a training step. The checkpointing what-if finds from them when a tensor nobody saved
// would be freed; the remedies which activations could go in place or fold (core/whatif/remedies.h).
struct TensorUse {
    std::uint32_t event = 0; // the allocation
    std::uint32_t op = 0; // the op (Trace::op_seq)
    std::uint32_t op_name = 0; // string id in the trace
    std::uint32_t module = 0; // string id of the op's module path
    bool modified = false; // the op changed it in place (the first argument of an in-place op such as relu_)
};

// A part of a training step: "forward", "loss", "backward" or "optimizer".
struct Phase;
const Phase* findPhase(const std::vector<Phase>& phases, const char* name); // nullptr: none of that name
struct Phase {
    std::string name;
    std::int64_t start_ns = 0;
    std::int64_t end_ns = 0;
    std::uint32_t first_event = 0; // events [first_event, end_event) happened in it
    std::uint32_t end_event = 0;
    std::int64_t peak_bytes = 0; // the most bytes alive at once during it (allocated in the step)
};

// A run on a CUDA GPU: the device and what PyTorch's caching allocator really did (its own snapshot).
struct GpuRun {
    std::string name;
    std::int64_t total_memory_bytes = 0;
    std::int64_t reserved_peak_bytes = 0; // the allocator's reserve at its highest during the run
    // Allocated on the device before the recorded run that is neither weights nor inputs: what the libraries
    // kept from the warm-up (cuBLAS workspaces and the like). Part of peak_total_bytes.
    std::int64_t library_bytes = 0;
    std::vector<std::pair<std::int64_t, std::int64_t>> reserved_over_time; // (ns since the run began, bytes)
    std::shared_ptr<const std::string> allocator_pickle; // the allocator's own snapshot (--snapshot writes it)
};

struct LedgerFigure {
    std::int64_t at_peak = 0;
    std::int64_t total = 0; // bytes allocated over the whole run (a snapshot's resident: those alive before the trace)
    std::int64_t max = 0; // the most bytes of the ledger alive at once
};

struct PeakItem {
    std::int64_t bytes = 0;
    Ledger ledger = Ledger::Activations;
    std::string where; // module path or top frame
    std::string op;
    std::int32_t event = -1;
};

struct LoadTax {
    std::int64_t file_tensor_bytes = 0; // params + buffers as stored in the file
    std::string file_dtype; // dominant floating dtype in the file
    std::int64_t resident_bytes = 0; // params + buffers at the run's dtype
    std::string resident_dtype;
};

struct ModelInfo {
    std::string path;
    std::string type; // root module type
    std::int64_t file_bytes = 0;
    std::int64_t parameter_bytes = 0; // at the run's dtype
    std::int64_t buffer_bytes = 0;
    std::map<std::string, std::int64_t> bytes_by_dtype; // as stored in the file
    std::vector<TensorInfo> tensors;
    // The sizes the model accepts along the batch and the sequence (a torch.export program's range
    // constraints; unbounded for TorchScript, whose limits only a run finds).
    SizeRange batch_range, seq_range;
    // A run without inputs takes the example the program was exported with (a torch.export program): not a guess.
    bool example_inputs = false;
    // The activation checkpointing the model was set up with when memledger.export saved it (transformers'
    // activation_checkpointing_enable(): python/memledger/checkpoint_record.py), which the program itself does not
    // keep; empty modules: none recorded.
    struct Checkpointing {
        std::vector<std::string> modules; // module paths
        std::string implementation; // "reentrant" | "non-reentrant"
        std::string source; // who set it up: "transformers activation_checkpointing_enable()"
        bool offload = false; // the saved inputs held in host memory (transformers' offload=True)
        bool context_fn = false; // a context_fn (a selective policy) memledger cannot read
    };
    Checkpointing exported_checkpointing;
    // The programs greedy generation runs, where memledger.export saved them (generate=True,
    // python/memledger/generation.py): what their cache is. An empty `cache`: the file holds none.
    struct Generation {
        std::string cache; // "dynamic": transformers' DynamicCache, one torch.cat per layer and token
        // whether the file holds the static cache's programs too (--cache static), and why not where it does not
        bool static_cache = false;
        std::string static_reason;
        int layers = 0;
        int kv_heads = 0; // the key/value heads the cache holds (fewer than attention_heads: grouped-query)
        int head_dim = 0;
        int attention_heads = 0; // 0: not known
        std::int64_t vocab = 0;
        std::int64_t max_tokens = 0; // the longest sequence the decode program takes (its past + 1); 0: not known
    };
    Generation generation;
};

// One rank of a data-parallel training job (whatif/parallel.h): how its step was laid out.
struct ParallelInfo {
    int gpus = 1;
    std::string shard; // fsdp | zero2 | zero1 | ddp
    std::string param_dtype; // the parameters' dtype in the forward and backward (the run's dtype)
    std::string reduce_dtype; // the gradients' dtype in the reduce-scatter or all-reduce
    std::string master_dtype; // the sharded (or replicated) parameters', gradients' and optimizer state's
    bool reshard_after_forward = true;
    bool root_reshard_after_forward = false; // the root too (ParallelPlan::root_reshard_after_forward)
    std::string backend = "nccl"; // the process group's: nccl | gloo (ParallelPlan::backend)
    std::vector<std::string> units; // FSDP's units, in forward order ("" is the root)
    int rank = 0; // the rank shown: rank 0, which holds the largest shards
    // What the rank holds before the step, one block per tensor as the job allocates them: its parameter
    // shards, the buffers, its optimizer state (inputs follow). The GPU replay starts from these.
    std::vector<std::int64_t> resident_blocks;
    std::int64_t full_parameter_bytes = 0; // every parameter at the master dtype, unsharded
    // CPU offload (ParallelPlan::offload): "" none, "params" (FSDP2's CPUOffloadPolicy). What the rank then holds in
    // the host's pinned memory at its peak there: parameter shards, gradient shards, optimizer state and the optimizer
    // step's temporaries; a node holds gpus_per_node times that.
    std::string offload;
    std::int64_t host_bytes = 0;
    int gpus_per_node = 8;
};

struct RunInfo {
    std::vector<Shape> input_shapes;
    std::vector<InputType> input_types; // per input; float32 where shorter (reports written before types)
    bool input_guessed = false;
    std::int64_t batch = 1;
    std::int64_t seq = 0; // dimension 1 of the first token input; 0: the model takes none
    std::string dtype = "float32";
    std::string autocast; // "" none, or the autocast dtype (bfloat16, float16) around the forward and the loss
    bool autocast_cache = true; // autocast's weight-cast cache (torch.autocast(..., cache_enabled))
    RunMode mode = RunMode::Inference;
    std::string device = "cpu";
    std::string optimizer; // train: sgd | adam | adamw | none
    std::string loss; // train: sum | cross_entropy | next_token (what auto chose)
    std::string hold_output; // train: step | backward | none (RunOptions::hold_output); "": a report without it
    // train: the micro-batches whose gradients are accumulated before each optimizer step (--grad-accum; 1: none).
    // The global batch is batch x grad_accum x the data-parallel ranks.
    int grad_accum = 1;
    // generate: the tokens generated per row after the prompt (--new-tokens): the prefill, then new_tokens - 1 decode
    // steps.
    std::int64_t new_tokens = 0;
    GenerationCache cache = GenerationCache::Dynamic; // generate: the KV cache (--cache)
    std::string lifetimes; // a .pt2's run: eager | graph (RunOptions::lifetimes); "": TorchScript, or a report without it
    int threads = 0; // intra-op threads the run used
    double duration_ms = 0.0;
    std::optional<ParallelInfo> parallel; // one rank of a data-parallel job; none: one device
};

// Everything memledger knows about one run, built once and never mutated afterwards.
struct Report {
    ReportSource source = ReportSource::Model;
    ModelInfo model;
    RunInfo run;
    LoadTax load_tax;
    std::int64_t weight_bytes = 0; // parameters + buffers resident during the run
    std::int64_t input_bytes = 0;
    std::int64_t peak_bytes = 0; // max live bytes allocated during the run
    std::int64_t peak_total_bytes = 0; // weights + optimizer state + inputs + peak_bytes
    std::int64_t gradient_bytes = 0; // train: every parameter's .grad after the step
    std::int64_t optimizer_state_bytes = 0; // train: the optimizer's state tensors, resident like the weights
    std::int64_t kv_cache_bytes = 0; // generate: the KV cache at the end (every layer's keys and values)
    std::vector<Phase> phases; // train: forward, loss, backward, optimizer
    std::int64_t peak_time_ns = 0;
    std::int32_t peak_event = -1;
    // What the same run would reserve on a GPU through PyTorch's caching allocator (simulated; 0 if not known).
    std::int64_t simulated_reserved_peak_bytes = 0;
    std::shared_ptr<const SimulatedGpu> simulated_gpu; // the replay behind it, made with the report
    std::optional<GpuRun> gpu; // a run on a CUDA GPU
    std::array<LedgerFigure, kLedgerKinds> ledgers {}; // a model run's kLedgerCount; a snapshot's all of them
    std::vector<LayerStats> layers; // layers[0] is the root; parents come before children
    std::vector<PeakItem> alive_at_peak; // largest first
    std::shared_ptr<const Trace> trace;
    // The ops of a recorded run (not kept in JSON): what reportForRange needs to redo the module figures.
    std::shared_ptr<const std::vector<OpCall>> ops;
    // reportForRange: the events [first, end) the figures are for; both 0 for the whole run.
    std::uint32_t range_first = 0;
    std::uint32_t range_end = 0;
    std::shared_ptr<const Snapshot> snapshot; // set when the report was read from a CUDA memory snapshot
    std::vector<std::string> notes; // what the user should know (guessed input, ...)
    std::shared_ptr<const WhatIfTable> whatif; // the what-if table, when one was made
    // Inference runs: buffers that no op of the recorded run took as an input (RawRun::unread_buffers).
    std::vector<std::string> unread_buffers;
    bool buffer_reads_recorded = false;
    std::shared_ptr<const std::vector<Remedy>> remedies; // "What would help", when computed (analyze --remedies)
    std::vector<TensorUse> forward_uses; // in op order (inference and the forward of a training step)
    bool forward_uses_recorded = false; // false: a report saved before they were recorded
    std::vector<std::uint32_t> output_events; // inference: the Alloc events of the model's output

    int findLayer(const std::string& path) const;
};

} // namespace memledger
