#include "analysis/call_tree.h"

#include "snapshot/frames.h"
#include "snapshot/snapshot.h"

#include <algorithm>
#include <unordered_map>

namespace memledger {

namespace {

bool onDevice(const Trace& t, std::size_t i, int device)
{
    return device == CallTreeOptions::kAllDevices || t.device[i] == device;
}

// Labels of frames and ops, each made once per tree.
class Labeller {
public:
    Labeller(const Trace& t, CallTreeFrames mode, std::vector<CallTreeLabel>& labels)
        : t_(t)
        , mode_(mode)
        , labels_(labels)
        , byFrame_(t.stacks.frameCount(), kUnset)
    {
    }

    // The labels of a stack, innermost first, into `out`.
    void pathOf(std::uint32_t stack, std::vector<std::uint32_t>& out)
    {
        out.clear();
        if (stack == 0) {
            out.push_back(special("(no stack)"));
            return;
        }
        const std::uint32_t* b = t_.stacks.begin(stack);
        const std::uint32_t* e = t_.stacks.end(stack);
        while (b != e && info(*b).allocator) // the allocator's and unwinder's frames: the same in every stack
            ++b;
        if (mode_ == CallTreeFrames::PythonAndOps) {
            for (const std::uint32_t* f = b; f != e; ++f) {
                const Info& in = info(*f);
                std::uint32_t l = in.python ? frameLabel(*f) : in.op;
                if (l != kUnset && (out.empty() || out.back() != l))
                    out.push_back(l);
            }
            if (!out.empty())
                return;
        }
        for (const std::uint32_t* f = b; f != e; ++f)
            out.push_back(frameLabel(*f));
        if (out.empty()) // nothing but the allocator's frames
            out.push_back(frameLabel(*t_.stacks.begin(stack)));
    }

private:
    static constexpr std::uint32_t kUnset = 0xffffffffu;
    struct Info {
        bool known = false, allocator = false, python = false;
        std::uint32_t op = kUnset; // label of the ATen op whose entry this frame is
    };
    const Info& info(std::uint32_t frame)
    {
        if (frame >= infos_.size())
            infos_.resize(t_.stacks.frameCount());
        Info& in = infos_[frame];
        if (in.known)
            return in;
        in.known = true;
        const auto& fr = t_.stacks.frame(frame);
        std::string_view file = t_.strings.at(fr.file), name = t_.strings.at(fr.name);
        in.allocator = isAllocatorFrame(name);
        auto kind = classifyFrame(file);
        in.python = kind == FrameKind::User || kind == FrameKind::Torch || kind == FrameKind::Library;
        if (auto op = atenOpOfFrame(name); !op.empty())
            in.op = special(op);
        return in;
    }
    std::uint32_t frameLabel(std::uint32_t frame)
    {
        auto& slot = byFrame_[frame];
        if (slot != kUnset)
            return slot;
        const auto& fr = t_.stacks.frame(frame);
        FrameView v {t_.strings.at(fr.file), fr.line, t_.strings.at(fr.name)};
        slot = static_cast<std::uint32_t>(labels_.size());
        labels_.push_back(
            {frameText(v), static_cast<std::int64_t>(frame), classifyFrame(v.filename) == FrameKind::User});
        return slot;
    }
    std::uint32_t special(const std::string& text)
    {
        auto it = byText_.find(text);
        if (it != byText_.end())
            return it->second;
        auto id = static_cast<std::uint32_t>(labels_.size());
        labels_.push_back({text, -1, false});
        byText_.emplace(text, id);
        return id;
    }

