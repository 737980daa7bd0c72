// A torch.export program read from its archive (pt2_archive.h: models/<name>.json, data/weights, data/constants),
// its JSON checked first (pt2_graph.h), and run node by node (pt2_interpreter.h) through ATen's dispatcher. The
// serialized format is torch/_export/serde/schema.py's: a graph of nodes, each an operator overload
// ("torch.ops.aten.linear.default") with named arguments in a tagged union (as_tensor, as_int, as_sym_ints,
// as_scalar_type, ...), and a signature that says which graph inputs are parameters, buffers, constants and user
// inputs. Loading goes in steps, one function each: the weights (and which meta weights are tied), the
// signature's inputs and outputs, the exported type, the nodes and their operators, the casts a converted run
// keeps, the values' last uses, and the module tree.
#include "recording/exported_program.h"
#include "recording/operator_libraries.h"
#include "recording/autocast_emulation.h"
#include "recording/meta_device.h"
#include "recording/model.h"

#include "recording/model_impl.h"
#include "recording/pt2_archive.h"
#include "recording/pt2_cast_policy.h"
#include "recording/pt2_graph.h"
#include "recording/pt2_interpreter.h"
#include "recording/pt2_lifetimes.h"
#include "recording/torch_compat.h"
#include "report/report.h"
#include "support/dtype.h"
#include "support/errors.h"

#include <caffe2/serialize/inline_container.h>
#include <nlohmann/json.hpp>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <map>
#include <regex>
#include <set>
#include <stdexcept>
#include <unordered_map>

namespace memledger {

using json = nlohmann::json;

#if MEMLEDGER_EXPORTED_PROGRAMS // decided in core/CMakeLists.txt

using pt2::isMetaEntry;
using pt2::namesIn;
using pt2::scalarOf;
using pt2::symHint;
using pt2::unionTag;

struct ExportedProgram::Impl {
    json program; // graph_module.graph
    std::vector<NamedTensor> parameters, buffers;
    std::vector<Input> inputs;
    std::vector<Module> modules;
    std::string root_type = "ExportedProgram";
    bool meta_weights = false; // saved from the meta device: shapes only
    c10::ScalarType exported = c10::kFloat; // the floating-point type it was exported in
    c10::ScalarType run_scalar = c10::kFloat; // the one it runs in now (convert)
    std::vector<std::string> notes; // loadNotes()
    std::size_t kept_casts = 0; // nodes that keep the exported type in a converted run
    std::size_t unnamed_types = 0; // nodes passing the exported type that their source does not name
    std::map<std::string, std::size_t> type_sites; // per source line, the nodes that pass a type
    std::array<bool, 2> autocast_known {false, false}; // whether the file records autocast's types, per rules
    bool source_lines = false; // whether the nodes carry their source (stack_trace), which tells those
    bool eager_known = false; // the nodes carry the source lines eager_release is told from
    bool eager_lifetimes = false; // runs with eager_release (setLifetimes)
    bool source_facts = false; // memledger.export saved what the source says beside it
    int causal_masks_built = 0; // attention calls given the causal mask an unpadded batch skips (memledger_export.json)
    ModelInfo::Checkpointing checkpointing; // memledger_checkpoint.json
    bool causal_mask_skippable = false; // memledger.export could have exported the unpadded batch (causal_mask="skipped")
    std::int64_t sliding_window = 0; // the model's sliding window (tokens), where its attention uses one, else 0
    int unpadded_skips = 0; // masks built that an unpadded batch does not build (eager attention, no sdpa call to count)
    bool strict_trace = false; // traced by TorchDynamo (its stack traces hold torch/_dynamo's frames)
    std::string records_dir; // where its extra records are: "" (the file's program), "prefill/", "decode/"
    bool weights_elsewhere = false; // generation's: its weights are the model program's (shareWeights)
    // generation's programs (generate=True), sharing these weights: prefill and decode
    std::unique_ptr<Generation> generation;

    // The graph's placeholders that are weights: graph name -> (parameter or buffer list, index).
    struct WeightRef {
        bool buffer = false;
        std::size_t index = 0;
    };
    std::vector<std::pair<std::string, WeightRef>> weight_inputs;
    std::vector<std::pair<std::string, at::Tensor>> constants; // tensor constants by graph name
    std::vector<std::string> user_inputs; // graph names of the user inputs, in order
    std::vector<std::pair<std::string, std::string>> buffer_mutations; // graph output name -> buffer name

    struct GradRegion;
    struct Node {
        std::string target;
        std::optional<c10::OperatorHandle> op; // an ATen (or other registered) operator
        const json* inputs = nullptr;
        const json* outputs = nullptr;
        std::string module;
        // Values dropped once this one has run: no later node reads them (the graph's lifetimes), or the eager
        // Python the program was exported from holds them no longer (pt2_lifetimes.h).
        std::vector<std::string> graph_release, eager_release;
        // aten::_assert_tensor_metadata: checks the dtype the program was exported with, which --dtype and
        // --autocast change; it allocates nothing and is not run.
        bool assertion = false;
        // Its type argument names the exported type because the model's source does (x.float(),
        // .to(torch.float32), softmax(..., dtype=torch.float32)): it keeps it in a converted run.
        bool keeps_type = false;
        // Where it passes a type: its source line (pt2::typeSiteOf) and its index among the nodes of that line that
        // pass one; and what CPU and CUDA autocast make of that type where the source takes it from a tensor's
        // (pt2::AutocastTypes, indexed by pt2::AutocastRules).
        std::string type_site;
        std::size_t type_site_index = 0;
        std::array<std::optional<pt2::AutocastType>, 2> autocast_types;
        // torch.ops.higher_order.wrap_with_set_grad_enabled: a `with torch.no_grad():` (or enable_grad) block
        // inside the forward, its nodes a subgraph of their own.
        std::shared_ptr<GradRegion> region;
    };
    // A region's subgraph: its nodes run with autograd on or off; its inputs are the node's tensor arguments after
    // the mode and the graph, in order; its outputs the node's outputs, in order. Each value is dropped after its
    // last reader in the region.
    struct GradRegion {
        bool enabled = false;
        std::vector<std::string> inputs;
        const json* outputs = nullptr;
        std::vector<Node> nodes;
    };
    std::vector<Node> nodes;
    json outputs;

    // The calls of torch.autograd.Function forwards (pt2::autogradFunctionCalls): a training run runs each as one
    // autograd node, as eager does (runFunctionCall).
    struct FunctionCall {
        std::size_t first = 0, last = 0;
        std::string name;
        std::vector<std::string> inputs; // what its nodes read that an earlier node (or input) made
        std::vector<std::string> outputs; // what its nodes make that a later node (or the caller) reads
    };
    std::vector<FunctionCall> function_calls;
    std::vector<int> call_at; // per node: the index of the call its first node starts, or -1

    // A call of a module whose inputs are cast as it begins (castModuleInputs): its nodes first..last (a run of
    // the graph's nodes in the module or inside it), and the names they read that come from outside it.
    struct InputCast {
        std::size_t first = 0, last = 0;
        std::string module;
        std::vector<std::string> reads;
    };
    std::vector<InputCast> input_casts; // by first, an outer call before a call inside it
    std::vector<std::string> input_cast_modules; // the modules input_casts were found for
    std::size_t module_input_casts = 0; // the last run's casts, and their bytes
    std::int64_t module_input_cast_bytes = 0;

    // Nodes first..last: each run (the forward's onNode told first) and the values it was the last to need dropped.
    void runNodes(pt2::Interpreter& env, std::size_t first, std::size_t last, bool eager,
        const std::function<void(const std::string&)>* onNode) const;
    void runNode(const Node& node, pt2::Interpreter& env, bool eager, const std::function<void(const std::string&)>* onNode) const;
    // A grad-mode region: its subgraph run in an interpreter of its own, with autograd as the block sets it.
    void runRegion(const Node& node, pt2::Interpreter& env, const std::function<void(const std::string&)>* onNode) const;
};

namespace {

using Impl = ExportedProgram::Impl;
using Config = std::map<std::string, json>; // a weights or constants config: name -> entry

// Whether a parameter's config entry lets it take gradients: its tensor_meta's requires_grad, true where absent.
bool storedRequiresGrad(const std::map<std::string, json>& config, const std::string& name)
{
    auto it = config.find(name);
    if (it == config.end() || !it->second.is_object() || !it->second.contains("tensor_meta"))
        return true;
    const auto& meta = it->second.at("tensor_meta");
    return !meta.is_object() || !meta.contains("requires_grad") || !meta.at("requires_grad").is_boolean()
        || meta.at("requires_grad").get<bool>();
}

// The weights and constants configs (data/weights/<model>_weights_config.json, ...): absent ones are empty.
// `order`, where given, gets the config's names in the file's order: torch.export.save writes them in the
// exported program's state_dict order, the model's registration order (model.parameters()'s).
Config readConfig(
    caffe2::serialize::PyTorchStreamReader& reader, const std::string& record, std::vector<std::string>* order = nullptr)
{
    Config into;
    if (!reader.hasRecord(record))
        return into;
    auto j = pt2::recordJson(reader, record);
    if (!j.is_object() || !j.contains("config") || !j.at("config").is_object())
        throw std::runtime_error(record + " has no \"config\" object");
    for (auto& [k, v] : j.at("config").items())
        into[k] = v;
    if (order) { // the text again, keeping its keys' order (recordJson has checked its size and depth)
        auto ordered = nlohmann::ordered_json::parse(pt2::recordText(reader, record));
        for (const auto& [k, v] : ordered.at("config").items())
            order->push_back(k);
    }
    return into;
}

// Each parameter's and buffer's place in the model's registration order, as model.parameters() gives them to
// the optimizer (which steps them one by one, each one's temporaries alive while the next is made) and DDP
// buckets them, and its place in the signature, which lists them in the order the graph first reads them. A
// tied tensor stands where the first of its names does; names the state_dict lacks (non-persistent buffers)
// keep the signature's order, after the others.
void numberWeights(Impl& d, const std::vector<std::string>& stateDictOrder)
{
    std::unordered_map<std::string, std::size_t> rank;
    for (std::size_t i = 0; i < stateDictOrder.size(); ++i)
        rank.emplace(stateDictOrder[i], i);
    for (auto* list : {&d.parameters, &d.buffers})
        for (std::size_t i = 0; i < list->size(); ++i) {
            auto& w = (*list)[i];
            w.read = i;
            w.registered = stateDictOrder.size() + i;
            auto earliest = [&](const std::string& name) {
                if (auto it = rank.find(name); it != rank.end())
                    w.registered = std::min(w.registered, it->second);
            };
            earliest(w.name);
            for (const auto& alias : w.aliases)
                earliest(alias);
        }
}

// The order torch.export.load(FILE).module() lists the weights in: it registers each in the signature's order,
// making the modules on its path as it goes, and parameters() lists a module's own before its submodules' (ViT's
// cls_token and position table, on `embeddings`, before `embeddings.patch_embeddings.projection`, which the graph
// reads first). The positions in `list` of its elements, in that order.
std::vector<std::size_t> unliftedOrder(const std::vector<ExportedProgram::NamedTensor>& list)
{
    struct Node {
        std::vector<std::size_t> own;
        std::vector<std::pair<std::string, std::size_t>> children; // name, node index, in the order made
    };
    std::vector<Node> nodes(1);
    std::vector<std::size_t> byRead(list.size());
    for (std::size_t i = 0; i < byRead.size(); ++i)
        byRead[i] = i;
    std::stable_sort(byRead.begin(), byRead.end(), [&](std::size_t a, std::size_t b) { return list[a].read < list[b].read; });
    for (auto i : byRead) {
        std::size_t at = 0;
        const auto& name = list[i].name;
        for (std::size_t start = 0, dot; (dot = name.find('.', start)) != std::string::npos; start = dot + 1) {
            const auto part = name.substr(start, dot - start);
            auto& children = nodes[at].children;
            auto c = std::find_if(children.begin(), children.end(), [&](const auto& ch) { return ch.first == part; });
            if (c == children.end()) {
                nodes.emplace_back();
                nodes[at].children.emplace_back(part, nodes.size() - 1);
                at = nodes.size() - 1;
            } else {
                at = c->second;
            }
        }
        nodes[at].own.push_back(i);
    }
    std::vector<std::size_t> out;
    std::vector<std::size_t> stack {0};
    while (!stack.empty()) {
        const auto n = stack.back();
        stack.pop_back();
        out.insert(out.end(), nodes[n].own.begin(), nodes[n].own.end());
        for (auto c = nodes[n].children.rbegin(); c != nodes[n].children.rend(); ++c)
            stack.push_back(c->second);
    }
    return out;
}

// Puts the parameters in registration order (eager: model.parameters()'s) or in torch.export.load(FILE).module()'s
// (graph), and the buffers in registration order or the signature's, keeping the graph's weight placeholders
// pointing at them.
void orderWeights(Impl& d, bool registered)
{
    auto reorder = [&](std::vector<ExportedProgram::NamedTensor>& list, bool buffer) {
        std::vector<std::size_t> order(list.size());
        for (std::size_t i = 0; i < order.size(); ++i)
            order[i] = i;
        if (!registered && !buffer)
            order = unliftedOrder(list);
        else
            std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
                return registered ? list[a].registered < list[b].registered : list[a].read < list[b].read;
            });
        std::vector<std::size_t> newIndex(list.size());
        std::vector<ExportedProgram::NamedTensor> sorted;
        sorted.reserve(list.size());
        for (auto old : order) {
            newIndex[old] = sorted.size();
            sorted.push_back(std::move(list[old]));
        }
        list = std::move(sorted);
        for (auto& [graphName, ref] : d.weight_inputs)
            if (ref.buffer == buffer)
                ref.index = newIndex[ref.index];
    };
    reorder(d.parameters, false);
    reorder(d.buffers, true);
}

