#pragma once
// A hand-written trace with call stacks, whose sums are known by hand (test_call_tree, test_call_tree_gui).
#include "report/trace.h"

namespace memledger::test {

// A trace of 10 events on two devices, frames as PyTorch writes them (innermost first).
struct HandTrace {
    Trace t;
    std::uint32_t a = 0, b = 0, c = 0;
    std::uint32_t frame(const char* file, std::int64_t line, const char* name)
    {
        return t.stacks.internFrame(t.strings.intern(file), line, t.strings.intern(name));
    }
    void event(Action act, std::int64_t size, std::uint64_t addr, std::uint32_t stack, std::int8_t dev = 0,
        std::int32_t partner = kNoPartner)
    {
        auto i = t.push(static_cast<std::int64_t>(t.size()) * 1000, size, addr, act, dev);
        t.stack[i] = stack;
        if (partner != kNoPartner) {
            t.partner[i] = partner;
            t.partner[static_cast<std::size_t>(partner)] = static_cast<std::int32_t>(i);
        }
    }
    HandTrace()
    {
        auto unwind = frame("??", 0, "torch::unwind::unwind()");
        auto malloc = frame("CUDACachingAllocator.cpp", 0,
            "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long)");
        auto mul = frame("??", 0, "at::_ops::mul_Tensor::call(at::Tensor const&, at::Tensor const&)");
        auto mm = frame("??", 0, "at::_ops::mm::call(at::Tensor const&, at::Tensor const&)");
        auto engine = frame("engine.cpp", 0, "torch::autograd::Engine::thread_main()");
        auto fwd10 = frame("/home/u/model.py", 10, "forward");
        auto fwd12 = frame("/home/u/model.py", 12, "forward");
        auto mod = frame("/home/u/train.py", 5, "<module>");
        a = t.stacks.internStack({unwind, malloc, mul, fwd10, mod});
        b = t.stacks.internStack({fwd12, mod});
        c = t.stacks.internStack({unwind, malloc, mm, engine});
        event(Action::Alloc, 100, 0x1000, a); // 0
        event(Action::Alloc, 50, 0x2000, b); // 1
        event(Action::Alloc, 30, 0x3000, a); // 2
        event(Action::FreeRequested, 100, 0x1000, a); // 3
        event(Action::Free, 100, 0x1000, a, 0, 0); // 4
        event(Action::Alloc, 200, 0x4000, c); // 5: the peak, 280 bytes alive
        event(Action::Free, 70, 0x9000, 0); // 6: allocated before the trace
        event(Action::Free, 200, 0x4000, c, 0, 5); // 7
        event(Action::Alloc, 20, 0x5000, b, 1); // 8: device 1
        event(Action::Alloc, 10, 0x6000, 0); // 9: no stack
    }
};

} // namespace memledger::test
