#pragma once
// Private to core/recording: what runs one node of a torch.export graph. The values a run has made, by their
// graph names; a node's serialized arguments (serde's tagged unions: as_tensor, as_sym_ints, as_scalar_type, ...)
// made into the values an ATen operator takes, its call through the dispatcher, and its outputs bound to their
// names; Python's arithmetic on sizes (pt2_arithmetic.h) for the nodes that are not operators.
#include "recording/pt2_cast_policy.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <unordered_map>

namespace memledger::pt2 {

class Interpreter {
public:
    std::unordered_map<std::string, c10::IValue> values; // by graph name
    // What get() reads in place of a value while a module call that casts its inputs runs (FSDP2's
    // cast_forward_inputs, ExportedProgram::castModuleInputs): the cast copy, by the original's graph name.
    std::unordered_map<std::string, c10::IValue> cast_inputs;
    c10::Device device {c10::kCPU}; // the run's: every as_device argument names it
    // The type the program was exported in, and the one it runs in (ExportedProgram::convert).
    c10::ScalarType exported = c10::kFloat, runs = c10::kFloat;
    bool keep_type = false; // the node being run keeps the exported type (its source names it)
    // Under autocast: whose rules (nullopt: no autocast), its type, and what it makes of the type the node being run
    // passes (null: nothing), where the source takes that type from a tensor's (pt2_cast_policy.h).
    std::optional<AutocastRules> autocast_rules;
    c10::ScalarType autocast_lower = c10::kBFloat16;
    const AutocastType* autocast_type = nullptr;

    // An interpreter of the same run (device, types) with no values: a subgraph's, or a recomputation's.
    Interpreter fresh() const
    {
        Interpreter i;
        i.device = device;
        i.exported = exported;
        i.runs = runs;
        i.autocast_rules = autocast_rules;
        i.autocast_lower = autocast_lower;
        return i;
    }

    // The value named `name`; throws RunError when the run has not made it.
    const c10::IValue& get(const std::string& name) const;
    // One serialized argument as the value an operator takes.
    c10::IValue value(const nlohmann::json& arg) const;
    // A node's output (or a list of them) bound to the value the operator returned.
    void bind(const nlohmann::json& out, const c10::IValue& v);

    // Node `inputs` -> `outputs` through operator `op`, its arguments matched to the schema's by name.
    void call(const c10::OperatorHandle& op, const nlohmann::json& inputs, const nlohmann::json& outputs);
    // Node `inputs` -> `outputs` by Python's arithmetic `target` (_operator.*, math.*, torch.sym_*).
    void callPython(const std::string& target, const nlohmann::json& inputs, const nlohmann::json& outputs);

private:
    c10::IValue sym(const nlohmann::json& s) const;
    at::Tensor tensor(const nlohmann::json& t) const;
    double floating(const nlohmann::json& v) const;
};

} // namespace memledger::pt2
