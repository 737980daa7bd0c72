#include "whatif/remedies.h"
#include "report/trace_edit.h"

#include "allocator/gpu_replay.h"
#include "recording/build_report.h"
#include "snapshot/frames.h"
#include "snapshot/snapshot.h"
#include "snapshot/snapshot_ledgers.h"
#include "support/dtype.h"
#include "support/errors.h"
#include "support/format.h"
#include "whatif/checkpoint.h"
#include "whatif/whatif.h"
#include "whatif/whatif_policy.h"
#include "report/weight_bytes.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>
#include <unordered_map>

namespace memledger {

namespace {

constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();

// The outermost ops of a trace: the events inside each (outer_op set), its name, and the blocks it read.
struct OpIndex {
    struct Op {
        std::size_t first = kNone; // events [first, end) happened inside the op
        std::size_t end = 0;
        std::vector<std::uint32_t> reads; // alloc events of the blocks it took as inputs, in order
    };
    std::vector<Op> ops;
    static constexpr std::uint32_t kCaller = 0xFFFFFFFFu; // the model's caller, which reads its output
    std::vector<std::uint32_t> last_reader; // per event: the last op that read the block (0 none; op + 1; kCaller)
    std::vector<std::uint32_t> reader_count; // per event: how many reads of the block
    std::int64_t output_bytes = 0; // blocks the caller reads: the model's output

    explicit OpIndex(const Report& r)
    {
        const Trace& t = *r.trace;
        std::uint32_t most = 0;
        for (std::size_t i = 0; i < t.size(); ++i)
            most = std::max(most, t.op_seq[i]);
        ops.resize(static_cast<std::size_t>(most) + 1);
        for (std::size_t i = 0; i < t.size(); ++i) {
            if (t.outer_op[i] == 0)
                continue;
            auto& op = ops[t.op_seq[i]];
            if (op.first == kNone)
                op.first = i;
            op.end = i + 1;
        }
        last_reader.assign(t.size(), 0);
        reader_count.assign(t.size(), 0);
        for (const auto& u : r.forward_uses) {
            if (u.event >= t.size())
                continue;
            if (u.op < ops.size())
                ops[u.op].reads.push_back(u.event);
            if (last_reader[u.event] != kCaller)
                last_reader[u.event] = std::max(last_reader[u.event], u.op + 1);
            ++reader_count[u.event];
        }
        for (auto event : r.output_events) {
            if (event >= t.size())
                continue;
            if (last_reader[event] != kCaller)
                output_bytes += t.bytes[event];
            last_reader[event] = kCaller;
            ++reader_count[event];
        }
    }

