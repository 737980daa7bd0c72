#include "recording/module_path.h"

#include "report/report.h"

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
    auto direct = join(parent, name);
    auto t = type_of_.find(direct);
    if (t != type_of_.end() && t->second == type)
        return {direct};
    // Look through containers below parent (a ModuleList holding ModuleLists too).
    auto out = below(parent, name, type, true);
    if (out.empty() && t != type_of_.end())
        out.push_back(direct);
    if (out.empty())
        out = nestedCandidates(parent, name, type);
    return out;
}

std::vector<std::string> ModulePathResolver::nestedCandidates(
    const std::string& parent, const std::string& name, const std::string& type) const
{
    // A module reached through a nested attribute (`self.body.inner(x)` in the parent's forward): the frame
    // names only the last attribute. Any module below parent's children with that name and type.
    return below(parent, name, type, false);
}

std::vector<std::string> ModulePathResolver::below(
    const std::string& parent, const std::string& name, const std::string& type, bool containersOnly) const
{
    std::vector<std::string> out;
    const auto direct = join(parent, name);
    std::vector<std::string> todo {parent};
    while (!todo.empty()) {
        auto p = todo.back();
        todo.pop_back();
        auto c = children_.find(p);
        if (c == children_.end())
            continue;
        for (auto it = c->second.rbegin(); it != c->second.rend(); ++it)
            if (!containersOnly || (*it != direct && isContainer(type_of_.at(*it))))
                todo.push_back(*it);
        for (const auto& child : c->second) {
            auto dot = child.rfind('.');
            if (p != parent && child.compare(dot + 1, std::string::npos, name) == 0 && type_of_.at(child) == type)
                out.push_back(child);
        }
    }
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
        auto under = [&hint](const std::string& p) { return isInsideModule(hint, p); };
        if (found.size() == 1 && !hint.empty() && !under(found.front())) {
            // `self.body.proj(y)` beside a `self.proj`: the frame says "proj", the op's weight says which.
            for (const auto& n : nestedCandidates(path, name, type))
                if (under(n))
                    found = {n};
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
            if (!hint.empty() && under(found[i])) {
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
