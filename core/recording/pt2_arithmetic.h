#pragma once
// Private to core/recording: Python's arithmetic on sizes (_operator.*, math.*, torch.sym_*) that a torch.export
// graph computes between its ops, on ints, floats and bools as Python has it, but checked: a division by zero, an
// int that overflows 64 bits, or a float that is not finite (or out of range) where an int is wanted is refused
// with the reason, never undefined. Without libtorch: the loader folds constant operands with it (pt2_graph.h)
// and the interpreter runs it (pt2_interpreter.h).
#include <cstdint>
#include <string>
#include <vector>

namespace memledger::pt2 {

struct SizeValue {
    enum class Kind { Int, Float, Bool } kind = Kind::Int;
    std::int64_t i = 0; // Int, and Bool as 0 or 1
    double f = 0; // Float

    static SizeValue ofInt(std::int64_t v) { return {Kind::Int, v, 0}; }
    static SizeValue ofFloat(double v) { return {Kind::Float, 0, v}; }
    static SizeValue ofBool(bool v) { return {Kind::Bool, v ? 1 : 0, 0}; }
    bool integral() const { return kind != Kind::Float; } // Python's bool is an int
    double number() const { return kind == Kind::Float ? f : static_cast<double>(i); }
};

// `target` ("_operator.floordiv", "math.ceil", "torch.sym_max") on `args`. Throws RunError naming the operator and
// the reason when Python would raise, when an int result does not fit 64 bits, or when it is not one memledger
// evaluates.
SizeValue pythonArithmetic(const std::string& target, const std::vector<SizeValue>& args);

} // namespace memledger::pt2
