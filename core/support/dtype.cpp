#include "support/dtype.h"

namespace memledger {

bool isFloatingDtype(const std::string& dtype)
{
    return dtype == "float32" || dtype == "float16" || dtype == "bfloat16" || dtype == "float64";
}

std::int64_t numelOf(const std::vector<std::int64_t>& shape)
{
    std::int64_t n = 1;
    for (auto d : shape)
        n *= d;
    return n;
}

} // namespace memledger
