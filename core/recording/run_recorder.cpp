// Runs a TorchScript model under an allocation recorder: every CPU allocation and free of the run,
// with the outermost and innermost ATen op on the stack and the module path that made it.
#include "recording/model_impl.h"
#include "recording/autocast_emulation.h"

#include "support/errors.h"
#include "support/format.h"
#include "recording/cuda_session.h"
#include "recording/meta_device.h"
#include "recording/module_path.h"
#include "recording/torch_compat.h"
#include "report/trace_edit.h"

#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <ATen/record_function.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/csrc/jit/runtime/interpreter.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

namespace memledger {

namespace {

using Clock = std::chrono::steady_clock;

struct RecordState {
    Trace* trace = nullptr;
    std::vector<OpCall>* ops = nullptr;
    Clock::time_point start;
    std::vector<std::uint32_t> stack; // op names, outermost first
    std::vector<std::uint32_t> allocation_helpers; // aten::empty and the like: they allocate for their caller
    // Training: the module of the last forward op that started with each autograd sequence number, so that
    // the backward node the op created finds its module; AccumulateGrad nodes (sequence number -1) wait for
    // their parameter: (op index, data of the incoming gradient).
    bool in_backward = false;
    std::unordered_map<std::int64_t, std::uint32_t> module_of_sequence;
    std::vector<std::pair<std::size_t, const void*>> accumulate_nodes;
    std::unordered_map<const void*, std::uint32_t> name_ids;
    ModulePathResolver* resolver = nullptr; // TorchScript: frames to module paths
    bool node_modules = false; // an exported program: each node names its module (node_module)
    std::uint32_t node_module = 0;
    std::unordered_map<const void*, std::string> param_owner; // parameter data -> its module's path
    std::unordered_map<const void*, std::size_t> buffer_index; // buffer data -> index in buffer_read
    std::vector<bool> buffer_read; // inference: whether an op took the buffer as an input
    AllocFreePairing live; // the live allocations, by address; pairs each free with its alloc
    std::uint32_t current_module = 0;
    std::uint32_t root_module = 0; // string id of ""
    const std::atomic<bool>* cancel = nullptr;
    bool cancelled = false;
    c10::Device device {c10::kCPU}; // the run's: allocations elsewhere are not recorded
    std::unordered_set<std::uint32_t> modules_seen;
    int module_count = 0;
    const std::function<void(int, int)>* progress = nullptr;
    std::vector<TensorUse>* uses = nullptr; // the forward's tensor inputs (inference and training)

    std::int64_t now() const
    {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
    }
};

thread_local RecordState* tls_state = nullptr;

// While a run is recorded, c10's LOG(WARNING) lines are not written: the CPU allocator writes "Memory block
// of unknown size was allocated before the profiling started" (once per process) when a block from before
// the run (a gradient, the optimizer's state) is freed in it, which memledger expects and handles. That is
// c10's log, not TORCH_WARN, so a c10::WarningHandler does not see it. Runs may overlap (the window records
// on a worker thread, the benchmarks side by side): the first in lowers the level, the last out restores it.
std::mutex quietMutex; // guards the two below
int quietRuns = 0; // runs being recorded now
int quietSavedLevel = 0; // c10's log level before the first of them

class QuietC10Log {
public:
    QuietC10Log()
    {
        std::lock_guard<std::mutex> lock(quietMutex);
        if (quietRuns++ == 0) {
            quietSavedLevel = compat::c10LogLevel();
            compat::c10LogLevel() = std::max(quietSavedLevel, 2);
        }
    }
    ~QuietC10Log()
    {
        std::lock_guard<std::mutex> lock(quietMutex);
        if (--quietRuns == 0)
            compat::c10LogLevel() = quietSavedLevel;
    }
    QuietC10Log(const QuietC10Log&) = delete;
    QuietC10Log& operator=(const QuietC10Log&) = delete;
};

class AllocationRecorder final : public c10::MemoryReportingInfoBase {
public:
    explicit AllocationRecorder(RecordState& s)
        : s_(s)
    {
    }
    bool memoryProfilingEnabled() const override { return true; }

    // Called by the allocator on the allocating thread; the CUDA caching allocator holds its lock meanwhile:
    // on a GPU nothing here throws, blocks or allocates device memory (a cancel is checked between ops).
    void reportMemoryUsage(
        void* ptr, int64_t size, compat::ReportedTotal, compat::ReportedTotal, c10::Device device) override
    {
        auto addr = reinterpret_cast<std::uint64_t>(ptr);
        if (size > 0 && s_.cancel && s_.cancel->load(std::memory_order_relaxed) && device.is_cpu()) {
            // Stop at this allocation: the block was never handed out, so give it back and unwind.
            c10::free_cpu(ptr);
            s_.cancelled = true;
            throw Cancelled(); // the interpreter may wrap it: run() checks s_.cancelled
        }
        if (device.type() != s_.device.type() || s_.cancelled)
            return;
        auto& t = *s_.trace;
        auto dev = static_cast<std::int8_t>(device.is_cpu() ? -1 : device.index());
        auto i = t.push(s_.now(), size > 0 ? size : -size, addr, size > 0 ? Action::Alloc : Action::Free, dev);
        t.op_seq[i] = static_cast<std::uint32_t>(s_.ops->empty() ? 0 : s_.ops->size() - 1);
        if (!s_.stack.empty()) {
            t.outer_op[i] = s_.stack.front();
            // The op that made the block: the innermost one that is not a mere allocation helper.
            auto inner = s_.stack.size() - 1;
            auto isHelper = [this](std::uint32_t id) {
                return std::find(s_.allocation_helpers.begin(), s_.allocation_helpers.end(), id)
                    != s_.allocation_helpers.end();
            };
            while (inner > 0 && isHelper(s_.stack[inner]))
                --inner;
            t.inner_op[i] = s_.stack[inner];
        }
        t.where[i] = s_.current_module;
        s_.live.add(t, i);
    }

