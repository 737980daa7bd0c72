#pragma once
// Private to core/recording: operator libraries, as torch.ops.load_library loads them. A TorchScript file or an
// exported program may call operators that libtorch does not have (torchvision's nms, roi_align, ps_roi_align,
// deform_conv2d); PyTorch has them once `import torchvision` has loaded its library. memledger loads, the first time
// an operator is missing:
//   - torchvision's operator library of the PyTorch install this process runs on (torchvision/_C*.so beside the
//     loaded libtorch's site-packages; Debian's python3-torchvision beside Debian's libtorch);
//   - every library named in MEMLEDGER_OPS (paths separated by ':'; the CLI's --ops adds to it).
#include <string>
#include <vector>

namespace memledger {

struct OperatorLibraries {
    std::vector<std::string> loaded; // paths
    std::vector<std::string> failed; // "PATH: why"
    std::vector<std::string> searched; // where torchvision's library was looked for, when none was found
};

// Loads them, once per process; later calls return the first's result.
const OperatorLibraries& loadOperatorLibraries();

// Why `op` ("torchvision::nms") is missing and what to do, for a message: the library that has it, what was loaded
// and what failed.
std::string missingOperatorAdvice(const std::string& op);

// The operator named in libtorch's "Unknown builtin op: torchvision::nms" (TorchScript's load), "" if none.
std::string unknownBuiltinOperator(const std::string& message);

} // namespace memledger
