#include "report/report_summary.h"
#include "report/trace_edit.h"
#include "support/dtype.h"


#include "support/format.h"

#include <algorithm>
#include <stdexcept>
#include <array>
#include <set>
#include <unordered_map>

namespace memledger {

std::string shapeToString(const Shape& s)
{
    std::string out;
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (i)
            out += 'x';
        out += std::to_string(s[i]);
    }
    return out.empty() ? "scalar" : out;
}

bool isInsideModule(const std::string& path, const std::string& module)
{
    if (module.empty())
        return true;
    return path.size() >= module.size() && path.compare(0, module.size(), module) == 0
        && (path.size() == module.size() || path[module.size()] == '.');
}

namespace {

// The numeric suffix of a path ("layers.12" -> 12), for the order of a ModuleList's items; -1 when none.
long itemIndex(const std::string& path)
{
    auto dot = path.rfind('.');
    auto last = dot == std::string::npos ? path : path.substr(dot + 1);
    if (last.empty() || last.size() > 9 || last.find_first_not_of("0123456789") != std::string::npos)
        return -1;
    return std::stol(last);
}

} // namespace

namespace {

std::vector<std::string> splitDotted(const std::string& path)
{
    std::vector<std::string> out(1);
    for (char c : path) {
        if (c == '.')
            out.emplace_back();
        else
            out.back() += c;
    }
    return out;
}

} // namespace

std::vector<std::string> modulesMatching(
    const std::vector<LayerStats>& layers, const std::string& patterns, const std::string& flag)
{
    std::vector<std::string> out;
    for (auto item : splitComma(patterns)) {
        while (!item.empty() && item.front() == ' ')
            item.erase(item.begin());
        while (!item.empty() && item.back() == ' ')
            item.pop_back();
        if (item.empty())
            continue;
        const auto parts = splitDotted(item);
        bool any = false;
        for (const auto& l : layers) {
            if (l.path.empty())
                continue;
            const auto names = splitDotted(l.path);
            bool match = names.size() == parts.size();
            for (std::size_t k = 0; match && k < parts.size(); ++k)
                match = parts[k] == "*" || parts[k] == names[k];
            if (!match)
                continue;
            any = true;
            if (std::find(out.begin(), out.end(), l.path) == out.end())
                out.push_back(l.path);
        }
        if (!any)
            throw std::invalid_argument(flag + ": the model has no module '" + item + "'"
                + (item.find('*') != std::string::npos ? " (\"*\" stands for one module name)" : ""));
    }
    return out;
}

std::vector<std::string> largestRepeatedBlocks(
    const std::vector<LayerStats>& layers, const std::function<bool(const std::string&)>& usable)
{
    std::vector<std::string> best;
    std::int64_t bestWeights = -1;
    bool bestItems = false; // the best set's paths are a list's items ("layers.0", "layers.1")
    struct Group {
        std::string type;
        std::vector<std::string> paths;
        std::int64_t weights = 0;
    };
    for (const auto& l : layers) {
        std::vector<Group> groups; // the children by type, in child order (ties go to the first)
        for (int c : l.children) {
            if (c < 0 || static_cast<std::size_t>(c) >= layers.size())
                continue;
            const auto& child = layers[static_cast<std::size_t>(c)];
            if (usable && !usable(child.path))
                continue;
            auto group = std::find_if(groups.begin(), groups.end(), [&](const Group& g) { return g.type == child.type; });
            if (group == groups.end())
                group = groups.insert(groups.end(), Group {child.type, {}, 0});
            group->paths.push_back(child.path);
            group->weights += child.weight_bytes;
        }
        for (const auto& g : groups) {
            if (g.paths.size() < 2)
                continue;
            const bool items
                = std::all_of(g.paths.begin(), g.paths.end(), [](const std::string& p) { return itemIndex(p) >= 0; });
            if (bestItems && !items)
                continue;
            if ((items && !bestItems) || g.weights > bestWeights
                || (g.weights == bestWeights && g.paths.size() > best.size())) {
                best = g.paths;
                bestWeights = g.weights;
                bestItems = items;
            }
        }
    }
    std::stable_sort(best.begin(), best.end(),
        [](const std::string& a, const std::string& b) { return itemIndex(a) < itemIndex(b); });
    return best;
}

std::int64_t globalBatch(const RunInfo& run)
{
    return run.batch * std::max(1, run.grad_accum) * (run.parallel ? std::max(1, run.parallel->gpus) : 1);
}

const Phase* findPhase(const std::vector<Phase>& phases, const char* name)
{
    for (const auto& p : phases)
        if (p.name == name)
            return &p;
    return nullptr;
}

