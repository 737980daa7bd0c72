#pragma once
// Gradient accumulation: K micro-batches' forwards and backwards before one optimizer step, laid over a training
// step recorded at the micro-batch (one forward, loss, backward and optimizer step).
//
// The loop is PyTorch's (Hugging Face's Trainer, torchtitan, nanoGPT): `optimizer.zero_grad(set_to_none=True)`,
// then for each micro-batch `loss = model(x) ...; loss.backward()`, then `optimizer.step()`. The first micro-step's
// backward makes every gradient; each later one makes a gradient per parameter and AccumulateGrad adds it in place
// into the one kept (`param.grad += new`), freeing the new one when the node that made it returns. So the gradients
// stay alive from the first backward through every later forward. With --hold-output step the loop keeps a
// micro-step's output and loss until the next micro-step's forward and loss rebind them, as across steps.
//
// Micro-steps 2 to K-1 are one and the same in memory: the step shows at most three (the first, one of those
// between, and the last, which carries the recorded step's own events and is followed by the optimizer). What the
// data-parallel strategies change between micro-steps (FSDP2 keeps unsharded gradients without a reduce-scatter
// until the last; DDP's no_sync skips the bucket copy) is laid over this by the rank layout (parallel.h).
#include "report/report.h"

#include <cstdint>
#include <string>
#include <vector>

namespace memledger {

struct MicroSteps {
    Trace trace;
    std::vector<OpCall> ops;
    std::vector<Phase> phases;
    int micro_steps = 1; // K
    // Each shown micro-step (the first, one standing for 2..K-1, the last): the index in `phases` of its forward and
    // backward phases. The last is the recorded one (the gradients are synchronized).
    struct Shown {
        std::size_t forward_phase = 0, backward_phase = 0;
    };
    std::vector<Shown> shown;
    // The gradients kept from the first micro-step (Ledger::Gradients allocs) and, per each, the event of the last
    // micro-step whose gradient was added into it (now a temporary of its node): where DDP's bucket takes it over.
    std::vector<std::pair<std::uint32_t, std::uint32_t>> accumulated;
    // Per event: the event of the step it was copied from (a free this lay-over made: its alloc's), so that a what-if
    // sizes each along the batch as the recorded event it came from (WhatIf::withGradAccum).
    std::vector<std::int64_t> event_source;
};

// The step as K micro-steps (k >= 1; 1 gives the step back). `step` is a training step's classified trace with its
// ops and phases ("forward" ... "backward", then "optimizer"). Throws std::invalid_argument where it has none.
MicroSteps accumulateMicroSteps(const Trace& step, const std::vector<OpCall>& ops, const std::vector<Phase>& phases,
    int k);

// What a report laid over as micro-steps says of them.
std::string accumulationNote(const MicroSteps& micro);

// --grad-accum K on one device: the report of a training step laid over as K micro-steps, its figures taken again
// from the new trace and its notes saying what was shown. K = 1: the report as given.
Report accumulatedReport(const Report& step, int k);

// Checks a --grad-accum value: at least 1, and a training step's. Throws std::invalid_argument naming the flag.
void checkGradAccum(int k, RunMode mode);

} // namespace memledger
