#include "recording/module_path.h"

namespace memledger {

namespace {

bool addsNoComponent(const std::string& f)
{
    return f.rfind("TOP(", 0) == 0 || f.rfind("SELF(", 0) == 0 || f.rfind("CALL_FUNCTION", 0) == 0;
}

// "layer1(Sequential)::forward" -> name "layer1", type "Sequential"
bool parseFrame(const std::string& f, std::string& name, std::string& type)
{
    auto open = f.find('(');
    auto close = f.find(')', open == std::string::npos ? 0 : open);
    if (open == std::string::npos || open == 0 || close == std::string::npos)
        return false;
    name = f.substr(0, open);
    type = f.substr(open + 1, close - open - 1);
    return true;
}

std::string join(const std::string& parent, const std::string& name)
{
    return parent.empty() ? name : parent + "." + name;
}

bool isContainer(const std::string& type)
{
    return type == "ModuleList" || type == "ModuleDict" || type == "Sequential";
}

} // namespace

std::string modulePathFromHierarchy(const std::vector<std::string>& frames)
{
    std::string out, name, type;
    for (const auto& f : frames)
        if (!addsNoComponent(f) && parseFrame(f, name, type))
            out = join(out, name);
    return out;
}

ModulePathResolver::ModulePathResolver(std::vector<Module> modules)
{
    for (auto& m : modules) {
        auto dot = m.path.rfind('.');
        if (!m.path.empty())
            children_[dot == std::string::npos ? "" : m.path.substr(0, dot)].push_back(m.path);
        type_of_[m.path] = m.type;
    }
}

std::vector<std::string> ModulePathResolver::candidates(
    const std::string& parent, const std::string& name, const std::string& type) const
{
    std::vector<std::string> out;
    auto direct = join(parent, name);
    auto t = type_of_.find(direct);
    if (t != type_of_.end() && t->second == type)
        return {direct};
    // Look through containers below parent (a ModuleList holding ModuleLists too).
    std::vector<std::string> todo {parent};
    while (!todo.empty()) {
        auto p = todo.back();
        todo.pop_back();
        auto c = children_.find(p);
        if (c == children_.end())
            continue;
        for (auto it = c->second.rbegin(); it != c->second.rend(); ++it) {
            const auto& child = *it;
            const auto& ct = type_of_.at(child);
            if (child != direct && isContainer(ct))
                todo.push_back(child);
        }
        for (const auto& child : c->second) {
            if (p == parent)
                continue;
            auto dot = child.rfind('.');
            if (child.compare(dot + 1, std::string::npos, name) == 0 && type_of_.at(child) == type)
                out.push_back(child);
        }
    }
    if (out.empty() && t != type_of_.end())
        out.push_back(direct);
    return out;
}

std::string ModulePathResolver::resolve(
    const std::vector<std::string>& frames, std::uint32_t op, const std::string& hint)
{
    std::string path, name, type;
    for (const auto& f : frames) {
        if (addsNoComponent(f) || !parseFrame(f, name, type))
            continue;
        auto found = candidates(path, name, type);
        if (found.empty()) {
            path = join(path, name); // unknown to the tree: keep what the frame says
            continue;
        }
        if (found.size() == 1) {
            path = found.front();
            continue;
        }
        auto key = path + "\n" + name + "\n" + type;
        auto& a = ambiguous_[key];
        std::size_t pick = a.cursor;
        bool hinted = false;
        for (std::size_t i = 0; i < found.size(); ++i)
            if (!hint.empty() && (hint == found[i] || hint.rfind(found[i] + ".", 0) == 0)) {
                pick = i;
                hinted = true;
            }
        if (!hinted && a.last_op >= 0 && a.last_op != static_cast<std::int64_t>(op)
            && a.last_op != static_cast<std::int64_t>(op) - 1)
            pick = (a.cursor + 1) % found.size();
        a.cursor = pick;
        a.last_op = op;
        path = found[pick];
    }
    return path;
}

} // namespace memledger
