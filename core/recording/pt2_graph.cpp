#include "recording/pt2_graph.h"

#include "recording/pt2_arithmetic.h"
#include "support/errors.h"

#include <limits>
#include <cctype>
#include <optional>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

namespace memledger::pt2 {

namespace {

// The deepest nesting of `text`'s arrays and objects, counted over its bytes outside strings; the scan stops
// as soon as it passes `limit`. For text that is not JSON it counts something, and the parser says what is wrong.
int nesting(const std::string& text, int limit)
{
    int depth = 0, deepest = 0;
    bool inString = false;
    for (std::size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (inString) {
            if (c == '\\')
                ++i;
            else if (c == '"')
                inString = false;
        } else if (c == '"') {
            inString = true;
        } else if (c == '[' || c == '{') {
            deepest = std::max(deepest, ++depth);
            if (deepest > limit)
                return deepest;
        } else if (c == ']' || c == '}') {
            --depth;
        }
    }
    return deepest;
}

const json& member(const json& v, const char* key, const std::string& what)
{
    if (!v.is_object() || !v.contains(key))
        throw std::runtime_error(what + " has no \"" + key + "\"");
    return v.at(key);
}

const json& arrayMember(const json& v, const char* key, const std::string& what)
{
    const auto& a = member(v, key, what);
    if (!a.is_array())
        throw std::runtime_error(what + "'s \"" + key + "\" is not a list");
    return a;
}

// The checks of one graph: what is made, in order, and what is read.
class GraphCheck {
public:
    explicit GraphCheck(const json& root)
        : root_(root)
    {
    }

    void run()
    {
        const auto& gm = member(root_, "graph_module", "the program");
        const auto& graph = member(gm, "graph", "graph_module");
        const auto& signature = member(gm, "signature", "graph_module");
        if (graph.contains("tensor_values") && !graph.at("tensor_values").is_object())
            throw std::runtime_error("the graph's tensor_values is not an object");
        const auto& nodes = arrayMember(graph, "nodes", "the graph");
        const auto& inputs = arrayMember(signature, "input_specs", "the signature");
        const auto& outputs = arrayMember(signature, "output_specs", "the signature");
        for (const auto& spec : inputs) {
            const auto& kind = unionTag(spec, "an input spec");
            names_.clear();
            namesIn(spec.at(kind), names_);
            made_.insert(names_.begin(), names_.end());
        }
        for (std::size_t i = 0; i < nodes.size(); ++i)
            node(nodes[i], i);
        for (const auto& spec : outputs) {
            const auto& kind = unionTag(spec, "an output spec");
            reads(spec.at(kind), "an output of the program");
        }
    }

private:
    void node(const json& n, std::size_t index)
    {
        const auto what = "node " + std::to_string(index);
        const auto& target = member(n, "target", what);
        if (!target.is_string())
            throw std::runtime_error(what + "'s target is not a string");
        const auto where = what + " (" + target.get<std::string>() + ")";
        if (n.contains("metadata") && !n.at("metadata").is_object())
            throw std::runtime_error(where + " has metadata that is not an object");
        std::vector<std::optional<SizeValue>> operands; // the file's number, or nullopt when the run makes it
        for (const auto& in : arrayMember(n, "inputs", where)) {
            if (!in.is_object())
                throw std::runtime_error(where + " has an input that is not an object");
            if (!in.contains("arg"))
                continue;
            const auto& arg = in.at("arg");
            const auto& kind = unionTag(arg, "an argument of " + where);
            reads(arg, where);
            operands.push_back(constant(kind, arg.at(kind)));
        }
        const auto& outs = arrayMember(n, "outputs", where);
        for (const auto& out : outs) {
            if (!out.is_object())
                throw std::runtime_error(where + " has an output that is not an object");
            names_.clear();
            namesIn(out, names_);
            for (const auto& name : names_)
                if (!made_.insert(name).second)
                    throw std::runtime_error(where + " makes '" + name + "', which an input or an earlier node made "
                        "already (each value of a graph has one name)");
        }
        // Arithmetic on sizes whose operands the file fixes: evaluated now, so that what Python would raise on
        // (a division by zero) or a result past 64 bits is refused when the file is read.
        // A divisor the file fixes at zero is refused whatever the run makes the dividend.
        const auto& t = target.get_ref<const std::string&>();
        if (!(t.rfind("_operator.", 0) == 0 || t.rfind("math.", 0) == 0 || t.rfind("torch.sym_", 0) == 0))
            return;
        const auto op = t.substr(t.rfind('.') + 1);
        if (operands.size() == 2 && operands[1] && operands[1]->number() == 0
            && (op == "floordiv" || op == "mod" || op == "truediv"))
            pythonArithmetic(t, {SizeValue::ofInt(1), *operands[1]});
        std::vector<SizeValue> constants;
        for (const auto& o : operands)
            if (o)
                constants.push_back(*o);
        if (constants.size() == operands.size()) {
            auto value = pythonArithmetic(t, constants);
            for (const auto& out : outs)
                if (out.is_object() && out.size() == 1 && out.begin().value().is_object()
                    && out.begin().value().contains("as_name") && out.begin().value().at("as_name").is_string())
                    known_[out.begin().value().at("as_name").get<std::string>()] = value;
        }
    }

