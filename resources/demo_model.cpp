#include "demo_model.h"

#include "support/errors.h"

// The model files are assembled into read-only data: no Python is needed at run time.
asm(".section .rodata\n"
    ".balign 64\n"
    ".global memledger_demo_start\n"
    "memledger_demo_start:\n"
    ".incbin \"" MEMLEDGER_DEMO_MODEL "\"\n"
    ".global memledger_demo_end\n"
    "memledger_demo_end:\n"
    ".balign 64\n"
    ".global memledger_mnist_start\n"
    "memledger_mnist_start:\n"
    ".incbin \"" MEMLEDGER_DEMO_MNIST "\"\n"
    ".global memledger_mnist_end\n"
    "memledger_mnist_end:\n"
    ".balign 64\n"
    ".global memledger_gpt_start\n"
    "memledger_gpt_start:\n"
    ".incbin \"" MEMLEDGER_DEMO_GPT "\"\n"
    ".global memledger_gpt_end\n"
    "memledger_gpt_end:\n"
    ".previous\n");

extern "C" const char memledger_demo_start[];
extern "C" const char memledger_demo_end[];
extern "C" const char memledger_mnist_start[];
extern "C" const char memledger_mnist_end[];
extern "C" const char memledger_gpt_start[];
extern "C" const char memledger_gpt_end[];

namespace memledger {

const std::vector<DemoModel>& demoModels()
{
    static const std::vector<DemoModel> demos {
        {kDemoModelName, "RFBNet detector, inference (float16 file)", {{1, 1, 300, 300}}, RunMode::Inference},
        {"demo:mnist-train.pt", "MNIST CNN, SGD training step", {{64, 1, 28, 28}}, RunMode::Train},
        {"demo:gpt.pt2", "Small GPT, inference (torch.export, tied head)", {{4, 256}}, RunMode::Inference, "int64"},
        {"demo:gpt-train.pt2", "Small GPT, AdamW training step (torch.export)", {{8, 256}}, RunMode::Train, "int64"},
    };
    return demos;
}

std::string demoModelBytes(const std::string& name)
{
    if (name == kDemoModelName)
        return std::string(memledger_demo_start, memledger_demo_end);
    if (name == "demo:mnist-train.pt")
        return std::string(memledger_mnist_start, memledger_mnist_end);
    if (name == "demo:gpt.pt2" || name == "demo:gpt-train.pt2")
        return std::string(memledger_gpt_start, memledger_gpt_end);
    return {};
}

bool isDemoName(const std::string& path)
{
    return path.rfind("demo:", 0) == 0;
}

OpenedFile openFileOrDemo(const std::string& path, const SnapshotReadOptions& read)
{
    const std::string name = path.empty() ? kDemoModelName : path;
    if (!isDemoName(name))
        return openFile(path, read);
    for (const auto& d : demoModels())
        if (name == d.name) {
            std::vector<InputType> types(d.inputs.size());
            for (auto& t : types)
                t.dtype = d.input_dtype;
            auto f = openModelBytes(demoModelBytes(name), name, d.inputs, types);
            f.default_mode = d.mode;
            if (std::string(d.name) == "demo:gpt-train.pt2")
                f.default_optimizer = "adamw";
            return f;
        }
    std::string names;
    for (const auto& d : demoModels())
        names += (names.empty() ? "" : ", ") + std::string(d.name);
    throw FileError(path, "no such built-in demo (there are " + names + ")");
}

} // namespace memledger
