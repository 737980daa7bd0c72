// A torch.export program read from its archive (models/<name>.json, data/weights, data/constants) and run
// through ATen's dispatcher. The serialized format is torch/_export/serde/schema.py's: a graph of nodes, each
// an operator overload ("torch.ops.aten.linear.default") with named arguments in a tagged union (as_tensor,
// as_int, as_sym_ints, as_scalar_type, ...), and a signature that says which graph inputs are parameters,
// buffers, constants and user inputs.
#include "recording/exported_program.h"
#include "recording/meta_device.h"
#include "recording/model.h"

#include "recording/model_impl.h"
#include "support/dtype.h"
#include "support/errors.h"

#include <ATen/ScalarOps.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <caffe2/serialize/inline_container.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <regex>
#include <set>
#include <stdexcept>
#include <unordered_map>

namespace memledger {

using json = nlohmann::json;

namespace {

std::string recordText(caffe2::serialize::PyTorchStreamReader& reader, const std::string& name)
{
    auto [data, size] = reader.getRecord(name);
    return std::string(static_cast<const char*>(data.get()), size);
}

[[maybe_unused]] std::vector<std::string> modelJsonRecords(caffe2::serialize::PyTorchStreamReader& reader)
{
    std::vector<std::string> out;
    for (const auto& r : reader.getAllRecords())
        if (r.rfind("models/", 0) == 0 && r.size() > 12 && r.compare(r.size() - 5, 5, ".json") == 0)
            out.push_back(r);
    std::sort(out.begin(), out.end());
    return out;
}

} // namespace

std::string exportedArchiveKind(caffe2::serialize::PyTorchStreamReader& reader)
{
    bool aoti = false, models = false;
    for (const auto& r : reader.getAllRecords()) {
        if (r.rfind("data/aotinductor/", 0) == 0)
            aoti = true;
        if (r.rfind("models/", 0) == 0)
            models = true;
    }
    if (aoti)
        return "aotinductor";
    if (models || (reader.hasRecord("archive_format") && recordText(reader, "archive_format") == "pt2"))
        return "export";
    return "";
}

#if MEMLEDGER_EXPORTED_PROGRAMS // decided in core/CMakeLists.txt

namespace {

// serde's ScalarType (schema.py) to c10's.
c10::ScalarType scalarOf(int serde)
{
    switch (serde) {
    case 1:
        return c10::kByte;
    case 2:
        return c10::kChar;
    case 3:
        return c10::kShort;
    case 4:
        return c10::kInt;
    case 5:
        return c10::kLong;
    case 6:
        return c10::kHalf;
    case 7:
        return c10::kFloat;
    case 8:
        return c10::kDouble;
    case 9:
        return c10::kComplexHalf;
    case 10:
        return c10::kComplexFloat;
    case 11:
        return c10::kComplexDouble;
    case 12:
        return c10::kBool;
    case 13:
        return c10::kBFloat16;
    default:
        throw std::runtime_error("a tensor of element type " + std::to_string(serde) + " (serde's numbering), which memledger does not read");
    }
}

c10::MemoryFormat memoryFormatOf(int serde)
{
    switch (serde) {
    case 2:
        return c10::MemoryFormat::ChannelsLast;
    case 3:
        return c10::MemoryFormat::ChannelsLast3d;
    case 4:
        return c10::MemoryFormat::Preserve;
    default:
        return c10::MemoryFormat::Contiguous;
    }
}

c10::Layout layoutOf(int serde)
{
    switch (serde) {
    case 1:
        return c10::kSparse;
    case 2:
        return c10::kSparseCsr;
    case 6:
        return c10::kMkldnn;
    default:
        return c10::kStrided;
    }
}

// A SymInt of a tensor's meta: its value when fixed (as_int) or the hint it was exported with.
std::int64_t symHint(const json& s)
{
    if (s.contains("as_int"))
        return s.at("as_int").get<std::int64_t>();
    if (s.contains("as_expr")) {
        const auto& e = s.at("as_expr");
        if (e.contains("hint") && e.at("hint").is_object() && e.at("hint").contains("as_int"))
            return e.at("hint").at("as_int").get<std::int64_t>();
    }
    throw std::runtime_error("a tensor size without a value");
}

// "L__self__,,__main__.M;L__self__layers_0,layers.0,__main__.Block": the innermost module's path and type.
ExportedProgram::Module innermostModule(const std::string& stack, std::vector<ExportedProgram::Module>* all)
{
    ExportedProgram::Module m;
    std::size_t start = 0;
    while (start < stack.size()) {
        auto end = stack.find(';', start);
        auto entry = stack.substr(start, end == std::string::npos ? std::string::npos : end - start);
        auto c1 = entry.find(',');
        auto c2 = c1 == std::string::npos ? std::string::npos : entry.find(',', c1 + 1);
        if (c2 != std::string::npos) {
            auto path = entry.substr(c1 + 1, c2 - c1 - 1);
            auto type = entry.substr(c2 + 1);
            if (path == "_empty_nn_module_stack_from_metadata_hook")
                return {};
            auto dot = type.rfind('.');
            m = {path, dot == std::string::npos ? type : type.substr(dot + 1)};
            if (all)
                all->push_back(m);
        }
        if (end == std::string::npos)
            break;
        start = end + 1;
    }
    return m;
}

// A float as serde writes it: a number, or "Infinity", "-Infinity", "NaN".
double number(const json& v)
{
    if (v.is_number())
        return v.get<double>();
    auto s = v.is_string() ? v.get<std::string>() : std::string();
    if (s == "Infinity" || s == "inf")
        return std::numeric_limits<double>::infinity();
    if (s == "-Infinity" || s == "-inf")
        return -std::numeric_limits<double>::infinity();
    if (s == "NaN" || s == "nan")
        return std::numeric_limits<double>::quiet_NaN();
    throw RunError("the program has a float that is not one: " + v.dump());
}

// The values an argument (or an output) names: tensors by "name", sizes by "as_name".
void namesIn(const json& v, std::vector<std::string>& out)
{
    if (v.is_object()) {
        for (const auto& [k, x] : v.items()) {
            if ((k == "name" || k == "as_name") && x.is_string())
                out.push_back(x.get<std::string>());
            else
                namesIn(x, out);
        }
    } else if (v.is_array()) {
        for (const auto& x : v)
            namesIn(x, out);
    }
}

// The arguments of each `.to(...)` and `.type(...)` call in a line of Python, in the order they appear.
std::vector<std::string> castArguments(const std::string& line)
{
    std::vector<std::pair<std::size_t, std::string>> out; // where each call starts, its arguments
    for (const char* call : {".to(", ".type("}) {
        for (auto at = line.find(call); at != std::string::npos; at = line.find(call, at + 1)) {
            auto open = at + std::char_traits<char>::length(call);
            int depth = 1;
            auto end = open;
            while (end < line.size() && depth > 0) {
                depth += line[end] == '(' ? 1 : line[end] == ')' ? -1 : 0;
                ++end;
            }
            out.emplace_back(at, line.substr(open, end - open - (depth == 0 ? 1 : 0)));
        }
    }
    std::sort(out.begin(), out.end());
    std::vector<std::string> args;
    for (auto& [at, text] : out)
        args.push_back(std::move(text));
    return args;
}

// The names Python spells a floating-point type with ("torch.float32" or "torch.float"), as a pattern, and the
// method that casts to it (x.float()).
std::pair<std::string, std::string> pythonSpelling(c10::ScalarType t)
{
    switch (t) {
    case c10::kFloat:
        return {R"(torch\.(float32|float)\b)", "float"};
    case c10::kHalf:
        return {R"(torch\.(float16|half)\b)", "half"};
    case c10::kBFloat16:
        return {R"(torch\.bfloat16\b)", "bfloat16"};
    case c10::kDouble:
        return {R"(torch\.(float64|double)\b)", "double"};
    default:
        return {R"(\b\B)", ""}; // matches nothing
    }
}

// Whether node `n`, which passes the exported type `exported` as an argument, does so because the model's own
// source names that type, and not because it follows the type of a tensor (.to(h.dtype), type_as). In a float32
// program both read to(float32); its source line tells them apart:
//   - x.float() (torch_fn "method_descriptor.float") names it;
//   - a cast (aten.to.*, _to_copy) on a line with .to(...) or .type(...) calls: the k-th cast node of that line
//     is its k-th call, which names it when its argument spells the type (.to(torch.float32), not .to(x.dtype));
//   - any other op: the line passes dtype=torch.float32 (F.softmax(x, dim=-1, dtype=torch.float32)).
// `castsOnLine` counts the cast nodes seen per source line. Without a source line (stack_trace), no.
bool namesTypeOnPurpose(const json& n, c10::ScalarType exported, std::map<std::string, std::size_t>& castsOnLine)
{
    const auto& meta = n.value("metadata", json::object());
    const auto [pattern, method] = pythonSpelling(exported);
    const auto target = n.at("target").get<std::string>();
    const bool cast = target.rfind("torch.ops.aten.to.", 0) == 0 || target.rfind("torch.ops.aten._to_copy.", 0) == 0;
    // "float_1;method_descriptor.float": the Python call that made the node.
    auto fn = meta.value("torch_fn", std::string());
    auto called = fn.substr(fn.rfind('.') == std::string::npos ? fn.size() : fn.rfind('.') + 1);
    if (cast && !called.empty() && called != "to" && called != "type")
        return called == method; // x.float(), x.half(), ...: named by the method
    auto trace = meta.value("stack_trace", std::string());
    while (!trace.empty() && std::isspace(static_cast<unsigned char>(trace.back())))
        trace.pop_back();
    auto line = trace.substr(trace.rfind('\n') == std::string::npos ? 0 : trace.rfind('\n') + 1);
    if (line.empty())
        return false;
    const std::regex spelled(pattern);
    if (cast) {
        auto calls = castArguments(line);
        auto k = castsOnLine[trace]++;
        if (k < calls.size())
            return std::regex_search(calls[k], spelled);
        return !calls.empty() && std::all_of(calls.begin(), calls.end(), [&](const std::string& a) { return std::regex_search(a, spelled); });
    }
    return std::regex_search(line, std::regex(R"(dtype\s*=\s*)" + pattern));
}

} // namespace

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
    bool source_lines = false; // whether the nodes carry their source (stack_trace), which tells those

