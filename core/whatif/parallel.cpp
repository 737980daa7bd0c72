#include "whatif/parallel.h"

#include "whatif/accumulation.h"
#include "whatif/rank_schedule.h"

#include "allocator/gpu_replay.h"
#include "report/report_summary.h"
#include "report/trace_edit.h"
#include "support/dtype.h"
#include "support/format.h"

#include <algorithm>
#include <map>
#include <optional>
#include <stdexcept>

namespace memledger {

const char* shardingName(Sharding s)
{
    switch (s) {
    case Sharding::Fsdp:
        return "fsdp";
    case Sharding::Zero2:
        return "zero2";
    case Sharding::Zero1:
        return "zero1";
    case Sharding::Ddp:
        return "ddp";
    case Sharding::DsZero1:
        return "ds-zero1";
    case Sharding::DsZero2:
        return "ds-zero2";
    case Sharding::DsZero3:
        return "ds-zero3";
    }
    return "?";
}

namespace {
constexpr Sharding kShardings[] = {Sharding::Fsdp, Sharding::Zero2, Sharding::Zero1, Sharding::Ddp, Sharding::DsZero1,
    Sharding::DsZero2, Sharding::DsZero3};
}

std::optional<Sharding> shardingFromName(const std::string& name)
{
    for (auto s : kShardings)
        if (name == shardingName(s))
            return s;
    return std::nullopt;
}

std::string shardingNames()
{
    std::string out;
    for (auto s : kShardings)
        out += (out.empty() ? "" : ", ") + std::string(shardingName(s));
    return out;
}

std::string ParallelPlan::text() const
{
    std::string out = std::string(shardingName(shard)) + " on " + std::to_string(gpus) + (gpus == 1 ? " GPU" : " GPUs");
    if (deepSpeed()) {
        out += ", " + paramDtype() + " model, " + master_dtype + " master partition";
    } else if (sharded()) {
        out += ", " + paramDtype() + " parameters";
        if (reduceDtype() != paramDtype())
            out += ", " + reduceDtype() + " reduce-scatter";
        out += ", " + master_dtype + " master";
        if (shard == Sharding::Fsdp && !reshard_after_forward)
            out += ", no reshard after forward";
    } else {
        out += ", " + master_dtype;
        if (!autocast.empty())
            out += " under " + autocast + " autocast";
    }
    if (grad_accum > 1)
        out += ", " + std::to_string(grad_accum) + " micro-batches accumulated";
    if (offload == "params")
        out += ", parameters, gradients and optimizer state offloaded to the host";
    if (offload == "optimizer")
        out += ", optimizer offloaded to the host";
    if (backend == "gloo")
        out += ", gloo (a CPU job's collectives)";
    return out;
}

std::vector<std::string> defaultShardUnits(const std::vector<LayerStats>& layers)
{
    auto units = largestRepeatedBlocks(layers);
    units.push_back("");
    return units;
}


std::vector<std::string> unitsBelowRoot(const ParallelPlan& plan, const std::vector<LayerStats>& layers)
{
    auto units = plan.units.empty() ? defaultShardUnits(layers) : plan.units;
    units.erase(std::remove(units.begin(), units.end(), std::string()), units.end());
    return units;
}

std::vector<std::string> inputCastUnits(const ParallelPlan& plan, const std::vector<LayerStats>& layers)
{
    if (!isFsdpRecordPrecision(plan.recordedPrecision()))
        return {};
    return unitsBelowRoot(plan, layers);
}

std::vector<std::string> shardUnitsMatching(const std::vector<LayerStats>& layers, const std::string& pattern)
{
    auto units = modulesMatching(layers, pattern, "--shard-units");
    units.push_back("");
    return units;
}

void checkPlanOffload(const ParallelPlan& plan)
{
    if (!plan.offload.empty() && plan.offload != "params" && plan.offload != "optimizer")
        throw std::invalid_argument("--offload '" + plan.offload + "': not none, params or optimizer");
    if (plan.offload == "params" && !plan.sharded() && plan.shard != Sharding::DsZero3)
        throw std::invalid_argument(std::string("--offload params is FSDP2's CPUOffloadPolicy (--shard fsdp or zero2) or "
                                                "DeepSpeed's offload_param (ds-zero3), not ")
            + shardingName(plan.shard) + "'s");
    if (plan.offload == "optimizer" && !plan.deepSpeed())
        throw std::invalid_argument(std::string("--offload optimizer is DeepSpeed's ZeRO-Offload (--shard ds-zero1, "
                                                "ds-zero2 or ds-zero3), not ")
            + shardingName(plan.shard) + "'s: FSDP2's CPUOffloadPolicy moves the parameters, gradients and optimizer "
                                         "state (--offload params)");
}

void checkPlan(const ParallelPlan& plan, const RunInfo& run)
{
    if (run.mode != RunMode::Train)
        throw std::invalid_argument("--gpus and --shard lay out a training step: record with --mode train");
    if (plan.gpus < 1)
        throw std::invalid_argument("--gpus must be at least 1");
    for (const auto* d : {&plan.master_dtype, &plan.param_dtype, &plan.reduce_dtype})
        if (!d->empty() && !isFloatingDtype(*d))
            throw std::invalid_argument("not a floating-point dtype: '" + *d + "'");
    if (!takesParamDtype(plan.shard) && plan.paramDtype() != plan.master_dtype)
        throw std::invalid_argument(std::string(shardingName(plan.shard))
            + " has no param_dtype: its parameters compute in their own dtype (use --dtype, or fsdp)");
    if (plan.deepSpeed() && plan.reduceDtype() != plan.master_dtype && plan.reduceDtype() != plan.paramDtype())
        throw std::invalid_argument(std::string("--reduce-dtype is FSDP's: ") + shardingName(plan.shard)
            + " reduces gradients in the model's dtype");
    checkPlanOffload(plan);
    if (plan.deepSpeed()) {
        const auto& d = plan.deepspeed;
        if (d.reduce_bucket_size < 1 || d.prefetch_bucket_size < 0 || d.max_live_parameters < 0
            || d.max_reuse_distance < 0 || d.param_persistence_threshold < 0)
            throw std::invalid_argument("DeepSpeed's bucket sizes and thresholds must not be negative "
                                        "(reduce_bucket_size at least 1)");
        if (!d.grad_accum_dtype.empty() && !isFloatingDtype(d.grad_accum_dtype))
            throw std::invalid_argument("not a floating-point dtype: '" + d.grad_accum_dtype + "' (grad_accum_dtype)");
    }
    if (plan.gpus_per_node < 1)
        throw std::invalid_argument("--gpus-per-node must be at least 1");
    if (plan.paramDtype() != run.dtype)
        throw std::invalid_argument("the step was recorded in " + run.dtype + ", the plan computes in "
            + plan.paramDtype() + ": record it in " + plan.paramDtype());
    if (plan.deepSpeed() && !run.autocast.empty())
        throw std::invalid_argument(std::string(shardingName(plan.shard)) + " computes in the model's dtype (the engine "
            "casts it): record the step without --autocast, in --param-dtype");
    if (!plan.sharded() && !plan.deepSpeed() && plan.autocast != run.autocast)
        throw std::invalid_argument("the step was recorded " + (run.autocast.empty() ? std::string("without autocast") : "under " + run.autocast + " autocast")
            + ", the plan computes " + (plan.autocast.empty() ? std::string("without it") : "under " + plan.autocast + " autocast")
            + ": record it so (--autocast)");
}

namespace {

} // namespace

HookPoints hookPoints(const Trace& step, const std::vector<OpCall>& ops, const std::vector<Phase>& phases,
    const std::vector<MicroSteps::Shown>& microSteps, const std::vector<std::string>& units)
{
    HookPoints out;
    for (std::size_t m = 0; m < microSteps.size(); ++m) {
        const auto hooks = findHooks(
            step, ops, {phases.at(microSteps[m].forward_phase), phases.at(microSteps[m].backward_phase)}, units);
        for (const auto& u : hooks.forward_order) {
            out.points.push_back({hooks.pre_forward.at(u), 2, u, m});
            out.points.push_back({hooks.post_forward.at(u), 0, u, m});
        }
        for (const auto& [u, pos] : hooks.pre_backward)
            out.points.push_back({pos, 3, u, m});
        for (const auto& [u, pos] : hooks.post_backward)
            out.points.push_back({pos, u.empty() ? 4 : 1, u, m});
        out.post_forward_orders.push_back(hooks.post_forward_order);
    }
    std::stable_sort(out.points.begin(), out.points.end(), [](const HookPoint& a, const HookPoint& b) {
        if (a.micro != b.micro)
            return a.micro < b.micro;
        return a.pos != b.pos ? a.pos < b.pos : a.order < b.order;
    });
    return out;
}

ResidentBuffers residentBuffers(const ModelInfo& model, std::int64_t elementBytes)
{
    ResidentBuffers out;
    for (const auto& t : model.tensors)
        if (t.is_buffer) {
            auto bytes = isFloatingDtype(t.dtype) ? numelOf(t.shape) * elementBytes : t.bytes;
            out.bytes += bytes;
            if (bytes > 0)
                out.blocks.push_back(bytes);
        }
    return out;
}

const std::string& unitOf(const std::string& path, const std::vector<std::string>& units)
{
    static const std::string root;
    const std::string* best = &root;
    for (const auto& u : units)
        if (isInsideModule(path, u) && (best == &root || u.size() > best->size()))
            best = &u;
    return *best;
}

std::vector<ParamShard> shardParameters(const ModelInfo& model, const std::vector<std::string>& units, int gpus,
    bool shard)
{
    std::vector<ParamShard> out;
    for (const auto& t : model.tensors) {
        if (t.is_buffer || !isFloatingDtype(t.dtype))
            continue;
        ParamShard p;
        p.name = t.name;
        auto dot = t.name.rfind('.');
        p.unit = unitOf(dot == std::string::npos ? std::string() : t.name.substr(0, dot), units);
        p.numel = numelOf(t.shape);
        p.trainable = t.requires_grad;
        const std::int64_t rows = t.shape.empty() ? 1 : std::max<std::int64_t>(t.shape[0], 0);
        const std::int64_t rest = rows > 0 ? p.numel / rows : 0;
        p.rows = rows;
        if (!shard || gpus == 1) {
            p.padded = p.local = p.numel;
        } else {
            const std::int64_t perRank = (rows + gpus - 1) / gpus;
            p.padded = perRank * rest;
            p.local = std::min(perRank, rows) * rest;
        }
        out.push_back(p);
    }
    return out;
}

namespace {

// FSDP2 pads dim 0 to ceil(rows / N) rows on every rank, so a parameter with fewer rows than GPUs (a mixture of
// experts' [experts, ...] weights) costs rank 0 a whole row and every all-gather N rows: said, with what it costs
// over an even split. "" when no parameter is so.
std::string fewRowsNote(const std::vector<ParamShard>& params, int n, int md)
{
    std::int64_t fullNumel = 0, count = 0, numel = 0, over = 0;
    const ParamShard* largest = nullptr;
    for (const auto& p : params) {
        fullNumel += p.numel;
        if (p.rows > 0 && p.rows < n) {
            ++count;
            numel += p.numel;
            over += p.local - p.numel / n;
            if (!largest || p.numel > largest->numel)
                largest = &p;
        }
    }
    if (!largest || over * 10 < fullNumel / n) // under a tenth more than an even split (a bias of 4): no word
        return {};
    return std::to_string(count) + " parameters (" + formatBytes(numel * md) + ", "
        + std::to_string(static_cast<int>(100.0 * static_cast<double>(numel) / static_cast<double>(fullNumel) + 0.5))
        + "% of the model's) have fewer rows in dim 0 than the " + std::to_string(n) + " GPUs (the largest, "
        + largest->name + ", " + std::to_string(largest->rows) + "): FSDP2 shards dim 0 with every rank's shard "
        + "padded to whole rows, so rank 0 holds one row of each, " + formatBytes(over * md)
        + " more than an even split, and each all-gather of them is " + std::to_string(n) + " rows wide. FSDP2's "
        + "shard_placement_fn (sharding them on another dimension) and expert parallelism avoid it; memledger "
        + "models neither";
}

} // namespace

Hooks findHooks(const Trace& t, const std::vector<OpCall>& ops, const std::vector<Phase>& phases,
    const std::vector<std::string>& units)
{
    Hooks h;
    // The unit of each module path, by its string id: a step has many ops and few paths.
    std::vector<const std::string*> unitById(t.strings.size(), nullptr);
    auto unitAt = [&](std::uint32_t id) -> const std::string& {
        auto& u = unitById.at(id);
        if (!u)
            u = &unitOf(t.strings.at(id), units);
        return *u;
    };
    std::optional<std::size_t> firstModelBackward; // the root's pre-backward: its output's gradient is ready
    const Phase* forward = findPhase(phases, "forward");
    const Phase* backward = findPhase(phases, "backward");
    if (!forward || !backward)
        throw std::invalid_argument("the step has no forward or backward phase to lay the schedule over");
    for (const auto& op : ops) {
        if (op.first_event < forward->first_event || op.first_event >= backward->end_event)
            continue; // another micro-step's (gradient accumulation), or the optimizer's
        const auto& module = t.strings.at(op.module);
        if (op.backward && !module.empty() && !firstModelBackward)
            firstModelBackward = op.first_event;
        const auto& unit = unitAt(op.module);
        if (unit.empty())
            continue; // the root's hooks are the phases'
        if (op.backward) {
            if (!h.pre_backward.count(unit))
                h.pre_backward[unit] = op.first_event;
            // A node that allocates and frees nothing (a residual's AddBackward0) has no place of its own: it stands
            // at the next event, which a checkpointed unit's recomputation, inserted before the next unit's first
            // node, would put after that recomputation. The unit's post-backward follows its last node that did.
            if (op.first_event < op.end_event || !h.post_backward.count(unit))
                h.post_backward[unit] = op.end_event;
        } else if (op.first_event >= forward->first_event && op.first_event < forward->end_event) {
            if (!h.pre_forward.count(unit)) {
                h.pre_forward[unit] = op.first_event;
                h.forward_order.push_back(unit);
            }
            h.post_forward[unit] = op.end_event;
        }
    }
    // A checkpointed unit's recomputation (whatif/checkpoint.h: its forward's events copied into the backward, outside
    // any op) runs when its first backward node unpacks a saved tensor, after the unit's pre-backward hook: the unit's
    // backward begins with it.
    {
        std::vector<bool> inOp(t.size(), false);
        for (const auto& op : ops)
            for (auto i = op.first_event; i < op.end_event && i < t.size(); ++i)
                inOp[i] = true;
        for (auto i = backward->first_event; i < backward->end_event && i < t.size(); ++i) {
            if (inOp[i] || t.action[i] != Action::Alloc)
                continue;
            const auto& unit = unitAt(t.where[i]);
            if (unit.empty())
                continue;
            auto it = h.pre_backward.find(unit);
            if (it != h.pre_backward.end() && i < it->second)
                it->second = i;
        }
    }
    // A unit holding another (a block wrapped with its MLP wrapped inside) runs its hooks around the inner unit's:
    // its forward and backward begin no later and end no earlier than those of the units inside it, whose ops
    // are the inner unit's own.
    auto widen = [&](std::map<std::string, std::size_t>& at, bool earliest) {
        auto copy = at;
        for (auto& [outer, pos] : at)
            for (const auto& [inner, innerPos] : copy)
                if (inner != outer && isInsideModule(inner, outer))
                    pos = earliest ? std::min(pos, innerPos) : std::max(pos, innerPos);
    };
    widen(h.pre_forward, true);
    widen(h.post_forward, false);
    widen(h.pre_backward, true);
    widen(h.post_backward, false);
    std::stable_sort(h.forward_order.begin(), h.forward_order.end(),
        [&](const std::string& a, const std::string& b) { return h.pre_forward.at(a) < h.pre_forward.at(b); });
    // The order FSDP2 records post-forwards in (comm_ctx.post_forward_order), which its backward prefetch walks:
    // an inner unit's forward ends before its outer one's.
    h.post_forward_order = h.forward_order;
    std::stable_sort(h.post_forward_order.begin(), h.post_forward_order.end(), [&](const std::string& a, const std::string& b) {
        const auto ea = h.post_forward.at(a), eb = h.post_forward.at(b);
        return ea != eb ? ea < eb : isInsideModule(a, b) && a != b;
    });
    h.pre_forward[""] = forward->first_event;
    h.post_forward[""] = forward->end_event;
    h.pre_backward[""] = firstModelBackward.value_or(backward->first_event);
    h.post_backward[""] = backward->end_event;
    h.forward_order.insert(h.forward_order.begin(), std::string());
    h.post_forward_order.push_back(std::string());
    return h;
}

namespace {

std::vector<std::int64_t> ddpBuckets(const std::vector<ParamShard>& params, int width, const ParallelPlan& plan)
{
    // DDP fills its buckets in the reverse order of the parameters (the order their gradients are ready in).
    std::vector<std::int64_t> blocks;
    std::int64_t current = 0;
    std::int64_t cap = plan.first_bucket_bytes;
    for (auto it = params.rbegin(); it != params.rend(); ++it) {
        if (!it->trainable) // DDP buckets only the parameters that require a gradient
            continue;
        const auto bytes = it->numel * width;
        current += bytes;
        if (current >= cap) {
            blocks.push_back(current);
            current = 0;
            cap = plan.bucket_bytes;
        }
    }
    if (current > 0)
        blocks.push_back(current);
    return blocks;
}

} // namespace

std::int64_t moveOptimizerScratchToHost(TraceEdit& edit, const Trace& step, const Phase& optimizer)
{
    std::vector<char> toHost(step.size(), 0);
    std::int64_t live = 0, peak = 0;
    for (std::size_t i = optimizer.first_event; i < optimizer.end_event && i < step.size(); ++i) {
        const auto f = step.partner[i];
        if (step.action[i] == Action::Alloc) {
            if (edit.dropped(i) || f == kNoPartner || static_cast<std::size_t>(f) >= optimizer.end_event)
                continue; // what outlives the step is not the optimizer's scratch
            toHost[i] = 1;
            live += edit.bytes(i);
            peak = std::max(peak, live);
        } else if (step.action[i] == Action::Free && f != kNoPartner && toHost[static_cast<std::size_t>(f)]) {
            live -= edit.bytes(static_cast<std::size_t>(f));
        }
    }
    for (std::size_t i = 0; i < toHost.size(); ++i)
        if (toHost[i])
            edit.drop(i);
    return peak;
}

std::string fsdpPaddingNote(const ModelInfo& model, int gpus, const std::string& masterDtype)
{
    if (gpus <= 1)
        return {};
    return fewRowsNote(shardParameters(model, {""}, gpus, true), gpus, dtypeSize(masterDtype));
}

RankLayout layOutRank(const ModelInfo& model, const std::vector<LayerStats>& layers, const Trace& recordedStep,
    const std::vector<OpCall>& recordedOps, const std::vector<Phase>& recordedPhases, const RunInfo& run,
    std::int64_t optimizerStateBytes, const ParallelPlan& plan, bool withOps)
{
    checkPlan(plan, run);
    // Gradient accumulation: the step laid over as micro-steps first (whatif/accumulation.h), the schedule over each.
    std::optional<MicroSteps> micro;
    if (plan.grad_accum > 1)
        micro = accumulateMicroSteps(recordedStep, recordedOps, recordedPhases, plan.grad_accum);
    const Trace& step = micro ? micro->trace : recordedStep;
    const std::vector<OpCall>& ops = micro ? micro->ops : recordedOps;
    const std::vector<Phase>& phases = micro ? micro->phases : recordedPhases;
    std::vector<MicroSteps::Shown> microSteps;
    if (micro) {
        microSteps = micro->shown;
    } else {
        const Phase* f = findPhase(phases, "forward");
        const Phase* b = findPhase(phases, "backward");
        if (!f || !b)
            throw std::invalid_argument("the step has no forward or backward phase to lay the schedule over");
        microSteps.push_back({static_cast<std::size_t>(f - phases.data()), static_cast<std::size_t>(b - phases.data())});
    }
    if (plan.deepSpeed()) {
        auto out = layOutDeepSpeedRank(model, step, ops, phases, microSteps, run, optimizerStateBytes, plan);
        if (micro)
            out.notes.push_back(accumulationNote(*micro)
                + (plan.shard == Sharding::DsZero1 && plan.offload.empty()
                        ? std::string()
                        : "; DeepSpeed reduces each micro-step's gradients into the rank's partition as they are made"));
        return out;
    }
    const bool accumulating = plan.grad_accum > 1;
    const int n = plan.gpus;
    const bool fsdp = plan.sharded();
    const int md = dtypeSize(plan.master_dtype), pd = dtypeSize(plan.paramDtype()), rd = dtypeSize(plan.reduceDtype());
    const bool gloo = plan.backend == "gloo";
    const int cd = dtypeSize(run.dtype);

    RankLayout out;
    auto& info = out.info;
    info.gpus = n;
    info.shard = shardingName(plan.shard);
    info.master_dtype = plan.master_dtype;
    info.param_dtype = plan.paramDtype();
    info.reduce_dtype = plan.reduceDtype();
    info.reshard_after_forward = plan.shard == Sharding::Fsdp && plan.reshard_after_forward;
    info.root_reshard_after_forward = info.reshard_after_forward && plan.root_reshard_after_forward;
    info.backend = plan.backend;
    info.units = fsdp ? (plan.units.empty() ? defaultShardUnits(layers) : plan.units) : std::vector<std::string> {};
    if (fsdp && std::find(info.units.begin(), info.units.end(), std::string()) == info.units.end())
        info.units.push_back("");

    const auto params = shardParameters(model, fsdp ? info.units : std::vector<std::string> {""}, n, fsdp);
    if (params.empty())
        throw std::invalid_argument("the model lists no parameters to lay out across ranks");
    std::int64_t fullNumel = 0, trainableNumel = 0;
    for (const auto& p : params) {
        fullNumel += p.numel;
        trainableNumel += p.trainable ? p.numel : 0;
    }
    info.full_parameter_bytes = fullNumel * md;
    if (fsdp)
        if (auto note = fewRowsNote(params, n, md); !note.empty())
            out.notes.push_back(note);

    // Resident before the step: parameters (shards), buffers, optimizer state.
    const auto buffers = residentBuffers(model, md);
    // CPU offload (FSDP2's CPUOffloadPolicy): the parameter shards, gradient shards, optimizer state and the
    // optimizer's step are the host's; the device keeps the buffers, the inputs and the step's unsharded tensors.
    const bool offload = fsdp && plan.offload == "params";
    info.offload = offload ? plan.offload : std::string();
    info.gpus_per_node = std::min(plan.gpus_per_node, n); // the ranks that share this rank's host
    std::int64_t hostParameters = 0, hostGradients = 0, hostOptimizerTemporaries = 0;
    for (const auto& p : params) {
        auto bytes = (fsdp ? p.padded : p.numel) * md;
        if (offload) {
            hostParameters += bytes;
            continue;
        }
        out.parameter_bytes += bytes;
        if (bytes > 0)
            info.resident_blocks.push_back(bytes);
    }
    info.resident_blocks.insert(info.resident_blocks.end(), buffers.blocks.begin(), buffers.blocks.end());
    out.weight_bytes = out.parameter_bytes + buffers.bytes;
    // The optimizer keeps as many tensors per parameter as recorded (momentum one, Adam two), over the elements
    // it steps: the local shards (fsdp, zero2), the parameters the rank owns (zero1), or all of them (ddp); of the
    // parameters that take gradients only (a frozen one has no state).
    const double perElement = trainableNumel > 0
        ? static_cast<double>(optimizerStateBytes) / static_cast<double>(trainableNumel * cd)
        : 0.0;
    const int statesPerParameter = static_cast<int>(perElement + 0.5);
    // ZeRO-1 as torch.distributed.optim.ZeroRedundancyOptimizer partitions the parameters it is given (those that
    // take gradients, as a fine-tune's optimizer is given them): whole parameters, largest first, each to the rank
    // with the fewest elements so far (the first on a tie).
    std::vector<char> owned(params.size(), 1);
    if (plan.shard == Sharding::Zero1 && n > 1) {
        std::vector<std::size_t> order;
        for (std::size_t k = 0; k < params.size(); ++k)
            if (params[k].trainable)
                order.push_back(k);
        std::stable_sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return params[a].numel > params[b].numel; });
        std::vector<std::int64_t> load(static_cast<std::size_t>(n), 0);
        for (auto k : order) {
            auto least = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
            load[least] += params[k].numel;
            owned[k] = least == static_cast<std::size_t>(info.rank);
        }
    }
    std::int64_t optimizerNumel = 0;
    for (std::size_t k = 0; k < params.size(); ++k)
        if (owned[k])
            optimizerNumel += params[k].stepped();
    out.optimizer_state_bytes = static_cast<std::int64_t>(perElement * static_cast<double>(optimizerNumel * md) + 0.5);
    const std::int64_t hostOptimizerState = offload ? out.optimizer_state_bytes : 0;
    if (offload)
        out.optimizer_state_bytes = 0;
    for (int s = 0; s < (offload ? 0 : statesPerParameter); ++s)
        for (std::size_t k = 0; k < params.size(); ++k)
            if (owned[k] && params[k].stepped() > 0)
                info.resident_blocks.push_back(params[k].stepped() * md);

    TraceEdit edit(step);
    const Phase* optimizer = findPhase(phases, "optimizer");

    // The recorded gradients, by the unit of the parameter they belong to.
    std::map<std::string, std::vector<std::size_t>> gradientsOf;
    for (std::size_t i = 0; i < step.size(); ++i)
        if (step.action[i] == Action::Alloc && step.ledger[i] == Ledger::Gradients) {
            gradientsOf[fsdp ? unitOf(step.strings.at(step.where[i]), info.units) : std::string()].push_back(i);
        }

    // Where the backward op that made event i ends (its outputs' last owner, AccumulateGrad, is done by then).
    // The op call an event lies in (the last that began at or before it); null before the first.
    const OpEnds opEnds(ops, step.size());
    auto opAt = [&](std::size_t i) { return opEnds.opAt(i); };
    auto endOfOpAt = [&](std::size_t i) { return opEnds.endOfOpAt(i); };

    if (!fsdp) {
        // DDP's buckets, made when the model is wrapped: alive through the step.
        for (auto b : ddpBuckets(params, md, plan))
            edit.addAlloc(0, b, Ledger::Communication, "", "ddp::bucket");
        // With gradient_as_bucket_view each .grad is a view of its bucket: autograd still makes the gradient, and
        // AccumulateGrad copies it into the bucket and frees it when the op that made it is done. Accumulating, the
        // micro-steps under no_sync keep the gradient autograd made; the last micro-step's backward, whose hooks
        // run, copies it into the bucket when the gradient added into it is ready.
        if (plan.gradient_as_bucket_view) {
            std::map<std::size_t, std::size_t> readyAt;
            if (micro)
                for (auto [kept, last] : micro->accumulated)
                    readyAt[kept] = last;
            for (auto& [unit, events] : gradientsOf)
                for (auto e : events) {
                    auto ready = readyAt.find(e);
                    edit.addFree(endOfOpAt(ready != readyAt.end() ? ready->second : e), e);
                }
        }
        out.gradient_bytes = plan.gradient_as_bucket_view ? 0 : trainableNumel * md;
    } else {
        // FSDP2's root casts floating-point inputs to param_dtype (MixedPrecisionPolicy.cast_forward_inputs): the
        // step ran on the cast; the caller's own tensor, in its dtype, is held through the step as well.
        if (plan.paramDtype() != plan.master_dtype)
            for (std::size_t i = 0; i < run.input_shapes.size(); ++i) {
                const auto given = inputTypeAt(run.input_types, i).dtype;
                if (isFloatingDtype(given) && given != plan.paramDtype())
                    edit.addAlloc(0, numelOf(run.input_shapes[i]) * dtypeSize(given), Ledger::Inputs, "", "fsdp::caller_input");
            }
        // FSDP2 gives each unsharded parameter grad_dtype = reduce_dtype: a gradient no wider than the compute dtype
        // is cast to it by AccumulateGrad as autograd makes it (the computed one freed when its op is done); a wider
        // one is left in the compute dtype until the reduce-scatter's copy-in (_set_unsharded_grad_dtypes).
        // Placed just before the gradient, after the hooks' events at that position (a unit's pre-backward).
        // A tied weight's gradient comes in parts (the head's and the embedding's) that autograd sums (aten::add)
        // before accumulating: each part is cast as the node that made it returns, so the parts held until the sum
        // are in reduce_dtype too. They are the blocks of the gradient's size freed by the node that sums them.
        // Accumulating, the micro-steps without synchronization set grad_dtype whatever its width, so the first one's
        // gradients are cast as autograd makes them (_set_unsharded_grad_dtypes(defer_upcast=False)); the later
        // ones' are added into them in place in the dtype they were computed in.
        if (plan.reduceDtype() != plan.paramDtype() && (rd <= pd || accumulating)) {
            auto cast = [&](std::size_t e) {
                auto computed = edit.addAlloc(
                    e, step.bytes[e], Ledger::Temporaries, step.strings.at(step.where[e]), "autograd::grad_before_cast");
                edit.order(computed, 1, 0);
                edit.addFree(endOfOpAt(e), computed);
                edit.resize(e, step.bytes[e] / pd * rd);
            };
            const Phase* backward = findPhase(phases, "backward");
            for (auto& [unit, events] : gradientsOf)
                for (auto g : events) {
                    cast(g);
                    if (!backward || step.strings.at(step.inner_op[g]) != "aten::add")
                        continue;
                    const OpCall* node = opAt(g);
                    if (!node)
                        continue;
                    for (std::size_t a = backward->first_event; a < g; ++a) {
                        const auto f = step.partner[a];
                        if (step.action[a] == Action::Alloc && step.ledger[a] != Ledger::Gradients
                            && step.bytes[a] == step.bytes[g] && f >= 0 && static_cast<std::size_t>(f) > g
                            && static_cast<std::uint32_t>(f) < node->end_event)
                            cast(a);
                    }
                }
        }
        std::map<std::string, std::vector<const ParamShard*>> paramsOf;
        for (const auto& p : params)
            paramsOf[p.unit].push_back(&p);
        std::int64_t shardedGradients = 0;
        // A unit's padded shard elements: all its parameters (gathered), or those that take gradients (reduced).
        auto paddedOf = [&](const std::string& u, bool trainableOnly = false) {
            std::int64_t s = 0;
            for (const auto* p : paramsOf[u])
                if (p->trainable || !trainableOnly)
                    s += p->padded;
            return s;
        };
        // FSDP2's schedule (torch/distributed/fsdp/_fully_shard/, PyTorch 2.15), per unit:
        // - issue: each shard cast to param_dtype (when it differs), the all-gather output of N padded shards;
        //   the casts freed when the all-gather returns;
        // - copy-out: one unsharded tensor per parameter (N padded shards); in the forward the all-gather output
        //   is kept until the next unit's copy-out (the last until the root's forward ends), in the backward
        //   freed at once;
        // - backward: a unit's pre-backward copies out its own and issues the next unit's all-gather (prefetch),
        //   whose output waits, not copied out, until that unit's pre-backward;
        // - post-backward: the unsharded parameters freed, the previous unit's reduce-scatter input freed, the
        //   gradients copied into this unit's reduce-scatter input and freed, the reduce-scatter output made
        //   (and cast to the master dtype where reduce_dtype differs), the input kept until the next unit's
        //   post-backward (the last until the backward ends); only the parameters that take gradients are reduced;
        // - the backward's end (the root's final callback): the post-backward of every unit whose backward did not
        //   run (all frozen, or not reached by the loss), which reshards what is still gathered.
        // - one rank (FSDP2's world_size 1): no all-gather; the copy-out makes each unsharded parameter from its
        //   shard (cast to param_dtype first where it differs), so there is no flat output to keep or prefetch.
        struct UnitState {
            std::vector<TraceEdit::Handle> params; // unsharded, while gathered
            std::optional<TraceEdit::Handle> issued; // an all-gather output not yet copied out
            bool requested = false; // one rank: unshard asked for, nothing gathered
        };
        std::map<std::string, UnitState> state;
        std::optional<TraceEdit::Handle> forwardBuffer, pendingReduceInput;
        auto issue = [&](const std::string& u, std::size_t pos) {
            auto& st = state[u];
            if (!st.params.empty() || st.issued || st.requested || paramsOf[u].empty())
                return;
            if (n == 1) {
                st.requested = true;
                return;
            }
            std::vector<TraceEdit::Handle> casts;
            if (offload) // each shard copied from the host (all_gather_inputs), then cast where param_dtype differs
                for (const auto* p : paramsOf[u]) {
                    auto copied = edit.addAlloc(pos, p->padded * md, Ledger::Communication, u, "fsdp::h2d_copy");
                    if (pd == md) {
                        casts.push_back(copied);
                        continue;
                    }
                    casts.push_back(edit.addAlloc(pos, p->padded * pd, Ledger::Communication, u, "fsdp::all_gather_input"));
                    edit.addFree(pos, copied);
                }
            else if (pd != md)
                for (const auto* p : paramsOf[u])
                    casts.push_back(edit.addAlloc(pos, p->padded * pd, Ledger::Communication, u, "fsdp::all_gather_input"));
            st.issued = edit.addAlloc(pos, paddedOf(u) * n * pd, Ledger::Communication, u, "fsdp::all_gather");
            if (gloo) // c10d::_allgather_base_ on gloo: a flat buffer of the output's size, freed before it returns
                edit.addFree(pos, edit.addAlloc(pos, paddedOf(u) * n * pd, Ledger::Communication, u, "gloo::all_gather"));
            for (auto c : casts)
                edit.addFree(pos, c);
        };
        auto copyOut = [&](const std::string& u, std::size_t pos, bool forward) {
            auto& st = state[u];
            if (st.requested) { // one rank: a loop over the parameters whose local holds the last cast
                std::optional<TraceEdit::Handle> cast;
                for (const auto* p : paramsOf[u]) {
                    auto previous = cast;
                    std::optional<TraceEdit::Handle> copied;
                    if (offload) // the shard copied from the host first
                        copied = edit.addAlloc(pos, p->padded * md, Ledger::Communication, u, "fsdp::h2d_copy");
                    if (pd != md)
                        cast = edit.addAlloc(pos, p->padded * pd, Ledger::Communication, u, "fsdp::all_gather_input");
                    if (previous) // set only where a cast is made
                        edit.addFree(pos, *previous);
                    st.params.push_back(edit.addAlloc(pos, p->padded * pd, Ledger::GatheredParameters, u, "fsdp::unshard"));
                    if (copied)
                        edit.addFree(pos, *copied);
                }
                if (cast)
                    edit.addFree(pos, *cast);
                st.requested = false;
                return;
            }
            if (!st.params.empty() || !st.issued)
                return;
            if (forward && forwardBuffer) {
                edit.addFree(pos, *forwardBuffer);
                forwardBuffer.reset();
            }
            for (const auto* p : paramsOf[u])
                st.params.push_back(edit.addAlloc(pos, p->padded * n * pd, Ledger::GatheredParameters, u, "fsdp::unshard"));
            if (forward)
                forwardBuffer = st.issued;
            else
                edit.addFree(pos, *st.issued);
            st.issued.reset();
        };
        auto reshard = [&](const std::string& u, std::size_t pos) {
            auto& st = state[u];
            for (auto h : st.params)
                edit.addFree(pos, h);
            st.params.clear();
        };
        auto postBackward = [&](const std::string& u, std::size_t pos) {
            reshard(u, pos);
            if (pendingReduceInput) {
                edit.addFree(pos, *pendingReduceInput);
                pendingReduceInput.reset();
            }
            const auto shardNumel = paddedOf(u, true);
            if (shardNumel == 0) // no gradients to reduce (a unit with none, or all of its parameters frozen)
                return;
            auto input = edit.addAlloc(pos, shardNumel * n * rd, Ledger::Communication, u, "fsdp::reduce_scatter_input");
            for (auto g : gradientsOf[u])
                if (g < pos)
                    edit.addFree(pos, g);
            auto output = edit.addAlloc(pos, shardNumel * rd, rd == md ? Ledger::Gradients : Ledger::Communication, u,
                "fsdp::reduce_scatter");
            if (gloo && n > 1) // c10d::_reduce_scatter_base_ on gloo clones its input; FSDP waits for it in the same
                               // hook (one rank copies its input into the output and calls no collective)
                edit.addFree(pos, edit.addAlloc(pos, shardNumel * n * rd, Ledger::Communication, u, "gloo::reduce_scatter"));
            auto sharded = output;
            if (rd != md) {
                sharded = edit.addAlloc(pos, shardNumel * md, Ledger::Gradients, u, "fsdp::sharded_grad");
                edit.addFree(pos, output);
            }
            pendingReduceInput = input;
            if (offload) { // copied to the host's gradient shard and freed on the device
                edit.addFree(pos, sharded);
                hostGradients += shardNumel * md;
            } else {
                shardedGradients += shardNumel * md;
            }
        };
        // Each micro-step's hooks (one without gradient accumulation); only the last one's backward reduces.
        const auto hooks = hookPoints(step, ops, phases, microSteps, info.units);
        // The unit FSDP2 prefetches in a unit's pre-backward: the one whose forward ended just before this one's
        // (the root's: the last block; the first block's: none; a block's with its MLP wrapped inside: that MLP).
        std::map<std::string, std::string> nextInBackward;
        for (const auto& order : hooks.post_forward_orders)
            for (std::size_t k = 1; k < order.size(); ++k)
                nextInBackward[order[k]] = order[k - 1];
        for (const auto& pt : hooks.points) {
            const auto& u = pt.unit;
            const bool sync = pt.micro + 1 == microSteps.size(); // the gradients are reduced in this backward
            if (!sync && (pt.order == 1 || pt.order == 4)) {
                // Without synchronization (set_requires_gradient_sync(False)): the post-backward reshards and keeps
                // the unsharded gradients; the backward's end reshards what is still gathered.
                if (pt.order == 1)
                    reshard(u, pt.pos);
                else
                    for (auto& [other, st] : state)
                        if (!st.params.empty())
                            reshard(other, pt.pos);
                continue;
            }
            switch (pt.order) {
            case 2:
                issue(u, pt.pos);
                copyOut(u, pt.pos, true);
                break;
            case 0:
                if (u.empty()) { // the root's forward ends: the last all-gather output goes
                    if (forwardBuffer) {
                        edit.addFree(pt.pos, *forwardBuffer);
                        forwardBuffer.reset();
                    }
                    if (info.root_reshard_after_forward)
                        reshard(u, pt.pos);
                } else if (info.reshard_after_forward) {
                    reshard(u, pt.pos);
                }
                break;
            case 3:
                issue(u, pt.pos);
                copyOut(u, pt.pos, false);
                if (auto next = nextInBackward.find(u); next != nextInBackward.end())
                    issue(next->second, pt.pos);
                break;
            case 1:
                postBackward(u, pt.pos);
                break;
            default: // the backward's end: the root's post-backward, the other units' still gathered resharded,
                     // then the last reduce-scatter input freed
                postBackward(u, pt.pos);
                for (auto& [other, st] : state)
                    if (!st.params.empty())
                        reshard(other, pt.pos);
                if (pendingReduceInput) {
                    edit.addFree(pt.pos, *pendingReduceInput);
                    pendingReduceInput.reset();
                }
                break;
            }
        }
        out.gradient_bytes = shardedGradients;
    }

    // The optimizer's temporaries are those of the elements it steps: the recorded ones (full parameters at the
    // run's dtype) scaled to the rank's shard at the master dtype, matched to their parameter by size in
    // parameter order (of those that take gradients).
    if (optimizer && (fsdp || plan.shard == Sharding::Zero1 || md != cd)) {
        std::size_t next = 0;
        for (std::size_t i = optimizer->first_event; i < optimizer->end_event && i < step.size(); ++i) {
            if (step.action[i] != Action::Alloc || edit.dropped(i))
                continue;
            const auto numel = cd > 0 ? step.bytes[i] / cd : 0;
            auto matches = [&](std::size_t k) { return params[k].trainable && params[k].numel == numel; };
            std::size_t k = next;
            for (std::size_t tries = 0; tries < params.size() && !matches(k); ++tries)
                k = (k + 1) % params.size();
            double share = 1.0;
            if (matches(k) && numel > 0) {
                next = k;
                share = fsdp ? static_cast<double>(params[k].local) / static_cast<double>(numel) : owned[k] ? 1.0 : 0.0;
            } else if (fsdp || plan.shard == Sharding::Zero1) {
                share = 1.0 / n;
            }
            if (share == 0.0) { // a parameter another rank steps
                edit.drop(i);
                continue;
            }
            edit.resize(i, static_cast<std::int64_t>(static_cast<double>(step.bytes[i]) * share * md / cd + 0.5));
        }
    }
    // Offloaded, the optimizer steps on the host.
    if (offload && optimizer)
        hostOptimizerTemporaries = moveOptimizerScratchToHost(edit, step, *optimizer);
    if (offload) {
        out.gradient_bytes = 0;
        info.host_bytes = hostParameters + hostGradients + hostOptimizerState + hostOptimizerTemporaries;
        out.host_scratch_bytes = hostOptimizerTemporaries;
        out.notes.push_back("offloaded (FSDP2's CPUOffloadPolicy): the host's pinned memory holds " + formatBytes(hostParameters)
            + " of parameter shards, " + formatBytes(hostGradients) + " of gradient shards, " + formatBytes(hostOptimizerState)
            + " of optimizer state and the optimizer step's " + formatBytes(hostOptimizerTemporaries) + " of scratch: "
            + formatBytes(info.host_bytes) + " per rank, " + formatBytes(info.host_bytes * info.gpus_per_node) + " per node of "
            + std::to_string(info.gpus_per_node) + (info.gpus_per_node == 1 ? " GPU" : " GPUs") + "; each unit's shards are copied to the device before its "
              "all-gather and its gradient shards back after its reduce-scatter (modelled from PyTorch 2.15's "
              "torch/distributed/fsdp/_fully_shard/_fsdp_param.py and _fsdp_collectives.py, not measured: "
              "FSDPMemTracker cannot run CPU offload without a GPU)");
    }

    if (withOps)
        out.ops = ops;
    out.phases = phases;
    out.trace = edit.build(withOps ? &out.ops : nullptr, &out.phases);
    out.notes.push_back("one rank of " + plan.text() + ": rank 0, which holds the largest shards; the step was "
        + "recorded on one device at the rank's micro-batch and the " + info.shard + " schedule laid over it");
    if (micro)
        out.notes.push_back(accumulationNote(*micro));
    return out;
}

