// The meta device's allocator: each storage a meta tensor makes gets a size, an address of its own (never memory)
// and a deleter, and is reported to the recorder when it is made and when it dies, as the CPU allocator reports
// its blocks.
#include "recording/meta_device.h"
#include "recording/model.h"
#include "recording/torch_compat.h"

#include "support/errors.h"

#include <c10/core/Allocator.h>

#include <atomic>
#include <cstdint>
#include <mutex>

namespace memledger {

#if MEMLEDGER_META_RUNS // decided in core/CMakeLists.txt

namespace {

struct MetaBlock {
    void* address;
    std::int64_t bytes;
};

void releaseMetaBlock(void* context)
{
    auto* block = static_cast<MetaBlock*>(context);
    c10::reportMemoryUsageToProfiler(block->address, -block->bytes, 0, 0, c10::Device(c10::kMeta));
    delete block;
}

void releaseNothing(void*) { }

// Addresses far above any real mapping: nothing can read a meta tensor's "data" without a fault, and no two live
// storages share one.
class MetaRecordingAllocator final : public c10::Allocator {
public:
    c10::DataPtr allocate(std::size_t bytes) override
    {
        const c10::Device meta(c10::kMeta);
        if (bytes == 0) // the CPU allocator reports no empty block either
            return {nullptr, nullptr, &releaseNothing, meta};
        const std::uint64_t step = (static_cast<std::uint64_t>(bytes) + 63) & ~std::uint64_t {63};
        auto* address = reinterpret_cast<void*>(next_.fetch_add(step, std::memory_order_relaxed));
        auto* block = new MetaBlock {address, static_cast<std::int64_t>(bytes)};
        c10::reportMemoryUsageToProfiler(address, block->bytes, 0, 0, meta);
        return {address, block, &releaseMetaBlock, meta};
    }
    c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
    void copy_data(void*, const void*, std::size_t) const override { } // a meta storage holds no bytes

private:
    std::atomic<std::uint64_t> next_ {std::uint64_t {1} << 46};
};

} // namespace

void installMetaDevice()
{
    static std::once_flag once;
    std::call_once(once, [] {
        static MetaRecordingAllocator allocator; // never destroyed: meta weights outlive any run
        c10::SetAllocator(c10::kMeta, &allocator, 255);
        registerMetaKernels();
    });
}

#else

void installMetaDevice()
{
    throw RunError("--device meta needs memledger's PyTorch 2 build (./packaging/build.sh); this one has libtorch "
        TORCH_VERSION);
}

void registerMetaKernels() { }

#endif

} // namespace memledger
