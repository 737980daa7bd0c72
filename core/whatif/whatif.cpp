#include "whatif/whatif.h"
#include "whatif/accumulation.h"
#include "allocator/gpu_replay.h"

#include "recording/build_report.h"
#include "allocator/caching_allocator.h"
#include "support/errors.h"
#include "support/dtype.h"
#include "support/format.h"
#include "whatif/alignment.h"
#include "whatif/fit.h"
#include "whatif/whatif_policy.h"
#include "report/weight_bytes.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <stdexcept>

#include <unistd.h>

namespace memledger {

namespace {



// Parameters and buffers at `dtype` (weightBytesAt).
bool weightsFromTensors(const ModelInfo& model, const std::string& dtype, std::int64_t& params, std::int64_t& buffers)
{
    if (model.tensors.empty())
        return false;
    params = buffers = 0;
    for (const auto& t : model.tensors) {
        (t.is_buffer ? buffers : params) += weightBytesAt(t, dtype);
    }
    return true;
}

std::string percent(double v)
{
    return formatPercent(v);
}

const char* axisWord(WhatIfAxis axis)
{
    return axis == WhatIfAxis::Seq ? "sequence" : "batch";
}

// One pass over `n` events: `signedBytes(i)` is what event i adds to the live bytes (+ an alloc, - its free, 0 none).
// Sets the prediction's peak, its event and the ledgers alive then.
template <class SignedBytes>
void scanPeak(Prediction& p, std::size_t n, const Ledger* ledger, SignedBytes&& signedBytes)
{
    std::array<std::int64_t, kLedgerKinds> live {}, atPeak {};
    std::int64_t now = 0, peak = 0;
    std::int32_t peakEvent = -1;
    for (std::size_t i = 0; i < n; ++i) {
        const std::int64_t bytes = signedBytes(i);
        if (bytes == 0)
            continue;
        now += bytes;
        live[std::min<std::size_t>(static_cast<std::size_t>(ledger[i]), kLedgerKinds - 1)] += bytes;
        if (now > peak) {
            peak = now;
            peakEvent = static_cast<std::int32_t>(i);
            atPeak = live;
        }
    }
    p.predicted_peak_bytes = peak;
    p.peak_event = peakEvent;
    for (int l = 0; l < kLedgerCount; ++l)
        p.ledgers_at_peak[static_cast<std::size_t>(l)] = atPeak[static_cast<std::size_t>(l)];
}

// The reserve on a GPU: the resident blocks first, each its own block as on a GPU, then the run's events as
// `push(replay)` appends them. On a device of `capacity` bytes (0: unbounded) the allocator releases its cached
// blocks and retries before it fails, so the reserve never exceeds the device: out of memory is what does not fit.
// The replay trace is reused from one call to the next: a fresh million-event trace costs more in page faults than
// the replay itself.
template <class Push>
void replayReserve(Prediction& p, const ResidentSet& resident, std::size_t events, std::int8_t device,
    std::int64_t capacity, Push&& push)
{
    thread_local Trace replay;
    replay.clearEvents();
    replay.reserve(resident.blocks.size() + events);
    pushResidentBlocks(replay, resident, device);
    push(replay);
    AllocatorSettings settings;
    settings.device_memory = capacity > 0 ? capacity : 0;
    auto r = replayCachingAllocator(replay, settings);
    p.predicted_reserved_bytes = r.peak_reserved;
    p.capacity_bytes = settings.device_memory;
    p.out_of_memory = r.ooms > 0;
}

// A fit through two records along the batch (a line per allocation) or three along the sequence (a parabola).
// `precision`: the records' (support/dtype.h); "" for what their RunInfo says (not an FSDP record).
std::shared_ptr<WhatIf::Fit> makeFit(const ModelInfo& model, const std::vector<LayerStats>& modules,
    std::vector<RawRun> runs, const std::vector<std::int64_t>& xs, WhatIfAxis axis, const std::string& precision = {})
{
    auto f = std::make_shared<WhatIf::Fit>();
    auto& r2 = runs.back();
    const auto b1 = xs.front(), b2 = xs.back();
    f->axis = axis;
    // "bfloat16-mixed" for an autocast record
    f->dtype = precision.empty() ? precisionOf(r2.info.dtype, r2.info.autocast) : precision;
    f->b1 = b1;
    f->b2 = b2;
    SizeFit sizes;
    if (runs.size() == 1) { // one size is all the model runs (a fixed dimension): the record itself, no growth
        sizes.slope.assign(r2.trace.size(), 0.0);
        sizes.intercept.assign(r2.trace.bytes.begin(), r2.trace.bytes.end());
    } else {
        sizes = runs.size() == 3 ? fitSizesQuadratic(runs[0], xs[0], runs[1], xs[1], runs[2], xs[2], f->quad)
                                 : fitSizes(runs.front(), b1, r2, b2);
    }
    f->slope = std::move(sizes.slope);
    f->intercept = std::move(sizes.intercept);
    f->ops = std::make_shared<const std::vector<OpCall>>(r2.ops);
    f->info = r2.info;
    f->parameter_bytes = r2.parameter_bytes;
    f->buffer_bytes = r2.buffer_bytes;
    f->optimizer_state_bytes = r2.optimizer_state_bytes;
    f->phases = r2.phases;
    f->gradient_events = r2.gradient_events;
    f->autocast_cache_events = r2.autocast_cache_events;
    f->gradient_bytes = r2.gradient_bytes;
    // Targets of a training step: one class per sample (per token for a language model, which the sequence fit
    // does not scale: the batch's does).
    f->target_bytes_per_sample = b2 > 0 ? std::max<std::int64_t>(0, r2.input_bytes - f->inputBytes(b2)) / b2 : 0;

    f->figure_notes = r2.figure_notes;
    f->forward_uses = std::make_shared<const std::vector<TensorUse>>(r2.forward_uses);
    std::vector<std::string> converted; // read before the runs are moved into their reports
    for (const auto& n : r2.notes)
        if (n.rfind("converted: ", 0) == 0)
            converted.push_back(n);
    for (std::size_t k = 0; k < runs.size(); ++k) {
        auto* raw = &runs[k];
        auto batch = xs[k];
        auto report = buildReport(model, modules, std::move(*raw));
        WhatIf::Fit::Recorded rec;
        rec.batch = batch;
        rec.peak = report.peak_bytes;
        rec.peak_event = report.peak_event;
        for (std::size_t i = 0; i < report.trace->size(); ++i)
            if (report.trace->action[i] == Action::Alloc) {
                rec.allocated += report.trace->bytes[i];
                rec.largest = std::max(rec.largest, report.trace->bytes[i]);
            }
        for (int l = 0; l < kLedgerCount; ++l)
            rec.at_peak[static_cast<std::size_t>(l)] = report.ledgers[static_cast<std::size_t>(l)].at_peak;
        f->recorded.push_back(rec);
        if (k + 1 == runs.size())
            f->trace = report.trace;
    }
    const auto& t = *f->trace;
    f->sign.assign(t.size(), 0);
    for (std::size_t i = 0; i < t.size(); ++i) {
        if (t.action[i] == Action::Alloc)
            f->sign[i] = 1;
        else if (t.action[i] == Action::Free && t.partner[i] != kNoPartner)
            f->sign[i] = -1;
    }

    // A program exported in another precision ran converted: its rows are runs of the converted program, and say so.
    for (const auto& n : converted)
        f->notes.push_back(f->dtype + ": its runs are of the program " + n);
    auto b1s = std::to_string(b1), b2s = std::to_string(b2);
    const std::string word = axisWord(axis);
    if (sizes.matched_allocs < sizes.allocs)
        f->notes.push_back(f->dtype + ": " + std::to_string(sizes.allocs - sizes.matched_allocs) + " of "
            + std::to_string(sizes.allocs) + " allocations at " + word + " " + b2s + " have no counterpart at " + word
            + " " + b1s + " (another kernel path); they are assumed to grow with the " + word);
    double matched
        = sizes.bytes > 0 ? 100.0 * static_cast<double>(sizes.matched_bytes) / static_cast<double>(sizes.bytes) : 100.0;
    if (matched < 90.0) {
        f->reliable = false;
        f->notes.push_back(f->dtype + ": only " + percent(matched) + " of the bytes allocated at " + word + " " + b2s
            + " line up with " + word + " " + b1s
            + " (control flow that depends on the data or the batch?): these figures are rough;"
              " measure instead");
    }
    return f;
}

// A dtype the CPU cannot run: another dtype's fit with floating sizes scaled by element width.
std::shared_ptr<WhatIf::Fit> rescaleFit(
    const WhatIf::Fit& from, const std::string& dtype, const ModelInfo& model, const std::string& why)
{
    auto f = std::make_shared<WhatIf::Fit>(from);
    f->dtype = dtype;
    f->rescaled_from = from.dtype;
    f->recorded.clear();
    f->notes.clear();
    double factor = static_cast<double>(dtypeSize(dtype)) / static_cast<double>(dtypeSize(recordDtypeOf(from.dtype)));
    if (factor != 1.0) {
        for (auto& v : f->slope)
            v *= factor;
        for (auto& v : f->intercept)
            v *= factor;
        for (auto& v : f->quad)
            v *= factor;
    }
    // The optimizer's state and the gradients are the parameters' type (their allocations are scaled above).
    f->optimizer_state_bytes = static_cast<std::int64_t>(static_cast<double>(from.optimizer_state_bytes) * factor);
    f->gradient_bytes = static_cast<std::int64_t>(static_cast<double>(from.gradient_bytes) * factor);
    if (!weightsFromTensors(model, dtype, f->parameter_bytes, f->buffer_bytes)) {
        f->parameter_bytes = static_cast<std::int64_t>(static_cast<double>(from.parameter_bytes) * factor);
        f->buffer_bytes = static_cast<std::int64_t>(static_cast<double>(from.buffer_bytes) * factor);
    }
    std::string how = factor == 1.0 ? "the " + from.dtype + " records (the same element width)"
                                    : "the " + from.dtype + " records, every allocation scaled by element width";
    f->notes.push_back(dtype + ": predicted from " + how + ", not measured" + (why.empty() ? "" : ": " + why));
    return f;
}

} // namespace

std::vector<Shape> WhatIf::Fit::inputsAt(std::int64_t x) const
{
    auto shapes = info.input_shapes;
    if (axis == WhatIfAxis::Batch) { // dimension 0, or a List[Tensor]'s length (as the recorder makes it)
        auto types = info.input_types;
        setInputBatch(shapes, types, x);
        return shapes;
    }
    for (std::size_t i = 0; i < shapes.size(); ++i) {
        auto& shape = shapes[i];
        if (axis == WhatIfAxis::Seq && shape.size() >= 2 && inputTypeAt(info.input_types, i).isToken())
            shape[1] = x;
    }
    return shapes;
}

std::int64_t WhatIf::Fit::inputBytes(std::int64_t x) const
{
    auto bytes = memledger::inputBytes(inputsAt(x), info.input_types, recordDtypeOf(dtype));
    return bytes + target_bytes_per_sample * (axis == WhatIfAxis::Batch ? x : b2);
}

WhatIf WhatIf::fromRuns(const ModelInfo& model, const std::vector<LayerStats>& modules, RawRun r1, std::int64_t b1,
    RawRun r2, std::int64_t b2)
{
    if (b1 < 1 || b2 <= b1)
        throw std::invalid_argument(
            "what-if needs two batch sizes 1 <= b1 < b2, not " + std::to_string(b1) + " and " + std::to_string(b2));
    WhatIf w;
    w.model_ = std::make_shared<const ModelInfo>(model);
    auto layers = modules;
    if (layers.empty()) {
        LayerStats root;
        root.name = model.type.empty() ? "model" : model.type;
        layers.push_back(root);
    }
    w.modules_ = std::make_shared<const std::vector<LayerStats>>(std::move(layers));
    std::vector<RawRun> runs;
    runs.push_back(std::move(r1));
    runs.push_back(std::move(r2));
    w.fits_.push_back(makeFit(*w.model_, *w.modules_, std::move(runs), {b1, b2}, WhatIfAxis::Batch));
    w.addRescaledFits({});
    return w;
}

WhatIf WhatIf::record(
    Model& model, RunOptions base, std::int64_t b1, std::int64_t b2, const std::vector<std::string>& dtypes)
{
    if (b1 < 1 || b2 <= b1)
        throw std::invalid_argument(
            "what-if needs two batch sizes 1 <= b1 < b2, not " + std::to_string(b1) + " and " + std::to_string(b2));
    return record(model, std::move(base), std::vector<std::int64_t> {b1, b2}, dtypes);
}

namespace {

// The base precision first; FSDP records (support/dtype.h) last, after the pure record of their dtype they may be
// (aliasFsdpRecord).
std::vector<std::string> dtypeOrder(const RunOptions& base, const std::vector<std::string>& dtypes)
{
    std::vector<std::string> order {precisionOf(base.dtype, base.autocast)};
    for (const auto& d : dtypes) {
        if (!isSupportedPrecision(d) && !isFsdpRecordPrecision(d))
            throw std::invalid_argument("unknown dtype '" + d
                + "' (use float32, bfloat16 or float16, or bfloat16-mixed or float16-mixed: autocast over float32)");
        if (std::find(order.begin(), order.end(), d) == order.end())
            order.push_back(d);
    }
    std::stable_partition(order.begin(), order.end(), [](const std::string& d) { return !isFsdpRecordPrecision(d); });
    return order;
}

// A run that failed for want of memory, as libtorch's CPU and CUDA allocators word it, rather than a size the
// model refuses (outside a program's range, past a position table).
bool isOutOfMemory(const std::string& why)
{
    for (const char* word : {"out of memory", "can't allocate memory", "cannot allocate memory", "bad_alloc",
             "Cancelled", "cancelled"})
        if (why.find(word) != std::string::npos)
            return true;
    return false;
}

// A record at `x` failed where `ran` (< x) ran: unless for want of memory, the model refuses x, and no size
// above `ran` is known to run (a position table's length lies somewhere between): the range ends at `ran`.
void refusedAt(SizeRange& range, WhatIfAxis axis, std::int64_t ran, std::int64_t x, const std::string& why)
{
    if (isOutOfMemory(why) || ran < range.min || ran >= x)
        return;
    const std::string word = axis == WhatIfAxis::Seq ? "sequence " : "batch ";
    range.narrow(range.min, ran,
        "not known to run: " + word + std::to_string(ran) + " ran, " + word + std::to_string(x)
            + " was refused by the model (" + why + ")");
}

// Records a sequence what-if makes beyond its plan to find three that lie past a kernel switch, and the sequence
// from which CPU attention keeps its blocks (PyTorch's CPU flash attention takes query blocks of 32, 64 or 256 rows
// as the sequence passes 192 and 768, and key blocks of up to 512): from 64 to 1024 and three past it, seven.
constexpr int kMoreRecordsPastASwitch = 8;
constexpr std::int64_t kAttentionSettled = 1024;

std::int64_t machineMemoryBytes()
{
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && size > 0 ? static_cast<std::int64_t>(pages) * size : std::int64_t {8} << 30;
}

// The record after `last`: `step` (4x the batch, 2x the sequence), or a batch asked for on the way, at most the
// plan's largest.
std::int64_t nextRecord(std::int64_t last, std::int64_t step, const WhatIf::Plan& plan)
{
    auto next = std::min(step, plan.largest);
    for (auto w : plan.wanted)
        if (w > last && w < next)
            next = w;
    return next;
}

// The run options of one precision (support/dtype.h): a pure one converts the model; a mixed one runs the float32
// model under autocast.
// An FSDP record casts the inputs of the modules base.cast_module_inputs names (the units below the root: the
// default units where it names none); no other.
void setPrecision(RunOptions& o, const std::string& precision, Model& model)
{
    o.dtype = recordDtypeOf(precision);
    o.autocast = autocastDtypeOf(precision);
    if (!isFsdpRecordPrecision(precision))
        o.cast_module_inputs.clear();
    else if (o.cast_module_inputs.empty())
        o.cast_module_inputs = unitsBelowRoot(ParallelPlan {}, model.modules());
}

// An FSDP record (support/dtype.h) of a model whose units are given no floating-point input in another type is
// the pure record of its dtype: where that was recorded, its fits under the FSDP key (into `fits`), rather than
// the same records again. One run at the pure record's first size tells (RawRun::module_input_casts). False where
// the record must be made.
bool aliasFsdpRecord(Model& model, RunOptions o, const std::string& dtype, WhatIfAxis axis,
    std::vector<std::shared_ptr<const WhatIf::Fit>>& fits)
{
    if (!isFsdpRecordPrecision(dtype))
        return false;
    std::vector<std::shared_ptr<const WhatIf::Fit>> pure;
    for (const auto& f : fits)
        if (f->dtype == recordDtypeOf(dtype) && f->rescaled_from.empty())
            pure.push_back(f);
    if (pure.empty())
        return false;
    if (!o.cast_module_inputs.empty()) {
        (axis == WhatIfAxis::Batch ? o.batch : o.seq) = pure.front()->b1;
        o.inputs = pure.front()->info.input_shapes;
        o.input_types = pure.front()->info.input_types;
        o.record = false; // a plain run counts the casts too
        try {
            if (model.run(o).module_input_casts > 0)
                return false;
        } catch (const RunError&) {
            return false; // recorded as any other, which says why it cannot run
        }
    }
    for (const auto& f : pure) {
        auto alias = std::make_shared<WhatIf::Fit>(*f);
        alias->dtype = dtype;
        fits.push_back(std::move(alias));
    }
    return true;
}

// ReusedRecords (whatif_policy.h): this thread's records while one is alive.
thread_local ReusedRecords::Store* tReusedRecords = nullptr;

} // namespace

struct ReusedRecords::Store {
    std::map<std::string, RawRun> runs; // by precision, batch and sequence
};

ReusedRecords::ReusedRecords()
    : store_(std::make_unique<Store>())
    , previous_(tReusedRecords)
{
    tReusedRecords = store_.get();
}

ReusedRecords::~ReusedRecords()
{
    tReusedRecords = previous_;
}

namespace {

// One record of a what-if: run, or taken from the records kept (ReusedRecords) where the same precision and size
// was run before in their scope. A run that fails is not kept (it throws again). `starting` is told before a run,
// not for a record taken from those kept (a further round would otherwise announce the first round's again).
RawRun runRecord(Model& model, const RunOptions& o, const std::string& precision,
    const std::function<void()>& starting = {})
{
    if (!tReusedRecords || !o.record) {
        if (starting)
            starting();
        return model.run(o);
    }
    const auto key = precision + "|" + std::to_string(o.batch.value_or(0)) + "|" + std::to_string(o.seq.value_or(0));
    auto& runs = tReusedRecords->runs;
    if (auto it = runs.find(key); it != runs.end())
        return it->second;
    if (starting)
        starting();
    auto run = model.run(o);
    runs.emplace(key, run);
    return run;
}

// Runs `o` (one precision) at each batch into `runs`. The inputs guessed by the first run are kept in `base` for
// every later batch and precision. A precision other than the base one that cannot run is put in `cannotRun`
// (false); the base one's failure is thrown.
bool recordRuns(Model& model, RunOptions& base, RunOptions& o, const std::string& precision,
    const std::vector<std::int64_t>& batches, std::vector<RawRun>& runs,
    std::vector<std::pair<std::string, std::string>>& cannotRun, WhatIfAxis axis = WhatIfAxis::Batch,
    const WhatIf::Plan* plan = nullptr)
{
    try {
        for (auto b : batches) {
            (axis == WhatIfAxis::Batch ? o.batch : o.seq) = b;
            // Told each record as it starts, so that a failure names the one told (a record kept from an earlier
            // round is not run again, nor told).
            runs.push_back(runRecord(model, o, precision, [&] {
                if (plan && plan->progress)
                    plan->progress(precision, b, static_cast<int>(runs.size()) + 1);
            }));
            if (base.inputs.empty()) { // guessed once: the same guess for every batch and dtype
                o.inputs = base.inputs = runs.back().info.input_shapes;
                o.input_types = base.input_types = runs.back().info.input_types;
            }
        }
    } catch (const RunError& e) {
        if (precision == precisionOf(base.dtype, base.autocast))
            throw;
        cannotRun.emplace_back(precision, e.what());
        return false;
    }
    return true;
}

} // namespace

WhatIf WhatIf::record(
    Model& model, RunOptions base, const std::vector<std::int64_t>& batches, const std::vector<std::string>& dtypes)
{
    if (batches.size() < 2 || batches.front() < 1 || !std::is_sorted(batches.begin(), batches.end())
        || std::adjacent_find(batches.begin(), batches.end()) != batches.end())
        throw std::invalid_argument("what-if needs at least two increasing batch sizes from 1");
    return recordAt(model, std::move(base), batches, dtypes, WhatIfAxis::Batch);
}

WhatIf WhatIf::recordAt(Model& model, RunOptions base, const std::vector<std::int64_t>& xs,
    const std::vector<std::string>& dtypes, WhatIfAxis axis)
{
    const std::size_t window = axis == WhatIfAxis::Seq ? 3 : 2; // a parabola needs three records, a line two
    WhatIf w;
    w.model_ = std::make_shared<const ModelInfo>(model.info());
    w.range_ = axis == WhatIfAxis::Seq ? w.model_->seq_range : w.model_->batch_range;
    w.modules_ = std::make_shared<const std::vector<LayerStats>>(model.modules());
    std::vector<std::pair<std::string, std::string>> cannotRun; // dtype, why
    for (const auto& dtype : dtypeOrder(base, dtypes)) {
        RunOptions o = base;
        setPrecision(o, dtype, model);
        if (aliasFsdpRecord(model, o, dtype, axis, w.fits_))
            continue;
        std::vector<RawRun> runs;
        if (!recordRuns(model, base, o, dtype, xs, runs, cannotRun, axis))
            continue;
        // Each record serves the fits on either side of it.
        for (std::size_t k = 0; k + window <= runs.size(); ++k)
            w.fits_.push_back(makeFit(*w.model_, *w.modules_,
                std::vector<RawRun>(runs.begin() + static_cast<std::ptrdiff_t>(k),
                    runs.begin() + static_cast<std::ptrdiff_t>(k + window)),
                std::vector<std::int64_t>(xs.begin() + static_cast<std::ptrdiff_t>(k),
                    xs.begin() + static_cast<std::ptrdiff_t>(k + window)),
                axis, dtype));
    }
    w.addRescaledFits(cannotRun);
    return w;
}

namespace {

// The memory a plan lets a record take: what it says, else a quarter of this machine's; on the meta device, where
// a record holds shapes and no memory, no limit (a 7B training step at batch 8 is as cheap as at batch 1).
std::int64_t planMemory(const Model& model, const RunOptions& base, const WhatIf::Plan& plan)
{
    if (base.device == "meta" || (base.device.empty() && model.metaWeights()))
        return std::numeric_limits<std::int64_t>::max();
    return plan.memory_budget > 0 ? plan.memory_budget : machineMemoryBytes() / 4;
}

} // namespace

namespace {

// The sequence length of base's token inputs (dimension 1 of the first), or RunError naming what is missing.
std::int64_t baseSequence(Model& model, RunOptions& base)
{
    if (base.inputs.empty()) {
        std::vector<InputType> types;
        base.inputs = model.guessInputs(nullptr, &types);
        base.input_types = types;
    }
    for (std::size_t i = 0; i < base.inputs.size(); ++i)
        if (inputTypeAt(base.input_types, i).isToken() && base.inputs[i].size() >= 2)
            return base.seq.value_or(base.inputs[i][1]);
    throw RunError("a sequence what-if needs a token input (int64, int32 or bool, [batch, seq, ...]), such as "
                   "--input 2x512:int64; this model's inputs are "
        + (base.inputs.empty() ? std::string("not known") : inputsToString(base.inputs, base.input_types)));
}

} // namespace

WhatIf WhatIf::recordSeq(
    Model& model, RunOptions base, const std::vector<std::int64_t>& seqs, const std::vector<std::string>& dtypes)
{
    if (seqs.size() < 3 || seqs.front() < 1 || !std::is_sorted(seqs.begin(), seqs.end())
        || std::adjacent_find(seqs.begin(), seqs.end()) != seqs.end())
        throw std::invalid_argument("a sequence what-if needs at least three increasing sequence lengths");
    baseSequence(model, base);
    return recordAt(model, std::move(base), seqs, dtypes, WhatIfAxis::Seq);
}

namespace {

// Why one more record at `x` cannot be made here ("memory", "time", "the record budget"), "" when it can: the peak total `last` predicts
// there within the plan's memory, and a warm-up and a recorded run (twice the time of the record at `lastX`, grown
// along the axis: with the batch, and with the square of the sequence at worst) within the plan's time for one
// record and, unless `anyTotal`, within its time in all with the `spent` seconds so far. With records counted
// (plan.record_count_budget), time is no bar: unless `anyTotal`, the `made` records so far beyond the first two of
// each precision must leave one more within the count.
std::string unaffordable(const WhatIf& last, const std::string& dtype, std::int64_t x, std::int64_t lastX,
    double lastMs, WhatIfAxis axis, std::int64_t memory, const WhatIf::Plan& plan, double spent, int made, bool anyTotal)
{
    if (last.predict(x, dtype, false).predicted_peak_total_bytes > memory)
        return "memory";
    if (plan.record_count_budget >= 0)
        return !anyTotal && made >= plan.record_count_budget ? "the record budget" : "";
    const double ratio = static_cast<double>(x) / static_cast<double>(lastX);
    const double seconds = lastMs / 1000.0 * (axis == WhatIfAxis::Seq ? ratio * ratio : ratio);
    if (seconds * 2 > plan.seconds_budget
        || (!anyTotal && plan.total_seconds_budget > 0 && spent + seconds * 2 > plan.total_seconds_budget))
        return "time";
    return {};
}

// "float32: recorded at batch 1, 2 and 8", "float32: recorded at sequence 32, 64 and 128 (batch 2); no longer
// record: memory".
std::string recordedNote(const std::string& dtype, WhatIfAxis axis, const std::vector<std::int64_t>& xs,
    std::int64_t batch, const std::string& stopped)
{
    std::string list;
    for (std::size_t i = 0; i < xs.size(); ++i)
        list += (i == 0 ? "" : i + 1 == xs.size() ? " and " : ", ") + std::to_string(xs[i]);
    return dtype + ": recorded at " + axisWord(axis) + " " + list
        + (axis == WhatIfAxis::Seq ? " (batch " + std::to_string(batch) + ")" : std::string())
        + (stopped.empty() ? "" : "; no longer record: " + stopped);
}

// The first records of a sequence what-if, the three of the first parabola: T/2, T and 2T (T itself is the run the
// user asked for); T/4, T/2 and T where 2T is refused (beyond the range an exported program takes). The base
// precision finds the three (`start` empty); the others record at the same ones. False: this precision cannot run.
bool firstSeqRecords(Model& model, RunOptions& base, RunOptions& o, const std::string& precision, std::int64_t t0,
    const std::vector<std::int64_t>& start, SizeRange& range, std::vector<std::int64_t>& seqs, std::vector<RawRun>& runs,
    std::vector<std::pair<std::string, std::string>>& cannotRun, const WhatIf::Plan& plan)
{
    std::vector<std::vector<std::int64_t>> all3, candidates;
    for (auto first : {std::vector<std::int64_t> {t0 / 2, t0, t0 * 2}, std::vector<std::int64_t> {t0 / 4, t0 / 2, t0}}) {
        if (first[0] < 1 || first[0] == first[1])
            first = {t0, t0 * 2, t0 * 4};
        all3.push_back(first);
        // Where the program's range says a record cannot run, the next candidate is tried without running it.
        if (range.contains(first.front()) && range.contains(first.back()))
            candidates.push_back(first);
    }
    if (candidates.empty())
        candidates = all3; // nothing fits the range: the runs say why
    for (auto first : candidates) {
        if (!start.empty())
            first = start;
        seqs = first;
        runs.clear();
        try {
            return recordRuns(model, base, o, precision, seqs, runs, cannotRun, WhatIfAxis::Seq, &plan);
        } catch (const RunError& e) {
            if (first.back() == t0 || !start.empty())
                throw;
            if (!runs.empty())
                refusedAt(range, WhatIfAxis::Seq, first[runs.size() - 1], first[runs.size()], e.what());
        }
    }
    return false;
}

} // namespace

WhatIf WhatIf::recordPlanned(Model& model, RunOptions base, const std::vector<std::string>& dtypes, const Plan& plan)
{
    return recordAlong(model, std::move(base), dtypes, plan, WhatIfAxis::Batch);
}

WhatIf WhatIf::recordSeqPlanned(Model& model, RunOptions base, const std::vector<std::string>& dtypes, const Plan& plan)
{
    return recordAlong(model, std::move(base), dtypes, plan, WhatIfAxis::Seq);
}

WhatIf WhatIf::recordAlong(
    Model& model, RunOptions base, const std::vector<std::string>& dtypes, const Plan& plan, WhatIfAxis axis)
{
    const bool seqAxis = axis == WhatIfAxis::Seq;
    const std::int64_t t0 = seqAxis ? baseSequence(model, base) : 0;
    const std::size_t window = seqAxis ? 3 : 2; // a parabola needs three records, a line two
    const std::int64_t step = seqAxis ? 2 : 4; // the next record: twice the sequence, four times the batch
    WhatIf all;
    all.model_ = std::make_shared<const ModelInfo>(model.info());
    all.modules_ = std::make_shared<const std::vector<LayerStats>>(model.modules());
    all.range_ = seqAxis ? all.model_->seq_range : all.model_->batch_range;
    // A batch what-if's first two records, inside the batches the program accepts: one alone where its batch is
    // fixed.
    auto [b1, b2] = recordedBatchesFor(base.mode.value_or(RunMode::Inference));
    b1 = std::clamp(b1, all.range_.min, all.range_.max);
    b2 = std::min(std::max(b2, b1 * 2), all.range_.max);
    const std::vector<std::int64_t> firstBatches = b2 > b1 ? std::vector<std::int64_t> {b1, b2} : std::vector<std::int64_t> {b1};
    const std::int64_t memory = planMemory(model, base, plan);
    const auto started = std::chrono::steady_clock::now();
    int made = 0; // records beyond the first two of each precision, all precisions (plan.record_count_budget)
    std::vector<std::pair<std::string, std::string>> cannotRun; // dtype, why
    std::vector<std::int64_t> start; // a sequence what-if's first records, as the base precision found them
    // Each precision on its own plan: a precision the CPU runs slowly (float16 convolutions) stops earlier.
    for (const auto& dtype : dtypeOrder(base, dtypes)) {
        RunOptions o = base;
        setPrecision(o, dtype, model);
        if (aliasFsdpRecord(model, o, dtype, axis, all.fits_))
            continue;
        std::vector<std::int64_t> xs;
        std::vector<RawRun> runs;
        bool ran = false;
        if (seqAxis) {
            ran = firstSeqRecords(model, base, o, dtype, t0, start, all.range_, xs, runs, cannotRun, plan);
        } else {
            xs = firstBatches;
            ran = recordRuns(model, base, o, dtype, xs, runs, cannotRun, axis, &plan);
        }
        if (!ran)
            continue;
        if (seqAxis)
            start = xs;
        // The fit through the `window` records from k (a fixed batch: its one record).
        auto fitOf = [&](std::size_t k) {
            const auto n = std::min(window, runs.size());
            return makeFit(*all.model_, *all.modules_,
                std::vector<RawRun>(runs.begin() + static_cast<std::ptrdiff_t>(k),
                    runs.begin() + static_cast<std::ptrdiff_t>(k + n)),
                std::vector<std::int64_t>(xs.begin() + static_cast<std::ptrdiff_t>(k),
                    xs.begin() + static_cast<std::ptrdiff_t>(k + n)),
                axis, dtype);
        };
        std::vector<std::shared_ptr<const Fit>> fits {fitOf(0)};
        if (!seqAxis && dtype == precisionOf(base.dtype, base.autocast) && plan.first_records) {
            WhatIf first = all;
            first.fits_ = fits;
            first.addRescaledFits({});
            plan.first_records(first);
        }
        std::string stopped; // why the records end before the plan's largest
        // The records so far say what a record costs: its peak, and the time of a warm-up and a recorded run.
        auto whyNot = [&](std::int64_t x, double spent, bool anyTotal) {
            WhatIf last = all;
            last.fits_ = {fits.back()};
            return unaffordable(last, dtype, x, xs.back(), runs.back().info.duration_ms, axis, memory, plan, spent,
                made, anyTotal);
        };
        auto secondsSoFar = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(); };
        // One more record at `next`; false, with `stopped` saying why, where the run fails.
        auto record = [&](std::int64_t next) {
            (seqAxis ? o.seq : o.batch) = next;
            try {
                runs.push_back(runRecord(model, o, dtype, [&] {
                    if (plan.progress)
                        plan.progress(dtype, next, static_cast<int>(xs.size()) + 1);
                }));
            } catch (const RunError& e) {
                // For want of memory, or the model refuses that size (a position table). The records so far stand.
                stopped = e.what();
                refusedAt(all.range_, axis, xs.back(), next, e.what());
                return false;
            }
            xs.push_back(next);
            ++made;
            fits.push_back(fitOf(runs.size() - window));
            if (runs.size() > window)
                runs[runs.size() - window - 1] = RawRun {}; // only the last fit's records are needed for the next
            return true;
        };
        const auto largest = std::min(plan.largest, all.range_.max);
        while (xs.back() < largest) {
            auto next = std::min(nextRecord(xs.back(), xs.back() * step, plan), largest);
            const double spent = secondsSoFar();
            bool nearest = false;
            if (auto why = whyNot(next, spent, false); !why.empty()) {
                stopped = why;
                if (seqAxis)
                    break;
                // A batch: extrapolation is the last resort: the largest batch short of it that this machine can
                // run, when that is well beyond the last record, is recorded instead, and is the last.
                std::int64_t lo = xs.back(), hi = next;
                while (hi - lo > 1) {
                    auto mid = lo + (hi - lo) / 2;
                    (whyNot(mid, spent, false).empty() ? lo : hi) = mid;
                }
                if (lo * 2 < xs.back() * 3)
                    break;
                next = lo;
                nearest = true;
            }
            if (!record(next) || nearest)
                break;
        }
        if (seqAxis) {
            // Beyond the largest record the last parabola carries on. It is trusted only when the record before
            // its three lies on it too: else a kernel switched between them (CPU attention changes its blocks with
            // the sequence), and the parabola would take the jump for growth. More records are made past the switch
            // while this machine can (the plan's time in all is no bar here), so that the last three lie past it.
            // The peak, every allocation's bytes summed and the largest allocation, each within 1%: a temporary
            // that jumped between two records shows in the sum long before it reaches the peak.
            auto lastAgrees = [&] {
                if (fits.size() < 2)
                    return true;
                const auto& f = *fits.back();
                WhatIf last = all;
                last.fits_ = {fits.back()};
                const auto& before = fits[fits.size() - 2]->recorded.front();
                const double x = static_cast<double>(before.batch);
                std::int64_t allocated = 0, biggest = 0;
                for (std::size_t i = 0; i < f.sign.size(); ++i)
                    if (f.sign[i] > 0) {
                        auto bytes = f.sizeAt(i, x);
                        allocated += bytes;
                        biggest = std::max(biggest, bytes);
                    }
                auto near = [](std::int64_t a, std::int64_t b) { return std::llabs(a - b) <= std::max<std::int64_t>(b / 100, 4096); };
                return near(last.predict(before.batch, dtype, false).predicted_peak_bytes, before.peak)
                    && near(allocated, before.allocated) && near(biggest, before.largest);
            };
            // Four records at least, so that the last parabola can be checked at all, and records up to the
            // sequence where CPU attention has settled its blocks, where this machine runs them; none when no
            // figure beyond the records is wanted and every length asked for is recorded.
            const bool beyond = plan.beyond_records || (!plan.wanted.empty() && xs.back() < plan.wanted.back());
            for (int extra = 0; beyond && (fits.size() < 2 || xs.back() < kAttentionSettled || !lastAgrees())
                 && extra < kMoreRecordsPastASwitch && xs.back() < all.range_.max;
                 ++extra) {
                const auto next = std::min(xs.back() * 2, all.range_.max);
                if (auto why = whyNot(next, secondsSoFar(), true); !why.empty()) {
                    stopped = why;
                    break;
                }
                if (!record(next))
                    break;
            }
            if (fits.size() >= 2) { // the last fit says how far it is trusted
                const auto n = xs.size();
                auto last = std::make_shared<Fit>(*fits.back());
                if (!lastAgrees()) {
                    last->reliable = false;
                    last->notes.push_back(dtype + ": the records at sequence " + std::to_string(xs[n - 4]) + ", "
                        + std::to_string(xs[n - 3]) + ", " + std::to_string(xs[n - 2]) + " and "
                        + std::to_string(xs[n - 1])
                        + " do not lie on one parabola (a kernel switches between them) and no record past the switch"
                          " could be made here: figures beyond sequence "
                        + std::to_string(xs[n - 3]) + " are rough; measure instead");
                } else {
                    last->notes.push_back(dtype + ": beyond sequence " + std::to_string(xs[n - 1])
                        + " from the parabola through the records at " + std::to_string(xs[n - 3]) + ", "
                        + std::to_string(xs[n - 2]) + " and " + std::to_string(xs[n - 1]) + ", which the record at "
                        + std::to_string(xs[n - 4]) + " lies on too (no kernel switch among them)");
                }
                fits.back() = std::move(last);
            }
        }
        all.fits_.insert(all.fits_.end(), fits.begin(), fits.end());
        all.notes_.push_back(recordedNote(dtype, axis, xs, runs.back().info.batch, stopped));
    }
    all.addRescaledFits(cannotRun);
    return all;
}

