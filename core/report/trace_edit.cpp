#include "report/trace_edit.h"

#include <algorithm>
#include <numeric>

namespace memledger {

TraceEdit::TraceEdit(const Trace& t)
    : t_(t)
{
    out_.strings = t.strings;
    out_.stacks = t.stacks;
    placed_.resize(t.size());
    for (std::size_t i = 0; i < t.size(); ++i) {
        auto& p = placed_[i];
        p.pos = i;
        p.original = true;
        p.bytes = t.bytes[i];
        p.action = t.action[i];
        p.ledger = t.ledger[i];
        p.partner = t.partner[i] == kNoPartner ? -1 : t.partner[i];
    }
}

TraceEdit::Handle TraceEdit::addAlloc(
    std::size_t pos, std::int64_t bytes, Ledger ledger, const std::string& where, const std::string& op)
{
    Placed p;
    p.pos = std::min(pos, t_.size());
    p.seq = seq_++;
    p.bytes = bytes;
    p.action = Action::Alloc;
    p.ledger = ledger;
    p.where = out_.strings.intern(where);
    p.op = out_.strings.intern(op);
    placed_.push_back(p);
    return placed_.size() - 1;
}

void TraceEdit::addFree(std::size_t pos, Handle alloc)
{
    auto& a = placed_[alloc];
    if (a.original && a.partner >= 0) // an original free is replaced by this one
        placed_[static_cast<std::size_t>(a.partner)].dropped = true;
    Placed p;
    p.pos = std::min(pos, t_.size());
    p.seq = seq_++;
    p.bytes = a.bytes;
    p.action = Action::Free;
    p.ledger = a.ledger;
    p.where = a.original ? t_.where[alloc] : a.where;
    p.op = a.original ? t_.outer_op[alloc] : a.op;
    p.partner = static_cast<std::int64_t>(alloc);
    placed_.push_back(p);
    placed_[alloc].partner = static_cast<std::int64_t>(placed_.size() - 1);
}

void TraceEdit::drop(std::size_t event)
{
    auto& p = placed_[event];
    p.dropped = true;
    if (p.action == Action::Alloc && p.partner >= 0)
        placed_[static_cast<std::size_t>(p.partner)].dropped = true;
}

void TraceEdit::resize(std::size_t alloc, std::int64_t bytes)
{
    auto& p = placed_[alloc];
    p.bytes = bytes;
    if (p.partner >= 0)
        placed_[static_cast<std::size_t>(p.partner)].bytes = bytes;
}

Trace TraceEdit::build(std::vector<OpCall>* ops, std::vector<Phase>* phases)
{
    std::vector<std::size_t> order;
    order.reserve(placed_.size());
    for (std::size_t h = 0; h < placed_.size(); ++h)
        if (!placed_[h].dropped)
            order.push_back(h);
    std::stable_sort(order.begin(), order.end(), [this](std::size_t a, std::size_t b) {
        const auto& x = placed_[a];
        const auto& y = placed_[b];
        if (x.pos != y.pos)
            return x.pos < y.pos;
        if (x.original != y.original)
            return !x.original; // new events go before the original at their position
        return x.seq < y.seq;
    });
    std::vector<std::int64_t> newIndex(placed_.size(), -1); // per handle
    for (std::size_t k = 0; k < order.size(); ++k)
        newIndex[order[k]] = static_cast<std::int64_t>(k);

    Trace& out = out_;
    out.clearEvents();
    out.reserve(order.size());
    const std::size_t n = t_.size();
    std::uint64_t fake = std::uint64_t {3} << 60; // addresses no recorded event uses
    std::int64_t lastTime = 0;
    for (auto h : order) {
        const auto& p = placed_[h];
        std::size_t k = 0;
        if (p.original) {
            k = out.push(t_.time_ns[h], p.bytes, t_.address[h], p.action, t_.device[h]);
            out.op_seq[k] = t_.op_seq[h];
            out.outer_op[k] = t_.outer_op[h];
            out.inner_op[k] = t_.inner_op[h];
            out.where[k] = t_.where[h];
            out.stack[k] = t_.stack[h];
        } else {
            const std::size_t at = n == 0 ? 0 : std::min(p.pos, n - 1);
            const auto time = n == 0 ? 0 : std::max(lastTime, t_.time_ns[at]);
            std::uint64_t address = 0;
            if (p.action == Action::Alloc)
                address = fake += std::uint64_t {1} << 32;
            k = out.push(time, p.bytes, address, p.action, n == 0 ? std::int8_t {-1} : t_.device[at]);
            out.op_seq[k] = n == 0 ? 0 : t_.op_seq[at];
            out.outer_op[k] = out.inner_op[k] = p.op;
            out.where[k] = p.where;
        }
        out.ledger[k] = p.ledger;
        lastTime = out.time_ns[k];
    }
    // Partners; a free takes its alloc's address (a new free) and ledger.
    for (auto h : order) {
        const auto& p = placed_[h];
        auto k = static_cast<std::size_t>(newIndex[h]);
        if (p.partner < 0 || newIndex[static_cast<std::size_t>(p.partner)] < 0) {
            out.partner[k] = kNoPartner;
            continue;
        }
        out.partner[k] = static_cast<std::int32_t>(newIndex[static_cast<std::size_t>(p.partner)]);
        if (p.action != Action::Alloc) {
            out.address[k] = out.address[static_cast<std::size_t>(out.partner[k])];
            out.ledger[k] = out.ledger[static_cast<std::size_t>(out.partner[k])];
        }
    }

    // The new index of the first original event at or after each position (the end of the trace past the last).
    std::vector<std::int64_t> next(n + 1, static_cast<std::int64_t>(out.size()));
    for (std::size_t i = n; i-- > 0;)
        next[i] = newIndex[i] >= 0 ? newIndex[i] : next[i + 1];
    if (ops) {
        for (auto& op : *ops) {
            const auto first = std::min<std::size_t>(op.first_event, n), end = std::min<std::size_t>(op.end_event, n);
            std::int64_t last = -1;
            for (auto i = first; i < end; ++i)
                last = std::max(last, newIndex[i]);
            op.first_event = static_cast<std::uint32_t>(next[first]);
            op.end_event = static_cast<std::uint32_t>(last >= 0 ? last + 1 : next[first]);
            op.end_event = std::max(op.end_event, op.first_event);
        }
    }
    if (phases) {
        for (std::size_t k = 0; k < phases->size(); ++k) {
            auto& ph = (*phases)[k];
            const auto first = std::min<std::size_t>(ph.first_event, n), end = std::min<std::size_t>(ph.end_event, n);
            std::int64_t begin = next[first];
            if (k == 0) // the first phase takes what was placed before its first event
                for (std::size_t h = n; h < placed_.size(); ++h)
                    if (newIndex[h] >= 0 && placed_[h].pos == first)
                        begin = std::min(begin, newIndex[h]);
            ph.first_event = static_cast<std::uint32_t>(begin);
            ph.end_event = static_cast<std::uint32_t>(std::max(begin, next[end]));
        }
    }
    return std::move(out_);
}

} // namespace memledger