    RecordState& state() { return s_; }

private:
    RecordState& s_;
};

// The run's state on this thread; on an autograd worker thread (a GPU's backward), the state of the recorder
// that the engine carried over with the thread-local debug info.
RecordState* currentState()
{
    if (tls_state)
        return tls_state;
    auto* recorder = dynamic_cast<AllocationRecorder*>(c10::ThreadLocalDebugInfo::get(compat::profilerStateKind()));
    return recorder && !recorder->state().device.is_cpu() ? &recorder->state() : nullptr;
}

std::uint32_t moduleOfCurrentFrame(RecordState& s, const at::RecordFunction& fn)
{
    if (s.node_modules)
        return s.node_module;
    std::string hint;
    for (const auto& in : fn.inputs()) {
        if (!in.isTensor() || !in.toTensor().defined())
            continue;
        auto it = s.param_owner.find(in.toTensor().data_ptr());
        if (it != s.param_owner.end()) {
            hint = it->second;
            break;
        }
    }
    auto op = static_cast<std::uint32_t>(s.ops->size());
    return s.trace->strings.intern(s.resolver->resolve(torch::jit::currentModuleHierarchy(), op, hint));
}

// --hold-output step: the previous step's output and loss, allocated before the recording began and alive when
// it begins, become allocations at its start (at the root module), so that they count while the loop holds them
// and their frees pair with them.
void noteHeldBlocks(RecordState& s, const HeldOutput& held)
{
    auto dev = static_cast<std::int8_t>(s.device.is_cpu() ? -1 : s.device.index());
    for (const auto& b : held.blocks()) {
        auto i = s.trace->push(s.now(), b.bytes, b.address, Action::Alloc, dev);
        s.trace->where[i] = s.root_module;
        s.live.add(*s.trace, i);
    }
}

// The frees of those blocks once the loop has let go of them: the ones that died and that no allocator reported
// (the CPU allocator reports no free of a block it did not report the allocation of).
void noteHeldFrees(RecordState& s, const std::vector<HeldOutput::Block>& blocks)
{
    auto dev = static_cast<std::int8_t>(s.device.is_cpu() ? -1 : s.device.index());
    for (const auto& b : blocks) {
        if (!b.freed() || !s.live.liveAt(b.address))
            continue;
        auto i = s.trace->push(s.now(), b.bytes, b.address, Action::Free, dev);
        s.trace->where[i] = s.root_module;
        s.trace->op_seq[i] = static_cast<std::uint32_t>(s.ops->empty() ? 0 : s.ops->size() - 1);
        s.live.add(*s.trace, i); // linked with its alloc
    }
}

// The model's output is read by its caller: its blocks, so that no rule takes them for unread.
void noteOutputs(RecordState& s, const c10::IValue& v, std::vector<std::uint32_t>& out)
{
    if (v.isTensor()) {
        const auto& t = v.toTensor();
        if (!t.defined() || !t.has_storage())
            return;
        if (auto alloc = s.live.liveAt(reinterpret_cast<std::uint64_t>(t.storage().data())))
            out.push_back(*alloc);
    } else if (v.isTuple()) {
        for (const auto& e : v.toTupleRef().elements())
            noteOutputs(s, e, out);
    } else if (v.isList()) {
        for (const auto& e : v.toListRef())
            noteOutputs(s, e, out);
    } else if (v.isGenericDict()) {
        for (const auto& e : v.toGenericDict())
            noteOutputs(s, e.value(), out);
    }
}

// The allocations (by storage) that an outermost forward op takes as inputs, lists of tensors included; a
// buffer it takes is marked read (inference).
void recordUses(RecordState& s, const at::RecordFunction& fn, std::uint32_t name)
{
    auto op = static_cast<std::uint32_t>(s.ops->size() - 1);
    // An in-place op (aten::relu_, aten::add_) changes its first argument.
    const char* text = fn.name();
    auto length = std::strlen(text);
    const bool inPlace = length > 1 && text[length - 1] == '_' && !std::strstr(text, "::_");
    auto use = [&](const at::Tensor& t, bool first) {
        if (!t.defined() || !t.has_storage())
            return;
        const void* data = t.storage().data();
        if (auto alloc = s.live.liveAt(reinterpret_cast<std::uint64_t>(data))) {
            s.uses->push_back({*alloc, op, name, s.current_module, inPlace && first});
            return;
        }
        auto b = s.buffer_index.find(data);
        if (b != s.buffer_index.end())
            s.buffer_read[b->second] = true;
    };
    // The interpreter may hand over more of its stack than the op's arguments: those are the last ones.
    const auto& inputs = fn.inputs();
    std::size_t self = 0;
    if (auto schema = fn.operator_schema(); schema && schema->arguments().size() <= inputs.size())
        self = inputs.size() - schema->arguments().size();
    for (std::size_t k = self; k < inputs.size(); ++k) {
        const auto& in = inputs[k];
        if (in.isTensor())
            use(in.toTensor(), k == self);
        else if (in.isTensorList())
            for (const auto& t : in.toTensorList())
                use(t, false);
    }
}

std::unique_ptr<at::ObserverContext> onOpStart(const at::RecordFunction& fn)
{
    auto* s = currentState();
    if (!s)
        return nullptr;
    if (!s->device.is_cpu() && s->cancel && s->cancel->load(std::memory_order_relaxed))
        s->cancelled = true; // a GPU run stops recording here; run() throws Cancelled once the op returns
    // An op's name lives in its schema for the whole run: it is looked up by pointer. An autograd node's name
    // (and the engine's "autograd::engine::evaluate_function: ..." around it) is a temporary string whose memory
    // the next one reuses: those are interned by content.
    const char* name = fn.name();
    std::uint32_t id = 0;
    if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION || std::strncmp(name, "autograd::", 10) == 0) {
        id = s->trace->strings.intern(name);
    } else {
        auto it = s->name_ids.find(name);
        id = it != s->name_ids.end() ? it->second
                                     : s->name_ids.emplace(name, s->trace->strings.intern(name)).first->second;
    }
    if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION) {
        // An autograd node. Its sequence number is that of the forward op that made it.
        if (s->stack.size() >= 2) { // a node of a backward run inside another node's (a Function's recompute):
            s->stack.push_back(id); // part of that node's call, at its module
            return nullptr;
        }
        if (s->stack.empty()) { // not inside the engine's evaluate_function span: a call of its own
            OpCall call;
            call.start_ns = s->now();
            call.first_event = static_cast<std::uint32_t>(s->trace->size());
            s->ops->push_back(std::move(call));
            s->stack.push_back(id);
        } else {
            s->stack.front() = id; // events inside name the node, not "evaluate_function: ..."
            s->stack.push_back(id);
        }
        auto& call = s->ops->back();
        call.name = id;
        call.backward = true;
        auto seq = fn.seqNr();
        if (seq >= 0) {
            auto m = s->module_of_sequence.find(seq);
            call.module = m == s->module_of_sequence.end() ? s->root_module : m->second;
        } else {
            call.module = s->root_module; // AccumulateGrad: its parameter's module, once the step is done
            const auto& inputs = fn.inputs();
            if (!inputs.empty() && inputs[0].isTensor() && inputs[0].toTensor().defined())
                s->accumulate_nodes.emplace_back(s->ops->size() - 1, inputs[0].toTensor().data_ptr());
        }
        s->current_module = call.module;
        return nullptr;
    }
    if (s->stack.empty()) {
        OpCall call;
        call.name = id;
        call.module = s->in_backward ? s->root_module : moduleOfCurrentFrame(*s, fn);
        call.start_ns = s->now();
        call.first_event = static_cast<std::uint32_t>(s->trace->size());
        s->current_module = call.module;
        s->ops->push_back(std::move(call));
        if (s->progress && *s->progress && s->modules_seen.insert(s->current_module).second)
            (*s->progress)(static_cast<int>(s->modules_seen.size()), s->module_count);
        if (s->uses && !s->in_backward)
            recordUses(*s, fn, id);
    }
    if (!s->in_backward && fn.seqNr() >= 0)
        s->module_of_sequence[fn.seqNr()] = s->current_module;
    s->stack.push_back(id);
    return nullptr;
}

void onOpEnd(const at::RecordFunction& fn, at::ObserverContext*)
{
    auto* s = currentState();
    if (!s || s->stack.empty())
        return;
    s->stack.pop_back();
    if (!s->stack.empty())
        return;
    auto& call = s->ops->back();
    call.end_ns = s->now();
    call.end_event = static_cast<std::uint32_t>(s->trace->size());
    // The interpreter hands over its whole stack: the op's own outputs are the last ones.
    const auto& outs = fn.outputs();
    std::size_t count = outs.size();
    if (auto schema = fn.operator_schema())
        count = std::min(count, schema->returns().size());
    for (auto it = outs.end() - static_cast<std::ptrdiff_t>(count); it != outs.end(); ++it) {
        const auto& out = *it;
        if (!out.isTensor())
            continue;
        const auto& t = out.toTensor();
        if (!t.defined())
            continue;
        call.outputs.emplace_back(t.sizes().begin(), t.sizes().end());
        call.output_bytes.push_back(static_cast<std::int64_t>(t.numel() * t.element_size()));
    }
}