WhatIfAxis WhatIf::axis() const
{
    return fits_.empty() ? WhatIfAxis::Batch : fits_.front()->axis;
}

void WhatIf::addRescaledFits(const std::vector<std::pair<std::string, std::string>>& cannotRun)
{
    // A mixed precision (or an FSDP record) is never rescaled from another: one that could not run is said so.
    for (const auto& [d, reason] : cannotRun)
        if (isMixedPrecision(d) || isFsdpRecordPrecision(d))
            notes_.push_back(d + ": could not be recorded here: " + reason);
    // Every supported dtype gets a fit up front, so that a const WhatIf is safe to share between threads.
    for (const char* dtype : {"float32", "bfloat16", "float16"}) {
        if (std::any_of(fits_.begin(), fits_.end(), [&](const auto& f) { return f->dtype == dtype; }))
            continue;
        std::string why = "it was not recorded";
        for (const auto& [d, reason] : cannotRun)
            if (d == dtype)
                why = "it cannot be recorded here (" + reason + ")";
        std::string from = fits_.front()->dtype; // the base precision's, a pure one where there is one
        for (const auto& f : fits_)
            if (!isMixedPrecision(f->dtype) && !isFsdpRecordPrecision(f->dtype)) {
                from = f->dtype;
                break;
            }
        for (const auto& f : fits_)
            if (f->rescaled_from.empty() && dtypeSize(f->dtype) == dtypeSize(dtype)) {
                from = f->dtype;
                break;
            }
        std::vector<std::shared_ptr<const Fit>> rescaled;
        for (const auto& f : fits_)
            if (f->dtype == from)
                rescaled.push_back(rescaleFit(*f, dtype, *model_, why));
        fits_.insert(fits_.end(), rescaled.begin(), rescaled.end());
    }
}