Report rankReport(const Report& step, const ParallelPlan& plan)
{
    if (!step.trace || !step.ops)
        throw std::invalid_argument("the report has no recorded trace to lay a rank over");
    auto layout = layOutRank(step.model, step.layers, *step.trace, *step.ops, step.phases, step.run,
        step.optimizer_state_bytes, plan);
    Report r = step;
    r.run.parallel = layout.info;
    r.run.grad_accum = plan.grad_accum;
    r.weight_bytes = layout.weight_bytes;
    r.model.parameter_bytes = layout.parameter_bytes;
    r.model.buffer_bytes = layout.weight_bytes - layout.parameter_bytes;
    r.optimizer_state_bytes = layout.optimizer_state_bytes;
    r.gradient_bytes = layout.gradient_bytes;
    r.phases = layout.phases;
    r.whatif.reset();
    r.remedies.reset();
    r.forward_uses.clear();
    r.forward_uses_recorded = false;
    r.output_events.clear();
    // The layer tree's weights: each module's parameter shards and buffers on this rank.
    const int md = dtypeSize(layout.info.master_dtype), cd = dtypeSize(step.run.dtype);
    const double share = layout.info.full_parameter_bytes > 0 && cd > 0
        ? static_cast<double>(layout.parameter_bytes) / static_cast<double>(layout.info.full_parameter_bytes) * md / cd
        : 1.0;
    for (auto& l : r.layers)
        l.weight_bytes = static_cast<std::int64_t>(static_cast<double>(l.weight_bytes) * share + 0.5);
    r.notes.insert(r.notes.begin(), layout.notes.begin(), layout.notes.end());
    r.load_tax.resident_bytes = r.weight_bytes; // what the rank holds of the file's tensors
    r.load_tax.resident_dtype = isDeepSpeed(plan.shard) ? layout.info.param_dtype : layout.info.master_dtype;
    setRunTrace(r, std::move(layout.trace), std::move(layout.ops));
    // A GPU job's rank laid over a step recorded on the CPU: the scratch the CPU's kernels allocated inside
    // themselves (oneDNN's, which depends on the CPU's instructions, most in bfloat16 and float16) is not what a
    // GPU's kernels allocate. The rank's figures are those of that CPU; a meta run leaves kernel scratch out.
    const auto scratch = r.ledgers[static_cast<std::size_t>(Ledger::Temporaries)].at_peak;
    if (layout.info.backend != "gloo" && step.run.device == "cpu" && scratch > 0)
        r.notes.push_back("the step was recorded on the CPU: the rank's peak holds " + formatBytes(scratch)
            + " of the CPU kernels' scratch (oneDNN's, which depends on the CPU's instructions), not a GPU's; "
              "--device meta leaves kernel scratch out, as PyTorch's FSDPMemTracker does");
    return r;
}

} // namespace memledger