// The TorchScript interpreter wraps the real error after a traceback: keep the model's own message.
std::string firstLine(const std::string& s)
{
    std::string m = s;
    for (const char* marker : {"RuntimeError: ", "Exception: ", "ValueError: ", "AssertionError: "}) {
        auto pos = m.rfind(marker);
        if (pos != std::string::npos) {
            m = m.substr(pos + std::strlen(marker));
            break;
        }
    }
    auto pos = m.find('\n');
    return pos == std::string::npos ? m : m.substr(0, pos);
}

std::string joinNames(const std::vector<std::string>& names)
{
    std::string out;
    for (std::size_t i = 0; i < names.size(); ++i)
        out += (i ? ", " : "") + names[i];
    return out;
}

// After a recorded training step: which allocations ended as a parameter's .grad, the module of each
// AccumulateGrad node (its parameter's), and the gradients set to None again.
void finishTrainingStep(RawRun& raw, RecordState& state, const std::vector<at::Tensor>& params)
{
    auto& t = raw.trace;
    std::unordered_map<const void*, std::uint32_t> ownerOfGradient; // gradient data -> its module's path
    for (const auto& p : params) {
        const auto& g = p.grad();
        if (!g.defined())
            continue;
        raw.gradient_bytes += static_cast<std::int64_t>(g.numel() * g.element_size());
        auto owner = state.param_owner.find(p.data_ptr());
        auto module = t.strings.intern(owner == state.param_owner.end() ? std::string() : owner->second);
        ownerOfGradient[g.data_ptr()] = module;
        if (auto alloc = state.live.liveAt(reinterpret_cast<std::uint64_t>(g.data_ptr()))) {
            auto event = *alloc;
            raw.gradient_events.push_back(event);
            if (t.where[event] == state.root_module)
                t.where[event] = module;
        }
    }
    for (const auto& [op, data] : state.accumulate_nodes) {
        auto owner = ownerOfGradient.find(data);
        if (owner == ownerOfGradient.end() || op >= raw.ops.size())
            continue;
        auto& call = raw.ops[op];
        call.module = owner->second;
        for (auto e = call.first_event; e < call.end_event && e < t.size(); ++e)
            t.where[e] = owner->second;
    }
    setGradientsToNone(params);
}

// An input as --input describes it: random normal floating point, integers 0 and bools false, or its fill.
at::Tensor makeInput(const Shape& shape, const InputType& type, c10::ScalarType scalar, c10::Device device)
{
    auto options = torch::TensorOptions().dtype(scalar).device(device);
    if (type.fill)
        return torch::full(shape, *type.fill, options);
    if (isFloatingDtype(type.dtype))
        return torch::randn(shape, options);
    return torch::zeros(shape, options);
}

// A meta run's failure names its op: the ops running when an exception left them (pushed on entry, kept when
// they end by unwinding), the warm-up included.
class MetaOpTrail {
public:
    MetaOpTrail()
        : handle_(at::addThreadLocalCallback(at::RecordFunctionCallback(&MetaOpTrail::enter, &MetaOpTrail::leave)
                                                 .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION})))
    {
        ops().clear();
    }
    ~MetaOpTrail() { at::removeCallback(handle_); }
    MetaOpTrail(const MetaOpTrail&) = delete;
    MetaOpTrail& operator=(const MetaOpTrail&) = delete;

    // The innermost op that was running when the run failed; "" if none.
    static std::string failedOp() { return ops().empty() ? std::string() : ops().back().name; }
    // The ops it ran inside, innermost first: " (inside aten::index_put_, ...)"; "" if none.
    static std::string callers()
    {
        const auto& stack = ops();
        std::string out;
        for (std::size_t k = stack.size(); k-- > 1;) // from the innermost's caller out, each operator once in a row
            if (stack[k - 1].name != stack[k].name)
                out += (out.empty() ? " (inside " : ", ") + stack[k - 1].name;
        return out.empty() ? out : out + ")";
    }

private:
    struct Entry {
        std::string name;
        int exceptions = 0; // std::uncaught_exceptions() on entry
        bool failed = false; // it ended by an exception
    };
    static std::vector<Entry>& ops()
    {
        thread_local std::vector<Entry> stack;
        return stack;
    }
    static std::unique_ptr<at::ObserverContext> enter(const at::RecordFunction& fn)
    {
        auto& stack = ops();
        while (!stack.empty() && stack.back().failed) // a failure something caught: the run went on
            stack.pop_back();
        stack.push_back({fn.name(), std::uncaught_exceptions(), false});
        return nullptr;
    }
    static void leave(const at::RecordFunction&, at::ObserverContext*)
    {
        auto& stack = ops();
        auto running = std::find_if(stack.rbegin(), stack.rend(), [](const Entry& e) { return !e.failed; });
        if (running == stack.rend())
            return;
        if (std::uncaught_exceptions() > running->exceptions) {
            running->failed = true; // unwinding: kept, with the op it called that failed
            return;
        }
        stack.erase(std::prev(running.base()), stack.end());
    }
    at::CallbackHandle handle_;
};

// What a meta run's failure means: an op without a meta kernel, or a model that reads a tensor's values.
RunError explainMetaFailure(const std::string& message)
{
    auto op = MetaOpTrail::failedOp();
    // `name` (an overload, "aten::where.self_out") has no meta kernel; `op` the operator whose call reached it
    auto noMetaKernel = [&](const std::string& name) {
        const bool sameOperator = op.empty() || name.substr(0, name.find('.')) == op;
        return RunError("--device meta: " + name + " has no meta kernel (neither libtorch's C++ nor memledger's has "
            "one)" + (sameOperator ? std::string() : ", called by " + op)
            + ", so this model cannot run on the meta device; run it on the cpu");
    };
    const std::string marker = "Could not run '";
    if (auto at = message.find(marker); at != std::string::npos && message.find("'Meta' backend") != std::string::npos) {
        const auto begin = at + marker.size();
        const auto end = message.find('\'', begin);
        return noMetaKernel(message.substr(begin, end == std::string::npos ? std::string::npos : end - begin));
    }
    // PyTorch 2's wording: "aten::where.self_out: attempted to run this operator with Meta tensors, but there was
    // no fake impl or Meta kernel registered"
    const std::string noKernel = ": attempted to run this operator with Meta tensors";
    if (auto at = message.find(noKernel); at != std::string::npos && message.find("Meta kernel") != std::string::npos) {
        auto begin = message.rfind(' ', at);
        begin = begin == std::string::npos ? 0 : begin + 1;
        const auto name = message.substr(begin, at - begin);
        return noMetaKernel(name.empty() ? op : name);
    }
    auto has = [&](const char* text) { return message.find(text) != std::string::npos; };
    if (has("meta tensor") || has("item()") || has("_local_scalar_dense") || has("no data") || has("Meta"))
        return RunError("--device meta: the model reads a tensor's values"
            + (op.empty() ? std::string() : " in " + op + MetaOpTrail::callers())
            + ", which a meta tensor does not have (only its shape): run it on the cpu (" + message + ")");
    return RunError("--device meta: the model failed" + (op.empty() ? std::string() : " in " + op) + ": " + message);
}

