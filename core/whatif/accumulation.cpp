#include "whatif/accumulation.h"
#include "whatif/rank_schedule.h"

#include "allocator/gpu_replay.h"
#include "report/trace_edit.h"
#include "support/format.h"

#include <algorithm>
#include <stdexcept>

namespace memledger {

void checkGradAccum(int k, RunMode mode)
{
    if (k < 1)
        throw std::invalid_argument("--grad-accum must be at least 1 (the micro-batches accumulated per optimizer step)");
    if (k > 1 && mode != RunMode::Train)
        throw std::invalid_argument("--grad-accum accumulates a training step's gradients: record with --mode train");
}

MicroSteps accumulateMicroSteps(const Trace& t, const std::vector<OpCall>& ops, const std::vector<Phase>& phases, int k)
{
    checkGradAccum(k, RunMode::Train);
    const Phase* forward = findPhase(phases, "forward");
    const Phase* backward = findPhase(phases, "backward");
    if (!forward || !backward)
        throw std::invalid_argument("--grad-accum: the step has no forward or backward phase to repeat");
    MicroSteps out;
    out.micro_steps = k;
    const std::size_t n = t.size();
    const std::size_t f0 = std::min<std::size_t>(forward->first_event, n);
    const std::size_t b1 = std::max<std::size_t>(f0, std::min<std::size_t>(backward->end_event, n));
    auto phaseIndex = [&](const Phase* p) { return static_cast<std::size_t>(p - phases.data()); };
    if (k == 1) {
        out.trace = t;
        out.ops = ops;
        out.phases = phases;
        out.event_source.resize(n);
        for (std::size_t i = 0; i < n; ++i)
            out.event_source[i] = static_cast<std::int64_t>(i);
        out.shown.push_back({phaseIndex(forward), phaseIndex(backward)});
        return out;
    }
    const int m = std::min(k, 3); // micro-steps shown: the first, one standing for 2..K-1, the last
    const std::size_t len = b1 - f0;
    auto inRegion = [&](std::int64_t i) { return i >= static_cast<std::int64_t>(f0) && i < static_cast<std::int64_t>(b1); };

    // What the loop holds of the previous micro-step: the blocks announced before the forward's first op and freed
    // inside the micro-step (--hold-output step: the previous step's output and loss).
    std::size_t firstOp = b1;
    for (const auto& op : ops)
        if (op.first_event >= f0 && op.first_event < b1)
            firstOp = std::min<std::size_t>(firstOp, op.first_event);
    // Per event of the region: 'g' a gradient kept past the backward, 'e' another block the micro-step leaves alive
    // (its output, its loss), 'h' a held block.
    std::vector<char> kind(len, 0);
    std::vector<std::size_t> held, escaping;
    for (std::size_t i = f0; i < b1; ++i) {
        if (t.action[i] != Action::Alloc)
            continue;
        const auto p = t.partner[i];
        const bool leaves = p == kNoPartner || static_cast<std::size_t>(p) >= b1;
        if (leaves) {
            kind[i - f0] = t.ledger[i] == Ledger::Gradients ? 'g' : 'e';
            if (kind[i - f0] == 'e')
                escaping.push_back(i);
        } else if (i < firstOp && p > static_cast<std::int32_t>(i)) {
            kind[i - f0] = 'h';
            held.push_back(i);
        }
    }
    // A held block of the next micro-step is this one's output or loss: matched in order by size.
    std::vector<std::int64_t> heldTakes(len, -1); // held alloc -> the escaping alloc that takes its place
    std::vector<std::int64_t> takenBy(len, -1); // escaping alloc -> the held alloc whose free frees it
    {
        std::vector<char> used(escaping.size(), 0);
        for (auto h : held)
            for (std::size_t e = 0; e < escaping.size(); ++e)
                if (!used[e] && t.bytes[escaping[e]] == t.bytes[h]) {
                    used[e] = 1;
                    heldTakes[h - f0] = static_cast<std::int64_t>(escaping[e]);
                    takenBy[escaping[e] - f0] = static_cast<std::int64_t>(h);
                    break;
                }
    }
    // Where the node that made a gradient returns (AccumulateGrad has added it in by then).
    const OpEnds opEnds(ops, b1);
    auto endOfOpAt = [&](std::size_t i) { return opEnds.endOfOpAt(i); };

    Trace& o = out.trace;
    o.strings = t.strings;
    o.stacks = t.stacks;
    o.reserve(n + static_cast<std::size_t>(m - 1) * len + len);
    std::vector<int> segmentOf; // per output event: its micro-step shown (-1 outside the region)
    segmentOf.reserve(n + static_cast<std::size_t>(m - 1) * len + len);
    const std::int64_t span = len > 0 ? t.time_ns[b1 - 1] - t.time_ns[f0] + 1 : 1;
    auto push = [&](std::size_t i, int segment, std::int64_t shift) {
        auto j = pushCopy(o, t, i);
        o.time_ns[j] += shift;
        o.partner[j] = kNoPartner;
        segmentOf.push_back(segment);
        out.event_source.push_back(static_cast<std::int64_t>(i));
        return j;
    };
    auto link = [&](std::size_t alloc, std::size_t free) {
        o.partner[alloc] = static_cast<std::int32_t>(free);
        o.partner[free] = static_cast<std::int32_t>(alloc);
        o.bytes[free] = o.bytes[alloc];
        o.address[free] = o.address[alloc];
        o.device[free] = o.device[alloc];
        o.ledger[free] = o.ledger[alloc];
    };
    auto pushFree = [&](std::size_t alloc, int segment) {
        const auto last = o.size() - 1;
        auto j = o.push(o.time_ns[last], o.bytes[alloc], o.address[alloc], Action::Free, o.device[alloc]);
        o.op_seq[j] = o.op_seq[last];
        o.outer_op[j] = o.outer_op[alloc];
        o.inner_op[j] = o.inner_op[alloc];
        o.where[j] = o.where[alloc];
        o.stack[j] = o.stack[alloc];
        segmentOf.push_back(segment);
        out.event_source.push_back(out.event_source[alloc]);
        link(alloc, j);
    };

    std::vector<std::int64_t> outOf(n, -1); // the events outside the region and the last micro-step's
    for (std::size_t i = 0; i < f0; ++i)
        outOf[i] = static_cast<std::int64_t>(push(i, -1, 0));

    std::vector<std::int64_t> firstGradient(len, -1); // the first micro-step's gradient, kept
    std::vector<std::vector<std::size_t>> pre(static_cast<std::size_t>(m)), post(static_cast<std::size_t>(m));
    std::vector<std::int64_t> previousEscaping(len, -1), thisEscaping(len, -1);
    for (int s = 0; s < m; ++s) {
        const bool last = s == m - 1;
        const std::int64_t shift = s * span;
        std::vector<std::int64_t> copyOf(len, -1);
        std::vector<std::vector<std::size_t>> pending(len + 1);
        auto& preS = pre[static_cast<std::size_t>(s)];
        auto& postS = post[static_cast<std::size_t>(s)];
        preS.assign(len + 1, 0);
        postS.assign(len + 1, 0);
        std::fill(thisEscaping.begin(), thisEscaping.end(), -1);
        for (std::size_t p = f0; p <= b1; ++p) {
            const auto r = p - f0;
            preS[r] = o.size();
            for (auto a : pending[r])
                pushFree(a, s);
            postS[r] = o.size();
            if (p == b1)
                break;
            const auto partner = t.partner[p];
            if (s > 0 && kind[r] == 'h' && heldTakes[r] >= 0)
                continue; // the previous micro-step's block stands in its place
            if (t.action[p] == Action::Free) {
                if (partner != kNoPartner && inRegion(partner)) {
                    const auto a = static_cast<std::size_t>(partner) - f0;
                    if (s > 0 && kind[a] == 'h' && heldTakes[a] >= 0) { // the previous micro-step's output let go
                        const auto e = static_cast<std::size_t>(heldTakes[a]) - f0;
                        if (previousEscaping[e] >= 0)
                            pushFree(static_cast<std::size_t>(previousEscaping[e]), s);
                        continue;
                    }
                } else if (!last) {
                    continue; // a block from before the micro-steps: freed by the last one
                }
            }
            const auto j = push(p, s, shift);
            if (last)
                outOf[p] = static_cast<std::int64_t>(j);
            copyOf[r] = static_cast<std::int64_t>(j);
            if (t.action[p] == Action::Free && partner != kNoPartner) {
                const auto a = static_cast<std::size_t>(partner);
                const auto alloc = inRegion(partner) ? copyOf[a - f0] : outOf[a];
                if (alloc >= 0)
                    link(static_cast<std::size_t>(alloc), j);
            }
            if (t.action[p] != Action::Alloc)
                continue;
            if (kind[r] == 'g') {
                if (s == 0) {
                    firstGradient[r] = static_cast<std::int64_t>(j);
                } else { // added into the first micro-step's, freed when its node returns
                    o.ledger[j] = Ledger::Temporaries;
                    pending[endOfOpAt(p) - f0].push_back(j);
                    if (last)
                        out.accumulated.emplace_back(static_cast<std::uint32_t>(firstGradient[r]), static_cast<std::uint32_t>(j));
                }
            } else if (kind[r] == 'e' && !last) {
                if (takenBy[r] >= 0)
                    thisEscaping[r] = static_cast<std::int64_t>(j); // freed where the next micro-step lets it go
                else
                    pending[len].push_back(j); // nothing holds it past its micro-step
            }
        }
        std::swap(previousEscaping, thisEscaping);
    }
    const std::int64_t delta = static_cast<std::int64_t>(o.size()) - static_cast<std::int64_t>(b1);
    for (std::size_t i = b1; i < n; ++i) {
        const auto j = push(i, -1, (m - 1) * span);
        outOf[i] = static_cast<std::int64_t>(j);
        const auto partner = t.partner[i];
        if (t.action[i] != Action::Free || partner == kNoPartner)
            continue;
        const auto a = static_cast<std::size_t>(partner);
        std::int64_t alloc = outOf[a];
        if (inRegion(partner) && kind[a - f0] == 'g')
            alloc = firstGradient[a - f0]; // the gradient kept is the one the step ends with
        if (alloc >= 0)
            link(static_cast<std::size_t>(alloc), j);
    }

    // The ops: those before the micro-steps, each shown micro-step's copies, those after.
    std::vector<std::size_t> regionOps;
    std::vector<std::int64_t> beforeIndex(ops.size(), -1), afterIndex(ops.size(), -1);
    std::vector<std::vector<std::int64_t>> copyIndex(static_cast<std::size_t>(m), std::vector<std::int64_t>(ops.size(), -1));
    for (std::size_t q = 0; q < ops.size(); ++q)
        if (ops[q].first_event < f0) {
            beforeIndex[q] = static_cast<std::int64_t>(out.ops.size());
            out.ops.push_back(ops[q]);
        } else if (ops[q].first_event < b1) {
            regionOps.push_back(q);
        }
    auto mapped = [&](std::size_t s, std::size_t event) {
        return static_cast<std::uint32_t>(post[s][std::min(event, b1) - f0]);
    };
    for (std::size_t s = 0; s < static_cast<std::size_t>(m); ++s)
        for (auto q : regionOps) {
            OpCall op = ops[q];
            const auto shift = static_cast<std::int64_t>(s) * span;
            op.start_ns += shift;
            op.end_ns += shift;
            op.first_event = mapped(s, op.first_event);
            op.end_event = std::max(op.first_event,
                static_cast<std::uint32_t>(pre[s][std::min<std::size_t>(ops[q].end_event, b1) - f0]));
            copyIndex[s][q] = static_cast<std::int64_t>(out.ops.size());
            out.ops.push_back(op);
        }
    for (std::size_t q = 0; q < ops.size(); ++q)
        if (ops[q].first_event >= b1) {
            OpCall op = ops[q];
            op.start_ns += (m - 1) * span;
            op.end_ns += (m - 1) * span;
            op.first_event = static_cast<std::uint32_t>(op.first_event + delta);
            op.end_event = static_cast<std::uint32_t>(op.end_event + delta);
            afterIndex[q] = static_cast<std::int64_t>(out.ops.size());
            out.ops.push_back(op);
        }
    // Each event's op index, in the new list: a copy's, the copy of its op in its micro-step.
    for (std::size_t j = 0; j < o.size(); ++j) {
        const auto q = o.op_seq[j];
        if (q >= ops.size())
            continue;
        const int s = segmentOf[j];
        std::int64_t to = -1;
        if (copyIndex[0][q] >= 0)
            to = copyIndex[static_cast<std::size_t>(s >= 0 ? s : m - 1)][q];
        else
            to = beforeIndex[q] >= 0 ? beforeIndex[q] : afterIndex[q];
        if (to >= 0)
            o.op_seq[j] = static_cast<std::uint32_t>(to);
    }

    // The phases: those before, the forward to the backward once per micro-step shown, then those after.
    for (const auto& ph : phases)
        if (ph.first_event < f0)
            out.phases.push_back(ph);
    for (std::size_t s = 0; s < static_cast<std::size_t>(m); ++s) {
        MicroSteps::Shown shown;
        for (const auto& ph : phases) {
            if (ph.first_event < f0 || ph.first_event >= b1)
                continue;
            Phase p = ph;
            p.start_ns += static_cast<std::int64_t>(s) * span;
            p.end_ns += static_cast<std::int64_t>(s) * span;
            p.first_event = mapped(s, ph.first_event);
            p.end_event = std::max(p.first_event, mapped(s, ph.end_event));
            if (&ph == forward)
                shown.forward_phase = out.phases.size();
            if (&ph == backward)
                shown.backward_phase = out.phases.size();
            out.phases.push_back(p);
        }
        out.shown.push_back(shown);
    }
    for (const auto& ph : phases)
        if (ph.first_event >= b1) {
            Phase p = ph;
            p.start_ns += (m - 1) * span;
            p.end_ns += (m - 1) * span;
            p.first_event = static_cast<std::uint32_t>(p.first_event + delta);
            p.end_event = static_cast<std::uint32_t>(p.end_event + delta);
            out.phases.push_back(p);
        }
    return out;
}

Report accumulatedReport(const Report& step, int k)
{
    checkGradAccum(k, step.run.mode);
    if (k == 1)
        return step;
    if (!step.trace || !step.ops)
        throw std::invalid_argument("--grad-accum: the report has no recorded trace to repeat");
    auto micro = accumulateMicroSteps(*step.trace, *step.ops, step.phases, k);
    Report r = step;
    r.run.grad_accum = k;
    r.phases = micro.phases;
    r.whatif.reset();
    r.remedies.reset();
    r.forward_uses.clear();
    r.forward_uses_recorded = false;
    r.output_events.clear();
    r.notes.insert(r.notes.begin(), accumulationNote(micro));
    setRunTrace(r, std::move(micro.trace), std::move(micro.ops));
    return r;
}

std::string accumulationNote(const MicroSteps& micro)
{
    const int k = micro.micro_steps;
    std::string out = "gradients accumulated over " + std::to_string(k) + " micro-batches before each optimizer step: the "
        + "gradients stay alive from the first micro-step's backward to the optimizer step, each later backward adding "
          "its own into them in place";
    if (k > 3)
        out += "; micro-steps 2 to " + std::to_string(k - 1) + " are alike and the timeline shows one of them";
    return out + " (the micro-steps laid over the recorded one: predicted, not measured)";
}

} // namespace memledger