    std::string name(const Trace& t, std::uint32_t op) const
    {
        const auto& o = ops[op];
        return o.first == kNone ? std::string() : t.strings.at(t.outer_op[o.first]);
    }
    // The op's allocations that outlive it.
    std::vector<std::size_t> outputs(const Trace& t, std::uint32_t op) const
    {
        std::vector<std::size_t> out;
        const auto& o = ops[op];
        if (o.first == kNone)
            return out;
        for (std::size_t i = o.first; i < o.end; ++i)
            if (t.action[i] == Action::Alloc && t.op_seq[i] == op
                && (t.partner[i] == kNoPartner || static_cast<std::size_t>(t.partner[i]) >= o.end))
                out.push_back(i);
        return out;
    }
};

const std::set<std::string>& unaryInplaceOps()
{
    static const std::set<std::string> ops {"aten::relu", "aten::hardtanh", "aten::relu6", "aten::sigmoid",
        "aten::tanh", "aten::silu", "aten::hardswish", "aten::hardsigmoid", "aten::leaky_relu", "aten::elu"};
    return ops;
}

const std::set<std::string>& binaryInplaceOps()
{
    static const std::set<std::string> ops {"aten::add", "aten::mul"};
    return ops;
}

std::string inplaceHint(const std::string& op)
{
    static const std::map<std::string, std::string> hints {{"aten::relu", "ReLU(inplace=True) or torch.relu_"},
        {"aten::hardtanh", "Hardtanh/ReLU6(inplace=True)"}, {"aten::relu6", "ReLU6(inplace=True)"},
        {"aten::sigmoid", "torch.sigmoid_"}, {"aten::tanh", "torch.tanh_"}, {"aten::silu", "SiLU(inplace=True)"},
        {"aten::hardswish", "Hardswish(inplace=True)"}, {"aten::hardsigmoid", "Hardsigmoid(inplace=True)"},
        {"aten::leaky_relu", "LeakyReLU(inplace=True)"}, {"aten::elu", "ELU(inplace=True)"},
        {"aten::add", "x += y"}, {"aten::mul", "x *= y"}};
    auto it = hints.find(op);
    return it == hints.end() ? op + "_" : it->second;
}

bool isConvType(const std::string& type)
{
    return type == "Conv1d" || type == "Conv2d" || type == "Conv3d";
}

bool isBatchNormType(const std::string& type)
{
    return type == "BatchNorm1d" || type == "BatchNorm2d" || type == "BatchNorm3d";
}

std::int64_t reserveOf(const Report& r)
{
    if (r.simulated_reserved_peak_bytes > 0)
        return r.simulated_reserved_peak_bytes;
    if (!r.trace || r.trace->size() == 0)
        return 0;
    return simulatedGpuOf(r)->peak_reserved;
}

bool inference(const Report& r)
{
    return r.source == ReportSource::Model && r.run.mode != RunMode::Train;
}

RunOptions optionsOf(const Report& r)
{
    RunOptions o;
    o.inputs = r.run.input_shapes;
    o.input_types = r.run.input_types;
    o.dtype = r.run.dtype;
    o.autocast = r.run.autocast;
    o.autocast_cache = r.run.autocast_cache;
    o.mode = r.run.mode;
    o.optimizer = r.run.optimizer.empty() ? "sgd" : r.run.optimizer;
    o.loss = r.run.loss.empty() ? "auto" : r.run.loss;
    o.threads = r.run.threads;
    o.device = r.run.device.empty() ? "cpu" : r.run.device;
    return o;
}

} // namespace

std::vector<Shape> TilingRequest::inputsOf(const std::vector<Shape>& full) const
{
    auto inputs = full;
    for (auto& s : inputs) {
        if (s.size() < tile.size() + 1)
            throw std::invalid_argument("the tile " + shapeToString(tile) + " has more dimensions than the input "
                + shapeToString(s) + " has beyond its batch");
        for (std::size_t d = 0; d < tile.size(); ++d) {
            auto& n = s[s.size() - tile.size() + d];
            n = std::min(n, tile[d] + 2 * overlap);
        }
    }
    return inputs;
}

std::string TilingRequest::text() const
{
    return "Tiles of " + shapeToString(tile) + (overlap > 0 ? ", " + std::to_string(overlap) + " of overlap" : std::string());
}

std::vector<InplaceCandidate> inplaceCandidates(const Report& r)
{
    std::vector<InplaceCandidate> out;
    if (!inference(r) || !r.trace || !r.forward_uses_recorded)
        return out;
    const Trace& t = *r.trace;
    OpIndex index(r);
    for (std::uint32_t k = 0; k < index.ops.size(); ++k) {
        const auto name = index.name(t, k);
        const bool unary = unaryInplaceOps().count(name) > 0;
        const bool binary = binaryInplaceOps().count(name) > 0;
        if (!unary && !binary)
            continue;
        const auto& reads = index.ops[k].reads;
        if ((unary && reads.size() != 1) || (binary && reads.size() != 2))
            continue; // a binary op's first operand is known only when both are blocks of the run
        const std::size_t in = reads[0];
        if (t.action[in] != Action::Alloc || t.ledger[in] != Ledger::Activations || t.partner[in] == kNoPartner)
            continue;
        if (index.last_reader[in] != k + 1)
            continue; // read later (or by the caller); an input that is itself an in-place output is a chain
                      // (a += b; a *= c), which the prediction follows to the first op's input
        auto outs = index.outputs(t, k);
        if (outs.size() != 1 || t.bytes[outs[0]] != t.bytes[in] || t.ledger[outs[0]] != Ledger::Activations)
            continue;
        InplaceCandidate c;
        c.op = k;
        c.input_alloc = static_cast<std::int32_t>(in);
        c.output_alloc = static_cast<std::int32_t>(outs[0]);
        c.op_name = name;
        c.module = t.strings.at(t.where[outs[0]]);
        out.push_back(std::move(c));
    }
    return out;
}

std::vector<BatchNormFold> batchNormFolds(const Report& r)
{
    std::vector<BatchNormFold> out;
    if (!inference(r) || !r.trace || !r.forward_uses_recorded)
        return out;
    const Trace& t = *r.trace;
    OpIndex index(r);
    auto layerOf = [&r](const std::string& path) -> const LayerStats* {
        int i = r.findLayer(path);
        return i < 0 ? nullptr : &r.layers[static_cast<std::size_t>(i)];
    };
    for (std::uint32_t k = 0; k < index.ops.size(); ++k) {
        if (index.name(t, k) != "aten::batch_norm")
            continue;
        const auto& reads = index.ops[k].reads;
        if (reads.size() != 1)
            continue;
        const std::size_t x = reads[0];
        if (t.action[x] != Action::Alloc || t.outer_op[x] == 0 || index.reader_count[x] != 1
            || index.last_reader[x] != k + 1 || t.partner[x] == kNoPartner)
            continue; // the convolution's output feeds something else too
        const auto conv = t.op_seq[x];
        const auto convName = index.name(t, conv);
        if (convName != "aten::conv1d" && convName != "aten::conv2d" && convName != "aten::conv3d"
            && convName != "aten::_convolution" && convName != "aten::convolution")
            continue;
        auto convOuts = index.outputs(t, conv);
        auto bnOuts = index.outputs(t, k);
        if (convOuts.size() != 1 || convOuts[0] != x || bnOuts.size() != 1 || t.bytes[bnOuts[0]] != t.bytes[x])
            continue;
        // Nothing inside the BatchNorm frees a block made before it but its input (the interpreter lets go of
        // the input while the op runs when nothing else holds it).
        bool clean = true;
        for (std::size_t i = index.ops[k].first; i < index.ops[k].end; ++i)
            if (t.action[i] == Action::Free && t.partner[i] != static_cast<std::int32_t>(x)
                && (t.partner[i] == kNoPartner || static_cast<std::size_t>(t.partner[i]) < index.ops[k].first))
                clean = false;
        const auto convPath = t.strings.at(t.where[x]);
        const auto bnPath = t.strings.at(t.where[bnOuts[0]]);
        const auto* convLayer = layerOf(convPath);
        const auto* bnLayer = layerOf(bnPath);
        if (!clean || !convLayer || !bnLayer || !isConvType(convLayer->type) || !isBatchNormType(bnLayer->type)
            || convLayer->calls != 1 || bnLayer->calls != 1)
            continue;
        BatchNormFold f;
        f.conv = convPath;
        f.batchnorm = bnPath;
        f.conv_op = conv;
        f.bn_op = k;
        f.conv_output = static_cast<std::int32_t>(x);
        f.bn_output = static_cast<std::int32_t>(bnOuts[0]);
        out.push_back(std::move(f));
    }
    return out;
}

std::vector<AllocatorSuggestion> allocatorSuggestions(const Report& r)
{
    std::vector<AllocatorSuggestion> out;
    if (!r.trace || r.trace->size() == 0)
        return out;
    AllocatorSettings base;
    if (r.snapshot) {
        base = r.snapshot->settings.toModel();
        if (!r.snapshot->settings.present)
            base.expandable_segments = std::any_of(r.snapshot->segments.begin(), r.snapshot->segments.end(),
                [](const SnapshotSegment& g) { return g.is_expandable; });
    }
    auto reserveWith = [&r](const AllocatorSettings& s) {
        return r.snapshot ? replaySnapshot(*r.snapshot, s).peak_reserved : simulateGpu(r, s).peak_reserved;
    };
    const std::int64_t before = reserveWith(base);
    std::vector<std::pair<std::string, AllocatorSettings>> tries;
    if (!base.expandable_segments) {
        auto s = base;
        s.expandable_segments = true;
        tries.emplace_back("expandable_segments:True", s);
        for (std::int64_t mb : {64, 128, 256, 512}) {
            if (base.max_split_size <= mb * 1024 * 1024)
                continue;
            auto m = base;
            m.max_split_size = mb * 1024 * 1024;
            tries.emplace_back("max_split_size_mb:" + std::to_string(mb), m);
        }
    }
    for (const auto& [name, s] : tries)
        out.push_back({name, s, before, reserveWith(s)});
    std::stable_sort(out.begin(), out.end(),
        [](const AllocatorSuggestion& a, const AllocatorSuggestion& b) { return a.reserve_after < b.reserve_after; });
    return out;
}

EditedRun predictEditedRun(const Report& r, const std::vector<char>& drop,
    const std::vector<std::pair<std::size_t, std::size_t>>& refree, const std::vector<TensorInfo>& tensors,
    std::int64_t weightBytes)
{
    const Trace& t = *r.trace;
    TraceEdit edit(t);
    for (std::size_t i = 0; i < t.size(); ++i)
        if (drop[i])
            edit.drop(i);
    for (const auto& [f, a] : refree) { // the free at f now frees a's block (and a's own free goes)
        if (drop[a])
            continue;
        edit.drop(f);
        edit.addFree(f, a);
    }
    Trace e = edit.build(nullptr, nullptr);
    EditedRun out;
    std::int64_t peak = 0;
    for (auto v : liveBytesAfterEachEvent(e))
        peak = std::max(peak, v);
    out.peak_total = r.peak_total_bytes - r.peak_bytes - r.weight_bytes + weightBytes + peak;
    Report copy = r;
    copy.model.tensors = tensors;
    copy.weight_bytes = weightBytes;
    copy.trace = std::make_shared<const Trace>(std::move(e));
    copy.simulated_gpu.reset();
    out.reserve = simulateGpu(copy).peak_reserved;
    return out;
}

namespace {

// A remedy's start: its kind and title, and the run's figures before the change.
class RemedyMaker {
public:
    explicit RemedyMaker(const Report& r)
        : r_(r)
        , reserveBefore_(r.source == ReportSource::Model ? reserveOf(r) : 0)
    {
    }
    Remedy operator()(RemedyKind kind, const std::string& title) const
    {
        Remedy m;
        m.kind = kind;
        m.title = title;
        m.peak_total_before = r_.peak_total_bytes;
        m.reserve_before = reserveBefore_;
        return m;
    }

private:
    const Report& r_;
    std::int64_t reserveBefore_;
};

bool modelRun(const Report& r)
{
    return r.source == ReportSource::Model && r.trace;
}

// The what-if records of the report's own run, or none.
const WhatIf* whatIfOf(const Report& r, const RemedyOptions& options)
{
    const WhatIf* w = options.whatif;
    return w && modelRun(r) && w->mode() == r.run.mode ? w : nullptr;
}

// Lower precision, from the what-if records.
void addLowerPrecision(const Report& r, const WhatIf& w, const RemedyMaker& base, std::vector<Remedy>& out)
{
    for (const std::string d : {"bfloat16", "float16"}) {
        if (d == r.run.dtype || dtypeSize(d) >= dtypeSize(r.run.dtype))
            continue;
        auto dts = w.dtypes();
        if (std::find(dts.begin(), dts.end(), d) == dts.end())
            continue;
        auto p = w.predict(r.run.batch, d, true);
        auto m = base(RemedyKind::LowerPrecision, "Run in " + d);
        m.change = "convert the weights and inputs to " + d + " (model.to(torch." + d
            + ")); the results change within " + d + "'s rounding: check the accuracy";
        m.peak_total_after = p.predicted_peak_total_bytes;
        m.reserve_after = p.predicted_reserved_bytes;
        m.dtype = d;
        m.measure_how = w.isRecorded(d) ? MeasureHow::Run : MeasureHow::None;
        for (const auto& n : p.notes)
            m.details.push_back(n);
        if (!w.isRecorded(d))
            m.details.push_back("rescaled by element width from the " + r.run.dtype + " records (it could not "
                + "be recorded in " + d + " here)");
        out.push_back(std::move(m));
    }
}

// The largest batch within the budget, a GPU's memory: the what-if table's answer (makeWhatIfTable judges on the
// allocator's share of it, DeviceOverheads), so that `whatif --budget`, `fit --gpus 1` and this remedy give one
// answer, and no recommended batch's reserve plus the CUDA context exceeds the card. Returns it (0: no budget, or
// none fits). With `model`, the figures the records do not back are run, as the what-if table runs them.
std::int64_t addLargestBatch(const Report& r, const WhatIf& w, std::int64_t budget, Model* model,
    const RemedyMaker& base, std::vector<Remedy>& out)
{
    if (budget <= 0 || !w.hasPrecision(r.run.dtype))
        return 0;
    WhatIfRequest request; // the rows `whatif --budget` makes, the run's own among them
    request.current_batch = r.run.batch;
    request.dtypes = {r.run.dtype};
    request.budget = budget;
    const auto table = whatIfTableFor(w, request, model);
    if (table.max_batch.empty())
        return 0;
    const std::int64_t fitting = table.max_batch.front().second;
    if (fitting <= 0)
        return fitting;
    const auto share = table.allocatorBudget();
    auto p = w.predict(fitting, r.run.dtype, true, share);
    auto m = base(RemedyKind::LargestBatch, "Largest batch within " + formatBytes(budget) + ": "
        + std::to_string(fitting) + " (now " + std::to_string(r.run.batch) + ")");
    m.change = "run at batch " + std::to_string(fitting) + ": the largest whose peak total and reserve stay within "
        + table.allocatorText();
    if (w.runnableRange().bounded()) // never beyond what the program accepts
        m.details.push_back("the program accepts batches " + w.runnableRange().text()
            + (w.runnableRange().why.empty() ? "" : ": " + w.runnableRange().why));
    m.peak_total_after = p.predicted_peak_total_bytes;
    m.reserve_after = p.predicted_reserved_bytes;
    m.batch = fitting;
    m.measure_how = MeasureHow::Run;
    if (!table.max_batch_method.empty())
        m.details.push_back("batch " + std::to_string(fitting) + table.largestMethodText(0));
    out.push_back(std::move(m));
    return fitting;
}

// Micro-batches of `micro` (the largest batch within the budget; without one, the smallest batch the what-if
// records: 2 for a training step).
void addMicroBatching(
    const Report& r, const WhatIf& w, std::int64_t micro, const RemedyMaker& base, std::vector<Remedy>& out)
{
    const std::int64_t batch = r.run.batch;
    if (micro < 1 || batch <= micro)
        return;
    auto p = w.predict(micro, r.run.dtype, true);
    const bool train = r.run.mode == RunMode::Train;
    auto m = base(RemedyKind::MicroBatching, "Micro-batches of " + std::to_string(micro));
    const auto count = (batch + micro - 1) / micro;
    m.change = "run batch " + std::to_string(batch) + " as " + std::to_string(count) + " micro-batches of "
        + std::to_string(micro)
        + (train ? ", accumulating the gradients (loss divided by the number of micro-batches)"
                 : ", concatenating their outputs");
    // Inference keeps the outputs of the other micro-batches until they are concatenated.
    if (!train && r.trace && r.forward_uses_recorded && batch > 0)
        m.extra_bytes = OpIndex(r).output_bytes / batch * (batch - micro);
    m.peak_total_after = p.predicted_peak_total_bytes + m.extra_bytes;
    m.reserve_after = p.predicted_reserved_bytes + m.extra_bytes;
    m.batch = micro;
    m.measure_how = MeasureHow::Run;
    if (m.extra_bytes > 0)
        m.details.push_back("includes " + formatBytes(m.extra_bytes)
            + " for the outputs of the other micro-batches, kept until they are concatenated");
    out.push_back(std::move(m));
}

// In place: activations, and a sum or product written into its first operand.
void addInPlace(const Report& r, const RemedyMaker& base, std::vector<Remedy>& out)
{
    auto cands = inplaceCandidates(r);
    if (cands.empty())
        return;
    const Trace& t = *r.trace;
    std::vector<char> drop(t.size(), 0);
    std::vector<std::pair<std::size_t, std::size_t>> refree;
    auto m = base(RemedyKind::InPlace, "In-place ops (" + std::to_string(cands.size()) + ")");
    std::map<std::size_t, std::size_t> root; // an in-place output -> the block it is written into
    for (const auto& c : cands) {
        auto in = static_cast<std::size_t>(c.input_alloc), o = static_cast<std::size_t>(c.output_alloc);
        auto r0 = root.find(in);
        const std::size_t block = r0 == root.end() ? in : r0->second; // a chain writes into its first input
        drop[o] = 1;
        drop[static_cast<std::size_t>(t.partner[in])] = 1;
        if (t.partner[o] != kNoPartner)
            refree.emplace_back(static_cast<std::size_t>(t.partner[o]), block);
        root[o] = block;
        m.details.push_back((c.module.empty() ? std::string("(root)") : c.module) + " (" + c.op_name
            + "): " + inplaceHint(c.op_name) + ", saves a " + formatBytes(t.bytes[o]) + " block");
    }
    m.change = "let each op below write into its input, which nothing reads afterwards";
    auto e = predictEditedRun(r, drop, refree, r.model.tensors, r.weight_bytes);
    m.peak_total_after = e.peak_total;
    m.reserve_after = e.reserve;
    m.measure_how = MeasureHow::Variant;
    out.push_back(std::move(m));
}

// BatchNorm folded into the Conv before it.
void addFoldBatchNorm(const Report& r, const RemedyMaker& base, std::vector<Remedy>& out)
{
    auto folds = batchNormFolds(r);
    if (folds.empty())
        return;
    const Trace& t = *r.trace;
    OpIndex index(r);
    std::vector<char> drop(t.size(), 0);
    std::vector<std::pair<std::size_t, std::size_t>> refree;
    auto tensors = r.model.tensors;
    std::int64_t weights = r.weight_bytes;
    auto m = base(RemedyKind::FoldBatchNorm, "Fold BatchNorm into the convolution (" + std::to_string(folds.size()) + ")");
    for (const auto& f : folds) {
        const auto& op = index.ops[f.bn_op];
        auto x = static_cast<std::size_t>(f.conv_output), y = static_cast<std::size_t>(f.bn_output);
        for (std::size_t i = op.first; i < op.end; ++i)
            if (i != y && t.action[i] == Action::Alloc && t.partner[i] != kNoPartner)
                drop[static_cast<std::size_t>(t.partner[i])] = 1;
        for (std::size_t i = op.first; i < op.end; ++i)
            drop[i] = 1;
        drop[static_cast<std::size_t>(t.partner[x])] = 1;
        if (t.partner[y] != kNoPartner)
            refree.emplace_back(static_cast<std::size_t>(t.partner[y]), x);
        std::int64_t removed = 0;
        const TensorInfo* convWeight = nullptr;
        bool convHasBias = false;
        for (const auto& ti : tensors) {
            if (ti.name == f.conv + ".weight")
                convWeight = &ti;
            if (ti.name == f.conv + ".bias")
                convHasBias = true;
        }
        TensorInfo bias;
        if (!convHasBias && convWeight && !convWeight->shape.empty()) {
            bias.name = f.conv + ".bias";
            bias.shape = {convWeight->shape[0]};
            bias.dtype = convWeight->dtype;
            bias.bytes = convWeight->shape[0] * dtypeSize(convWeight->dtype);
        }
        tensors.erase(std::remove_if(tensors.begin(), tensors.end(),
                          [&](const TensorInfo& ti) {
                              if (!isInsideModule(ti.name, f.batchnorm))
                                  return false;
                              removed += weightBytesAt(ti, r.run.dtype);
                              return true;
                          }),
            tensors.end());
        weights -= removed;
        if (!bias.name.empty()) {
            weights += weightBytesAt(bias, r.run.dtype);
            tensors.push_back(bias);
        }
        m.details.push_back(f.batchnorm + " into " + f.conv + ": drops its output (" + formatBytes(t.bytes[y]) + ") and "
            + formatBytes(removed) + " of parameters and running statistics"
            + (bias.name.empty() ? "" : ", adds a bias to " + f.conv));
    }
    m.change = "fold each BatchNorm's scale and shift into the convolution before it "
               "(torch.nn.utils.fusion.fuse_conv_bn_eval) and replace it by nn.Identity(); "
               "the eval-mode result is the same";
    auto e = predictEditedRun(r, drop, refree, tensors, weights);
    m.peak_total_after = e.peak_total;
    m.reserve_after = e.reserve;
    m.measure_how = MeasureHow::Variant;
    out.push_back(std::move(m));
}

// Buffers no op read.
void addUnreadBuffers(const Report& r, const RemedyMaker& base, std::vector<Remedy>& out)
{
    if (!inference(r) || !r.buffer_reads_recorded || r.unread_buffers.empty())
        return;
    std::set<std::string> unread(r.unread_buffers.begin(), r.unread_buffers.end());
    auto tensors = r.model.tensors;
    std::int64_t removed = 0;
    auto m = base(RemedyKind::UnreadBuffers, "Buffers the run never reads (" + std::to_string(unread.size()) + ")");
    tensors.erase(std::remove_if(tensors.begin(), tensors.end(),
                      [&](const TensorInfo& ti) {
                          if (!ti.is_buffer || !unread.count(ti.name))
                              return false;
                          auto b = weightBytesAt(ti, r.run.dtype);
                          removed += b;
                          m.details.push_back(ti.name + " " + shapeToString(ti.shape) + " (" + formatBytes(b) + ")");
                          return true;
                      }),
        tensors.end());
    m.change = "delete these buffers (or set them to None) for inference: no op of this run took them, "
               "so the output at this input does not change; another input or training may still read them";
    auto e = predictEditedRun(r, std::vector<char>(r.trace->size(), 0), {}, tensors, r.weight_bytes - removed);
    m.peak_total_after = e.peak_total;
    m.reserve_after = e.reserve;
    m.measure_how = MeasureHow::Variant;
    if (removed > 0)
        out.push_back(std::move(m));
}

// A training step: a checkpoint plan (core/whatif/checkpoint.h), within the budget when one is given, else the
// plan with the lowest peak.
void addCheckpoint(const Report& r, std::int64_t budget, const RemedyMaker& base, std::vector<Remedy>& out)
{
    if (r.run.mode != RunMode::Train || !r.forward_uses_recorded)
        return;
    try {
        auto plan = planCheckpoints(r, budget > 0 ? budget : 1);
        const auto& p = plan.prediction;
        if (p.checkpoint.empty() || p.saving_bytes <= 0)
            return;
        auto m = base(RemedyKind::Checkpoint, "Checkpoint " + std::to_string(p.checkpoint.size()) + " module"
                + (p.checkpoint.size() == 1 ? "" : "s"));
        std::string list;
        for (const auto& path : p.checkpoint)
            list += (list.empty() ? "" : ", ") + path;
        m.change = "wrap " + list + " in torch.utils.checkpoint.checkpoint (" + checkpointImplName(p.impl)
            + "): their activations are recomputed in the backward instead of kept";
        m.peak_total_after = p.predicted_peak_total_bytes;
        m.reserve_after = p.predicted_reserved_bytes > 0 ? p.predicted_reserved_bytes : m.reserve_before;
        char ms[64];
        std::snprintf(ms, sizeof ms, "%.1f", p.recompute_ms);
        m.details.push_back(std::string("recomputes about ") + ms + " ms of forward");
        if (budget > 0)
            m.details.push_back((plan.fits ? "fits within " : "no plan found fits within ")
                + formatBytes(DeviceOverheads::estimates().allocatorShare(budget)) + ", the allocator's share of "
                + formatBytes(budget) + " (the CUDA context off: an estimate)" + (plan.fits ? "" : ": the lowest peak found"));
        for (const auto& n : p.notes)
            m.details.push_back(n);
        m.measure_how = MeasureHow::None; // TorchScript cannot script torch.utils.checkpoint: no run here checks it
        out.push_back(std::move(m));
    } catch (const std::invalid_argument&) {
        // a step the checkpoint model cannot take (no forward uses): no row
    }
}

// A rank of a data-parallel job: each repeated block checkpointed (selective, then full), the step rewritten and the
// rank laid out over it again (whatif/checkpoint.h, whatif/parallel.h).
void addRankCheckpoint(const Report& step, const ParallelPlan& plan, const RemedyMaker& base, std::vector<Remedy>& out)
{
    for (const char* mode : {"selective", "full"}) {
        try {
            const auto spec = parseCheckpointSpec(mode);
            auto c = predictCheckpoint(step, spec, false);
            auto rank = rankReport(*c.report, plan);
            auto m = base(RemedyKind::Checkpoint, std::string("Checkpoint each block (") + mode + ")");
            m.change = "wrap each of the " + std::to_string(c.checkpoint.size()) + " blocks in checkpoint_wrapper "
                "(non-reentrant" + std::string(spec.saves() == CheckpointSaves::MatmulsAndAttention
                    ? ", a selective policy keeping matmul and attention outputs" : "")
                + "), as torchtitan's apply_ac or activation_checkpointing_enable() do; --checkpoint " + mode;
            m.peak_total_after = rank.peak_total_bytes;
            m.reserve_after = rank.simulated_reserved_peak_bytes > 0 ? rank.simulated_reserved_peak_bytes : m.reserve_before;
            m.details.push_back(std::to_string(c.recomputed_ops) + " of the forward's " + std::to_string(c.forward_ops)
                + " ops run again in the backward (" + formatPercent(100.0 * c.recomputeShare()) + ")");
            m.details.push_back("the rank (" + plan.text() + ") laid over the checkpointed step");
            m.measure_how = MeasureHow::None;
            if (m.peakSaving() > 0)
                out.push_back(std::move(m));
        } catch (const std::invalid_argument&) {
            // no repeated block, or a step the checkpoint model cannot take: no row
        }
    }
}

// Tiling as users tile: one interior tile's run (the report's model at the tile's size, or a program of the tile's
// own size), and what stitching keeps beside it: the full input, the full output the tiles are cropped into, and
// the previous tile's output, which its variable holds until the next tile's run returns. A run that fails (a
// program whose sizes are fixed) gives a remedy not worked out, which says how to make it work.
void addTiling(const Report& r, const TilingRequest& tiling, Model& model, const RemedyMaker& base,
    std::vector<Remedy>& out)
{
    auto o = optionsOf(r);
    o.inputs = tiling.inputsOf(r.run.input_shapes);
    const auto& full = r.run.input_shapes.front();
    const auto& run = o.inputs.front();
    auto m = base(RemedyKind::Tiling, tiling.text());
    m.tile.assign(run.end() - static_cast<std::ptrdiff_t>(tiling.tile.size()), run.end());
    std::int64_t tiles = 1;
    for (std::size_t d = 0; d < tiling.tile.size(); ++d) {
        auto n = full[full.size() - tiling.tile.size() + d];
        tiles *= (n + tiling.tile[d] - 1) / tiling.tile[d];
    }
    m.change = "run the input " + shapeToString(full) + " as " + std::to_string(tiles) + " tiles of "
        + shapeToString(tiling.tile)
        + (tiling.overlap > 0 ? " with " + std::to_string(tiling.overlap) + " of overlap on each side (an interior tile's input "
                  + shapeToString(run) + ")"
                              : std::string(" (overlap them where the receptive field needs it: --tile-overlap)"))
        + ", each tile's output cropped into the full output";
    Report tiled;
    try {
        tiled = analyzeModel(tiling.program ? *tiling.program : model, o);
    } catch (const Cancelled&) {
        throw;
    } catch (const std::exception& e) {
        m.peak_total_after = m.peak_total_before;
        m.reserve_after = m.reserve_before;
        m.method = FigureMethod::Estimate;
        m.not_worked_out = "the tile's run at " + shapeToString(run) + " failed: " + e.what()
            + (tiling.program ? std::string()
                              : std::string(". A program whose sizes are fixed (torch.export without dynamic shapes, a traced "
                                            "model) runs only at its own: export one at the tile's input, ")
                      + shapeToString(run) + ", and give it with --tile-program FILE");
        out.push_back(std::move(m));
        return;
    }
    // Kept while the tiles run, beside one tile's run.
    const bool outputs = r.trace && r.forward_uses_recorded && tiled.trace && tiled.forward_uses_recorded;
    const std::int64_t fullOutput = outputs ? OpIndex(r).output_bytes : 0;
    const std::int64_t tileOutput = outputs ? OpIndex(tiled).output_bytes : 0;
    m.extra_bytes = r.input_bytes + fullOutput + tileOutput;
    m.peak_total_after = tiled.peak_total_bytes + m.extra_bytes;
    // The tile's replayed reserve, and the three blocks at the allocator's rounding beside it.
    auto rounded = [](std::int64_t bytes) { return bytes > 0 ? allocatorRoundSize(bytes) : 0; };
    m.reserve_after = (tiled.gpu ? tiled.gpu->reserved_peak_bytes : tiled.simulated_reserved_peak_bytes)
        + rounded(r.input_bytes) + rounded(fullOutput) + rounded(tileOutput);
    m.method = FigureMethod::Predicted; // a run, and the stitching's blocks added to it
    m.measured_peak_total = m.peak_total_after;
    if (tiling.program) // Measure runs the report's model at m.tile: a tile program's run is not that
        m.tile.clear();
    m.measure_how = tiling.program ? MeasureHow::None : MeasureHow::Run;
    m.details.push_back(std::string("one tile's peak total, ") + formatBytes(tiled.peak_total_bytes) + ", "
        + figureMethodText(FigureMethod::Measured, r.run.device == "meta") + " by a run of "
        + (tiling.program ? "the tile's program" : "the model") + " at " + shapeToString(run));
    m.details.push_back("kept while the tiles run: the full input, " + formatBytes(r.input_bytes)
        + (outputs ? ", the full output the tiles are cropped into, " + formatBytes(fullOutput)
                     + ", and the previous tile's output, " + formatBytes(tileOutput)
                     + ", held by its variable until the next tile's run returns (del it before the next call to save it)"
                   : std::string(" (the outputs' sizes are not known from this run: not counted)")));
    if (tiling.overlap > 0) {
        double share = 1.0;
        for (std::size_t d = 0; d < tiling.tile.size(); ++d)
            share *= static_cast<double>(run[run.size() - tiling.tile.size() + d]) / static_cast<double>(tiling.tile[d]);
        m.details.push_back("the overlap is computed again by each neighbour: an interior tile runs "
            + formatPercent(100.0 * share) + " of its own share of the input");
    }
    out.push_back(std::move(m));
}

// GPU runs: cuDNN's autotuner off.
void addCudnnBenchmark(const RemedyMaker& base, std::vector<Remedy>& out)
{
    auto m = base(RemedyKind::CudnnBenchmark, "cudnn.benchmark off");
    m.change = "torch.backends.cudnn.benchmark = False: the autotuner can pick kernels with large workspaces";
    m.peak_total_after = m.peak_total_before;
    m.reserve_after = m.reserve_before;
    m.details.push_back("not predicted: Measure runs the model again with the autotuner off");
    m.measure_how = MeasureHow::Run;
    out.push_back(std::move(m));
}

// Allocator settings, from the caching-allocator model.
void addAllocatorSettings(const Report& r, const RemedyMaker& base, std::vector<Remedy>& out)
{
    auto suggestions = allocatorSuggestions(r);
    if (suggestions.empty())
        return;
    const auto& best = suggestions.front();
    const auto saving = best.reserve_before - best.reserve_after;
    if (saving <= std::max<std::int64_t>(std::int64_t {1} << 20, best.reserve_before / 200))
        return;
    auto m = base(RemedyKind::AllocatorSettings, "PYTORCH_CUDA_ALLOC_CONF=" + best.setting);
    m.change = "set PYTORCH_CUDA_ALLOC_CONF=" + best.setting
        + " before the process starts: the caching allocator keeps less reserved beyond what is allocated";
    m.peak_total_after = m.peak_total_before;
    m.reserve_before = best.reserve_before;
    m.reserve_after = best.reserve_after;
    m.setting = best.setting;
    m.measure_how = MeasureHow::None;
    for (const auto& s : suggestions)
        m.details.push_back(s.setting + ": reserve " + formatBytes(s.reserve_after) + " ("
            + formatByteChange(s.reserve_before - s.reserve_after, 0) + ")");
    m.details.push_back(
        "the allocator model's replay of this " + std::string(r.snapshot ? "snapshot" : "run") + "; not measured on a GPU");
    out.push_back(std::move(m));
}

} // namespace

std::vector<Remedy> computeRemedies(const Report& r, const RemedyOptions& options)
{
    std::vector<Remedy> out;
    const RemedyMaker base(r);
    if (const WhatIf* w = whatIfOf(r, options)) {
        addLowerPrecision(r, *w, base, out);
        const auto fitting = addLargestBatch(r, *w, options.budget, options.model, base, out);
        addMicroBatching(r, *w, options.budget > 0 ? fitting : recordedBatchesFor(r.run.mode).first, base, out);
    }
    if (modelRun(r)) {
        addInPlace(r, base, out);
        addFoldBatchNorm(r, base, out);
        addUnreadBuffers(r, base, out);
        addCheckpoint(r, options.budget, base, out);
        if (options.rank_step && options.rank_plan)
            addRankCheckpoint(*options.rank_step, *options.rank_plan, base, out);
        if (!options.tiling.tile.empty() && options.model)
            addTiling(r, options.tiling, *options.model, base, out);
        if (r.gpu)
            addCudnnBenchmark(base, out);
    }
    addAllocatorSettings(r, base, out);
    if (auto m = snapshotPeakRemedy(r))
        out.push_back(std::move(*m));

    std::stable_sort(out.begin(), out.end(), [](const Remedy& a, const Remedy& b) {
        if (a.peakSaving() != b.peakSaving())
            return a.peakSaving() > b.peakSaving();
        return a.reserveSaving() > b.reserveSaving();
    });
    return out;
}

std::optional<Remedy> snapshotPeakRemedy(const Report& r)
{
    if (!r.snapshot || !r.trace || r.peak_event < 0 || r.peak_bytes <= 0)
        return std::nullopt;
    const Trace& t = *r.trace;
    const auto peak = static_cast<std::size_t>(r.peak_event);
    if (peak >= t.size())
        return std::nullopt;
    // The ledger with the most bytes at the peak.
    std::size_t top = 0;
    for (std::size_t l = 1; l < r.ledgers.size(); ++l)
        if (r.ledgers[l].at_peak > r.ledgers[top].at_peak)
            top = l;
    const auto ledger = static_cast<Ledger>(top);
    const std::int64_t ledgerBytes = r.ledgers[top].at_peak;
    if (ledgerBytes <= 0)
        return std::nullopt;
    std::string holder = annotationAt(*r.snapshot, r.peak_time_ns);
    const std::string phase = snapshotPhaseAt(t, *r.snapshot, peak);
    holder = !holder.empty() ? "the range " + holder + (phase.empty() ? "" : " (" + phase + ")")
        : !phase.empty()     ? "the " + phase
                             : "the trace";

    // Its blocks alive at the peak, per module-tree row (each counted in every row of its chain) and, made outside
    // any forward, per naming frame.
    struct Owner {
        std::int64_t bytes = 0, largest = 0;
        std::size_t depth = 0;
        std::string parent;
        std::string name;
    };
    std::map<std::string, Owner> rows, frames;
    std::int64_t inForward = 0;
    std::unordered_map<std::uint32_t, std::vector<FrameView>> chains;
    for (std::size_t i = 0; i <= peak; ++i) {
        if (t.action[i] != Action::Alloc || t.ledger[i] != ledger
            || (t.partner[i] != kNoPartner && static_cast<std::size_t>(t.partner[i]) <= peak))
            continue;
        auto it = chains.find(t.stack[i]);
        if (it == chains.end())
            it = chains.emplace(t.stack[i], forwardChain(framesOfStack(t, t.stack[i]))).first;
        const auto& chain = it->second;
        auto count = [&](Owner& o) {
            o.bytes += t.bytes[i];
            o.largest = std::max(o.largest, t.bytes[i]);
        };
        if (chain.empty()) {
            auto& o = frames[t.strings.at(t.where[i])];
            o.name = t.strings.at(t.where[i]);
            count(o);
            continue;
        }
        inForward += t.bytes[i];
        for (std::size_t k = 0; k < chain.size(); ++k) {
            auto& o = rows[modulePath(chain, k + 1)];
            o.depth = k + 1;
            o.parent = modulePath(chain, k);
            o.name = shortFrameText(chain[k]);
            count(o);
        }
    }
    const Owner* owner = nullptr;
    std::string ownerPath;
    const std::int64_t outside = ledgerBytes - inForward; // made outside any forward, or before the trace
    if (inForward >= outside && !rows.empty()) {
        // Down the tree while a child holds more than half of the ledger's bytes at the peak.
        std::string at;
        while (true) {
            const Owner* best = nullptr;
            std::string bestPath;
            for (const auto& [path, o] : rows)
                if (o.parent == at && (!best || o.bytes > best->bytes)) {
                    best = &o;
                    bestPath = path;
                }
            if (!best || (owner && best->bytes * 2 <= ledgerBytes))
                break;
            owner = best;
            ownerPath = at = bestPath;
            if (best->bytes * 2 <= ledgerBytes)
                break;
        }
    } else {
        for (const auto& [where, o] : frames)
            if (!owner || o.bytes > owner->bytes) {
                owner = &o;
                ownerPath = where;
            }
    }
    const bool module = owner && rows.count(ownerPath) > 0;

    Remedy m;
    m.kind = RemedyKind::SnapshotPeak;
    m.method = FigureMethod::Estimate;
    m.peak_total_before = r.peak_total_bytes;
    m.peak_total_after = r.peak_total_bytes;
    const std::string label = ledgerLabel(ledger);
    const std::string share = std::to_string(
        static_cast<int>(std::lround(100.0 * static_cast<double>(ledgerBytes) / static_cast<double>(r.peak_bytes))));
    const std::string ownerText = !owner ? std::string("blocks alive before the trace")
        : module                         ? owner->name + (owner->depth > 1 ? " (in " + ownerPath + ")" : "")
                                         : owner->name;
    m.title = "Peak in " + holder + ": " + label + " " + formatBytes(ledgerBytes) + " (" + share + "%)";
    m.details.push_back("the peak: " + formatBytes(r.peak_bytes) + " alive in " + holder + ", "
        + std::to_string(r.peak_time_ns / 1000000) + " ms into the trace");
    m.details.push_back("dominant ledger: " + label + ", " + formatBytes(ledgerBytes) + " of it at the peak");
    if (owner)
        m.details.push_back(std::string("its largest owner: ") + (module ? "the forward " : "the frame ") + ownerText
            + ", " + formatBytes(owner->bytes) + " (largest block " + formatBytes(owner->largest) + ")");
    std::int64_t saving = 0;
    switch (ledger) {
    case Ledger::SavedActivations:
        if (owner && module) {
            saving = std::max<std::int64_t>(0, owner->bytes - owner->largest);
            m.change = "saved activations of " + owner->name + ": " + formatBytes(owner->bytes)
                + " at the peak; activation checkpointing of its calls (torch.utils.checkpoint.checkpoint around "
                  "them) would save up to "
                + formatBytes(saving) + " (estimate), for a second forward of them in the backward";
            m.details.push_back("estimate: " + formatBytes(owner->bytes) + " its calls saved for backward alive at the "
                + "peak, minus " + formatBytes(owner->largest) + ", its largest such block, which the backward "
                + "holds again while it recomputes one call; the inputs of the calls, which checkpointing keeps, "
                + "are not subtracted: the real saving is lower by them");
        } else {
            m.change = "saved for backward by code outside any forward: checkpointing needs a module to wrap";
        }
        break;
    case Ledger::Gradients:
        saving = ledgerBytes / 2;
        m.change = "gradients: " + formatBytes(ledgerBytes) + " at the peak; ZeRO-2 / FSDP sharding keeps 1/N of them "
            + "on each of N ranks (2 ranks save " + formatBytes(saving) + ", 8 save "
            + formatBytes(ledgerBytes - ledgerBytes / 8) + "); bfloat16 gradients halve float32 ones (estimate)";
        m.details.push_back("estimate: half of the gradients at the peak (2 ranks, or bfloat16 for float32)");
        break;
    case Ledger::OptimizerState:
        saving = ledgerBytes * 3 / 4;
        m.change = "optimizer state: " + formatBytes(ledgerBytes) + " at the peak; 8-bit optimizer state "
            + "(bitsandbytes' Adam8bit) keeps a quarter of float32 moments, saving " + formatBytes(saving)
            + "; ZeRO-1 sharding keeps 1/N of it on each of N ranks (estimate)";
        m.details.push_back("estimate: three quarters of the optimizer state at the peak (8-bit for float32 state)");
        break;
    default:
        m.change = label + " hold the peak; no remedy is estimated "
            + "for this ledger from a snapshot";
        break;
    }
    m.peak_total_after = r.peak_total_bytes - saving;
    return m;
}

std::vector<Remedy> remediesForModel(Model& model, const Report& report, std::int64_t budget,
    const TilingRequest& tiling, const std::function<void(const std::string&)>& progress,
    const std::atomic<bool>* cancel, const Report* rankStep, const ParallelPlan* rankPlan)
{
    RunOptions base = optionsOf(report);
    base.cancel = cancel;
    // The what-if the remedies weigh (a smaller batch, a lower precision) is recorded as the What if panel's and
    // `whatif`'s: the same policy, from the run's own precision.
    WhatIfRequest request;
    request.rows = {1, 8, 32}; // with the run's own: what the remedies weigh, made in seconds
    request.current_batch = report.run.batch;
    request.dtypes = {report.run.dtype};
    for (const std::string d : {"bfloat16", "float16"})
        if (d != report.run.dtype)
            request.dtypes.push_back(d);
    auto told = [&progress](const std::string& dtype, std::int64_t batch, int done) {
        if (progress)
            progress("what-if record " + std::to_string(done) + " in " + dtype + " at batch " + std::to_string(batch));
    };
    auto w = recordWhatIf(model, base, request, told);
    if (budget > 0) {
        // The largest batch: the records `whatif --budget SIZE --dtype D` makes for the run's precision, up to past
        // its answer, so that the two say one batch (addLargestBatch takes the what-if table's).
        WhatIfRequest largest;
        largest.current_batch = report.run.batch;
        largest.dtypes = {report.run.dtype};
        largest.budget = budget;
        w.keepFurthest(recordWhatIfForBudget(model, base, largest, told));
    }
    RemedyOptions options;
    options.budget = budget;
    options.tiling = tiling;
    options.whatif = &w;
    options.model = &model;
    options.rank_step = rankStep;
    options.rank_plan = rankPlan;
    if (!tiling.tile.empty() && progress)
        progress("tiling run at " + shapeToString(tiling.inputsOf(report.run.input_shapes).front()));
    return computeRemedies(report, options);
}

Remedy measureRemedy(const Remedy& remedy, const Report& report, Model& model, Model* variant)
{
    Remedy m = remedy;
    auto o = optionsOf(report);
    Model* run = &model;
    std::string how;
    if (remedy.measure_how == MeasureHow::Variant) {
        if (!variant)
            throw std::invalid_argument("measuring \"" + remedy.title + "\" needs the edited model");
        run = variant;
        how = "a run of the edited model at " + shapeToString(o.inputs.front()) + " in " + o.dtype;
    } else if (remedy.measure_how == MeasureHow::Run) {
        if (remedy.kind == RemedyKind::LowerPrecision) {
            o.dtype = remedy.dtype;
        } else if (remedy.kind == RemedyKind::LargestBatch || remedy.kind == RemedyKind::MicroBatching) {
            o.batch = remedy.batch;
        } else if (remedy.kind == RemedyKind::Tiling) {
            TilingRequest run; // the remedy's tile is its run's last dimensions, overlap included
            run.tile = remedy.tile;
            o.inputs = run.inputsOf(report.run.input_shapes);
        } else if (remedy.kind == RemedyKind::CudnnBenchmark) {
            if (!report.gpu)
                throw std::invalid_argument("cudnn.benchmark is measured on a GPU run only");
            o.cudnn_benchmark = false;
        } else {
            throw std::invalid_argument("\"" + remedy.title + "\" has no run to measure it");
        }
        how = "a run at batch " + std::to_string(o.batch.value_or(report.run.batch)) + " in " + o.dtype
            + (remedy.kind == RemedyKind::Tiling ? " at " + shapeToString(o.inputs.front()) : std::string());
    } else {
        throw std::invalid_argument("\"" + remedy.title + "\" cannot be measured here"
            + std::string(remedy.kind == RemedyKind::AllocatorSettings ? " (it needs a GPU process started with the setting)" : ""));
    }
    auto measured = analyzeModel(*run, o);
    m.measured_peak_total = measured.peak_total_bytes + m.extra_bytes;
    m.measured_reserve
        = (measured.gpu ? measured.gpu->reserved_peak_bytes : measured.simulated_reserved_peak_bytes) + m.extra_bytes;
    m.method = FigureMethod::Measured;
    m.measure_note = "measured by " + how;
    return m;
}

} // namespace memledger
