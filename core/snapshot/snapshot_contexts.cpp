#include "snapshot/snapshot_contexts.h"

#include "snapshot/snapshot.h"

#include <algorithm>

namespace memledger {

const char* contextKindName(ContextKind k)
{
    return k == ContextKind::UserMetadata ? "user_metadata" : "compile_context";
}

std::uint32_t contextId(const TraceContext& c, ContextKind kind)
{
    return kind == ContextKind::UserMetadata ? c.user_metadata : c.compile_context;
}

namespace {

const std::string& noValue()
{
    static const std::string empty;
    return empty;
}

} // namespace

bool hasContexts(const Snapshot& s)
{
    return !s.trace_context.empty();
}

const std::string& contextOfEvent(const Snapshot& s, std::size_t event, ContextKind kind)
{
    if (!s.trace || event >= s.trace->size())
        return noValue();
    const auto id = contextId(s.trace_context[event], kind);
    return id == 0 ? noValue() : s.trace->strings.at(id);
}

std::vector<const TensorAnnotation*> annotationsOfEvent(const Snapshot& s, std::size_t event)
{
    std::vector<const TensorAnnotation*> out;
    for (const auto& a : s.tensor_annotations)
        if (a.event == event)
            out.push_back(&a);
    return out;
}

std::vector<ContextFigure> contextFigures(const Report& r, ContextKind kind)
{
    std::vector<ContextFigure> out;
    if (!r.snapshot || !r.trace || r.snapshot->trace != r.trace)
        return out;
    const Snapshot& s = *r.snapshot;
    const Trace& t = *r.trace;
    const auto& values = s.trace_context.values();
    // One figure per string id of `kind` met among the column's values; index 0: none.
    std::vector<std::int32_t> slotOfString; // string id -> index in `out`
    std::vector<std::int32_t> slotOfValue(values.size(), -1);
    out.push_back({}); // none
    bool any = false;
    for (std::size_t v = 0; v < values.size(); ++v) {
        const auto id = contextId(values[v], kind);
        if (id == 0) {
            slotOfValue[v] = 0;
            continue;
        }
        if (id >= slotOfString.size())
            slotOfString.resize(id + 1, -1);
        if (slotOfString[id] < 0) {
            slotOfString[id] = static_cast<std::int32_t>(out.size());
            out.push_back({t.strings.at(id), 0, 0, 0});
        }
        slotOfValue[v] = slotOfString[id];
        any = true;
    }
    if (!any)
        return {};
    const std::size_t first = r.range_end > 0 ? r.range_first : 0;
    const std::size_t end = r.range_end > 0 ? std::min<std::size_t>(r.range_end, t.size()) : t.size();
    const std::int64_t peak = r.peak_event;
    for (std::size_t i = first; i < end; ++i) {
        if (t.action[i] != Action::Alloc)
            continue;
        auto& f = out[static_cast<std::size_t>(slotOfValue[s.trace_context.indexAt(i)])];
        ++f.allocations;
        f.allocated_bytes += t.bytes[i];
        const auto freed = t.partner[i];
        if (peak >= 0 && static_cast<std::int64_t>(i) <= peak && (freed == kNoPartner || freed > peak))
            f.peak_bytes += t.bytes[i];
    }
    ContextFigure none = std::move(out.front());
    out.erase(out.begin());
    // Values of frees only (their allocations before the range or the trace) have no figures here.
    out.erase(std::remove_if(out.begin(), out.end(), [](const ContextFigure& f) { return f.allocations == 0; }),
        out.end());
    if (out.empty())
        return out;
    std::stable_sort(out.begin(), out.end(),
        [](const ContextFigure& a, const ContextFigure& b) { return a.allocated_bytes > b.allocated_bytes; });
    if (none.allocations > 0)
        out.push_back(std::move(none));
    return out;
}

} // namespace memledger