int Report::findLayer(const std::string& path) const
{
    for (std::size_t i = 0; i < layers.size(); ++i)
        if (layers[i].path == path)
            return static_cast<int>(i);
    return -1;
}

std::vector<std::int64_t> liveBytesAfterEachEvent(const Trace& t)
{
    std::vector<std::int64_t> live(t.size());
    std::int64_t now = 0;
    for (std::size_t i = 0; i < t.size(); ++i) {
        if (t.action[i] == Action::Alloc)
            now += t.bytes[i];
        else if (t.action[i] == Action::Free && t.partner[i] != kNoPartner)
            now -= t.bytes[i];
        live[i] = now;
    }
    return live;
}

// Allocations that are freed before the outermost op that made them returns are temporaries;
// the rest are activations. A free takes the ledger of its allocation.
void classifyTrace(Trace& t, const std::vector<OpCall>& ops)
{
    for (std::size_t i = 0; i < t.size(); ++i) {
        if (t.action[i] != Action::Alloc)
            continue;
        Ledger l = Ledger::Activations;
        if (t.outer_op[i] != 0 && t.op_seq[i] < ops.size()) {
            auto end = ops[t.op_seq[i]].end_event;
            auto p = t.partner[i];
            if (p != kNoPartner && static_cast<std::uint32_t>(p) < end)
                l = Ledger::Temporaries;
        }
        setLedger(t, i, l);
    }
}

// Index of the layer for each interned module path: the path itself or its longest existing prefix.
namespace {

std::vector<int> layerOfString(const Trace& t, const std::vector<LayerStats>& layers)
{
    std::unordered_map<std::string, int> byPath;
    for (std::size_t i = 0; i < layers.size(); ++i)
        byPath.emplace(layers[i].path, static_cast<int>(i));
    std::vector<int> out(t.strings.size(), 0);
    for (std::size_t s = 0; s < t.strings.size(); ++s) {
        std::string p = t.strings.at(static_cast<std::uint32_t>(s));
        while (true) {
            auto it = byPath.find(p);
            if (it != byPath.end()) {
                out[s] = it->second;
                break;
            }
            auto dot = p.rfind('.');
            if (dot == std::string::npos) {
                out[s] = 0;
                break;
            }
            p.resize(dot);
        }
    }
    return out;
}

struct OpenCall {
    std::int64_t first_op = -1;
    std::int64_t last_op = -2;
};

// Peak, ledgers and what is alive at the peak, for the events [first, end) (the peak from where they begin).
void summarizePeak(Report& r, const Trace& t, const std::vector<std::int64_t>& live, std::uint32_t first,
    std::uint32_t end)
{
    for (auto& f : r.ledgers)
        f = {};
    r.alive_at_peak.clear();
    // Peak and ledgers: the peak is the most live bytes at a moment of the range (from where it begins).
    r.peak_bytes = first > 0 ? live[first - 1] : 0;
    r.peak_event = static_cast<std::int32_t>(first) - 1;
    r.peak_time_ns = first > 0 ? t.time_ns[first - 1] : 0;
    for (std::size_t i = first; i < end; ++i) {
        if (t.action[i] == Action::Alloc)
            r.ledgers[static_cast<int>(t.ledger[i])].total += t.bytes[i];
        if (live[i] > r.peak_bytes) {
            r.peak_bytes = live[i];
            r.peak_event = static_cast<std::int32_t>(i);
            r.peak_time_ns = t.time_ns[i];
        }
    }
    r.ledgers[static_cast<int>(Ledger::Weights)] = {r.weight_bytes, r.weight_bytes, 0};
    r.ledgers[static_cast<int>(Ledger::Inputs)] = {r.input_bytes, r.input_bytes, 0};
    r.ledgers[static_cast<int>(Ledger::OptimizerState)] = {r.optimizer_state_bytes, r.optimizer_state_bytes, 0};
    // The most of each ledger alive at once in the range: what the trace allocated (also before the range), on
    // top of what is resident for the whole run.
    std::array<std::int64_t, kLedgerKinds> ledgerLive {};
    std::array<std::int64_t, kLedgerKinds> ledgerMax {};
    for (std::size_t i = 0; i < end; ++i) {
        if (i == first)
            ledgerMax = ledgerLive;
        auto l = static_cast<std::size_t>(t.ledger[i]);
        if (t.action[i] == Action::Alloc)
            ledgerLive[l] += t.bytes[i];
        else if (t.action[i] == Action::Free && t.partner[i] != kNoPartner)
            ledgerLive[l] -= t.bytes[i];
        if (i >= first)
            ledgerMax[l] = std::max(ledgerMax[l], ledgerLive[l]);
    }
    if (first >= end)
        ledgerMax = ledgerLive;
    for (std::size_t l = 0; l < ledgerMax.size(); ++l) // at_peak holds only the resident bytes so far
        r.ledgers[l].max = r.ledgers[l].at_peak + ledgerMax[l];
    r.peak_total_bytes = r.weight_bytes + r.optimizer_state_bytes + r.input_bytes + r.peak_bytes;
    if (r.gpu)
        r.peak_total_bytes += r.gpu->library_bytes;
    if (r.peak_event >= 0) {
        auto pe = static_cast<std::size_t>(r.peak_event);
        for (std::size_t i = 0; i <= pe; ++i) {
            if (t.action[i] != Action::Alloc)
                continue;
            auto p = t.partner[i];
            if (p != kNoPartner && static_cast<std::size_t>(p) <= pe)
                continue;
            r.ledgers[static_cast<int>(t.ledger[i])].at_peak += t.bytes[i];
            PeakItem item;
            item.bytes = t.bytes[i];
            item.ledger = t.ledger[i];
            item.where = t.strings.at(t.where[i]);
            item.op = t.strings.at(t.inner_op[i] ? t.inner_op[i] : t.outer_op[i]);
            item.event = static_cast<std::int32_t>(i);
            r.alive_at_peak.push_back(std::move(item));
        }
        std::stable_sort(r.alive_at_peak.begin(), r.alive_at_peak.end(),
            [](const PeakItem& a, const PeakItem& b) { return a.bytes > b.bytes; });
    }
}

} // namespace

