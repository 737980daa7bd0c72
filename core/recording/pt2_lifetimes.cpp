#include "recording/pt2_lifetimes.h"

#include "recording/pt2_graph.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
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

// A module's identity in a frame: its path, and which of its calls ("blocks.0@1" for the second, as torch.export
// numbers a shared module's later calls in the stack's keys).
std::string callOf(const ModuleName& m)
{
    return m.call.empty() ? m.path : m.path + "@" + m.call;
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
                module.push_back(callOf(stack[next]));
                ++next;
            }
            current = callOf(stack[next++]);
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
            module.push_back(callOf(stack[next]));
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

// The next iteration of a loop that calls modules: "layers.3" then "layers.4" (two elements of one ModuleList or
// Sequential), or "group.0" then "group.0@1" (one module called again, as ALBERT's shared layer is).
bool nextInLoop(const std::string& a, const std::string& b)
{
    if (a == b)
        return false;
    const auto pathA = a.substr(0, a.find('@')), pathB = b.substr(0, b.find('@'));
    if (!pathA.empty() && pathA == pathB)
        return true;
    return indexedSiblings(pathA, pathB);
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
                if (sameStatement && calls && nextInLoop(calleeModule, module[i][J + 1]))
                    sameStatement = false; // the next iteration of `for block in self.blocks: x = block(x)`
                if (!sameCall) {
                    call_[i][J] = static_cast<int>(callEnd_.size());
                    callBegin_.push_back(i);
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
                    statementLine_.push_back(frames[i][J].file + ":" + frames[i][J].line);
                    statementDepth_.push_back(j);
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
    int callCount() const { return static_cast<int>(callEnd_.size()); }
    int statementCount() const { return static_cast<int>(statementEnd_.size()); }
    int call(std::size_t node, int j) const { return call_[node][static_cast<std::size_t>(j)]; }
    int statement(std::size_t node, int j) const { return statement_[node][static_cast<std::size_t>(j)]; }
    std::size_t callBegin(int call) const { return callBegin_[static_cast<std::size_t>(call)]; }
    std::size_t callEnd(int call) const { return callEnd_[static_cast<std::size_t>(call)]; }
    std::size_t statementBegin(int s) const { return statementBegin_[static_cast<std::size_t>(s)]; }
    std::size_t statementEnd(int s) const { return statementEnd_[static_cast<std::size_t>(s)]; }
    const std::string& code(int s) const { return statementCode_[static_cast<std::size_t>(s)]; }
    // "FILE:LINE" of the statement's frame, as source_facts.py keys its lines
    const std::string& line(int s) const { return statementLine_[static_cast<std::size_t>(s)]; }
    int statementDepth(int s) const { return statementDepth_[static_cast<std::size_t>(s)]; }
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
    std::vector<std::size_t> callBegin_, callEnd_, statementBegin_, statementEnd_; // the first or last node of each
    std::vector<int> statementCall_, statementDepth_;
    std::vector<std::string> statementCode_, statementLine_;
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

// What memledger.export read from the source files the stack traces name (python/memledger/source_facts.py):
// each traced line's statement (the names it binds, whether it is a call or a return) and each function's returns.
// Absent or of another version: nothing is known, and the stack traces alone tell the lifetimes.
class SourceFacts {
public:
    explicit SourceFacts(const nlohmann::json* facts)
    {
        const auto* version = facts ? member(*facts, "version") : nullptr;
        if (version && version->is_number_integer() && version->get<std::int64_t>() == 1) {
            lines_ = member(*facts, "lines");
            functions_ = member(*facts, "functions");
        }
    }
    bool known() const { return lines_ && functions_; }
    const nlohmann::json* line(const std::string& key) const { return lines_ ? member(*lines_, key) : nullptr; }
    const nlohmann::json* function(const std::string& name) const
    {
        return functions_ ? member(*functions_, name) : nullptr;
    }
    // The names a traced line's statement binds: nullopt when it binds something else or is not known.
    static std::optional<std::vector<std::string>> targets(const nlohmann::json& line)
    {
        const auto* t = member(line, "targets");
        if (!t || !t->is_array())
            return std::nullopt;
        std::vector<std::string> names;
        for (const auto& n : *t) {
            if (!n.is_string())
                return std::nullopt;
            names.push_back(n.get<std::string>());
        }
        return names;
    }
    static bool flag(const nlohmann::json& line, const char* key)
    {
        const auto* f = member(line, key);
        return f && f->is_boolean() && f->get<bool>();
    }
    static int first(const nlohmann::json& line)
    {
        const auto* f = member(line, "first");
        return f && f->is_number_integer() ? f->get<int>() : -1;
    }

    static const nlohmann::json* member(const nlohmann::json& object, const std::string& key)
    {
        if (!object.is_object())
            return nullptr;
        auto it = object.find(key);
        return it == object.end() ? nullptr : &*it;
    }

private:
    const nlohmann::json* lines_ = nullptr;
    const nlohmann::json* functions_ = nullptr;
};

// Where a call binds a name again, told from the statements the trace shows and, where the source facts are there,
// from the lines that rebind it without an op (`hidden_states = outputs[0]`, `attn_weights = None`), which the
// trace does not show: such a line runs between the two traced statements whose lines bracket it (in a loop, where
// the lines wrap round past it).
class Rebinding {
public:
    // What the facts say of each statement (its traced line, the first line of its Python statement) and of each
    // call (its function), looked up once.
    Rebinding(const CallTree& tree, const SourceFacts& facts)
        : tree_(tree)
    {
        for (int s = 0; s < tree.statementCount(); ++s) {
            const auto* line = facts.line(tree.line(s));
            lines_.push_back(line);
            numbers_.push_back(line && SourceFacts::first(*line) >= 0 ? SourceFacts::first(*line) : frameLine(s));
        }
        // One Python statement over lines (`q, k = rotary(split(q_proj(h)),\n split(k_proj(h)))`): its traced lines
        // alternate (the first, the next, the first again) under one first line. Only for a statement in no loop of
        // its function (the facts' "once"), which runs once per call: in a loop, the lines of the next run follow
        // those of this one, and taken as one run a value bound by the first would be freed while its name holds
        // it.
        execution_.resize(static_cast<std::size_t>(tree.statementCount()));
        for (int c = 0; c < tree.callCount(); ++c) {
            int previous = -1;
            for (int st : tree.statements(c)) {
                const auto* line = lines_[static_cast<std::size_t>(st)];
                const bool continued = previous >= 0 && line && SourceFacts::flag(*line, "once")
                    && lineNumber(st) == lineNumber(previous) && tree.line(st) != tree.line(previous);
                execution_[static_cast<std::size_t>(st)] = continued ? execution_[static_cast<std::size_t>(previous)] : st;
                previous = st;
            }
        }
        for (int c = 0; c < tree.callCount(); ++c) {
            const nlohmann::json* function = nullptr;
            for (int s : tree.statements(c))
                if (const auto* line = lineOf(s))
                    if (const auto* name = SourceFacts::member(*line, "function"); name && name->is_string()) {
                        function = facts.function(name->get<std::string>());
                        break;
                    }
            functions_.push_back(function);
        }
    }

    struct End {
        std::size_t node; // the last node the name holds its value through
        bool rebound; // bound again before the call returns
    };

    // Whether statement `later` of call c is the next traced line of the same Python statement as `earlier`, a
    // container literal over lines (`masks = {\n"full": f(x),\n"sliding": g(x)}`): a line further down, not the
    // next run of a loop.
    bool continues(int c, std::size_t earlier, std::size_t later) const
    {
        const auto& statements = tree_.statements(c);
        const int a = statements[earlier], b = statements[later];
        const auto* line = lineOf(a);
        return later == earlier + 1 && line && SourceFacts::flag(*line, "container") && lineNumber(a) == lineNumber(b)
            && frameLine(b) > frameLine(a);
    }

    // The end of the value statement k of call c binds to `name`.
    End after(int c, std::size_t k, const std::string& name) const
    {
        const auto& statements = tree_.statements(c);
        const auto untraced = untracedRebinds(c, name);
        std::size_t part = k; // the last traced line of k's Python statement so far
        for (auto later = k; later < statements.size(); ++later) {
            const int s = statements[later];
            if (later > k && continues(c, part, later)) {
                part = later;
            } else if (later > k) {
                const auto* line = lineOf(s);
                auto targets = targetsOf(s);
                if (targets && std::find(targets->begin(), targets->end(), name) != targets->end())
                    return {tree_.statementEnd(s), true};
            }
            const int from = lineNumber(s);
            const int to = later + 1 < statements.size() ? lineNumber(statements[later + 1]) : -1;
            for (int l : untraced) {
                const bool between = to < 0 ? l > from : to > from ? (from < l && l < to) : (l > from || l < to);
                if (between)
                    return {tree_.statementEnd(s), true};
            }
        }
        return {tree_.callEnd(c), false};
    }

    // Statement s's traced line as the facts know it: null when they do not.
    const nlohmann::json* lineOf(int s) const { return lines_[static_cast<std::size_t>(s)]; }

    // The local names statement s's Python statement binds: the facts' (of the whole statement, whichever of its
    // lines s traced: `x = torch.max(\n x, torch.full(...))` traces its second line first), else those its traced
    // line's text shows (null: it binds something else, or the text does not tell).
    std::optional<std::vector<std::string>> targetsOf(int s) const
    {
        const auto* line = lineOf(s);
        return line ? SourceFacts::targets(*line) : assignedNames(tree_.code(s));
    }

    // The execution of a Python statement that traced statement s is part of, named by its first traced statement
    // (the same for each line of one that spans lines, where the facts tell its first line).
    int execution(int s) const { return execution_[static_cast<std::size_t>(s)]; }

    // The function call c runs, as the source facts name it: null when they do not know it.
    const nlohmann::json* functionOf(int c) const { return functions_[static_cast<std::size_t>(c)]; }

private:
    // The first line of statement s's Python statement (the frame's line where the facts do not know it).
    int lineNumber(int s) const { return numbers_[static_cast<std::size_t>(s)]; }

    int frameLine(int s) const
    {
        const auto& key = tree_.line(s);
        const auto colon = key.rfind(':');
        try {
            return colon == std::string::npos ? -1 : std::stoi(key.substr(colon + 1));
        } catch (const std::exception&) {
            return -1;
        }
    }

    // The lines of c's function that rebind `name` without an op, where the run executed them: the lines no
    // statement of c shows.
    std::vector<int> untracedRebinds(int c, const std::string& name) const
    {
        std::vector<int> out;
        const auto* function = functionOf(c);
        const auto* rebinds = function ? SourceFacts::member(*function, "rebinds") : nullptr;
        const auto* lines = rebinds ? SourceFacts::member(*rebinds, name) : nullptr;
        if (!lines || !lines->is_array())
            return out;
        const auto& statements = tree_.statements(c);
        for (const auto& l : *lines) {
            if (l.is_number_integer() && std::none_of(statements.begin(), statements.end(),
                    [&](int s) { return lineNumber(s) == l.get<int>(); }))
                out.push_back(l.get<int>());
        }
        return out;
    }

    const CallTree& tree_;
    std::vector<const nlohmann::json*> lines_; // per statement
    std::vector<int> numbers_; // per statement
    std::vector<int> execution_; // per statement
    std::vector<const nlohmann::json*> functions_; // per call
};

// The values a call returns and its caller binds to names, held as long as those names are: `hidden, _ =
// self.attn(x)` keeps the attention weights in `_` until the layer returns, though nothing reads them there, and
// `outputs = block(x)` keeps the whole tuple the block returned until the next block's tuple replaces it. The trace
// shows neither (no node reads them); the source facts tell what each function returns and what each line binds.
class ReturnBinding {
public:
    ReturnBinding(const CallTree& tree, const Rebinding& rebinding, const std::vector<std::vector<std::string>>& made,
        const std::unordered_map<std::string, Value>& values, ValueEnds& ends)
        : tree_(tree)
        , rebinding_(rebinding)
        , made_(made)
        , values_(values)
        , ends_(ends)
        , envs_(static_cast<std::size_t>(tree.callCount()))
        , returned_(static_cast<std::size_t>(tree.callCount()))
    {
    }

    void run()
    {
        for (int c = 0; c < tree_.callCount(); ++c)
            walk(c);
    }

private:
    using Element = std::vector<std::string>; // the values one returned element may be
    using Returned = std::optional<std::vector<Element>>; // nullopt: not known
    struct Binding {
        Element values;
        std::size_t statement = 0; // the index, among its call's statements, of the one that bound it
    };
    using Env = std::unordered_map<std::string, Binding>;
    static constexpr int kDeepest = 256; // frames followed into the calls a statement makes

    // What statement `s` evaluates to: the outputs of its last node where the statement made it, else what the
    // call that made its last node returned.
    Returned result(int s)
    {
        const auto last = tree_.statementEnd(s);
        const int j = tree_.statementDepth(s);
        if (j >= kDeepest)
            return std::nullopt; // each frame is a call deeper: a file's stack traces do not bound the recursion

        if (tree_.depth(last) == j) {
            std::vector<Element> out;
            for (const auto& name : made_[last])
                out.push_back({name});
            return out;
        }
        return returned(tree_.call(last, j + 1));
    }

    // What call c returns, element by element (outOf follows only calls deeper than c).
    Returned returned(int c)
    {
        auto& memo = returned_[static_cast<std::size_t>(c)];
        if (!memo)
            memo = outOf(c);
        return *memo;
    }

    Returned outOf(int c)
    {
        const auto& statements = tree_.statements(c);
        int returnStatement = -1; // the last statement that is a return
        for (int s : statements)
            if (const auto* line = rebinding_.lineOf(s); line && SourceFacts::flag(*line, "return"))
                returnStatement = s;
        const auto* function = rebinding_.functionOf(c);
        const auto* returns = function ? SourceFacts::member(*function, "returns") : nullptr;
        const bool lastIsReturn = returnStatement >= 0 && returnStatement == statements.back();
        if (returns && returns->is_string() && returns->get<std::string>() == "call")
            return lastIsReturn ? result(returnStatement) : fallback(c);
        if (!returns || !returns->is_array())
            return fallback(c);
        if (returns->size() == 1 && !returns->front().is_string()) // `return x + y`: what that statement makes
            return lastIsReturn ? result(returnStatement) : fallback(c);
        const auto& env = walk(c);
        std::vector<Element> out;
        for (const auto& r : *returns) {
            out.emplace_back();
            if (!r.is_string())
                continue;
            // a name bound again where the trace does not show it (`attn_weights = None`) returns what is not known
            auto it = env.find(r.get<std::string>());
            if (it != env.end() && !rebinding_.after(c, it->second.statement, it->first).rebound)
                out.back() = it->second.values;
        }
        return out;
    }

    // A call the facts do not describe (a torch.nn module's forward a strict export hides, a function whose return
    // statements differ): the one value it made that is read after it returns, when there is exactly one; where it
    // made none, the one value its last node made, when nothing reads it (`create_sliding_window_causal_mask(...)`
    // into a dict whose sliding entry no layer reads).
    Returned fallback(int c) const
    {
        const auto end = tree_.callEnd(c);
        std::optional<std::string> only;
        for (auto i = tree_.callBegin(c); i <= end; ++i)
            for (const auto& name : made_[i]) {
                auto v = values_.find(name);
                if (v == values_.end() || v->second.maker != i)
                    continue;
                const auto& readers = v->second.readers;
                if (readers.empty() || readers.back() <= end)
                    continue;
                if (only)
                    return std::nullopt;
                only = name;
            }
        if (!only && made_[end].size() == 1) {
            auto v = values_.find(made_[end].front());
            if (v != values_.end() && v->second.maker == end && v->second.readers.empty())
                only = v->first;
        }
        if (!only)
            return std::nullopt;
        return std::vector<Element> {{*only}};
    }

    // What (a traced line of) a container literal's statement holds: each value that a call it makes returns and
    // each value it makes itself, that nothing later in the statement reads, and each value made inside its calls
    // that nothing reads at all (two calls of one function on one line, `(mask(a), mask(b))`, are one call in the
    // trace, which returns the second: the first is the value no one reads).
    Element elements(int s)
    {
        const int j = tree_.statementDepth(s);
        const auto end = tree_.statementEnd(s);
        Element out;
        if (j >= kDeepest)
            return out;
        auto keep = [&](const std::string& name) {
            auto v = values_.find(name);
            if (v == values_.end())
                return;
            const auto& readers = v->second.readers;
            if (std::none_of(readers.begin(), readers.end(), [&](std::size_t r) { return r > v->second.maker && r <= end; }))
                out.push_back(name);
        };
        int lastCall = -1;
        for (auto i = tree_.statementBegin(s); i <= end; ++i) {
            if (tree_.depth(i) < j || tree_.statement(i, j) != s)
                continue;
            if (tree_.depth(i) == j) {
                for (const auto& name : made_[i])
                    keep(name);
                continue;
            }
            for (const auto& name : made_[i])
                if (auto v = values_.find(name); v != values_.end() && v->second.maker == i && v->second.readers.empty())
                    keep(name);
            const int c = tree_.call(i, j + 1);
            if (c == lastCall)
                continue;
            lastCall = c;
            if (auto r = returned(c))
                for (const auto& e : *r)
                    for (const auto& name : e)
                        keep(name);
        }
        return out;
    }

    // The names each statement of call c binds, in order; each bound value held until the call binds that name
    // again or returns.
    const Env& walk(int c)
    {
        auto& memo = envs_[static_cast<std::size_t>(c)];
        if (memo)
            return *memo;
        Env env;
        const auto& statements = tree_.statements(c);
        for (std::size_t k = 0; k < statements.size(); ++k) {
            const int s = statements[k];
            const auto* line = rebinding_.lineOf(s);
            if (!line)
                continue;
            auto targets = SourceFacts::targets(*line);
            if (!targets || targets->empty())
                continue;
            auto r = result(s);
            std::vector<Element> bound(targets->size());
            if (targets->size() == 1 && SourceFacts::flag(*line, "container")) { // `masks = {"full": f(x), ...}`
                bound[0] = elements(s);
                if (k > 0 && rebinding_.continues(c, k - 1, k)) // its earlier lines' elements stay bound too
                    if (auto it = env.find(targets->front()); it != env.end() && it->second.statement == k - 1)
                        bound[0].insert(bound[0].begin(), it->second.values.begin(), it->second.values.end());
            } else if (r && r->size() == targets->size()) {
                bound = *r;
            } else if (r && targets->size() == 1 && SourceFacts::flag(*line, "call")) { // `outputs = block(x)`
                for (const auto& e : *r)
                    bound[0].insert(bound[0].end(), e.begin(), e.end());
            }
            for (std::size_t t = 0; t < targets->size(); ++t) {
                const auto& name = (*targets)[t];
                env[name] = Binding {bound[t], k};
                const auto end = rebinding_.after(c, k, name).node;
                for (const auto& v : bound[t])
                    if (auto e = ends_.find(v); e != ends_.end())
                        e->second = std::max(e->second, end);
            }
        }
        memo = std::move(env);
        return *memo;
    }

    const CallTree& tree_;
    const Rebinding& rebinding_;
    const std::vector<std::vector<std::string>>& made_;
    const std::unordered_map<std::string, Value>& values_;
    ValueEnds& ends_;
    std::vector<std::optional<Env>> envs_;
    std::vector<std::optional<Returned>> returned_;
};

// The tensors a node makes, in order: its outputs but for symbolic values (`as_sym_int`: a size the graph
// computes, no memory), which a statement does not hand to a name the way it hands a tensor.
void tensorsMade(const nlohmann::json& outputs, std::vector<std::string>& out)
{
    if (!outputs.is_array())
        return namesIn(outputs, out);
    for (const auto& output : outputs) {
        const bool symbolic = output.is_object() && output.size() == 1
            && output.begin().key().rfind("as_sym_", 0) == 0;
        if (!symbolic)
            namesIn(output, out);
    }
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

ValueEnds eagerLifetimes(const nlohmann::json& nodes, const ValueEnds& graphEnd, const nlohmann::json* sources)
{
    const CallTree tree(nodes);
    const SourceFacts facts(sources);
    const Rebinding rebinding(tree, facts);
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
        tensorsMade(nodes.at(i).at("outputs"), made[i]);
        for (const auto& name : made[i])
            values[name] = Value {i, {}};
    }
    // Whether a value outlives the statement (at frame j) that made it: read by a later statement of that call, or
    // outside the call, or by the program's caller.
    auto escapes = [&](const std::string& name, const Value& v, int j) {
        if (!graphEnd.count(name) || tree.depth(v.maker) < j)
            return true;
        const int s = rebinding.execution(tree.statement(v.maker, j));
        return std::any_of(v.readers.begin(), v.readers.end(), [&](std::size_t r) {
            const int common = tree.commonDepth(v.maker, r);
            return common < j || rebinding.execution(tree.statement(r, j)) != s;
        });
    };
    // The end of the name a statement assigns `name` (made in it) to: where the call assigns that name again, or
    // returns.
    auto boundUntil = [&](const std::string& name, const Value& v, int j) {
        // the execution, and its first traced statement, whose line holds the assignment
        const int s = rebinding.execution(tree.statement(v.maker, j));
        const std::size_t callEnd = tree.callEnd(tree.callOf(s));
        const auto& statements = tree.statements(tree.callOf(s));
        auto last = std::find(statements.begin(), statements.end(), s);
        while (last + 1 != statements.end() && rebinding.execution(*(last + 1)) == s)
            ++last; // the statement's last line: a later line of the same statement binds nothing again
        auto targets = rebinding.targetsOf(s);
        if (!targets || targets->empty())
            return callEnd;
        std::string target = targets->front();
        if (targets->size() > 1) {
            std::vector<std::string> escaping; // what the statement hands to its names, in order
            for (std::size_t i = tree.statementBegin(s); i <= tree.statementEnd(*last); ++i) {
                if (tree.depth(i) < j || rebinding.execution(tree.statement(i, j)) != s)
                    continue;
                for (const auto& out : made[i]) {
                    auto it = values.find(out);
                    if (it != values.end() && it->second.maker == i && escapes(out, it->second, j)) // a name made once
                        escaping.push_back(out);
                }
            }
            if (escaping.size() > targets->size()) // what the program returns anyway escapes by another way too:
                escaping.erase(std::remove_if(escaping.begin(), escaping.end(), // a cache the call updates (generation's)
                                   [&](const std::string& out) { return !graphEnd.count(out); }),
                    escaping.end());
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
        return rebinding.after(tree.callOf(s), static_cast<std::size_t>(last - statements.begin()), target).node;
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
            // assigned to a name at frame j: read by another statement (not another line of the same one)
            if (rebinding.execution(tree.statement(r, j)) != rebinding.execution(tree.statement(value.maker, j)))
                end = std::max(end, boundUntil(name, value, j));
        }
    }
    if (facts.known())
        ReturnBinding(tree, rebinding, made, values, ends).run();
    return ends;
}

std::vector<FunctionCall> autogradFunctionCalls(const nlohmann::json& nodes)
{
    std::vector<FunctionCall> calls;
    std::string open; // the call sites down to the open call's `.apply(` statement, and its module stack
    for (std::size_t i = 0; i < nodes.size(); ++i) {
        std::vector<ModuleName> stack;
        innermostModule(metadataString(nodes.at(i), "nn_module_stack"), &stack);
        std::vector<std::string> module; // per frame, the module whose code it runs
        const auto frames = withModules(framesOf(metadataString(nodes.at(i), "stack_trace")), stack, module);
        if (frames.empty())
            continue; // one between two nodes of a call is part of it
        std::string key, name;
        for (std::size_t k = 0; k + 1 < frames.size(); ++k) {
            key += frames[k].file + ":" + frames[k].line + "|";
            // the statement's `.apply(` runs a forward that is no module's (`Fn.apply(self.up_proj(x))` also calls
            // up_proj's)
            const auto apply = frames[k].code.find(".apply(");
            if (apply == std::string::npos || frames[k + 1].func != "forward" || module[k + 1] != module[k])
                continue;
            auto b = apply;
            while (b > 0 && (std::isalnum(static_cast<unsigned char>(frames[k].code[b - 1])) || frames[k].code[b - 1] == '_'))
                --b;
            name = frames[k].code.substr(b, apply - b);
            key += metadataString(nodes.at(i), "nn_module_stack");
            break;
        }
        if (name.empty()) {
            open.clear();
            continue;
        }
        if (key == open)
            calls.back().last = i;
        else
            calls.push_back({i, i, name});
        open = key;
    }
    return calls;
}

} // namespace memledger::pt2
