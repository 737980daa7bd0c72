"""packaging/gpu-check.sh's autocast rows: memledger's --autocast against PyTorch's own CUDA autocast on a GPU.

For each case PyTorch runs the model on the GPU under torch.autocast("cuda", dtype, cache_enabled) in a fresh
process: a warm-up, then the peak statistics reset, then the recorded run (inference under no_grad; or an AdamW
step: the autocast region around the forward and the loss, loss.backward(), `del out, loss`, opt.step(), as
tests/fixtures/autocast_truths.py does on the CPU), and prints torch.cuda.max_memory_allocated() and
max_memory_reserved(). memledger runs the same file twice:
  cuda: `--device cuda --autocast D`: libtorch's own CUDA autocast on the GPU; peak_total_bytes against
        max_memory_allocated (within 1%, as gpu_check.py's rows), the reserved peak against max_memory_reserved
        (within 2%);
  meta: `--device meta --autocast D` (.pt2 only): memledger applying CUDA autocast's rules itself
        (core/recording/autocast_emulation.cpp), what the fit table's mixed-precision rows stand on; its
        peak_total_bytes against max_memory_allocated less what the GPU run holds that no tensor of the model
        does (cuBLAS / cuBLASLt workspaces, made in the warm-up: memory_allocated() at the reset less the
        resident tensors' blocks), within 2% (the meta device counts exact bytes, the GPU's blocks are rounded
        up to 512 B).
Programs (made here, in a fresh process): tests/fixtures/meta_autocast_truths.py's GptLN with an RMSNorm as its
final norm (gpt_rms.pt2) and with LayerNorm (gpt_ln.pt2), exported with real float32 weights, the batch dynamic,
run at 16x32 int64 tokens with the graph's lifetimes; autocast_truths.py's CnnBN scripted (cnn_bn.pt, TorchScript:
a cuda row only) at 8x3x64x64. Usage: gpu_autocast.py MEMLEDGER WORKDIR. Exits 1 when a judged row differs.
"""
import json
import os
import subprocess
import sys

from gpu_check import mib, off  # packaging/, beside this script

FIXTURE_SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures")
PEAK_TOLERANCE = 0.01
META_TOLERANCE = 0.02
RESERVED_TOLERANCE = 0.02

MAKE = r'''
import os, sys, torch
sys.path.insert(0, sys.argv[2])
import meta_autocast_truths as mat
import meta_weights
from autocast_truths import CnnBN
out = sys.argv[1]
for name, make in mat.PROGRAMS.items():
    torch.manual_seed(0)
    meta_weights.export_to(make().eval(), torch.zeros(2, 32, dtype=torch.int64), os.path.join(out, name + ".pt2"),
                           dynamic_batch=True)
torch.manual_seed(0)
torch.jit.save(torch.jit.script(CnnBN().eval()), os.path.join(out, "cnn_bn.pt"))
'''

REFERENCE = r'''
import json, sys, torch
import torch.nn.functional as F
path, shape, mode, dtype, cache = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5] == "on"
sys.path.insert(0, sys.argv[6])
from autocast_truths import strip_asserts
dev = torch.device("cuda", 0)
dims = [int(d) for d in shape.split(":")[0].split("x")]
if path.endswith(".pt2"):
    m = torch.export.load(path).module()
    strip_asserts(m)  # the graph's dtype checks fail under autocast (autocast_truths.py)
    for node in m.graph.nodes:  # the CPU the program was traced on, named by its arange: the GPU
        if isinstance(node.kwargs.get("device"), torch.device):
            node.kwargs = {**node.kwargs, "device": dev}
    m.recompile()
    m = m.to(dev)
    x = torch.zeros(dims, dtype=torch.int64, device=dev)
    target = torch.zeros(dims[0] * dims[1], dtype=torch.int64, device=dev)
    loss_of = lambda out: F.cross_entropy(out.flatten(0, 1), target)
else:
    torch._C._set_graph_executor_optimize(False)  # as memledger runs it
    m = torch.jit.load(path, map_location="cpu").to(dev)
    x = torch.randn(dims, device=dev)
    target = torch.zeros(dims[0], dtype=torch.int64, device=dev)
    loss_of = lambda out: F.cross_entropy(out, target)
    (m.train if mode == "train" else m.eval)()
region = lambda: torch.autocast("cuda", dtype=getattr(torch, dtype), cache_enabled=cache)

def block_bytes(t):
    return -(-t.untyped_storage().nbytes() // 512) * 512

if mode == "train":
    params = [p for p in m.parameters() if p.requires_grad and p.is_floating_point()]
    opt = torch.optim.AdamW(params, lr=1e-3, foreach=False)
    def step():
        with region():
            out = m(x)
            loss = loss_of(out)
        loss.backward()
        del out, loss
        opt.step()
    step()
    opt.zero_grad(set_to_none=True)
    state = [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v) and v.is_cuda]
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    at_reset = torch.cuda.memory_allocated()
    step()
else:
    state = []
    with torch.no_grad():
        with region():
            m(x)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        at_reset = torch.cuda.memory_allocated()
        with region():
            out = m(x)
        del out
torch.cuda.synchronize()
tensors = list(m.parameters()) + list(m.buffers()) + state + [x] + ([target] if mode == "train" else [])
resident = sum(block_bytes(t) for t in tensors if t.is_cuda)
print(json.dumps({"max_allocated": torch.cuda.max_memory_allocated(), "max_reserved": torch.cuda.max_memory_reserved(),
                  "workspace": max(0, at_reset - resident)}))
'''

