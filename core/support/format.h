#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace memledger {

// 1024-based: "512 B", "3.0 KiB", "2.69 MiB", "16.00 GiB".
std::string formatBytes(std::int64_t bytes);
// "16GiB", "16 GB", "512MiB", "1024" (bytes). GB is read as GiB. nullopt if not a size.
std::optional<std::int64_t> parseBytes(const std::string& text);

} // namespace memledger
