#pragma once
// What a CPU run would reserve on a GPU: the run replayed through the model of PyTorch's CUDA caching
// allocator, with the weights (one block per tensor) and the inputs allocated before it, as on a GPU.
#include "allocator/caching_allocator.h"
#include "report/report.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace memledger {

struct SimulatedGpu {
    AllocatorReplay replay; // over `preloaded` weight and input blocks, then the run's events
    std::size_t preloaded = 0; // the first events of the replay are weights and inputs
    std::int64_t reserved_before_run = 0;
    std::int64_t peak_reserved = 0;
};

// What is resident on a GPU before a run, as blocks in the order a program allocates them: each weight
// tensor of the file at the run's dtype, the optimizer's state of a training step (as many blocks per
// parameter as it keeps per parameter: momentum one, Adam two), one block per input and the targets. The
// report and the what-if both replay a run after these, so that their reserve figures agree.
struct ResidentSet {
    std::vector<std::int64_t> blocks;
    std::int64_t bytes() const;
};
// `weightBytes`: the resident total, for a model whose tensors are not listed (a reopened report); inputs
// and targets: one block of `inputBytes` when `inputs` is empty.
ResidentSet residentBlocks(const ModelInfo& model, const std::string& dtype, std::int64_t weightBytes,
    std::int64_t optimizerStateBytes, const std::vector<Shape>& inputs, const std::vector<InputType>& inputTypes,
    std::int64_t inputBytes);
// The resident set of a report's run.
ResidentSet residentBlocksOf(const Report& r);
// Appends the blocks as allocations at time 0 on `device`, at addresses no run uses.
void pushResidentBlocks(Trace& out, const ResidentSet& set, std::int8_t device);

// The report's run after its resident set: what a GPU would see, for the replay and the snapshot writer.
// `preloaded` (may be null) is told how many of the events are resident blocks.
Trace withResidentSet(const Report& r, std::size_t* preloaded = nullptr);

// Empty replay when the report has no trace.
SimulatedGpu simulateGpu(const Report& r, const AllocatorSettings& settings = {});
// Gives `r` the run `t` with its ops: its peak, ledgers and per-module figures taken from the whole trace
// (report_summary.h), then the caching allocator replayed over it. How a report laid over another one (a rank, a step
// of micro-steps) and a recorded one end.
void setRunTrace(Report& r, Trace t, std::vector<OpCall> ops);
// The report's own replay (made off the GUI thread with the report), or a new one when it has none.
std::shared_ptr<const SimulatedGpu> simulatedGpuOf(const Report& r);

} // namespace memledger
