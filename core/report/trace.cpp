#include "report/trace.h"

#include <algorithm>

#include "support/huge_pages.h"

namespace memledger {

const char* ledgerName(Ledger l)
{
    switch (l) {
    case Ledger::Weights:
        return "weights";
    case Ledger::Inputs:
        return "inputs";
    case Ledger::Activations:
        return "activations";
    case Ledger::SavedActivations:
        return "saved_activations";
    case Ledger::Temporaries:
        return "temporaries";
    case Ledger::Gradients:
        return "gradients";
    case Ledger::OptimizerState:
        return "optimizer_state";
    case Ledger::GatheredParameters:
        return "gathered_parameters";
    case Ledger::Communication:
        return "communication";
    case Ledger::AutocastCache:
        return "autocast_cache";
    case Ledger::KvCache:
        return "kv_cache";
    case Ledger::Unattributed:
        return "unattributed";
    case Ledger::Resident:
        return "resident";
    }
    return "?";
}

std::optional<Ledger> ledgerFromName(const std::string& name)
{
    for (int l = 0; l < kLedgerKinds; ++l)
        if (name == ledgerName(static_cast<Ledger>(l)))
            return static_cast<Ledger>(l);
    return std::nullopt;
}

const char* ledgerLabel(Ledger l)
{
    switch (l) {
    case Ledger::SavedActivations:
        return "saved for backward";
    case Ledger::OptimizerState:
        return "optimizer state";
    case Ledger::Resident:
        return "resident (before the trace)";
    case Ledger::GatheredParameters:
        return "gathered parameters";
    case Ledger::Communication:
        return "communication buffers";
    case Ledger::AutocastCache:
        return "autocast weight casts";
    case Ledger::KvCache:
        return "KV cache";
    default:
        return ledgerName(l);
    }
}

const char* actionName(Action a)
{
    switch (a) {
    case Action::Alloc:
        return "alloc";
    case Action::Free:
        return "free_completed";
    case Action::FreeRequested:
        return "free_requested";
    case Action::SegmentAlloc:
        return "segment_alloc";
    case Action::SegmentFree:
        return "segment_free";
    case Action::SegmentMap:
        return "segment_map";
    case Action::SegmentUnmap:
        return "segment_unmap";
    case Action::Oom:
        return "oom";
    case Action::Snapshot:
        return "snapshot";
    }
    return "?";
}

void Trace::reserve(std::size_t n)
{
    time_ns.reserve(n);
    bytes.reserve(n);
    address.reserve(n);
    action.reserve(n);
    device.reserve(n);
    ledger.reserve(n);
    op_seq.reserve(n);
    outer_op.reserve(n);
    inner_op.reserve(n);
    where.reserve(n);
    partner.reserve(n);
    stack.reserve(n);
    adviseHugePages(time_ns.data(), time_ns.capacity() * sizeof(std::int64_t));
    adviseHugePages(bytes.data(), bytes.capacity() * sizeof(std::int64_t));
    adviseHugePages(address.data(), address.capacity() * sizeof(std::uint64_t));
    adviseHugePages(op_seq.data(), op_seq.capacity() * sizeof(std::uint32_t));
    adviseHugePages(outer_op.data(), outer_op.capacity() * sizeof(std::uint32_t));
    adviseHugePages(inner_op.data(), inner_op.capacity() * sizeof(std::uint32_t));
    adviseHugePages(where.data(), where.capacity() * sizeof(std::uint32_t));
    adviseHugePages(partner.data(), partner.capacity() * sizeof(std::int32_t));
    adviseHugePages(stack.data(), stack.capacity() * sizeof(std::uint32_t));
}

std::size_t Trace::push(std::int64_t t, std::int64_t size, std::uint64_t addr, Action a, std::int8_t dev)
{
    time_ns.push_back(t);
    bytes.push_back(size);
    address.push_back(addr);
    action.push_back(a);
    device.push_back(dev);
    ledger.push_back(Ledger::Unattributed);
    op_seq.push_back(0);
    outer_op.push_back(0);
    inner_op.push_back(0);
    where.push_back(0);
    partner.push_back(kNoPartner);
    stack.push_back(0);
    return time_ns.size() - 1;
}

void Trace::clearEvents()
{
    time_ns.clear();
    bytes.clear();
    address.clear();
    action.clear();
    device.clear();
    ledger.clear();
    op_seq.clear();
    outer_op.clear();
    inner_op.clear();
    where.clear();
    partner.clear();
    stack.clear();
}

void Trace::shrinkToFit()
{
    time_ns.shrink_to_fit();
    bytes.shrink_to_fit();
    address.shrink_to_fit();
    action.shrink_to_fit();
    device.shrink_to_fit();
    ledger.shrink_to_fit();
    op_seq.shrink_to_fit();
    outer_op.shrink_to_fit();
    inner_op.shrink_to_fit();
    where.shrink_to_fit();
    partner.shrink_to_fit();
    stack.shrink_to_fit();
}

double Trace::bytesPerEvent() const
{
    if (size() == 0)
        return 0.0;
    std::size_t n = time_ns.capacity() * sizeof(std::int64_t) + bytes.capacity() * sizeof(std::int64_t)
        + address.capacity() * sizeof(std::uint64_t) + action.capacity() + device.capacity() + ledger.capacity()
        + (op_seq.capacity() + outer_op.capacity() + inner_op.capacity() + where.capacity() + stack.capacity())
            * sizeof(std::uint32_t)
        + partner.capacity() * sizeof(std::int32_t);
    return static_cast<double>(n) / static_cast<double>(size());
}

std::size_t StreamColumn::indexOf(std::uint64_t stream)
{
    auto it = std::find(streams_.begin(), streams_.end(), stream);
    if (it != streams_.end())
        return static_cast<std::size_t>(it - streams_.begin());
    if (streams_.size() == 65536) // a 65537th stream: not met in practice; it reads as the last one
        return streams_.size() - 1;
    streams_.push_back(stream);
    return streams_.size() - 1;
}

} // namespace memledger
