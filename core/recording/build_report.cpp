#include "recording/build_report.h"
#include "report/meta_run.h"
#include "report/report_summary.h"
#include "report/trace_edit.h"

#include "allocator/gpu_replay.h"
#include "report/weight_bytes.h"

#include <algorithm>

namespace memledger {

Report buildReport(const ModelInfo& model, const std::vector<LayerStats>& modules, RawRun raw)
{
    Report r;
    r.model = model;
    r.run = raw.info;
    r.layers = modules;
    auto& t = raw.trace;
    classifyTrace(t, raw.ops);
    const bool train = raw.info.mode == RunMode::Train;
    const Phase* forward = findPhase(raw.phases, "forward");
    const Phase* backward = findPhase(raw.phases, "backward");
    auto inPhase = [](const Phase* p, std::size_t i) { return p && i >= p->first_event && i < p->end_event; };
    // Under autocast: the weight casts its cache held until the region's end freed them.
    for (auto e : raw.autocast_cache_events)
        if (e < t.size() && t.action[e] == Action::Alloc)
            setLedger(t, e, Ledger::AutocastCache);
    // Generation: the keys and values each program returned, which the next step's torch.cat replaces.
    for (auto e : raw.kv_cache_events)
        if (e < t.size() && t.action[e] == Action::Alloc)
            setLedger(t, e, Ledger::KvCache);
    r.kv_cache_bytes = raw.kv_cache_bytes;
    if (train) {
        // Allocations that end as a parameter's .grad are gradients; forward activations still alive when the
        // backward starts and freed by it were saved for it.
        for (auto e : raw.gradient_events)
            if (e < t.size())
                setLedger(t, e, Ledger::Gradients);
        for (std::size_t i = 0; i < t.size(); ++i)
            if (t.action[i] == Action::Alloc && t.ledger[i] == Ledger::Activations && inPhase(forward, i)
                && t.partner[i] != kNoPartner && inPhase(backward, static_cast<std::size_t>(t.partner[i])))
                setLedger(t, i, Ledger::SavedActivations);
        r.gradient_bytes = raw.gradient_bytes;
        r.optimizer_state_bytes = raw.optimizer_state_bytes;
    }

    // Weights at the run's dtype (weightBytesAt).
    for (auto& l : r.layers)
        l.weight_bytes = 0;
    std::unordered_map<std::string, int> byPath;
    for (std::size_t i = 0; i < r.layers.size(); ++i)
        byPath.emplace(r.layers[i].path, static_cast<int>(i));
    r.model.parameter_bytes = raw.parameter_bytes;
    r.model.buffer_bytes = raw.buffer_bytes;
    for (const auto& ti : model.tensors) {
        const std::int64_t bytes = weightBytesAt(ti, raw.info.dtype);
        auto dot = ti.name.rfind('.');
        auto it = byPath.find(dot == std::string::npos ? "" : ti.name.substr(0, dot));
        for (int m = it == byPath.end() ? 0 : it->second; m >= 0; m = r.layers[static_cast<std::size_t>(m)].parent)
            r.layers[static_cast<std::size_t>(m)].weight_bytes += bytes;
    }
    r.weight_bytes = raw.parameter_bytes + raw.buffer_bytes;
    r.input_bytes = raw.input_bytes;

    // Load tax: what the file stores against what is resident at the run's dtype.
    r.load_tax.file_tensor_bytes = model.parameter_bytes + model.buffer_bytes;
    std::int64_t most = -1;
    for (const auto& [dtype, bytes] : model.bytes_by_dtype)
        if (isFloatingDtype(dtype) && bytes > most) {
            most = bytes;
            r.load_tax.file_dtype = dtype;
        }
    r.load_tax.resident_bytes = r.weight_bytes;
    r.load_tax.resident_dtype = raw.info.dtype;

    r.gpu = raw.gpu;
    r.unread_buffers = raw.unread_buffers;
    r.buffer_reads_recorded = raw.buffer_reads_recorded;
    r.phases = raw.phases;
    setRunTrace(r, std::move(t), std::move(raw.ops));
    r.forward_uses = std::move(raw.forward_uses);
    r.range_end = 0; // the whole run
    r.forward_uses_recorded = true;
    r.output_events = std::move(raw.output_events);

    if (raw.meta_weights)
        r.notes.push_back("the weights are meta tensors: this run is on the meta device, shapes only");
    if (raw.info.device == "meta")
        r.notes.push_back(metaRunNote());
    r.notes.insert(r.notes.end(), raw.notes.begin(), raw.notes.end());
    if (raw.info.input_guessed)
        r.notes.push_back("input shape " + shapeToString(raw.info.input_shapes.front())
            + " is a guess from the first layer's weight; give the real one with --input");
    return r;
}

} // namespace memledger

namespace memledger {
Report analyzeModel(Model& model, const RunOptions& options)
{
    auto raw = model.run(options);
    return buildReport(model.info(), model.modules(), std::move(raw));
}
} // namespace memledger
