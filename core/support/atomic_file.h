#pragma once
#include <string>

namespace memledger {

// Writes to PATH.tmp-XXXX then renames over PATH, so a failed write never leaves half a file.
// Throws std::runtime_error naming the path and the reason.
void writeFileAtomically(const std::string& path, const std::string& contents);
std::string readWholeFile(const std::string& path); // throws FileError

} // namespace memledger
