#include "support/dtype.h"

namespace memledger {

bool isSupportedDtype(const std::string& dtype)
{
    return dtype == "float32" || dtype == "bfloat16" || dtype == "float16";
}

namespace {
const std::string kMixed = "-mixed";
}

bool isMixedPrecision(const std::string& precision)
{
    return precision.size() > kMixed.size()
        && precision.compare(precision.size() - kMixed.size(), kMixed.size(), kMixed) == 0;
}

bool isSupportedPrecision(const std::string& precision)
{
    return isSupportedDtype(precision) || (isMixedPrecision(precision) && isSupportedDtype(autocastDtypeOf(precision)));
}

std::string masterDtypeOf(const std::string& precision)
{
    return isMixedPrecision(precision) || isFsdpRecordPrecision(precision) ? std::string("float32") : precision;
}

std::string autocastDtypeOf(const std::string& precision)
{
    return isMixedPrecision(precision) ? precision.substr(0, precision.size() - kMixed.size()) : std::string();
}

namespace {
const std::string kFsdp = "-fsdp";
}

bool isFsdpRecordPrecision(const std::string& precision)
{
    return precision.size() > kFsdp.size()
        && precision.compare(precision.size() - kFsdp.size(), kFsdp.size(), kFsdp) == 0
        && isSupportedDtype(precision.substr(0, precision.size() - kFsdp.size()));
}

std::string fsdpRecordPrecision(const std::string& dtype)
{
    return dtype + kFsdp;
}

std::string recordDtypeOf(const std::string& precision)
{
    return isFsdpRecordPrecision(precision) ? precision.substr(0, precision.size() - kFsdp.size()) : masterDtypeOf(precision);
}

std::string precisionOf(const std::string& dtype, const std::string& autocast)
{
    return autocast.empty() ? dtype : autocast + kMixed;
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

std::string InputType::runDtype(const std::string& run) const
{
    if (isFloatingDtype(dtype) && run != "float32" && isFloatingDtype(run))
        return run;
    return dtype;
}

bool InputType::isToken() const
{
    return dtype == "int64" || dtype == "int32" || dtype == "bool";
}

bool isInputDtype(const std::string& dtype)
{
    return dtype == "float32" || dtype == "float16" || dtype == "bfloat16" || dtype == "int64" || dtype == "int32"
        || dtype == "bool";
}

InputType inputTypeAt(const std::vector<InputType>& types, std::size_t i)
{
    return i < types.size() ? types[i] : InputType {};
}

std::int64_t batchOfInputs(const std::vector<std::vector<std::int64_t>>& shapes, const std::vector<InputType>& types)
{
    if (shapes.empty())
        return 0;
    const int list = inputTypeAt(types, 0).list;
    if (list < 0)
        return shapes.front().empty() ? 0 : shapes.front().front();
    std::int64_t n = 0;
    while (static_cast<std::size_t>(n) < shapes.size() && inputTypeAt(types, static_cast<std::size_t>(n)).list == list)
        ++n;
    return n;
}

std::size_t argumentCount(const std::vector<InputType>& types, std::size_t count)
{
    std::size_t out = 0;
    for (std::size_t i = 0; i < count; ++i)
        if (inputTypeAt(types, i).list < 0 || i == 0 || inputTypeAt(types, i - 1).list != inputTypeAt(types, i).list)
            ++out;
    return out;
}

void setInputBatch(std::vector<std::vector<std::int64_t>>& shapes, std::vector<InputType>& types, std::int64_t batch)
{
    std::vector<std::vector<std::int64_t>> outShapes;
    std::vector<InputType> outTypes;
    for (std::size_t i = 0; i < shapes.size();) {
        const auto type = inputTypeAt(types, i);
        if (type.list < 0) {
            outShapes.push_back(shapes[i]);
            if (!outShapes.back().empty())
                outShapes.back()[0] = batch;
            outTypes.push_back(type);
            ++i;
            continue;
        }
        auto end = i;
        while (end < shapes.size() && inputTypeAt(types, end).list == type.list)
            ++end;
        for (std::int64_t k = 0; k < batch; ++k) {
            const auto from = i + static_cast<std::size_t>(k) % (end - i);
            outShapes.push_back(shapes[from]);
            outTypes.push_back(inputTypeAt(types, from));
        }
        i = end;
    }
    shapes = std::move(outShapes);
    types = std::move(outTypes);
}

std::int64_t inputBytes(
    const std::vector<std::vector<std::int64_t>>& shapes, const std::vector<InputType>& types, const std::string& runDtype)
{
    std::int64_t bytes = 0;
    for (std::size_t i = 0; i < shapes.size(); ++i)
        bytes += numelOf(shapes[i]) * dtypeSize(inputTypeAt(types, i).runDtype(runDtype));
    return bytes;
}

} // namespace memledger
