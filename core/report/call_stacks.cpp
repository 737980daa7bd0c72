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
    std::uint64_t h = count;
    for (std::size_t i = 0; i < count; ++i)
        h = mix(h, frames[i]);
    auto range = stackIndex_.equal_range(h);
    for (auto it = range.first; it != range.second; ++it) {
        auto s = it->second;
        if (depth(s) == count && std::equal(frames, frames + count, begin(s)))
            return s;
    }
    auto id = static_cast<std::uint32_t>(stackCount());
    frameIds_.insert(frameIds_.end(), frames, frames + count);
    offsets_.push_back(static_cast<std::uint32_t>(frameIds_.size()));
    stackIndex_.emplace(h, id);
    return id;
}

std::size_t CallStacks::memoryBytes() const
{
    return frames_.capacity() * sizeof(StackFrame) + frameIndex_.size() * (sizeof(FrameKey) + 32)
        + frameIds_.capacity() * sizeof(std::uint32_t) + offsets_.capacity() * sizeof(std::uint32_t)
        + stackIndex_.size() * 40;
}

} // namespace memledger
