#pragma once
// Private to core/recording: a torch.export program (torch.export.save, a .pt2 archive) read from its
// serialized graph and run node by node through ATen's dispatcher, the kernels eager PyTorch runs. Parameters
// are leaf tensors that take gradients, so a training step's backward is autograd's, as in eager PyTorch.
// Module paths come from each node's nn_module_stack.
// Its parts: pt2_archive.h (the zip, its records and weights), pt2_graph.h (the JSON, checked), pt2_cast_policy.h,
// pt2_interpreter.h and pt2_arithmetic.h (one node run).
#include "recording/pt2_archive.h" // exportedArchiveKind
#include "report/report.h"

#include <ATen/core/ivalue.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace caffe2::serialize {
class PyTorchStreamReader;
}

namespace memledger {

class ExportedProgram {
public:
    // Throws std::runtime_error with the reason (an op this libtorch lacks, weights it cannot read, ...).
    // The archive's program "model" (torch.export.save's name for its one program), else its first; and the
    // programs generation runs where memledger.export saved them (generation()).
    static std::unique_ptr<ExportedProgram> load(caffe2::serialize::PyTorchStreamReader& reader);
    ~ExportedProgram();

    struct NamedTensor {
        std::string name; // "layers.0.attn.qkv.weight"
        at::Tensor value;
        std::vector<std::string> aliases; // other names of the same tensor (a tied LM head)
        std::size_t registered = 0; // its place in the model's registration order (model.parameters()'s)
        std::size_t read = 0; // its place in the program's signature (the order the graph first reads them)
    };
    // Unique tensors (a tied weight once, under its first name), in the order the run's lifetimes say the
    // program's model holds them (setLifetimes): eager, the model's registration order; graph, the order
    // torch.export.load(FILE).module()'s parameters() lists them in (registered in the signature's order, a
    // module's own before its submodules').
    std::vector<NamedTensor>& parameters();
    std::vector<NamedTensor>& buffers();

    // A user input: its name and, per dimension, the size it was exported with or the range it may take.
    struct Dim {
        std::optional<std::int64_t> fixed;
        std::string symbol; // "s0"; empty when fixed or an expression memledger does not check
        std::int64_t min = 0, max = INT64_MAX;
        std::int64_t example = 1; // the size of the example input it was exported with
        // Where its range comes from, as memledger.export found it ("the model's code at upsampling.py:169 in
        // forward (`if x.shape[0] >= 64:`): torch.export's guard x.size()[0] < 64"); empty: not known.
        std::string why;
    };
    struct Input {
        std::string name;
        std::string dtype; // "int64", "float32", "bool"
        std::vector<Dim> dims;
        bool tensor = true;
    };
    const std::vector<Input>& inputs() const;
    // Refuses sizes the program was not exported for: "idx: dimension 1 is 4096, outside 2..256 (seq)".
    void checkInputs(const std::vector<at::Tensor>& values) const;

    struct Module {
        std::string path;
        std::string type; // "Linear"
    };
    // Every module the graph names (nn_module_stack) or that owns a weight, parents before children.
    const std::vector<Module>& modules() const;
    std::string rootType() const;

    // Runs the graph; `onNode` is told the module path of each node before it runs. Returns the user outputs (a
    // tuple when there are several). An input the caller moves in (no other reference) is freed after its last
    // reader, as a value the caller's Python no longer holds (generation's cache, which each layer's torch.cat
    // replaces).
    c10::IValue run(std::vector<at::Tensor> inputs, const std::function<void(const std::string&)>& onNode);

    // The programs greedy generation runs, saved beside this one by memledger.export(..., generate=True)
    // (python/memledger/generation.py): the prompt's prefill, which returns the last position's logits and every
    // layer's keys and values, and one decode step, which takes one token per row and that cache and returns the
    // same, one token longer. They share this program's weights (convert() converts them with it).
    // Where the file holds them, the static cache's two (--cache static): static_prefill takes the prompt's token
    // ids (and positions) and an empty 0 x cache-length tensor, allocates each layer's keys and values at the cache's
    // length and returns the logits and them; static_decode takes one token per row (and its position), the tokens
    // cached so far (a 0-d int64 tensor) and that cache, writes into it in place and returns the logits only.
    struct Generation {
        std::unique_ptr<ExportedProgram> prefill, decode;
        std::unique_ptr<ExportedProgram> static_prefill, static_decode; // nullptr: facts.static_reason says why
        // The prefill and the decode step of `cache` (nullptr: the file has none for it).
        ExportedProgram* prefillOf(GenerationCache cache) const
        {
            return cache == GenerationCache::Static ? static_prefill.get() : prefill.get();
        }
        ExportedProgram* decodeOf(GenerationCache cache) const
        {
            return cache == GenerationCache::Static ? static_decode.get() : decode.get();
        }
        // every program the file holds
        std::vector<ExportedProgram*> programs() const
        {
            std::vector<ExportedProgram*> all;
            for (auto* p : {prefill.get(), decode.get(), static_prefill.get(), static_decode.get()})
                if (p)
                    all.push_back(p);
            return all;
        }
        ModelInfo::Generation facts;
        bool position_ids = false; // both take generate's position_ids after the token ids (batch x tokens)
    };
    // nullptr where the file holds none.
    Generation* generation();
    // How long run() keeps each value (pt2_lifetimes.h): "eager", as the Python code the program was exported from
    // holds it, or "graph", until its last reader, as the graph's generated code does. Returns the one runs use
    // from now on: "graph" when "eager" is asked of nodes that carry no source lines.
    std::string setLifetimes(const std::string& wanted);