RunError explainRunFailure(
    const std::string& message, const std::string& dtype, const RunInfo& info, const std::vector<std::string>& inputs)
{
    if (message.find("not implemented for") != std::string::npos)
        return RunError("the CPU build of libtorch has no " + dtype + " kernel for an op of this model: " + message);
    // Floating-point ids into an Embedding: name the type and the --input that passes it.
    if (message.find("'indices'") != std::string::npos && message.find("Long, Int") != std::string::npos) {
        std::string given, spec;
        for (std::size_t i = 0; i < info.input_shapes.size(); ++i) {
            auto type = inputTypeAt(info.input_types, i);
            if (type.dtype != "int64" && type.dtype != "int32" && type.dtype != "bool") {
                given = given.empty() ? type.dtype : given;
                type = InputType {"int64", std::nullopt};
            }
            spec += (i ? "," : "") + inputToString(info.input_shapes[i], type);
        }
        return RunError("the model takes int64 token ids (an Embedding's indices), but its input was "
            + (given.empty() ? std::string("not int64") : given) + ": give the type with --input, e.g. --input " + spec
            + " (token ids are filled with 0; =V fills V)");
    }
    // The machine cannot hold the run: the meta device computes it from shapes, without the memory.
    if (message.find("can't allocate memory") != std::string::npos
        || message.find("not enough memory") != std::string::npos
        || message.find("out of memory") != std::string::npos)
        return RunError("the run needs more memory than " + (info.device.empty() ? std::string("cpu") : info.device)
            + " can give (" + message + "): --device meta records it from the tensors' shapes without allocating "
              "(docs/meta.md), or lower --batch");
    // TorchScript counts `self` among the arguments: say how many inputs the model takes instead.
    if (message.find("argument(s)") != std::string::npos
        && (message.find("expected") != std::string::npos || message.find("Expected") != std::string::npos)) {
        auto n = inputs.size();
        throw UsageError("forward takes " + std::to_string(n) + (n == 1 ? " input" : " inputs") + " ("
            + joinNames(inputs) + ") but " + std::to_string(info.input_shapes.size()) + " were given: give one shape "
            "per input with --input, comma-separated");
    }
    std::string text = "the model rejected the run: " + message;
    if (info.input_guessed)
        text += " (the input shape " + (info.input_shapes.empty() ? std::string("?") : shapeToString(info.input_shapes[0]))
            + " was guessed from the model's first layer; give the right one with --input, or in the Run panel)";
    return RunError(text);
}

// Why this build cannot run --autocast `dtype` on `device`; "" when it can.
// A meta run stands for a GPU: it applies CUDA autocast's rules itself (autocast_emulation.h), to the operators of a
// torch.export program, whose interpreter is memledger's.
std::string autocastRefusal(const std::string& dtype, const c10::Device& device, bool exportedProgram)
{
    if (dtype != "bfloat16" && dtype != "float16")
        return "unknown autocast dtype '" + dtype + "' (use bfloat16 or float16)";
    if (device.is_meta() && !exportedProgram)
        return "--autocast on the meta device: libtorch's autocast casts only tensors of a device with memory, and "
               "memledger applies CUDA autocast's rules itself to torch.export programs (.pt2) only, whose operators "
               "it calls one by one; export the model (torch.export, or memledger.export from the Python package), "
               "or run this TorchScript model on the cpu or a GPU";
    if (device.is_meta() && !autocastEmulationAvailable())
        return "--autocast on the meta device: this build's libtorch " TORCH_VERSION " does not carry CUDA "
               "autocast's op lists (ATen/autocast_mode.h, PyTorch 2.4 and later); run it on the cpu or a GPU";
#if !MEMLEDGER_TORCH_AT_LEAST(2, 4)
    if (device.is_cpu() && dtype == "float16")
        return "--autocast float16: this build's libtorch " TORCH_VERSION " has CPU autocast in bfloat16 only "
               "(its PyTorch's torch.autocast(\"cpu\", dtype=torch.float16) warns and disables itself); use --autocast "
               "bfloat16, or the PyTorch 2 build";
#endif
    return {};
}

// `with torch.autocast(device_type, dtype, cache_enabled=cache):` entered on construction and left by close() (or
// the destructor, when an exception leaves the region): autocast on for the device type in `dtype`, the weight-cast
// cache on or off, the nesting counted; leaving the outermost region clears the cache (at::autocast::clear_cache,
// as torch.autocast.__exit__ does), and the state before is restored.
class AutocastRegion {
public:
    AutocastRegion(c10::DeviceType type, c10::ScalarType dtype, bool cache, const Trace* trace)
        : type_(type)
        , trace_(trace)
        , enabled_(type == c10::kMeta ? false : compat::autocastEnabled(type))
        , dtype_(type == c10::kMeta ? dtype : compat::autocastDtype(type))
        , cache_(at::autocast::is_autocast_cache_enabled())
    {
        if (type == c10::kMeta) { // CUDA autocast's rules, applied by the exported program's interpreter
            emulated_.emplace(dtype, cache);
            return;
        }
        compat::setAutocastEnabled(type, true);
        compat::setAutocastDtype(type, dtype);
        at::autocast::increment_nesting();
        at::autocast::set_autocast_cache_enabled(cache);
    }
    ~AutocastRegion()
    {
        try {
            close();
        } catch (...) {
        }
    }
    AutocastRegion(const AutocastRegion&) = delete;
    AutocastRegion& operator=(const AutocastRegion&) = delete;

    void close()
    {
        if (closed_)
            return;
        closed_ = true;
        if (emulated_) {
            cleared_first_ = trace_ ? trace_->size() : 0;
            emulated_->close();
            cleared_end_ = trace_ ? trace_->size() : 0;
            return;
        }
        if (at::autocast::decrement_nesting() == 0) {
            cleared_first_ = trace_ ? trace_->size() : 0;
            at::autocast::clear_cache();
            cleared_end_ = trace_ ? trace_->size() : 0;
        }
        compat::setAutocastEnabled(type_, enabled_);
        compat::setAutocastDtype(type_, dtype_);
        at::autocast::set_autocast_cache_enabled(cache_);
    }
    // The trace's events [first, end) that the cache's clearing recorded (its frees of the cached weight casts).
    std::pair<std::size_t, std::size_t> clearedEvents() const { return {cleared_first_, cleared_end_}; }

private:
    c10::DeviceType type_;
    const Trace* trace_;
    bool enabled_;
    c10::ScalarType dtype_;
    bool cache_;
    bool closed_ = false;
    std::optional<AutocastEmulationScope> emulated_; // on the meta device
    std::size_t cleared_first_ = 0, cleared_end_ = 0;
};

} // namespace

