#include "report/call_stacks.h"

#include <algorithm>

namespace memledger {

namespace {
std::uint64_t mix(std::uint64_t h, std::uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    return h;
}
} // namespace

std::size_t CallStacks::FrameHash::operator()(const FrameKey& k) const
{
    return static_cast<std::size_t>(mix(mix(k.file, k.name), static_cast<std::uint64_t>(k.line)));
}

CallStacks::CallStacks()
{
    offsets_ = {0, 0}; // stack 0: empty
}

std::uint32_t CallStacks::internFrame(std::uint32_t file, std::int64_t line, std::uint32_t name)
{
    FrameKey key{file, name, line};
    auto it = frameIndex_.find(key);
    if (it != frameIndex_.end())
        return it->second;
    auto id = static_cast<std::uint32_t>(frames_.size());
    frames_.push_back({file, name, line});
    frameIndex_.emplace(key, id);
    return id;
}

std::uint32_t CallStacks::internStack(const std::uint32_t* frames, std::size_t count)
{
    if (count == 0)
        return 0;
    // A sum of products, position by position: no chain from one frame to the next, so deep stacks hash fast.
    std::uint64_t sum = 0;
    for (std::size_t i = 0; i < count; ++i) {
        std::uint64_t x = (frames[i] | (static_cast<std::uint64_t>(i) << 32)) * 0xff51afd7ed558ccdULL;
        sum += (x ^ (x >> 29)) * 0xc4ceb9fe1a85ec53ULL;
    }
    const std::uint64_t h = mix(count, sum);
    if (stackCount() * 2 >= stackIndex_.size())
        growStackIndex();
    const std::size_t mask = stackIndex_.size() - 1;
    std::size_t i = static_cast<std::size_t>(h ^ (h >> 29)) & mask;
    for (;; i = (i + 1) & mask) {
        const StackSlot& slot = stackIndex_[i];
        if (slot.stack == 0)
            break;
        if (slot.hash == h && depth(slot.stack) == count && std::equal(frames, frames + count, begin(slot.stack)))
            return slot.stack;
    }
    auto id = static_cast<std::uint32_t>(stackCount());
    frameIds_.insert(frameIds_.end(), frames, frames + count);
    offsets_.push_back(static_cast<std::uint32_t>(frameIds_.size()));
    stackIndex_[i] = {h, id};
    return id;
}

void CallStacks::growStackIndex()
{
    std::vector<StackSlot> old = std::move(stackIndex_);
    stackIndex_.assign(std::max<std::size_t>(64, old.size() * 2), StackSlot {});
    const std::size_t mask = stackIndex_.size() - 1;
    for (const auto& slot : old) {
        if (slot.stack == 0)
            continue;
        std::size_t i = static_cast<std::size_t>(slot.hash ^ (slot.hash >> 29)) & mask;
        while (stackIndex_[i].stack != 0)
            i = (i + 1) & mask;
        stackIndex_[i] = slot;
    }
}

std::size_t CallStacks::memoryBytes() const
{
    return frames_.capacity() * sizeof(StackFrame) + frameIndex_.size() * (sizeof(FrameKey) + 32)
        + frameIds_.capacity() * sizeof(std::uint32_t) + offsets_.capacity() * sizeof(std::uint32_t)
        + stackIndex_.capacity() * sizeof(StackSlot);
}

} // namespace memledger