// Tied meta weights. Every meta weight names the same empty record (torch.export.save keys weights by their
// storage, which a meta tensor lacks), so the weights config cannot tell a tied weight from two. The graph can:
// export reads a tied parameter through one placeholder only, and the other names' placeholders are read by no
// node (a tied LM head: p_output_weight feeds both the embedding and the head, p_tok_embeddings_weight nothing).
// A meta parameter no node reads is taken as the storage of the one parameter the graph reads with its dtype,
// sizes and strides, when there is exactly one (else it is a parameter of its own, as an unused one is).
// Returns parameter name -> the read parameter whose storage it is; says each in d.notes.
std::map<std::string, std::string> tiedMetaWeights(Impl& d, const json& signature, const Config& weightConfig)
{
    std::map<std::string, std::string> tiedTo;
    const auto& graph = d.program;
    std::vector<std::string> names;
    std::map<std::string, std::set<std::string>> readIn; // module path -> the names its nodes read
    for (const auto& n : graph.at("nodes")) {
        const auto before = names.size();
        for (const auto& in : n.at("inputs"))
            if (in.contains("arg"))
                namesIn(in.at("arg"), names);
        const auto& meta = n.value("metadata", json::object());
        if (meta.contains("nn_module_stack") && meta.at("nn_module_stack").is_string()) {
            auto& set = readIn[pt2::innermostModule(meta.at("nn_module_stack").get<std::string>(), nullptr).path];
            set.insert(names.begin() + static_cast<std::ptrdiff_t>(before), names.end());
        }
    }
    for (const auto& spec : signature.at("output_specs"))
        namesIn(spec, names);
    const std::set<std::string> read(names.begin(), names.end());
    std::map<std::string, std::vector<std::string>> readByShape; // tensor_meta -> read parameters
    std::map<std::string, std::string> argOf; // parameter -> its placeholder
    std::vector<std::pair<std::string, std::string>> unread; // parameter, tensor_meta
    for (const auto& spec : signature.at("input_specs")) {
        if (!spec.contains("parameter"))
            continue;
        const auto& s = spec.at("parameter");
        auto name = s.at("parameter_name").get<std::string>();
        auto it = weightConfig.find(name);
        if (it == weightConfig.end() || !isMetaEntry(it->second))
            continue;
        auto shape = it->second.at("tensor_meta").dump();
        argOf[name] = s.at("arg").at("name").get<std::string>();
        if (read.count(s.at("arg").at("name").get<std::string>()))
            readByShape[shape].push_back(name);
        else
            unread.emplace_back(name, shape);
    }
    for (const auto& [name, shape] : unread) {
        auto r = readByShape.find(shape);
        if (r == readByShape.end())
            continue;
        // Several read weights of its shape (a GPT whose MLP weight is vocab x d_model): the one that the nodes
        // of its own module read instead (the embedding reads the head's weight).
        std::vector<std::string> candidates = r->second;
        if (candidates.size() > 1) {
            auto dot = name.rfind('.');
            auto owner = readIn.find(dot == std::string::npos ? std::string() : name.substr(0, dot));
            std::vector<std::string> readByOwner;
            if (owner != readIn.end())
                for (const auto& c : candidates)
                    if (owner->second.count(argOf[c]))
                        readByOwner.push_back(c);
            candidates = readByOwner;
        }
        if (candidates.size() == 1) {
            tiedTo[name] = candidates.front();
            d.notes.push_back("the meta weight " + name + " is read by no node of the graph: counted as the storage of "
                + candidates.front() + (r->second.size() == 1 ? ", the one weight of its shape the graph reads"
                                                             : ", the weight of its shape that its module's nodes read")
                + " (a tied weight; a meta tensor has no storage to tell)");
        }
    }
    return tiedTo;
}

// A user input's name, type and per dimension the size it was exported with or the range it may take.
ExportedProgram::Input userInput(const json& root, const json& graph, const json& arg)
{
    ExportedProgram::Input in;
    if (!arg.contains("as_tensor")) {
        in.tensor = false;
        in.name = unionTag(arg, "a user input");
        return in;
    }
    in.name = arg.at("as_tensor").at("name").get<std::string>();
    const auto& values = graph.at("tensor_values");
    if (!values.contains(in.name))
        throw std::runtime_error("the user input " + in.name + " has no entry in the graph's tensor_values");
    const auto& meta = values.at(in.name);
    in.dtype = dtypeName(scalarOf(meta.at("dtype").get<int>()));
    static const std::regex symbol(R"(^Symbol\('([A-Za-z_][A-Za-z0-9_]*)'.*\)$|^([A-Za-z_][A-Za-z0-9_]*)$)");
    for (const auto& s : meta.at("sizes")) {
        ExportedProgram::Dim dim;
        dim.example = symHint(s);
        if (dim.example < 0)
            throw std::runtime_error("the user input " + in.name + " was exported with a negative size ("
                + std::to_string(dim.example) + ")");
        if (s.contains("as_int")) {
            dim.fixed = s.at("as_int").get<std::int64_t>();
        } else if (s.contains("as_expr")) {
            std::smatch m;
            auto expr = s.at("as_expr").value("expr_str", std::string());
            if (expr.size() < 256 && std::regex_match(expr, m, symbol)) {
                dim.symbol = m[1].matched ? m[1].str() : m[2].str();
                const auto& ranges = root.value("range_constraints", json::object());
                if (ranges.contains(dim.symbol)) {
                    const auto& r = ranges.at(dim.symbol);
                    if (r.contains("min_val") && r.at("min_val").is_number())
                        dim.min = r.at("min_val").get<std::int64_t>();
                    if (r.contains("max_val") && r.at("max_val").is_number())
                        dim.max = r.at("max_val").get<std::int64_t>();
                }
            }
        }
        in.dims.push_back(dim);
    }
    return in;
}

// The signature's inputs: parameters and buffers (a tied weight once, under its first name, with its other
// names as aliases), tensor constants, and the user inputs.
void readInputs(Impl& d, caffe2::serialize::PyTorchStreamReader& reader, const json& root, const json& signature,
    const Config& weightConfig, const Config& constantConfig, const std::map<std::string, std::string>& tiedTo)
{
    const auto& graph = d.program;
    std::map<std::string, at::Tensor> byFile; // "data/weights/weight_0" -> the tensor read from it
    auto tensorFor = [&](const Config& config, const std::string& dir, const std::string& name) {
        auto it = config.find(name);
        if (it == config.end())
            throw std::runtime_error("the archive holds no data for " + name
                + " (a program saved with its weights elsewhere is not supported)");
        // A meta weight: a tensor of its own, or the one it is tied to (tiedMetaWeights).
        auto tied = tiedTo.find(name);
        auto file = isMetaEntry(it->second)
            ? "meta|" + (tied == tiedTo.end() ? name : tied->second)
            : dir + it->second.at("path_name").get<std::string>() + "|" + it->second.at("tensor_meta").dump();
        auto f = byFile.find(file);
        if (f != byFile.end())
            return std::make_pair(f->second, true);
        auto t = pt2::readTensor(reader, dir, it->second, name);
        byFile[file] = t;
        return std::make_pair(t, false);
    };
    std::map<const void*, std::pair<bool, std::size_t>> byData;
    for (const auto& spec : signature.at("input_specs")) {
        const auto& kind = unionTag(spec, "an input spec");
        if (kind == "parameter" || kind == "buffer") {
            const bool buffer = kind == "buffer";
            const auto& s = spec.at(kind);
            auto graphName = s.at("arg").at("name").get<std::string>();
            auto name = s.at(buffer ? "buffer_name" : "parameter_name").get<std::string>();
            bool persistent = !buffer || s.value("persistent", true);
            auto [t, seen] = tensorFor(persistent ? weightConfig : constantConfig,
                persistent ? "data/weights/" : "data/constants/", name);
            auto& list = buffer ? d.buffers : d.parameters;
            auto known = byData.find(t.storage().unsafeGetStorageImpl());
            if (seen && known != byData.end()) {
                auto& owner = (known->second.first ? d.buffers : d.parameters)[known->second.second];
                owner.aliases.push_back(name);
                d.weight_inputs.push_back({graphName, {known->second.first, known->second.second}});
                continue;
            }
            // A parameter takes gradients unless the file says it was frozen (requires_grad=False in its tensor_meta,
            // as torch.export.save writes it and torch.export.load(FILE).module() honours it).
            if (!buffer && t.is_floating_point())
                t.set_requires_grad(storedRequiresGrad(weightConfig, name));
            byData[t.storage().unsafeGetStorageImpl()] = {buffer, list.size()};
            d.weight_inputs.push_back({graphName, {buffer, list.size()}});
            list.push_back({name, t, {}});
        } else if (kind == "tensor_constant") {
            const auto& s = spec.at("tensor_constant");
            auto name = s.at("tensor_constant_name").get<std::string>();
            d.constants.emplace_back(
                s.at("arg").at("name").get<std::string>(), tensorFor(constantConfig, "data/constants/", name).first);
        } else if (kind == "user_input") {
            auto in = userInput(root, graph, spec.at("user_input").at("arg"));
            d.user_inputs.push_back(in.name);
            d.inputs.push_back(std::move(in));
        } else {
            throw std::runtime_error("the program has an input of a kind memledger does not run (" + kind + ")");
        }
    }
}

