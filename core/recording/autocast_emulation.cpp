// PyTorch's CUDA autocast for the exported program's interpreter on the meta device: the rules of ATen's
// autocast kernels (aten/src/ATen/autocast_mode.{h,cpp}), applied to a node's arguments before it is called.
//   lower_precision_fp: every eligible tensor cast to the autocast dtype, a float32 leaf that requires grad (a
//                       weight) through the cache, which keeps its cast until the region ends;
//   fp32:               every eligible tensor cast to float32;
//   fp32_set_opt_dtype: the op's `dtype` argument set to float32 where the caller left it None;
//   fp32_append_dtype:  the op redispatched to its overload that takes a dtype, with float32;
//   promote:            every eligible tensor cast to the widest eligible type.
// "Eligible": a defined floating-point tensor of the run's device, not float64.
#include "recording/autocast_emulation.h"

#include "support/errors.h"

#include <ATen/autocast_mode.h>
#include <ATen/core/List.h>
#include <torch/torch.h>

#include <memory>
#include <unordered_map>

namespace memledger {

namespace {

enum class Rule { None, LowerPrecision, Float32, Float32SetOptDtype, Float32AppendDtype, Promote };

std::string trimmed(std::string s)
{
    while (!s.empty() && (s.front() == ' ' || s.front() == '"'))
        s.erase(s.begin());
    while (!s.empty() && (s.back() == ' ' || s.back() == '"'))
        s.pop_back();
    return s;
}

struct Policy {
    std::unordered_map<std::string, Rule> rules; // "aten::name.overload" ("aten::mm." for the default overload)
    std::unordered_map<std::string, std::string> redispatch; // fp32_append_dtype: overload -> the overload with dtype
};

const Policy& policy()
{
    static const Policy p = [] {
        Policy made;
        [[maybe_unused]] auto add = [&](Rule rule, const std::string& spelled) { // "op" or "op, overload"
            auto comma = spelled.find(',');
            auto name = trimmed(spelled.substr(0, comma));
            auto overload = comma == std::string::npos ? std::string() : trimmed(spelled.substr(comma + 1));
            made.rules["aten::" + name + "." + overload] = rule;
        };
#ifdef AT_FORALL_LOWER_PRECISION_FP
#define MEMLEDGER_LOWER(...) add(Rule::LowerPrecision, #__VA_ARGS__);
#define MEMLEDGER_FP32(...) add(Rule::Float32, #__VA_ARGS__);
#define MEMLEDGER_SET_OPT(...) add(Rule::Float32SetOptDtype, #__VA_ARGS__);
#define MEMLEDGER_PROMOTE(...) add(Rule::Promote, #__VA_ARGS__);
        AT_FORALL_LOWER_PRECISION_FP(MEMLEDGER_LOWER)
        AT_FORALL_FP32(MEMLEDGER_FP32)
        AT_FORALL_FP32_SET_OPT_DTYPE(MEMLEDGER_SET_OPT)
        AT_FORALL_PROMOTE(MEMLEDGER_PROMOTE)
#undef MEMLEDGER_LOWER
#undef MEMLEDGER_FP32
#undef MEMLEDGER_SET_OPT
#undef MEMLEDGER_PROMOTE
#endif
#ifdef AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE
        // norm's two overloads without a dtype: autocast calls the overload that takes one, with float32.
        const std::unordered_map<std::string, std::string> withDtype = {
            {"norm.Scalar", "ScalarOpt_dtype"}, {"norm.ScalarOpt_dim", "ScalarOpt_dim_dtype"}};
        [[maybe_unused]] auto addRedispatch = [&](const std::string& spelled) {
            auto name = trimmed(spelled);
            auto found = withDtype.find(name);
            if (found == withDtype.end())
                return; // an op of a later libtorch: let through, as before autocast knew it
            made.rules["aten::" + name] = Rule::Float32AppendDtype;
            made.redispatch["aten::" + name] = found->second;
        };
#define MEMLEDGER_REDISPATCH(op, name, ...) addRedispatch(name);
        AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(MEMLEDGER_REDISPATCH)
#undef MEMLEDGER_REDISPATCH
#endif
        return made;
    }();
    return p;
}

struct Region {
    c10::ScalarType lower;
    bool cache;
    // cached_cast's cache: a weight's cast, kept (with the weight) until the region ends.
    std::unordered_map<c10::TensorImpl*, std::pair<at::Tensor, at::Tensor>> casts;
    std::unordered_map<const c10::FunctionSchema*, Rule> ruleOf; // the policy, looked up once per operator
};

thread_local Region* active = nullptr;

bool eligible(const at::Tensor& t)
{
    return t.defined() && t.is_meta() && t.is_floating_point() && t.scalar_type() != at::kDouble;
}

at::Tensor castTensor(Region& r, const at::Tensor& t, c10::ScalarType to)
{
    if (!eligible(t) || t.scalar_type() == to)
        return t;
    const bool cacheable = r.cache && to == r.lower && t.scalar_type() == at::kFloat && t.requires_grad()
        && t.is_leaf() && !t.is_view();
    if (!cacheable)
        return t.to(to);
    auto found = r.casts.find(t.unsafeGetTensorImpl());
    if (found != r.casts.end())
        return found->second.second;
    auto cast = t.to(to);
    r.casts.emplace(t.unsafeGetTensorImpl(), std::make_pair(t, cast));
    return cast;
}

c10::IValue castValue(Region& r, const c10::IValue& v, c10::ScalarType to)
{
    if (v.isTensor())
        return castTensor(r, v.toTensor(), to);
    if (v.isTensorList()) {
        c10::List<at::Tensor> cast;
        for (const at::Tensor& t : v.toTensorList())
            cast.push_back(castTensor(r, t, to));
        return cast;
    }
    return v;
}

// autocast's promote_type: the autocast dtype, widened to float32 where an eligible argument is float32.
c10::ScalarType widest(Region& r, const torch::jit::Stack& stack, std::size_t first)
{
    auto type = r.lower;
    auto see = [&](const at::Tensor& t) {
        if (eligible(t) && t.scalar_type() == at::kFloat)
            type = at::kFloat;
    };
    for (auto i = first; i < stack.size(); ++i) {
        if (stack[i].isTensor())
            see(stack[i].toTensor());
        else if (stack[i].isTensorList())
            for (const at::Tensor& t : stack[i].toTensorList())
                see(t);
    }
    return type;
}

Rule ruleFor(Region& r, const c10::OperatorHandle& op)
{
    const auto& schema = op.schema();
    auto known = r.ruleOf.find(&schema);
    if (known != r.ruleOf.end())
        return known->second;
    const auto& rules = policy().rules;
    auto found = rules.find(schema.name() + "." + schema.overload_name());
    auto rule = found == rules.end() ? Rule::None : found->second;
    r.ruleOf.emplace(&schema, rule);
    return rule;
}

} // namespace

bool autocastEmulationAvailable()
{
    return !policy().rules.empty();
}

AutocastEmulationScope::AutocastEmulationScope(c10::ScalarType lower, bool cache)
{
    if (active)
        throw RunError("internal: nested autocast regions on the meta device");
    active = new Region {lower, cache, {}, {}};
}

AutocastEmulationScope::~AutocastEmulationScope()
{
    close();
}

void AutocastEmulationScope::close()
{
    if (!active)
        return;
    std::unique_ptr<Region> region(active);
    active = nullptr;
    region->casts.clear(); // the casts only the cache held are freed here
}

bool autocastEmulationActive()
{
    return active != nullptr;
}

std::optional<c10::ScalarType> autocastEmulationType()
{
    return active ? std::optional<c10::ScalarType>(active->lower) : std::nullopt;
}

torch::jit::Stack callUnderAutocast(const char* name, const char* overload, torch::jit::Stack stack)
{
    auto op = c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
    if (auto other = autocastBeforeCall(op, stack))
        other->callBoxed(stack);
    else
        op.callBoxed(stack);
    return stack;
}

std::optional<c10::OperatorHandle> autocastBeforeCall(const c10::OperatorHandle& op, torch::jit::Stack& stack)
{
    if (!active)
        return std::nullopt;
    Region& r = *active;
    const auto n = op.schema().arguments().size();
    const std::size_t first = stack.size() >= n ? stack.size() - n : 0;
    auto firstEligible = [&] { return first < stack.size() && stack[first].isTensor() && eligible(stack[first].toTensor()); };
    switch (ruleFor(r, op)) {
    case Rule::None:
        return std::nullopt;
    case Rule::LowerPrecision:
        for (auto i = first; i < stack.size(); ++i)
            stack[i] = castValue(r, stack[i], r.lower);
        return std::nullopt;
    case Rule::Float32:
        for (auto i = first; i < stack.size(); ++i)
            stack[i] = castValue(r, stack[i], at::kFloat);
        return std::nullopt;
    case Rule::Promote: {
        auto to = widest(r, stack, first);
        for (auto i = first; i < stack.size(); ++i)
            stack[i] = castValue(r, stack[i], to);
        return std::nullopt;
    }
    case Rule::Float32SetOptDtype: {
        if (!firstEligible())
            return std::nullopt;
        const auto& args = op.schema().arguments();
        for (std::size_t k = 0; k < args.size(); ++k)
            if (args[k].name() == "dtype" && stack[first + k].isNone())
                stack[first + k] = c10::IValue(at::kFloat);
        return std::nullopt;
    }
    case Rule::Float32AppendDtype: {
        if (!firstEligible())
            return std::nullopt;
        const auto& schema = op.schema();
        auto overload = policy().redispatch.at(schema.name() + "." + schema.overload_name());
        auto other = c10::Dispatcher::singleton().findSchema({schema.name(), overload});
        if (!other)
            return std::nullopt;
        stack.push_back(c10::IValue(at::kFloat));
        return std::optional<c10::OperatorHandle>(*other);
    }
    }
    return std::nullopt;
}

} // namespace memledger