    const Trace& t_;
    CallTreeFrames mode_;
    std::vector<CallTreeLabel>& labels_;
    std::vector<std::uint32_t> byFrame_;
    std::vector<Info> infos_;
    std::unordered_map<std::string, std::uint32_t> byText_;
};

} // namespace

std::int64_t peakMoment(const Trace& t, std::size_t first, std::size_t last, int device)
{
    last = std::min(last, t.size());
    std::int64_t moment = static_cast<std::int64_t>(first) - 1;
    std::int64_t live = 0, best = 0;
    for (std::size_t i = first; i < last; ++i) {
        if (!onDevice(t, i, device))
            continue;
        if (t.action[i] == Action::Alloc)
            live += t.bytes[i];
        else if (t.action[i] == Action::Free)
            live -= t.bytes[i];
        else
            continue;
        if (live > best) {
            best = live;
            moment = static_cast<std::int64_t>(i);
        }
    }
    return moment;
}

StackTotalsResult stackTotals(const Trace& t, const CallTreeOptions& o, const TraceContextColumn* contexts)
{
    StackTotalsResult r;
    const std::size_t last = std::min(o.last, t.size());
    const std::size_t first = std::min(o.first, last);
    r.moment = o.moment == CallTreeOptions::kRangePeak
        ? peakMoment(t, first, last, o.device)
        : std::clamp<std::int64_t>(o.moment, -1, static_cast<std::int64_t>(t.size()) - 1);
    const bool hasStacks = t.stack.size() == t.size();
    auto stackOf = [&](std::size_t i) { return hasStacks ? t.stack[i] : 0u; };
    // Ungrouped: one slot per stack id. Grouped: one per (value, stack) met, made as they come.
    const bool grouped = o.group && contexts && !contexts->empty();
    std::vector<StackTotals> by(grouped ? 0 : t.stacks.stackCount());
    std::unordered_map<std::uint64_t, std::size_t> slots;
    auto slot = [&](std::size_t i) -> StackTotals& {
        if (!grouped)
            return by[stackOf(i)];
        const std::uint32_t group = contextId((*contexts)[i], *o.group);
        auto [it, added] = slots.emplace((static_cast<std::uint64_t>(group) << 32) | stackOf(i), by.size());
        if (added) {
            by.emplace_back();
            by.back().stack = stackOf(i);
            by.back().group = group;
        }
        return by[it->second];
    };
    for (std::size_t i = first; i < last; ++i) {
        if (t.action[i] != Action::Alloc || !onDevice(t, i, o.device))
            continue;
        auto& s = slot(i);
        s.allocated += t.bytes[i];
        ++s.count;
        s.largest = std::max(s.largest, t.bytes[i]);
    }
    // Alive at the moment: allocated at or before it, freed (free_completed) after it or never.
    for (std::int64_t i = 0; i <= r.moment; ++i) {
        auto k = static_cast<std::size_t>(i);
        if (t.action[k] != Action::Alloc || !onDevice(t, k, o.device))
            continue;
        if (t.partner[k] == kNoPartner || t.partner[k] > r.moment)
            slot(k).alive += t.bytes[k];
    }
    if (grouped)
        std::sort(by.begin(), by.end(), [](const StackTotals& a, const StackTotals& b) {
            return a.group != b.group ? a.group < b.group : a.stack < b.stack;
        });
    for (std::size_t s = 0; s < by.size(); ++s) {
        if (by[s].count == 0 && by[s].alive == 0)
            continue;
        if (!grouped)
            by[s].stack = static_cast<std::uint32_t>(s);
        r.allocated += by[s].allocated;
        r.count += by[s].count;
        r.alive += by[s].alive;
        r.stacks.push_back(by[s]);
    }
    return r;
}

std::vector<std::string> CallTree::path(std::int32_t node) const
{
    std::vector<std::string> out;
    for (; node > 0; node = nodes[static_cast<std::size_t>(node)].parent)
        out.push_back(text(node));
    std::reverse(out.begin(), out.end());
    return out;
}

CallTree buildCallTree(const Trace& t, const CallTreeOptions& o, const TraceContextColumn* contexts)
{
    CallTree tree;
    tree.bottom_up = o.bottom_up;
    tree.group = o.group;
    auto totals = stackTotals(t, o, contexts);
    tree.moment = totals.moment;
    tree.labels.push_back({"all allocations", -1, false});
    tree.nodes.emplace_back();
    auto& root = tree.nodes[0];
    root.allocated = totals.allocated;
    root.count = totals.count;
    root.alive = totals.alive;
    Labeller labeller(t, o.frames, tree.labels);
    std::unordered_map<std::uint64_t, std::int32_t> child; // (parent, label) -> node
    std::unordered_map<std::uint32_t, std::uint32_t> groupLabel; // a value's string id -> its label
    std::vector<std::uint32_t> path;
    for (const auto& s : totals.stacks) {
        tree.nodes[0].largest = std::max(tree.nodes[0].largest, s.largest);
        tree.has_stacks |= s.stack != 0;
        labeller.pathOf(s.stack, path);
        if (!o.bottom_up)
            std::reverse(path.begin(), path.end());
        if (o.group) { // the value first, whichever way the frames go
            auto [it, added] = groupLabel.emplace(s.group, static_cast<std::uint32_t>(tree.labels.size()));
            if (added)
                tree.labels.push_back({s.group == 0 ? "(no " + std::string(contextKindName(*o.group)) + ")"
                                                    : std::string(t.strings.at(s.group)),
                    -1, false, true});
            path.insert(path.begin(), it->second);
        }
        std::int32_t at = 0;
        for (auto label : path) {
            auto key = (static_cast<std::uint64_t>(at) << 32) | label;
            auto it = child.find(key);
            std::int32_t next;
            if (it == child.end()) {
                next = static_cast<std::int32_t>(tree.nodes.size());
                CallTreeNode n;
                n.label = label;
                n.parent = at;
                tree.nodes.push_back(std::move(n));
                tree.nodes[static_cast<std::size_t>(at)].children.push_back(next);
                child.emplace(key, next);
            } else {
                next = it->second;
            }
            auto& n = tree.nodes[static_cast<std::size_t>(next)];
            n.allocated += s.allocated;
            n.count += s.count;
            n.alive += s.alive;
            n.largest = std::max(n.largest, s.largest);
            at = next;
        }
    }
    for (auto& n : tree.nodes)
        std::sort(n.children.begin(), n.children.end(), [&tree](std::int32_t a, std::int32_t b) {
            const auto& x = tree.nodes[static_cast<std::size_t>(a)];
            const auto& y = tree.nodes[static_cast<std::size_t>(b)];
            if (x.allocated != y.allocated)
                return x.allocated > y.allocated;
            if (x.alive != y.alive)
                return x.alive > y.alive;
            return a < b;
        });
    return tree;
}

std::vector<CallTreeLabel> stackLabels(const Trace& t, std::uint32_t stack, CallTreeFrames frames)
{
    std::vector<CallTreeLabel> labels;
    Labeller labeller(t, frames, labels);
    std::vector<std::uint32_t> path;
    labeller.pathOf(stack, path);
    std::vector<CallTreeLabel> out;
    out.reserve(path.size());
    for (auto l : path)
        out.push_back(labels[l]);
    return out;
}

} // namespace memledger