// The signature's outputs: the user's, and the buffers the run updates.
void readOutputs(Impl& d, const json& signature)
{
    for (const auto& spec : signature.at("output_specs")) {
        const auto& kind = unionTag(spec, "an output spec");
        if (kind == "buffer_mutation") {
            const auto& s = spec.at("buffer_mutation");
            d.buffer_mutations.emplace_back(
                s.at("arg").at("name").get<std::string>(), s.at("buffer_mutation_name").get<std::string>());
        } else if (kind == "user_output") {
            d.outputs.push_back(spec.at("user_output").at("arg"));
        } else if (kind != "token") {
            throw std::runtime_error("the program has an output of a kind memledger does not run (" + kind + ")");
        }
    }
}

// The precision it was exported in: its weights', else its float inputs'.
c10::ScalarType exportedType(const Impl& d)
{
    std::optional<c10::ScalarType> found;
    for (const auto* list : {&d.parameters, &d.buffers})
        for (const auto& t : *list)
            if (!found && t.value.is_floating_point())
                found = t.value.scalar_type();
    for (const auto& in : d.inputs)
        if (!found && in.tensor && isFloatingDtype(in.dtype))
            found = scalarOf(d.program.at("tensor_values").at(in.name).at("dtype").get<int>());
    return found.value_or(c10::kFloat);
}

// The module tree as the graph names it (nn_module_stack): each module once, in the order first called, its
// parents just before it (a ModuleList is never called: its type stays "" until buildModuleTree names it).
struct ModuleOrder {
    std::map<std::string, std::string> typeOf;
    std::vector<std::string> order;
    void add(const ExportedProgram::Module& m)
    {
        auto [it, added] = typeOf.emplace(m.path, m.type);
        if (added)
            order.push_back(m.path);
        else if (it->second.empty())
            it->second = m.type;
    }
    void addWithParents(const ExportedProgram::Module& m)
    {
        for (auto dot = m.path.find('.'); dot != std::string::npos; dot = m.path.find('.', dot + 1))
            add({m.path.substr(0, dot), ""});
        add(m);
    }
};

// Operators that a Python library registers (torch.library.custom_op), whose code is Python and so in no
// libtorch, and that compute what an ATen operator computes: the program's call runs that ATen operator, its
// arguments renamed. Each gives the same outputs from the same inputs, and the ATen operator's autograd saves what
// the library's does.
struct LibraryOperator {
    const char* name; // namespace::op, its default overload
    const char* aten; // the ATen operator, its default overload
    std::array<std::pair<const char*, const char*>, 3> arguments; // the library's argument name -> ATen's
};
constexpr LibraryOperator kLibraryOperators[] = {
    // transformers 5's mixture-of-experts layers (integrations/moe.py, grouped_mm_experts_forward): the grouped
    // matmul of the tokens sorted by expert, input [S, K] x weight [E, K, N] with offs the cumulative tokens per
    // expert (int32) -> [S, N], saving input and weight for the backward. transformers calls it where torch's own
    // grouped_mm is not compiled, so under torch.export of float32 or float16 weights; the eager model calls
    // torch's aten::_grouped_mm there, the same matmul.
    {"transformers::grouped_mm_fallback", "aten::_grouped_mm", {{{"input", "self"}, {"weight", "mat2"}, {"offs", "offs"}}}},
};

// Its operator: torch.ops.<namespace>.<op>.<overload> ("default" is the overload without a name) looked up
// once; Python's arithmetic on sizes has none. A library's operator of kLibraryOperators is its ATen operator,
// and *library says which.
std::optional<c10::OperatorHandle> operatorOf(const std::string& target, const LibraryOperator** library)
{
    if (target.rfind("torch.ops.higher_order.", 0) == 0) // torch.cond, while_loop, a region with its own autocast
        throw std::runtime_error("the program calls " + target.substr(23) + " (" + target
            + "), a higher-order operator with a subgraph of its own, which memledger cannot run (it runs ATen "
              "operators and arithmetic on sizes); memledger.capture records any code that runs in PyTorch");
    if (target.rfind("torch.ops.", 0) == 0) {
        auto rest = target.substr(10);
        auto a = rest.find('.');
        auto b = rest.rfind('.');
        if (a == std::string::npos || b == a)
            throw std::runtime_error("an operator memledger cannot name: " + target);
        auto opName = rest.substr(0, a) + "::" + rest.substr(a + 1, b - a - 1);
        auto overload = rest.substr(b + 1);
        if (overload == "default")
            overload.clear();
        auto handle = c10::Dispatcher::singleton().findSchema({opName, overload});
        if (!handle && overload.empty())
            for (const auto& l : kLibraryOperators)
                if (opName == l.name && (handle = c10::Dispatcher::singleton().findSchema({l.aten, ""}))) {
                    *library = &l;
                    break;
                }
        if (!handle && opName.rfind("aten::", 0) != 0) { // a library's operator (torchvision's): load them, once
            loadOperatorLibraries();
            handle = c10::Dispatcher::singleton().findSchema({opName, overload});
            if (!handle)
                throw std::runtime_error("the program calls " + opName + (overload.empty() ? "" : "." + overload)
                    + ", which this libtorch (" + std::string(TORCH_VERSION) + ") does not have: " + missingOperatorAdvice(opName));
        }
        if (!handle)
            throw std::runtime_error("the program calls " + opName + (overload.empty() ? "" : "." + overload)
                + ", which this libtorch (" + std::string(TORCH_VERSION) + ") does not have");
        return *handle;
    }
    if (target.rfind("_operator.", 0) != 0 && target.rfind("math.", 0) != 0 && target.rfind("torch.sym_", 0) != 0
        && target != "builtins.getattr")
        throw std::runtime_error("the program calls " + target
            + ", which memledger cannot run (higher-order and Python operators other than arithmetic on sizes)");
    return std::nullopt;
}

// One node: its operator looked up once, its module, and whether a converted run keeps its type; a grad-mode
// region's subgraph read the same way.
Impl::Node readNode(Impl& d, json& n, ModuleOrder& modules, pt2::LineCasts& castsOnLine)
{
    Impl::Node node;
    node.target = n.at("target").get<std::string>();
    node.inputs = &n.at("inputs");
    node.outputs = &n.at("outputs");
    if (node.target == "torch.ops.higher_order.wrap_with_set_grad_enabled") {
        auto region = std::make_shared<Impl::GradRegion>();
        auto& inputs = n.at("inputs");
        if (inputs.size() < 2 || !inputs[0].at("arg").contains("as_bool") || !inputs[1].at("arg").contains("as_graph"))
            throw std::runtime_error("a wrap_with_set_grad_enabled node without its mode and subgraph (a damaged graph)");
        region->enabled = inputs[0].at("arg").at("as_bool").get<bool>();
        auto& graph = inputs[1].at("arg").at("as_graph").at("graph");
        for (const auto& in : graph.at("inputs"))
            namesIn(in, region->inputs);
        region->outputs = &graph.at("outputs");
        auto& nodes = graph.at("nodes");
        for (auto& sub : nodes)
            region->nodes.push_back(readNode(d, sub, modules, castsOnLine));
        std::vector<std::string> keep;
        namesIn(*region->outputs, keep);
        for (const auto& [name, i] : pt2::graphLifetimes(nodes, keep)) // runRegion runs them with these
            region->nodes[i].graph_release.push_back(name);
        node.region = std::move(region);
    } else {
        const LibraryOperator* library = nullptr;
        node.op = operatorOf(node.target, &library);
        if (library) // the ATen operator's names for the library's arguments
            for (auto& in : n.at("inputs"))
                for (const auto& [theirs, aten] : library->arguments)
                    if (in.value("name", std::string()) == theirs) {
                        in["name"] = aten;
                        break;
                    }
    }
    node.assertion = node.op && node.op->schema().name() == "aten::_assert_tensor_metadata";
    const auto& meta = n.value("metadata", json::object());
    if (meta.contains("nn_module_stack")) {
        std::vector<pt2::ModuleName> stack;
        auto m = pt2::innermostModule(meta.at("nn_module_stack").get<std::string>(), &stack);
        for (const auto& s : stack)
            modules.addWithParents({s.path, s.type});
        node.module = m.path;
    }
    const auto& trace = meta.value("stack_trace", std::string());
    if (!trace.empty())
        d.source_lines = true;
    castsOnLine.see(trace);
    if (trace.find("/torch/_dynamo/") != std::string::npos)
        d.strict_trace = true;
    std::optional<bool> passesExported; // set when it passes a type: whether that is the exported one
    for (const auto& in : n.at("inputs"))
        if (in.contains("arg") && in.at("arg").contains("as_scalar_type"))
            passesExported = passesExported.value_or(false)
                || scalarOf(in.at("arg").at("as_scalar_type").get<int>()) == d.exported;
    // Every cast that passes a type is counted on its line (namesTypeOnPurpose), so that the k-th cast node of a
    // line is its k-th call; only one that passes the exported type can keep it.
    if (passesExported && !node.assertion) {
        const bool named = pt2::namesTypeOnPurpose(n, d.exported, castsOnLine);
        node.keeps_type = named && *passesExported;
        d.kept_casts += node.keeps_type ? 1 : 0;
        d.unnamed_types += !named && *passesExported ? 1 : 0;
        node.type_site = pt2::typeSiteOf(n);
        if (!node.type_site.empty())
            node.type_site_index = d.type_sites[node.type_site]++;
    }
    return node;
}

