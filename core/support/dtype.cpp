#include "support/dtype.h"

namespace memledger {

bool isSupportedDtype(const std::string& dtype)
{
    return dtype == "float32" || dtype == "bfloat16" || dtype == "float16";
}

int dtypeSize(const std::string& dtype)
{
    if (dtype == "float32" || dtype == "int32")
        return 4;
    if (dtype == "float16" || dtype == "bfloat16" || dtype == "int16")
        return 2;
    if (dtype == "float64" || dtype == "int64")
        return 8;
    if (dtype == "int8" || dtype == "uint8" || dtype == "bool")
        return 1;
    return 0;
}

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
