#include "report/trace_edit.h"

#include <algorithm>
#include <numeric>

namespace memledger {

void setLedger(Trace& t, std::size_t alloc, Ledger l)
{
    t.ledger[alloc] = l;
    if (t.partner[alloc] != kNoPartner)
        t.ledger[static_cast<std::size_t>(t.partner[alloc])] = l;
}

std::size_t pushCopy(Trace& out, const Trace& from, std::size_t event)
{
    const auto k = out.push(from.time_ns[event], from.bytes[event], from.address[event], from.action[event],
        from.device[event]);
    out.ledger[k] = from.ledger[event];
    out.op_seq[k] = from.op_seq[event];
    out.outer_op[k] = from.outer_op[event];
    out.inner_op[k] = from.inner_op[event];
    out.where[k] = from.where[event];
    out.stack[k] = from.stack[event];
    return k;
}

TraceEdit::TraceEdit(const Trace& t)
    : t_(t)
{
    out_.strings = t.strings;
    out_.stacks = t.stacks;
    placed_.resize(t.size());
    for (std::size_t i = 0; i < t.size(); ++i) {
        auto& p = placed_[i];
        p.pos = i;
        p.group = kOriginalGroup;
        p.original = true;
        p.src = static_cast<std::int64_t>(i);
        p.bytes = t.bytes[i];
        p.action = t.action[i];
        p.ledger = t.ledger[i];
        p.partner = t.partner[i] == kNoPartner ? -1 : t.partner[i];
    }
}

TraceEdit::Handle TraceEdit::place(Placed p)
{
    p.pos = std::min(p.pos, t_.size());
    p.seq = seq_++;
    placed_.push_back(p);
    return placed_.size() - 1;
}

TraceEdit::Handle TraceEdit::addAlloc(std::size_t pos, std::int64_t bytes, Ledger ledger, const std::string& where,
    const std::string& op, std::optional<std::int8_t> device)
{
    Placed p;
    p.pos = pos;
    p.bytes = bytes;
    p.action = Action::Alloc;
    p.ledger = ledger;
    p.device = device;
    p.where = out_.strings.intern(where);
    p.op = out_.strings.intern(op);
    return place(p);
}

TraceEdit::Handle TraceEdit::addFree(std::size_t pos, Handle alloc)
{
    auto& a = placed_[alloc];
    if (a.original && a.partner >= 0) // an original free is replaced by this one
        placed_[static_cast<std::size_t>(a.partner)].dropped = true;
    Placed p;
    p.pos = pos;
    p.bytes = a.bytes;
    p.action = Action::Free;
    p.ledger = a.ledger;
    if (!a.original) // a copy's free is the copied alloc's, a new alloc's names its module and op
        p.src = a.src;
    p.where = a.original ? t_.where[alloc] : a.where;
    p.op = a.original ? t_.outer_op[alloc] : a.op;
    auto h = place(p);
    pair(alloc, h);
    return h;
}

TraceEdit::Handle TraceEdit::copy(std::size_t pos, std::size_t event)
{
    Placed p;
    p.pos = pos;
    p.src = static_cast<std::int64_t>(event);
    p.bytes = t_.bytes[event];
    p.action = t_.action[event];
    p.ledger = t_.ledger[event];
    return place(p);
}

void TraceEdit::pair(Handle alloc, Handle free)
{
    placed_[alloc].partner = static_cast<std::int64_t>(free);
    placed_[free].partner = static_cast<std::int64_t>(alloc);
}

void TraceEdit::move(std::size_t event, std::size_t pos)
{
    auto& p = placed_[event];
    p.pos = std::min(pos, t_.size());
    p.moved = true;
}

void TraceEdit::order(Handle h, int group, std::int64_t seq)
{
    placed_[h].group = group;
    placed_[h].seq = seq;
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
    auto& order = order_;
    order.clear();
    order.reserve(placed_.size());
    for (std::size_t h = 0; h < placed_.size(); ++h)
        if (!placed_[h].dropped)
            order.push_back(h);
    std::stable_sort(order.begin(), order.end(), [this](std::size_t a, std::size_t b) {
        const auto& x = placed_[a];
        const auto& y = placed_[b];
        if (x.pos != y.pos)
            return x.pos < y.pos;
        if (x.group != y.group)
            return x.group < y.group;
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
        const std::size_t at = n == 0 ? 0 : std::min(p.pos, n - 1);
        if (p.src >= 0) { // an original, a copy, or a copy's free: the columns of its source
            const auto s = static_cast<std::size_t>(p.src);
            const auto time = p.original && !p.moved ? t_.time_ns[s] : std::max(lastTime, t_.time_ns[at]);
            k = out.push(time, p.bytes, t_.address[s], p.action, t_.device[s]);
            out.op_seq[k] = t_.op_seq[s];
            out.outer_op[k] = t_.outer_op[s];
            out.inner_op[k] = t_.inner_op[s];
            out.where[k] = t_.where[s];
            out.stack[k] = t_.stack[s];
        } else {
            const auto time = n == 0 ? 0 : std::max(lastTime, t_.time_ns[at]);
            std::uint64_t address = 0;
            if (p.action == Action::Alloc)
                address = fake += std::uint64_t {1} << 32;
            const auto device = p.device ? *p.device : n == 0 ? std::int8_t {-1} : t_.device[at];
            k = out.push(time, p.bytes, address, p.action, device);
            out.op_seq[k] = n == 0 ? 0 : t_.op_seq[at];
            out.outer_op[k] = out.inner_op[k] = p.op;
            out.where[k] = p.where;
        }
        out.ledger[k] = p.ledger;
        lastTime = out.time_ns[k];
    }
    // Partners; a free takes its alloc's address, device and ledger.
    for (auto h : order) {
        const auto& p = placed_[h];
        auto k = static_cast<std::size_t>(newIndex[h]);
        if (p.partner < 0 || newIndex[static_cast<std::size_t>(p.partner)] < 0) {
            out.partner[k] = kNoPartner;
            continue;
        }
        out.partner[k] = static_cast<std::int32_t>(newIndex[static_cast<std::size_t>(p.partner)]);
    }
    for (std::size_t k = 0; k < out.size(); ++k)
        if (out.action[k] == Action::Alloc && out.partner[k] != kNoPartner) {
            const auto f = static_cast<std::size_t>(out.partner[k]);
            out.address[f] = out.address[k];
            out.device[f] = out.device[k];
            setLedger(out, k, out.ledger[k]);
        }

    // The new index of the first original event at or after each position, not moved away (the end of the
    // trace past the last).
    std::vector<std::int64_t> next(n + 1, static_cast<std::int64_t>(out.size()));
    for (std::size_t i = n; i-- > 0;)
        next[i] = newIndex[i] >= 0 && !placed_[i].moved ? newIndex[i] : next[i + 1];
    if (ops) {
        for (auto& op : *ops) {
            const auto first = std::min<std::size_t>(op.first_event, n), end = std::min<std::size_t>(op.end_event, n);
            std::int64_t last = -1;
            for (auto i = first; i < end; ++i)
                if (!placed_[i].moved)
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

void AllocFreePairing::add(Trace& t, std::size_t i)
{
    const auto key = byDevice_ ? (static_cast<std::uint64_t>(t.device[i] & 0xff) << 56) ^ t.address[i] : t.address[i];
    if (t.action[i] == Action::Alloc) {
        live_[key] = static_cast<std::int32_t>(i);
        return;
    }
    if (t.action[i] != Action::Free)
        return;
    auto it = live_.find(key);
    if (it == live_.end())
        return;
    t.partner[i] = it->second;
    t.partner[static_cast<std::size_t>(it->second)] = static_cast<std::int32_t>(i);
    // The block freed is the block allocated: its size is the alloc's. libtorch's CPU reporter can say otherwise:
    // its size table keeps a block allocated while a run was recorded and freed while none was, and reports a later
    // block at that address, freed during a recording, with the old block's size (a second run of one process).
    t.bytes[i] = t.bytes[static_cast<std::size_t>(it->second)];
    live_.erase(it);
}

} // namespace memledger
