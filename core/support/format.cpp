#include "support/format.h"

#include <cstring>

#include <cctype>
#include <cmath>
#include <algorithm>
#include <cstdio>
#include <stdexcept>

namespace memledger {

std::string formatBytes(std::int64_t bytes)
{
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = static_cast<double>(bytes < 0 ? -bytes : bytes);
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        ++u;
    }
    char buf[48];
    if (u == 0)
        std::snprintf(buf, sizeof buf, "%s%lld B", bytes < 0 ? "-" : "", static_cast<long long>(v));
    else
        std::snprintf(buf, sizeof buf, "%s%.*f %s", bytes < 0 ? "-" : "", v >= 100 ? 1 : 2, v, units[u]);
    return buf;
}

std::optional<std::int64_t> parseBytes(const std::string& text)
{
    std::size_t i = 0;
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i])))
        ++i;
    std::size_t start = i;
    while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
        ++i;
    if (i == start)
        return std::nullopt;
    double v = 0;
    try {
        v = std::stod(text.substr(start, i - start));
    } catch (const std::exception&) {
        return std::nullopt; // "." or "1.2.3"
    }
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i])))
        ++i;
    std::string unit;
    for (; i < text.size(); ++i)
        if (!std::isspace(static_cast<unsigned char>(text[i])))
            unit += static_cast<char>(std::tolower(static_cast<unsigned char>(text[i])));
    double scale = 1;
    if (unit.empty() || unit == "b")
        scale = 1;
    else if (unit == "k" || unit == "kib")
        scale = 1024.0;
    else if (unit == "m" || unit == "mib")
        scale = 1024.0 * 1024;
    else if (unit == "g" || unit == "gib")
        scale = 1024.0 * 1024 * 1024;
    else if (unit == "t" || unit == "tib")
        scale = 1024.0 * 1024 * 1024 * 1024;
    else if (unit == "kb")
        scale = 1e3;
    else if (unit == "mb")
        scale = 1e6;
    else if (unit == "gb")
        scale = 1e9;
    else if (unit == "tb")
        scale = 1e12;
    else
        return std::nullopt;
    return static_cast<std::int64_t>(std::llround(v * scale));
}

namespace {

struct GpuPreset {
    const char* name;
    double gib; // total memory as PyTorch reports it for the card, the smallest of its variants
};
// Rounded down over the variants (PCIe, SXM, drivers) seen in PyTorch's own out-of-memory messages ("GPU 0 has a
// total capacity of 79.15 GiB"), so that a "fits" on the preset fits the card.
constexpr GpuPreset kGpuPresets[] = {
    {"H200", 139.70},
    {"H100-80GB", 79.10},
    {"H100", 79.10},
    {"A100-80GB", 79.15},
    {"A100-40GB", 39.39},
    {"L40S", 44.39},
    {"L4", 22.05},
    {"A10G", 22.05},
    {"4090", 23.64},
    {"3090", 23.68},
    {"V100-32GB", 31.73},
    {"V100-16GB", 15.77},
    {"T4", 14.74},
};

std::int64_t presetBytes(const GpuPreset& p)
{
    return static_cast<std::int64_t>(p.gib * 1024.0 * 1024 * 1024);
}

std::string presetKey(const std::string& text)
{
    std::string key;
    for (char c : text)
        if (std::isalnum(static_cast<unsigned char>(c)))
            key += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    for (const char* prefix : {"NVIDIA", "RTX", "GEFORCE"})
        if (key.rfind(prefix, 0) == 0 && key.size() > std::strlen(prefix))
            key = key.substr(std::strlen(prefix));
    return key;
}

} // namespace

std::optional<std::int64_t> parseBudget(const std::string& text)
{
    // A card first: "4090" is the GPU, not 4,090 bytes.
    const auto key = presetKey(text);
    for (const auto& p : kGpuPresets)
        if (presetKey(p.name) == key)
            return presetBytes(p);
    return parseBytes(text);
}

