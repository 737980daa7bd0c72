#pragma once
#include "session/open_file.h"

#include <cstdint>
#include <string>
#include <vector>

namespace memledger {

// The built-in demos, embedded in the executable (no Python at run time), opened by name ("demo:...").
//  - demo:rfbnet.pt: the RFBNet of seed 000 (float16 weights, 1x1x300x300), inference.
//  - demo:mnist-train.pt: a small MNIST ConvNet (conv1 1->32, conv2 32->64, fc1 3136->128, fc2 128->10,
//    batch 64 of 1x28x28), recorded as one SGD training step.
//  - demo:gpt.pt2 and demo:gpt-train.pt2: a small GPT (resources/gpt.py: 4 blocks, d_model 128, vocab 512, the
//    LM head tied to the token embedding) saved with torch.export, token ids 4x256 in inference and 8x256 in an
//    AdamW training step (the PyTorch 2 build; libtorch 1.13 says it cannot run it).
struct DemoModel {
    const char* name; // "demo:rfbnet.pt"
    const char* title; // for menus: "RFBNet inference"
    std::vector<std::vector<std::int64_t>> inputs;
    RunMode mode;
    const char* input_dtype = "float32"; // the inputs' type: "int64" for token ids
};
const std::vector<DemoModel>& demoModels();
std::string demoModelBytes(const std::string& name = "demo:rfbnet.pt"); // "" if there is no such demo
constexpr const char* kDemoModelName = "demo:rfbnet.pt";
inline std::vector<std::vector<std::int64_t>> demoModelInput()
{
    return {{1, 1, 300, 300}};
}
bool isDemoName(const std::string& path); // "demo:..." names a built-in demo
// openFile(path); the RFBNet demo when `path` is empty; a built-in demo for its "demo:" name.
OpenedFile openFileOrDemo(const std::string& path, const SnapshotReadOptions& read = {});

} // namespace memledger
