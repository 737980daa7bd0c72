#pragma once
// Private to core/recording: PyTorch's CUDA autocast, applied by memledger to the operators of a torch.export
// program run on the meta device. libtorch's own autocast kernels cast only tensors of the device they are for (a
// meta tensor is never "eligible"), so a meta run of `torch.autocast("cuda", dtype=torch.bfloat16)` would record
// float32 everywhere. The emulation uses libtorch's own rules: the op lists of ATen/autocast_mode.h (the
// AT_FORALL_* lists the CUDA kernels are registered from), cached_cast's weight-cast cache, and libtorch's `to` for
// every cast, so the casts are recorded as autocast makes them (with their autograd nodes).
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <optional>
#include <string>

namespace memledger {

// Whether this build knows libtorch's CUDA autocast lists (ATen/autocast_mode.h carries them from PyTorch 2.4 on).
bool autocastEmulationAvailable();

// `with torch.autocast("cuda", dtype=lower, cache_enabled=cache):` for the exported program's interpreter on this
// thread, from construction to close(): the interpreter calls autocastBeforeCall before each operator.
class AutocastEmulationScope {
public:
    AutocastEmulationScope(c10::ScalarType lower, bool cache);
    ~AutocastEmulationScope();
    AutocastEmulationScope(const AutocastEmulationScope&) = delete;
    AutocastEmulationScope& operator=(const AutocastEmulationScope&) = delete;
    // Leaves the region: the weight-cast cache is dropped (its casts nothing else holds are freed here), as
    // torch.autocast.__exit__'s clear_cache does.
    void close();
};

// Under an AutocastEmulationScope: casts the tensor arguments on `stack` (in `op`'s schema order) as the CUDA
// autocast kernel of `op` would, and returns the operator to call instead where autocast redispatches to another
// overload (norm with a dtype); nothing outside a scope, or for an op autocast lets through.
std::optional<c10::OperatorHandle> autocastBeforeCall(const c10::OperatorHandle& op, torch::jit::Stack& stack);

// Whether an AutocastEmulationScope is open on this thread.
bool autocastEmulationActive();
// The autocast type of the scope open on this thread; nullopt where none is.
std::optional<c10::ScalarType> autocastEmulationType();

// Calls the operator `name`.`overload` ("" for the default) with `stack` as the interpreter calls a node: under a
// scope, autocast's casts first. Returns the operator's outputs. For the ops memledger calls itself in a region (the
// training step's loss), which libtorch's composite kernels would otherwise run without the emulation.
torch::jit::Stack callUnderAutocast(const char* name, const char* overload, torch::jit::Stack stack);

} // namespace memledger