std::vector<std::pair<std::string, std::int64_t>> gpuPresets()
{
    std::vector<std::pair<std::string, std::int64_t>> out;
    for (const auto& p : kGpuPresets)
        if (std::string(p.name) != "H100") // an alias of H100-80GB
            out.emplace_back(p.name, presetBytes(p));
    std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    return out;
}

std::string gpuPresetList()
{
    std::string out;
    for (const auto& p : kGpuPresets) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%s (%.2f GiB)", p.name, p.gib);
        out += (out.empty() ? "" : ", ") + std::string(buf);
    }
    return out;
}

namespace {

std::string trimmed(std::string part)
{
    while (!part.empty() && std::isspace(static_cast<unsigned char>(part.back())))
        part.pop_back();
    while (!part.empty() && std::isspace(static_cast<unsigned char>(part.front())))
        part.erase(part.begin());
    return part;
}

// "=V" of an input: a number, or true/false for any type.
double parseFill(const std::string& part, const std::string& text, const InputType& type)
{
    auto lower = text;
    for (auto& c : lower)
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower == "true")
        return 1;
    if (lower == "false")
        return 0;
    std::size_t used = 0;
    double v = 0;
    try {
        v = std::stod(text, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (text.empty() || used != text.size() || !std::isfinite(v))
        throw std::invalid_argument("input '" + part + "': '" + text + "' is not a value to fill it with (a number, true or false)");
    if (!isFloatingDtype(type.dtype) && v != std::floor(v))
        throw std::invalid_argument("input '" + part + "': " + type.dtype + " takes whole numbers, not " + text);
    return v;
}

} // namespace

ParsedInputs parseInputs(const std::string& text)
{
    auto positive = [](const std::string& part, const std::string& dim) {
        std::size_t used = 0;
        long long v = 0;
        try {
            v = std::stoll(dim, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (dim.empty() || used != dim.size() || v <= 0 || !std::isdigit(static_cast<unsigned char>(dim[0])))
            throw std::invalid_argument("input shape '" + part + "': '" + dim
                + "' is not a dimension (a positive whole number); write shapes like 1x3x224x224");
        return static_cast<std::int64_t>(v);
    };
    ParsedInputs parsed;
    std::size_t start = 0;
    int lists = 0; // List[Tensor] arguments so far
    bool inList = false;
    std::size_t listStart = 0; // the first element of the open list
    while (start <= text.size()) {
        auto comma = text.find(',', start);
        auto part = trimmed(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
        bool closes = false;
        if (!part.empty() && part.front() == '[') {
            if (inList)
                throw std::invalid_argument("input '" + text + "': a list inside a list (write one list of shapes: [3x480x640,3x512x512])");
            inList = true;
            listStart = parsed.shapes.size();
            part = trimmed(part.substr(1));
        }
        if (!part.empty() && part.back() == ']') {
            if (!inList)
                throw std::invalid_argument("input '" + text + "': a ']' without its '['");
            closes = true;
            part = trimmed(part.substr(0, part.size() - 1));
        }
        if (part.find_first_of("[]") != std::string::npos)
            throw std::invalid_argument("input '" + text + "': brackets go around a list of shapes, like [3x480x640,3x512x512]");
        if (!part.empty()) {
            InputType type;
            if (inList)
                type.list = lists;
            auto shapeText = part;
            if (auto colon = part.find(':'); colon != std::string::npos) {
                shapeText = trimmed(part.substr(0, colon));
                auto rest = trimmed(part.substr(colon + 1));
                std::string fill;
                if (auto eq = rest.find('='); eq != std::string::npos) {
                    fill = trimmed(rest.substr(eq + 1));
                    rest = trimmed(rest.substr(0, eq));
                }
                for (auto& c : rest)
                    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
                if (rest == "long")
                    rest = "int64";
                if (!isInputDtype(rest))
                    throw std::invalid_argument("input '" + part + "': '" + rest
                        + "' is not an input type (use float32, float16, bfloat16, int64, int32 or bool)");
                type.dtype = rest;
                if (part.find('=') != std::string::npos)
                    type.fill = parseFill(part, fill, type);
            }
            std::vector<std::int64_t> s;
            std::size_t from = 0;
            while (true) { // every 'x' separates two dimensions: a leading, trailing or doubled one is refused
                auto x = shapeText.find_first_of("xX", from);
                s.push_back(positive(part, shapeText.substr(from, x == std::string::npos ? std::string::npos : x - from)));
                if (x == std::string::npos)
                    break;
                from = x + 1;
            }
            parsed.shapes.push_back(std::move(s));
            parsed.types.push_back(std::move(type));
        }
        if (closes) {
            if (parsed.shapes.size() == listStart)
                throw std::invalid_argument("input '" + text + "': an empty list (give its tensors' shapes, like [3x480x640,3x512x512])");
            inList = false;
            ++lists;
        }
        if (comma == std::string::npos)
            break;
        start = comma + 1;
    }
    if (inList)
        throw std::invalid_argument("input '" + text + "': a '[' without its ']'");
    if (parsed.shapes.empty())
        throw std::invalid_argument("an input shape is needed, like 1x3x224x224 (or 2x512:int64 for token ids)");
    return parsed;
}

std::vector<std::vector<std::int64_t>> parseShapes(const std::string& text)
{
    return parseInputs(text).shapes;
}

std::string inputToString(const std::vector<std::int64_t>& shape, const InputType& type)
{
    std::string out;
    for (std::size_t i = 0; i < shape.size(); ++i)
        out += (i ? "x" : "") + std::to_string(shape[i]);
    if (type.dtype == InputType {}.dtype && !type.fill) // the list it is in is inputsToString's brackets
        return out;
    out += ":" + type.dtype;
    if (type.fill) {
        if (type.dtype == "bool") {
            out += *type.fill != 0 ? "=true" : "=false";
        } else {
            char buf[32];
            std::snprintf(buf, sizeof buf, "%.17g", *type.fill);
            out += std::string("=") + buf;
        }
    }
    return out;
}

std::string inputsToString(const std::vector<std::vector<std::int64_t>>& shapes, const std::vector<InputType>& types,
    const char* separator)
{
    std::string out;
    for (std::size_t i = 0; i < shapes.size(); ++i) {
        const auto list = inputTypeAt(types, i).list;
        const bool opens = list >= 0 && (i == 0 || inputTypeAt(types, i - 1).list != list);
        const bool closes = list >= 0 && (i + 1 == shapes.size() || inputTypeAt(types, i + 1).list != list);
        const bool inList = list >= 0 && !opens;
        out += (i ? (inList ? "," : separator) : "") + std::string(opens ? "[" : "") + inputToString(shapes[i], inputTypeAt(types, i))
            + (closes ? "]" : "");
    }
    return out;
}

double byteTickUnit(double magnitude)
{
    double unit = 1;
    while (unit < 1024.0 * 1024 * 1024 && std::abs(magnitude) >= unit * 1024)
        unit *= 1024;
    return unit;
}

const char* byteUnitName(double unit)
{
    if (unit >= 1024.0 * 1024 * 1024)
        return "GiB";
    if (unit >= 1024.0 * 1024)
        return "MiB";
    if (unit >= 1024.0)
        return "KiB";
    return "B";
}

namespace {

double niceStep(double raw)
{
    double magnitude = std::pow(10.0, std::floor(std::log10(raw > 0 ? raw : 1)));
    double mantissa = raw / magnitude;
    return (mantissa < 1.5 ? 1 : mantissa < 3.5 ? 2 : mantissa < 7.5 ? 5 : 10) * magnitude;
}

} // namespace

double byteTickStep(double range, double unit, int count)
{
    // Bytes are whole: never a step below one byte.
    return std::max(1.0, niceStep(range / unit / std::max(1, count)) * unit);
}

std::string byteTickLabel(double value, double unit, double step)
{
    double v = value / unit;
    if (std::abs(v) < 1e-9)
        return "0";
    double stepInUnit = step / unit;
    int decimals = stepInUnit >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(stepInUnit) - 1e-9));
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f %s", std::min(decimals, 3), v, byteUnitName(unit));
    return buf;
}

ByteTicks byteTicks(double lo, double hi, int count)
{
    ByteTicks t;
    t.unit = byteTickUnit(std::max(std::abs(lo), std::abs(hi)));
    t.step = byteTickStep(hi - lo, t.unit, count);
    for (double v = std::ceil(lo / t.step - 1e-9) * t.step; v <= hi + t.step * 1e-9; v += t.step) {
        t.values.push_back(v);
        t.labels.push_back(byteTickLabel(v, t.unit, t.step));
    }
    return t;
}

std::vector<double> niceTicks(double lo, double hi, int count)
{
    std::vector<double> out;
    if (!(hi > lo))
        return {lo};
    double step = niceStep((hi - lo) / std::max(1, count));
    for (double v = std::ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step)
        out.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);
    return out;
}

std::string formatByteChange(std::int64_t before, std::int64_t after, const char* minus)
{
    if (before == after)
        return "no change";
    return before > after ? minus + formatBytes(before - after) : "+" + formatBytes(after - before);
}

std::vector<std::string> splitComma(const std::string& text)
{
    std::vector<std::string> out;
    std::size_t start = 0;
    while (start <= text.size()) {
        auto comma = text.find(',', start);
        if (comma == std::string::npos)
            comma = text.size();
        if (comma > start)
            out.push_back(text.substr(start, comma - start));
        start = comma + 1;
    }
    return out;
}

std::vector<std::string> distinctLabels(const std::vector<std::string>& names, std::size_t width)
{
    width = std::max<std::size_t>(width, 5);
    // What every name shares at its start and at its end (none for one name: it is elided in the middle).
    std::size_t prefix = 0, suffix = 0;
    if (names.size() > 1) {
        std::size_t shortest = names.front().size();
        for (const auto& n : names)
            shortest = std::min(shortest, n.size());
        auto sameAt = [&](auto at) {
            return std::all_of(names.begin(), names.end(), [&](const std::string& n) { return at(n) == at(names.front()); });
        };
        while (prefix < shortest && sameAt([&](const std::string& n) { return n[prefix]; }))
            ++prefix;
        while (suffix < shortest - prefix && sameAt([&](const std::string& n) { return n[n.size() - 1 - suffix]; }))
            ++suffix;
    }
    std::vector<std::string> out;
    for (const auto& name : names) {
        if (name.size() <= width) {
            out.push_back(name);
            continue;
        }
        std::string head = name.substr(0, prefix), tail = name.substr(name.size() - suffix);
        std::string core = name.substr(prefix, name.size() - prefix - suffix);
        if (core.size() + 2 > width) { // what tells it apart is too long itself: its middle goes
            head = core.substr(0, (width - 1) - (width - 1) / 2);
            tail = core.substr(core.size() - (width - 1) / 2);
            out.push_back(head + "~" + tail);
            continue;
        }
        // The room left around the core: the shared end whole where it leaves 6 characters to the shared start, else
        // half each; each side keeps what touches the core ("~" where the rest goes): "~un_rank_3_step_0100.pickle".
        std::size_t room = width - core.size();
        std::size_t tailRoom = tail.size() + 6 <= room ? tail.size() : room / 2;
        std::size_t headRoom = room - tailRoom;
        if (head.size() < headRoom) {
            tailRoom += headRoom - head.size();
            headRoom = head.size();
        }
        auto h = head.size() <= headRoom ? head : "~" + head.substr(head.size() - (headRoom - 1));
        auto t = tail.size() <= tailRoom ? tail : tail.substr(0, tailRoom - 1) + "~";
        out.push_back(h + core + t);
    }
    return out;
}

std::string padCell(std::string s, std::size_t width, bool right)
{
    if (s.size() > width)
        s = s.substr(0, width - 1) + "~";
    std::string fill(width - s.size(), ' ');
    return right ? fill + s : s + fill;
}

std::string formatPercent(double v)
{
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f%%", v);
    return buf;
}

} // namespace memledger