    // `v`, an argument of kind `kind`, when it is a number the file fixes (or a size folded earlier).
    std::optional<SizeValue> constant(const std::string& kind, const json& v) const
    {
        if (kind == "as_int" && v.is_number_integer())
            return SizeValue::ofInt(v.get<std::int64_t>());
        if (kind == "as_float" && (v.is_number() || v.is_string()))
            return SizeValue::ofFloat(number(v));
        if (kind == "as_bool" && v.is_boolean())
            return SizeValue::ofBool(v.get<bool>());
        if ((kind == "as_sym_int" || kind == "as_sym_float" || kind == "as_sym_bool") && v.is_object() && v.size() == 1
            && v.begin().key() != kind)
            return constant(v.begin().key(), v.begin().value());
        if (kind == "as_name" && v.is_string() && known_.count(v.get<std::string>()))
            return known_.at(v.get<std::string>());
        return std::nullopt;
    }

    void reads(const json& v, const std::string& where)
    {
        names_.clear();
        namesIn(v, names_);
        for (const auto& name : names_)
            if (!made_.count(name))
                throw std::runtime_error(where + " reads '" + name
                    + "', which no input and no earlier node makes (a damaged graph)");
    }

    const json& root_;
    std::unordered_set<std::string> made_;
    std::unordered_map<std::string, SizeValue> known_; // sizes folded from constants
    std::vector<std::string> names_;
};

} // namespace

json parseJson(const std::string& text, const std::string& what)
{
    if (nesting(text, kMaxJsonDepth) > kMaxJsonDepth)
        throw std::runtime_error(what + " nests lists and objects deeper than " + std::to_string(kMaxJsonDepth)
            + " levels, which no torch.export program does");
    try {
        return json::parse(text);
    } catch (const json::exception& e) {
        throw std::runtime_error(what + " is not valid JSON: " + e.what());
    }
}

const std::string& unionTag(const json& v, const std::string& what)
{
    if (!v.is_object() || v.empty())
        throw std::runtime_error(what + " is " + (v.is_object() ? "an empty object" : "not an object")
            + " where a tagged value ({\"as_tensor\": ...}) belongs");
    return v.begin().key();
}

void namesIn(const json& v, std::vector<std::string>& out)
{
    // Depth first, in the order the items appear, without recursion: a name is taken where it stands.
    struct Item {
        const json* v;
        bool name; // a "name" or "as_name" string
    };
    std::vector<Item> todo {{&v, false}};
    std::vector<Item> children;
    while (!todo.empty()) {
        const auto x = todo.back();
        todo.pop_back();
        if (x.name) {
            out.push_back(x.v->get<std::string>());
            continue;
        }
        children.clear();
        if (x.v->is_object()) {
            for (const auto& [k, item] : x.v->items())
                if (k != "as_graph") // a higher-order op's subgraph: its names are its own, not the graph's values
                    children.push_back({&item, (k == "name" || k == "as_name") && item.is_string()});
        } else if (x.v->is_array()) {
            for (const auto& item : *x.v)
                children.push_back({&item, false});
        }
        todo.insert(todo.end(), children.rbegin(), children.rend());
    }
}

std::int64_t symHint(const json& s)
{
    if (s.is_object() && s.contains("as_int"))
        return s.at("as_int").get<std::int64_t>();
    if (s.is_object() && s.contains("as_expr")) {
        const auto& e = s.at("as_expr");
        if (e.is_object() && e.contains("hint") && e.at("hint").is_object() && e.at("hint").contains("as_int"))
            return e.at("hint").at("as_int").get<std::int64_t>();
    }
    throw std::runtime_error("a tensor size without a value");
}

double number(const json& v)
{
    if (v.is_number())
        return v.get<double>();
    auto s = v.is_string() ? v.get<std::string>() : std::string();
    if (s == "Infinity" || s == "inf")
        return std::numeric_limits<double>::infinity();
    if (s == "-Infinity" || s == "-inf")
        return -std::numeric_limits<double>::infinity();
    if (s == "NaN" || s == "nan")
        return std::numeric_limits<double>::quiet_NaN();
    throw RunError("the program has a float that is not one: " + (s.empty() ? std::string(v.type_name()) : s));
}

std::string moduleSourcePath(const std::string& source)
{
    std::vector<std::string> parts;
    std::size_t i = 0;
    auto skip = [&](const std::string& text) {
        if (source.compare(i, text.size(), text) != 0)
            return false;
        i += text.size();
        return true;
    };
    if (skip("L['self']") || skip("L[\"self\"]")) {
        if (i < source.size() && source[i] != '.' && source[i] != '[')
            return {};
    } else if (source.rfind("G[", 0) == 0 || source.rfind("L[", 0) == 0)
        return {}; // a global's, or another local's: not the model's
    while (i < source.size()) {
        if (source[i] == '.') {
            ++i;
            continue;
        }
        if (skip("__dict__['_modules']") || skip("__dict__[\"_modules\"]") || skip("_modules["))
        {
            if (source[i - 1] == '[')
                --i; // "_modules[": its key follows
            continue;
        }
        if (source[i] == '[') { // ['name'], ["name"] or [0]
            const auto close = source.find(']', i);
            if (close == std::string::npos)
                return {};
            auto key = source.substr(i + 1, close - i - 1);
            if (key.size() >= 2 && (key.front() == '\'' || key.front() == '"') && key.back() == key.front())
                key = key.substr(1, key.size() - 2);
            if (key.empty() || key.find_first_of("[]'\"") != std::string::npos)
                return {};
            parts.push_back(key);
            i = close + 1;
            continue;
        }
        auto j = i;
        while (j < source.size() && (std::isalnum(static_cast<unsigned char>(source[j])) || source[j] == '_'))
            ++j;
        if (j == i)
            return {}; // a call, an operator: not a path
        parts.push_back(source.substr(i, j - i));
        i = j;
    }
    std::string out;
    for (const auto& p : parts)
        out += (out.empty() ? "" : ".") + p;
    return out;
}

ModuleName innermostModule(const std::string& stack, std::vector<ModuleName>* all)
{
    ModuleName m;
    std::size_t start = 0;
    while (start < stack.size()) {
        auto end = stack.find(';', start);
        auto entry = stack.substr(start, end == std::string::npos ? std::string::npos : end - start);
        auto c1 = entry.find(',');
        auto c2 = c1 == std::string::npos ? std::string::npos : entry.find(',', c1 + 1);
        if (c2 != std::string::npos) {
            auto path = entry.substr(c1 + 1, c2 - c1 - 1);
            auto type = entry.substr(c2 + 1);
            if (path == "_empty_nn_module_stack_from_metadata_hook")
                return {};
            if (path.find('[') != std::string::npos) { // TorchDynamo's source: the model's module, or one outside it
                path = moduleSourcePath(path);
                if (path.empty()) {
                    if (end == std::string::npos)
                        break;
                    start = end + 1;
                    continue;
                }
            }
            auto dot = type.rfind('.');
            const auto key = entry.substr(0, c1);
            const auto at = key.rfind('@');
            m = {path, dot == std::string::npos ? type : type.substr(dot + 1), type,
                at == std::string::npos ? std::string() : key.substr(at + 1)};
            if (all)
                all->push_back(m);
        }
        if (end == std::string::npos)
            break;
        start = end + 1;
    }
    return m;
}

TensorLayout tensorLayout(const json& meta, const std::string& name)
{
    if (!meta.is_object())
        throw std::runtime_error(name + ": its tensor_meta is not an object");
    TensorLayout t;
    t.dtype = member(meta, "dtype", name + "'s tensor_meta").get<int>();
    for (const auto& s : arrayMember(meta, "sizes", name + "'s tensor_meta"))
        t.sizes.push_back(symHint(s));
    for (const auto& s : arrayMember(meta, "strides", name + "'s tensor_meta"))
        t.strides.push_back(symHint(s));
    t.offset = symHint(member(meta, "storage_offset", name + "'s tensor_meta"));
    if (t.sizes.size() != t.strides.size())
        throw std::runtime_error(name + " has " + std::to_string(t.sizes.size()) + " sizes but "
            + std::to_string(t.strides.size()) + " strides");
    if (t.offset < 0)
        throw std::runtime_error(name + " has a negative storage offset (" + std::to_string(t.offset) + ")");
    bool empty = false;
    for (std::size_t i = 0; i < t.sizes.size(); ++i) {
        if (t.sizes[i] < 0)
            throw std::runtime_error(name + " has a negative size (" + std::to_string(t.sizes[i]) + ") in dimension "
                + std::to_string(i));
        if (t.strides[i] < 0)
            throw std::runtime_error(name + " has a negative stride (" + std::to_string(t.strides[i]) + ") in dimension "
                + std::to_string(i));
        empty = empty || t.sizes[i] == 0;
    }
    if (empty)
        return t;
    const auto overflow = [&] {
        return std::runtime_error(name + "'s sizes and strides reach past 2^63 elements");
    };
    std::int64_t reach = 0, step = 0;
    if (__builtin_add_overflow(t.offset, 1, &reach))
        throw overflow();
    for (std::size_t i = 0; i < t.sizes.size(); ++i)
        if (__builtin_mul_overflow(t.sizes[i] - 1, t.strides[i], &step) || __builtin_add_overflow(reach, step, &reach))
            throw overflow();
    // The dense storage libtorch would lay out for the same sizes must be countable too (its own checks throw
    // later, but a product past 64 bits is undefined before they do).
    std::int64_t elements = 1;
    for (auto s : t.sizes)
        if (__builtin_mul_overflow(elements, s, &elements))
            throw std::runtime_error(name + " has more than 2^63 elements");
    t.reach = reach;
    return t;
}

std::int64_t checkedBytes(std::int64_t elements, std::int64_t elementSize, const std::string& name)
{
    std::int64_t bytes = 0;
    if (__builtin_mul_overflow(elements, elementSize, &bytes))
        throw std::runtime_error(name + " takes more than 2^63 bytes");
    return bytes;
}

void checkProgram(const json& root)
{
    GraphCheck(root).run();
}

} // namespace memledger::pt2
