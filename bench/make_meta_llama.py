"""Writes a Llama-shaped decoder (tests/fixtures/lm_zoo.LlamaGQA) as a torch.export program, for bench_meta.sh.

    make_meta_llama.py OUT.pt2 SIZE [--real] [--seq T]

SIZE: 7b (hidden 4096, 32 layers, 32 heads, intermediate 11008, vocab 32000: 6.7 B parameters), 70b (Llama-2-70B's
shape: hidden 8192, 80 layers, 64 heads, 8 key/value heads, intermediate 28672: 69 B parameters) or small (hidden
256, 4 layers, 8 heads, intermediate 688, vocab 32000). Built under torch.device("meta") (weights saved as shapes
only) unless --real (float32 weights on the CPU). Exported at 2xT int64 tokens (T = 512 unless --seq; the batch
dynamic, 1..64). Prints the
parameter count, the seconds the export and save took and this process's peak resident set.
"""
import argparse
import os
import resource
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "fixtures"))

from lm_zoo import LlamaGQA  # noqa: E402

SIZES = {
    "7b": dict(vocab=32000, dim=4096, n_layers=32, n_heads=32, n_kv=32, hidden=11008),
    "70b": dict(vocab=32000, dim=8192, n_layers=80, n_heads=64, n_kv=8, hidden=28672),
    "small": dict(vocab=32000, dim=256, n_layers=4, n_heads=8, n_kv=8, hidden=688),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("size", choices=sorted(SIZES))
    ap.add_argument("--real", action="store_true")
    ap.add_argument("--seq", type=int, default=512)
    a = ap.parse_args()
    config = dict(SIZES[a.size], max_seq=a.seq)
    start = time.perf_counter()
    device = "cpu" if a.real else "meta"
    with torch.device(device):
        model = LlamaGQA(**config).eval()
    tokens = torch.zeros(2, a.seq, dtype=torch.long, device=device)  # 2: an example of 1 would fix the batch
    # The batch dynamic (1..64), so that `memledger whatif --batch` can vary it.
    ep = torch.export.export(model, (tokens,), dynamic_shapes={"tokens": {0: torch.export.Dim("batch", min=1, max=64)}})
    torch.export.save(ep, a.out)
    params = sum(p.numel() for p in model.parameters())
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(f"{a.out}: {a.size} on {device}, {params:,} parameters, export and save {time.perf_counter() - start:.1f} s, "
          f"peak RSS {rss / 2**20:.0f} MiB, file {os.path.getsize(a.out):,} bytes")


if __name__ == "__main__":
    main()