// The nodes, in order (readNode).
void readNodes(Impl& d, ModuleOrder& modules)
{
    pt2::LineCasts castsOnLine;
    for (auto& n : d.program.at("nodes"))
        d.nodes.push_back(readNode(d, n, modules, castsOnLine));
}

// A cast the source names that cost nothing at export (x.float() of a float32 x returns x itself) leaves one name
// for two tensors: export's tracer gives every later read of x the cast's name. Run in another type they differ
// again: a read that means x reads x: a type_as's `other` (only its type is read), and any read outside the module
// that made the cast, as a residual `x + attention(norm(x))` around an RMSNorm that computes in float32 (Llama's
// `self._norm(x.float()).type_as(x)`); reads inside that module take the cast.
void separateKeptCasts(Impl& d)
{
    struct Alias {
        std::string input, module;
    };
    std::unordered_map<std::string, Alias> aliasOf; // a kept cast's output -> its input
    const auto& values = d.program.at("tensor_values");
    for (std::size_t i = 0; i < d.nodes.size(); ++i) {
        auto& node = d.nodes[i];
        auto& inputs = d.program.at("nodes").at(i).at("inputs");
        for (auto& in : inputs) {
            if (!in.contains("arg") || !in.at("arg").contains("as_tensor"))
                continue;
            auto& name = in.at("arg").at("as_tensor").at("name");
            auto a = aliasOf.find(name.get<std::string>());
            if (a == aliasOf.end())
                continue;
            const bool typeOnly = node.target == "torch.ops.aten.type_as.default" && in.value("name", "") == "other";
            if (typeOnly || !isInsideModule(node.module, a->second.module))
                name = a->second.input;
        }
        if (!node.keeps_type || node.target.rfind("torch.ops.aten.to.", 0) != 0 || node.outputs->size() != 1
            || !node.outputs->front().contains("as_tensor"))
            continue;
        for (const auto& in : inputs) {
            if (in.value("name", "") != "self" || !in.at("arg").contains("as_tensor"))
                continue;
            auto input = in.at("arg").at("as_tensor").at("name").get<std::string>();
            auto output = node.outputs->front().at("as_tensor").at("name").get<std::string>();
            if (values.contains(input) && values.contains(output)
                && values.at(input).at("dtype") == values.at(output).at("dtype"))
                aliasOf[output] = {input, node.module};
        }
    }
}

// What CPU and CUDA autocast make of the types each node passes (pt2::AutocastTypes), a region's nodes too.
void markAutocastTypes(Impl& d, std::vector<Impl::Node>& nodes, const pt2::AutocastTypes& types)
{
    for (auto& node : nodes) {
        if (node.region)
            markAutocastTypes(d, node.region->nodes, types);
        if (node.type_site.empty())
            continue;
        for (auto rules : {pt2::AutocastRules::Cpu, pt2::AutocastRules::Cuda})
            node.autocast_types[static_cast<std::size_t>(rules)]
                = types.at(rules, node.type_site, node.type_site_index, d.type_sites.at(node.type_site));
    }
}

