#pragma once
#include "session/open_file.h"

#include <cstdint>
#include <string>
#include <vector>

namespace memledger {

// The RFBNet of seed 000 as a TorchScript file (float16 weights), built into the executable.
std::string demoModelBytes();
constexpr const char* kDemoModelName = "demo:rfbnet.pt";
inline std::vector<std::vector<std::int64_t>> demoModelInput()
{
    return {{1, 1, 300, 300}};
}
// openFile(path), or the built-in demo model when `path` is empty.
OpenedFile openFileOrDemo(const std::string& path);

} // namespace memledger
