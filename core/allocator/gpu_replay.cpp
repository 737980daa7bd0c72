#include "allocator/gpu_replay.h"

#include "report/report.h"
#include "report/report_summary.h"
#include "support/dtype.h"

#include <cmath>

namespace memledger {

std::int64_t ResidentSet::bytes() const
{
    std::int64_t total = 0;
    for (auto b : blocks)
        total += b;
    return total;
}


ResidentSet residentBlocks(const ModelInfo& model, const std::string& dtype, std::int64_t weightBytes,
    std::int64_t optimizerStateBytes, const std::vector<Shape>& inputs, const std::vector<InputType>& inputTypes,
    std::int64_t inputBytes)
{
    ResidentSet set;
    const auto width = dtypeSize(dtype);
    std::int64_t weights = 0, parameters = 0;
    std::vector<std::int64_t> parameterBlocks;
    for (const auto& t : model.tensors) {
        auto bytes = isFloatingDtype(t.dtype) && width > 0 ? numelOf(t.shape) * width : t.bytes;
        if (bytes <= 0)
            continue;
        set.blocks.push_back(bytes);
        weights += bytes;
        if (t.trainable() && isFloatingDtype(t.dtype)) { // the parameters the optimizer keeps state for
            parameters += bytes;
            parameterBlocks.push_back(bytes);
        }
    }
    if (model.tensors.empty() && weightBytes > 0)
        set.blocks.push_back(weightBytes);
    if (optimizerStateBytes > 0) {
        // Momentum keeps one tensor like each parameter, Adam two: place them per parameter, the rest as one.
        auto perParameter = parameters > 0 ? optimizerStateBytes / parameters : 0;
        std::int64_t placed = 0;
        for (std::int64_t k = 0; k < perParameter; ++k)
            for (auto b : parameterBlocks) {
                set.blocks.push_back(b);
                placed += b;
            }
        if (optimizerStateBytes - placed > 0)
            set.blocks.push_back(optimizerStateBytes - placed);
    }
    std::int64_t placedInputs = 0;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
        auto bytes = numelOf(inputs[i]) * dtypeSize(inputTypeAt(inputTypes, i).runDtype(dtype));
        if (bytes > 0) {
            set.blocks.push_back(bytes);
            placedInputs += bytes;
        }
    }
    if (inputBytes - placedInputs > 0) // targets of a training step, or inputs not listed
        set.blocks.push_back(inputBytes - placedInputs);
    return set;
}

ResidentSet residentBlocksOf(const Report& r)
{
    if (r.run.parallel && !r.run.parallel->resident_blocks.empty()) { // one rank: its shards, then the inputs
        auto set = residentBlocks(ModelInfo {}, r.run.dtype, 0, 0, r.run.input_shapes, r.run.input_types, r.input_bytes);
        set.blocks.insert(set.blocks.begin(), r.run.parallel->resident_blocks.begin(), r.run.parallel->resident_blocks.end());
        return set;
    }
    return residentBlocks(r.model, r.run.dtype, r.weight_bytes, r.optimizer_state_bytes, r.run.input_shapes,
        r.run.input_types, r.input_bytes);
}

void pushResidentBlocks(Trace& out, const ResidentSet& set, std::int8_t device)
{
    std::uint64_t fake = std::uint64_t {1} << 62; // far from any address a run records
    for (auto b : set.blocks)
        out.push(0, b, fake += std::uint64_t {1} << 36, Action::Alloc, device);
}

Trace withResidentSet(const Report& r, std::size_t* preloaded)
{
    static const Trace kEmpty;
    const Trace& t = r.trace ? *r.trace : kEmpty;
    Trace sim;
    auto resident = residentBlocksOf(r);
    sim.reserve(t.size() + resident.blocks.size());
    std::int8_t dev = t.size() ? t.device.front() : -1;
    pushResidentBlocks(sim, resident, dev);
    const auto first = static_cast<std::int32_t>(sim.size());
    if (preloaded)
        *preloaded = sim.size();
    for (std::size_t i = 0; i < t.size(); ++i) {
        auto k = sim.push(t.time_ns[i], t.bytes[i], t.address[i], t.action[i], t.device[i]);
        sim.partner[k] = t.partner[i] == kNoPartner ? kNoPartner : t.partner[i] + first;
        sim.ledger[k] = t.ledger[i];
        sim.outer_op[k] = sim.strings.intern(t.strings.at(t.outer_op[i]));
        sim.inner_op[k] = sim.strings.intern(t.strings.at(t.inner_op[i]));
        sim.where[k] = sim.strings.intern(t.strings.at(t.where[i]));
        sim.op_seq[k] = t.op_seq[i];
    }
    return sim;
}

SimulatedGpu simulateGpu(const Report& r, const AllocatorSettings& settings)
{
    SimulatedGpu out;
    if (!r.trace)
        return out;
    Trace sim = withResidentSet(r, &out.preloaded);
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

void setRunTrace(Report& r, Trace t, std::vector<OpCall> ops)
{
    auto live = setPeakFromTrace(r, t);
    summarizeRunEvents(r, t, ops, live, 0, static_cast<std::uint32_t>(t.size()));
    r.trace = std::make_shared<const Trace>(std::move(t));
    r.ops = std::make_shared<const std::vector<OpCall>>(std::move(ops));
    r.simulated_gpu = std::make_shared<const SimulatedGpu>(simulateGpu(r));
    r.simulated_reserved_peak_bytes = r.simulated_gpu->peak_reserved;
}

} // namespace memledger
