#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace memledger {

// Interned strings: events store a 32-bit id instead of repeating module paths and op names.
class StringTable {
public:
    StringTable() { intern(""); }
    std::uint32_t intern(std::string_view s);
    const std::string& at(std::uint32_t id) const { return strings_[id]; }
    std::size_t size() const { return strings_.size(); }
    std::size_t memoryBytes() const;

private:
    std::vector<std::string> strings_;
    std::unordered_map<std::string, std::uint32_t> index_;
};

} // namespace memledger
