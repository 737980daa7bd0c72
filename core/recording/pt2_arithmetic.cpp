#include "recording/pt2_arithmetic.h"

#include "support/errors.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace memledger::pt2 {

namespace {

[[noreturn]] void refuse(const std::string& target, const std::string& why)
{
    throw RunError("the program computes " + target + " " + why);
}

// A float made an int as Python's int(), math.floor() and math.ceil() make it: refused when it is NaN, infinite
// or past 64 bits (Python's int has no bound; memledger's sizes do).
std::int64_t toInt(double x, const std::string& target)
{
    if (!std::isfinite(x))
        refuse(target, "of a float that is not finite (" + std::to_string(x) + "), which has no integer value");
    // 2^63 is exactly a double; every double below it and at or above -2^63 fits.
    if (x >= 9223372036854775808.0 || x < -9223372036854775808.0)
        refuse(target, "to an integer past 64 bits (" + std::to_string(x) + ")");
    return static_cast<std::int64_t>(x);
}

// x + y, x - y or x * y on 64-bit ints (`op` one of '+', '-', '*'), refused when it overflows.
std::int64_t checked(char op, std::int64_t x, std::int64_t y, const std::string& target)
{
    std::int64_t r = 0;
    const bool overflow = op == '+' ? __builtin_add_overflow(x, y, &r)
        : op == '-'                 ? __builtin_sub_overflow(x, y, &r)
                                    : __builtin_mul_overflow(x, y, &r);
    if (overflow)
        refuse(target, "on integers whose result does not fit 64 bits");
    return r;
}

void nonZero(double y, const std::string& target)
{
    if (y == 0)
        refuse(target, "with a divisor of zero (Python raises ZeroDivisionError)");
}

} // namespace

SizeValue pythonArithmetic(const std::string& target, const std::vector<SizeValue>& a)
{
    const auto name = target.substr(target.rfind('.') == std::string::npos ? 0 : target.rfind('.') + 1);
    if (a.size() == 1) {
        const auto& x = a[0];
        if (name == "neg")
            return x.integral() ? SizeValue::ofInt(checked('-', 0, x.i, target))
                                : SizeValue::ofFloat(-x.f);
        if (name == "not_" || name == "sym_not")
            return SizeValue::ofBool(x.number() == 0);
        if (name == "ceil")
            return SizeValue::ofInt(x.integral() ? x.i : toInt(std::ceil(x.f), target));
        if (name == "floor")
            return SizeValue::ofInt(x.integral() ? x.i : toInt(std::floor(x.f), target));
        if (name == "sym_float")
            return SizeValue::ofFloat(x.number());
        if (name == "sym_int" || name == "trunc")
            return SizeValue::ofInt(x.integral() ? x.i : toInt(x.f, target));
        if (name == "sqrt" || name == "sym_sqrt") {
            if (x.number() < 0)
                refuse(target, "of a negative number (Python raises ValueError)");
            return SizeValue::ofFloat(std::sqrt(x.number()));
        }
        if (name == "abs")
            return x.integral()
                ? SizeValue::ofInt(x.i < 0 ? checked('-', 0, x.i, target) : x.i)
                : SizeValue::ofFloat(std::abs(x.f));
    }
    if (a.size() == 2) {
        const auto& x = a[0];
        const auto& y = a[1];
        const bool ints = x.integral() && y.integral();
        if (name == "add")
            return ints ? SizeValue::ofInt(checked('+', x.i, y.i, target))
                        : SizeValue::ofFloat(x.number() + y.number());
        if (name == "sub")
            return ints ? SizeValue::ofInt(checked('-', x.i, y.i, target))
                        : SizeValue::ofFloat(x.number() - y.number());
        if (name == "mul")
            return ints ? SizeValue::ofInt(checked('*', x.i, y.i, target))
                        : SizeValue::ofFloat(x.number() * y.number());
        if (name == "truediv") {
            nonZero(y.number(), target);
            return SizeValue::ofFloat(x.number() / y.number());
        }
        if (name == "floordiv") {
            nonZero(y.number(), target);
            if (ints) {
                if (x.i == std::numeric_limits<std::int64_t>::min() && y.i == -1)
                    refuse(target, "on integers whose result does not fit 64 bits");
                auto q = x.i / y.i;
                if (x.i % y.i != 0 && ((x.i < 0) != (y.i < 0)))
                    --q;
                return SizeValue::ofInt(q);
            }
            return SizeValue::ofFloat(std::floor(x.number() / y.number()));
        }
        if (name == "mod") {
            nonZero(y.number(), target);
            if (ints) {
                if (y.i == -1)
                    return SizeValue::ofInt(0); // x % -1, which INT64_MIN % -1 leaves undefined in C++
                auto m = x.i % y.i;
                if (m != 0 && ((m < 0) != (y.i < 0)))
                    m += y.i;
                return SizeValue::ofInt(m);
            }
            return SizeValue::ofFloat(x.number() - std::floor(x.number() / y.number()) * y.number());
        }
        if (name == "pow" || name == "pow_by_natural") {
            const double p = std::pow(x.number(), y.number());
            if (ints && y.i >= 0)
                return SizeValue::ofInt(toInt(std::nearbyint(p), target));
            return SizeValue::ofFloat(p);
        }
        if (name == "eq")
            return SizeValue::ofBool(x.number() == y.number());
        if (name == "ne")
            return SizeValue::ofBool(x.number() != y.number());
        if (name == "lt")
            return SizeValue::ofBool(x.number() < y.number());
        if (name == "le")
            return SizeValue::ofBool(x.number() <= y.number());
        if (name == "gt")
            return SizeValue::ofBool(x.number() > y.number());
        if (name == "ge")
            return SizeValue::ofBool(x.number() >= y.number());
        if (name == "and_")
            return SizeValue::ofBool(x.number() != 0 && y.number() != 0);
        if (name == "or_")
            return SizeValue::ofBool(x.number() != 0 || y.number() != 0);
        if (name == "sym_max" || name == "max")
            return ints ? SizeValue::ofInt(std::max(x.i, y.i)) : SizeValue::ofFloat(std::max(x.number(), y.number()));
        if (name == "sym_min" || name == "min")
            return ints ? SizeValue::ofInt(std::min(x.i, y.i)) : SizeValue::ofFloat(std::min(x.number(), y.number()));
    }
    throw RunError("the program computes " + target + " on " + std::to_string(a.size())
        + " values, which memledger cannot evaluate");
}

} // namespace memledger::pt2
