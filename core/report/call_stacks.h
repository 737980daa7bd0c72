#pragma once
// Call stacks of a trace, interned: each distinct frame once, each distinct stack once. A trace event names
// its stack by a 32-bit id (Trace::stack); stack 0 is the empty stack (model runs, entries without frames).
// Frames are listed innermost first, as PyTorch's snapshots list them.
#include "support/string_table.h"

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace memledger {

struct StackFrame {
    std::uint32_t file = 0; // string id in the owning table (Trace::strings)
    std::uint32_t name = 0;
    std::int64_t line = 0;
};

class CallStacks {
public:
    CallStacks();

    // Id of a frame, the same id for the same (file, line, name).
    std::uint32_t internFrame(std::uint32_t file, std::int64_t line, std::uint32_t name);
    // Id of a stack of frame ids (innermost first); 0 for an empty stack.
    std::uint32_t internStack(const std::uint32_t* frames, std::size_t count);
    std::uint32_t internStack(const std::vector<std::uint32_t>& frames)
    {
        return internStack(frames.data(), frames.size());
    }

    const StackFrame& frame(std::uint32_t id) const { return frames_[id]; }
    std::size_t frameCount() const { return frames_.size(); }
    std::size_t stackCount() const { return offsets_.size() - 1; } // including the empty stack 0

    // The frames of a stack, innermost first: [begin, end) of frame ids.
    const std::uint32_t* begin(std::uint32_t stack) const { return frameIds_.data() + offsets_[stack]; }
    const std::uint32_t* end(std::uint32_t stack) const { return frameIds_.data() + offsets_[stack + 1]; }
    std::size_t depth(std::uint32_t stack) const { return offsets_[stack + 1] - offsets_[stack]; }

    std::size_t memoryBytes() const;

private:
    struct FrameKey {
        std::uint32_t file, name;
        std::int64_t line;
        bool operator==(const FrameKey& o) const { return file == o.file && name == o.name && line == o.line; }
    };
    struct FrameHash {
        std::size_t operator()(const FrameKey& k) const;
    };
    std::vector<StackFrame> frames_;
    std::unordered_map<FrameKey, std::uint32_t, FrameHash> frameIndex_;
    std::vector<std::uint32_t> frameIds_; // every stack's frames, one after the other
    std::vector<std::uint32_t> offsets_; // stack s is frameIds_[offsets_[s], offsets_[s+1])
    // Open addressing on the hash of a stack's frame ids (a power of two slots, at most half full): looked up
    // once per trace entry of a snapshot, so kept flat.
    struct StackSlot {
        std::uint64_t hash = 0;
        std::uint32_t stack = 0; // 0: empty slot
    };
    std::vector<StackSlot> stackIndex_;
    void growStackIndex();
};

} // namespace memledger
