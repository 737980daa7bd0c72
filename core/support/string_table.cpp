#include "support/string_table.h"

namespace memledger {

std::uint32_t StringTable::intern(std::string_view s)
{
    auto it = index_.find(std::string(s));
    if (it != index_.end())
        return it->second;
    auto id = static_cast<std::uint32_t>(strings_.size());
    strings_.emplace_back(s);
    index_.emplace(strings_.back(), id);
    return id;
}

std::size_t StringTable::memoryBytes() const
{
    std::size_t n = 0;
    for (const auto& s : strings_)
        n += sizeof(std::string) + s.capacity() + 48; // node, hash and key copy
    return n;
}

} // namespace memledger
