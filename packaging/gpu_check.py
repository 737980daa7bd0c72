"""packaging/gpu-check.sh's comparison: memledger's CUDA run of each fixture model against PyTorch's own
counters over the same warm-up and run, in a fresh process each (usage: gpu_check.py MEMLEDGER FIXTURES)."""
import json
import os
import subprocess
import sys
import tempfile

FIXTURE_SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures")
PEAK_TOLERANCE = 0.01
RESERVED_TOLERANCE = 0.02

REFERENCE = r'''
import json, sys, torch
path, shapes, mode = sys.argv[1], sys.argv[2], sys.argv[3]
dev = torch.device("cuda:0")
torch._C._jit_set_graph_executor_optimize(False)  # as memledger runs it
m = torch.jit.load(path, map_location="cpu").float().to(dev)
inputs = [torch.randn([int(d) for d in s.split("x")], device=dev) for s in shapes.split(",")]

sys.path.insert(0, sys.argv[4])  # tests/fixtures: the loss takes the first tensor as the truths' script does
from make_fixtures import first_tensor

if mode == "train":
    m.train()
    params = [p for p in m.parameters() if p.requires_grad and p.is_floating_point()]
    # memledger's C++ SGD updates one parameter at a time: the same here (no foreach).
    opt = torch.optim.SGD(params, lr=0.01, momentum=0.9, foreach=False)
    def step():
        out = m(*inputs)
        loss = first_tensor(out).sum()
        loss.backward()
        del out, loss
        opt.step()
    step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    step()
else:
    m.eval()
    with torch.no_grad():
        m(*inputs)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        out = m(*inputs)
        del out
torch.cuda.synchronize()
print(json.dumps({"max_allocated": torch.cuda.max_memory_allocated(), "max_reserved": torch.cuda.max_memory_reserved()}))
'''


def mib(b):
    return "%9.2f MiB" % (b / 1048576.0)


def off(a, b):
    return abs(a - b) / max(b, 1)


def main(memledger, fixtures):
    with open(os.path.join(fixtures, "truth.json")) as f:
        truth = json.load(f)
    cases = []
    for name, t in sorted(truth.items()):
        if not isinstance(t, dict) or "file" not in t or "input" not in t or "float16" in name:
            continue
        cases.append((name, t["file"], t["input"], "inference"))
        if "train" in t:
            cases.append((name, t["file"], t["train"]["input"], "train"))
    print("%-24s %-9s %13s %13s %6s  %13s %13s %6s  %13s %13s" % ("model", "mode", "memledger peak",
          "torch peak", "diff", "memledger rsv", "torch rsv", "diff", "simulated rsv", "real rsv"))
    failed = 0
    tmp = tempfile.mkdtemp(prefix="gpu-check-")
    for name, file, shapes, mode in cases:
        path = os.path.join(fixtures, file)
        out = os.path.join(tmp, "%s-%s.json" % (name, mode))
        cmd = [memledger, "analyze", path, "--input", shapes, "--device", "cuda", "--json", out]
        if mode == "train":
            cmd += ["--mode", "train", "--optimizer", "sgd", "--loss", "sum"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print("%-24s %-9s memledger failed (exit %d): %s" % (name, mode, r.returncode,
                  (r.stderr or r.stdout).strip().splitlines()[-1:]))
            failed += 1
            continue
        with open(out) as f:
            j = json.load(f)
        ref = subprocess.run([sys.executable, "-c", REFERENCE, path, shapes, mode, FIXTURE_SCRIPTS], capture_output=True, text=True)
        if ref.returncode != 0:
            print("%-24s %-9s the PyTorch reference failed: %s" % (name, mode, ref.stderr.strip().splitlines()[-1:]))
            failed += 1
            continue
        t = json.loads(ref.stdout.strip().splitlines()[-1])
        peak, reserved = j["peak_total_bytes"], j.get("reserved_peak_bytes", 0)
        simulated = j.get("simulated_gpu", {}).get("reserved_peak_bytes", 0)
        ok = off(peak, t["max_allocated"]) <= PEAK_TOLERANCE and off(reserved, t["max_reserved"]) <= RESERVED_TOLERANCE
        failed += 0 if ok else 1
        print("%-24s %-9s %s %s %5.1f%%  %s %s %5.1f%%  %s %s %s" % (name, mode, mib(peak), mib(t["max_allocated"]),
              100 * off(peak, t["max_allocated"]), mib(reserved), mib(t["max_reserved"]),
              100 * off(reserved, t["max_reserved"]), mib(simulated), mib(reserved), "ok" if ok else "DIFFERS"))
    print("gpu-check: %d of %d rows agree (peaks within %d%%, reserved within %d%%)"
          % (len(cases) - failed, len(cases), PEAK_TOLERANCE * 100, RESERVED_TOLERANCE * 100))
    return 0 if failed == 0 and cases else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
