#pragma once
// The pieces of a rank's schedule that every data-parallel layout shares (whatif/parallel.cpp: FSDP2, DDP, ZeRO;
// whatif/deepspeed.cpp: DeepSpeed's stages): a parameter's shard, the unit that holds a module, the hook points of
// a recorded step, and where an op ends. Internal to whatif/.
#include "report/report.h"
#include "report/trace_edit.h"
#include "whatif/accumulation.h"
#include "whatif/parallel.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace memledger {

// A parameter as one rank of FSDP holds it: dim 0 chunked into N parts of ceil(rows / N) rows, the last ones
// shorter (or empty) and every shard padded to the first's size.
struct ParamShard {
    std::string name;
    std::string unit;
    std::int64_t numel = 0;
    std::int64_t padded = 0; // elements of each rank's padded shard
    std::int64_t local = 0; // rank 0's elements, unpadded (what its optimizer state covers)
    std::int64_t rows = 0; // dim 0
    bool trainable = true; // takes a gradient: frozen parameters are gathered but never reduced or stepped
    std::int64_t stepped() const { return trainable ? local : 0; } // the elements rank 0's optimizer steps
};

// The unit `path` belongs to: the longest of `units` it lies inside ("" when none does).
const std::string& unitOf(const std::string& path, const std::vector<std::string>& units);
// The model's floating-point parameters, each with its unit; sharded on dim 0 over `gpus` (shard) or whole.
std::vector<ParamShard> shardParameters(const ModelInfo& model, const std::vector<std::string>& units, int gpus,
    bool shard);

// A rank's buffers, resident before the step: floating-point ones at `elementBytes` a value (the dtype the rank's
// module is cast to), the others as recorded; their bytes in all, and one block each (those of any bytes).
struct ResidentBuffers {
    std::int64_t bytes = 0;
    std::vector<std::int64_t> blocks;
};
ResidentBuffers residentBuffers(const ModelInfo& model, std::int64_t elementBytes);

// The step's parts that the schedule hooks onto.
struct Hooks {
    std::map<std::string, std::size_t> pre_forward, post_forward, pre_backward, post_backward;
    std::vector<std::string> forward_order; // units whose forward ran, in the order their forward began (the root first)
    std::vector<std::string> post_forward_order; // the same, in the order their forward ended (the root last)
};

// `units`' hooks over the step's forward and backward phases (the first two of `phases` named so).
Hooks findHooks(const Trace& t, const std::vector<OpCall>& ops, const std::vector<Phase>& phases,
    const std::vector<std::string>& units);

// A hook of the step's units, as the schedule meets them (hookPoints).
struct HookPoint {
    std::size_t pos;
    int order; // 0: post-forward, 1: post-backward, 2: pre-forward, 3: pre-backward, 4: the backward's end (the root's)
    std::string unit;
    std::size_t micro = 0; // the micro-step shown
};
struct HookPoints {
    // In step order: a micro-step's before the next's, and at one position a unit's post hooks before the next
    // unit's pre hooks.
    std::vector<HookPoint> points;
    // Per micro-step, the units in the order their forward ended (the root last).
    std::vector<std::vector<std::string>> post_forward_orders;
};
// The hooks of `units` over each micro-step's forward and backward phases (findHooks), one micro-step without
// gradient accumulation: what FSDP2 and DeepSpeed's stage 3 gather, reshard and reduce around.
HookPoints hookPoints(const Trace& step, const std::vector<OpCall>& ops, const std::vector<Phase>& phases,
    const std::vector<MicroSteps::Shown>& microSteps, const std::vector<std::string>& units);

// Where the op an event lies in ends: the event after the op call that began last at or before it (its outputs'
// last owner, AccumulateGrad, is done by then), at least the event after it, at most `limit`.
class OpEnds {
public:
    OpEnds(const std::vector<OpCall>& ops, std::size_t limit)
        : ops_(ops)
        , limit_(limit)
    {
    }
    // The op call event i lies in (the last that began at or before it); null before the first.
    const OpCall* opAt(std::size_t i) const
    {
        auto op = std::upper_bound(
            ops_.begin(), ops_.end(), i, [](std::size_t event, const OpCall& o) { return event < o.first_event; });
        return op == ops_.begin() ? nullptr : &*(op - 1);
    }
    std::size_t endOfOpAt(std::size_t i) const
    {
        const OpCall* op = opAt(i);
        return std::min(op ? std::max<std::size_t>(op->end_event, i + 1) : i + 1, limit_);
    }

private:
    const std::vector<OpCall>& ops_;
    std::size_t limit_;
};

// The optimizer step's scratch (its allocs freed inside the phase) taken off the device's trace, as an offloaded
// optimizer steps on the host: returns its peak there.
std::int64_t moveOptimizerScratchToHost(TraceEdit& edit, const Trace& step, const Phase& optimizer);

// DeepSpeed's ZeRO stages (whatif/deepspeed.cpp): layOutRank's work for a ds-zero1/2/3 plan, over the step as laid
// out in micro-steps (one without gradient accumulation).
RankLayout layOutDeepSpeedRank(const ModelInfo& model, const Trace& step, const std::vector<OpCall>& ops,
    const std::vector<Phase>& phases, const std::vector<MicroSteps::Shown>& microSteps, const RunInfo& run,
    std::int64_t optimizerStateBytes, const ParallelPlan& plan);

} // namespace memledger
