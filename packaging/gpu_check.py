"""packaging/gpu-check.sh's comparison: memledger's CUDA run of each fixture model against PyTorch's own
counters over the same warm-up and run, in a fresh process each, and memledger.capture on the GPU (usage:
gpu_check.py MEMLEDGER FIXTURES [WORKDIR]: the reports and captures are written there, else in a temporary
folder)."""
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
torch._C._set_graph_executor_optimize(False)  # as memledger runs it
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


# memledger.capture on the GPU (python/memledger/capture_memory.py): two AdamW steps, then an out-of-memory error
# inside a capture; prints what the files hold, read with an unpickler that refuses every global.
CAPTURE = r'''
import json, os, pickle, sys, torch
import memledger
out = sys.argv[1]

class Refuse(pickle.Unpickler):
    def find_class(self, module, name):
        raise ValueError("a snapshot needs no globals: %s.%s" % (module, name))

def load(path):
    with open(path, "rb") as fh:
        return Refuse(fh).load()

def facts(snap):
    entries = [e for lst in snap.get("device_traces", []) for e in lst]
    return {"allocs": sum(e.get("action") == "alloc" for e in entries),
            "allocs_with_frames": sum(e.get("action") == "alloc" and bool(e.get("frames")) for e in entries),
            "ooms": sum(e.get("action") == "oom" for e in entries),
            "ranges": sorted({a["name"] for a in snap.get("external_annotations", []) if a.get("stage") == "START"}),
            "capture": snap.get("memledger_capture", {})}

dev = torch.device("cuda:0")
model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
train = os.path.join(out, "capture-train.pickle")
with memledger.capture(train) as c:
    for _ in range(2):
        loss = model(torch.randn(64, 256, device=dev)).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
result = {"train": facts(load(train)), "train_writes": c.writes}
oom = os.path.join(out, "capture-oom.pickle")
with memledger.capture(oom) as c:
    try:
        x = model(torch.randn(64, 256, device=dev))
        torch.empty(2 * torch.cuda.get_device_properties(0).total_memory, dtype=torch.uint8, device=dev)
    except torch.cuda.OutOfMemoryError:
        # the observer wrote the file at the failure, before the block ends
        result["oom_at_failure"] = facts(load(oom)) if os.path.exists(oom) else None
result["oom_written"] = c.oom_written
print(json.dumps(result))
'''


def capture_case(memledger, tmp):
    """memledger.capture on the GPU: the history with Python frames, the ranges, the file written at an OOM, and
    memledger opening both files. Returns the number of failures (0 or 1)."""
    env = dict(os.environ, PYTHONPATH=os.path.join(FIXTURE_SCRIPTS, "..", "..", "python"))
    r = subprocess.run([sys.executable, "-c", CAPTURE, tmp], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        print("capture (CUDA): failed: %s" % r.stderr.strip().splitlines()[-3:])
        return 1
    t = json.loads(r.stdout.strip().splitlines()[-1])
    train, at_oom = t["train"], t.get("oom_at_failure")
    wanted = {"memledger.forward", "memledger.backward", "Optimizer.step#AdamW.step"}
    problems = []
    if train["allocs"] == 0 or train["allocs_with_frames"] != train["allocs"]:
        problems.append("allocs %d, with frames %d" % (train["allocs"], train["allocs_with_frames"]))
    if not wanted <= set(train["ranges"]):
        problems.append("ranges %s lack %s" % (train["ranges"], sorted(wanted - set(train["ranges"]))))
    if train["capture"].get("device") != "cuda":
        problems.append("memledger_capture %s" % train["capture"])
    if not t["oom_written"] or not at_oom or at_oom["ooms"] < 1 or "oom" not in at_oom["capture"]:
        problems.append("out of memory: written %s, file at the failure %s" % (t["oom_written"], at_oom))
    for name in ("capture-train.pickle", "capture-oom.pickle"):
        run = subprocess.run([memledger, "analyze", os.path.join(tmp, name)], capture_output=True, text=True)
        if run.returncode != 0:
            problems.append("memledger analyze %s: exit %d %s" % (name, run.returncode, run.stderr.strip()[-200:]))
        elif name == "capture-oom.pickle" and "out of memory" not in run.stdout:
            problems.append("memledger analyze %s names no out-of-memory" % name)
    print("capture (CUDA): %d allocs with Python frames, ranges %s, OOM entries at the failure %s: %s"
          % (train["allocs_with_frames"], ", ".join(train["ranges"]), at_oom and at_oom["ooms"],
             "; ".join(problems) if problems else "ok"))
    return 1 if problems else 0


def mib(b):
    return "%9.2f MiB" % (b / 1048576.0)


def off(a, b):
    return abs(a - b) / max(b, 1)


def main(memledger, fixtures, work=None):
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
    tmp = work or tempfile.mkdtemp(prefix="gpu-check-")
    os.makedirs(tmp, exist_ok=True)
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
    failed += capture_case(memledger, tmp)
    print("gpu-check: %d of %d rows agree (peaks within %d%%, reserved within %d%%; the capture row)"
          % (len(cases) + 1 - failed, len(cases) + 1, PEAK_TOLERANCE * 100, RESERVED_TOLERANCE * 100))
    return 0 if failed == 0 and cases else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
