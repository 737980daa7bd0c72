#pragma once
// Hand-made recorded runs for what-if tests and the benchmark: no model, exact sizes.
#include "recording/model.h"

#include <string>

namespace memledger::test {

class RunBuilder {
public:
    void beginOp(const std::string& module, const std::string& name)
    {
        OpCall op;
        op.module = r.trace.strings.intern(module);
        op.name = r.trace.strings.intern(name);
        op.first_event = static_cast<std::uint32_t>(r.trace.size());
        r.ops.push_back(op);
        inOp = true;
    }
    void endOp()
    {
        r.ops.back().end_event = static_cast<std::uint32_t>(r.trace.size());
        inOp = false;
    }
    std::int32_t alloc(std::int64_t bytes, const std::string& inner)
    {
        auto i = push(bytes, next++, Action::Alloc);
        r.trace.inner_op[i] = r.trace.strings.intern(inner);
        return static_cast<std::int32_t>(i);
    }
    void free(std::int32_t a)
    {
        auto i = push(
            r.trace.bytes[static_cast<std::size_t>(a)], r.trace.address[static_cast<std::size_t>(a)], Action::Free);
        r.trace.partner[i] = a;
        r.trace.partner[static_cast<std::size_t>(a)] = static_cast<std::int32_t>(i);
    }
    RawRun r;

private:
    std::size_t push(std::int64_t bytes, std::uint64_t addr, Action a)
    {
        auto i = r.trace.push(static_cast<std::int64_t>(r.trace.size()), bytes, addr, a, -1);
        if (inOp && !r.ops.empty()) {
            r.trace.op_seq[i] = static_cast<std::uint32_t>(r.ops.size() - 1);
            r.trace.outer_op[i] = r.ops.back().name;
            r.trace.inner_op[i] = r.ops.back().name;
            r.trace.where[i] = r.ops.back().module;
        }
        return i;
    }
    std::uint64_t next = 0x10000;
    bool inOp = false;
};

// `layers` layers at batch b: each a conv with a constant workspace and an output of b * 4 KiB that lives
// until the next layer's output exists; every third layer also makes a b * 512 B temporary, but only from
// batch 2 on (another kernel path at batch 1), so the runs at batch 1 and 2 differ in length.
inline RawRun syntheticRun(std::int64_t b, int layers)
{
    RunBuilder rb;
    std::int32_t prev = -1;
    for (int k = 0; k < layers; ++k) {
        rb.beginOp("layer" + std::to_string(k), "aten::conv2d");
        auto ws = rb.alloc(1000, "aten::mkldnn_convolution");
        auto out = rb.alloc(b * 4096 + 64, "aten::empty");
        if (k % 3 == 0 && b >= 2) {
            auto extra = rb.alloc(b * 512, "aten::contiguous");
            rb.free(extra);
        }
        rb.free(ws);
        rb.endOp();
        if (prev >= 0) {
            rb.beginOp("layer" + std::to_string(k), "aten::relu_");
            rb.free(prev);
            rb.endOp();
        }
        prev = out;
    }
    rb.free(prev); // the output, outside any op
    rb.r.info.batch = b;
    rb.r.info.input_shapes = {{b, 16}};
    rb.r.input_bytes = b * 16 * 4;
    rb.r.parameter_bytes = 1 << 20;
    return std::move(rb.r);
}

} // namespace memledger::test
