#include "recording/operator_libraries.h"

#include <ATen/Context.h>

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <mutex>

namespace memledger {

namespace fs = std::filesystem;

namespace {

// The folder of the libtorch this process runs (libtorch_cpu.so's).
fs::path libtorchFolder()
{
    Dl_info info {};
    if (dladdr(reinterpret_cast<void*>(&at::globalContext), &info) == 0 || !info.dli_fname)
        return {};
    std::error_code ec;
    auto path = fs::canonical(info.dli_fname, ec);
    return ec ? fs::path(info.dli_fname).parent_path() : path.parent_path();
}

// torchvision's folders for that libtorch: pip's wheel puts torch/lib/ and torchvision/ in one site-packages;
// Debian's libtorch (/usr/lib/<triplet>) goes with python3-torchvision in /usr/lib/python3/dist-packages.
std::vector<fs::path> torchvisionFolders(const fs::path& lib)
{
    std::vector<fs::path> out;
    if (lib.empty())
        return out;
    if (lib.filename() == "lib" && lib.parent_path().filename() == "torch")
        out.push_back(lib.parent_path().parent_path() / "torchvision");
    if (lib.string().rfind("/usr/lib", 0) == 0)
        out.emplace_back("/usr/lib/python3/dist-packages/torchvision");
    return out;
}

// Its operator library: _C.so (or _C.<abi>.so), or _C_stable.so (torchvision 0.24 and later, on the stable ABI).
std::vector<fs::path> torchvisionLibraries(const fs::path& folder)
{
    std::vector<fs::path> out;
    std::error_code ec;
    for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
        const auto name = it->path().filename().string();
        if (name.size() > 3 && name.compare(name.size() - 3, 3, ".so") == 0
            && (name == "_C.so" || name == "_C_stable.so" || name.rfind("_C.", 0) == 0))
            out.push_back(it->path());
    }
    std::sort(out.begin(), out.end());
    return out;
}

void load(const std::string& path, OperatorLibraries& out)
{
    if (std::find(out.loaded.begin(), out.loaded.end(), path) != out.loaded.end())
        return;
    if (!fs::exists(path)) {
        out.failed.push_back(path + ": no such file");
        return;
    }
    if (dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) // its operators register with the dispatcher as it loads
        out.loaded.push_back(path);
    else {
        const char* why = dlerror();
        out.failed.push_back(path + ": " + (why ? why : "dlopen failed"));
    }
}

} // namespace

const OperatorLibraries& loadOperatorLibraries()
{
    static OperatorLibraries libraries;
    static std::once_flag once;
    std::call_once(once, [] {
        const auto lib = libtorchFolder();
        bool found = false;
        for (const auto& folder : torchvisionFolders(lib)) {
            for (const auto& path : torchvisionLibraries(folder)) {
                load(path.string(), libraries);
                found = true;
            }
            if (found)
                break;
            libraries.searched.push_back(folder.string());
        }
        if (!found && lib.empty())
            libraries.searched.emplace_back("(the libtorch's folder could not be found)");
        if (const char* env = std::getenv("MEMLEDGER_OPS")) {
            std::string list = env;
            std::size_t start = 0;
            while (start <= list.size()) {
                auto colon = list.find(':', start);
                auto path = list.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
                if (!path.empty())
                    load(path, libraries);
                if (colon == std::string::npos)
                    break;
                start = colon + 1;
            }
        }
    });
    return libraries;
}

std::string missingOperatorAdvice(const std::string& op)
{
    const auto& libraries = loadOperatorLibraries();
    const auto ns = op.substr(0, op.find("::"));
    std::string out;
    if (ns == "torchvision") {
        out = op + " is an operator of torchvision's library (torchvision/_C.so, loaded by `import torchvision`): ";
        bool loadedOne = false;
        for (const auto& l : libraries.loaded)
            loadedOne = loadedOne || l.find("torchvision") != std::string::npos;
        if (loadedOne)
            out += "the torchvision loaded here has no " + op + " (another torchvision version wrote the file?)";
        else if (!libraries.searched.empty()) {
            out += "none was found beside this libtorch (looked in ";
            for (std::size_t i = 0; i < libraries.searched.size(); ++i)
                out += (i ? ", " : "") + libraries.searched[i];
            out += "): install torchvision for this PyTorch (pip install torchvision), or give its library with --ops "
                   "PATH or MEMLEDGER_OPS";
        } else
            out += "it did not load; give a torchvision built for this PyTorch with --ops PATH or MEMLEDGER_OPS";
    } else
        out = op + " is an operator of a library of its own (a C++ extension the model's code loads with "
                   "torch.ops.load_library or by importing its package): give that library's .so with --ops PATH or "
                   "MEMLEDGER_OPS";
    for (const auto& f : libraries.failed)
        out += "; could not load " + f;
    return out;
}

std::string unknownBuiltinOperator(const std::string& message)
{
    static const std::string marker = "Unknown builtin op: ";
    auto at = message.find(marker);
    if (at == std::string::npos)
        return {};
    auto begin = at + marker.size();
    auto end = begin;
    while (end < message.size() && (std::isalnum(static_cast<unsigned char>(message[end])) || message[end] == '_'
                                       || message[end] == ':' || message[end] == '.'))
        ++end;
    auto op = message.substr(begin, end - begin);
    while (!op.empty() && (op.back() == '.' || op.back() == ':'))
        op.pop_back();
    return op;
}

} // namespace memledger
