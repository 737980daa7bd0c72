#pragma once
// Private to core: one dtype's fitted allocation sizes, shared by WhatIf copies.
#include "whatif/whatif.h"

#include <array>
#include <memory>
#include <string>
#include <vector>

namespace memledger {

struct WhatIf::Fit {
    std::string dtype;
    std::string rescaled_from; // empty: recorded in this dtype
    WhatIfAxis axis = WhatIfAxis::Batch; // what b1, b2 and a prediction's x are: batch sizes or sequence lengths
    std::int64_t b1 = 1, b2 = 2; // the smallest and largest record of this fit
    // The run at b2, classified into ledgers: its events, order and alloc/free pairs are replayed.
    std::shared_ptr<const Trace> trace;
    std::shared_ptr<const std::vector<OpCall>> ops;
    RunInfo info; // of the run at b2
    std::vector<double> slope, intercept; // bytes of event i at batch B: slope[i] * B + intercept[i]
    std::vector<double> quad; // a sequence fit's: + quad[i] * T^2 (empty: none)
    std::vector<std::int8_t> sign; // +1 alloc, -1 free of an alloc in the trace, 0 ignored
    std::int64_t parameter_bytes = 0;
    std::int64_t buffer_bytes = 0;
    std::int64_t optimizer_state_bytes = 0; // a training step's: resident, the same at every batch
    std::int64_t target_bytes_per_sample = 0; // a training step's class targets
    std::vector<Phase> phases; // a training step's, at b2: event ranges hold at every batch
    std::vector<std::uint32_t> gradient_events;
    std::vector<std::uint32_t> autocast_cache_events; // RawRun's, at b2
    std::int64_t gradient_bytes = 0;

    struct Recorded { // what the runs at b1 and b2 measured
        std::int64_t batch = 0;
        std::int64_t peak = 0;
        std::int32_t peak_event = -1;
        std::array<std::int64_t, kLedgerCount> at_peak {};
        std::int64_t allocated = 0; // every allocation's bytes, summed: a kernel switch shows here before the peak
        std::int64_t largest = 0; // the largest allocation
    };
    std::vector<Recorded> recorded;
    bool reliable = true;
    std::vector<std::string> notes;
    std::vector<std::string> figure_notes; // RawRun::figure_notes of its records: said once by WhatIf::notes()
    // The tensors the forward's ops took (RawRun::forward_uses of the run at b2): what the checkpoint stage reads.
    std::shared_ptr<const std::vector<TensorUse>> forward_uses;
    // A fit of the checkpointed step (WhatIf::withCheckpoint): the plain step's fit it was made from (its records
    // are the plain step's, so a row at a recorded size is predicted, not measured), else null.
    std::shared_ptr<const Fit> plain;
    // A fit of the step as micro-steps (WhatIf::withGradAccum): the fit it was laid over from, else null.
    std::shared_ptr<const Fit> unaccumulated;

    std::int64_t inputBytes(std::int64_t x) const;
    std::vector<Shape> inputsAt(std::int64_t x) const; // the inputs at batch (or sequence) x
    std::int64_t sizeAt(std::size_t i, double batch) const
    {
        double v = slope[i] * batch + intercept[i] + (quad.empty() ? 0.0 : quad[i] * batch * batch);
        return v > 0.0 ? static_cast<std::int64_t>(v + 0.5) : 0;
    }
};

} // namespace memledger
