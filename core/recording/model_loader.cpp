#include "recording/model_impl.h"
#include "recording/operator_libraries.h"

#include "support/errors.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/version.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

namespace memledger {

namespace fs = std::filesystem;

c10::ScalarType scalarTypeFor(const std::string& dtype)
{
    if (dtype == "float32")
        return c10::kFloat;
    if (dtype == "bfloat16")
        return c10::kBFloat16;
    if (dtype == "float16")
        return c10::kHalf;
    if (dtype == "int64")
        return c10::kLong;
    if (dtype == "int32")
        return c10::kInt;
    if (dtype == "bool")
        return c10::kBool;
    throw RunError("unknown dtype '" + dtype + "' (use float32, bfloat16 or float16)");
}

std::string dtypeName(c10::ScalarType t)
{
    switch (t) {
    case c10::kFloat:
        return "float32";
    case c10::kHalf:
        return "float16";
    case c10::kBFloat16:
        return "bfloat16";
    case c10::kDouble:
        return "float64";
    case c10::kLong:
        return "int64";
    case c10::kInt:
        return "int32";
    case c10::kShort:
        return "int16";
    case c10::kChar:
        return "int8";
    case c10::kByte:
        return "uint8";
    case c10::kBool:
        return "bool";
    default:
        return c10::toString(t);
    }
}

std::optional<c10::ScalarType> scalarTypeNamed(const std::string& name)
{
    for (auto t : {c10::kFloat, c10::kHalf, c10::kBFloat16, c10::kDouble, c10::kLong, c10::kInt, c10::kShort, c10::kChar,
             c10::kByte, c10::kBool})
        if (dtypeName(t) == name)
            return t;
    return std::nullopt;
}

namespace {

std::string typeName(const torch::jit::Module& m)
{
    auto qualified = m.type()->name();
    if (!qualified)
        return "Module";
    std::string n = qualified->name(); // last component: "Conv2d"
    return n;
}

// The first line that says something (TorchScript's messages may begin with a newline).
std::string firstLine(const std::string& s)
{
    auto start = s.find_first_not_of(" \t\r\n");
    if (start == std::string::npos)
        return "no reason given";
    auto pos = s.find('\n', start);
    return pos == std::string::npos ? s.substr(start) : s.substr(start, pos - start);
}

// What torch.save wrote, told from the archive's first entry, data.pkl (stored uncompressed at the start): "state_dict"
// (an OrderedDict or dict of tensors: the weights without the code), "module" (a whole nn.Module pickled by class
// name), or "" when the archive is neither.
std::string torchSaveKind(std::istream& in)
{
    std::string start(4096, '\0');
    in.clear();
    in.seekg(0);
    in.read(start.data(), static_cast<std::streamsize>(start.size()));
    start.resize(static_cast<std::size_t>(in.gcount()));
    in.clear();
    in.seekg(0);
    auto at = start.find("/data.pkl");
    if (at == std::string::npos || at > 200)
        return {};
    auto pickle = start.find('\x80', at);
    if (pickle == std::string::npos)
        return {};
    // PROTO 2, then the pickled object's first opcode: EMPTY_DICT (a dict of tensors, a checkpoint) or GLOBAL of
    // its class: collections.OrderedDict (a state_dict) or any other (an object: a whole module).
    auto body = start.substr(pickle, 256);
    if (body.size() < 3)
        return {};
    if (body[2] == '}' || body.compare(2, 25, "ccollections\nOrderedDict\n") == 0)
        return "state_dict";
    if (body[2] == 'c')
        return "module";
    return {};
}

// What to do with a torch.save file instead: export the model with its code.
const char* kExportAdvice = "save the model with its code instead: torch.export.save(torch.export.export(model, "
                            "example_inputs), \"model.pt2\") (or memledger.export from memledger's Python package, "
                            "docs/python.md), or torch.jit.save(torch.jit.script(model), \"model.pt\")";

// Why a file that starts with `head` is not a TorchScript model, in words a user can act on.
// `tail` is the end of the file: a whole zip archive ends with its end-of-central-directory record.
std::string explainLoadFailure(const std::string& head, const std::string& tail, const std::string& torchMessage)
{
    if (head.size() >= 2 && head[0] == 'P' && head[1] == 'K') {
        bool whole = tail.find(std::string("PK\x05\x06", 4)) != std::string::npos;
        if (whole || torchMessage.find("constants.pkl") != std::string::npos
            || torchMessage.find("code/") != std::string::npos || torchMessage.find("bytecode") != std::string::npos)
            return "a zip archive but not a TorchScript model (saved with torch.save instead of torch.jit.save?): "
                + torchMessage;
        return "damaged or truncated TorchScript archive: " + torchMessage;
    }
    if (!head.empty() && static_cast<unsigned char>(head[0]) == 0x80)
        return "a Python pickle, not a TorchScript archive (save the model with torch.jit.save)";
    bool text = !head.empty();
    for (unsigned char c : head)
        if (c < 9 || (c > 13 && c < 32 && c != 27))
            text = false;
    if (text)
        return "a text file, not a TorchScript model (expected a zip archive written by torch.jit.save)";
    return "not a TorchScript model (expected a zip archive written by torch.jit.save)";
}

// The batch (dimension 0 of every input) and the sequence (dimension 1 of every token input) the program's range
// constraints allow: a fixed dimension allows its size alone, a symbol its range.
void collectRanges(const ExportedProgram& program, ModelInfo& info)
{
    const auto& inputs = program.inputs();
    for (std::size_t i = 0; i < inputs.size(); ++i) {
        const auto& in = inputs[i];
        if (!in.tensor)
            continue;
        InputType type;
        type.dtype = in.dtype;
        auto limit = [&](std::size_t k, SizeRange& range) {
            if (in.dims.size() <= k)
                return;
            const auto& dim = in.dims[k];
            auto where = "input " + std::to_string(i + 1) + " (" + in.name + "): dimension " + std::to_string(k);
            if (dim.fixed)
                range.narrow(*dim.fixed, *dim.fixed,
                    where + " was exported fixed at " + std::to_string(*dim.fixed)
                        + " (export it with a dynamic dimension to vary it)");
            else if (!dim.symbol.empty()) {
                SizeRange r;
                r.min = std::max<std::int64_t>(1, dim.min);
                r.max = dim.max;
                // torch.export's own symbols (s0, s27) name nothing a user wrote: the range is said without them.
                const bool internal = dim.symbol.size() > 1 && dim.symbol[0] == 's'
                    && std::all_of(dim.symbol.begin() + 1, dim.symbol.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
                range.narrow(r.min, r.max, where + " was exported for " + r.text()
                        + (!dim.why.empty() ? " (" + dim.why + ")"
                                : internal  ? std::string(" (the range torch.export recorded: the Dim's bounds, narrowed by "
                                                          "any guard in the model's code that depends on it)")
                                            : " (" + dim.symbol + ")"));
            }
        };
        limit(0, info.batch_range);
        if (type.isToken())
            limit(1, info.seq_range);
    }
}

// The order in which a TorchScript module's forward first calls its submodules (prim::CallMethod on a chain of
// attributes of `self`, loops over a ModuleList unrolled by the compiler), depth first: path -> rank.
void callOrder(const torch::jit::Module& module, const std::string& prefix, std::map<std::string, int>& rank,
    int depth = 0)
{
    if (depth > 64 || !module.find_method("forward"))
        return;
    auto graph = module.get_method("forward").graph();
    std::unordered_map<const torch::jit::Value*, std::string> pathOf; // values that are submodules of `module`
    if (!graph->inputs().empty())
        pathOf[graph->inputs()[0]] = "";
    auto visit = [&](torch::jit::Block* block, auto&& self) -> void {
        for (auto* node : block->nodes()) {
            if (node->kind() == c10::prim::GetAttr) {
                auto it = pathOf.find(node->input(0));
                if (it != pathOf.end() && node->output()->type()->cast<c10::ClassType>()) {
                    auto name = node->s(c10::attr::name);
                    pathOf[node->output()] = it->second.empty() ? name : it->second + "." + name;
                }
            } else if (node->kind() == c10::prim::CallMethod && node->inputs().size() > 0) {
                auto it = pathOf.find(node->input(0));
                if (it != pathOf.end() && !it->second.empty()) {
                    auto full = prefix.empty() ? it->second : prefix + "." + it->second;
                    for (auto dot = full.find('.'); dot != std::string::npos; dot = full.find('.', dot + 1))
                        rank.emplace(full.substr(0, dot), static_cast<int>(rank.size()));
                    if (rank.emplace(full, static_cast<int>(rank.size())).second) {
                        std::optional<torch::jit::Module> target;
                        try {
                            torch::jit::Module m = module;
                            std::size_t start = 0;
                            while (true) {
                                auto dot = it->second.find('.', start);
                                m = m.attr(it->second.substr(start, dot == std::string::npos ? std::string::npos
                                                                                             : dot - start)).toModule();
                                if (dot == std::string::npos)
                                    break;
                                start = dot + 1;
                            }
                            target = m;
                        } catch (const std::exception&) {
                        }
                        if (target)
                            callOrder(*target, full, rank, depth + 1);
                    }
                }
            }
            for (auto* b : node->blocks())
                self(b, self);
        }
    };
    visit(graph->block(), visit);
}

// Siblings in the order the forward first calls them (the modules it never calls after, as registered).
void sortByCalls(std::vector<std::pair<std::string, std::string>>& tree, const std::map<std::string, int>& rank)
{
    std::map<std::string, std::vector<std::size_t>> children;
    for (std::size_t i = 1; i < tree.size(); ++i) {
        auto dot = tree[i].first.rfind('.');
        children[dot == std::string::npos ? "" : tree[i].first.substr(0, dot)].push_back(i);
    }
    auto rankOf = [&](std::size_t i) {
        auto it = rank.find(tree[i].first);
        return it == rank.end() ? static_cast<int>(rank.size()) : it->second;
    };
    std::vector<std::pair<std::string, std::string>> out;
    auto walk = [&](std::size_t i, auto&& self) -> void {
        out.push_back(tree[i]);
        auto it = children.find(tree[i].first);
        if (it == children.end())
            return;
        auto kids = it->second;
        std::stable_sort(kids.begin(), kids.end(), [&](std::size_t a, std::size_t b) { return rankOf(a) < rankOf(b); });
        for (auto k : kids)
            self(k, self);
    };
    if (!tree.empty() && tree.front().first.empty()) {
        walk(0, walk);
        if (out.size() == tree.size())
            tree = std::move(out);
    }
}

void collect(Model::Impl& d)
{
    auto& info = d.info;
    std::vector<std::pair<std::string, std::string>> tree; // path, type; parents first
    if (d.program) {
        info.type = d.program->rootType();
        for (const auto& m : d.program->modules())
            tree.emplace_back(m.path, m.path.empty() ? info.type : m.type);
    } else {
        info.type = typeName(d.module);
        for (const auto& item : d.module.named_modules())
            tree.emplace_back(item.name, typeName(item.value));
        std::map<std::string, int> rank;
        try {
            callOrder(d.module, "", rank);
        } catch (const std::exception&) { // a graph memledger cannot walk keeps the registration order
            rank.clear();
        }
        sortByCalls(tree, rank);
    }
    std::map<std::string, int> index;
    for (const auto& [path, type] : tree) {
        LayerStats row;
        row.path = path;
        row.type = type;
        auto dot = row.path.rfind('.');
        row.name = row.path.empty() ? row.type : (dot == std::string::npos ? row.path : row.path.substr(dot + 1));
        if (!row.path.empty()) {
            std::string parentPath = dot == std::string::npos ? "" : row.path.substr(0, dot);
            auto it = index.find(parentPath);
            row.parent = it == index.end() ? 0 : it->second;
            row.depth = d.modules[row.parent].depth + 1;
            d.modules[row.parent].children.push_back(static_cast<int>(d.modules.size()));
        }
        index[row.path] = static_cast<int>(d.modules.size());
        d.modules.push_back(std::move(row));
    }
    auto addTensor = [&](const std::string& name, const at::Tensor& t, bool buffer) {
        TensorInfo ti;
        ti.name = name;
        ti.shape.assign(t.sizes().begin(), t.sizes().end());
        ti.dtype = dtypeName(t.scalar_type());
        ti.bytes = static_cast<std::int64_t>(t.numel() * t.element_size());
        ti.is_buffer = buffer;
        ti.requires_grad = !buffer && t.requires_grad();
        (buffer ? info.buffer_bytes : info.parameter_bytes) += ti.bytes;
        info.bytes_by_dtype[ti.dtype] += ti.bytes;
        auto dot = name.rfind('.');
        auto it = index.find(dot == std::string::npos ? "" : name.substr(0, dot));
        for (int m = it == index.end() ? 0 : it->second; m >= 0; m = d.modules[m].parent)
            d.modules[m].weight_bytes += ti.bytes;
        info.tensors.push_back(std::move(ti));
    };
    for (const auto& [name, t] : d.namedParameters())
        addTensor(name, t, false);
    for (const auto& [name, t] : d.namedBuffers())
        addTensor(name, t, true);
    if (d.program) {
        collectRanges(*d.program, info);
        info.exported_checkpointing = d.program->checkpointing();
        if (auto* g = d.program->generation())
            info.generation = g->facts;
        info.example_inputs = true;
    }
}

bool isZip(const std::string& head)
{
    return head.size() >= 4 && head.compare(0, 4, std::string("PK\x03\x04", 4)) == 0;
}

// A zip archive that torch.export.save (or AOTInductor's packager) wrote: its program, or a FileError saying why
// memledger cannot run it. Null when the archive is not one (a TorchScript archive, or not PyTorch's).
std::unique_ptr<ExportedProgram> readExportedProgram(std::istream& in, const std::string& name)
{
    std::string kind;
    std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader;
    try {
        reader = std::make_unique<caffe2::serialize::PyTorchStreamReader>(&in);
        kind = exportedArchiveKind(*reader);
    } catch (const std::exception&) {
        return nullptr; // the TorchScript loader says what the file is
    }
    if (kind.empty())
        return nullptr;
    if (kind == "aotinductor")
        throw FileError(name,
            "an AOTInductor package (torch._inductor.aoti_compile_and_package): compiled kernels without the "
            "graph or its modules, which memledger cannot record; open the program saved with torch.export.save "
            "before compiling instead");
    if (!canRunExportedPrograms())
        throw FileError(name,
            "a torch.export program (.pt2), which needs memledger's PyTorch 2 build; this one uses libtorch "
            TORCH_VERSION " (./packaging/run.sh builds the PyTorch 2 one, the default)");
    try {
        return ExportedProgram::load(*reader);
    } catch (const FileError&) {
        throw;
    } catch (const c10::Error& e) {
        throw FileError(name, "a torch.export program that memledger cannot read: " + firstLine(e.what_without_backtrace()));
    } catch (const std::exception& e) {
        throw FileError(name, "a torch.export program that memledger cannot read: " + firstLine(e.what()));
    }
}

// Why a TorchScript archive did not load, when a newer PyTorch than this build's wrote it (PyTorch 2 archives
// carry .data/serialization_id and byteorder records, which 1.13 never wrote).
std::string newerWriterNote(std::istream& in)
{
#if TORCH_VERSION_MAJOR < 2
    try {
        in.clear();
        in.seekg(0);
        caffe2::serialize::PyTorchStreamReader reader(&in);
        if (reader.hasRecord(".data/serialization_id") || reader.hasRecord("byteorder"))
            return "written by PyTorch 2, which this build's libtorch " TORCH_VERSION
                   " cannot read; open it with memledger's PyTorch 2 build (./packaging/run.sh, the default)";
    } catch (const std::exception&) {
    }
#else
    (void)in;
#endif
    return {};
}

std::unique_ptr<Model::Impl> loadFrom(
    std::istream& in, const std::string& name, const std::string& head, const std::string& tail)
{
    auto d = std::make_unique<Model::Impl>();
    if (isZip(head)) {
        d->program = readExportedProgram(in, name);
        in.clear();
        in.seekg(0);
    }
    if (!d->program) {
        std::optional<std::string> message;
        auto jitLoad = [&] {
            message.reset();
            try {
                d->module = torch::jit::load(in, torch::kCPU);
            } catch (const c10::Error& e) {
                message = firstLine(e.what_without_backtrace());
            } catch (const std::exception& e) {
                message = firstLine(e.what());
            }
        };
        jitLoad();
        // An operator of a library libtorch does not have (torchvision's nms): load the libraries and try again.
        // An ATen or prim operator is libtorch's own: a newer PyTorch wrote the file (said below).
        auto libraryOperator = [&] {
            const auto op = message ? unknownBuiltinOperator(*message) : std::string();
            return op.rfind("aten::", 0) == 0 || op.rfind("prim::", 0) == 0 ? std::string() : op;
        };
        auto rewind = [&] {
            in.clear();
            in.seekg(0);
        };
        if (!libraryOperator().empty()) {
            loadOperatorLibraries(); // the first time only
            rewind();
            jitLoad();
            if (const auto op = libraryOperator(); !op.empty()) {
                rewind();
                if (newerWriterNote(in).empty())
                    throw FileError(name, "a TorchScript model that calls " + op + ", which this libtorch (" TORCH_VERSION
                        ") does not have: " + missingOperatorAdvice(op));
            }
            rewind();
        }
        if (message && isZip(head)) {
            auto kind = torchSaveKind(in);
            if (kind == "state_dict")
                throw FileError(name, std::string("a state_dict saved with torch.save: the weights without the code "
                    "that runs them, so there is no model to run; ") + kExportAdvice);
            if (kind == "module")
                throw FileError(name, std::string("a whole nn.Module pickled with torch.save: its code is Python's, "
                    "which memledger does not run; ") + kExportAdvice);
        }
        if (message) {
            auto newer = newerWriterNote(in);
            throw FileError(name, newer.empty() ? explainLoadFailure(head, tail, *message) : newer + ": " + *message);
        }
        d->module.eval();
    }
    d->info.path = name;
    if (d->program && d->program->metaWeights())
        d->current_device = "meta"; // where its weights are made
    collect(*d);
    return d;
}

} // namespace

Model::Impl* openModel(const std::string& path)
{
    std::error_code ec;
    auto status = fs::status(path, ec);
    if (ec || !fs::exists(status))
        throw FileError(path, "no such file");
    if (fs::is_directory(status))
        throw FileError(path, "is a directory, not a model file");
    auto size = fs::file_size(path, ec);
    if (ec)
        throw FileError(path, "cannot read: " + ec.message());
    if (size == 0)
        throw FileError(path, "the file is empty");
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw FileError(path, "cannot open for reading");
    std::string head(16, '\0');
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    head.resize(static_cast<std::size_t>(in.gcount()));
    std::string tail(std::min<std::uintmax_t>(size, 66000), '\0');
    in.clear();
    in.seekg(static_cast<std::streamoff>(size - tail.size()));
    in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
    in.clear();
    in.seekg(0);
    auto d = loadFrom(in, path, head, tail);
    d->info.file_bytes = static_cast<std::int64_t>(size);
    return d.release();
}

Model::Impl* openModelBytes(const std::string& bytes, const std::string& name)
{
    if (bytes.empty())
        throw FileError(name, "the file is empty");
    std::istringstream in(bytes);
    auto d = loadFrom(
        in, name, bytes.substr(0, 16), bytes.substr(bytes.size() - std::min<std::size_t>(bytes.size(), 66000)));
    d->info.file_bytes = static_cast<std::int64_t>(bytes.size());
    return d.release();
}

std::vector<Shape> guessModelInputs(Model::Impl& d, std::string* how, std::vector<InputType>* types)
{
    std::lock_guard<std::mutex> lock(d.run_mutex); // a run may be converting the weights meanwhile
    return guessInputsLocked(d, how, types);
}

std::vector<Shape> guessInputsLocked(Model::Impl& d, std::string* how, std::vector<InputType>* types)
{
    if (d.program) { // the program knows its inputs: the example it was exported with
        std::vector<Shape> shapes;
        if (types)
            types->clear();
        for (const auto& in : d.program->inputs()) {
            Shape s;
            for (const auto& dim : in.dims)
                s.push_back(dim.example);
            shapes.push_back(s);
            if (types) {
                InputType t;
                t.dtype = isInputDtype(in.dtype) ? in.dtype : "float32";
                types->push_back(t);
            }
        }
        if (how)
            *how = "the sizes and types of the example the program was exported with";
        return shapes;
    }
    if (types)
        types->assign(1, InputType {});
    for (const auto& [name, w] : d.namedParameters()) {
        if (name.size() < 7 || name.compare(name.size() - 7, 7, ".weight") != 0)
            continue;
        auto owner = name.substr(0, name.size() - 7);
        std::string type;
        for (const auto& m : d.modules)
            if (m.path == owner)
                type = m.type;
        if (type == "Embedding" && w.dim() == 2) {
            // A language model: token ids, 0 being one in every vocabulary.
            if (how)
                *how = "guessed from " + owner + " (Embedding, " + std::to_string(w.size(0))
                    + " tokens): 1x128 token ids";
            if (types)
                types->front().dtype = "int64";
            return {{1, 128}};
        }
        if (type == "Conv2d" && w.dim() == 4) {
            int side = 224;
            if (how)
                *how = "guessed from " + owner + " (Conv2d, " + std::to_string(w.size(1)) + " input channels) at "
                    + std::to_string(side) + "x" + std::to_string(side);
            return {{1, w.size(1), side, side}};
        }
        if (type == "Conv1d" && w.dim() == 3) {
            if (how)
                *how = "guessed from " + owner + " (Conv1d) with length 1024";
            return {{1, w.size(1), 1024}};
        }
        if (type == "Linear" && w.dim() == 2) {
            if (how)
                *how = "guessed from " + owner + " (Linear, " + std::to_string(w.size(1)) + " features)";
            return {{1, w.size(1)}};
        }
    }
    return {};
}

namespace {

// Each tensor once: a weight shared by two modules (a tied LM head) is one tensor, counted, trained and
// converted once, under its first name.
template <typename List>
Model::Impl::Named uniqueTensors(const List& list)
{
    Model::Impl::Named out;
    std::unordered_set<const void*> seen;
    for (const auto& t : list)
        if (!t.value.defined() || seen.insert(t.value.unsafeGetTensorImpl()).second)
            out.emplace_back(t.name, t.value);
    return out;
}

} // namespace

Model::Impl::Named Model::Impl::namedParameters()
{
    return program ? uniqueTensors(program->parameters()) : uniqueTensors(module.named_parameters(true));
}

Model::Impl::Named Model::Impl::namedBuffers()
{
    return program ? uniqueTensors(program->buffers()) : uniqueTensors(module.named_buffers(true));
}

Model::Impl::Signature Model::Impl::signature()
{
    Signature s;
    if (program) {
        for (const auto& in : program->inputs())
            s.names.push_back(in.name);
        s.required = s.names.size();
        return s;
    }
    const auto& args = module.get_method("forward").function().getSchema().arguments();
    for (std::size_t i = 1; i < args.size(); ++i) {
        s.names.push_back(args[i].name());
        if (!args[i].default_value())
            s.required = s.names.size();
    }
    return s;
}

c10::IValue Model::Impl::forward(const std::vector<c10::IValue>& inputs, const std::function<void(const std::string&)>& onNode)
{
    if (!program)
        return module.forward(inputs);
    std::vector<at::Tensor> tensors;
    for (const auto& v : inputs)
        tensors.push_back(v.toTensor());
    program->checkInputs(tensors);
    return program->run(tensors, onNode);
}

void Model::Impl::setTraining(bool train)
{
    if (!program)
        module.train(train);
    // An exported program runs as it was exported: dropout and BatchNorm keep the mode of the export.
}

void Model::Impl::convertFloating(c10::ScalarType scalar)
{
    if (program) {
        program->convert(scalar, std::nullopt);
        return;
    }
    // Floating-point parameters and buffers only, as torch.nn.Module.to(dtype) does: integer buffers such as
    // BatchNorm's num_batches_tracked keep their type.
    for (auto sub : module.modules()) {
        for (const auto& attr : sub.named_attributes(false)) {
            if (!attr.value.isTensor())
                continue;
            const auto& t = attr.value.toTensor();
            if (t.defined() && t.is_floating_point() && t.scalar_type() != scalar) {
                // A new leaf of the same kind: a parameter that takes a gradient still takes one.
                auto converted = t.detach().to(scalar);
                converted.set_requires_grad(t.requires_grad());
                sub.setattr(attr.name, converted);
            }
        }
    }
}

void Model::Impl::moveTo(c10::Device device)
{
    if (program) {
        program->convert(std::nullopt, device);
        return;
    }
    if (!device.is_meta()) {
        module.to(device);
        return;
    }
    // Module::to keeps each parameter's identity by set_data, which refuses a meta tensor for a CPU one: each
    // parameter and buffer becomes a new leaf on meta instead (as convertFloating does for a dtype), a tensor held
    // by two modules (tied weights) one tensor still.
    std::unordered_map<const void*, at::Tensor> moved;
    for (auto sub : module.modules()) {
        for (const auto& attr : sub.named_attributes(false)) {
            if (!attr.value.isTensor())
                continue;
            const auto& t = attr.value.toTensor();
            if (!t.defined() || t.is_meta())
                continue;
            auto& m = moved[t.unsafeGetTensorImpl()];
            if (!m.defined()) {
                m = t.detach().to(device);
                m.set_requires_grad(t.requires_grad());
            }
            sub.setattr(attr.name, m);
        }
    }
}

} // namespace memledger
