#include "snapshot/frames.h"

#include "report/trace.h"
#include "snapshot/snapshot.h"

#include <array>
#include <cctype>

namespace memledger {

namespace {

bool endsWith(std::string_view s, std::string_view tail)
{
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool contains(std::string_view s, std::string_view part)
{
    return s.find(part) != std::string_view::npos;
}

// ".../lib/python3.11/x.py" but not ".../lib/python3.11/site-packages/x.py": the standard library.
bool isStandardLibrary(std::string_view file)
{
    auto at = file.find("/lib/python");
    if (at == std::string_view::npos)
        at = file.find("\\Lib\\");
    if (at == std::string_view::npos)
        return false;
    return !contains(file, "site-packages") && !contains(file, "dist-packages");
}

bool isTorchPython(std::string_view file)
{
    return contains(file, "/torch/") || contains(file, "\\torch\\") || file.rfind("torch/", 0) == 0;
}

FrameView viewOf(const SnapshotFrame& f)
{
    return {f.filename, f.line, f.name};
}

} // namespace

FrameKind classifyFrame(std::string_view file)
{
    if (file.empty() || file == "??")
        return FrameKind::Unknown;
    if (endsWith(file, ".py")) {
        if (isTorchPython(file))
            return FrameKind::Torch;
        if (isStandardLibrary(file))
            return FrameKind::CPython;
        if (contains(file, "site-packages") || contains(file, "dist-packages"))
            return FrameKind::Library; // like torch: the user's frame is the one that called it
        return FrameKind::User;
    }
    if (file.front() == '<') // <frozen importlib._bootstrap>, <string>
        return FrameKind::CPython;
    if (endsWith(file, ".c"))
        return FrameKind::CPython;
    return FrameKind::Cpp; // .cpp, .h, .cu, .cc, shared objects
}

std::string frameText(const FrameView& f)
{
    if (f.line == 0 && f.name.empty())
        return std::string(f.filename);
    if (f.line == 0 && (f.filename.empty() || f.filename == "??"))
        return std::string(f.name);
    std::string out(f.filename);
    out += ':';
    out += std::to_string(f.line);
    out += ' ';
    out += f.name;
    return out;
}

std::string frameText(const SnapshotFrame& f)
{
    return frameText(viewOf(f));
}

std::string fxFrameName(std::string_view name, std::string_view nodeName, std::string_view nodeTarget)
{
    std::string out(name);
    if (nodeName.empty() && nodeTarget.empty())
        return out;
    out += " (fx: ";
    out += nodeName.empty() ? std::string_view("?") : nodeName;
    if (!nodeTarget.empty()) {
        out += " = ";
        out += nodeTarget;
    }
    out += ')';
    return out;
}

std::string atenOpOfFrame(std::string_view name)
{
    constexpr std::string_view kOps = "at::_ops::";
    auto at = name.find(kOps);
    if (at == std::string_view::npos)
        return {};
    auto rest = name.substr(at + kOps.size());
    auto end = rest.find("::");
    if (end == std::string_view::npos || end == 0)
        return {};
    std::string op(rest.substr(0, end));
    // The struct is named op_overload: "empty_memory_format", "add_Tensor", "sum_dim_IntList", "add_out".
    if (endsWith(op, "_memory_format")) {
        op.resize(op.size() - 14);
        return "aten::" + op;
    }
    auto stripLast = [&op](auto accept) {
        auto us = op.rfind('_');
        if (us == std::string::npos || us == 0 || us + 1 >= op.size() || !accept(std::string_view(op).substr(us + 1)))
            return;
        op.resize(us);
    };
    stripLast([](std::string_view w) { return std::isupper(static_cast<unsigned char>(w.front())) != 0; });
    stripLast([](std::string_view w) {
        static constexpr std::array<std::string_view, 6> kLower {"out", "dim", "int", "self", "default", "names"};
        for (auto k : kLower)
            if (w == k)
                return true;
        return false;
    });
    return "aten::" + op;
}

bool isAllocatorFrame(std::string_view name)
{
    return contains(name, "torch::unwind::") || contains(name, "CapturedTraceback")
        || contains(name, "gather_with_cpp") || contains(name, "CUDACachingAllocator")
        || contains(name, "CachingHostAllocator");
}

std::string allocationSite(const std::vector<FrameView>& frames)
{
    if (frames.empty())
        return {};
    for (const auto& f : frames)
        if (classifyFrame(f.filename) == FrameKind::User)
            return frameText(f);
    for (const auto& f : frames)
        if (auto op = atenOpOfFrame(f.name); !op.empty())
            return op;
    for (const auto& f : frames)
        if (classifyFrame(f.filename) != FrameKind::Unknown || !f.name.empty())
            return frameText(f);
    return frameText(frames.front());
}

std::string allocationSite(const std::vector<SnapshotFrame>& frames)
{
    std::vector<FrameView> views;
    views.reserve(frames.size());
    for (const auto& f : frames)
        views.push_back(viewOf(f));
    return allocationSite(views);
}

bool isPythonFrame(const FrameView& f)
{
    return endsWith(f.filename, ".py");
}

std::vector<std::size_t> pythonFirstOrder(const std::vector<FrameView>& frames, bool pythonOnly)
{
    std::vector<std::size_t> order;
    order.reserve(frames.size());
    for (std::size_t i = 0; i < frames.size(); ++i)
        if (isPythonFrame(frames[i]))
            order.push_back(i);
    if (!pythonOnly)
        for (std::size_t i = 0; i < frames.size(); ++i)
            if (!isPythonFrame(frames[i]))
                order.push_back(i);
    return order;
}

bool isForwardFrame(const FrameView& f)
{
    return endsWith(f.filename, ".py")
        && (f.name == "forward" || f.name.rfind("forward (fx:", 0) == 0 || !moduleOfFrame(f).empty());
}

std::string_view moduleOfFrame(const FrameView& f)
{
    constexpr std::string_view kMarker = "forward (module: ";
    if (f.name.size() <= kMarker.size() + 1 || f.name.substr(0, kMarker.size()) != kMarker || f.name.back() != ')')
        return {};
    return f.name.substr(kMarker.size(), f.name.size() - kMarker.size() - 1);
}

std::vector<FrameView> forwardChain(const std::vector<FrameView>& frames)
{
    std::vector<FrameView> out;
    for (auto it = frames.rbegin(); it != frames.rend(); ++it)
        if (isForwardFrame(*it))
            out.push_back(*it);
    return out;
}

std::string modulePath(const std::vector<FrameView>& chain, std::size_t count)
{
    std::string out;
    for (std::size_t k = 0; k < chain.size() && k < count; ++k) {
        // A captured module is one row whichever line of its forward called inside: its path names it.
        const auto module = moduleOfFrame(chain[k]);
        out += (k ? " / " : "") + (module.empty() ? frameText(chain[k]) : "module " + std::string(module));
    }
    return out;
}

std::vector<FrameView> framesOfStack(const Trace& t, std::uint32_t stack)
{
    std::vector<FrameView> out;
    out.reserve(t.stacks.depth(stack));
    for (auto it = t.stacks.begin(stack); it != t.stacks.end(stack); ++it) {
        const StackFrame& f = t.stacks.frame(*it);
        out.push_back({t.strings.at(f.file), f.line, t.strings.at(f.name)});
    }
    return out;
}

std::vector<FrameView> framesOf(const std::vector<SnapshotFrame>& frames)
{
    std::vector<FrameView> out;
    out.reserve(frames.size());
    for (const auto& f : frames)
        out.push_back(viewOf(f));
    return out;
}

std::string shortFrameText(const FrameView& f)
{
    auto slash = f.filename.find_last_of("/\\");
    FrameView s = f;
    if (slash != std::string_view::npos)
        s.filename = f.filename.substr(slash + 1);
    return frameText(s);
}

} // namespace memledger
