"""packaging/gpu-check.sh's measure of what a GPU process holds outside PyTorch's caching allocator: the CUDA
context and the libraries' modules (cuBLAS, cuBLASLt, cuDNN), the memory the fit table's "CUDA context" line
estimates (core/whatif/gpu_fit.cpp). The device's used memory (nvidia-smi, before this process touches CUDA; then
torch.cuda.mem_get_info) less what the caching allocator has reserved, after each step:
  init          torch.cuda.init() and a one-element tensor (the context, lazy module loading as the default)
  matmul        a bfloat16 and a float32 1024x1024 matmul (cuBLAS and cuBLASLt handles, their kernels)
  conv          a float32 and a bfloat16 convolution with cuDNN (its handle and kernels)
  backward      a small module's backward and an AdamW step (the autograd engine's device threads)
Prints one JSON line: the GPU, torch, CUDA, CUDA_MODULE_LOADING, and each step's bytes outside the allocator.
"""
import json
import os
import subprocess
import sys


def used_by_others():
    """The device's used memory before this process made a context (nvidia-smi), in bytes; None without it."""
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                           capture_output=True, text=True, timeout=60)
        return int(r.stdout.strip().splitlines()[0]) * 1048576 if r.returncode == 0 else None
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return None


def main():
    before = used_by_others()
    import torch

    if not torch.cuda.is_available():
        print("gpu-context: this torch sees no CUDA GPU")
        return 2
    dev = torch.device("cuda", 0)
    result = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda,
              "cudnn": torch.backends.cudnn.version(), "CUDA_MODULE_LOADING": os.environ.get("CUDA_MODULE_LOADING"),
              "used_before_bytes": before, "steps": {}}

    def outside(step):
        torch.cuda.synchronize()
        free, total = torch.cuda.mem_get_info()
        used = total - free - (before or 0)
        result["steps"][step] = {"outside_allocator_bytes": used - torch.cuda.memory_reserved(),
                                 "allocator_reserved_bytes": torch.cuda.memory_reserved()}
        result["total_bytes"] = total

    torch.cuda.init()
    torch.zeros(1, device=dev)
    outside("init")
    for dtype in (torch.bfloat16, torch.float32):
        a = torch.randn(1024, 1024, device=dev, dtype=dtype)
        (a @ a).sum().item()
    outside("matmul")
    for dtype in (torch.float32, torch.bfloat16):
        conv = torch.nn.Conv2d(64, 64, 3, padding=1).to(dev, dtype)
        conv(torch.randn(8, 64, 56, 56, device=dev, dtype=dtype)).sum().item()
    outside("conv")
    m = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)).to(dev)
    opt = torch.optim.AdamW(m.parameters())
    m(torch.randn(64, 512, device=dev)).square().mean().backward()
    opt.step()
    outside("backward")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