const WhatIf::Fit& WhatIf::fit(const std::string& dtype) const
{
    for (const auto& f : fits_)
        if (f->dtype == dtype)
            return *f;
    throw std::invalid_argument("what-if has no records for dtype '" + dtype + "'");
}

const WhatIf::Fit& WhatIf::fit(const std::string& dtype, std::int64_t batch) const
{
    const Fit* chosen = nullptr;
    for (const auto& f : fits_) {
        if (f->dtype != dtype)
            continue;
        if (!chosen || batch >= f->b1)
            chosen = f.get(); // fits are in increasing batch order: the last that starts at or below batch
        if (batch <= f->b2)
            break;
    }
    if (!chosen)
        throw std::invalid_argument("what-if has no records for dtype '" + dtype + "'");
    return *chosen;
}

bool WhatIf::keepFurthest(const WhatIf& further)
{
    std::vector<std::string> taken;
    for (const auto& f : further.fits_)
        if (f->rescaled_from.empty() && std::find(taken.begin(), taken.end(), f->dtype) == taken.end()
            && further.lastRecord(f->dtype) > lastRecord(f->dtype))
            taken.push_back(f->dtype);
    if (taken.empty())
        return false;
    auto isTaken = [&](const std::string& d) { return std::find(taken.begin(), taken.end(), d) != taken.end(); };
    // Precision by precision, in the order recorded: each one's fits from the what-if its records now come from.
    std::vector<std::string> order;
    for (const auto* w : {static_cast<const WhatIf*>(this), &further})
        for (const auto& f : w->fits_)
            if (std::find(order.begin(), order.end(), f->dtype) == order.end())
                order.push_back(f->dtype);
    std::vector<std::shared_ptr<const Fit>> fits;
    for (const auto& d : order)
        for (const auto& f : (isTaken(d) ? further : *this).fits_)
            if (f->dtype == d)
                fits.push_back(f);
    fits_ = std::move(fits);
    // "float32: recorded at ..." and the like: each precision's own notes from the what-if its records come from.
    auto noteOf = [&](const std::string& n) -> std::string {
        for (const auto& f : fits_)
            if (n.rfind(f->dtype + ":", 0) == 0)
                return f->dtype;
        return {};
    };
    std::vector<std::string> notes;
    for (const auto& n : notes_)
        if (!isTaken(noteOf(n)))
            notes.push_back(n);
    for (const auto& n : further.notes_)
        if (isTaken(noteOf(n)))
            notes.push_back(n);
    notes_ = std::move(notes);
    if (further.range_.max < range_.max || further.range_.min > range_.min)
        range_ = further.range_;
    return true;
}

