#include "recording/pt2_lifetimes.h"

#include "recording/pt2_graph.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <vector>

namespace memledger::pt2 {

namespace {

// One frame of a node's stack_trace: `  File "PATH", line N, in FUNC` and the first line of its statement.
struct Frame {
    std::string file, func, code;
    std::string line;
    bool passThrough = false; // a decorator's wrapper between a call and the forward it runs (withModules)
};

std::string trimmed(const std::string& s)
{
    auto b = s.find_first_not_of(" \t\r");
    if (b == std::string::npos)
        return {};
    return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

// The frames of a stack_trace, outermost first. Frames of torch.export's own passes (a node it made, as the
// runtime asserts on sizes) are not the model's code: such a trace has no frames.
std::vector<Frame> framesOf(const std::string& trace)
{
    std::vector<Frame> frames;
    std::size_t start = 0;
    while (start < trace.size()) {
        auto end = trace.find('\n', start);
        auto line = trimmed(trace.substr(start, end == std::string::npos ? std::string::npos : end - start));
        start = end == std::string::npos ? trace.size() : end + 1;
        if (line.rfind("File \"", 0) == 0) {
            auto q = line.find("\", line ", 6);
            auto in = line.find(", in ", q == std::string::npos ? 6 : q);
            if (q == std::string::npos || in == std::string::npos)
                return {};
            Frame f;
            f.file = line.substr(6, q - 6);
            f.line = line.substr(q + 8, in - q - 8);
            f.func = line.substr(in + 5);
            frames.push_back(std::move(f));
        } else if (!frames.empty() && frames.back().code.empty()) {
            frames.back().code = line;
        }
    }
    if (!frames.empty() && frames.front().file.find("torch/fx/") != std::string::npos)
        return {};
    // The frames that call the model's forward, not the model's code, above it: a strict export's (torch/_dynamo,
    // torch/export) and memledger.export's forward that calls the user's.
    auto wrapper = [](const Frame& f) {
        return f.file.find("/torch/_") != std::string::npos || f.file.find("/torch/export/") != std::string::npos
            || (!f.file.empty() && f.file.front() == '<')
            || f.file.find("memledger/export_program.py") != std::string::npos;
    };
    std::size_t first = 0;
    while (first < frames.size() && wrapper(frames[first]))
        ++first;
    frames.erase(frames.begin(), frames.begin() + static_cast<std::ptrdiff_t>(first));
    return frames;
}

// A node's metadata string `key` ("stack_trace", "nn_module_stack"): "" when absent or not a string.
std::string metadataString(const nlohmann::json& node, const char* key)
{
    if (!node.is_object() || !node.contains("metadata") || !node.at("metadata").is_object())
        return {};
    const auto& meta = node.at("metadata");
    return meta.contains(key) && meta.at(key).is_string() ? meta.at(key).get<std::string>() : std::string();
}

bool isIdentifier(const std::string& s)
{
    if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0])))
        return false;
    return std::all_of(s.begin(), s.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

// The local names a statement assigns: {"q", "k", "v"} for `q, k, v = ...`, {"x"} for `x = ...` and `x += ...`.
// nullopt when it assigns something else too (an attribute, an item) or the names cannot be told; empty when it
// is no assignment (`return ...`, a call for its effect).
std::optional<std::vector<std::string>> assignedNames(const std::string& code)
{
    int depth = 0;
    char quote = 0;
    std::size_t eq = std::string::npos;
    for (std::size_t i = 0; i < code.size() && eq == std::string::npos; ++i) {
        const char c = code[i];
        if (quote) {
            if (c == '\\')
                ++i;
            else if (c == quote)
                quote = 0;
        } else if (c == '\'' || c == '"') {
            quote = c;
        } else if (c == '(' || c == '[' || c == '{') {
            ++depth;
        } else if (c == ')' || c == ']' || c == '}') {
            --depth;
        } else if (c == '#') {
            break;
        } else if (c == '=' && depth == 0) {
            const char before = i > 0 ? code[i - 1] : ' ', after = i + 1 < code.size() ? code[i + 1] : ' ';
            if (after == '=') {
                ++i; // ==
                continue;
            }
            if (before == '!' || before == '<' || before == '>' || before == '=')
                continue;
            eq = i;
        }
    }
    if (eq == std::string::npos)
        return std::vector<std::string> {};
    auto lhs = code.substr(0, eq);
    while (!lhs.empty() && std::string("+-*/%&|^@<> ").find(lhs.back()) != std::string::npos)
        lhs.pop_back(); // x += ..., x //= ...
    if (auto colon = lhs.find(':'); colon != std::string::npos)
        lhs = lhs.substr(0, colon); // x: Tensor = ...
    std::vector<std::string> names;
    std::size_t start = 0;
    while (start <= lhs.size()) {
        auto comma = lhs.find(',', start);
        auto part = trimmed(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
        start = comma == std::string::npos ? lhs.size() + 1 : comma + 1;
        while (!part.empty() && (part.front() == '(' || part.front() == '[' || part.front() == '*'))
            part = trimmed(part.substr(1));
        while (!part.empty() && (part.back() == ')' || part.back() == ']'))
            part = trimmed(part.substr(0, part.size() - 1));
        if (part.empty() && comma == std::string::npos && !names.empty())
            break; // a trailing comma: `x, = ...`
        if (!isIdentifier(part))
            return std::nullopt;
        names.push_back(part);
    }
    return names;
}

// A decorator's wrapper that hands its call on whole: `return func(*args, **kwargs)`, `output = func(self, *args,
// **kwargs)` (transformers wraps each layer's forward in two: forward_with_checkpointing and deprecate_kwarg's).
bool handsItsCallOn(const Frame& f)
{
    if (f.func == "forward")
        return false;
    const auto open = f.code.find('(');
    if (open == std::string::npos || f.code.find("**", open) == std::string::npos)
        return false;
    auto args = trimmed(f.code.substr(open + 1));
    if (args.rfind("self,", 0) == 0)
        args = trimmed(args.substr(5));
    return args.size() > 1 && args[0] == '*' && args[1] != '*';
}

// The frames of a node with the module each runs in (`module`, one per frame), from its module stack: each frame
// of a forward is the next module's. The forward of a torch.nn module that the trace leaves out (a strict export
// shows no frame of torch's own code) becomes a frame of its own, which holds its arguments until it returns as
// the real one does; it has no source line but for Sequential's loop, `input = module(input)`.
std::vector<Frame> withModules(const std::vector<Frame>& frames, const std::vector<ModuleName>& stack,
    std::vector<std::string>& module)
{
    auto library = [](const ModuleName& m) { return m.qualified_type.rfind("torch.nn.", 0) == 0; };
    auto hidden = [](const ModuleName& m) {
        Frame f;
        f.file = "<" + m.qualified_type + ">";
        f.func = "forward";
        if (m.qualified_type == "torch.nn.modules.container.Sequential")
            f.code = "input = module(input)";
        return f;
    };
    std::vector<Frame> out;
    module.clear();
    std::size_t next = 0; // the next module of the stack
    std::string current;
    std::vector<std::size_t> wrappers; // the wrappers just above the frame at hand: the module they call is theirs
    for (const auto& f : frames) {
        if (f.func == "forward" && next < stack.size()) {
            const bool libraryFrame = f.file.find("/torch/nn/modules/") != std::string::npos;
            while (next + 1 < stack.size() && library(stack[next]) && !libraryFrame) {
                out.push_back(hidden(stack[next]));
                module.push_back(stack[next].path);
                ++next;
            }
            current = stack[next++].path;
            // each call of a wrapper is the call of the module it runs (a new one for the next layer of a loop)
            for (auto w : wrappers)
                module[w] = current;
        }
        out.push_back(f);
        module.push_back(current);
        if (handsItsCallOn(f)) {
            out.back().passThrough = true;
            wrappers.push_back(out.size() - 1);
        } else {
            wrappers.clear();
        }
    }
    if (!frames.empty())
        for (; next < stack.size(); ++next) {
            out.push_back(hidden(stack[next]));
            module.push_back(stack[next].path);
        }
    return out;
}

// "layers.3" and "layers.4": two elements of one ModuleList or Sequential.
bool indexedSiblings(const std::string& a, const std::string& b)
{
    if (a == b)
        return false;
    auto da = a.rfind('.'), db = b.rfind('.');
    auto parentA = da == std::string::npos ? std::string() : a.substr(0, da);
    auto parentB = db == std::string::npos ? std::string() : b.substr(0, db);
    auto lastA = a.substr(da == std::string::npos ? 0 : da + 1), lastB = b.substr(db == std::string::npos ? 0 : db + 1);
    auto digits = [](const std::string& s) {
        return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    };
    return parentA == parentB && digits(lastA) && digits(lastB);
}

// The calls (frames) each node runs in, and the statement of each.
class CallTree {
public:
    explicit CallTree(const nlohmann::json& nodes)
    {
        const auto n = nodes.size();
        depth_.assign(n, -1);
        call_.resize(n);
        statement_.resize(n);
        std::vector<std::vector<Frame>> frames(n);
        std::vector<std::vector<std::string>> module(n); // the module whose forward (or helper) each frame runs
        std::vector<std::vector<std::string>> key(n); // per frame: the call sites above it, its function and module
        int deepest = -1;
        for (std::size_t i = 0; i < n; ++i) {
            frames[i] = framesOf(metadataString(nodes.at(i), "stack_trace"));
            std::vector<ModuleName> stack;
            innermostModule(metadataString(nodes.at(i), "nn_module_stack"), &stack);
            frames[i] = withModules(frames[i], stack, module[i]);
            std::string prefix;
            for (std::size_t j = 0; j < frames[i].size(); ++j) {
                const auto& f = frames[i][j];
                key[i].push_back(prefix + f.file + ":" + f.func + "#" + module[i][j]);
                prefix += f.file + ":" + f.line + ":" + f.func + "|";
            }
            depth_[i] = static_cast<int>(frames[i].size()) - 1;
            deepest = std::max(deepest, depth_[i]);
            call_[i].assign(frames[i].size(), -1);
            statement_[i].assign(frames[i].size(), -1);
        }
        // A call: a run of nodes in one frame that no node of its caller interrupts. A statement: a run of one line
        // within a call, cut where a loop calls the next element of a ModuleList or Sequential.
        for (int j = 0; j <= deepest; ++j) {
            const auto J = static_cast<std::size_t>(j);
            std::optional<std::size_t> previous; // the previous node with frames
            std::string calleeModule; // the last module the current statement called
            for (std::size_t i = 0; i < n; ++i) {
                if (depth_[i] < 0)
                    continue;
                if (depth_[i] < j) {
                    previous = i;
                    continue;
                }
                const bool sameCall = previous && depth_[*previous] >= j && key[*previous][J] == key[i][J]
                    && (j == 0 || call_[*previous][J - 1] == call_[i][J - 1]);
                bool sameStatement = sameCall && frames[*previous][J].line == frames[i][J].line;
                const bool calls
                    = depth_[i] > j && (frames[i][J + 1].func == "forward" || frames[i][J + 1].passThrough);
                if (sameStatement && calls && indexedSiblings(calleeModule, module[i][J + 1]))
                    sameStatement = false; // the next iteration of `for block in self.blocks: x = block(x)`
                if (!sameCall) {
                    call_[i][J] = static_cast<int>(callEnd_.size());
                    callEnd_.push_back(i);
                    callStatements_.emplace_back();
                } else {
                    call_[i][J] = call_[*previous][J];
                }
                if (!sameStatement) {
                    statement_[i][J] = static_cast<int>(statementEnd_.size());
                    statementBegin_.push_back(i);
                    statementEnd_.push_back(i);
                    statementCall_.push_back(call_[i][J]);
                    statementCode_.push_back(frames[i][J].code);
                    callStatements_[static_cast<std::size_t>(call_[i][J])].push_back(statement_[i][J]);
                    calleeModule.clear();
                } else {
                    statement_[i][J] = statement_[*previous][J];
                }
                if (calls)
                    calleeModule = module[i][J + 1];
                callEnd_[static_cast<std::size_t>(call_[i][J])] = i;
                statementEnd_[static_cast<std::size_t>(statement_[i][J])] = i;
                previous = i;
            }
        }
    }

    int depth(std::size_t node) const { return depth_[node]; }
    int call(std::size_t node, int j) const { return call_[node][static_cast<std::size_t>(j)]; }
    int statement(std::size_t node, int j) const { return statement_[node][static_cast<std::size_t>(j)]; }
    std::size_t callEnd(int call) const { return callEnd_[static_cast<std::size_t>(call)]; }
    std::size_t statementBegin(int s) const { return statementBegin_[static_cast<std::size_t>(s)]; }
    std::size_t statementEnd(int s) const { return statementEnd_[static_cast<std::size_t>(s)]; }
    const std::string& code(int s) const { return statementCode_[static_cast<std::size_t>(s)]; }
    int callOf(int s) const { return statementCall_[static_cast<std::size_t>(s)]; }
    const std::vector<int>& statements(int call) const { return callStatements_[static_cast<std::size_t>(call)]; }

    // The deepest frame two nodes run in together: -1 when they share none.
    int commonDepth(std::size_t a, std::size_t b) const
    {
        int j = std::min(depth_[a], depth_[b]);
        while (j >= 0 && call_[a][static_cast<std::size_t>(j)] != call_[b][static_cast<std::size_t>(j)])
            --j;
        return j;
    }

private:
    std::vector<int> depth_;
    std::vector<std::vector<int>> call_, statement_; // per node, per frame
    std::vector<std::size_t> callEnd_, statementBegin_, statementEnd_; // the first or last node of each
    std::vector<int> statementCall_;
    std::vector<std::string> statementCode_;
    std::vector<std::vector<int>> callStatements_;
};

// A value by name: the node that made it and the nodes that read it.
struct Value {
    std::size_t maker = 0;
    std::vector<std::size_t> readers;
};

// The names node `node` reads (its arguments), appended to `out`.
void namesRead(const nlohmann::json& node, std::vector<std::string>& out)
{
    for (const auto& in : node.at("inputs"))
        if (in.contains("arg"))
            namesIn(in.at("arg"), out);
}

} // namespace

ValueEnds graphLifetimes(const nlohmann::json& nodes, const std::vector<std::string>& keep)
{
    ValueEnds last;
    std::vector<std::string> names;
    for (std::size_t i = 0; i < nodes.size(); ++i) {
        names.clear();
        namesRead(nodes.at(i), names);
        namesIn(nodes.at(i).at("outputs"), names);
        for (const auto& name : names)
            last[name] = i;
    }
    for (const auto& name : keep)
        last.erase(name);
    return last;
}

bool hasSourceLines(const nlohmann::json& nodes)
{
    for (const auto& n : nodes) {
        if (!framesOf(metadataString(n, "stack_trace")).empty())
            return true;
    }
    return false;
}

ValueEnds eagerLifetimes(const nlohmann::json& nodes, const ValueEnds& graphEnd)
{
    const CallTree tree(nodes);
    std::unordered_map<std::string, Value> values;
    std::vector<std::vector<std::string>> made(nodes.size());
    std::vector<std::string> names;
    for (std::size_t i = 0; i < nodes.size(); ++i) {
        names.clear();
        namesRead(nodes.at(i), names);
        for (const auto& name : names) {
            auto v = values.find(name);
            if (v != values.end() && (v->second.readers.empty() || v->second.readers.back() != i))
                v->second.readers.push_back(i);
        }
        namesIn(nodes.at(i).at("outputs"), made[i]);
        for (const auto& name : made[i])
            values[name] = Value {i, {}};
    }
    // Whether a value outlives the statement (at frame j) that made it: read by a later statement of that call, or
    // outside the call, or by the program's caller.
    auto escapes = [&](const std::string& name, const Value& v, int j) {
        if (!graphEnd.count(name) || tree.depth(v.maker) < j)
            return true;
        const int s = tree.statement(v.maker, j);
        return std::any_of(v.readers.begin(), v.readers.end(), [&](std::size_t r) {
            const int common = tree.commonDepth(v.maker, r);
            return common < j || tree.statement(r, j) != s;
        });
    };
    // The end of the name a statement assigns `name` (made in it) to: where the call assigns that name again, or
    // returns.
    auto boundUntil = [&](const std::string& name, const Value& v, int j) {
        const int s = tree.statement(v.maker, j);
        const std::size_t callEnd = tree.callEnd(tree.callOf(s));
        auto targets = assignedNames(tree.code(s));
        if (!targets || targets->empty())
            return callEnd;
        std::string target = targets->front();
        if (targets->size() > 1) {
            std::vector<std::string> escaping; // what the statement hands to its names, in order
            for (std::size_t i = tree.statementBegin(s); i <= tree.statementEnd(s); ++i) {
                if (tree.depth(i) < j || tree.statement(i, j) != s)
                    continue;
                for (const auto& out : made[i]) {
                    auto it = values.find(out);
                    if (it != values.end() && it->second.maker == i && escapes(out, it->second, j)) // a name made once
                        escaping.push_back(out);
                }
            }
            if (escaping.size() < targets->size()) // `hidden, _ = attn(...)` of a call that returns (out, None)
                targets->erase(std::remove(targets->begin(), targets->end(), "_"), targets->end());
            // `hidden, attn_weights = attn(...)`, the weights None: what a call leaves out comes last
            if (!escaping.empty() && escaping.size() < targets->size())
                targets->resize(escaping.size());
            if (escaping.size() != targets->size())
                return callEnd;
            auto at = std::find(escaping.begin(), escaping.end(), name);
            if (at == escaping.end())
                return callEnd;
            target = (*targets)[static_cast<std::size_t>(at - escaping.begin())];
        }
        const auto& statements = tree.statements(tree.callOf(s));
        auto it = std::find(statements.begin(), statements.end(), s);
        for (++it; it != statements.end(); ++it) {
            auto later = assignedNames(tree.code(*it));
            if (later && std::find(later->begin(), later->end(), target) != later->end())
                return tree.statementEnd(*it);
        }
        return callEnd;
    };
    ValueEnds ends = graphEnd;
    for (auto& [name, end] : ends) {
        auto v = values.find(name);
        if (v == values.end() || tree.depth(v->second.maker) < 0)
            continue; // an input of the program, or made by a node without source
        const auto& value = v->second;
        for (auto r : value.readers) {
            const int j = tree.commonDepth(value.maker, r);
            if (j < 0)
                continue;
            if (tree.depth(r) > j) // an argument of a call made at frame j: alive until it returns
                end = std::max(end, tree.callEnd(tree.call(r, j + 1)));
            if (tree.statement(r, j) != tree.statement(value.maker, j)) // assigned to a name at frame j
                end = std::max(end, boundUntil(name, value, j));
        }
    }
    return ends;
}

} // namespace memledger::pt2