    // Whether its weights were saved from the meta device (a model built under torch.device("meta")): they are
    // meta tensors, shapes only, and the program runs on the meta device alone.
    bool metaWeights() const;
    // The activation checkpointing memledger.export recorded beside the program (its modules empty: none).
    const ModelInfo::Checkpointing& checkpointing() const;

    // The floating-point type it was exported in: its first floating parameter's (else buffer's, else float
    // input's), float32 when it has none.
    c10::ScalarType exportedScalar() const;

    // Floating-point weights to `scalar`, or all to `device`: new leaves, as nn.Module.to() makes. A `scalar`
    // other than exportedScalar() also runs the graph in it: every type argument that names the exported type
    // (to(), _to_copy(), full(), softmax's dtype, ...) names `scalar` instead, as the graph of the same model
    // exported after model.to(scalar) would, but for the ops whose source line names the exported type (an
    // RMSNorm's x.float() or .to(torch.float32), softmax(..., dtype=torch.float32)): those keep it, as in
    // the model's own code. Without source lines in the graph every such type is converted.
    void convert(std::optional<c10::ScalarType> scalar, std::optional<c10::Device> device);

    // FSDP2's MixedPrecisionPolicy.cast_forward_inputs, for units that are not the root: as each call of one of
    // `modules` (module paths) begins, the floating-point tensors it reads from outside itself (its arguments: not
    // its own weights, nor constants) that are not in the type the program runs in are cast to it, and every node of
    // the call reads the copy, held until the call returns (the hook's arguments), longer where autograd saves it.
    // A call inside one of them reads the copy. Empty: no casts (the default). Kept for later runs until set again.
    void castModuleInputs(std::vector<std::string> modules);
    // How many tensors the last run cast so (castModuleInputs), and their bytes.
    std::size_t moduleInputCasts() const;
    std::int64_t moduleInputCastBytes() const;

    // What a report of a run converted to `runs` says: what was converted and which ops kept the exported type.
    std::string conversionNote(c10::ScalarType runs) const;

    // What a report of a run under autocast says of the graph's dtype checks (aten::_assert_tensor_metadata, which
    // export puts after a cast such as x.float()): they are skipped. "" when the graph has none.
    std::string autocastNote() const;

    // What a report of a run under autocast in `lower` (CUDA's rules, or the CPU's) says where the file does not
    // record which of the types the program passes its source takes from a tensor's (`.to(query.dtype)`), which
    // autocast changes (memledger.export records them): those ops ran in the exported type, and the figures may be
    // off either way. "" where it records them, or no op passes the exported type unnamed.
    std::string followedTypesNote(bool cudaRules, const std::string& lower) const;

    // What a training step's report says when the program was exported from model.eval(): how many of its dropouts
    // (p > 0) run as the identity and its BatchNorms on the running statistics, which the model in model.train()
    // does not. "" when the graph has none.
    std::string evalModeNote() const;
    // What an inference's report says when the program was exported from model.train(): how many of its dropouts
    // drop (p > 0, scaled_dot_product_attention's dropout_p among them) and how many BatchNorms take the batch's
    // statistics, as the program runs them and the model in model.eval() does not. "" when the graph has none.
    std::string trainModeNote() const;

    // What a report with eager lifetimes says when the program was not saved by memledger.export: the stack traces
    // alone do not tell what a function returns to a name its caller never reads, nor (non-strict) a helper
    // function's lines, so such values are dropped early. "" for a file with memledger.export's source facts.
    std::string eagerLifetimesNote() const;

    // What a training step's report says of the custom torch.autograd.Function calls the program holds: how they
    // run and that their backward errs high. "" when it holds none.
    std::string functionCallNote() const;

    // What a report says of a transformers program memledger.export saved with its causal mask built (the default):
    // an unpadded batch builds none, so the figures err high for one. "" otherwise.
    std::string causalMaskNote() const;

    // What loading decided that a report should say (a meta weight taken as a tied weight's storage).
    const std::vector<std::string>& loadNotes() const;

    struct Impl;

private:
    ExportedProgram();
    // The archive's program `name` (else, unless weightsElsewhere, its first), its records under extra/ (or, for
    // a program whose weights are another's, extra/NAME/); weightsElsewhere: its weights were saved as shapes and
    // shareWeights gives it another program's.
    static std::unique_ptr<ExportedProgram> loadProgram(
        caffe2::serialize::PyTorchStreamReader& reader, const std::string& name, bool weightsElsewhere);
    static void readGeneration(ExportedProgram& p, caffe2::serialize::PyTorchStreamReader& reader);
    // Its parameters and buffers become `from`'s tensors of the same names. Throws where one has none.
    void shareWeights(const ExportedProgram& from);
    std::unique_ptr<Impl> d_;
};

} // namespace memledger