void addToLedgerColumns(std::vector<LayerStats>& layers, int layer, Ledger ledger, std::int64_t bytes, bool activation)
{
    for (int m = layer; m >= 0; m = layers[static_cast<std::size_t>(m)].parent) {
        auto& l = layers[static_cast<std::size_t>(m)];
        if (activation)
            l.activation_bytes += bytes;
        if (ledger == Ledger::SavedActivations)
            l.saved_activation_bytes += bytes;
        if (ledger == Ledger::Gradients)
            l.gradient_bytes += bytes;
    }
}

void summarizeRunEvents(Report& r, const Trace& t, const std::vector<OpCall>& ops,
    const std::vector<std::int64_t>& live, std::uint32_t first, std::uint32_t end)
{
    end = std::min<std::uint32_t>(end, static_cast<std::uint32_t>(t.size()));
    first = std::min(first, end);
    r.range_first = first;
    r.range_end = end;
    const bool train = r.run.mode == RunMode::Train;
    const Phase* forward = findPhase(r.phases, "forward");
    auto inPhase = [](const Phase* p, std::size_t i) { return p && i >= p->first_event && i < p->end_event; };
    // Forward figures of a module count what its forward made: in a training step, the forward phase only.
    auto inForward = [&](std::size_t i) { return !train || inPhase(forward, i); };
    for (auto& l : r.layers) {
        l.activation_bytes = l.temporary_peak_bytes = l.peak_bytes = l.calls = 0;
        l.gradient_bytes = l.saved_activation_bytes = l.backward_temporary_peak_bytes = l.backward_peak_bytes = 0;
        l.output_shapes.clear();
        l.forward_ns = 0;
    }

    summarizePeak(r, t, live, first, end);

    // Per module: activations its forward made (saved ones too), and in a training step what was saved for
    // the backward and the gradients of its parameters (each summed into its parents).
    auto layerOf = layerOfString(t, r.layers);
    // A step of several micro-steps (gradient accumulation, whatif/accumulation.h): the columns are one micro-step's,
    // the first (the one that makes the gradients kept); the later ones repeat it.
    const Phase* firstBackward = findPhase(r.phases, "backward");
    const bool microSteps = std::count_if(r.phases.begin(), r.phases.end(), [](const Phase& p) { return p.name == "forward"; }) > 1;
    const std::size_t columnsEnd = microSteps && firstBackward ? std::min<std::size_t>(end, firstBackward->end_event) : end;
    for (std::size_t i = first; i < columnsEnd; ++i)
        if (t.action[i] == Action::Alloc)
            addToLedgerColumns(r.layers, layerOf[t.where[i]], t.ledger[i], t.bytes[i],
                (t.ledger[i] == Ledger::Activations || t.ledger[i] == Ledger::SavedActivations) && inForward(i));

    // The ops wholly inside the range.
    auto opInRange = [&](const OpCall& op) { return op.first_event >= first && op.end_event <= end; };
    // Temporary peak of each op: temporaries never outlive their op, so each op starts from zero.
    std::vector<std::int64_t> opTempPeak(ops.size(), 0);
    for (std::size_t k = 0; k < ops.size(); ++k) {
        if (!opInRange(ops[k]))
            continue;
        std::int64_t now = 0, peak = 0;
        for (auto i = ops[k].first_event; i < ops[k].end_event; ++i) {
            if (t.ledger[i] != Ledger::Temporaries)
                continue;
            now += t.action[i] == Action::Alloc ? t.bytes[i] : -t.bytes[i];
            peak = std::max(peak, now);
        }
        opTempPeak[k] = peak;
    }

    // Calls: runs of consecutive ops inside a module's subtree; forward ops and backward nodes apart.
    std::vector<std::set<std::string>> shapes(r.layers.size());
    auto isForwardOp = [&](const OpCall& op) {
        return opInRange(op) && !op.backward
            && (!train || (forward && op.start_ns >= forward->start_ns && op.start_ns < forward->end_ns));
    };
    auto eachCall = [&](auto belongs, auto onCall) {
        std::vector<OpenCall> open(r.layers.size());
        auto closeCall = [&](std::size_t m) {
            auto& c = open[m];
            if (c.first_op < 0)
                return;
            const auto& firstOp = ops[static_cast<std::size_t>(c.first_op)];
            const auto& last = ops[static_cast<std::size_t>(c.last_op)];
            std::int64_t entry = firstOp.first_event == 0 ? 0 : live[firstOp.first_event - 1];
            std::int64_t top = entry;
            for (auto i = firstOp.first_event; i < last.end_event; ++i)
                top = std::max(top, live[i]);
            std::int64_t tempPeak = 0;
            for (auto k = c.first_op; k <= c.last_op; ++k)
                tempPeak = std::max(tempPeak, opTempPeak[static_cast<std::size_t>(k)]);
            onCall(m, top - entry, tempPeak, last);
            c.first_op = -1;
        };
        for (std::size_t k = 0; k < ops.size(); ++k) {
            if (!belongs(ops[k]))
                continue;
            for (int m = layerOf[ops[k].module]; m >= 0; m = r.layers[static_cast<std::size_t>(m)].parent) {
                auto& c = open[static_cast<std::size_t>(m)];
                if (c.last_op != static_cast<std::int64_t>(k) - 1)
                    closeCall(static_cast<std::size_t>(m));
                if (c.first_op < 0)
                    c.first_op = static_cast<std::int64_t>(k);
                c.last_op = static_cast<std::int64_t>(k);
            }
        }
        for (std::size_t m = 0; m < r.layers.size(); ++m)
            closeCall(m);
    };
    eachCall(isForwardOp, [&](std::size_t m, std::int64_t delta, std::int64_t tempPeak, const OpCall& last) {
        auto& layer = r.layers[m];
        layer.calls += 1;
        layer.peak_bytes = std::max(layer.peak_bytes, delta);
        layer.temporary_peak_bytes = std::max(layer.temporary_peak_bytes, tempPeak);
        for (const auto& s : last.outputs)
            shapes[m].insert(shapeToString(s));
    });
    if (train)
        eachCall([&](const OpCall& op) { return opInRange(op) && op.backward; },
            [&](std::size_t m, std::int64_t delta, std::int64_t tempPeak, const OpCall&) {
                auto& layer = r.layers[m];
                layer.backward_peak_bytes = std::max(layer.backward_peak_bytes, delta);
                layer.backward_temporary_peak_bytes = std::max(layer.backward_temporary_peak_bytes, tempPeak);
            });
    for (std::size_t m = 0; m < r.layers.size(); ++m)
        r.layers[m].output_shapes.assign(shapes[m].begin(), shapes[m].end());
    // Forward time per module: what a checkpoint around it recomputes.
    for (const auto& op : ops)
        if (isForwardOp(op) && op.module < layerOf.size())
            for (int m = layerOf[op.module]; m >= 0; m = r.layers[static_cast<std::size_t>(m)].parent)
                r.layers[static_cast<std::size_t>(m)].forward_ns += op.end_ns - op.start_ns;
    if (!r.layers.empty())
        r.layers[0].peak_bytes = r.peak_bytes;
}

std::vector<std::int64_t> setPeakFromTrace(Report& r, const Trace& t)
{
    auto live = liveBytesAfterEachEvent(t);
    for (auto& p : r.phases) {
        std::int64_t top = p.first_event == 0 || p.first_event > live.size() ? 0 : live[p.first_event - 1];
        for (auto i = p.first_event; i < p.end_event && i < live.size(); ++i)
            top = std::max(top, live[i]);
        p.peak_bytes = top;
    }
    summarizePeak(r, t, live, 0, static_cast<std::uint32_t>(t.size()));
    return live;
}

} // namespace memledger
