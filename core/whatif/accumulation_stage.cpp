// The gradient accumulation stage of a what-if: each fit of the step (checkpointed or not) laid over as K micro-steps
// once (whatif/accumulation.h), each event of the new step sized along the batch (or sequence) as the event it came
// from, so that predict and maxBatch answer for one device at any size without laying it over again. A rank's layout
// differs between micro-steps (only the last reduces), so ranks are laid over the what-if before this stage with the
// plan's grad_accum set (WhatIf::rankPrediction).
#include "whatif/accumulation.h"
#include "whatif/fit.h"
#include "whatif/whatif.h"

#include <stdexcept>

namespace memledger {

WhatIf WhatIf::withGradAccum(int k) const
{
    checkGradAccum(k, mode());
    if (k == 1)
        return *this;
    if (grad_accum_ > 1)
        throw std::invalid_argument("this what-if accumulates " + std::to_string(grad_accum_) + " micro-batches already");
    WhatIf out = *this;
    out.grad_accum_ = k;
    out.unaccumulated_ = std::make_shared<const WhatIf>(*this);
    bool noted = false;
    for (auto& slot : out.fits_) {
        const auto& step = *slot;
        if (!step.trace || !step.ops)
            throw std::invalid_argument("the records of " + step.dtype + " keep no trace to lay micro-steps over");
        auto micro = accumulateMicroSteps(*step.trace, *step.ops, step.phases, k);
        if (!noted) {
            out.notes_.push_back(accumulationNote(micro));
            noted = true;
        }
        auto f = std::make_shared<Fit>(step);
        f->unaccumulated = slot;
        const auto& t = micro.trace;
        const auto n = t.size();
        f->slope.assign(n, 0.0);
        f->intercept.assign(n, 0.0);
        if (!step.quad.empty())
            f->quad.assign(n, 0.0);
        f->sign.assign(n, 0);
        for (std::size_t i = 0; i < n; ++i) {
            const auto s = static_cast<std::size_t>(micro.event_source[i]);
            f->slope[i] = step.slope[s];
            f->intercept[i] = step.intercept[s];
            if (!step.quad.empty())
                f->quad[i] = step.quad[s];
            if (step.sign[s] == 0)
                continue; // an event the record ignores stays ignored
            if (t.action[i] == Action::Alloc)
                f->sign[i] = 1;
            else if (t.action[i] == Action::Free && t.partner[i] != kNoPartner)
                f->sign[i] = -1;
        }
        // Indices into the step before: a report of this fit is made from that fit's, laid over again.
        f->gradient_events.clear();
        f->autocast_cache_events.clear();
        f->forward_uses.reset();
        f->phases = micro.phases;
        f->trace = std::make_shared<const Trace>(std::move(micro.trace));
        f->ops = std::make_shared<const std::vector<OpCall>>(std::move(micro.ops));
        slot = std::move(f);
    }
    return out;
}

} // namespace memledger
