#pragma once
// Private to core/recording: runs on the meta device, where tensors have shapes and no memory. Every storage a
// meta run makes is reported to the recorder as the CPU allocator reports its blocks (a size and an address of its
// own), so the same recorder and ledgers describe it; the kernels PyTorch's C++ lacks for meta tensors are
// memledger's (meta_kernels.cpp).
#include <string>

namespace memledger {

// Installs memledger's meta allocator and kernels, once for the process (a later call does nothing). The allocator
// stays installed: weights moved to the meta device keep its storages after the run, and their frees must reach
// it. Throws RunError where metaRunsSupported() (model.h) is false.
void installMetaDevice();

// Defined in meta_kernels.cpp; calling it links the kernels' registrations into the program.
void registerMetaKernels();

// While one lives, scaled_dot_product_attention on meta tensors on this thread allocates what a GPU's fused kernels
// (flash or memory-efficient attention) do: the output and each query row's log-sum-exp, no scores
// (RunOptions::gpu_attention). Without it the CPU's choice decides, as on the CPU.
class GpuAttentionOnMeta {
public:
    GpuAttentionOnMeta();
    ~GpuAttentionOnMeta();
    GpuAttentionOnMeta(const GpuAttentionOnMeta&) = delete;
    GpuAttentionOnMeta& operator=(const GpuAttentionOnMeta&) = delete;

private:
    bool before_;
};

} // namespace memledger
