#include "demo_model.h"

// The model file is assembled into read-only data: no Python is needed at run time.
asm(".section .rodata\n"
    ".balign 64\n"
    ".global memledger_demo_start\n"
    "memledger_demo_start:\n"
    ".incbin \"" MEMLEDGER_DEMO_MODEL "\"\n"
    ".global memledger_demo_end\n"
    "memledger_demo_end:\n"
    ".previous\n");

extern "C" const char memledger_demo_start[];
extern "C" const char memledger_demo_end[];

namespace memledger {

std::string demoModelBytes()
{
    return std::string(memledger_demo_start, memledger_demo_end);
}

OpenedFile openFileOrDemo(const std::string& path)
{
    return path.empty() ? openModelBytes(demoModelBytes(), kDemoModelName, demoModelInput()) : openFile(path);
}

} // namespace memledger
