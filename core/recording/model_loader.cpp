#include "recording/model_impl.h"

#include "support/errors.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

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

namespace {

std::string typeName(const torch::jit::Module& m)
{
    auto qualified = m.type()->name();
    if (!qualified)
        return "Module";
    std::string n = qualified->name(); // last component: "Conv2d"
    return n;
}

std::string firstLine(const std::string& s)
{
    auto pos = s.find('\n');
    return pos == std::string::npos ? s : s.substr(0, pos);
}

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

void collect(Model::Impl& d)
{
    auto& info = d.info;
    info.type = typeName(d.module);
    std::map<std::string, int> index;
    for (const auto& item : d.module.named_modules()) {
        LayerStats row;
        row.path = item.name;
        row.type = typeName(item.value);
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
        (buffer ? info.buffer_bytes : info.parameter_bytes) += ti.bytes;
        info.bytes_by_dtype[ti.dtype] += ti.bytes;
        auto dot = name.rfind('.');
        auto it = index.find(dot == std::string::npos ? "" : name.substr(0, dot));
        for (int m = it == index.end() ? 0 : it->second; m >= 0; m = d.modules[m].parent)
            d.modules[m].weight_bytes += ti.bytes;
        info.tensors.push_back(std::move(ti));
    };
    for (const auto& p : d.module.named_parameters(true))
        addTensor(p.name, p.value, false);
    for (const auto& b : d.module.named_buffers(true))
        addTensor(b.name, b.value, true);
}

std::unique_ptr<Model::Impl> loadFrom(
    std::istream& in, const std::string& name, const std::string& head, const std::string& tail)
{
    auto d = std::make_unique<Model::Impl>();
    try {
        d->module = torch::jit::load(in, torch::kCPU);
    } catch (const c10::Error& e) {
        throw FileError(name, explainLoadFailure(head, tail, firstLine(e.what_without_backtrace())));
    } catch (const std::exception& e) {
        throw FileError(name, explainLoadFailure(head, tail, firstLine(e.what())));
    }
    d->module.eval();
    d->info.path = name;
    collect(*d);
    return d;
}

} // namespace

Model::Model(std::unique_ptr<Impl> d)
    : d_(std::move(d))
{
}
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

Model Model::open(const std::string& path)
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
    Model m(loadFrom(in, path, head, tail));
    m.d_->info.file_bytes = static_cast<std::int64_t>(size);
    return m;
}

Model Model::openBytes(const std::string& bytes, const std::string& name)
{
    if (bytes.empty())
        throw FileError(name, "the file is empty");
    std::istringstream in(bytes);
    Model m(loadFrom(
        in, name, bytes.substr(0, 16), bytes.substr(bytes.size() - std::min<std::size_t>(bytes.size(), 66000))));
    m.d_->info.file_bytes = static_cast<std::int64_t>(bytes.size());
    return m;
}

const ModelInfo& Model::info() const
{
    return d_->info;
}
const std::vector<LayerStats>& Model::modules() const
{
    return d_->modules;
}

std::vector<Shape> Model::guessInputs(std::string* how) const
{
    std::lock_guard<std::mutex> lock(d_->run_mutex); // a run may be converting the weights meanwhile
    return guessInputsLocked(*d_, how);
}

std::vector<Shape> guessInputsLocked(Model::Impl& d, std::string* how)
{
    for (const auto& p : d.module.named_parameters(true)) {
        if (p.name.size() < 7 || p.name.compare(p.name.size() - 7, 7, ".weight") != 0)
            continue;
        auto owner = p.name.substr(0, p.name.size() - 7);
        std::string type;
        for (const auto& m : d.modules)
            if (m.path == owner)
                type = m.type;
        const auto& w = p.value;
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

} // namespace memledger