RawRun runModel(Model::Impl& d, const RunOptions& options)
{
    if (!isSupportedDtype(options.dtype))
        throw RunError("unknown dtype '" + options.dtype + "' (use float32, bfloat16 or float16)");
    const RunMode mode = options.mode.value_or(RunMode::Inference);
    const bool train = mode == RunMode::Train;
    const bool generating = mode == RunMode::Generate;
    if (generating) {
        if (!d.program || !d.program->generation())
            throw UsageError(std::string("--mode generate runs the prefill and decode programs memledger.export saves with "
                "generate=True, which this file does not hold: ")
                + (d.program ? "export the model again with memledger.export(model, (input_ids,), PATH, generate=True)"
                             : "a TorchScript model has none; export the model with memledger.export(model, "
                               "(input_ids,), PATH, generate=True)"));
        if (options.new_tokens < 1)
            throw UsageError("--mode generate needs --new-tokens N (1 or more: the tokens generated per row)");
        if (!options.autocast.empty())
            throw UsageError("--mode generate does not take --autocast: give the weights' type with --dtype");
        if (const auto* g = d.program->generation(); options.cache == GenerationCache::Static && !g->static_prefill)
            throw UsageError("--cache static runs the static cache's programs, which this file does not hold: "
                + g->facts.static_reason);
    }
    if (train && !isSupportedOptimizer(options.optimizer))
        throw RunError("unknown optimizer '" + options.optimizer + "' (use sgd, adam, adamw or none)");
    if (train && !isSupportedLoss(options.loss))
        throw RunError("unknown loss '" + options.loss + "' (use auto, sum or cross_entropy)");
    if (train && !isSupportedHoldOutput(options.hold_output))
        throw RunError("unknown --hold-output '" + options.hold_output + "' (use step, backward or none)");
    const bool metaWeights = d.program && d.program->metaWeights();
    // throws RunError: no CUDA, no GPU
    const c10::Device device = resolveDevice(options.device.empty() ? (metaWeights ? "meta" : "cpu") : options.device);
    if (metaWeights && !device.is_meta())
        throw RunError("this program cannot run on " + device.str() + ": its weights are meta tensors (it was exported "
            "from a model built on the meta device), which hold shapes and no values: run it with --device meta");
    const bool autocast = !options.autocast.empty();
    if (autocast)
        if (auto refusal = autocastRefusal(options.autocast, device, d.program != nullptr); !refusal.empty())
            throw RunError(refusal);
    const bool gpu = device.is_cuda();
    std::lock_guard<std::mutex> lock(d.run_mutex);
    // An exported program runs in another precision as the graph exported from model.to(dtype) would
    // (ExportedProgram::convert), but for the casts to its exported type the model makes on purpose: say so.
    std::string exportedDtype;
    if (d.program) {
        exportedDtype = dtypeName(d.program->exportedScalar());
        if (d.current_dtype.empty())
            d.current_dtype = exportedDtype;
    }
    std::optional<MetaOpTrail> metaTrail; // a meta run's failure names its op
    std::optional<GpuAttentionOnMeta> gpuAttention;
    if (device.is_meta())
        metaTrail.emplace();
    if (device.is_meta() && options.gpu_attention)
        gpuAttention.emplace();
    std::optional<CudaRecording> cuda;
    if (gpu)
        cuda.emplace(device, options.cudnn_benchmark);
    RawRun raw;
    raw.info.device = device.str();
    raw.meta_weights = metaWeights;
    if (d.program) {
        if (options.lifetimes != "eager" && options.lifetimes != "graph")
            throw RunError("unknown --lifetimes '" + options.lifetimes + "' (use eager or graph)");
        raw.info.lifetimes = d.program->setLifetimes(options.lifetimes);
        raw.notes = d.program->loadNotes();
        if (raw.info.lifetimes != options.lifetimes)
            raw.notes.push_back("lifetimes: graph (each value dropped after its last reader), not eager: the program's "
                "nodes carry no source lines (stack_trace) to tell how its Python held them");
        // generate runs the generation programs, exported for an unpadded batch: their notes, not the forward's
        const auto& noted = generating ? *d.program->generation()->prefillOf(options.cache) : *d.program;
        for (const auto& note : {noted.eagerLifetimesNote(), noted.causalMaskNote(),
                 options.mode == RunMode::Train ? d.program->functionCallNote() : std::string()})
            if (!note.empty()) {
                raw.notes.push_back(note);
                raw.figure_notes.push_back(note);
            }
        if (options.dtype != exportedDtype)
            raw.notes.push_back(d.program->conversionNote(scalarTypeFor(options.dtype)));
        d.program->castModuleInputs(options.cast_module_inputs);
    } else if (!options.cast_module_inputs.empty()) {
        raw.notes.push_back("FSDP's cast of each unit's floating-point inputs to " + options.dtype
            + " (MixedPrecisionPolicy.cast_forward_inputs) is not modelled for a TorchScript model: a unit given a "
              "tensor in another type computes in it here");
    }
    raw.info.dtype = options.dtype;
    raw.info.autocast = options.autocast;
    raw.info.autocast_cache = options.autocast_cache;
    if (autocast && d.program) {
        auto note = d.program->autocastNote();
        if (!note.empty())
            raw.notes.push_back(note);
        note = d.program->followedTypesNote(!device.is_cpu(), options.autocast);
        if (!note.empty()) {
            raw.notes.push_back(note);
            raw.figure_notes.push_back(note);
        }
    }
    if (d.program) {
        auto note = train ? d.program->evalModeNote() : d.program->trainModeNote();
        if (!note.empty()) {
            raw.notes.push_back(note);
            raw.figure_notes.push_back(note);
        }
    }
    raw.info.mode = mode;
    raw.info.input_shapes = options.inputs;
    raw.info.input_types = options.input_types;
    const auto signature = d.signature();
    if (raw.info.input_shapes.empty()) {
        // A guess is one tensor (an exported program's example may be several): a forward that takes more needs
        // them all named.
        const auto& names = signature.names;
        if (names.size() > 1 && !d.program)
            throw UsageError("forward takes " + std::to_string(names.size()) + " inputs (" + joinNames(names)
                + "): give their shapes with --input, comma-separated");
        std::string how;
        raw.info.input_shapes = guessInputsLocked(d, &how, &raw.info.input_types);
        if (raw.info.input_shapes.empty())
            throw RunError("cannot guess the input shape (no Embedding, Conv2d or Linear weight): give it with --input");
        raw.info.input_guessed = !d.program; // a program's own export example is what it was made for, not a guess
    }
    raw.info.input_types.resize(raw.info.input_shapes.size());
    // A List[Tensor] argument (a detector's images): its batch is its length; --batch N makes it N tensors, its
    // given shapes taken in turn.
    if (options.batch)
        setInputBatch(raw.info.input_shapes, raw.info.input_types, *options.batch);
    for (auto& shape : raw.info.input_shapes)
        if (shape.empty())
            throw RunError("an input shape is empty");
    for (std::size_t i = 0; i < raw.info.input_shapes.size(); ++i) {
        auto& shape = raw.info.input_shapes[i];
        if (!raw.info.input_types[i].isToken() || shape.size() < 2)
            continue;
        if (options.seq)
            shape[1] = *options.seq;
        if (!raw.info.seq)
            raw.info.seq = shape[1];
    }
    raw.info.batch = batchOfInputs(raw.info.input_shapes, raw.info.input_types);
    // 0 is libtorch's default, as the process started with, even after an earlier run of this process set another.
    static const int libtorchDefaultThreads = at::get_num_threads();
    if (const int want = options.threads > 0 ? options.threads : libtorchDefaultThreads; want != at::get_num_threads())
        at::set_num_threads(want);
    raw.info.threads = at::get_num_threads();

    const auto& inputNames = signature.names;
    auto explain = [&](const std::string& message) {
        return explainRunFailure(
            message, autocast ? options.autocast + " (under autocast)" : options.dtype, raw.info, inputNames);
    };
    if (generating) {
        // the prompt: one batch x prompt tensor of token ids, what the prefill takes
        if (raw.info.input_shapes.size() != 1 || raw.info.input_shapes.front().size() != 2
            || !raw.info.input_types.front().isToken())
            throw UsageError("--mode generate takes the prompt as one batch x prompt tensor of token ids: --input "
                             "BxP:int64");
        raw.info.new_tokens = options.new_tokens;
        raw.info.cache = options.cache;
        const auto& decodeInputs = d.program->generation()->decodeOf(options.cache)->inputs();
        // the last layer's values: batch x KV heads x past (the static cache: its length) x head dim
        const auto& past = decodeInputs.back();
        const auto prompt = raw.info.input_shapes.front()[1];
        if (past.dims.size() == 4 && prompt + options.new_tokens - 1 > past.dims[2].max)
            throw UsageError("a prompt of " + std::to_string(prompt) + " and " + std::to_string(options.new_tokens)
                + " new tokens make a cache of " + std::to_string(prompt + options.new_tokens - 1)
                + " tokens; the decode program takes " + std::to_string(past.dims[2].min) + ".."
                + std::to_string(past.dims[2].max) + " (the model's positions)");
    }
    // The model's own signature counts its inputs, `self` left out; a list is one.
    const auto given = generating ? std::size_t {1} : argumentCount(raw.info.input_types, raw.info.input_shapes.size());
    if (d.program && given != raw.info.input_shapes.size())
        throw UsageError("an exported program takes its tensors one by one (torch.export flattens a list): give them "
                         "without brackets");
    if (!generating && (given > inputNames.size() || given < signature.required)) {
        auto n = inputNames.size();
        std::string takes = signature.required == n ? std::to_string(n)
                                                    : std::to_string(signature.required) + " to " + std::to_string(n);
        throw UsageError("forward takes " + takes + (n == 1 ? " input" : " inputs") + " (" + joinNames(inputNames)
            + ") but " + std::to_string(given) + (given == 1 ? " was" : " were") + " given: give one shape per input "
            "with --input, comma-separated");
    }
    // Inference runs without autograd; a training step runs as eager PyTorch would (the graph executor's
    // optimisations off: with them the warm-up turns the forward into DifferentiableGraph nodes).
    std::optional<torch::NoGradGuard> noGrad;
    if (!train)
        noGrad.emplace();
    torch::AutoGradMode gradMode(train);
    torch::jit::setGraphExecutorOptimize(false);
    d.setTraining(train);
    auto scalar = scalarTypeFor(options.dtype);
    if (d.current_dtype != options.dtype) {
        d.convertFloating(scalar);
        d.current_dtype = options.dtype;
    }
    if (d.current_device != device.str()) {
        d.moveTo(device);
        d.current_device = device.str();
    }
    for (const auto& [name, p] : d.namedParameters())
        raw.parameter_bytes += static_cast<std::int64_t>(p.numel() * p.element_size());
    for (const auto& [name, b] : d.namedBuffers())
        raw.buffer_bytes += static_cast<std::int64_t>(b.numel() * b.element_size());

    raw.info.input_types.resize(raw.info.input_shapes.size());
    for (const auto& type : raw.info.input_types)
        if (!isInputDtype(type.dtype))
            throw RunError("unknown input type '" + type.dtype + "' (use float32, float16, bfloat16, int64, int32 or bool)");
    std::vector<c10::IValue> inputs;
    std::optional<c10::List<at::Tensor>> list; // the List[Tensor] argument being filled
    for (std::size_t i = 0; i < raw.info.input_shapes.size(); ++i) {
        const auto& type = raw.info.input_types[i];
        at::Tensor t;
        try { // an input too large for the machine fails here
            t = makeInput(raw.info.input_shapes[i], type, scalarTypeFor(type.runDtype(options.dtype)), device);
        } catch (const c10::Error& e) {
            throw explain(firstLine(e.what_without_backtrace()));
        }
        raw.input_bytes += static_cast<std::int64_t>(t.numel() * t.element_size());
        if (type.list < 0) {
            inputs.emplace_back(std::move(t));
            continue;
        }
        if (!list)
            list.emplace();
        list->push_back(std::move(t));
        if (i + 1 == raw.info.input_shapes.size() || raw.info.input_types[i + 1].list != type.list) {
            inputs.emplace_back(std::move(*list));
            list.reset();
        }
    }

    // A training step: its optimizer, loss and targets, chosen on the warm-up step.
    std::vector<at::Tensor> params;
    std::unique_ptr<TrainOptimizer> optimizer;
    LossChoice loss;
    at::Tensor targets;
    if (train) {
        params = trainableParameters(d);
        if (params.empty())
            throw RunError("the model has no floating-point parameters that require a gradient: nothing to train");
        setGradientsToNone(params);
        optimizer = makeOptimizer(options.optimizer, params);
        raw.info.optimizer = options.optimizer;
        raw.info.hold_output = options.hold_output;
    }
    // --hold-output step: what the loop holds of the previous step (the warm-up's) when a step begins, and of
    // the recorded step once it ends (freed after the recording). `onHeld` announces the former's blocks to the
    // recorder at the recorded step's start.
    const std::string& hold = options.hold_output;
    HeldOutput held;
    std::function<void(const HeldOutput&)> onHeld;
    std::function<void(const std::vector<HeldOutput::Block>&)> onHeldFreed;
    auto letGo = [&](auto& value) { // the loop rebinds one of the previous step's names
        auto blocks = onHeldFreed ? held.blocks() : std::vector<HeldOutput::Block>();
        value = std::decay_t<decltype(value)>();
        if (onHeldFreed)
            onHeldFreed(blocks);
    };
    // forward, loss, backward, optimizer; `mark` is told where each begins.
    // An exported program names each node's module: the recorder is told it before the node runs (set once the
    // recorded run begins; the warm-up runs without it).
    std::function<void(const std::string&)> onNode;
    // --autocast: the region around the forward and the loss, as users write it (`with torch.autocast(...): out =
    // model(x); loss = ...`; the backward and the optimizer outside). The frees of the recorded region's clearing
    // of the cache are the cached weight casts that nothing else held (autocast_cache_events).
    std::pair<std::size_t, std::size_t> clearedByAutocast {0, 0};
    auto enterAutocast = [&](std::optional<AutocastRegion>& region) {
        if (autocast)
            region.emplace(device.type(), scalarTypeFor(options.autocast), options.autocast_cache, &raw.trace);
    };
    auto leaveAutocast = [&](std::optional<AutocastRegion>& region) {
        if (!region)
            return;
        region->close();
        clearedByAutocast = region->clearedEvents();
    };
    auto forward = [&] {
        std::optional<AutocastRegion> region;
        enterAutocast(region);
        auto out = d.forward(inputs, onNode);
        leaveAutocast(region);
        return out;
    };
    // --mode generate: greedy generation as transformers' generate runs it (GenerationMixin.generate and _sample,
    // transformers 5, with max_new_tokens = min_new_tokens = new_tokens, do_sample=False, an unpadded prompt): the
    // prompt's prefill, then a decode step per further token against the cache, each layer's torch.cat replacing
    // its keys and values (the old ones dropped as the cat returns: the graph holds the only reference). Around the
    // forwards, what generate makes and keeps: the position ids from the all-ones attention mask (which it then
    // drops), a column longer per token; each forward's inputs cloned; the last position's logits copied to float32
    // and the processors' copy of them (min_new_tokens' MinNewTokensLengthLogitsProcessor clones the scores), both
    // held by their names until the next step makes the next ones; the argmax, the finished rows masked out, and
    // the token ids grown by a column; the step's outputs dropped (`del outputs`).
    // The static cache (--cache static: StaticCache, sized max_length - 1 = prompt + new tokens - 1 tokens): each
    // layer allocates its keys and values at that length in the prefill, and every step writes into them in place; a
    // decode step returns the logits only, and the cache stays where it is.
    std::function<void(const c10::IValue&)> onCache; // told each program's cache (the recorded run)
    auto generate = [&](const std::function<void(const char*)>& mark, std::int64_t newTokens) {
        auto* g = d.program->generation();
        at::Tensor ids = inputs.front().toTensor();
        const auto rows = ids.size(0);
        at::Tensor positions;
        if (g->position_ids) {
            auto mask = at::ones({rows, ids.size(1)}, ids.options().dtype(at::kLong));
            positions = mask.cumsum(-1) - 1;
            positions = positions.masked_fill(mask == 0, 0);
        }
        auto unfinished = at::ones({rows}, ids.options().dtype(at::kLong));
        std::vector<at::Tensor> cache;
        at::Tensor next, scores, tokens; // generate's locals: alive until the next step rebinds them
        const bool isStatic = options.cache == GenerationCache::Static;
        auto take = [&](c10::IValue out) {
            // the logits and the cache, or (the static decode step, one output) the logits alone
            auto elements = out.isTuple() ? out.toTupleRef().elements().vec() : std::vector<c10::IValue> {out};
            out = c10::IValue();
            if (elements.size() > 1) // the static decode step returns no cache: it wrote the one it took
                cache.clear();
            for (std::size_t i = 1; i < elements.size(); ++i) {
                if (onCache)
                    onCache(elements[i]);
                cache.push_back(elements[i].toTensor());
            }
            if (positions.defined())
                positions = at::cat({positions, positions.narrow(-1, positions.size(-1) - 1, 1) + 1}, -1);
            auto logits = elements.front().toTensor();
            elements.clear();
            next = logits.select(1, -1).to(at::kFloat, false, true);
            logits = at::Tensor();
            scores = next.clone();
            tokens = scores.argmax(-1);
            tokens = tokens * unfinished + (1 - unfinished) * 0;
            ids = at::cat({ids, tokens.unsqueeze(1)}, -1);
        };
        auto tokenInputs = [&](at::Tensor stepIds) {
            std::vector<at::Tensor> in {std::move(stepIds)};
            const auto width = in.front().size(1);
            if (positions.defined()) // as long as the ids: passed as it is; else its last columns, cloned
                in.push_back(positions.size(-1) == width ? positions
                                                         : positions.narrow(-1, positions.size(-1) - width, width).clone());
            return in;
        };
        mark("prefill");
        const auto promptLength = ids.size(1);
        auto prompt = tokenInputs(ids.clone());
        if (isStatic) // an empty tensor whose second dimension is the cache's length: no bytes
            prompt.push_back(at::empty({0, promptLength + options.new_tokens - 1}, ids.options().dtype(at::kLong)));
        auto* prefill = g->prefillOf(options.cache);
        prefill->checkInputs(prompt);
        take(prefill->run(std::move(prompt), onNode));
        if (newTokens > 1)
            mark("decode");
        for (std::int64_t step = 1; step < newTokens; ++step) {
            auto in = tokenInputs(ids.narrow(1, ids.size(1) - 1, 1).clone());
            in.reserve(in.size() + cache.size() + 1);
            if (isStatic) { // the tokens cached so far (StaticLayer's cumulative_length); the cache is kept
                in.push_back(at::scalar_tensor(promptLength + step - 1, ids.options().dtype(at::kLong)));
                in.insert(in.end(), cache.begin(), cache.end());
                take(g->static_decode->run(std::move(in), onNode));
                continue;
            }
            for (auto& t : cache)
                in.push_back(std::move(t));
            cache.clear();
            take(g->decode->run(std::move(in), onNode));
        }
        std::int64_t bytes = 0;
        for (const auto& t : cache)
            bytes += static_cast<std::int64_t>(t.numel()) * static_cast<std::int64_t>(t.element_size());
        return bytes;
    };
    auto step = [&](const std::function<void(const char*)>& mark) {
        mark("forward");
        std::optional<AutocastRegion> region;
        enterAutocast(region);
        if (onHeld)
            onHeld(held);
        auto out = d.forward(inputs, onNode);
        letGo(held.output); // `logits, loss = model(x, y)` rebinds the previous step's
        mark("loss");
        auto l = lossOf(out, loss, targets);
        letGo(held.loss);
        if (hold == "none")
            out = c10::IValue(); // `loss_fn(model(x), y)`: nothing names the output (the graph may keep it)
        leaveAutocast(region);
        if (!l.requires_grad())
            throw RunError("the model's output does not depend on any parameter that requires a gradient: "
                           "there is no backward pass to record");
        mark("backward");
        l.backward();
        if (hold != "step") { // the graph is gone: the output's and the loss's frees are part of the step
            out = c10::IValue();
            l = at::Tensor();
        }
        mark("optimizer");
        if (optimizer)
            optimizer->step();
        if (hold == "step") { // alive until the next step's forward returns
            held.output = std::move(out);
            held.loss = std::move(l);
        }
    };
    auto noMark = [](const char*) {};
    auto warmUp = [&] {
        if (generating) {
            generate(noMark, std::min<std::int64_t>(options.new_tokens, 2)); // the prefill and a decode step
            return;
        }
        if (!train) {
            forward(); // lazy initialisation and caches stay out of the record
            return;
        }
        // One unrecorded step, so that the optimizer state exists as in any step after the first.
        bool tokens = std::any_of(raw.info.input_types.begin(), raw.info.input_types.end(),
            [](const InputType& t) { return t.dtype == "int64" || t.dtype == "int32"; });
        loss = chooseLoss(forward(), options.loss, tokens);
        raw.info.loss = loss.name;
        targets = makeTargets(loss);
        if (targets.defined() && !device.is_cpu())
            targets = targets.to(device);
        if (targets.defined())
            raw.input_bytes += static_cast<std::int64_t>(targets.numel() * targets.element_size());
        step(noMark);
        setGradientsToNone(params); // PyTorch 2's zero_grad(): the recorded step makes every gradient anew
    };
    auto rethrow = [&](const std::exception& e) -> RunError {
        if (dynamic_cast<const UsageError*>(&e))
            throw; // kept whole: the CLI's usage error
        if (auto* r = dynamic_cast<const RunError*>(&e))
            return *r;
        const auto* c10error = dynamic_cast<const c10::Error*>(&e);
        auto message = firstLine(c10error ? c10error->what_without_backtrace() : e.what());
        return device.is_meta() ? explainMetaFailure(message) : explain(message);
    };

    auto castsMade = [&]() -> std::size_t { return d.program ? d.program->moduleInputCasts() : 0; };
    if (!options.record) {
        try {
            if (train)
                warmUp();
            auto t0 = Clock::now();
            if (train)
                step(noMark);
            else if (generating)
                raw.kv_cache_bytes = generate(noMark, options.new_tokens);
            else
                forward();
            if (gpu)
                CudaRecording::synchronize(device);
            raw.info.duration_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        } catch (const std::exception& e) {
            throw rethrow(e);
        }
        if (train)
            setGradientsToNone(params);
        raw.module_input_casts = castsMade();
        return raw;
    }
    if (options.warm_up || train || generating) {
        try {
            warmUp();
        } catch (const std::exception& e) {
            throw rethrow(e);
        }
    }
    raw.optimizer_state_bytes = optimizer ? optimizer->stateBytes() : 0;
    if (train && hold == "step")
        raw.notes.push_back("the loop holds the model's output and the loss until the step returns (--hold-output "
            "step, as nanoGPT's and Hugging Face's loops do): the previous step's, " + formatBytes(held.bytes())
            + ", stay alive until this step's forward has returned; --hold-output backward or none for loops that "
              "free them sooner");

    RecordState state;
    state.trace = &raw.trace;
    state.ops = &raw.ops;
    state.cancel = options.cancel;
    state.device = device;
    state.progress = &options.progress;
    state.module_count = static_cast<int>(d.modules.size());
    state.uses = &raw.forward_uses;
    state.root_module = raw.trace.strings.intern("");
    for (const char* helper : {"aten::empty", "aten::empty_strided", "aten::empty_like", "aten::new_empty",
             "aten::new_empty_strided", "aten::resize_", "aten::_empty_affine_quantized"})
        state.allocation_helpers.push_back(raw.trace.strings.intern(helper));
    std::vector<ModulePathResolver::Module> tree;
    for (const auto& m : d.modules)
        tree.push_back({m.path, m.type});
    ModulePathResolver resolver(std::move(tree));
    state.resolver = &resolver;
    std::unordered_map<std::string, std::uint32_t> nodeModuleIds;
    if (d.program) {
        state.node_modules = true;
        state.node_module = state.root_module;
        onNode = [&state, &nodeModuleIds](const std::string& path) {
            auto it = nodeModuleIds.find(path);
            if (it == nodeModuleIds.end())
                it = nodeModuleIds.emplace(path, state.trace->strings.intern(path)).first;
            state.node_module = it->second;
        };
    }
    std::unordered_map<const void*, std::string> ownerOfParameter;
    for (const auto& [name, value] : d.namedParameters()) {
        auto dot = name.rfind('.');
        state.param_owner[value.data_ptr()] = dot == std::string::npos ? "" : name.substr(0, dot);
    }
    std::vector<std::string> bufferNames;
    if (!train)
        for (const auto& [name, value] : d.namedBuffers())
            if (value.defined() && value.has_storage()
                && state.buffer_index.emplace(value.storage().data(), bufferNames.size()).second)
                bufferNames.push_back(name);
    state.buffer_read.assign(bufferNames.size(), false);
    raw.trace.reserve(4096);
    // Callbacks and state stay installed for the recorded run only, however it ends.
    struct RecordingScope {
        at::CallbackHandle handle;
        ~RecordingScope()
        {
            tls_state = nullptr;
            at::removeCallback(handle);
        }
    };
    auto started = Clock::now();
    auto mark = [&](const char* phase) {
        auto now = state.now();
        auto event = static_cast<std::uint32_t>(raw.trace.size());
        if (!raw.phases.empty()) {
            raw.phases.back().end_ns = now;
            raw.phases.back().end_event = event;
        }
        if (state.cancelled) // a GPU run checks for a cancel between ops, and stops at the next phase
            throw Cancelled();
        if (phase) {
            Phase p;
            p.name = phase;
            p.start_ns = now;
            p.first_event = event;
            raw.phases.push_back(std::move(p));
        }
        state.in_backward = phase && std::strcmp(phase, "backward") == 0;
    };
    try {
        RecordingScope scope {at::addThreadLocalCallback(at::RecordFunctionCallback(onOpStart, onOpEnd)
                                                             .needsInputs(true)
                                                             .needsOutputs(true)
                                                             .scopes({at::RecordScope::FUNCTION,
                                                                 at::RecordScope::BACKWARD_FUNCTION}))};
        QuietC10Log quiet;
        tls_state = &state;
        auto recorder = std::make_shared<AllocationRecorder>(state);
        c10::DebugInfoGuard guard(compat::profilerStateKind(), recorder);
        if (cuda) {
            // What the allocator holds now beyond weights, optimizer state and inputs: what the libraries kept
            // from the warm-up (and the 512-byte rounding of the resident tensors).
            auto resident = raw.parameter_bytes + raw.buffer_bytes + raw.optimizer_state_bytes + raw.input_bytes;
            raw.gpu.emplace();
            raw.gpu->library_bytes = std::max<std::int64_t>(0, cuda->begin() - resident);
        }
        state.start = Clock::now();
        started = state.start;
        if (train) {
            onHeld = [&state](const HeldOutput& h) { noteHeldBlocks(state, h); };
            onHeldFreed = [&state](const std::vector<HeldOutput::Block>& b) { noteHeldFrees(state, b); };
            step(mark);
            onHeld = nullptr;
            onHeldFreed = nullptr;
            mark(nullptr);
        } else if (generating) {
            onCache = [&state, &raw](const c10::IValue& v) { noteOutputs(state, v, raw.kv_cache_events); };
            raw.kv_cache_bytes = generate(mark, options.new_tokens);
            onCache = nullptr;
            mark(nullptr);
        } else {
            auto out = forward();
            noteOutputs(state, out, raw.output_events);
            out = c10::IValue(); // the output's free is part of the run
        }
        if (cuda) {
            cuda->end(*raw.gpu);
            raw.gpu->allocator_pickle = std::make_shared<const std::string>(cuda->pickle());
        }
        if (state.cancelled)
            throw Cancelled();
    } catch (const Cancelled&) {
        if (train)
            setGradientsToNone(params);
        throw;
    } catch (const std::exception& e) {
        if (train)
            setGradientsToNone(params);
        if (state.cancelled) // the interpreter wraps what the recorder threw
            throw Cancelled();
        throw rethrow(e);
    }
    for (auto i = clearedByAutocast.first; i < clearedByAutocast.second && i < raw.trace.size(); ++i)
        if (raw.trace.action[i] == Action::Free && raw.trace.partner[i] != kNoPartner)
            raw.autocast_cache_events.push_back(static_cast<std::uint32_t>(raw.trace.partner[i]));
    raw.trace.shrinkToFit();
    raw.info.duration_ms = std::chrono::duration<double, std::milli>(Clock::now() - started).count();
    raw.module_input_casts = castsMade();
    if (raw.module_input_casts > 0) {
        const auto n = raw.module_input_casts;
        raw.notes.push_back("FSDP's MixedPrecisionPolicy.cast_forward_inputs: " + std::to_string(n)
            + (n == 1 ? " floating-point input" : " floating-point inputs") + " of the units cast to " + options.dtype
            + " as each unit's forward began (" + formatBytes(d.program->moduleInputCastBytes())
            + "), the unit computing in " + options.dtype + " what it would otherwise compute in the input's type");
    }
    if (train)
        finishTrainingStep(raw, state, params);
    if (!train) {
        raw.buffer_reads_recorded = true;
        for (std::size_t i = 0; i < bufferNames.size(); ++i)
            if (!state.buffer_read[i])
                raw.unread_buffers.push_back(bufferNames[i]);
    }
    if (options.progress)
        options.progress(state.module_count, state.module_count);
    return raw;
}

} // namespace memledger