    // The graph's placeholders that are weights: graph name -> (parameter or buffer list, index).
    struct WeightRef {
        bool buffer = false;
        std::size_t index = 0;
    };
    std::vector<std::pair<std::string, WeightRef>> weight_inputs;
    std::vector<std::pair<std::string, at::Tensor>> constants; // tensor constants by graph name
    std::vector<std::string> user_inputs; // graph names of the user inputs, in order
    std::vector<std::pair<std::string, std::string>> buffer_mutations; // graph output name -> buffer name

    struct Node {
        std::string target;
        std::optional<c10::OperatorHandle> op; // an ATen (or other registered) operator
        const json* inputs = nullptr;
        const json* outputs = nullptr;
        std::string module;
        std::vector<std::string> last_use; // values no later node reads: dropped once this one has run
        // aten::_assert_tensor_metadata: checks the dtype the program was exported with, which --dtype and
        // --autocast change; it allocates nothing and is not run.
        bool assertion = false;
        // Its type argument names the exported type because the model's source does (x.float(),
        // .to(torch.float32), softmax(..., dtype=torch.float32)): it keeps it in a converted run.
        bool keeps_type = false;
    };
    std::vector<Node> nodes;
    json outputs;
};

namespace {

// A weight saved from the meta device (a model built under torch.device("meta")): its shape, no data.
bool isMetaEntry(const json& entry)
{
    const auto& meta = entry.at("tensor_meta");
    if (!meta.contains("device") || !meta.at("device").is_object())
        return false;
    return meta.at("device").value("type", "") == "meta";
}

at::Tensor readTensor(caffe2::serialize::PyTorchStreamReader& reader, const std::string& dir, const json& entry,
    const std::string& name)
{
    if (entry.value("use_pickle", false))
        throw std::runtime_error(name + " is stored as a pickled tensor (a tensor subclass), which memledger does not read");
    const auto& meta = entry.at("tensor_meta");
    auto scalar = scalarOf(meta.at("dtype").get<int>());
    std::vector<std::int64_t> sizes, strides;
    for (const auto& s : meta.at("sizes"))
        sizes.push_back(symHint(s));
    for (const auto& s : meta.at("strides"))
        strides.push_back(symHint(s));
    auto offset = symHint(meta.at("storage_offset"));
    auto options = torch::TensorOptions().dtype(scalar);
    if (isMetaEntry(entry)) // shapes only: torch.export.save writes a meta weight as an empty record
        return at::empty_strided(sizes, strides, options.device(c10::kMeta));
    auto record = dir + entry.at("path_name").get<std::string>();
    if (!reader.hasRecord(record))
        throw std::runtime_error(name + ": the archive has no " + record);
    auto [data, size] = reader.getRecord(record);
    std::int64_t needed = 0; // elements the view reaches
    if (!sizes.empty() && std::all_of(sizes.begin(), sizes.end(), [](std::int64_t s) { return s > 0; })) {
        needed = offset + 1;
        for (std::size_t i = 0; i < sizes.size(); ++i)
            needed += (sizes[i] - 1) * strides[i];
    } else if (sizes.empty()) {
        needed = offset + 1;
    }
    auto element = static_cast<std::int64_t>(c10::elementSize(scalar));
    if (needed * element > static_cast<std::int64_t>(size))
        throw std::runtime_error(name + ": " + record + " holds " + std::to_string(size) + " bytes, fewer than its shape needs");
    auto stored = torch::from_blob(data.get(), {static_cast<std::int64_t>(size) / element}, options);
    auto out = at::empty_strided(sizes, strides, options);
    if (out.numel() > 0)
        out.copy_(stored.as_strided(sizes, strides, offset));
    return out;
}

} // namespace

