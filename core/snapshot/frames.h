#pragma once
// One rule for a snapshot's call stacks, used by the decoder (the tree groups allocations by it), the
// segment history (what holds the fragmentation) and the segment map (hover): how a frame reads, and which
// frame of a stack names an allocation.
#include <cstdint>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace memledger {

struct SnapshotFrame;
struct Trace;

struct FrameView {
    std::string_view filename;
    std::int64_t line = 0;
    std::string_view name;
};

enum class FrameKind {
    User, // a .py file of the user's own code: outside torch, installed packages and the standard library
    Torch, // torch's own Python code
    Library, // other installed Python packages (site-packages, dist-packages: einops, transformers, ...)
    CPython, // the interpreter (.c files, <frozen ...>, the standard library)
    Cpp, // C++ frames: ATen, autograd, the allocator, the unwinder
    Unknown, // "??" or empty
};
FrameKind classifyFrame(std::string_view filename);

// "file:line name"; a frame with neither line nor name (a model run's module path) is just its file name, a
// C++ frame with neither file nor line ("??", 0) just its name.
std::string frameText(const FrameView& f);
std::string frameText(const SnapshotFrame& f);

// A frame of torch.compile's generated code that carries its FX node (fx_node_name, fx_node_target, written
// when PYTORCH_FX_MEMORY_PROFILE_DEBUG augments a snapshot): its name as "forward (fx: add_1 = aten.add.Tensor)",
// so that the frame reads with its node everywhere; `name` alone when the frame has neither.
std::string fxFrameName(std::string_view name, std::string_view nodeName, std::string_view nodeTarget);

// "at::_ops::mul_Tensor::call(...)" -> "aten::mul"; "" when the frame is not an ATen operator's entry.
std::string atenOpOfFrame(std::string_view name);

// The allocator's and the unwinder's own frames (torch::unwind, CapturedTraceback, gather_with_cpp, the CUDA
// caching allocator): the innermost frames of every C++ stack, the same for every allocation.
bool isAllocatorFrame(std::string_view name);

// A frame of Python code (a .py file: the user's, a library's, torch's or the standard library's).
bool isPythonFrame(const FrameView& f);
// The order a stack is read in (the call stack dock, the hover): its Python frames first, innermost first, then
// the others (C++, the interpreter) in their order; `pythonOnly` leaves the others out. Indices into `frames`.
std::vector<std::size_t> pythonFirstOrder(const std::vector<FrameView>& frames, bool pythonOnly);

// What names an allocation: the first frame of user code; for a stack with none (backward, optimizer, C++
// only), the ATen op the stack passes through, past the allocator's and unwinder's frames; otherwise the
// first known frame, or the first frame. "" for an empty stack.
std::string allocationSite(const std::vector<FrameView>& frames);
std::string allocationSite(const std::vector<SnapshotFrame>& frames);

// A layer of a snapshot's module tree: a Python frame whose function is `forward`, the user's own modules and
// library ones (torch/nn/modules/linear.py) alike; torch.compile's generated forward with its FX node
// ("forward (fx: ...)") too.
bool isForwardFrame(const FrameView& f);
// memledger.capture's CPU frames name the module a forward belongs to: "forward (module: backbone.body)" gives
// "backbone.body" (the model's named_modules path; the outermost module by its class name); "" for other frames.
std::string_view moduleOfFrame(const FrameView& f);
// The module path of a stack (frames innermost first, as PyTorch lists them): its forward frames, outermost
// first. Empty: the allocation was made outside any forward.
std::vector<FrameView> forwardChain(const std::vector<FrameView>& frames);
// The path of a module tree's row: the chain's frames, "model.py:120 forward / block.py:48 forward" with the
// files' full names (a captured module's frame: "module backbone.body", whichever line); "" for an empty chain.
std::string modulePath(const std::vector<FrameView>& chain, std::size_t count = SIZE_MAX);
// The frames of a call stack of a trace (innermost first); views into the trace's strings.
std::vector<FrameView> framesOfStack(const Trace& t, std::uint32_t stack);
std::vector<FrameView> framesOf(const std::vector<SnapshotFrame>& frames);
// A frame's text with its file's folders left out: "block.py:48 forward" (the tree's row names; the full text
// is the row's path).
std::string shortFrameText(const FrameView& f);

} // namespace memledger
