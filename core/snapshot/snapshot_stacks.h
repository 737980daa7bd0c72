#pragma once
// A snapshot's call stacks while it is decoded (internal to snapshot/): each frame and each stack interned once
// (report/call_stacks.h), each stack's allocation site (snapshot/frames.h) worked out once, and the values the
// reducer makes of frames and frame lists.
#include "report/trace.h"
#include "snapshot/frames.h"
#include "snapshot/snapshot.h"
#include "snapshot/snapshot_fields.h"

#include <cstdint>
#include <string_view>
#include <vector>

namespace memledger::snapdecode {

// Types of the values SnapshotReducer makes of containers while the pickle is read (PickleValue::reducedType).
enum ReducedType : unsigned { kFrameValue = 1, kStackValue = 2, kRowValue = 3, kSkippedValue = 4 };

class StackTables {
public:
    explicit StackTables(Trace& t)
        : strings_(t.strings)
        , stacks_(t.stacks)
    {
    }

    std::uint32_t frame(std::string_view file, std::int64_t line, std::string_view name)
    {
        return stacks_.internFrame(strings_.intern(file), line, strings_.intern(name));
    }
    std::uint32_t stack(const std::vector<std::uint32_t>& frames) { return stacks_.internStack(frames); }
    std::uint32_t where(std::uint32_t stack)
    {
        if (stack == 0)
            return 0;
        if (stack >= where_.size())
            where_.resize(std::max<std::size_t>(stack + 1, where_.size() * 2), kUnknown);
        if (where_[stack] == kUnknown) {
            views_.clear();
            for (const auto* f = stacks_.begin(stack); f != stacks_.end(stack); ++f) {
                const auto& fr = stacks_.frame(*f);
                views_.push_back({strings_.at(fr.file), fr.line, strings_.at(fr.name)});
            }
            auto site = allocationSite(views_);
            where_[stack] = site.empty() ? 0u : strings_.intern(site);
        }
        return where_[stack];
    }

    // A frames value as the finished tree holds it: a stack the reducer made, or a list of frames it did not
    // take (an odd item among them: it reads as an empty frame).
    std::uint32_t stackOfTree(const PickleValue* frames)
    {
        if (!frames)
            return 0;
        if (frames->isReduced())
            return frames->reducedType() == kStackValue ? frames->reducedId() : 0;
        if (!frames->isSequence() || frames->items().empty())
            return 0;
        std::vector<std::uint32_t> ids;
        ids.reserve(frames->items().size());
        for (const auto& f : frames->items())
            ids.push_back(frameOfTree(f));
        return stack(ids);
    }
    std::uint32_t frameOfTree(const PickleValue& f)
    {
        if (f.isReduced())
            return f.reducedType() == kFrameValue ? f.reducedId() : frame({}, 0, {});
        if (!f.isDict())
            return frame({}, 0, {});
        return frame(strOr(f, "filename"), intOr(f, "line", 0),
            fxFrameName(strOr(f, "name"), strOr(f, "fx_node_name"), strOr(f, "fx_node_target")));
    }

    std::vector<std::uint32_t> frameIds(std::uint32_t stack) const
    {
        return {stacks_.begin(stack), stacks_.end(stack)};
    }
    SnapshotFrame snapshotFrame(std::uint32_t id) const
    {
        const auto& fr = stacks_.frame(id);
        return {strings_.at(fr.file), fr.line, strings_.at(fr.name)};
    }

private:
    static constexpr std::uint32_t kUnknown = UINT32_MAX;
    StringTable& strings_;
    CallStacks& stacks_;
    std::vector<std::uint32_t> where_;
    std::vector<FrameView> views_;
};

// Frames of a block or segment: a reduced stack, or a list of frames (reduced or not).
std::vector<SnapshotFrame> framesOf(const PickleValue* frames, StackTables& tables);

} // namespace memledger::snapdecode
