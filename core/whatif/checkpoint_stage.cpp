// The activation checkpointing stage of a what-if: each fit of the recorded step rewritten into a fit of the
// checkpointed step (whatif.h: WhatIf::withCheckpoint). The rewrite is the checkpoint what-if's (checkpoint.h), made
// once per fit at its largest record; each event of the rewritten step takes its size along the batch (or sequence)
// from the recorded event it came from, so every later stage (a rank's layout, the fit table, a budget's search)
// sees the checkpointed step at any size without rewriting it again.
#include "whatif/fit.h"
#include "whatif/whatif.h"

#include <stdexcept>

namespace memledger {

WhatIf WhatIf::withCheckpoint(const CheckpointSpec& spec) const
{
    if (spec.none())
        return *this;
    if (!checkpoint_.none())
        throw std::invalid_argument("this what-if is checkpointed already (" + checkpoint_.text() + ")");
    if (grad_accum_ > 1)
        return unaccumulated_->withCheckpoint(spec).withGradAccum(grad_accum_); // the stages in their one order
    if (spec.mode == CheckpointMode::Auto)
        throw std::invalid_argument("--checkpoint auto plans checkpoints for one device within --budget (memledger "
                                    "whatif --checkpoint auto); with --gpus or fit give full or selective");
    if (mode() != RunMode::Train)
        throw std::invalid_argument("--checkpoint is a training step's: record with --mode train");
    WhatIf out = *this;
    out.checkpoint_ = spec;
    out.notes_.push_back("checkpointed: " + spec.text() + " (" + checkpointImplName(spec.implementation())
        + "), the recorded step rewritten as torch.utils.checkpoint runs it: predicted, not measured");
    for (auto& slot : out.fits_) {
        const auto& plain = *slot;
        if (!plain.forward_uses || plain.forward_uses->empty())
            throw std::invalid_argument("the records of " + plain.dtype
                + " do not say which tensors the forward's ops took: record the model again");
        auto report = reportOf(plain, plain.b2, plain.dtype);
        auto c = predictCheckpoint(report, spec, false);
        auto f = std::make_shared<Fit>(plain);
        f->plain = slot;
        const auto& t = *c.report->trace;
        f->trace = c.report->trace;
        f->ops = c.report->ops;
        f->phases = c.report->phases;
        // Indices into the recorded trace: a checkpointed fit's report is made from its plain fit instead.
        f->gradient_events.clear();
        f->autocast_cache_events.clear();
        f->forward_uses.reset();
        const auto n = t.size();
        f->slope.assign(n, 0.0);
        f->intercept.assign(n, 0.0);
        if (!plain.quad.empty())
            f->quad.assign(n, 0.0);
        f->sign.assign(n, 0);
        for (std::size_t k = 0; k < n; ++k) {
            const auto src = c.event_source[k];
            if (src >= 0) {
                const auto s = static_cast<std::size_t>(src);
                f->slope[k] = plain.slope[s];
                f->intercept[k] = plain.intercept[s];
                if (!plain.quad.empty())
                    f->quad[k] = plain.quad[s];
            } else {
                f->intercept[k] = static_cast<double>(t.bytes[k]); // its own size at every batch (the RNG state)
            }
            if (t.action[k] == Action::Alloc)
                f->sign[k] = 1;
            else if (t.action[k] == Action::Free && t.partner[k] != kNoPartner)
                f->sign[k] = -1;
        }
        for (const auto& note : c.notes)
            f->notes.push_back(plain.dtype + ": " + note);
        slot = std::move(f);
    }
    return out;
}

} // namespace memledger