// An extra file memledger.export saved beside the program (torch.export.save's extra_files, under extra/): nullopt
// when the archive has none, or one memledger cannot read.
// `dir`: "" for the program the file opens with, "prefill/" for generation's (python/memledger/generation.py).
std::optional<json> extraRecord(caffe2::serialize::PyTorchStreamReader& reader, const std::string& dir, const std::string& file)
{
    const std::string name = "extra/" + dir + file;
    if (!reader.hasRecord(name))
        return std::nullopt;
    try {
        return pt2::recordJson(reader, name);
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

// What memledger.export read from the model's source files (python/memledger/source_facts.py, source_facts.RECORD):
// without it the stack traces alone tell eager lifetimes.
std::optional<json> sourceFacts(caffe2::serialize::PyTorchStreamReader& reader, const std::string& dir)
{
    return extraRecord(reader, dir, "memledger_sources.json");
}

// What memledger.export recorded of autocast and the types the forward passes (python/memledger/autocast_types.py,
// autocast_types.RECORD).
std::optional<json> autocastRecord(caffe2::serialize::PyTorchStreamReader& reader, const std::string& dir)
{
    return extraRecord(reader, dir, "memledger_autocast.json");
}

// What memledger.export said of the export itself (python/memledger/hf_masks.py, hf_masks.RECORD): the attention
// calls of a transformers model that take the causal mask eager builds only for a padded batch. A record that is not
// what it writes says nothing.
void readExportRecord(Impl& d, caffe2::serialize::PyTorchStreamReader& reader)
{
    const auto record = extraRecord(reader, d.records_dir, "memledger_export.json");
    if (!record || !record->is_object())
        return;
    const auto version = record->find("version");
    const auto mode = record->find("causal_mask");
    const auto calls = record->find("masked_attention_calls");
    if (version == record->end() || *version != 1 || mode == record->end() || *mode != "built" || calls == record->end()
        || !calls->is_number_integer())
        return;
    d.causal_masks_built = static_cast<int>(std::clamp<std::int64_t>(calls->get<std::int64_t>(), 0, 1 << 20));
    const auto skippable = record->find("skippable");
    d.causal_mask_skippable = skippable != record->end() && skippable->is_boolean() && skippable->get<bool>();
    const auto skips = record->find("unpadded_skips");
    if (skips != record->end() && skips->is_number_integer())
        d.unpadded_skips = static_cast<int>(std::clamp<std::int64_t>(skips->get<std::int64_t>(), 0, 1 << 20));
    const auto window = record->find("sliding_window");
    if (window != record->end() && window->is_number_integer() && window->get<std::int64_t>() > 0)
        d.sliding_window = window->get<std::int64_t>();
}

// The array `key` of a record memledger.export wrote in its version 1 (extraRecord); nullptr for anything else. It
// points into `record`, which the caller keeps.
const json* recordArray(const std::optional<json>& record, const char* key)
{
    if (!record || !record->is_object() || record->value("version", 0) != 1)
        return nullptr;
    const auto it = record->find(key);
    return it != record->end() && it->is_array() ? &*it : nullptr;
}

// The activation checkpointing memledger.export recorded (python/memledger/checkpoint_record.py, RECORD): the
// modules, how they run and who set them up. A record that is not what it writes says nothing.
void readCheckpointRecord(Impl& d, caffe2::serialize::PyTorchStreamReader& reader)
{
    const auto record = extraRecord(reader, d.records_dir, "memledger_checkpoint.json");
    const json* modules = recordArray(record, "modules");
    if (!modules)
        return;
    ModelInfo::Checkpointing c;
    for (const auto& m : *modules)
        if (m.is_string())
            c.modules.push_back(m.get<std::string>());
    const auto impl = record->value("implementation", std::string());
    if (c.modules.empty() || (impl != "reentrant" && impl != "non-reentrant"))
        return;
    c.implementation = impl;
    c.source = record->value("source", std::string("memledger.export"));
    c.offload = record->value("offload", false);
    c.context_fn = record->value("context_fn", false);
    d.checkpointing = std::move(c);
}

// Where memledger.export found the ranges of the inputs' dimensions come from (python/memledger/export_program.py,
// RANGES_RECORD): the model's line behind a bound. A record that is not what it writes says nothing.
void readRangeRecord(Impl& d, caffe2::serialize::PyTorchStreamReader& reader)
{
    const auto record = extraRecord(reader, d.records_dir, "memledger_ranges.json"); // held: recordArray points into it
    const json* ranges = recordArray(record, "ranges");
    if (!ranges)
        return;
    for (const auto& r : *ranges) {
        if (!r.is_object() || !r.contains("input") || !r.at("input").is_string() || !r.contains("dim")
            || !r.at("dim").is_number_integer() || !r.contains("why") || !r.at("why").is_string())
            continue;
        const auto name = r.at("input").get<std::string>();
        const auto dim = r.at("dim").get<std::int64_t>();
        for (auto& in : d.inputs)
            if (in.name == name && dim >= 0 && dim < static_cast<std::int64_t>(in.dims.size()))
                in.dims[static_cast<std::size_t>(dim)].why = r.at("why").get<std::string>().substr(0, 1000);
    }
}

// When each value is dropped, for the graph's lifetimes and for eager Python's (pt2_lifetimes.h). The program's
// outputs and the buffers it mutates are read by the caller, and never dropped. Returns the graph's lifetimes.
pt2::ValueEnds markReleases(Impl& d, const std::optional<json>& sources)
{
    std::vector<std::string> keep;
    namesIn(d.outputs, keep);
    for (const auto& [output, buffer] : d.buffer_mutations)
        keep.push_back(output);
    const auto& nodes = d.program.at("nodes");
    const auto graph = pt2::graphLifetimes(nodes, keep);
    for (const auto& [name, i] : graph)
        d.nodes[i].graph_release.push_back(name);
    if (!pt2::hasSourceLines(nodes))
        return graph;
    d.source_facts = sources.has_value();
    for (const auto& [name, i] : pt2::eagerLifetimes(nodes, graph, sources ? &*sources : nullptr))
        d.nodes[i].eager_release.push_back(name);
    d.eager_known = d.eager_lifetimes = true;
    return graph;
}

// The calls of torch.autograd.Function forwards, each with what it reads from before it and what is read of it after:
// a value it makes that the graph drops after its last node, or never (an output of the program), is read later.
void markFunctionCalls(Impl& d, const pt2::ValueEnds& graphEnd)
{
    const auto& nodes = d.program.at("nodes");
    d.call_at.assign(d.nodes.size(), -1);
    for (const auto& c : pt2::autogradFunctionCalls(nodes)) {
        Impl::FunctionCall call {c.first, c.last, c.name, {}, {}};
        std::set<std::string> made, read;
        for (auto i = c.first; i <= c.last; ++i) {
            std::vector<std::string> in, out;
            for (const auto& arg : nodes.at(i).at("inputs"))
                if (arg.contains("arg"))
                    namesIn(arg.at("arg"), in);
            for (const auto& name : in)
                if (!made.count(name) && read.insert(name).second)
                    call.inputs.push_back(name);
            namesIn(nodes.at(i).at("outputs"), out);
            for (const auto& name : out) {
                made.insert(name);
                auto end = graphEnd.find(name);
                if (end == graphEnd.end() || end->second > c.last)
                    call.outputs.push_back(name);
            }
        }
        d.call_at[c.first] = static_cast<int>(d.function_calls.size());
        d.function_calls.push_back(std::move(call));
    }
}

// The module tree: the modules the nodes name, those that own a weight but call no op of their own (their
// children do), and every parent; parents before children.
void buildModuleTree(Impl& d, ModuleOrder& modules)
{
    if (modules.typeOf.count("") && !modules.typeOf[""].empty())
        d.root_type = modules.typeOf[""];
    auto addWithParents = [&](std::string path) {
        std::vector<std::string> chain;
        while (true) {
            chain.push_back(path);
            if (path.empty())
                break;
            auto dot = path.rfind('.');
            path = dot == std::string::npos ? "" : path.substr(0, dot);
        }
        for (auto it = chain.rbegin(); it != chain.rend(); ++it)
            if (!modules.typeOf.count(*it))
                modules.add({*it, it == chain.rbegin() && it->empty() ? d.root_type : "Module"});
    };
    addWithParents("");
    for (const auto& list : {&d.parameters, &d.buffers})
        for (const auto& t : *list) {
            auto dot = t.name.rfind('.');
            addWithParents(dot == std::string::npos ? "" : t.name.substr(0, dot));
        }
    // A module that no node called is a container: a ModuleList where its children are numbered.
    for (auto& [path, type] : modules.typeOf) {
        if (!type.empty() && type != "Module")
            continue;
        if (path.empty()) {
            type = d.root_type;
            continue;
        }
        bool numbered = false, named = false;
        for (const auto& [child, t] : modules.typeOf)
            if (child.size() > path.size() + 1 && child.compare(0, path.size() + 1, path + ".") == 0
                && child.find('.', path.size() + 1) == std::string::npos) {
                auto last = child.substr(path.size() + 1);
                (last.find_first_not_of("0123456789") == std::string::npos ? numbered : named) = true;
            }
        type = numbered && !named ? "ModuleList" : "Module";
    }
    for (const auto& path : modules.order)
        d.modules.push_back({path, modules.typeOf[path]});
    // By depth, then as first seen.
    std::stable_sort(d.modules.begin(), d.modules.end(), [](const ExportedProgram::Module& a, const ExportedProgram::Module& b) {
        auto depth = [](const std::string& p) { return p.empty() ? 0 : 1 + std::count(p.begin(), p.end(), '.'); };
        return depth(a.path) < depth(b.path);
    });
}

} // namespace

ExportedProgram::ExportedProgram()
    : d_(std::make_unique<Impl>())
{
}
ExportedProgram::~ExportedProgram() = default;

std::unique_ptr<ExportedProgram> ExportedProgram::load(caffe2::serialize::PyTorchStreamReader& reader)
{
    auto p = loadProgram(reader, "model", false);
    readGeneration(*p, reader);
    return p;
}

std::unique_ptr<ExportedProgram> ExportedProgram::loadProgram(
    caffe2::serialize::PyTorchStreamReader& reader, const std::string& wanted, bool weightsElsewhere)
{
    auto models = pt2::modelJsonRecords(reader);
    if (models.empty())
        throw std::runtime_error("the archive has no models/*.json (not a torch.export program)");
    const std::string named = "models/" + wanted + ".json";
    if (std::find(models.begin(), models.end(), named) != models.end())
        models.insert(models.begin(), named);
    else if (weightsElsewhere)
        throw std::runtime_error("the archive has no " + named);
    std::unique_ptr<ExportedProgram> p(new ExportedProgram());
    auto& d = *p->d_;
    if (weightsElsewhere) {
        d.records_dir = wanted + "/";
        d.weights_elsewhere = true;
    }
    json root = pt2::recordJson(reader, models.front());
    try {
        pt2::checkProgram(root);
    } catch (const std::exception& e) {
        throw std::runtime_error(models.front() + ": " + e.what());
    }
    auto& gm = root.at("graph_module");
    d.program = std::move(gm.at("graph"));
    const auto& signature = gm.at("signature");

    // Weights and constants: the same file for two names is one tensor (a tied weight).
    auto modelName = models.front().substr(7, models.front().size() - 12);
    std::vector<std::string> stateDictOrder;
    const auto weightConfig = readConfig(reader, "data/weights/" + modelName + "_weights_config.json", &stateDictOrder);
    const auto constantConfig = readConfig(reader, "data/constants/" + modelName + "_constants_config.json");
    // Weights saved on the meta device are made on it, as shapes (never memory): the program then runs on meta.
    // (A program whose weights are another's, saved as shapes, takes that one's: shareWeights.)
    for (const auto* config : {&weightConfig, &constantConfig})
        for (const auto& [name, entry] : *config)
            if (isMetaEntry(entry) && !weightsElsewhere)
                d.meta_weights = true;
    if (d.meta_weights) {
        if (!metaRunsSupported())
            throw std::runtime_error("its weights are meta tensors (saved from the meta device), which need memledger's "
                                     "PyTorch 2 build to run on the meta device");
        installMetaDevice(); // their storages are the recorder's meta blocks, as weights moved to meta are
    }
    const auto tiedTo = d.meta_weights ? tiedMetaWeights(d, signature, weightConfig) : std::map<std::string, std::string>();
    readInputs(d, reader, root, signature, weightConfig, constantConfig, tiedTo);
    numberWeights(d, stateDictOrder);
    orderWeights(d, true); // eager lifetimes are the default (setLifetimes)
    readOutputs(d, signature);
    d.exported = d.run_scalar = exportedType(d);
    ModuleOrder modules;
    readNodes(d, modules);
    separateKeptCasts(d);
    markFunctionCalls(d, markReleases(d, sourceFacts(reader, d.records_dir)));
    readExportRecord(d, reader);
    readCheckpointRecord(d, reader);
    readRangeRecord(d, reader);
    const pt2::AutocastTypes autocastTypes(autocastRecord(reader, d.records_dir));
    for (auto rules : {pt2::AutocastRules::Cpu, pt2::AutocastRules::Cuda})
        d.autocast_known[static_cast<std::size_t>(rules)] = autocastTypes.known(rules);
    markAutocastTypes(d, d.nodes, autocastTypes);
    buildModuleTree(d, modules);
    if (d.meta_weights) // a program saved with some weights on meta and some not runs on meta alone: all there
        p->convert(std::nullopt, c10::Device(c10::kMeta));
    return p;
}

// The programs memledger.export(..., generate=True) saved beside the model's (python/memledger/generation.py,
// RECORD): a record that is not what it writes says nothing; programs it names that cannot be read make the file
// unreadable, as its own program would.
void ExportedProgram::readGeneration(ExportedProgram& p, caffe2::serialize::PyTorchStreamReader& reader)
{
    const auto record = extraRecord(reader, "", "memledger_generate.json");
    const json* programs = recordArray(record, "programs");
    auto holds = [&](const char* name) {
        return programs && std::find(programs->begin(), programs->end(), json(name)) != programs->end();
    };
    if (!holds("prefill") || !holds("decode") || record->value("cache", std::string()) != "dynamic")
        return;
    auto g = std::make_unique<Generation>();
    auto number = [&](const char* key) {
        const auto it = record->find(key);
        return it != record->end() && it->is_number_integer() ? std::clamp<std::int64_t>(it->get<std::int64_t>(), 0, 1 << 30)
                                                              : std::int64_t {0};
    };
    g->facts.cache = "dynamic";
    g->facts.layers = static_cast<int>(number("layers"));
    g->facts.kv_heads = static_cast<int>(number("kv_heads"));
    g->facts.head_dim = static_cast<int>(number("head_dim"));
    g->facts.attention_heads = static_cast<int>(number("attention_heads"));
    g->facts.vocab = number("vocab");
    g->position_ids = record->value("position_ids", false);
    const std::size_t tokenInputs = g->position_ids ? 2 : 1;
    const bool holdsStatic = holds("static_prefill") && holds("static_decode");
    if (!holdsStatic) {
        const auto why = record->find("static_reason");
        g->facts.static_reason = why != record->end() && why->is_string()
            ? why->get<std::string>()
            : "the file was saved before memledger.export wrote the static cache's programs: export it again";
    }
    // each program, its inputs (where their count is known) and its outputs: the logits and the cache, or the
    // logits only (static_decode writes the cache it takes)
    const auto cacheValues = static_cast<std::size_t>(2 * std::max(0, g->facts.layers));
    struct Slot {
        const char* name;
        std::unique_ptr<ExportedProgram>* program;
        std::size_t inputs, outputs;
    };
    std::vector<Slot> slots {{"prefill", &g->prefill, tokenInputs, 1 + cacheValues},
        {"decode", &g->decode, tokenInputs + cacheValues, 1 + cacheValues}};
    if (holdsStatic) {
        slots.push_back({"static_prefill", &g->static_prefill, tokenInputs + 1, 1 + cacheValues});
        slots.push_back({"static_decode", &g->static_decode, tokenInputs + 1 + cacheValues, 1});
    }
    for (const auto& [name, slot, inputs, outputs] : slots) {
        try {
            *slot = loadProgram(reader, name, true);
            (*slot)->shareWeights(p);
        } catch (const std::exception& e) {
            throw std::runtime_error(std::string("its ") + name + " program (memledger.export's generate=True): " + e.what());
        }
        const auto returned = (*slot)->d_->outputs.size();
        if (g->facts.layers <= 0 || returned != outputs)
            throw std::runtime_error(std::string("its ") + name + " program returns " + std::to_string(returned)
                + " values where " + (outputs == 1 ? std::string("the logits") : "the logits and the keys and values of "
                + std::to_string(g->facts.layers) + " layers") + " were recorded");
        if ((*slot)->d_->inputs.size() != inputs)
            throw std::runtime_error(std::string("its ") + name + " program takes " + std::to_string((*slot)->d_->inputs.size())
                + " inputs where " + std::to_string(inputs) + " were recorded (the tokens"
                + (g->position_ids ? ", their positions" : "") + " and a cache of " + std::to_string(g->facts.layers)
                + " layers)");
    }
    g->facts.static_cache = holdsStatic;
    // the longest sequence: the prompt's bound (a position table's rows) and the cache's, whichever is shorter
    std::int64_t longest = INT64_MAX;
    if (const auto& past = g->decode->d_->inputs.back().dims; past.size() == 4 && past[2].max < INT64_MAX)
        longest = past[2].max + 1;
    if (const auto& prompt = g->prefill->d_->inputs.front().dims; prompt.size() == 2 && prompt[1].max < INT64_MAX)
        longest = std::min(longest, prompt[1].max);
    g->facts.max_tokens = longest < INT64_MAX ? longest : 0;
    p.d_->generation = std::move(g);
}

void ExportedProgram::shareWeights(const ExportedProgram& from)
{
    std::unordered_map<std::string, const at::Tensor*> byName;
    for (const auto* list : {&from.d_->parameters, &from.d_->buffers})
        for (const auto& t : *list) {
            byName.emplace(t.name, &t.value);
            for (const auto& alias : t.aliases)
                byName.emplace(alias, &t.value);
        }
    for (auto* list : {&d_->parameters, &d_->buffers})
        for (auto& t : *list) {
            const auto it = byName.find(t.name);
            if (it == byName.end())
                throw std::runtime_error("its weight " + t.name + " is not the model program's");
            if (it->second->sizes() != t.value.sizes())
                throw std::runtime_error("its weight " + t.name + " has another shape than the model program's");
            t.value = *it->second;
        }
    d_->run_scalar = from.d_->run_scalar;
}

ExportedProgram::Generation* ExportedProgram::generation()
{
    return d_->generation.get();
}

std::vector<ExportedProgram::NamedTensor>& ExportedProgram::parameters()
{
    return d_->parameters;
}
std::vector<ExportedProgram::NamedTensor>& ExportedProgram::buffers()
{
    return d_->buffers;
}
const std::vector<ExportedProgram::Input>& ExportedProgram::inputs() const
{
    return d_->inputs;
}
const std::vector<ExportedProgram::Module>& ExportedProgram::modules() const
{
    return d_->modules;
}
std::string ExportedProgram::rootType() const
{
    return d_->root_type;
}

void ExportedProgram::checkInputs(const std::vector<at::Tensor>& values) const
{
    for (std::size_t i = 0; i < values.size() && i < d_->inputs.size(); ++i) {
        const auto& in = d_->inputs[i];
        if (!in.tensor)
            continue;
        const auto& t = values[i];
        if (static_cast<std::size_t>(t.dim()) != in.dims.size())
            throw RunError("input " + std::to_string(i + 1) + " (" + in.name + ") has " + std::to_string(t.dim())
                + " dimensions; the program was exported for " + std::to_string(in.dims.size()));
        for (std::size_t k = 0; k < in.dims.size(); ++k) {
            const auto& dim = in.dims[k];
            auto size = t.size(static_cast<std::int64_t>(k));
            auto where = "input " + std::to_string(i + 1) + " (" + in.name + "): dimension " + std::to_string(k) + " is "
                + std::to_string(size);
            if (dim.fixed && *dim.fixed != size)
                throw RunError(where + ", but the program was exported with it fixed at " + std::to_string(*dim.fixed)
                    + " (export it with a dynamic dimension to vary it)");
            if (!dim.symbol.empty() && (size < dim.min || size > dim.max))
                throw RunError(where + ", outside the range " + std::to_string(dim.min) + ".."
                    + (dim.max == INT64_MAX ? std::string("inf") : std::to_string(dim.max))
                    + " the program was exported with");
        }
    }
}

void Impl::runNodes(pt2::Interpreter& env, std::size_t first, std::size_t last, bool eager,
    const std::function<void(const std::string&)>* onNode) const
{
    for (auto i = first; i <= last; ++i)
        runNode(nodes[i], env, eager, onNode);
}

void Impl::runNode(const Node& node, pt2::Interpreter& env, bool eager, const std::function<void(const std::string&)>* onNode) const
{
    if (node.region) {
        runRegion(node, env, onNode);
    } else if (!node.assertion) {
        if (onNode)
            (*onNode)(node.module);
        env.keep_type = node.keeps_type;
        const auto* type = env.autocast_rules ? &node.autocast_types[static_cast<std::size_t>(*env.autocast_rules)] : nullptr;
        env.autocast_type = type && *type ? &**type : nullptr;
        if (node.op)
            env.call(*node.op, *node.inputs, *node.outputs);
        else
            env.callPython(node.target, *node.inputs, *node.outputs);
    }
    for (const auto& name : eager ? node.eager_release : node.graph_release)
        env.values.erase(name);
}

void Impl::runRegion(const Node& node, pt2::Interpreter& env, const std::function<void(const std::string&)>* onNode) const
{
    const auto& region = *node.region;
    auto inside = env.fresh();
    for (std::size_t k = 0; k < region.inputs.size() && k + 2 < node.inputs->size(); ++k)
        inside.values[region.inputs[k]] = env.value(node.inputs->at(k + 2).at("arg"));
    {
        torch::AutoGradMode mode(region.enabled);
        for (const auto& sub : region.nodes)
            runNode(sub, inside, false, onNode);
    }
    // the node's outputs, one per output of the subgraph (as_tensor each, or one as_tensors of them all)
    std::vector<c10::IValue> results;
    for (const auto& out : *region.outputs)
        results.push_back(inside.value(out));
    const auto& outputs = *node.outputs;
    if (outputs.size() == 1 && outputs.front().contains("as_tensors")) {
        c10::List<at::Tensor> list;
        for (const auto& r : results)
            list.push_back(r.toTensor());
        env.bind(outputs.front(), list);
        return;
    }
    for (std::size_t i = 0; i < outputs.size() && i < results.size(); ++i)
        env.bind(outputs[i], results[i]);
}

namespace {

// One call of a torch.autograd.Function's forward, as eager Python runs `GeLUFunction.apply(x)`: an op of the
// function's name around its nodes, which run under no_grad, so that none of their own autograd nodes saves
// anything; the call's outputs get one autograd node ("GeLUFunctionBackward"), which keeps the tensors the call read
// (what ctx.save_for_backward keeps of most such functions: their inputs). Its backward runs the nodes again from
// them with gradients and takes the gradients of their outputs: the function's own backward is Python the program
// does not hold, and this one allocates what autograd's backward of its nodes does.
class FunctionCallBackward : public torch::autograd::Node {
public:
    FunctionCallBackward(const Impl& program, std::size_t call)
        : program_(program)
        , call_(call)
        , name_(program.function_calls[call].name + "Backward")
    {
    }

    std::string name() const override { return name_; }
    void release_variables() override { saved_.clear(); }

    // The call run forward in `env`: its outputs bound there to tensors whose gradient this node (`self`) takes.
    void forward(const compat::NodePtr& self, pt2::Interpreter& env, bool eager,
        const std::function<void(const std::string&)>* onNode)
    {
        const auto& call = program_.function_calls[call_];
        scope_ = env.fresh();
        std::vector<at::Tensor> tensors;
        for (const auto& name : call.inputs) {
            const auto& v = env.get(name);
            if (v.isTensor()) {
                inputs_.push_back(name);
                tensors.push_back(v.toTensor());
            } else {
                scope_.values[name] = v;
            }
        }
        set_next_edges(torch::autograd::collect_next_edges(tensors));
        for (const auto& t : tensors) {
            saved_.emplace_back(t, false);
            differentiable_.push_back(t.requires_grad() && isDifferentiableType(t.scalar_type()));
        }
        {
            torch::NoGradGuard noGrad;
            program_.runNodes(env, call.first, call.last, eager, onNode);
        }
        if (std::none_of(differentiable_.begin(), differentiable_.end(), [](bool d) { return d; }))
            return; // nothing to differentiate: outputs that take no gradient, as the Function's would be
        const auto& values = program_.program.at("tensor_values");
        for (const auto& name : call.outputs) {
            if (!values.contains(name))
                continue; // a size, bound as it was made
            auto out = env.get(name).toTensor();
            if (!isDifferentiableType(out.scalar_type()))
                continue;
            // a tensor of its own (sharing the storage) where the output is an input or a view of one, as
            // autograd's custom functions make them
            out = out.detach();
            torch::autograd::set_history(out, self);
            env.values[name] = out;
            outputs_.push_back(name);
        }
    }

    torch::autograd::variable_list apply(torch::autograd::variable_list&& gradients) override
    {
        const auto& call = program_.function_calls[call_];
        auto env = scope_;
        std::vector<at::Tensor> wrt;
        std::vector<std::size_t> wrtIndex;
        for (std::size_t i = 0; i < saved_.size(); ++i) {
            auto t = saved_[i].unpack().detach();
            if (differentiable_[i] && task_should_compute_output(i)) {
                t.requires_grad_(true);
                wrt.push_back(t);
                wrtIndex.push_back(i);
            }
            env.values[inputs_[i]] = t;
        }
        torch::autograd::variable_list grads(saved_.size());
        if (wrt.empty())
            return grads;
        std::vector<at::Tensor> outputs, incoming;
        {
            torch::AutoGradMode withGradients(true);
            program_.runNodes(env, call.first, call.last, false, nullptr);
            for (std::size_t j = 0; j < outputs_.size() && j < gradients.size(); ++j) {
                auto out = env.get(outputs_[j]).toTensor();
                if (gradients[j].defined() && out.requires_grad()) {
                    outputs.push_back(out);
                    incoming.push_back(gradients[j]);
                }
            }
            env.values.clear(); // what the outputs' autograd nodes saved lives on in them; the rest goes now
        }
        if (outputs.empty())
            return grads;
        auto taken = torch::autograd::grad(outputs, wrt, incoming, false, false, true);
        for (std::size_t k = 0; k < taken.size(); ++k)
            grads[wrtIndex[k]] = taken[k];
        return grads;
    }

private:
    static bool isDifferentiableType(c10::ScalarType t) { return at::isFloatingType(t) || at::isComplexType(t); }

    const Impl& program_;
    std::size_t call_;
    std::string name_;
    std::vector<std::string> inputs_; // the tensors the call read, by graph name (saved_, differentiable_)
    std::vector<torch::autograd::SavedVariable> saved_;
    std::vector<bool> differentiable_;
    pt2::Interpreter scope_; // the forward's run (device, types) and the sizes the call read
    std::vector<std::string> outputs_; // its outputs that take a gradient, in the order of this node's inputs
};

// The call, in a training run: an op of the function's name (as PyTorch's profiler shows Function.apply), at the
// module that calls it, whose sequence number is its backward node's, so that the backward is that module's too.
void runFunctionCall(const Impl& d, std::size_t index, pt2::Interpreter& env, const std::function<void(const std::string&)>* onNode)
{
    const auto& call = d.function_calls[index];
    compat::NodePtr node = compat::makeNode<FunctionCallBackward>(d, index);
    if (onNode)
        (*onNode)(d.nodes[call.first].module);
    at::RecordFunction op(at::RecordScope::FUNCTION);
    if (op.isActive())
        op.before(call.name.c_str(), static_cast<std::int64_t>(node->sequence_nr()));
    static_cast<FunctionCallBackward&>(*node).forward(node, env, d.eager_lifetimes, onNode);
}

} // namespace

void ExportedProgram::castModuleInputs(std::vector<std::string> modules)
{
    auto& d = *d_;
    if (modules == d.input_cast_modules)
        return; // the calls found for them already
    d.input_cast_modules = modules;
    d.input_casts.clear();
    if (modules.empty())
        return;
    // A weight is the module's own when one of its names lies inside it.
    std::unordered_map<std::string, std::vector<std::string>> weightNames;
    for (const auto& [graphName, ref] : d.weight_inputs) {
        const auto& w = (ref.buffer ? d.buffers : d.parameters)[ref.index];
        auto& names = weightNames[graphName];
        names.push_back(w.name);
        names.insert(names.end(), w.aliases.begin(), w.aliases.end());
    }
    std::set<std::string> constants;
    for (const auto& [name, t] : d.constants)
        constants.insert(name);
    for (const auto& module : modules) {
        if (module.empty())
            continue; // the root's inputs are the run's own
        for (std::size_t i = 0; i < d.nodes.size();) {
            if (!isInsideModule(d.nodes[i].module, module)) {
                ++i;
                continue;
            }
            Impl::InputCast c;
            c.first = i;
            c.module = module;
            std::set<std::string> made, seen;
            for (; i < d.nodes.size() && isInsideModule(d.nodes[i].module, module); ++i) {
                std::vector<std::string> read;
                for (const auto& in : *d.nodes[i].inputs)
                    if (in.is_object() && in.contains("arg"))
                        namesIn(in.at("arg"), read);
                for (const auto& name : read) {
                    if (made.count(name) || constants.count(name) || !seen.insert(name).second)
                        continue;
                    auto w = weightNames.find(name);
                    if (w != weightNames.end()
                        && std::any_of(w->second.begin(), w->second.end(), [&](const std::string& n) { return isInsideModule(n, module); }))
                        continue;
                    c.reads.push_back(name);
                }
                std::vector<std::string> out;
                namesIn(*d.nodes[i].outputs, out);
                made.insert(out.begin(), out.end());
            }
            c.last = i - 1;
            d.input_casts.push_back(std::move(c));
        }
    }
    std::stable_sort(d.input_casts.begin(), d.input_casts.end(), [](const Impl::InputCast& a, const Impl::InputCast& b) {
        return a.first != b.first ? a.first < b.first : a.last > b.last;
    });
}

std::size_t ExportedProgram::moduleInputCasts() const
{
    return d_->module_input_casts;
}

std::int64_t ExportedProgram::moduleInputCastBytes() const
{
    return d_->module_input_cast_bytes;
}

c10::IValue ExportedProgram::run(std::vector<at::Tensor> inputs, const std::function<void(const std::string&)>& onNode)
{
    auto& d = *d_;
    pt2::Interpreter env;
    env.exported = d.exported;
    env.runs = d.run_scalar;
    if (!inputs.empty())
        env.device = inputs.front().device();
    else if (!d.parameters.empty())
        env.device = d.parameters.front().value.device();
    // under autocast: CUDA's rules on the meta device (autocast_emulation.h) and a GPU, the CPU's on the CPU
    if (env.device.is_meta()) {
        if (auto lower = autocastEmulationType()) {
            env.autocast_rules = pt2::AutocastRules::Cuda;
            env.autocast_lower = *lower;
        }
    } else if ((env.device.is_cpu() || env.device.is_cuda()) && compat::autocastEnabled(env.device.type())) {
        env.autocast_rules = env.device.is_cpu() ? pt2::AutocastRules::Cpu : pt2::AutocastRules::Cuda;
        env.autocast_lower = compat::autocastDtype(env.device.type());
    }
    for (const auto& [name, ref] : d.weight_inputs)
        env.values[name] = (ref.buffer ? d.buffers : d.parameters)[ref.index].value;
    for (const auto& [name, t] : d.constants)
        env.values[name] = t.device() == env.device ? t : t.to(env.device);
    for (std::size_t i = 0; i < d.user_inputs.size() && i < inputs.size(); ++i)
        env.values[d.user_inputs[i]] = std::move(inputs[i]);
    inputs.clear(); // the graph's reference alone, where the caller moved them in
    const bool recordsGradients = at::GradMode::is_enabled();
    d.module_input_casts = 0;
    d.module_input_cast_bytes = 0;
    std::size_t nextCast = 0; // the first of d.input_casts not begun
    std::vector<std::pair<std::size_t, std::vector<std::string>>> openCasts; // a call's last node, the names it cast
    for (std::size_t i = 0; i < d.nodes.size(); ++i) {
        const int call = recordsGradients ? d.call_at[i] : -1;
        const auto last = call < 0 ? i : d.function_calls[static_cast<std::size_t>(call)].last;
        // Calls that begin here (or inside a Function call run as one): their inputs cast under the module's name,
        // as FSDP2's pre-forward hook casts them.
        for (; nextCast < d.input_casts.size() && d.input_casts[nextCast].first <= last; ++nextCast) {
            const auto& c = d.input_casts[nextCast];
            std::vector<std::string> cast;
            for (const auto& name : c.reads) {
                auto found = env.values.find(name);
                if (env.cast_inputs.count(name) || found == env.values.end())
                    continue; // an outer call's copy; or not a value (a name that is no tensor's)
                const auto& v = found->second;
                if (!v.isTensor() || !v.toTensor().defined() || !v.toTensor().is_floating_point()
                    || v.toTensor().scalar_type() == env.runs)
                    continue;
                if (onNode)
                    onNode(c.module);
                auto copy = v.toTensor().to(env.runs);
                d.module_input_cast_bytes += static_cast<std::int64_t>(copy.numel()) * copy.element_size();
                ++d.module_input_casts;
                env.cast_inputs[name] = std::move(copy);
                cast.push_back(name);
            }
            openCasts.emplace_back(c.last, std::move(cast));
        }
        if (call < 0)
            d.runNode(d.nodes[i], env, d.eager_lifetimes, onNode ? &onNode : nullptr);
        else
            runFunctionCall(d, static_cast<std::size_t>(call), env, onNode ? &onNode : nullptr);
        i = last;
        // Calls that have returned: their copies dropped (what autograd saved of them lives on), inner ones first.
        while (!openCasts.empty() && openCasts.back().first <= i) {
            for (const auto& name : openCasts.back().second)
                env.cast_inputs.erase(name);
            openCasts.pop_back();
        }
    }
    for (const auto& [output, buffer] : d.buffer_mutations)
        for (auto& b : d.buffers)
            if (b.name == buffer) {
                torch::NoGradGuard noGrad;
                b.value.copy_(env.get(output).toTensor());
            }
    std::vector<c10::IValue> results;
    for (const auto& out : d.outputs)
        results.push_back(env.value(out));
    if (results.size() == 1)
        return results.front();
    return c10::ivalue::Tuple::create(std::move(results));
}

std::string ExportedProgram::setLifetimes(const std::string& wanted)
{
    d_->eager_lifetimes = wanted == "eager" && d_->eager_known;
    orderWeights(*d_, wanted == "eager");
    if (d_->generation)
        for (auto* program : d_->generation->programs())
            program->d_->eager_lifetimes = wanted == "eager" && program->d_->eager_known;
    return d_->eager_lifetimes ? "eager" : "graph";
}

bool ExportedProgram::metaWeights() const
{
    return d_->meta_weights;
}

const ModelInfo::Checkpointing& ExportedProgram::checkpointing() const
{
    return d_->checkpointing;
}

c10::ScalarType ExportedProgram::exportedScalar() const
{
    return d_->exported;
}

std::string ExportedProgram::autocastNote() const
{
    auto checks = std::count_if(d_->nodes.begin(), d_->nodes.end(), [](const Impl::Node& n) { return n.assertion; });
    if (checks == 0)
        return {};
    return "under autocast, the program's " + std::to_string(checks) + " dtype "
        + (checks == 1 ? "check (an aten._assert_tensor_metadata node" : "checks (aten._assert_tensor_metadata nodes")
        + ", which torch.export puts after a cast such as x.float()) would fail, as they do in PyTorch (\"Tensor dtype "
          "mismatch\"): autocast changes the dtypes they expect. They allocate nothing and were skipped, as if erased "
          "from the graph";
}

std::string ExportedProgram::followedTypesNote(bool cudaRules, const std::string& lower) const
{
    const auto rules = cudaRules ? pt2::AutocastRules::Cuda : pt2::AutocastRules::Cpu;
    if (d_->autocast_known[static_cast<std::size_t>(rules)] || d_->unnamed_types == 0)
        return {};
    const auto exported = dtypeName(d_->exported);
    const auto n = std::to_string(d_->unnamed_types);
    return "under autocast, " + n + (d_->unnamed_types == 1 ? " op passes " : " ops pass ") + exported
        + " where the model's source may take the type from a tensor (.to(query.dtype), dtype=x.dtype), and this file "
          "does not record what " + (cudaRules ? "CUDA" : "CPU") + " autocast makes of "
        + (d_->unnamed_types == 1 ? "it" : "them") + " (memledger.export saves that record): they ran in " + exported
        + " as traced, where PyTorch passes " + lower + " when that tensor is " + lower
        + " (a cast that copies, and a result half the size): the figures may be off either way";
}

std::string ExportedProgram::eagerLifetimesNote() const
{
    if (!d_->eager_lifetimes || d_->source_facts)
        return {};
    return std::string("eager lifetimes from the stack traces alone (the file was not saved by memledger.export, which "
                       "saves what the source says beside it): a value a function returns to a name its caller never "
                       "reads (`hidden_states, _ = self.self_attn(x)`) is dropped after its last reader")
        + (d_->strict_trace ? "" : ", and, the trace being non-strict, a helper function's lines are not seen")
        + "; where the model's code does so the peak can be under the eager model's (transformers' eager attention: "
          "up to 17% under); memledger.export(model, args, path) saves a file without this limit";
}

std::string ExportedProgram::causalMaskNote() const
{
    const int n = d_->causal_masks_built, masks = d_->unpadded_skips;
    if (n == 0 && masks == 0)
        return {};
    const auto window = d_->sliding_window;
    std::string advice;
    if (d_->causal_mask_skippable)
        advice = "; memledger.export(..., causal_mask=\"skipped\") exports that batch";
    else if (window == 0)
        advice = "; memledger.export(..., causal_mask=\"skipped\"), without attention_mask, exports that batch";
    const std::string unpadded = "an unpadded batch (packed sequences, an all-ones attention_mask)"
        + (window > 0 ? " shorter than the model's sliding window (" + std::to_string(window) + " tokens)" : "");
    if (n == 0) // eager attention: the masks themselves, counted against the unpadded branch's program
        return "the attention mask is built (memledger.export's default, as a padded batch runs the model): "
            + std::to_string(masks) + (masks == 1 ? " mask" : " masks") + " that " + unpadded
            + " does not build in eager transformers, so for one these figures err high by "
            + (masks == 1 ? "it" : "them") + " (batch x seq x seq each) and what the attention makes of them" + advice;
    return "the causal mask is built (memledger.export's default, as a padded batch runs the model): "
        + std::to_string(n) + " attention call" + (n == 1 ? " takes" : "s take") + " it; " + unpadded
        + " builds none in eager transformers, so for one these figures err high by the mask (batch x seq x seq per "
          "call) and a grouped-query model's copied key/value heads"
        + advice;
}

std::string ExportedProgram::functionCallNote() const
{
    if (d_->function_calls.empty())
        return {};
    std::set<std::string> names;
    for (const auto& c : d_->function_calls)
        names.insert(c.name);
    std::string list;
    for (const auto& n : names)
        list += (list.empty() ? "" : ", ") + n;
    return std::to_string(d_->function_calls.size()) + " call" + (d_->function_calls.size() == 1 ? "" : "s")
        + " of a torch.autograd.Function (" + list + ") run as eager runs them: the forward's ops under no_grad, one "
        "autograd node keeping the tensors the call read; the Function's own backward is Python the program does not "
        "hold, so their backward is autograd's of the forward's ops run again, which holds more temporaries than a "
        "hand-written derivative: the step's peak errs high (Bloom's GeLUFunction: +2% to +18%)";
}

const std::vector<std::string>& ExportedProgram::loadNotes() const
{
    return d_->notes;
}

namespace {

// A node's argument by its schema name ({"name": "train", "arg": {"as_bool": false}}): nullptr when absent.
const json* argumentNamed(const json& inputs, const char* name)
{
    for (const auto& in : inputs)
        if (in.is_object() && in.value("name", std::string()) == name && in.contains("arg") && in.at("arg").is_object())
            return &in.at("arg");
    return nullptr;
}

// An argument that is the constant false ({"as_bool": false}).
bool isFalse(const json* arg)
{
    return arg && arg->contains("as_bool") && arg->at("as_bool").is_boolean() && !arg->at("as_bool").get<bool>();
}

// The dropout operators (their arguments p and train).
bool isDropout(const std::string& name)
{
    return name == "aten::dropout" || name == "aten::feature_dropout" || name == "aten::alpha_dropout"
        || name == "aten::feature_alpha_dropout" || name == "aten::native_dropout";
}

// An argument that is the constant true ({"as_bool": true}).
bool isTrue(const json* arg)
{
    return arg && arg->contains("as_bool") && arg->at("as_bool").is_boolean() && arg->at("as_bool").get<bool>();
}

double floatArgument(const json* arg)
{
    if (arg && arg->contains("as_float"))
        return pt2::number(arg->at("as_float"));
    if (arg && arg->contains("as_int") && arg->at("as_int").is_number())
        return arg->at("as_int").get<double>();
    return -1.0; // not a constant: counted as a dropout that drops
}

} // namespace

std::string ExportedProgram::evalModeNote() const
{
    // Dropout with p > 0 and train=False (p == 0 drops nothing in either mode), BatchNorm with training=False.
    std::size_t dropouts = 0, norms = 0;
    for (const auto& n : d_->nodes) {
        if (!n.op || !n.inputs)
            continue;
        const auto& name = n.op->schema().name();
        if (isDropout(name)) {
            if (isFalse(argumentNamed(*n.inputs, "train")) && floatArgument(argumentNamed(*n.inputs, "p")) != 0.0)
                ++dropouts;
        } else if (name == "aten::batch_norm" || name == "aten::_native_batch_norm_legit_no_training") {
            if (name != "aten::batch_norm" || isFalse(argumentNamed(*n.inputs, "training")))
                ++norms;
        }
    }
    if (dropouts + norms == 0)
        return {};
    std::string what;
    if (dropouts > 0)
        what = std::to_string(dropouts) + (dropouts == 1 ? " dropout runs" : " dropouts run") + " as the identity";
    if (norms > 0)
        what += (what.empty() ? "" : " and ") + std::to_string(norms) + (norms == 1 ? " BatchNorm uses" : " BatchNorms use")
            + " the running statistics";
    std::string eager;
    if (dropouts > 0)
        eager = "the dropout masks";
    if (norms > 0)
        eager += (eager.empty() ? "" : " and ") + std::string("BatchNorm's batch statistics");
    return "exported from model.eval(): in this training step " + what
        + ", as the program runs them; the model itself in model.train() also keeps " + eager
        + " for the backward. Export from model.train() to record that";
}

std::string ExportedProgram::trainModeNote() const
{
    // Dropout with train=True and p != 0; scaled_dot_product_attention with a dropout_p != 0 (transformers passes
    // its attention_dropout in model.train() and 0.0 in model.eval()); BatchNorm with training=True.
    std::size_t dropouts = 0, attentions = 0, norms = 0;
    for (const auto& n : d_->nodes) {
        if (!n.op || !n.inputs)
            continue;
        const auto& name = n.op->schema().name();
        if (isDropout(name)) {
            if (!isFalse(argumentNamed(*n.inputs, "train")) && floatArgument(argumentNamed(*n.inputs, "p")) != 0.0)
                ++dropouts;
        } else if (name == "aten::scaled_dot_product_attention") {
            const json* p = argumentNamed(*n.inputs, "dropout_p");
            if (p && floatArgument(p) != 0.0)
                ++attentions;
        } else if (name == "aten::batch_norm" || name == "aten::_native_batch_norm_legit"
            || name == "aten::_native_batch_norm_legit_functional") {
            if (isTrue(argumentNamed(*n.inputs, "training")))
                ++norms;
        }
    }
    if (dropouts + attentions + norms == 0)
        return {};
    std::vector<std::string> what;
    if (dropouts > 0)
        what.push_back(std::to_string(dropouts) + (dropouts == 1 ? " dropout drops" : " dropouts drop"));
    if (attentions > 0)
        what.push_back(std::to_string(attentions) + " scaled_dot_product_attention "
            + (attentions == 1 ? "call applies" : "calls apply") + " dropout to the attention weights");
    if (norms > 0)
        what.push_back(std::to_string(norms) + (norms == 1 ? " BatchNorm takes" : " BatchNorms take")
            + " the batch's statistics");
    std::string list;
    for (std::size_t i = 0; i < what.size(); ++i)
        list += (i == 0 ? "" : i + 1 == what.size() ? " and " : ", ") + what[i];
    return "exported from model.train(): in this inference " + list
        + ", as the program runs them; the model in model.eval(), as an inference runs it, does not (its peak can"
          " be lower). Export from model.eval() for an inference's figures";
}

std::string ExportedProgram::conversionNote(c10::ScalarType runs) const
{
    const auto& d = *d_;
    const auto from = dtypeName(d.exported), to = dtypeName(runs);
    std::string note = "converted: exported in " + from + ", run in " + to + " (its floating weights, and each " + from
        + " type its graph passes, as the program exported from model.to(torch." + to + ") would)";
    const std::string asExported = " (--dtype " + from + " runs it as exported)";
    if (!d.source_lines)
        return note + "; its nodes carry no source lines, so a cast to " + from + " the model makes on purpose (an "
            "RMSNorm's x.float()) ran in " + to + " too: export from model.to(torch." + to + ") to record those as they are"
            + asExported;
    return note + "; " + std::to_string(d.kept_casts) + (d.kept_casts == 1 ? " op keeps " : " ops keep ") + from
        + " because the model's source names it (x.float(), .to(torch." + from + "), dtype=torch." + from + ")" + asExported;
}

void ExportedProgram::convert(std::optional<c10::ScalarType> scalar, std::optional<c10::Device> device)
{
    auto& d = *d_;
    if (scalar)
        d.run_scalar = *scalar;
    for (auto* list : {&d.parameters, &d.buffers})
        for (auto& t : *list) {
            if (d.weights_elsewhere)
                break; // the model program's, shared again once that one is converted
            auto& v = t.value;
            auto to = scalar && v.is_floating_point() ? *scalar : v.scalar_type();
            auto where = device ? *device : v.device();
            if (to == v.scalar_type() && where == v.device())
                continue;
            auto converted = v.detach().to(where, to);
            converted.set_requires_grad(v.requires_grad());
            v = converted;
        }
    if (device)
        for (auto& [name, t] : d.constants)
            t = t.to(*device);
    if (d.generation)
        for (auto* program : d.generation->programs()) {
            program->convert(scalar, device); // its constants, and the types its graph passes
            program->shareWeights(*this);
        }
}

#else // libtorch 1.13: no torch.export; the archive is recognised and refused with the build that opens it

struct ExportedProgram::Impl {
};
ExportedProgram::ExportedProgram() = default;
ExportedProgram::~ExportedProgram() = default;
std::unique_ptr<ExportedProgram> ExportedProgram::load(caffe2::serialize::PyTorchStreamReader&)
{
    throw std::runtime_error("torch.export programs need the PyTorch 2 build of memledger");
}
std::vector<ExportedProgram::NamedTensor>& ExportedProgram::parameters()
{
    static std::vector<NamedTensor> none;
    return none;
}
std::vector<ExportedProgram::NamedTensor>& ExportedProgram::buffers()
{
    return parameters();
}
const std::vector<ExportedProgram::Input>& ExportedProgram::inputs() const
{
    static const std::vector<Input> none;
    return none;
}
void ExportedProgram::checkInputs(const std::vector<at::Tensor>&) const { }
const std::vector<ExportedProgram::Module>& ExportedProgram::modules() const
{
    static const std::vector<Module> none;
    return none;
}
std::string ExportedProgram::rootType() const
{
    return {};
}
c10::IValue ExportedProgram::run(std::vector<at::Tensor>, const std::function<void(const std::string&)>&)
{
    throw std::runtime_error("torch.export programs need the PyTorch 2 build of memledger");
}
ExportedProgram::Generation* ExportedProgram::generation()
{
    return nullptr;
}
void ExportedProgram::castModuleInputs(std::vector<std::string>) { }
std::size_t ExportedProgram::moduleInputCasts() const
{
    return 0;
}
std::int64_t ExportedProgram::moduleInputCastBytes() const
{
    return 0;
}
void ExportedProgram::convert(std::optional<c10::ScalarType>, std::optional<c10::Device>) { }
std::string ExportedProgram::setLifetimes(const std::string&)
{
    return "graph";
}

bool ExportedProgram::metaWeights() const
{
    return false;
}

const ModelInfo::Checkpointing& ExportedProgram::checkpointing() const
{
    static const ModelInfo::Checkpointing none;
    return none;
}
c10::ScalarType ExportedProgram::exportedScalar() const
{
    return c10::kFloat;
}
std::string ExportedProgram::autocastNote() const
{
    return {};
}
std::string ExportedProgram::followedTypesNote(bool, const std::string&) const
{
    return {};
}
std::string ExportedProgram::evalModeNote() const
{
    return {};
}
std::string ExportedProgram::trainModeNote() const
{
    return {};
}
std::string ExportedProgram::eagerLifetimesNote() const
{
    return {};
}
std::string ExportedProgram::functionCallNote() const
{
    return {};
}
std::string ExportedProgram::causalMaskNote() const
{
    return {};
}
const std::vector<std::string>& ExportedProgram::loadNotes() const
{
    static const std::vector<std::string> none;
    return none;
}
std::string ExportedProgram::conversionNote(c10::ScalarType) const
{
    return {};
}

#endif

} // namespace memledger