ExportedProgram::ExportedProgram()
    : d_(std::make_unique<Impl>())
{
}
ExportedProgram::~ExportedProgram() = default;

std::unique_ptr<ExportedProgram> ExportedProgram::load(caffe2::serialize::PyTorchStreamReader& reader)
{
    auto models = modelJsonRecords(reader);
    if (models.empty())
        throw std::runtime_error("the archive has no models/*.json (not a torch.export program)");
    std::unique_ptr<ExportedProgram> p(new ExportedProgram());
    auto& d = *p->d_;
    json root;
    try {
        root = json::parse(recordText(reader, models.front()));
    } catch (const json::exception& e) {
        throw std::runtime_error(models.front() + " is not valid JSON: " + e.what());
    }
    auto& gm = root.at("graph_module");
    d.program = std::move(gm.at("graph"));
    const auto& graph = d.program;
    const auto& signature = gm.at("signature");

    // Weights and constants: the same file for two names is one tensor (a tied weight).
    std::map<std::string, json> weightConfig, constantConfig;
    auto readConfig = [&](const std::string& record, std::map<std::string, json>& into) {
        if (!reader.hasRecord(record))
            return;
        auto j = json::parse(recordText(reader, record));
        for (auto& [k, v] : j.at("config").items())
            into[k] = v;
    };
    auto modelName = models.front().substr(7, models.front().size() - 12);
    readConfig("data/weights/" + modelName + "_weights_config.json", weightConfig);
    readConfig("data/constants/" + modelName + "_constants_config.json", constantConfig);
    // Weights saved on the meta device are made on it, as shapes (never memory): the program then runs on meta.
    for (const auto* config : {&weightConfig, &constantConfig})
        for (const auto& [name, entry] : *config)
            if (isMetaEntry(entry))
                d.meta_weights = true;
    if (d.meta_weights) {
        if (!metaRunsSupported())
            throw std::runtime_error("its weights are meta tensors (saved from the meta device), which need memledger's "
                                     "PyTorch 2 build to run on the meta device");
        installMetaDevice(); // their storages are the recorder's meta blocks, as weights moved to meta are
    }
    // Tied meta weights. Every meta weight names the same empty record (torch.export.save keys weights by their
    // storage, which a meta tensor lacks), so the weights config cannot tell a tied weight from two. The graph can:
    // export reads a tied parameter through one placeholder only, and the other names' placeholders are read by no
    // node (a tied LM head: p_output_weight feeds both the embedding and the head, p_tok_embeddings_weight
    // nothing). A meta parameter no node reads is taken as the storage of the one parameter the graph reads with
    // its dtype, sizes and strides, when there is exactly one (else it is a parameter of its own, as an unused
    // one is).
    std::map<std::string, std::string> tiedTo; // parameter name -> the read parameter whose storage it is
    if (d.meta_weights) {
        std::vector<std::string> names;
        std::map<std::string, std::set<std::string>> readIn; // module path -> the names its nodes read
        for (const auto& n : graph.at("nodes")) {
            const auto before = names.size();
            for (const auto& in : n.at("inputs"))
                if (in.contains("arg"))
                    namesIn(in.at("arg"), names);
            const auto& meta = n.value("metadata", json::object());
            if (meta.contains("nn_module_stack") && meta.at("nn_module_stack").is_string()) {
                auto& set = readIn[innermostModule(meta.at("nn_module_stack").get<std::string>(), nullptr).path];
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
            // Several read weights of its shape (a GPT whose MLP weight is vocab x d_model): the one that the
            // nodes of its own module read instead (the embedding reads the head's weight).
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
    }
    std::map<std::string, at::Tensor> byFile; // "data/weights/weight_0" -> the tensor read from it
    auto tensorFor = [&](const std::map<std::string, json>& config, const std::string& dir, const std::string& name) {
        auto it = config.find(name);
        if (it == config.end())
            throw std::runtime_error("the archive holds no data for " + name
                + " (a program saved with its weights elsewhere is not supported)");
        // A meta weight: a tensor of its own, or the one it is tied to (above).
        auto tied = tiedTo.find(name);
        auto file = isMetaEntry(it->second)
            ? "meta|" + (tied == tiedTo.end() ? name : tied->second)
            : dir + it->second.at("path_name").get<std::string>() + "|" + it->second.at("tensor_meta").dump();
        auto f = byFile.find(file);
        if (f != byFile.end())
            return std::make_pair(f->second, true);
        auto t = readTensor(reader, dir, it->second, name);
        byFile[file] = t;
        return std::make_pair(t, false);
    };
    std::map<const void*, std::pair<bool, std::size_t>> byData;
    for (const auto& spec : signature.at("input_specs")) {
        if (spec.contains("parameter") || spec.contains("buffer")) {
            const bool buffer = spec.contains("buffer");
            const auto& s = spec.at(buffer ? "buffer" : "parameter");
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
            if (!buffer && t.is_floating_point())
                t.set_requires_grad(true);
            byData[t.storage().unsafeGetStorageImpl()] = {buffer, list.size()};
            d.weight_inputs.push_back({graphName, {buffer, list.size()}});
            list.push_back({name, t, {}});
        } else if (spec.contains("tensor_constant")) {
            const auto& s = spec.at("tensor_constant");
            auto name = s.at("tensor_constant_name").get<std::string>();
            d.constants.emplace_back(
                s.at("arg").at("name").get<std::string>(), tensorFor(constantConfig, "data/constants/", name).first);
        } else if (spec.contains("user_input")) {
            const auto& arg = spec.at("user_input").at("arg");
            Input in;
            if (arg.contains("as_tensor")) {
                in.name = arg.at("as_tensor").at("name").get<std::string>();
                const auto& meta = graph.at("tensor_values").at(in.name);
                in.dtype = dtypeName(scalarOf(meta.at("dtype").get<int>()));
                static const std::regex symbol(R"(^Symbol\('([A-Za-z_][A-Za-z0-9_]*)'.*\)$|^([A-Za-z_][A-Za-z0-9_]*)$)");
                for (const auto& s : meta.at("sizes")) {
                    Dim dim;
                    dim.example = symHint(s);
                    if (s.contains("as_int")) {
                        dim.fixed = s.at("as_int").get<std::int64_t>();
                    } else if (s.contains("as_expr")) {
                        std::smatch m;
                        auto expr = s.at("as_expr").value("expr_str", std::string());
                        if (std::regex_match(expr, m, symbol)) {
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
            } else {
                in.tensor = false;
                in.name = arg.begin().key();
            }
            d.user_inputs.push_back(in.name);
            d.inputs.push_back(std::move(in));
        } else {
            throw std::runtime_error("the program has an input of a kind memledger does not run ("
                + spec.begin().key() + ")");
        }
    }
    for (const auto& spec : signature.at("output_specs")) {
        if (spec.contains("buffer_mutation")) {
            const auto& s = spec.at("buffer_mutation");
            d.buffer_mutations.emplace_back(
                s.at("arg").at("name").get<std::string>(), s.at("buffer_mutation_name").get<std::string>());
        } else if (spec.contains("user_output")) {
            d.outputs.push_back(spec.at("user_output").at("arg"));
        } else if (!spec.contains("token")) {
            throw std::runtime_error("the program has an output of a kind memledger does not run ("
                + spec.begin().key() + ")");
        }
    }

    // The precision it was exported in: its weights', else its float inputs'.
    {
        std::optional<c10::ScalarType> found;
        for (const auto* list : {&d.parameters, &d.buffers})
            for (const auto& t : *list)
                if (!found && t.value.is_floating_point())
                    found = t.value.scalar_type();
        for (const auto& in : d.inputs)
            if (!found && in.tensor && isFloatingDtype(in.dtype))
                found = scalarOf(graph.at("tensor_values").at(in.name).at("dtype").get<int>());
        d.exported = d.run_scalar = found.value_or(c10::kFloat);
    }

    // Nodes: each operator looked up once; the modules from their nn_module_stack.
    std::map<std::string, std::string> typeOf;
    std::vector<std::string> order;
    std::map<std::string, std::size_t> castsOnLine;
    auto addModule = [&](const Module& m) {
        if (typeOf.emplace(m.path, m.type).second)
            order.push_back(m.path);
    };
    for (const auto& n : graph.at("nodes")) {
        Impl::Node node;
        node.target = n.at("target").get<std::string>();
        node.inputs = &n.at("inputs");
        node.outputs = &n.at("outputs");
        if (node.target.rfind("torch.ops.", 0) == 0) {
            // torch.ops.<namespace>.<op>.<overload>; "default" is the overload without a name.
            auto rest = node.target.substr(10);
            auto a = rest.find('.');
            auto b = rest.rfind('.');
            if (a == std::string::npos || b == a)
                throw std::runtime_error("an operator memledger cannot name: " + node.target);
            auto opName = rest.substr(0, a) + "::" + rest.substr(a + 1, b - a - 1);
            auto overload = rest.substr(b + 1);
            if (overload == "default")
                overload.clear();
            auto handle = c10::Dispatcher::singleton().findSchema({opName, overload});
            if (!handle)
                throw std::runtime_error("the program calls " + opName + (overload.empty() ? "" : "." + overload)
                    + ", which this libtorch (" + std::string(TORCH_VERSION) + ") does not have");
            node.op = *handle;
            node.assertion = opName == "aten::_assert_tensor_metadata";
        } else if (node.target.rfind("_operator.", 0) != 0 && node.target.rfind("math.", 0) != 0
            && node.target.rfind("torch.sym_", 0) != 0 && node.target != "builtins.getattr") {
            throw std::runtime_error("the program calls " + node.target
                + ", which memledger cannot run (higher-order and Python operators other than arithmetic on sizes)");
        }
        const auto& meta = n.value("metadata", json::object());
        if (meta.contains("nn_module_stack")) {
            std::vector<Module> stack;
            auto m = innermostModule(meta.at("nn_module_stack").get<std::string>(), &stack);
            for (const auto& s : stack)
                addModule(s);
            node.module = m.path;
        }
        if (!meta.value("stack_trace", std::string()).empty())
            d.source_lines = true;
        std::optional<bool> passesExported; // set when it passes a type: whether that is the exported one
        for (const auto& in : n.at("inputs"))
            if (in.contains("arg") && in.at("arg").contains("as_scalar_type"))
                passesExported = passesExported.value_or(false)
                    || scalarOf(in.at("arg").at("as_scalar_type").get<int>()) == d.exported;
        // Every cast that passes a type is counted on its line (namesTypeOnPurpose), so that the k-th cast node of a
        // line is its k-th call; only one that passes the exported type can keep it.
        if (passesExported && !node.assertion) {
            const bool named = namesTypeOnPurpose(n, d.exported, castsOnLine);
            node.keeps_type = named && *passesExported;
            d.kept_casts += node.keeps_type ? 1 : 0;
        }
        d.nodes.push_back(std::move(node));
    }
    // A cast the source names that cost nothing at export (x.float() of a float32 x returns x itself) leaves one
    // name for two tensors: export's tracer gives every later read of x the cast's name. Run in another type they
    // differ again: a read that means x reads x: a type_as's `other` (only its type is read), and any read outside
    // the module that made the cast, as a residual `x + attention(norm(x))` around an RMSNorm that computes in
    // float32 (Llama's `self._norm(x.float()).type_as(x)`); reads inside that module take the cast.
    {
        struct Alias {
            std::string input, module;
        };
        std::unordered_map<std::string, Alias> aliasOf; // a kept cast's output -> its input
        auto inside = [](const std::string& path, const std::string& module) {
            return module.empty() || path == module || path.rfind(module + ".", 0) == 0;
        };
        const auto& values = graph.at("tensor_values");
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
                if (typeOnly || !inside(node.module, a->second.module))
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
    // Each value is dropped after the last node that reads it, as the Python code FX generates does: an
    // activation is freed when nothing needs it any more, not at the end of the run.
    {
        std::unordered_map<std::string, std::size_t> last;
        std::vector<std::string> names;
        for (std::size_t i = 0; i < d.nodes.size(); ++i) {
            names.clear();
            for (const auto& in : *d.nodes[i].inputs)
                if (in.contains("arg"))
                    namesIn(in.at("arg"), names);
            namesIn(*d.nodes[i].outputs, names);
            for (const auto& n : names)
                last[n] = i;
        }
        names.clear();
        namesIn(d.outputs, names);
        for (const auto& [output, buffer] : d.buffer_mutations)
            names.push_back(output);
        for (const auto& n : names)
            last.erase(n); // read by the caller
        for (const auto& [name, i] : last)
            d.nodes[i].last_use.push_back(name);
    }
    if (typeOf.count(""))
        d.root_type = typeOf[""];
    // Modules that own a weight but call no op of their own (their children do), and every parent.
    auto addWithParents = [&](std::string path, const std::string& type) {
        std::vector<std::pair<std::string, std::string>> chain;
        while (true) {
            chain.emplace_back(path, type);
            if (path.empty())
                break;
            auto dot = path.rfind('.');
            path = dot == std::string::npos ? "" : path.substr(0, dot);
        }
        for (auto it = chain.rbegin(); it != chain.rend(); ++it)
            if (!typeOf.count(it->first))
                addModule({it->first, it == chain.rbegin() && it->first.empty() ? d.root_type : "Module"});
    };
    addWithParents("", d.root_type);
    for (const auto& list : {&d.parameters, &d.buffers})
        for (const auto& t : *list) {
            auto dot = t.name.rfind('.');
            addWithParents(dot == std::string::npos ? "" : t.name.substr(0, dot), "Module");
        }
    for (const auto& path : order)
        d.modules.push_back({path, typeOf[path]});
    // Parents before children: by depth, then as first seen.
    std::stable_sort(d.modules.begin(), d.modules.end(), [](const Module& a, const Module& b) {
        auto depth = [](const std::string& p) { return p.empty() ? 0 : 1 + std::count(p.begin(), p.end(), '.'); };
        return depth(a.path) < depth(b.path);
    });
    if (d.meta_weights) // a program saved with some weights on meta and some not runs on meta alone: all there
        p->convert(std::nullopt, c10::Device(c10::kMeta));
    return p;
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

namespace {

// Python's arithmetic on sizes (_operator.*, math.*, torch.sym_*), on ints, floats and bools.
c10::IValue pythonOperator(const std::string& target, const std::vector<c10::IValue>& a)
{
    auto name = target.substr(target.rfind('.') + 1);
    auto num = [](const c10::IValue& v) { return v.isDouble() ? v.toDouble() : v.isBool() ? double(v.toBool()) : double(v.toInt()); };
    auto isInt = [](const c10::IValue& v) { return v.isInt() || v.isBool(); };
    auto integer = [](const c10::IValue& v) { return v.isBool() ? std::int64_t(v.toBool()) : v.toInt(); };
    if (a.size() == 1) {
        const auto& x = a[0];
        if (name == "neg")
            return isInt(x) ? c10::IValue(-integer(x)) : c10::IValue(-num(x));
        if (name == "not_" || name == "sym_not")
            return c10::IValue(!(num(x) != 0));
        if (name == "ceil")
            return c10::IValue(static_cast<std::int64_t>(std::ceil(num(x))));
        if (name == "floor")
            return c10::IValue(static_cast<std::int64_t>(std::floor(num(x))));
        if (name == "sym_float")
            return c10::IValue(num(x));
        if (name == "sym_int" || name == "trunc")
            return c10::IValue(static_cast<std::int64_t>(num(x)));
        if (name == "sqrt" || name == "sym_sqrt")
            return c10::IValue(std::sqrt(num(x)));
        if (name == "abs")
            return isInt(x) ? c10::IValue(std::abs(integer(x))) : c10::IValue(std::abs(num(x)));
    }
    if (a.size() == 2) {
        const auto& x = a[0];
        const auto& y = a[1];
        const bool ints = isInt(x) && isInt(y);
        if (name == "add")
            return ints ? c10::IValue(integer(x) + integer(y)) : c10::IValue(num(x) + num(y));
        if (name == "sub")
            return ints ? c10::IValue(integer(x) - integer(y)) : c10::IValue(num(x) - num(y));
        if (name == "mul")
            return ints ? c10::IValue(integer(x) * integer(y)) : c10::IValue(num(x) * num(y));
        if (name == "truediv")
            return c10::IValue(num(x) / num(y));
        if (name == "floordiv") {
            if (ints) {
                auto q = integer(x) / integer(y);
                if ((integer(x) % integer(y) != 0) && ((integer(x) < 0) != (integer(y) < 0)))
                    --q;
                return c10::IValue(q);
            }
            return c10::IValue(std::floor(num(x) / num(y)));
        }
        if (name == "mod") {
            if (ints) {
                auto r = integer(x) % integer(y);
                if (r != 0 && ((r < 0) != (integer(y) < 0)))
                    r += integer(y);
                return c10::IValue(r);
            }
            return c10::IValue(num(x) - std::floor(num(x) / num(y)) * num(y));
        }
        if (name == "pow" || name == "pow_by_natural")
            return ints && integer(y) >= 0 ? c10::IValue(static_cast<std::int64_t>(std::llround(std::pow(num(x), num(y)))))
                                           : c10::IValue(std::pow(num(x), num(y)));
        if (name == "eq")
            return c10::IValue(num(x) == num(y));
        if (name == "ne")
            return c10::IValue(num(x) != num(y));
        if (name == "lt")
            return c10::IValue(num(x) < num(y));
        if (name == "le")
            return c10::IValue(num(x) <= num(y));
        if (name == "gt")
            return c10::IValue(num(x) > num(y));
        if (name == "ge")
            return c10::IValue(num(x) >= num(y));
        if (name == "and_")
            return c10::IValue(num(x) != 0 && num(y) != 0);
        if (name == "or_")
            return c10::IValue(num(x) != 0 || num(y) != 0);
        if (name == "sym_max" || name == "max")
            return ints ? c10::IValue(std::max(integer(x), integer(y))) : c10::IValue(std::max(num(x), num(y)));
        if (name == "sym_min" || name == "min")
            return ints ? c10::IValue(std::min(integer(x), integer(y))) : c10::IValue(std::min(num(x), num(y)));
    }
    throw RunError("the program computes " + target + " on " + std::to_string(a.size())
        + " values, which memledger cannot evaluate");
}

struct Env {
    std::unordered_map<std::string, c10::IValue> values;
    c10::Device device {c10::kCPU};
    // The type the program was exported in, and the one it runs in (ExportedProgram::convert).
    c10::ScalarType exported = c10::kFloat, runs = c10::kFloat;
    bool keep_type = false; // the node being run keeps the exported type (its source names it)

    // torch.finfo(dtype).max of a floating type.
    static double largest(c10::ScalarType t)
    {
        switch (t) {
        case c10::kHalf:
            return static_cast<double>(std::numeric_limits<c10::Half>::max());
        case c10::kBFloat16:
            return static_cast<double>(std::numeric_limits<c10::BFloat16>::max());
        case c10::kFloat:
            return static_cast<double>(std::numeric_limits<float>::max());
        default:
            return std::numeric_limits<double>::max();
        }
    }
    // A float the program passes: torch.finfo(x.dtype).min or .max of the exported type (an additive mask's fill)
    // becomes the run type's, as the program exported in that type has it.
    double floating(const json& v) const
    {
        const double x = number(v);
        if (exported == runs || std::abs(x) != largest(exported))
            return x;
        return std::copysign(largest(runs), x);
    }

    const c10::IValue& get(const std::string& name) const
    {
        auto it = values.find(name);
        if (it == values.end())
            throw RunError("the program uses '" + name + "' before it is made (a damaged graph)");
        return it->second;
    }
    c10::IValue sym(const json& s) const
    {
        if (s.contains("as_name"))
            return get(s.at("as_name").get<std::string>());
        for (const char* k : {"as_int", "as_float", "as_bool"})
            if (s.contains(k))
                return k[3] == 'i' ? c10::IValue(s.at(k).get<std::int64_t>())
                    : k[3] == 'f'  ? c10::IValue(s.at(k).get<double>())
                                   : c10::IValue(s.at(k).get<bool>());
        throw RunError("a size the program does not give");
    }
    at::Tensor tensor(const json& t) const { return get(t.at("name").get<std::string>()).toTensor(); }

    // One serialized argument as the value the operator takes.
    c10::IValue value(const json& arg) const
    {
        if (!arg.is_object() || arg.empty())
            throw RunError("the program has an argument without a value (a damaged graph)");
        const std::string kind = arg.begin().key();
        const json& v = arg.begin().value();
        if (kind == "as_none")
            return c10::IValue();
        if (kind == "as_tensor")
            return get(v.at("name").get<std::string>());
        if (kind == "as_tensors") {
            c10::List<at::Tensor> list;
            for (const auto& t : v)
                list.push_back(tensor(t));
            return list;
        }
        if (kind == "as_optional_tensors") {
            c10::List<std::optional<at::Tensor>> list;
            for (const auto& t : v)
                list.push_back(t.contains("as_tensor") ? std::optional<at::Tensor>(tensor(t.at("as_tensor")))
                                                       : std::nullopt);
            return list;
        }
        if (kind == "as_optional_tensor")
            return v.contains("as_tensor") ? c10::IValue(tensor(v.at("as_tensor"))) : c10::IValue();
        if (kind == "as_int")
            return v.get<std::int64_t>();
        if (kind == "as_ints")
            return v.get<std::vector<std::int64_t>>();
        if (kind == "as_float")
            return floating(v);
        if (kind == "as_floats") {
            std::vector<double> out;
            for (const auto& f : v)
                out.push_back(floating(f));
            return out;
        }
        if (kind == "as_string")
            return v.get<std::string>();
        if (kind == "as_strings") {
            c10::List<std::string> list;
            for (const auto& s : v)
                list.push_back(s.get<std::string>());
            return list;
        }
        if (kind == "as_bool")
            return v.get<bool>();
        if (kind == "as_bools") {
            c10::List<bool> list;
            for (const auto& b : v)
                list.push_back(b.get<bool>());
            return list;
        }
        if (kind == "as_sym_int" || kind == "as_sym_float" || kind == "as_sym_bool")
            return sym(v);
        if (kind == "as_sym_ints") {
            std::vector<std::int64_t> out;
            for (const auto& s : v)
                out.push_back(sym(s).toInt());
            return out;
        }
        if (kind == "as_sym_floats") {
            std::vector<double> out;
            for (const auto& s : v)
                out.push_back(sym(s).toDouble());
            return out;
        }
        if (kind == "as_sym_bools") {
            c10::List<bool> out;
            for (const auto& s : v)
                out.push_back(sym(s).toBool());
            return out;
        }
        if (kind == "as_scalar_type") {
            auto t = scalarOf(v.get<int>());
            return static_cast<std::int64_t>(t == exported && !keep_type ? runs : t);
        }
        if (kind == "as_memory_format")
            return static_cast<std::int64_t>(memoryFormatOf(v.get<int>()));
        if (kind == "as_layout")
            return static_cast<std::int64_t>(layoutOf(v.get<int>()));
        if (kind == "as_device")
            return device; // the run's: a program exported on another device runs here
        if (kind == "as_int_lists") {
            c10::List<c10::List<std::int64_t>> out;
            for (const auto& l : v)
                out.push_back(c10::List<std::int64_t>(l.get<std::vector<std::int64_t>>()));
            return out;
        }
        throw RunError("the program passes an argument of kind " + kind + ", which memledger does not run");
    }

    // A node output (or a list of them) bound to the value the operator returned.
    void bind(const json& out, const c10::IValue& v)
    {
        if (!out.is_object() || out.empty())
            return;
        const std::string kind = out.begin().key();
        const json& o = out.begin().value();
        if (kind == "as_tensor") {
            values[o.at("name").get<std::string>()] = v;
        } else if (kind == "as_tensors") {
            auto list = v.toTensorList();
            for (std::size_t i = 0; i < o.size() && i < list.size(); ++i)
                values[o[i].at("name").get<std::string>()] = list.get(i);
        } else if (kind == "as_optional_tensors") {
            auto list = v.toListRef();
            for (std::size_t i = 0; i < o.size() && i < list.size(); ++i)
                if (o[i].contains("as_tensor"))
                    values[o[i].at("as_tensor").at("name").get<std::string>()] = list[i];
        } else if (kind == "as_sym_int" || kind == "as_sym_float" || kind == "as_sym_bool") {
            if (o.contains("as_name"))
                values[o.at("as_name").get<std::string>()] = v;
        } else if (kind == "as_sym_ints") {
            auto list = v.toListRef();
            for (std::size_t i = 0; i < o.size() && i < list.size(); ++i)
                if (o[i].contains("as_name"))
                    values[o[i].at("as_name").get<std::string>()] = list[i];
        }
        // as_none: an output nobody reads
    }
};

} // namespace

c10::IValue ExportedProgram::run(const std::vector<at::Tensor>& inputs, const std::function<void(const std::string&)>& onNode)
{
    auto& d = *d_;
    Env env;
    env.exported = d.exported;
    env.runs = d.run_scalar;
    if (!inputs.empty())
        env.device = inputs.front().device();
    else if (!d.parameters.empty())
        env.device = d.parameters.front().value.device();
    for (const auto& [name, ref] : d.weight_inputs)
        env.values[name] = (ref.buffer ? d.buffers : d.parameters)[ref.index].value;
    for (const auto& [name, t] : d.constants)
        env.values[name] = t.device() == env.device ? t : t.to(env.device);
    for (std::size_t i = 0; i < d.user_inputs.size() && i < inputs.size(); ++i)
        env.values[d.user_inputs[i]] = inputs[i];
    for (auto& node : d.nodes) {
        if (node.assertion) {
            for (const auto& name : node.last_use)
                env.values.erase(name);
            continue;
        }
        if (onNode)
            onNode(node.module);
        env.keep_type = node.keeps_type;
        if (!node.op) {
            std::vector<c10::IValue> args;
            for (const auto& in : *node.inputs)
                args.push_back(env.value(in.at("arg")));
            if (!node.outputs->empty())
                env.bind(node.outputs->front(), pythonOperator(node.target, args));
            for (const auto& name : node.last_use)
                env.values.erase(name);
            continue;
        }
        const auto& schema = node.op->schema();
        torch::jit::Stack stack;
        stack.reserve(schema.arguments().size());
        for (const auto& a : schema.arguments()) {
            const json* given = nullptr;
            for (const auto& in : *node.inputs)
                if (in.value("name", std::string()) == a.name()) {
                    given = &in.at("arg");
                    break;
                }
            if (given) {
                auto v = env.value(*given);
                // A Python number passed where the schema takes a Tensor (`x + 1e-6` as add.Tensor): a wrapped
                // number, as Python's argument parser makes it, so that it does not promote the result's type.
                if ((v.isDouble() || v.isInt() || v.isBool()) && a.type()->kind() == c10::TypeKind::TensorType) {
                    auto t = at::scalar_to_tensor(v.toScalar());
                    t.unsafeGetTensorImpl()->set_wrapped_number(true);
                    v = t;
                }
                stack.push_back(std::move(v));
            }
            else if (a.default_value())
                stack.push_back(*a.default_value());
            else
                throw RunError("the program calls " + schema.name() + " without its argument '" + a.name() + "'");
        }
        node.op->callBoxed(stack);
        const auto& outs = *node.outputs;
        for (std::size_t i = 0; i < outs.size() && i < stack.size(); ++i)
            env.bind(outs[i], stack[i]);
        stack.clear();
        for (const auto& name : node.last_use)
            env.values.erase(name);
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

bool ExportedProgram::metaWeights() const
{
    return d_->meta_weights;
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

const std::vector<std::string>& ExportedProgram::loadNotes() const
{
    return d_->notes;
}

std::string ExportedProgram::conversionNote(c10::ScalarType runs) const
{
    const auto& d = *d_;
    const auto from = dtypeName(d.exported), to = dtypeName(runs);
    std::string note = "converted: exported in " + from + ", run in " + to + " (its floating weights, and each " + from
        + " type its graph passes, as the program exported from model.to(torch." + to + ") would)";
    if (!d.source_lines)
        return note + "; its nodes carry no source lines, so a cast to " + from + " the model makes on purpose (an "
            "RMSNorm's x.float()) ran in " + to + " too: export from model.to(torch." + to + ") to record those as they are";
    return note + "; " + std::to_string(d.kept_casts) + (d.kept_casts == 1 ? " op keeps " : " ops keep ") + from
        + " because the model's source names it (x.float(), .to(torch." + from + "), dtype=torch." + from + ")";
}

void ExportedProgram::convert(std::optional<c10::ScalarType> scalar, std::optional<c10::Device> device)
{
    auto& d = *d_;
    if (scalar)
        d.run_scalar = *scalar;
    for (auto* list : {&d.parameters, &d.buffers})
        for (auto& t : *list) {
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
c10::IValue ExportedProgram::run(const std::vector<at::Tensor>&, const std::function<void(const std::string&)>&)
{
    throw std::runtime_error("torch.export programs need the PyTorch 2 build of memledger");
}
void ExportedProgram::convert(std::optional<c10::ScalarType>, std::optional<c10::Device>) { }
bool ExportedProgram::metaWeights() const
{
    return false;
}
c10::ScalarType ExportedProgram::exportedScalar() const
{
    return c10::kFloat;
}
std::string ExportedProgram::autocastNote() const
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
