#include "exports/report_text.h"

#include "report/parallel_words.h"
#include "snapshot/snapshot.h"
#include "report/report_summary.h"
#include "support/format.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace memledger {

namespace {


std::string bytesOrDash(std::int64_t b)
{
    return b ? formatBytes(b) : "-";
}

// A snapshot's module tree: allocated in total, saved for backward, gradients, at the peak and count apply.
void printSnapshotRow(std::ostringstream& out, const Report& r, int index, int maxDepth)
{
    const auto& l = r.layers[static_cast<std::size_t>(index)];
    if (l.depth > maxDepth)
        return;
    std::string name = std::string(static_cast<std::size_t>(l.depth) * 2, ' ') + l.name;
    out << padCell(name, 60) << ' ' << padCell(bytesOrDash(l.activation_bytes), 11, true) << ' '
        << padCell(bytesOrDash(l.saved_activation_bytes), 11, true) << ' '
        << padCell(bytesOrDash(l.gradient_bytes), 11, true) << ' ' << padCell(bytesOrDash(l.peak_bytes), 11, true)
        << ' ' << padCell(std::to_string(l.calls), 7, true) << '\n';
    for (int c : l.children)
        printSnapshotRow(out, r, c, maxDepth);
}

void snapshotSummary(std::ostringstream& out, const Report& r)
{
    const auto& s = *r.snapshot;
    out << "Live at the peak: " << formatBytes(r.peak_bytes)
        << "  (alive before the trace began: " << formatBytes(aliveBeforeTrace(s)) << ")\n";
    auto reserved = s.reservedBytes(), allocated = s.allocatedBytes();
    out << "At the end: " << formatBytes(reserved) << " reserved in " << s.segments.size() << " segments, "
        << formatBytes(allocated) << " allocated, " << formatBytes(reserved - allocated)
        << " reserved but not allocated\n";
    for (const auto& o : s.ooms)
        out << "Out of memory on " << snapshotDeviceName(o.device) << ": " << formatBytes(o.bytes_requested) << " requested, "
            << formatBytes(o.device_free) << " free\n";
}

bool isTrainStep(const Report& r)
{
    return r.run.mode == RunMode::Train;
}

// The ledgers a report lists: the four of an inference run always (its output stays as it was), the others
// when they hold bytes.
bool listsLedger(const Report& r, Ledger l)
{
    const auto& f = r.ledgers[static_cast<std::size_t>(l)];
    bool classic = l == Ledger::Weights || l == Ledger::Inputs || l == Ledger::Activations || l == Ledger::Temporaries;
    return classic || f.at_peak > 0 || f.total > 0;
}

void printRow(std::ostringstream& out, const Report& r, int index, int maxDepth)
{
    const auto& l = r.layers[static_cast<std::size_t>(index)];
    if (l.depth > maxDepth)
        return;
    std::string name = std::string(static_cast<std::size_t>(l.depth) * 2, ' ') + (l.parent < 0 ? l.type : l.name);
    std::string shape = l.output_shapes.empty() ? "" : l.output_shapes.front();
    if (l.output_shapes.size() > 1)
        shape += " +" + std::to_string(l.output_shapes.size() - 1);
    out << padCell(name, 34) << ' ' << padCell(l.parent < 0 ? "" : l.type, 18) << ' ' << padCell(shape, 18) << ' '
        << padCell(bytesOrDash(l.weight_bytes), 11, true) << ' ' << padCell(bytesOrDash(l.activation_bytes), 11, true) << ' '
        << padCell(bytesOrDash(l.temporary_peak_bytes), 11, true) << ' ' << padCell(bytesOrDash(l.peak_bytes), 11, true) << ' ';
    if (isTrainStep(r))
        out << padCell(bytesOrDash(l.gradient_bytes), 11, true) << ' '
            << padCell(bytesOrDash(l.saved_activation_bytes), 11, true) << ' '
            << padCell(bytesOrDash(l.backward_temporary_peak_bytes), 11, true) << ' '
            << padCell(bytesOrDash(l.backward_peak_bytes), 11, true) << ' ';
    out << padCell(std::to_string(l.calls), 5, true) << '\n';
    for (int c : l.children)
        printRow(out, r, c, maxDepth);
}

} // namespace

