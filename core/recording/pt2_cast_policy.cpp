#include "recording/pt2_cast_policy.h"

#include "recording/model_impl.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <regex>
#include <string>

namespace memledger::pt2 {

using json = nlohmann::json;

namespace {

// The names Python spells a floating-point type with ("torch.float32" or "torch.float"), as a pattern, and the
// method that casts to it (x.float()).
std::pair<std::string, std::string> pythonSpelling(c10::ScalarType t)
{
    switch (t) {
    case c10::kFloat:
        return {R"(torch\.(float32|float)\b)", "float"};
    case c10::kHalf:
        return {R"(torch\.(float16|half)\b)", "half"};
    case c10::kBFloat16:
        return {R"(torch\.bfloat16\b)", "bfloat16"};
    case c10::kDouble:
        return {R"(torch\.(float64|double)\b)", "double"};
    default:
        return {R"(\b\B)", ""}; // matches nothing
    }
}

// The arguments of each `.to(...)` and `.type(...)` call in a line of Python, in the order they appear.
std::vector<std::string> castArguments(const std::string& line)
{
    std::vector<std::pair<std::size_t, std::string>> out; // where each call starts, its arguments
    for (const char* call : {".to(", ".type("}) {
        for (auto at = line.find(call); at != std::string::npos; at = line.find(call, at + 1)) {
            auto open = at + std::char_traits<char>::length(call);
            int depth = 1;
            auto end = open;
            while (end < line.size() && depth > 0) {
                depth += line[end] == '(' ? 1 : line[end] == ')' ? -1 : 0;
                ++end;
            }
            out.emplace_back(at, line.substr(open, end - open - (depth == 0 ? 1 : 0)));
        }
    }
    std::sort(out.begin(), out.end());
    std::vector<std::string> args;
    for (auto& [at, text] : out)
        args.push_back(std::move(text));
    return args;
}

// The longest source line read: std::regex recurses per character it repeats over (\s*), and a line of Python
// is never this long; a longer one is taken as no source line.
constexpr std::size_t kMaxSourceLine = 2000;

} // namespace

std::string lineTraceOf(std::string trace)
{
    for (;;) {
        while (!trace.empty() && std::isspace(static_cast<unsigned char>(trace.back())))
            trace.pop_back();
        const auto newline = trace.rfind('\n');
        const auto line = trace.substr(newline == std::string::npos ? 0 : newline + 1);
        const bool markers = !line.empty() && line.find_first_not_of(" \t^~") == std::string::npos;
        if (!markers)
            return trace;
        trace.erase(newline == std::string::npos ? 0 : newline);
    }
}

void LineCasts::see(const std::string& stackTrace)
{
    if (stackTrace.empty())
        return;
    auto line = lineTraceOf(stackTrace);
    // The same execution goes on while the nodes are of this line or of calls it makes (their traces extend it).
    const bool sameExecution = previous_ == line || previous_.rfind(line + "\n", 0) == 0;
    if (!sameExecution)
        count_[line] = 0;
    previous_ = std::move(line);
}

std::string typeSiteOf(const json& n)
{
    const auto trace = lineTraceOf(n.value("metadata", json::object()).value("stack_trace", std::string()));
    const auto file = trace.rfind("File \"");
    if (file == std::string::npos)
        return {};
    const auto quote = trace.find("\", line ", file + 6);
    if (quote == std::string::npos)
        return {};
    const auto digits = quote + 8;
    auto end = digits;
    while (end < trace.size() && std::isdigit(static_cast<unsigned char>(trace[end])))
        ++end;
    if (end == digits)
        return {};
    return trace.substr(file + 6, quote - file - 6) + ":" + trace.substr(digits, end - digits);
}

AutocastTypes::AutocastTypes(std::optional<json> record)
{
    if (!record || !record->is_object())
        return;
    auto version = record->find("version");
    auto policies = record->find("policies");
    if (version != record->end() && version->is_number_integer() && version->get<std::int64_t>() == 1
        && policies != record->end() && policies->is_object())
        record_ = std::move(record);
}

const json* AutocastTypes::lines(AutocastRules rules) const
{
    if (!record_)
        return nullptr;
    const auto& policies = record_->at("policies");
    auto it = policies.find(rules == AutocastRules::Cpu ? "cpu" : "cuda");
    return it != policies.end() && it->is_object() ? &*it : nullptr;
}

bool AutocastTypes::known(AutocastRules rules) const
{
    return lines(rules) != nullptr;
}

std::optional<AutocastType> AutocastTypes::at(AutocastRules rules, const std::string& site, std::size_t k, std::size_t calls) const
{
    const auto* all = lines(rules);
    if (!all || site.empty())
        return std::nullopt;
    auto line = all->find(site);
    if (line == all->end() || !line->is_object())
        return std::nullopt;
    auto count = line->find("calls");
    auto changed = line->find("changed");
    if (count == line->end() || !count->is_number_integer() || count->get<std::int64_t>() != static_cast<std::int64_t>(calls)
        || changed == line->end() || !changed->is_object())
        return std::nullopt;
    auto entry = changed->find(std::to_string(k));
    if (entry == changed->end() || !entry->is_array() || entry->size() != 2 || !(*entry)[0].is_string()
        || !(*entry)[1].is_string())
        return std::nullopt;
    // autocast changes one floating type into another, nothing else: a record that says otherwise is not used
    auto from = scalarTypeNamed((*entry)[0].get<std::string>());
    const auto to = (*entry)[1].get<std::string>();
    if (!from || !c10::isFloatingType(*from))
        return std::nullopt;
    AutocastType type;
    type.from = *from;
    if (to != "lower") {
        auto named = scalarTypeNamed(to);
        if (!named || !c10::isFloatingType(*named))
            return std::nullopt;
        type.to = *named;
    }
    return type;
}

bool namesTypeOnPurpose(const json& n, c10::ScalarType exported, LineCasts& casts)
{
    const auto& meta = n.value("metadata", json::object());
    const auto [pattern, method] = pythonSpelling(exported);
    const auto target = n.at("target").get<std::string>();
    const bool cast = target.rfind("torch.ops.aten.to.", 0) == 0 || target.rfind("torch.ops.aten._to_copy.", 0) == 0;
    // "float_1;method_descriptor.float": the Python call that made the node.
    auto fn = meta.value("torch_fn", std::string());
    auto called = fn.substr(fn.rfind('.') == std::string::npos ? fn.size() : fn.rfind('.') + 1);
    if (cast && !called.empty() && called != "to" && called != "type")
        return called == method; // x.float(), x.half(), ...: named by the method
    // The innermost frame's source line: the trace's last, but for the line of carets (^^^~~~) under the part of it
    // that made the node, which Python 3.11 and later print where that is not the whole line.
    const auto trace = lineTraceOf(meta.value("stack_trace", std::string()));
    const auto newline = trace.rfind('\n');
    const auto line = trace.substr(newline == std::string::npos ? 0 : newline + 1);
    if (line.empty() || line.size() > kMaxSourceLine)
        return false;
    const std::regex spelled(pattern);
    if (cast) {
        auto calls = castArguments(line);
        auto k = casts.next(trace);
        if (k < calls.size())
            return std::regex_search(calls[k], spelled);
        return !calls.empty() && std::all_of(calls.begin(), calls.end(), [&](const std::string& a) { return std::regex_search(a, spelled); });
    }
    return std::regex_search(line, std::regex(R"(dtype\s*=\s*)" + pattern));
}

} // namespace memledger::pt2
