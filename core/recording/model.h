#pragma once
#include "report/report.h"
#include "support/dtype.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace memledger {

struct RunOptions {
    std::vector<Shape> inputs; // empty: guess from the model
    std::vector<InputType> input_types; // per input (float32 where shorter): --input 2x512:int64
    std::optional<std::int64_t> batch; // replaces dim 0 of every input
    std::optional<std::int64_t> seq; // replaces dim 1 of every token input (int64, int32, bool): the sequence
    std::string dtype = "float32"; // float32 | bfloat16 | float16
    // Mixed precision on one device: "" none, or "bfloat16" | "float16": libtorch's autocast for the run's device
    // around the forward and the loss (`with torch.autocast(device, dtype, cache_enabled=autocast_cache)`; the
    // backward and the optimizer outside it), the weights staying in `dtype`.
    std::string autocast;
    bool autocast_cache = true; // autocast's weight-cast cache (torch.autocast(..., cache_enabled))
    // Called from the running thread: modules done, modules in the model.
    std::function<void(int, int)> progress;
    const std::atomic<bool>* cancel = nullptr; // set it to stop at the next allocation
    // Inference (eval mode, no grad) or Train: one training step, forward, loss, backward, optimizer.
    // None: what the opened file suggests (OpenedFile::default_mode), else inference.
    std::optional<RunMode> mode;
    std::string optimizer = "sgd"; // train: sgd (momentum 0.9) | adam | adamw | none
    std::string loss = "auto"; // train: auto | sum | cross_entropy
    // train: how long the training loop holds the model's output and the loss (docs/cli.md, --hold-output):
    //   step (the default, nanoGPT's and Hugging Face's loops: `logits, loss = model(x, y)`; backward; step):
    //     until the step returns; the previous step's output and loss, alive when the step begins, until this
    //     step's forward has returned (the output) and its loss is made (the loss);
    //   backward: freed right after backward (`del out, loss` before optimizer.step());
    //   none: nothing holds them (`loss_fn(model(x), y).backward()`): the output is dropped once the loss is
    //     made, the loss once backward returns.
    std::string hold_output = "step";
    // A torch.export program (.pt2): how long each value of its graph lives (docs/cli.md, --lifetimes):
    //   eager (the default): as the eager Python it was exported from holds it, told from the nodes' source lines
    //     (a local until it is assigned again or its function returns; an argument until the call returns);
    //     graph's where the nodes carry none;
    //   graph: until its last reader, as the graph's generated code drops it (torch.export.load(path).module(),
    //     torch.compile).
    // A TorchScript model runs with TorchScript's own lifetimes either way.
    std::string lifetimes = "eager";
    int threads = 0; // intra-op threads; 0: libtorch's default
    bool record = true; // false: a plain run (no recorder), for benchmarks
    bool warm_up = true; // false: the caller has already run the model at this setting
    // cpu | meta | cuda | cuda:N (a libtorch with CUDA and a GPU); "": the model's own, meta where its weights are
    // meta tensors (Model::metaWeights), else cpu.
    std::string device;
    bool cudnn_benchmark = false; // CUDA: cuDNN's autotuner (at::globalContext().setBenchmarkCuDNN)
    // FSDP2's MixedPrecisionPolicy.cast_forward_inputs (a rank of a job whose param_dtype is `dtype`): as each call
    // of these modules (module paths; FSDP's units, the root aside) begins, the floating-point tensors it takes
    // from outside itself that are not in `dtype` are cast to it (ExportedProgram::castModuleInputs). A torch.export
    // program only; a TorchScript model runs without, and says so.
    std::vector<std::string> cast_module_inputs;
    // generate: the tokens to generate per row (transformers' max_new_tokens = min_new_tokens); the inputs are the
    // prompt's token ids (batch x prompt).
    std::int64_t new_tokens = 0;
    GenerationCache cache = GenerationCache::Dynamic; // generate: the KV cache generate keeps (--cache)
    // meta: scaled_dot_product_attention allocates as a GPU's fused kernels do (flash or memory-efficient: the output
    // and each row's log-sum-exp, no scores), not as the CPU's choice would (serving's prefill on a GPU)
    bool gpu_attention = false;
};