CASES = [  # (file, input, mode, autocast dtype, weight-cast cache)
    ("gpt_rms.pt2", "16x32:int64", "inference", "bfloat16", "on"),
    ("gpt_rms.pt2", "16x32:int64", "train", "bfloat16", "on"),
    ("gpt_rms.pt2", "16x32:int64", "train", "bfloat16", "off"),
    ("gpt_ln.pt2", "16x32:int64", "train", "float16", "on"),
    ("cnn_bn.pt", "8x3x64x64", "inference", "bfloat16", "on"),
    ("cnn_bn.pt", "8x3x64x64", "train", "bfloat16", "on"),
]


def memledger_run(memledger, path, shape, mode, dtype, cache, device, out):
    cmd = [memledger, "analyze", path, "--input", shape, "--device", device, "--autocast", dtype,
           "--autocast-cache", cache, "--json", out]
    if path.endswith(".pt2"):
        cmd += ["--lifetimes", "graph"]  # the reference runs torch.export.load(path).module()
    if mode == "train":
        cmd += ["--mode", "train", "--optimizer", "adamw", "--hold-output", "backward",
                "--loss", "next_token" if path.endswith(".pt2") else "cross_entropy"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return None, "exit %d: %s" % (r.returncode, (r.stderr or r.stdout).strip().splitlines()[-1:])
    with open(out) as f:
        return json.load(f), None


def main(memledger, work):
    os.makedirs(work, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTORCH_NO_CUDA_MEMORY_CACHING"}
    made = subprocess.run([sys.executable, "-c", MAKE, work, FIXTURE_SCRIPTS], capture_output=True, text=True,
                          env=env)
    if made.returncode != 0:
        print("autocast (CUDA): the programs could not be made: %s" % made.stderr.strip().splitlines()[-3:])
        return 1
    print("%-12s %-9s %-18s %-4s %13s %13s %6s  %13s %13s %6s" % ("model", "mode", "autocast", "run",
          "memledger peak", "torch peak", "diff", "memledger rsv", "torch rsv", "diff"))
    failed = rows = 0
    for file, shape, mode, dtype, cache in CASES:
        path = os.path.join(work, file)
        label = "%s cache %s" % (dtype, cache)
        ref = subprocess.run([sys.executable, "-c", REFERENCE, path, shape, mode, dtype, cache, FIXTURE_SCRIPTS],
                             capture_output=True, text=True, env=env)
        if ref.returncode != 0:
            print("%-12s %-9s %-18s the PyTorch reference failed: %s" % (file, mode, label,
                  ref.stderr.strip().splitlines()[-2:]))
            failed += 1
            rows += 1
            continue
        t = json.loads(ref.stdout.strip().splitlines()[-1])
        for device in ("cuda", "meta") if file.endswith(".pt2") else ("cuda",):
            rows += 1
            out = os.path.join(work, "%s-%s-%s-%s-%s.json" % (file, mode, dtype, cache, device))
            j, why = memledger_run(memledger, path, shape, mode, dtype, cache, device, out)
            if j is None:
                print("%-12s %-9s %-18s %-4s memledger failed (%s)" % (file, mode, label, device, why))
                failed += 1
                continue
            peak = j["peak_total_bytes"]
            if device == "cuda":
                truth, tolerance = t["max_allocated"], PEAK_TOLERANCE
                reserved = j.get("reserved_peak_bytes", 0)
                ok = off(peak, truth) <= tolerance and off(reserved, t["max_reserved"]) <= RESERVED_TOLERANCE
                rsv = "%s %s %5.1f%%" % (mib(reserved), mib(t["max_reserved"]), 100 * off(reserved, t["max_reserved"]))
            else:
                truth, tolerance = t["max_allocated"] - t["workspace"], META_TOLERANCE
                ok = off(peak, truth) <= tolerance
                rsv = "(GPU workspaces %s left out)" % mib(t["workspace"]).strip()
            failed += 0 if ok else 1
            print("%-12s %-9s %-18s %-4s %s %s %+5.1f%%  %s %s" % (file, mode, label, device, mib(peak), mib(truth),
                  100 * (peak - truth) / max(truth, 1), rsv, "ok" if ok else "DIFFERS"))
    print("gpu-check autocast: %d of %d rows agree (cuda: peaks within %d%%, reserved within %d%%; meta: within %d%%)"
          % (rows - failed, rows, PEAK_TOLERANCE * 100, RESERVED_TOLERANCE * 100, META_TOLERANCE * 100))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
