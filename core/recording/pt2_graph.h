#pragma once
// Private to core/recording: the JSON of a torch.export program (models/<name>.json and the weights' configs)
// read with the care the pickle reader gives a snapshot: nesting bounded before anything recurses, every tagged
// value checked to have a tag, every tensor's sizes, strides and offset checked before they are used, and every
// name the graph reads made before it is read. Without libtorch: fuzz/fuzz_pt2.cpp runs it alone.
//
// Each check throws std::runtime_error with the reason, which the loader turns into a FileError naming the file.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace memledger::pt2 {

using json = nlohmann::json;

// The deepest nesting of arrays and objects a program's JSON may have; torch.export's own reach 10.
constexpr int kMaxJsonDepth = 128;

// `text` parsed, after a scan of its bytes that refuses nesting deeper than kMaxJsonDepth (so that nothing that
// walks the tree, dump() included, recurses past it). `what` names the record in the reason.
json parseJson(const std::string& text, const std::string& what);

// The tag of one of serde's tagged unions ({"as_tensor": {...}}): its one key. Throws when `v` is not an object
// with a key.
const std::string& unionTag(const json& v, const std::string& what);

// The values an argument (or an output) names: tensors by "name", sizes by "as_name", in the order they appear.
// A higher-order op's subgraph (as_graph) is left out: its names are its own.
void namesIn(const json& v, std::vector<std::string>& out);

// A SymInt of a tensor's meta: its value when fixed (as_int) or the hint it was exported with.
std::int64_t symHint(const json& s);

// A float as serde writes it: a number, or "Infinity", "-Infinity", "NaN".
double number(const json& v);

// "L__self__,,__main__.M;L__self__layers_0,layers.0,__main__.Block": the innermost module's path and type (the
// last element of `all`, which gets every module of the stack, outermost first). A module the model does not hold,
// called from a global (`G['__import_transformers...modeling_llama'].apply_rotary_pos_emb`: a function that
// transformers' kernel hub wraps in a module), is not a module of the model: its ops belong to the module that
// called it, and the entry is passed over.
struct ModuleName {
    std::string path;
    std::string type; // "Block"
    std::string qualified_type; // "torch.nn.modules.linear.Linear", "__main__.Block"
    std::string call; // "" for a module's first call, "1", "2", ... for its later ones (the stack key's "@1")
};
ModuleName innermostModule(const std::string& stack, std::vector<ModuleName>* all);
// A module path as TorchDynamo's source writes it where a module's class defines __getattr__ (diffusers' ModelMixin,
// under a strict export): "__dict__['_modules']['down_blocks'].1.__dict__['_modules']['norms'].0", "L['self'].layers[0]",
// "_modules['mid']" -> "down_blocks.1.norms.0", "layers.0", "mid". "" where it is not one (a global's source, G[...]).
std::string moduleSourcePath(const std::string& source);

// A stored tensor's layout (a weights config entry's tensor_meta, or a graph value's), checked: as many strides as
// sizes, none negative, and the elements it reaches countable in 64 bits.
struct TensorLayout {
    int dtype = 0; // serde's numbering (schema.py's ScalarType)
    std::vector<std::int64_t> sizes, strides;
    std::int64_t offset = 0;
    // The storage elements the view reaches (offset + 1 + the sum of (size - 1) * stride): 0 when a size is 0.
    std::int64_t reach = 0;
};
TensorLayout tensorLayout(const json& tensorMeta, const std::string& name);

// The bytes `elements` of `elementSize` bytes take; throws when that overflows.
std::int64_t checkedBytes(std::int64_t elements, std::int64_t elementSize, const std::string& name);

// The whole program checked before it is loaded: graph_module's graph, nodes and signature of the kinds the
// loader reads; every tagged value with a tag; every name a node, the signature's outputs or a buffer mutation
// reads made earlier (by an input spec or an earlier node, so the graph has no cycle); and the arithmetic on
// sizes whose operands are all constants evaluated (pt2_arithmetic.h), so that a division by zero or an overflow
// written into the file is refused here.
void checkProgram(const json& root);

} // namespace memledger::pt2
