#include "allocator/gpu_replay.h"

#include <cmath>

namespace memledger {

SimulatedGpu simulateGpu(const Report& r, const AllocatorSettings& settings)
{
    SimulatedGpu out;
    if (!r.trace)
        return out;
    const Trace& t = *r.trace;
    Trace sim;
    sim.reserve(t.size() + r.model.tensors.size() + r.run.input_shapes.size() + 2);
    std::uint64_t fake = std::uint64_t {1} << 62; // far from any address the run recorded
    std::int8_t dev = t.size() ? t.device.front() : -1;
    // The file's tensors, scaled to the bytes resident at the run's dtype.
    std::int64_t fileBytes = 0;
    for (const auto& w : r.model.tensors)
        fileBytes += w.bytes;
    std::int64_t placed = 0;
    if (fileBytes > 0 && r.weight_bytes > 0) {
        double scale = static_cast<double>(r.weight_bytes) / static_cast<double>(fileBytes);
        for (const auto& w : r.model.tensors) {
            auto bytes = static_cast<std::int64_t>(std::llround(static_cast<double>(w.bytes) * scale));
            if (bytes > 0) {
                sim.push(0, bytes, fake += std::uint64_t {1} << 36, Action::Alloc, dev);
                placed += bytes;
            }
        }
    }
    if (r.weight_bytes - placed > 0)
        sim.push(0, r.weight_bytes - placed, fake += std::uint64_t {1} << 36, Action::Alloc, dev);
    if (r.input_bytes > 0)
        sim.push(0, r.input_bytes, fake += std::uint64_t {1} << 36, Action::Alloc, dev);
    out.preloaded = sim.size();
    for (std::size_t i = 0; i < t.size(); ++i) {
        auto k = sim.push(t.time_ns[i], t.bytes[i], t.address[i], t.action[i], t.device[i]);
        sim.partner[k]
            = t.partner[i] == kNoPartner ? kNoPartner : t.partner[i] + static_cast<std::int32_t>(out.preloaded);
    }
    out.replay = replayCachingAllocator(sim, settings);
    out.peak_reserved = out.replay.peak_reserved;
    if (out.preloaded && out.replay.reserved_after.size() >= out.preloaded)
        out.reserved_before_run = out.replay.reserved_after[out.preloaded - 1];
    return out;
}

std::shared_ptr<const SimulatedGpu> simulatedGpuOf(const Report& r)
{
    return r.simulated_gpu ? r.simulated_gpu : std::make_shared<const SimulatedGpu>(simulateGpu(r));
}

} // namespace memledger