std::vector<std::string> WhatIf::dtypes() const
{
    std::vector<std::string> out;
    for (const auto& f : fits_)
        if (!isFsdpRecordPrecision(f->dtype) && std::find(out.begin(), out.end(), f->dtype) == out.end())
            out.push_back(f->dtype);
    return out;
}

std::vector<std::int64_t> WhatIf::recordedBatches() const
{
    return fits_.empty() ? std::vector<std::int64_t> {} : recordedBatches(fits_.front()->dtype);
}

std::vector<std::int64_t> WhatIf::recordedBatches(const std::string& dtype) const
{
    std::vector<std::int64_t> out;
    for (const auto& f : fits_) {
        if (f->dtype != dtype)
            continue;
        if (f->recorded.empty()) { // rescaled: the records of the precision it came from
            out.push_back(f->b1);
            out.push_back(f->b2);
        }
        for (const auto& r : f->recorded) // every record, the middle one of a sequence fit's three too
            out.push_back(r.batch);
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

std::int64_t WhatIf::lastRecord(const std::string& dtype) const
{
    const auto records = recordedBatches(dtype);
    return records.empty() ? 0 : records.back();
}

bool WhatIf::hasPrecision(const std::string& precision) const
{
    return std::any_of(fits_.begin(), fits_.end(), [&](const auto& f) { return f->dtype == precision; });
}

bool WhatIf::isRecorded(const std::string& dtype) const
{
    for (const auto& f : fits_)
        if (f->dtype == dtype)
            return f->rescaled_from.empty();
    return false;
}

std::int64_t WhatIf::batch1() const
{
    return fits_.empty() ? 0 : fits_.front()->b1;
}
RunMode WhatIf::mode() const
{
    return fits_.empty() ? RunMode::Inference : fits_.front()->info.mode;
}

std::string WhatIf::device() const
{
    return fits_.empty() || fits_.front()->info.device.empty() ? std::string("cpu") : fits_.front()->info.device;
}

std::int64_t WhatIf::batch2() const
{
    auto batches = recordedBatches();
    return batches.empty() ? 0 : batches.back();
}

std::vector<std::string> WhatIf::notes() const
{
    auto out = figureNotes(); // what qualifies every row first
    out.insert(out.end(), notes_.begin(), notes_.end());
    for (const auto& f : fits_)
        out.insert(out.end(), f->notes.begin(), f->notes.end());
    return out;
}

std::vector<std::string> WhatIf::figureNotes() const
{
    std::vector<std::string> out; // the program's, the same for each precision: once
    for (const auto& f : fits_)
        for (const auto& n : f->figure_notes)
            if (std::find(out.begin(), out.end(), n) == out.end())
                out.push_back(n);
    return out;
}

std::size_t WhatIf::eventCount(const std::string& dtype) const
{
    return fit(dtype).trace->size();
}

Prediction WhatIf::predict(std::int64_t batch, const std::string& dtype, bool withReserved, std::int64_t capacity) const
{
    if (batch < 1)
        throw std::invalid_argument(std::string(axisWord(axis())) + " must be at least 1, not " + std::to_string(batch));
    const auto& f = fit(dtype, batch);
    Prediction p;
    p.batch = batch;
    if (f.axis == WhatIfAxis::Seq) {
        p.batch = f.info.batch;
        p.seq = batch;
    }
    p.dtype = dtype;
    p.weight_bytes = f.parameter_bytes + f.buffer_bytes;
    p.input_bytes = f.inputBytes(batch);
    p.reliable = f.reliable;
    p.notes = f.notes;
    if (!range_.contains(batch)) {
        p.runnable = false;
        p.not_runnable = std::string(axisWord(f.axis)) + " " + std::to_string(batch) + " cannot run: "
            + (range_.why.empty() ? "outside " + range_.text() + ", the sizes the model accepts" : range_.why);
    }

    auto recorded
        = std::find_if(f.recorded.begin(), f.recorded.end(), [&](const Fit::Recorded& r) { return r.batch == batch; });
    if (recorded != f.recorded.end() && !f.plain && !f.unaccumulated) {
        p.method = FigureMethod::Measured;
        p.predicted_peak_bytes = recorded->peak;
        p.peak_event = recorded->peak_event;
        p.ledgers_at_peak = recorded->at_peak;
        p.reliable = true;
    } else {
        // One pass; live bytes per ledger are kept so that the ledgers at the peak need no second pass.
        const auto& t = *f.trace;
        const auto n = t.size();
        const double b = static_cast<double>(batch);
        const std::int8_t* sign = f.sign.data();
        const double* slope = f.slope.data();
        const double* intercept = f.intercept.data();
        const double* quad = f.quad.empty() ? nullptr : f.quad.data();
        scanPeak(p, n, t.ledger.data(), [&](std::size_t i) -> std::int64_t {
            if (!sign[i])
                return 0;
            double v = slope[i] * b + intercept[i] + (quad ? quad[i] * b * b : 0.0);
            std::int64_t bytes = v > 0.0 ? static_cast<std::int64_t>(v + 0.5) : 0;
            return sign[i] > 0 ? bytes : -bytes;
        });
    }
    p.ledgers_at_peak[static_cast<std::size_t>(Ledger::Weights)] = p.weight_bytes;
    p.ledgers_at_peak[static_cast<std::size_t>(Ledger::Inputs)] = p.input_bytes;
    p.ledgers_at_peak[static_cast<std::size_t>(Ledger::OptimizerState)] = f.optimizer_state_bytes;
    p.predicted_peak_total_bytes = p.weight_bytes + f.optimizer_state_bytes + p.input_bytes + p.predicted_peak_bytes;

    if (withReserved) {
        // The same resident set as the report's replay (allocator/gpu_replay.h), at this batch and dtype.
        const auto& t = *f.trace;
        auto resident = residentBlocks(*model_, recordDtypeOf(dtype), p.weight_bytes, f.optimizer_state_bytes, f.inputsAt(batch),
            f.info.input_types, p.input_bytes);
        replayReserve(p, resident, t.size(), t.size() ? t.device.front() : -1, capacity, [&](Trace& replay) {
            for (std::size_t i = 0; i < t.size(); ++i)
                if (f.sign[i])
                    replay.push(0, f.sizeAt(i, static_cast<double>(batch)), t.address[i],
                        f.sign[i] > 0 ? Action::Alloc : Action::Free, t.device[i]);
        });
    }
    std::int64_t largest = 0, smallest = 0; // this precision's largest and smallest records
    for (const auto& g : fits_)
        if (g->dtype == dtype) {
            largest = std::max(largest, g->b2);
            smallest = smallest == 0 ? g->b1 : std::min(smallest, g->b1);
        }
    p.extrapolated = batch > largest || batch < smallest;
    // Each row names its own precision and the records it came from.
    const std::string word = axisWord(f.axis);
    if (p.method == FigureMethod::Predicted) {
        std::string from = f.b1 == f.b2 ? word + " " + std::to_string(f.b1)
                                        : word + " " + std::to_string(f.b1) + (f.quad.empty() ? " and " : " to ")
                + std::to_string(f.b2);
        std::string beyond;
        if (batch > largest)
            beyond = "; extrapolated to " + percent(100.0 * static_cast<double>(batch) / static_cast<double>(largest))
                + " of the largest record (" + word + " " + std::to_string(largest) + ")";
        else if (batch < smallest)
            beyond = "; below the smallest record (" + word + " " + std::to_string(smallest) + ")";
        p.notes.insert(p.notes.begin(),
            dtype + ", " + word + " " + std::to_string(batch) + ": predicted from the "
                + (f.rescaled_from.empty() ? dtype + " records at " + from
                                           : f.rescaled_from + " records at " + from + ", rescaled to " + dtype)
                + ", not measured" + beyond);
    }
    if (!p.runnable)
        p.notes.insert(p.notes.begin(), dtype + ", " + p.not_runnable);
    return p;
}

std::int64_t WhatIf::maxBatch(const std::string& dtype, std::int64_t budget, bool withReserved, std::int64_t upTo) const
{
    return largestFitting(upTo, [&](std::int64_t b) { return fitsWithin(predict(b, dtype, withReserved, budget), budget); });
}

std::int64_t WhatIf::maxRankBatch(const ParallelPlan& plan, std::int64_t budget, bool withReserved, std::int64_t upTo) const
{
    return largestFitting(
        upTo, [&](std::int64_t b) { return fitsWithin(rankPrediction(b, plan, withReserved, budget, true), budget); });
}

std::int64_t WhatIf::largestFitting(std::int64_t upTo, const std::function<bool(std::int64_t)>& fits) const
{
    constexpr std::int64_t kMost = 1000000;
    const std::int64_t first = range_.min;
    std::int64_t last = std::min(range_.max, kMost);
    if (upTo > 0)
        last = std::min(last, upTo);
    if (last < first || !fits(first))
        return 0;
    // Doubling walks up to the first size that does not fit; nothing beyond it is ever the answer, so that the
    // verdict is the same along a growing batch however the allocator's fragmentation moves above it.
    std::int64_t lo = first, hi = 0; // fits(lo), !fits(hi)
    while (lo < last) {
        auto next = std::min(last, lo * 2);
        if (!fits(next)) {
            hi = next;
            break;
        }
        lo = next;
    }
    if (hi == 0)
        return lo;
    while (hi - lo > 1) {
        auto mid = lo + (hi - lo) / 2;
        (fits(mid) ? lo : hi) = mid;
    }
    return lo;
}

Prediction WhatIf::predictRank(std::int64_t batch, const ParallelPlan& plan, bool withReserved, std::int64_t capacity) const
{
    return rankPrediction(batch, plan, withReserved, capacity, false);
}

std::string WhatIf::rankPrecision(const ParallelPlan& plan) const
{
    const auto key = plan.recordedPrecision();
    if (!hasPrecision(key) && isFsdpRecordPrecision(key) && hasPrecision(recordDtypeOf(key)))
        return recordDtypeOf(key);
    return key;
}

namespace {

// What a rank laid over the pure record of its FSDP record's dtype says (WhatIf::rankPrecision).
std::string uncastInputsNote(const std::string& dtype)
{
    return "the " + dtype + " step without FSDP's cast of each unit's floating-point inputs to " + dtype
        + " (MixedPrecisionPolicy.cast_forward_inputs; this what-if did not record it): a unit handed a tensor in "
          "another type (MPT's float32 ALiBi bias) computes in that type here, which moved such a rank's peak by up "
          "to 2% either way; memledger analyze --gpus N --shard fsdp --param-dtype " + dtype + " records it";
}

} // namespace

Prediction WhatIf::rankPrediction(std::int64_t batch, const ParallelPlan& plan, bool withReserved, std::int64_t capacity,
    bool replayOnlyIfPeakFits) const
{
    if (unaccumulated_) { // the micro-steps are the rank layout's, whose schedule differs between them
        auto accumulated = plan;
        accumulated.grad_accum = grad_accum_;
        return unaccumulated_->rankPrediction(batch, accumulated, withReserved, capacity, replayOnlyIfPeakFits);
    }
    const auto dtype = rankPrecision(plan);
    const auto& f = fit(dtype, batch);
    if (f.info.mode != RunMode::Train)
        throw std::invalid_argument("a rank of a data-parallel job is a training step's what-if: record with --mode train");
    // The single-device row first: its inputs, range, notes and method; then its figures replaced by the rank's.
    auto p = predict(batch, dtype, false);
    Trace sized = predictedTrace(batch, dtype);
    RunInfo info = f.info;
    info.dtype = recordDtypeOf(dtype);
    auto layout = layOutRank(*model_, *modules_, sized, *f.ops, f.phases, info, f.optimizer_state_bytes, plan, false);
    p.gpus = plan.gpus;
    p.shard = shardingName(plan.shard);
    p.master_dtype = plan.master_dtype;
    p.weight_bytes = layout.weight_bytes;
    p.host_bytes = layout.info.host_bytes;
    p.host_bytes_per_node = layout.info.host_bytes * layout.info.gpus_per_node;
    p.gradient_bytes = layout.gradient_bytes;
    p.optimizer_state_bytes = layout.optimizer_state_bytes;
    const auto& t = layout.trace;
    scanPeak(p, t.size(), t.ledger.data(), [&](std::size_t i) -> std::int64_t {
        if (t.action[i] == Action::Alloc)
            return t.bytes[i];
        if (t.action[i] == Action::Free && t.partner[i] != kNoPartner)
            return -t.bytes[i];
        return 0;
    });
    p.ledgers_at_peak[static_cast<std::size_t>(Ledger::Weights)] = p.weight_bytes;
    p.ledgers_at_peak[static_cast<std::size_t>(Ledger::Inputs)] = p.input_bytes;
    p.ledgers_at_peak[static_cast<std::size_t>(Ledger::OptimizerState)] = layout.optimizer_state_bytes;
    p.predicted_peak_total_bytes = p.weight_bytes + layout.optimizer_state_bytes + p.input_bytes + p.predicted_peak_bytes;
    if (p.method == FigureMethod::Measured) // the record was of one device: the rank is laid over it
        p.method = FigureMethod::Predicted;
    p.notes.insert(p.notes.begin(), layout.notes.begin(), layout.notes.end());
    if (dtype != plan.recordedPrecision())
        p.notes.insert(p.notes.begin(), uncastInputsNote(dtype));
    if (replayOnlyIfPeakFits && (!p.runnable || (capacity > 0 && p.predicted_peak_total_bytes > capacity)))
        withReserved = false; // does not fit whatever the reserve
    if (withReserved) {
        ResidentSet resident; // the rank's shards, buffers and optimizer state, then the inputs
        resident.blocks = layout.info.resident_blocks;
        auto inputs = residentBlocks(ModelInfo {}, recordDtypeOf(dtype), 0, 0, f.inputsAt(batch), f.info.input_types, p.input_bytes);
        resident.blocks.insert(resident.blocks.end(), inputs.blocks.begin(), inputs.blocks.end());
        replayReserve(p, resident, t.size(), t.size() ? t.device.front() : -1, capacity, [&](Trace& replay) {
            for (std::size_t i = 0; i < t.size(); ++i)
                if (t.action[i] == Action::Alloc || (t.action[i] == Action::Free && t.partner[i] != kNoPartner))
                    replay.push(0, t.bytes[i], t.address[i], t.action[i], t.device[i]);
        });
    }
    return p;
}

Report WhatIf::predictedRankReport(std::int64_t batch, const ParallelPlan& plan) const
{
    if (unaccumulated_) {
        auto accumulated = plan;
        accumulated.grad_accum = grad_accum_;
        return unaccumulated_->predictedRankReport(batch, accumulated);
    }
    const auto dtype = rankPrecision(plan);
    auto step = predictedReport(batch, dtype);
    auto r = rankReport(step, plan);
    if (dtype != plan.recordedPrecision())
        r.notes.insert(r.notes.begin(), uncastInputsNote(dtype));
    return r;
}

Trace WhatIf::predictedTrace(std::int64_t batch, const std::string& dtype) const
{
    const auto& f = fit(dtype, batch);
    Trace t = *f.trace;
    for (std::size_t i = 0; i < t.size(); ++i)
        if (f.sign[i])
            t.bytes[i] = f.sizeAt(i, static_cast<double>(batch));
    return t;
}

Report WhatIf::predictedReport(std::int64_t batch, const std::string& dtype) const
{
    if (unaccumulated_)
        return accumulatedReport(unaccumulated_->predictedReport(batch, dtype), grad_accum_);
    const auto& f = fit(dtype, batch);
    if (!f.plain)
        return reportOf(f, batch, dtype);
    // The checkpointed step: the plain step's report at this size, rewritten as the stage rewrote its fits.
    auto plain = reportOf(*f.plain, batch, dtype);
    auto c = predictCheckpoint(plain, checkpoint_, false);
    Report report = *c.report;
    report.notes.insert(report.notes.begin(), c.notes.begin(), c.notes.end());
    return report;
}

Report WhatIf::reportOf(const Fit& f, std::int64_t batch, const std::string& dtype) const
{
    RawRun raw;
    raw.trace = *f.trace;
    for (std::size_t i = 0; i < raw.trace.size(); ++i)
        if (f.sign[i])
            raw.trace.bytes[i] = f.sizeAt(i, static_cast<double>(batch));
    raw.ops = *f.ops;
    if (f.forward_uses)
        raw.forward_uses = *f.forward_uses;
    // Output shapes: the batch (dimension 0) or the sequence (dimension 1) of the largest record replaced.
    const std::size_t dim = f.axis == WhatIfAxis::Seq ? 1 : 0;
    for (auto& op : raw.ops)
        for (std::size_t k = 0; k < op.outputs.size(); ++k)
            if (op.outputs[k].size() > dim && op.outputs[k][dim] == f.b2) {
                op.outputs[k][dim] = batch;
                if (k < op.output_bytes.size())
                    op.output_bytes[k] = op.output_bytes[k] / f.b2 * batch;
            }
    raw.info = f.info;
    if (f.axis == WhatIfAxis::Seq)
        raw.info.seq = batch;
    else
        raw.info.batch = batch;
    raw.info.dtype = recordDtypeOf(dtype);
    raw.info.duration_ms = 0.0;
    raw.info.input_shapes = f.inputsAt(batch);
    raw.input_bytes = f.inputBytes(batch);
    raw.parameter_bytes = f.parameter_bytes;
    raw.buffer_bytes = f.buffer_bytes;
    raw.optimizer_state_bytes = f.optimizer_state_bytes;
    raw.phases = f.phases;
    raw.gradient_events = f.gradient_events;
    raw.gradient_bytes = f.gradient_bytes;
    raw.autocast_cache_events = f.autocast_cache_events;
    raw.notes = f.figure_notes; // a predicted report is qualified as its records were
    raw.figure_notes = f.figure_notes;
    auto report = buildReport(*model_, *modules_, std::move(raw));
    auto p = predict(batch, dtype, false);
    report.notes.insert(report.notes.begin(), p.notes.begin(), p.notes.end());
    return report;
}

Prediction WhatIf::measure(Model& model, std::int64_t batch, const std::string& dtype, std::int64_t capacity) const
{
    if (grad_accum_ > 1)
        throw std::invalid_argument("a run measures one step; the " + std::to_string(grad_accum_)
            + " micro-steps are laid over it (measure the what-if without --grad-accum)");
    auto p = predict(batch, dtype, true, capacity);
    const auto& f = fit(dtype, batch);
    RunOptions o;
    o.inputs = f.info.input_shapes;
    o.input_types = f.info.input_types;
    (f.axis == WhatIfAxis::Seq ? o.seq : o.batch) = batch;
    o.dtype = recordDtypeOf(dtype);
    o.autocast = f.info.autocast;
    o.autocast_cache = f.info.autocast_cache;
    o.mode = f.info.mode;
    o.optimizer = f.info.optimizer.empty() ? "sgd" : f.info.optimizer;
    o.loss = f.info.loss.empty() ? "auto" : f.info.loss;
    o.threads = f.info.threads;
    o.device = f.info.device.empty() ? "cpu" : f.info.device; // a meta what-if measures on meta too
    auto raw = model.run(o);
    auto live = liveBytesAfterEachEvent(raw.trace);
    std::int64_t peak = 0;
    for (auto v : live)
        peak = std::max(peak, v);
    p.method = FigureMethod::Measured;
    // The row is a run now: the prediction's own "predicted from ..., not measured" note no longer holds.
    p.notes.erase(std::remove_if(p.notes.begin(), p.notes.end(),
                      [](const std::string& n) { return n.find(": predicted from the ") != std::string::npos; }),
        p.notes.end());
    p.measured_peak_bytes = peak;
    p.measured_peak_total_bytes
        = peak + raw.parameter_bytes + raw.buffer_bytes + raw.optimizer_state_bytes + raw.input_bytes;
    p.error_percent
        = peak > 0 ? 100.0 * static_cast<double>(p.predicted_peak_bytes - peak) / static_cast<double>(peak) : 0.0;
    p.notes.push_back(std::string(figureMethodText(FigureMethod::Measured, o.device == "meta")) + " at " + axisWord(f.axis) + " " + std::to_string(batch) + " in " + dtype + ": peak " + formatBytes(peak)
        + ", prediction off by " + percent(*p.error_percent));
    return p;
}

} // namespace memledger