// What a recorded run produced, before it is turned into a Report.
struct RawRun {
    Trace trace;
    std::vector<OpCall> ops;
    RunInfo info;
    std::int64_t input_bytes = 0;
    std::int64_t parameter_bytes = 0; // resident, at the run's dtype
    std::int64_t buffer_bytes = 0;
    // A training step.
    std::vector<Phase> phases;
    std::vector<std::uint32_t> gradient_events; // allocs that ended as a parameter's .grad
    // Under autocast: the allocs that the region's clear_cache() freed (the cached weight casts no one else held).
    std::vector<std::uint32_t> autocast_cache_events;
    // RunOptions::cast_module_inputs: how many tensors the recorded run cast at a module's call.
    std::size_t module_input_casts = 0;
    std::int64_t gradient_bytes = 0;
    std::int64_t optimizer_state_bytes = 0;
    std::vector<TensorUse> forward_uses; // forward and loss ops' tensor inputs
    std::vector<std::uint32_t> output_events; // inference: the blocks of the model's output (its caller reads them)
    std::vector<std::uint32_t> kv_cache_events; // generate: the allocs of the cache each program returned
    std::int64_t kv_cache_bytes = 0; // generate: the cache at the end
    // A CUDA run: the device, the allocator's reserve over the run (from its own snapshot), and what the
    // libraries kept on the device from the warm-up (cuBLAS workspaces and the like).
    std::optional<GpuRun> gpu;
    // Buffers (qualified names) that no op of the recorded forward took as an input (inference only).
    std::vector<std::string> unread_buffers;
    bool buffer_reads_recorded = false;
    bool meta_weights = false; // the model's weights are meta tensors (Model::metaWeights)
    std::vector<std::string> notes; // what the model's loading or conversion makes a report say
    // Of `notes`, those that qualify every figure taken from the run, not only this report's (eager lifetimes told
    // from stack traces alone can read under the eager model, a torch.autograd.Function's backward errs high, an
    // eval export trains without dropout): a what-if table and a fit table built on the run say them too.
    std::vector<std::string> figure_notes;
};

// A model file (TorchScript or a torch.export program) loaded on the CPU. libtorch stays behind the pointer, in
// memledger's libtorch part, loaded on the first open (recording/torch_library.h).
class Model {
public:
    static Model open(const std::string& path); // throws FileError
    static Model openBytes(const std::string& bytes, const std::string& name); // throws FileError
    Model(Model&&) noexcept;
    Model& operator=(Model&&) noexcept;
    ~Model();

    const ModelInfo& info() const;
    // Its weights are meta tensors (a torch.export program made under torch.device("meta")): shapes only, so it
    // runs on the meta device alone, and there when a run names no device.
    bool metaWeights() const;
    // The module tree: paths, types, weight bytes as stored in the file.
    const std::vector<LayerStats>& modules() const;
    // A guess at the input from the first Embedding (1x128 token ids), Conv2d or Linear weight; empty if there is
    // none. `types`, when given, gets the guessed input's type.
    std::vector<Shape> guessInputs(std::string* how = nullptr, std::vector<InputType>* types = nullptr) const;
    // Inference: eval mode, no grad, one warm-up run, then the recorded run. Train: train mode, one warm-up
    // step, gradients set to None, then the recorded step. Throws RunError or Cancelled.
    // Thread-safe: runs of one Model from several threads take turns.
    RawRun run(const RunOptions& options);

    struct Impl; // defined in core/recording/model_impl.h, in the libtorch part
    struct ImplDeleter {
        void operator()(Impl* d) const;
    };

private:
    explicit Model(Impl* d);
    std::unique_ptr<Impl, ImplDeleter> d_;
};

// A device a run can use: "cpu", "cuda:0", ...
struct DeviceInfo {
    std::string id; // what --device takes
    std::string name; // "CPU" or the GPU's name
    std::int64_t total_memory_bytes = 0;
};
// The CPU, then every CUDA GPU that this libtorch sees (none in a CPU-only build). Looking for GPUs loads the
// libtorch part in a CUDA build; with `loadTorch` false the GPUs are listed only if it is loaded already.
std::vector<DeviceInfo> availableDevices(bool loadTorch = true);
// "libtorch 2.15.0, CUDA 13.0" or "libtorch 1.13.0, CPU only": the libtorch this memledger was built against
// (known without loading it).
std::string torchBuildInfo();
// Whether this memledger's libtorch has CUDA compiled in.
bool builtWithCuda();
// Whether this libtorch can run torch.export programs (.pt2): PyTorch 2 can, libtorch 1.13 cannot.
bool canRunExportedPrograms();
// Whether --device meta runs here (shapes only): memledger's PyTorch 2 build can, the libtorch 1.13 one cannot.
bool metaRunsSupported();


} // namespace memledger
