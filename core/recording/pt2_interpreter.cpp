// One node of a torch.export graph at a time. The serialized format is torch/_export/serde/schema.py's: each
// argument a tagged union ({"as_tensor": {"name": "linear"}}, {"as_sym_ints": [...]}, {"as_scalar_type": 7}).
#include "recording/pt2_interpreter.h"

#include "recording/autocast_emulation.h"
#include "recording/pt2_archive.h"
#include "recording/pt2_arithmetic.h"
#include "recording/pt2_graph.h"
#include "support/errors.h"

#if MEMLEDGER_EXPORTED_PROGRAMS // decided in core/CMakeLists.txt

#include <ATen/ScalarOps.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <vector>

namespace memledger::pt2 {

using json = nlohmann::json;

namespace {

// torch.finfo(dtype).max of a floating type.
double largest(c10::ScalarType t)
{
    switch (t) {
    case c10::kHalf:
        return static_cast<double>(std::numeric_limits<c10::Half>::max());
    case c10::kBFloat16:
        return static_cast<double>(std::numeric_limits<c10::BFloat16>::max());
    case c10::kFloat:
        return static_cast<double>(std::numeric_limits<float>::max());
    default:
        return std::numeric_limits<double>::max();
    }
}

SizeValue sizeValue(const c10::IValue& v, const std::string& target)
{
    if (v.isDouble())
        return SizeValue::ofFloat(v.toDouble());
    if (v.isBool())
        return SizeValue::ofBool(v.toBool());
    if (v.isInt())
        return SizeValue::ofInt(v.toInt());
    throw RunError("the program computes " + target + " on a " + v.tagKind() + ", which is not a number");
}

c10::IValue ivalue(const SizeValue& v)
{
    switch (v.kind) {
    case SizeValue::Kind::Float:
        return c10::IValue(v.f);
    case SizeValue::Kind::Bool:
        return c10::IValue(v.i != 0);
    default:
        return c10::IValue(v.i);
    }
}

} // namespace

// A float the program passes: torch.finfo(x.dtype).min or .max of the exported type (an additive mask's fill)
// becomes the run type's, as the program exported in that type has it.
double Interpreter::floating(const json& v) const
{
    const double x = number(v);
    if (exported == runs || std::abs(x) != largest(exported))
        return x;
    return std::copysign(largest(runs), x);
}

const c10::IValue& Interpreter::get(const std::string& name) const
{
    if (!cast_inputs.empty())
        if (auto cast = cast_inputs.find(name); cast != cast_inputs.end())
            return cast->second;
    auto it = values.find(name);
    if (it == values.end())
        throw RunError("the program uses '" + name + "' before it is made (a damaged graph)");
    return it->second;
}

c10::IValue Interpreter::sym(const json& s) const
{
    if (s.contains("as_name"))
        return get(s.at("as_name").get<std::string>());
    for (const char* k : {"as_int", "as_float", "as_bool"})
        if (s.contains(k))
            return k[3] == 'i' ? c10::IValue(s.at(k).get<std::int64_t>())
                : k[3] == 'f'  ? c10::IValue(s.at(k).get<double>())
                               : c10::IValue(s.at(k).get<bool>());
    throw RunError("a size the program does not give");
}

at::Tensor Interpreter::tensor(const json& t) const
{
    return get(t.at("name").get<std::string>()).toTensor();
}

// One serialized argument as the value the operator takes.
c10::IValue Interpreter::value(const json& arg) const
{
    if (!arg.is_object() || arg.empty())
        throw RunError("the program has an argument without a value (a damaged graph)");
    const std::string kind = arg.begin().key();
    const json& v = arg.begin().value();
    if (kind == "as_none")
        return c10::IValue();
    if (kind == "as_tensor")
        return get(v.at("name").get<std::string>());
    if (kind == "as_tensors") {
        c10::List<at::Tensor> list;
        for (const auto& t : v)
            list.push_back(tensor(t));
        return list;
    }
    if (kind == "as_optional_tensors") {
        c10::List<std::optional<at::Tensor>> list;
        for (const auto& t : v)
            list.push_back(t.contains("as_tensor") ? std::optional<at::Tensor>(tensor(t.at("as_tensor")))
                                                   : std::nullopt);
        return list;
    }
    if (kind == "as_optional_tensor")
        return v.contains("as_tensor") ? c10::IValue(tensor(v.at("as_tensor"))) : c10::IValue();
    if (kind == "as_int")
        return v.get<std::int64_t>();
    if (kind == "as_ints")
        return v.get<std::vector<std::int64_t>>();
    if (kind == "as_float")
        return floating(v);
    if (kind == "as_floats") {
        std::vector<double> out;
        for (const auto& f : v)
            out.push_back(floating(f));
        return out;
    }
    if (kind == "as_string")
        return v.get<std::string>();
    if (kind == "as_strings") {
        c10::List<std::string> list;
        for (const auto& s : v)
            list.push_back(s.get<std::string>());
        return list;
    }
    if (kind == "as_bool")
        return v.get<bool>();
    if (kind == "as_bools") {
        c10::List<bool> list;
        for (const auto& b : v)
            list.push_back(b.get<bool>());
        return list;
    }
    if (kind == "as_sym_int" || kind == "as_sym_float" || kind == "as_sym_bool")
        return sym(v);
    if (kind == "as_sym_ints") {
        std::vector<std::int64_t> out;
        for (const auto& s : v)
            out.push_back(sym(s).toInt());
        return out;
    }
    if (kind == "as_sym_floats") {
        std::vector<double> out;
        for (const auto& s : v)
            out.push_back(sym(s).toDouble());
        return out;
    }
    if (kind == "as_sym_bools") {
        c10::List<bool> out;
        for (const auto& s : v)
            out.push_back(sym(s).toBool());
        return out;
    }
    if (kind == "as_scalar_type") {
        auto t = scalarOf(v.get<int>());
        if (autocast_type && t == autocast_type->from)
            return static_cast<std::int64_t>(autocast_type->to.value_or(autocast_lower));
        return static_cast<std::int64_t>(t == exported && !keep_type ? runs : t);
    }
    if (kind == "as_memory_format")
        return static_cast<std::int64_t>(memoryFormatOf(v.get<int>()));
    if (kind == "as_layout")
        return static_cast<std::int64_t>(layoutOf(v.get<int>()));
    if (kind == "as_device")
        return device; // the run's: a program exported on another device runs here
    if (kind == "as_int_lists") {
        c10::List<c10::List<std::int64_t>> out;
        for (const auto& l : v)
            out.push_back(c10::List<std::int64_t>(l.get<std::vector<std::int64_t>>()));
        return out;
    }
    throw RunError("the program passes an argument of kind " + kind + ", which memledger does not run");
}

// A node output (or a list of them) bound to the value the operator returned.
void Interpreter::bind(const json& out, const c10::IValue& v)
{
    if (!out.is_object() || out.empty())
        return;
    const std::string kind = out.begin().key();
    const json& o = out.begin().value();
    if (kind == "as_tensor") {
        values[o.at("name").get<std::string>()] = v;
    } else if (kind == "as_tensors") {
        auto list = v.toTensorList();
        for (std::size_t i = 0; i < o.size() && i < list.size(); ++i)
            values[o[i].at("name").get<std::string>()] = list.get(i);
    } else if (kind == "as_optional_tensors") {
        auto list = v.toListRef();
        for (std::size_t i = 0; i < o.size() && i < list.size(); ++i)
            if (o[i].contains("as_tensor"))
                values[o[i].at("as_tensor").at("name").get<std::string>()] = list[i];
    } else if (kind == "as_sym_int" || kind == "as_sym_float" || kind == "as_sym_bool") {
        if (o.contains("as_name"))
            values[o.at("as_name").get<std::string>()] = v;
    } else if (kind == "as_sym_ints") {
        auto list = v.toListRef();
        for (std::size_t i = 0; i < o.size() && i < list.size(); ++i)
            if (o[i].contains("as_name"))
                values[o[i].at("as_name").get<std::string>()] = list[i];
    }
    // as_none: an output nobody reads
}

void Interpreter::callPython(const std::string& target, const json& inputs, const json& outputs)
{
    std::vector<SizeValue> args;
    for (const auto& in : inputs)
        args.push_back(sizeValue(value(in.at("arg")), target));
    auto result = ivalue(pythonArithmetic(target, args));
    if (!outputs.empty())
        bind(outputs.front(), result);
}

void Interpreter::call(const c10::OperatorHandle& op, const json& inputs, const json& outputs)
{
    const auto& schema = op.schema();
    torch::jit::Stack stack;
    stack.reserve(schema.arguments().size());
    for (const auto& a : schema.arguments()) {
        const json* given = nullptr;
        for (const auto& in : inputs)
            if (in.value("name", std::string()) == a.name()) {
                given = &in.at("arg");
                break;
            }
        if (given) {
            auto v = value(*given);
            // A Python number passed where the schema takes a Tensor (`x + 1e-6` as add.Tensor): a wrapped
            // number, as Python's argument parser makes it, so that it does not promote the result's type.
            if ((v.isDouble() || v.isInt() || v.isBool()) && a.type()->kind() == c10::TypeKind::TensorType) {
                auto t = at::scalar_to_tensor(v.toScalar());
                t.unsafeGetTensorImpl()->set_wrapped_number(true);
                v = t;
            }
            stack.push_back(std::move(v));
        }
        else if (a.default_value())
            stack.push_back(*a.default_value());
        else
            throw RunError("the program calls " + schema.name() + " without its argument '" + a.name() + "'");
    }
    // --autocast on the meta device: CUDA autocast's casts of the arguments, made here (autocast_emulation.h).
    if (auto other = autocastBeforeCall(op, stack))
        other->callBoxed(stack);
    else
        op.callBoxed(stack);
    for (std::size_t i = 0; i < outputs.size() && i < stack.size(); ++i)
        bind(outputs[i], stack[i]);
}

} // namespace memledger::pt2

#endif