std::string reportToText(const Report& r, int maxDepth)
{
    std::ostringstream out;
    out << "memledger: " << r.model.path << "\n";
    char ms[32];
    std::snprintf(ms, sizeof ms, "%.1f", r.run.duration_ms);
    if (r.snapshot) {
        out << "  " << r.model.type << " (" << r.snapshot->layout << ") of " << r.run.device << ", file "
            << formatBytes(r.model.file_bytes) << ", " << (r.trace ? r.trace->size() : 0) << " trace entries over "
            << ms << " ms\n\n";
        if (!r.layers.empty()) {
            out << padCell("module (forward frames)", 60) << ' ' << padCell("allocated", 11, true) << ' '
                << padCell("saved (bw)", 11, true) << ' ' << padCell("gradients", 11, true) << ' '
                << padCell("at peak", 11, true) << ' ' << padCell("allocs", 7, true) << '\n';
            printSnapshotRow(out, r, 0, maxDepth);
            out << '\n';
        }
        snapshotSummary(out, r);
        if (r.snapshot && !r.snapshot->annotations.empty()) {
            // record_function ranges: where each ran and what it did to the bytes the trace allocated.
            auto figures = annotationFigures(r);
            const auto& list = r.snapshot->annotations;
            out << "Annotations (record_function ranges), " << list.size() << ":\n"
                << "  " << padCell("start ms", 12, true) << padCell("length ms", 11, true) << padCell("peak", 12, true)
                << padCell("added", 12, true) << "  name\n";
            for (std::size_t i = 0; i < list.size() && i < 20; ++i) {
                const auto& a = list[i];
                char start[32], length[32];
                std::snprintf(start, sizeof start, "%.3f", static_cast<double>(r.snapshot->startNs(a)) / 1e6);
                std::snprintf(length, sizeof length, "%.3f", a.end_us >= 0 ? static_cast<double>(a.end_us - a.start_us) / 1000.0 : 0.0);
                out << "  " << padCell(start, 12, true) << padCell(a.end_us >= 0 ? length : "open", 11, true)
                    << padCell(formatBytes(figures[i].peak_bytes), 12, true)
                    << padCell(formatByteChange(0, figures[i].added_bytes), 12, true) << "  " << a.name
                    << (r.snapshot->devices.size() > 1 ? " (" + snapshotDeviceName(a.device) + ")" : "") << "\n";
            }
            if (list.size() > 20)
                out << "  ... and " << list.size() - 20 << " more (all in the JSON)\n";
        }
        // Each ledger as its call stacks and lifetimes tell it (snapshot/snapshot_ledgers.h).
        std::size_t nameWidth = 12;
        for (int l = 0; l < kLedgerKinds; ++l)
            nameWidth = std::max(nameWidth, std::string(ledgerLabel(static_cast<Ledger>(l))).size() + 1);
        out << "Ledgers at the peak (allocated in the trace; most alive at once):\n";
        for (int l = 0; l < kLedgerKinds; ++l) {
            const auto& f = r.ledgers[static_cast<std::size_t>(l)];
            if (f.at_peak > 0 || f.total > 0 || f.max > 0)
                out << "  " << padCell(ledgerLabel(static_cast<Ledger>(l)), nameWidth) << ' '
                    << padCell(formatBytes(f.at_peak), 11, true) << "  (" << formatBytes(f.total) << "; "
                    << formatBytes(f.max) << ")\n";
        }
        if (!r.alive_at_peak.empty()) {
            out << "Allocated in the trace and alive at the peak, largest first:\n";
            for (std::size_t i = 0; i < std::min<std::size_t>(r.alive_at_peak.size(), 10); ++i)
                out << "  " << padCell(formatBytes(r.alive_at_peak[i].bytes), 11, true) << "  "
                    << padCell(ledgerLabel(r.alive_at_peak[i].ledger), nameWidth) << ' ' << r.alive_at_peak[i].where
                    << "\n";
        }
        for (const auto& note : r.notes)
            out << "Note: " << note << "\n";
        return out.str();
    }
    out << "  file " << formatBytes(r.model.file_bytes) << ", input ";
    out << inputsToString(r.run.input_shapes, r.run.input_types, ", ");
    out << (r.run.input_guessed ? " (guessed)" : "") << ", batch " << r.run.batch << ", " << r.run.dtype;
    if (!r.run.autocast.empty())
        out << " weights under autocast " << r.run.autocast << " (weight-cast cache "
            << (r.run.autocast_cache ? "on" : "off") << ")";
    out << ", " << nameOf(r.run.mode) << " on " << r.run.device;
    if (!r.run.lifetimes.empty())
        out << ", " << r.run.lifetimes << " lifetimes";
    if (isTrainStep(r))
        out << " (optimizer " << (r.run.optimizer.empty() ? "-" : r.run.optimizer) << ", loss "
            << (r.run.loss.empty() ? "-" : r.run.loss)
            << (r.run.hold_output.empty() ? "" : ", output held to " + r.run.hold_output) << ", " << r.run.threads
            << (r.run.threads == 1 ? " thread)" : " threads)");
    out << ", " << ms << " ms, " << (r.trace ? r.trace->size() : 0) << " events\n";
    if (r.run.mode == RunMode::Generate) {
        const auto& g = r.model.generation;
        out << "  generation: prompt " << r.run.seq << ", " << r.run.new_tokens << " new tokens per row (greedy: the "
            << "prefill, then " << std::max<std::int64_t>(0, r.run.new_tokens - 1) << " decode steps), "
            << nameOf(r.run.cache) << " KV cache of " << g.layers << " layers x " << g.kv_heads << " KV heads"
            << (g.attention_heads > g.kv_heads ? " (grouped-query: " + std::to_string(g.attention_heads)
                        + " attention heads)" : std::string())
            << " x " << g.head_dim << "; " << formatBytes(r.kv_cache_bytes) << " at the end ("
            << r.run.seq + r.run.new_tokens - 1 << " tokens per row)\n";
    }
    if (r.run.grad_accum > 1) {
        const int ranks = r.run.parallel ? r.run.parallel->gpus : 1;
        out << "  gradient accumulation: " << r.run.grad_accum << " micro-batches of " << r.run.batch
            << " per optimizer step, global batch " << globalBatch(r.run)
            << (ranks > 1 ? " over " + std::to_string(ranks) + " ranks" : std::string()) << "\n";
    }
    if (const auto& par = r.run.parallel) {
        out << "  one rank of " << par->gpus << (par->gpus == 1 ? " GPU" : " GPUs") << ", " << par->shard;
        if (auto layout = shardingLayoutWords(*par); !layout.empty())
            out << " (" << layout << ")";
        out << ", " << shardingStateWords(*par) << "; rank " << par->rank
            << (par->shard == "ddp" ? " (every rank holds the same)" : " (the largest shards)") << "\n";
        out << "  per rank: weights " << formatBytes(r.weight_bytes) << " of " << formatBytes(par->full_parameter_bytes)
            << " parameters, gradients " << formatBytes(r.gradient_bytes) << ", optimizer state "
            << formatBytes(r.optimizer_state_bytes) << "\n";
        if (!par->offload.empty())
            out << "  offloaded (--offload " << par->offload << "): " << formatBytes(par->host_bytes)
                << " of the host's pinned memory per rank, " << formatBytes(par->host_bytes * par->gpus_per_node)
                << " per node of " << par->gpus_per_node << " GPUs\n";
    }
    if (!r.model.bytes_by_dtype.empty()) {
        out << "  tensors in the file:";
        for (const auto& [dtype, bytes] : r.model.bytes_by_dtype)
            out << " " << dtype << " " << formatBytes(bytes);
        const auto frozen = std::count_if(r.model.tensors.begin(), r.model.tensors.end(),
            [](const TensorInfo& t) { return !t.is_buffer && !t.requires_grad; });
        out << " (" << r.model.tensors.size() << " parameters and buffers";
        if (frozen > 0)
            out << "; " << frozen << (frozen == 1 ? " parameter" : " parameters") << " frozen: no gradient, no optimizer state";
        out << ")\n";
    }
    out << "\n";
    if (!r.layers.empty()) {
        out << padCell("module", 34) << ' ' << padCell("type", 18) << ' ' << padCell("output", 18) << ' '
            << padCell("weights", 11, true) << ' ' << padCell("activations", 11, true) << ' ' << padCell("temp peak", 11, true)
            << ' ' << padCell("peak delta", 11, true) << ' ';
        if (isTrainStep(r))
            out << padCell("gradients", 11, true) << ' ' << padCell("saved bwd", 11, true) << ' ' << padCell("bwd temp", 11, true)
                << ' ' << padCell("bwd peak", 11, true) << ' ';
        out << padCell("calls", 5, true) << '\n';
        printRow(out, r, 0, maxDepth);
        out << '\n';
    }
    if ((isTrainStep(r) || r.run.mode == RunMode::Generate) && !r.phases.empty()) {
        out << "Phases:\n";
        for (const auto& p : r.phases) {
            char duration[32];
            std::snprintf(duration, sizeof duration, "%.2f ms", static_cast<double>(p.end_ns - p.start_ns) / 1e6);
            out << "  " << padCell(p.name, 10) << ' ' << padCell(duration, 11, true) << "  peak " << formatBytes(p.peak_bytes)
                << "\n";
        }
    }
    // The names as people read them (the window's), in a column as wide as the longest one listed.
    std::size_t nameWidth = 12;
    for (int l = 0; l < kLedgerCount; ++l)
        if (listsLedger(r, static_cast<Ledger>(l)))
            nameWidth = std::max(nameWidth, std::string(ledgerLabel(static_cast<Ledger>(l))).size() + 1);
    out << "Ledgers at the peak (allocated over the run):\n";
    for (int l = 0; l < kLedgerCount; ++l)
        if (listsLedger(r, static_cast<Ledger>(l))) {
            const auto ledger = static_cast<Ledger>(l);
            out << "  " << padCell(ledgerLabel(ledger), nameWidth) << ' '
                << padCell(formatBytes(r.ledgers[l].at_peak), 11, true) << "  (" << formatBytes(r.ledgers[l].total);
            // A training step: the gradients alive at the peak, and every parameter's .grad once the step is done.
            if (ledger == Ledger::Gradients && isTrainStep(r))
                out << " allocated; " << formatBytes(r.gradient_bytes) << " after the step";
            out << ")\n";
        }
    out << "  peak during the run    " << formatBytes(r.peak_bytes) << "\n";
    out << "  peak total             " << formatBytes(r.peak_total_bytes)
        << (r.optimizer_state_bytes > 0 ? "  (weights + optimizer state + inputs + run peak)\n"
                                        : "  (weights + inputs + run peak)\n");
    if (r.simulated_reserved_peak_bytes > 0 && r.source == ReportSource::Model)
        out << "  reserved on a GPU      " << formatBytes(r.simulated_reserved_peak_bytes)
            << "  (simulated CUDA caching allocator, CUDA context not included)\n";
    if (r.load_tax.file_tensor_bytes > 0)
        out << "Load tax: file " << formatBytes(r.load_tax.file_tensor_bytes) << " " << r.load_tax.file_dtype
            << ", resident " << formatBytes(r.load_tax.resident_bytes) << " as " << r.load_tax.resident_dtype << "\n";
    if (!r.alive_at_peak.empty()) {
        out << "Alive at the peak, largest first:\n";
        std::size_t n = std::min<std::size_t>(r.alive_at_peak.size(), 10);
        std::size_t ledgerWidth = 11; // "saved_activations" widens it
        for (std::size_t i = 0; i < n; ++i)
            ledgerWidth = std::max(ledgerWidth, std::string(ledgerLabel(r.alive_at_peak[i].ledger)).size());
        for (std::size_t i = 0; i < n; ++i) {
            const auto& a = r.alive_at_peak[i];
            out << "  " << padCell(formatBytes(a.bytes), 11, true) << "  " << padCell(ledgerLabel(a.ledger), ledgerWidth) << "  "
                << (a.where.empty() ? "(root)" : a.where) << "  " << a.op << "\n";
        }
        if (r.alive_at_peak.size() > n)
            out << "  ... and " << r.alive_at_peak.size() - n << " more\n";
    }
    for (const auto& note : r.notes)
        out << "Note: " << note << "\n";
    return out.str();
}

std::string tensorsToText(const Report& r)
{
    std::ostringstream out;
    out << padCell("parameter or buffer", 48) << ' ' << padCell("kind", 9) << ' ' << padCell("shape", 20) << ' ' << padCell("dtype", 9)
        << ' ' << padCell("bytes", 11, true) << '\n';
    for (const auto& t : r.model.tensors)
        out << padCell(t.name, 48) << ' ' << padCell(t.is_buffer ? "buffer" : t.requires_grad ? "parameter" : "frozen", 9) << ' '
            << padCell(shapeToString(t.shape), 20) << ' ' << padCell(t.dtype, 9) << ' ' << padCell(formatBytes(t.bytes), 11, true)
            << '\n';
    for (const auto& [dtype, bytes] : r.model.bytes_by_dtype)
        out << "  total " << dtype << ": " << formatBytes(bytes) << '\n';
    return out.str();
}

} // namespace memledger
