// Core's side of the seam (torch_library.h): Model and the device list call into memledger's libtorch part, which
// is loaded here on first use. What is known from the build alone (the libtorch version, CUDA, .pt2 and meta
// support) is answered without loading it. No libtorch header is included here.
#include "recording/torch_library.h"

#include "support/errors.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>

namespace memledger {

namespace {

// The library sits beside libmemledger_core.so, in the build tree and where it is installed;
// MEMLEDGER_TORCH_LIBRARY names another (a test, a relocated install).
std::string libraryPath()
{
    if (const char* env = std::getenv("MEMLEDGER_TORCH_LIBRARY"); env && *env)
        return env;
    Dl_info self {};
    if (dladdr(reinterpret_cast<void*>(&libraryPath), &self) && self.dli_fname) {
        std::string here = self.dli_fname;
        auto slash = here.rfind('/');
        if (slash != std::string::npos)
            return here.substr(0, slash + 1) + "libmemledger_torch.so";
    }
    return "libmemledger_torch.so";
}

std::mutex loadMutex;
const TorchEntryPoints* loaded = nullptr;

} // namespace

const TorchEntryPoints& torchLibrary()
{
    std::lock_guard<std::mutex> lock(loadMutex);
    if (loaded)
        return *loaded;
    const std::string path = libraryPath();
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char* why = dlerror();
        throw RunError("cannot load memledger's libtorch part (" + path + "), which opens and runs models: "
            + std::string(why ? why : "unknown reason") + "; snapshots and reports open without it");
    }
    using EntryPoints = const TorchEntryPoints* (*)();
    auto entry = reinterpret_cast<EntryPoints>(dlsym(handle, "memledger_torch_entry_points"));
    const TorchEntryPoints* table = entry ? entry() : nullptr;
    if (!table || table->version != kTorchEntryPointsVersion) {
        dlclose(handle);
        throw RunError(path + " is not the libtorch part of this memledger (another build's?); rebuild memledger");
    }
    loaded = table; // never unloaded: libtorch's globals live until the process ends
    return *loaded;
}

bool torchLibraryLoaded()
{
    std::lock_guard<std::mutex> lock(loadMutex);
    return loaded != nullptr;
}

void Model::ImplDeleter::operator()(Impl* d) const
{
    if (d)
        torchLibrary().destroy(d); // loaded: it made d
}

Model::Model(Impl* d)
    : d_(d)
{
}
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

Model Model::open(const std::string& path)
{
    const TorchEntryPoints* lib = nullptr;
    try {
        lib = &torchLibrary();
    } catch (const RunError& e) {
        throw FileError(path, e.what());
    }
    return Model(lib->open(path));
}

Model Model::openBytes(const std::string& bytes, const std::string& name)
{
    const TorchEntryPoints* lib = nullptr;
    try {
        lib = &torchLibrary();
    } catch (const RunError& e) {
        throw FileError(name, e.what());
    }
    return Model(lib->openBytes(bytes, name));
}

// A Model exists only once the library is loaded, so these never load it.
const ModelInfo& Model::info() const
{
    return torchLibrary().info(*d_);
}
bool Model::metaWeights() const
{
    return torchLibrary().metaWeights(*d_);
}
const std::vector<LayerStats>& Model::modules() const
{
    return torchLibrary().modules(*d_);
}
std::vector<Shape> Model::guessInputs(std::string* how, std::vector<InputType>* types) const
{
    return torchLibrary().guessInputs(*d_, how, types);
}
RawRun Model::run(const RunOptions& options)
{
    return torchLibrary().run(*d_, options);
}

std::vector<DeviceInfo> availableDevices(bool loadTorch)
{
    DeviceInfo cpu;
    cpu.id = "cpu";
    cpu.name = "CPU";
    long pages = sysconf(_SC_PHYS_PAGES), pageSize = sysconf(_SC_PAGESIZE);
    cpu.total_memory_bytes = pages > 0 && pageSize > 0 ? static_cast<std::int64_t>(pages) * pageSize : 0;
    std::vector<DeviceInfo> devices {cpu};
    if (builtWithCuda() && (loadTorch || torchLibraryLoaded()))
        for (auto& d : torchLibrary().cudaDevices())
            devices.push_back(std::move(d));
    return devices;
}

// MEMLEDGER_TORCH_VERSION, MEMLEDGER_HAS_CUDA, MEMLEDGER_CUDA_VERSION, MEMLEDGER_EXPORTED_PROGRAMS and
// MEMLEDGER_META_RUNS come from CMake (core/CMakeLists.txt), which decides them once for both sides.
std::string torchBuildInfo()
{
    std::string text = "libtorch " MEMLEDGER_TORCH_VERSION;
#ifdef MEMLEDGER_HAS_CUDA
    text += ", CUDA " MEMLEDGER_CUDA_VERSION;
#else
    text += ", CPU only";
#endif
    return text;
}

bool builtWithCuda()
{
#ifdef MEMLEDGER_HAS_CUDA
    return true;
#else
    return false;
#endif
}

bool canRunExportedPrograms()
{
    return MEMLEDGER_EXPORTED_PROGRAMS != 0;
}

bool metaRunsSupported()
{
    return MEMLEDGER_META_RUNS != 0;
}

} // namespace memledger
