#include "snapshot/snapshot_ledgers.h"
#include "report/trace_edit.h"

#include "snapshot/frames.h"
#include "snapshot/snapshot.h"

#include <algorithm>
#include <limits>
#include <map>
#include <string_view>
#include <vector>

namespace memledger {

namespace {

// What the program was doing when a trace entry was recorded, as far as its stack (or an annotation) says.
// Setup: building a model or an optimizer (a constructor, moving a module to the device).
enum class Doing : std::uint8_t { Unknown, Setup, Forward, Backward, Optimizer, ZeroGrad };

struct StackFacts {
    Doing doing = Doing::Unknown;
    bool module = false; // inside an nn.Module's call
    bool modelCode = false; // torch's or a library's Python frames: the model, a loss, not the user's loop
    bool dataLoader = false; // torch.utils.data
    bool userCode = false; // a Python frame of the user's own code
    bool python = false; // any Python frame
    bool cpp = false; // any C++ frame
    // Leaving a torch.autocast region, which drops autocast's weight-cast cache: what is freed here is the cache.
    bool clearsAutocastCache = false;
    // Code an optimizer's step calls back (LBFGS's closure: the forward, the loss and the backward again), not the
    // step's own work: an annotation of the step does not make it the optimizer's.
    bool closure = false;
};

bool contains(std::string_view s, std::string_view part)
{
    return s.find(part) != std::string_view::npos;
}

bool endsWith(std::string_view s, std::string_view tail)
{
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Windows paths spell torch's folders with backslashes.
bool inTorchFolder(std::string_view file, std::string_view slashed, std::string_view backslashed)
{
    return contains(file, slashed) || contains(file, backslashed);
}

// The autograd engine's own frames: C++ (evaluate_function, a node's apply, AccumulateGrad) or, where the engine runs
// on the caller's thread (a CPU backward), the Python frame that entered it. torch.autograd.backward's frames
// above it are not enough: it makes the seed gradient (ones_like(loss)) there before the engine runs, a value of
// the forward's kind.
bool isEngineFrame(std::string_view name)
{
    return contains(name, "torch::autograd::Engine::") || contains(name, "PythonEngine::")
        || contains(name, "AccumulateGrad") || name == "_engine_run_backward";
}

StackFacts factsOf(const Trace& t, std::uint32_t stack)
{
    StackFacts f;
    if (stack == 0)
        return f;
    // The user's files, innermost first: a file of the user's named like an optimizer's is one where a file of the
    // user's other than it calls it.
    std::vector<std::string_view> userFiles;
    for (auto it = t.stacks.begin(stack); it != t.stacks.end(stack); ++it) {
        const std::string_view file = t.strings.at(t.stacks.frame(*it).file);
        if (classifyFrame(file) == FrameKind::User)
            userFiles.push_back(file);
    }
    std::size_t userFrame = 0; // user frames seen so far (inner to the frame at hand)
    bool inner = false; // a frame of the user's or of an nn.Module call inside the frame at hand
    bool backward = false, optimizer = false, zeroGrad = false, setup = false;
    for (auto it = t.stacks.begin(stack); it != t.stacks.end(stack); ++it) {
        const StackFrame& frame = t.stacks.frame(*it);
        const std::string_view file = t.strings.at(frame.file);
        const std::string_view name = t.strings.at(frame.name);
        const FrameKind kind = classifyFrame(file);
        const bool user = kind == FrameKind::User;
        zeroGrad = zeroGrad || contains(name, "zero_grad");
        backward = backward || isEngineFrame(name);
        // torch.optim, or the user's own optimizer module (optimizer.py, my_optim.py: its constructor makes state)
        // called from another file of the user's. The script that runs the loop is not an optimizer whatever its
        // name (train_optimizers.py): its own frames are the outermost, or its top level (<module>).
        const bool torchOptim = inTorchFolder(file, "torch/optim/", "torch\\optim\\");
        const bool optimizerFile = torchOptim
            || (user && name != "<module>" && contains(file.substr(file.find_last_of("/\\") + 1), "optim")
                && std::any_of(userFiles.begin() + static_cast<std::ptrdiff_t>(userFrame + 1), userFiles.end(),
                    [&](std::string_view outer) { return outer != file; }));
        // An optimizer's own step (adam.py, lbfgs.py; not the base class's wrapper in optimizer.py, which calls a
        // subclass's step) that runs the user's code or a module: the closure it was given.
        if (torchOptim && inner && !endsWith(file, "optimizer.py") && !optimizer)
            f.closure = true;
        if (user)
            ++userFrame;
        inner = inner || user || endsWith(file, "nn/modules/module.py") || endsWith(file, "nn\\modules\\module.py");
        optimizer = optimizer || optimizerFile;
        setup = setup || (name == "__init__" && !optimizerFile && endsWith(file, ".py"))
            || (name == "_apply"
                && (endsWith(file, "nn/modules/module.py") || endsWith(file, "nn\\modules\\module.py")));
        f.module = f.module || endsWith(file, "nn/modules/module.py") || endsWith(file, "nn\\modules\\module.py");
        f.dataLoader = f.dataLoader || inTorchFolder(file, "torch/utils/data/", "torch\\utils\\data\\");
        // torch.clear_autocast_cache (C++ frames) or the region's __exit__ that calls it (Python frames only)
        f.clearsAutocastCache = f.clearsAutocastCache || contains(name, "at::autocast::clear_cache")
            || contains(name, "clear_autocast_cache")
            || (name == "__exit__" && (endsWith(file, "autocast_mode.py")));
        f.python = f.python || endsWith(file, ".py");
        f.cpp = f.cpp || kind == FrameKind::Cpp;
        f.modelCode = f.modelCode || kind == FrameKind::Torch || kind == FrameKind::Library;
        f.userCode = f.userCode || kind == FrameKind::User;
    }
    // The cache is dropped where the region ends, after a forward or after a backward: that tells no phase.
    if (f.clearsAutocastCache) {
        f.doing = Doing::Unknown;
        return f;
    }
    f.doing = zeroGrad                ? Doing::ZeroGrad
        : backward                    ? Doing::Backward
        : optimizer && !f.closure     ? Doing::Optimizer
        : setup && !f.module          ? Doing::Setup
                                      : Doing::Forward;
    return f;
}

Doing doingOfAnnotation(const std::string& name)
{
    if (contains(name, "zero_grad"))
        return Doing::ZeroGrad;
    if (contains(name, "Optimizer.step") || contains(name, "optimizer"))
        return Doing::Optimizer;
    if (contains(name, "backward"))
        return Doing::Backward;
    return Doing::Unknown;
}

bool isBlockEvent(Action a)
{
    return a == Action::Alloc || a == Action::Free || a == Action::FreeRequested;
}

// What each event was doing: its stack's word, or an annotation's range it lies in where the stack tells no
// more than "forward" (a stack with Python frames only, or none).
std::vector<Doing> doingOfEvents(const Trace& t, const Snapshot& s, std::vector<StackFacts>& facts)
{
    std::vector<Doing> doing(t.size(), Doing::Unknown);
    std::vector<bool> known(t.stacks.stackCount(), false);
    bool python = false, cpp = false;
    for (std::size_t i = 0; i < t.size(); ++i) {
        const auto st = t.stack[i];
        if (!known[st]) {
            facts[st] = factsOf(t, st);
            known[st] = true;
            python = python || facts[st].python;
            cpp = cpp || facts[st].cpp;
        }
        doing[i] = facts[st].doing;
    }
    // A history of Python stacks only (stacks="python") records no frame for what a thread without Python does:
    // the autograd engine's device threads, that is, a CUDA backward.
    if (python && !cpp)
        for (std::size_t i = 0; i < t.size(); ++i)
            if (t.stack[i] == 0 && isBlockEvent(t.action[i]))
                doing[i] = Doing::Backward;
    if (!s.trace_has_time || !std::is_sorted(t.time_ns.begin(), t.time_ns.end()))
        return doing;
    for (const auto& a : s.annotations) {
        const Doing d = doingOfAnnotation(a.name);
        if (d == Doing::Unknown)
            continue;
        const auto end = a.end_us >= 0 ? s.endNs(a) : t.time_ns.back();
        auto i = static_cast<std::size_t>(
            std::lower_bound(t.time_ns.begin(), t.time_ns.end(), s.startNs(a)) - t.time_ns.begin());
        for (; i < t.size() && t.time_ns[i] <= end; ++i)
            if (t.device[i] == a.device && (doing[i] == Doing::Unknown || doing[i] == Doing::Forward)
                && !(d == Doing::Optimizer && facts[t.stack[i]].closure))
                doing[i] = d;
    }
    return doing;
}

// Autocast's weight-cast cache: the lower-precision copies of float32 leaf weights that a region keeps until it
// ends. The history keeps each free's own stack (context="all"), so a block freed by clearing the cache says so,
// in its free_requested or its free_completed. A copy the backward still holds when the region ends is freed
// there instead: it is told as what it is then, saved for backward.
void assignAutocastCache(Trace& t, const std::vector<StackFacts>& facts)
{
    std::vector<std::pair<std::int8_t, std::uint64_t>> requested; // (device, address) freed by clearing the cache
    for (std::size_t i = 0; i < t.size(); ++i) {
        const Action a = t.action[i];
        if (a != Action::FreeRequested && a != Action::Free)
            continue;
        const bool clears = facts[t.stack[i]].clearsAutocastCache;
        const std::pair<std::int8_t, std::uint64_t> block {t.device[i], t.address[i]};
        if (a == Action::FreeRequested) {
            if (clears)
                requested.push_back(block);
            continue;
        }
        const auto r = std::find(requested.begin(), requested.end(), block);
        const bool wasRequested = r != requested.end();
        if (wasRequested)
            requested.erase(r);
        if (!clears && !wasRequested)
            continue;
        const auto p = t.partner[i];
        if (p == kNoPartner)
            t.ledger[i] = Ledger::AutocastCache; // allocated before the trace
        else
            setLedger(t, static_cast<std::size_t>(p), Ledger::AutocastCache);
    }
}

// An optimizer that updates out of place (`p.data = p.data - lr * update`, common in hand-written ones) frees
// each weight in its step and allocates the weight's new value there, which outlives the step as Adam's moments
// do. Each weight a step frees is replaced by the block of its size that the step keeps and allocated last before
// that free (the new value is computed, then assigned: Adam's new moments come before it), else the next one
// after it; the rest is optimizer state. Steps are taken in order, so a weight replaced in one step is a weight
// when the next step frees it.
void keepWeightsUpdatedOutOfPlace(Trace& t, const std::vector<Doing>& phase, const std::vector<std::uint32_t>& run)
{
    const std::size_t n = t.size();
    std::map<std::int64_t, std::vector<std::size_t>> kept; // bytes -> the step's kept allocs, not yet a weight
    std::map<std::int64_t, std::int64_t> owed; // bytes -> weights freed with no kept alloc before them
    for (std::size_t i = 0; i < n;) {
        if (!isBlockEvent(t.action[i]) || phase[i] != Doing::Optimizer) {
            ++i;
            continue;
        }
        const auto r = run[i];
        kept.clear();
        owed.clear();
        std::size_t k = i;
        for (; k < n; ++k) {
            if (!isBlockEvent(t.action[k]))
                continue;
            if (run[k] != r)
                break;
            const auto bytes = t.bytes[k];
            if (t.action[k] == Action::Alloc && t.ledger[k] == Ledger::OptimizerState) {
                auto o = owed.find(bytes);
                if (o != owed.end() && o->second > 0) {
                    --o->second;
                    setLedger(t, k, Ledger::Weights);
                } else {
                    kept[bytes].push_back(k);
                }
            } else if (t.action[k] == Action::Free && t.partner[k] != kNoPartner
                && static_cast<std::size_t>(t.partner[k]) < i && t.ledger[k] == Ledger::Weights) {
                auto& before = kept[bytes];
                if (before.empty()) {
                    ++owed[bytes];
                } else {
                    setLedger(t, before.back(), Ledger::Weights);
                    before.pop_back();
                }
            }
        }
        i = k;
    }
}

// The inputs of a step that follows a forward with no backward or optimizer between (an inference loop, an eval
// pass before the next training step): what the user's own code makes after the model ran and before the next
// annotated range begins (the capture's memledger.forward), still alive then. A loss the user's code computes is
// followed by its backward first. What the loop keeps of a forward's output through the next one (predictions the
// user's code makes from the logits) is told as an input too: no stack tells it from the next batch.
void findInputsOfForwardsInARow(Trace& t, const Snapshot& s, const std::vector<StackFacts>& facts,
    const std::vector<Doing>& doing, const std::vector<Doing>& phase)
{
    const std::size_t n = t.size();
    if (!s.trace_has_time || !std::is_sorted(t.time_ns.begin(), t.time_ns.end()))
        return;
    std::map<std::int8_t, std::vector<std::int64_t>> starts; // device -> the ranges' starts, of no phase of their own
    for (const auto& a : s.annotations)
        if (doingOfAnnotation(a.name) == Doing::Unknown)
            starts[a.device].push_back(s.startNs(a));
    for (auto& [device, v] : starts)
        std::sort(v.begin(), v.end());
    std::vector<std::int64_t> nextStepNs(n + 1, std::numeric_limits<std::int64_t>::max()); // a backward's, optimizer's
    for (std::size_t i = n; i-- > 0;)
        nextStepNs[i] = isBlockEvent(t.action[i])
                && (phase[i] == Doing::Backward || phase[i] == Doing::Optimizer || phase[i] == Doing::ZeroGrad)
            ? t.time_ns[i]
            : nextStepNs[i + 1];
    for (std::size_t i = 0; i < n; ++i) {
        if (t.action[i] != Action::Alloc || t.ledger[i] != Ledger::Activations)
            continue;
        const StackFacts& f = facts[t.stack[i]];
        if (!(f.userCode && !f.modelCode) || (doing[i] == Doing::Unknown ? phase[i] : doing[i]) != Doing::Forward)
            continue;
        const auto d = starts.find(t.device[i]);
        if (d == starts.end())
            continue;
        const auto next = std::upper_bound(d->second.begin(), d->second.end(), t.time_ns[i]);
        if (next == d->second.end() || nextStepNs[i] <= *next)
            continue;
        const auto p = t.partner[i];
        if (p == kNoPartner || t.time_ns[static_cast<std::size_t>(p)] > *next)
            setLedger(t, i, Ledger::Inputs);
    }
}

} // namespace

void assignSnapshotLedgers(Trace& t, const Snapshot& s)
{
    const std::size_t n = t.size();
    std::vector<StackFacts> facts(t.stacks.stackCount());
    const std::vector<Doing> doing = doingOfEvents(t, s, facts);

    // The phase at each event, and which run of one phase it is in: an event tells the phase when its stack says
    // something and, for a free, when its stack is not its alloc's (PyTorch records a free with the stack of its
    // alloc unless the history keeps every stack); the others are in the phase of the last event that told.
    std::vector<Doing> phase(n, Doing::Unknown);
    std::vector<std::uint32_t> run(n, 0);
    Doing now = Doing::Unknown;
    std::uint32_t runs = 0;
    for (std::size_t i = 0; i < n; ++i) {
        if (!isBlockEvent(t.action[i]))
            continue;
        const auto p = t.partner[i];
        const bool tells = doing[i] != Doing::Unknown
            && !(t.action[i] == Action::Free && p != kNoPartner && t.stack[static_cast<std::size_t>(p)] == t.stack[i]);
        if (tells && doing[i] != now) {
            now = doing[i];
            ++runs;
        }
        phase[i] = now;
        run[i] = runs;
    }

    // The end of the optimizer step's range around an event (-1: none). A step that calls a closure (LBFGS) is in
    // more than one run: what it frees before it returns is its scratch all the same.
    std::vector<std::pair<std::int64_t, std::int64_t>> steps; // (start, end) of Optimizer.step ranges
    if (s.trace_has_time)
        for (const auto& a : s.annotations)
            if (doingOfAnnotation(a.name) == Doing::Optimizer && a.end_us >= 0)
                steps.emplace_back(s.startNs(a), s.endNs(a));
    std::sort(steps.begin(), steps.end());
    auto stepEndNs = [&](std::size_t i) -> std::int64_t {
        auto it = std::upper_bound(steps.begin(), steps.end(),
            std::make_pair(t.time_ns[i], std::numeric_limits<std::int64_t>::max()));
        return it != steps.begin() && std::prev(it)->second >= t.time_ns[i] ? std::prev(it)->second : -1;
    };

    // Inputs: what the user's own code makes (no torch or library Python frames), or a DataLoader, before the
    // step's model code first allocates. A step begins after a backward or an optimizer's allocations, or where an
    // annotated range (the DataLoader's __next__, zero_grad) begins.
    bool modelRan = false;
    std::size_t nextAnnotation = 0;
    for (std::size_t i = 0; i < n; ++i) {
        const Action a = t.action[i];
        if (a != Action::Alloc && a != Action::Free)
            continue;
        for (; s.trace_has_time && nextAnnotation < s.annotations.size()
             && s.startNs(s.annotations[nextAnnotation]) <= t.time_ns[i];
             ++nextAnnotation)
            modelRan = false;
        const auto p = t.partner[i];
        if (a == Action::Free) {
            if (p != kNoPartner)
                continue; // takes its alloc's ledger
            // Freed by the optimizer's step: state the step replaces (the previous step's AdamW moments).
            t.ledger[i] = phase[i] == Doing::ZeroGrad ? Ledger::Gradients
                : phase[i] == Doing::Backward         ? Ledger::SavedActivations
                : phase[i] == Doing::Optimizer        ? Ledger::OptimizerState
                                                      : Ledger::Resident;
            continue;
        }
        const StackFacts& f = facts[t.stack[i]];
        const Doing d = doing[i] == Doing::Unknown ? phase[i] : doing[i];
        if (d != Doing::Forward)
            modelRan = false; // a new step begins after the backward or the optimizer
        const bool freed = p != kNoPartner;
        const auto j = freed ? static_cast<std::size_t>(p) : i;
        const bool freedInSameRun = freed && phase[j] == d && run[j] == run[i];
        Ledger l = Ledger::Unattributed;
        switch (d) {
        case Doing::Unknown:
            break;
        case Doing::Backward:
            // Alive from the backward until the optimizer or zero_grad: a parameter's .grad.
            l = freedInSameRun ? Ledger::Temporaries : Ledger::Gradients;
            break;
        case Doing::Optimizer:
            l = freedInSameRun || (freed && t.time_ns[j] <= stepEndNs(i)) ? Ledger::Temporaries
                                                                         : Ledger::OptimizerState;
            break;
        case Doing::ZeroGrad:
            l = Ledger::Temporaries;
            break;
        case Doing::Setup:
            l = freedInSameRun ? Ledger::Temporaries : Ledger::Weights;
            break;
        case Doing::Forward: {
            if (f.dataLoader || (f.userCode && !f.modelCode && !modelRan)) {
                l = Ledger::Inputs;
                break;
            }
            modelRan = modelRan || f.modelCode;
            if (freed && phase[j] == Doing::Backward) {
                l = Ledger::SavedActivations;
                break;
            }
            // A temporary is freed in the forward that made it and outlives nothing allocated after it: what is
            // allocated meanwhile is freed first, as an op's scratch (and scratch inside that) is freed before the op
            // returns its output.
            bool temporary = freedInSameRun;
            for (std::size_t k = i + 1; temporary && k < j; ++k)
                temporary = t.action[k] != Action::Alloc
                    || (t.partner[k] != kNoPartner && static_cast<std::size_t>(t.partner[k]) < j);
            l = temporary ? Ledger::Temporaries : Ledger::Activations;
            break;
        }
        }
        setLedger(t, i, l); // and its free's (report/trace_edit.h)
    }
    findInputsOfForwardsInARow(t, s, facts, doing, phase);
    keepWeightsUpdatedOutOfPlace(t, phase, run);
    assignAutocastCache(t, facts);
}

std::string snapshotPhaseAt(const Trace& t, const Snapshot& s, std::size_t i)
{
    std::vector<StackFacts> facts(t.stacks.stackCount());
    const std::vector<Doing> doing = doingOfEvents(t, s, facts);
    for (std::size_t k = std::min(i + 1, t.size()); k-- > 0;) {
        if (!isBlockEvent(t.action[k]) || doing[k] == Doing::Unknown)
            continue;
        switch (doing[k]) {
        case Doing::Forward:
            return "forward";
        case Doing::Backward:
            return "backward";
        case Doing::Optimizer:
            return "optimizer";
        case Doing::ZeroGrad:
            return "zero_grad";
        case Doing::Setup:
            return "setup";
        case Doing::Unknown:
            break;
        }
    }
    return {};
}

std::array<LedgerFigure, kLedgerKinds> snapshotLedgerFigures(
    const Trace& t, std::int64_t aliveBefore, std::uint32_t first, std::uint32_t end, std::int32_t peakEvent)
{
    // The blocks alive before the trace are in the ledger their free in the trace tells; the rest are resident.
    std::array<std::int64_t, kLedgerKinds> live {};
    std::int64_t told = 0;
    for (std::size_t i = 0; i < t.size(); ++i)
        if (t.action[i] == Action::Free && t.partner[i] == kNoPartner) {
            live[static_cast<std::size_t>(t.ledger[i])] += t.bytes[i];
            told += t.bytes[i];
        }
    const std::int64_t resident
        = std::max<std::int64_t>(0, aliveBefore - told + live[static_cast<std::size_t>(Ledger::Resident)]);
    live[static_cast<std::size_t>(Ledger::Resident)] = resident;

    std::array<LedgerFigure, kLedgerKinds> out {};
    out[static_cast<std::size_t>(Ledger::Resident)].total = resident;
    auto keep = [&](bool atPeak) {
        for (std::size_t l = 0; l < live.size(); ++l) {
            out[l].max = std::max(out[l].max, live[l]);
            if (atPeak)
                out[l].at_peak = live[l];
        }
    };
    for (std::size_t i = 0; i < end && i < t.size(); ++i) {
        if (i == first)
            keep(peakEvent < static_cast<std::int32_t>(first));
        const auto l = static_cast<std::size_t>(t.ledger[i]);
        if (t.action[i] == Action::Alloc) {
            live[l] += t.bytes[i];
            if (i >= first)
                out[l].total += t.bytes[i];
        } else if (t.action[i] == Action::Free) {
            live[l] -= t.bytes[i];
        }
        if (i >= first) { // keep(), for the one ledger an event changes
            out[l].max = std::max(out[l].max, live[l]);
            if (static_cast<std::int32_t>(i) == peakEvent)
                keep(true);
        }
    }
    if (first >= end)
        keep(true);
    return out;
}

} // namespace memledger
