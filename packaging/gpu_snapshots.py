"""packaging/gpu-check.sh's snapshot rows: real CUDA memory snapshots whose contents are known from the model,
read by memledger (usage: gpu_snapshots.py MEMLEDGER OUT_DIR).

On the GPU, in a fresh process, a small decoder-style model (embedding, attention-like linears, layer norm) goes
to the device and takes two AdamW steps while the caching allocator records its history from an empty device
(`_record_memory_history(record_pinned_host_memory=True)` where this torch has it). The run carries the keys that
memledger reads but that no shared file has: `record_function` ranges (external_annotations), user_metadata
(`_set_memory_metadata`), an `annotate` entry (`_annotate_tensor`), and pinned host memory (host_segments,
host_traces). PyTorch's side of each figure:

  peak_total_bytes            torch.cuda.max_memory_allocated() over the whole recording: at most it, within
                              1% (the trace counts the bytes requested, PyTorch's counter the rounded blocks)
  weights ledger, max         the parameters' and buffers' bytes (equal)
  gradients ledger, max       the gradients' bytes, all alive before zero_grad (equal)
  optimizer_state ledger, max AdamW's exp_avg and exp_avg_sq on the device (equal)
  annotations                 the record_function ranges the pickle holds (equal)
  tensor annotations          one, naming the annotated tensor's block (equal bytes)
  host (pinned)               the pinned blocks host_segments holds (segments and bytes equal)

Prints a table; exits 0 only when every row agrees, 2 when this torch cannot record (no CUDA).
"""
import json
import os
import subprocess
import sys

RECORD = r'''
import json, pickle, sys, torch
import torch.nn as nn
out = sys.argv[1]
if not torch.cuda.is_available():
    sys.exit(2)
mem = torch.cuda.memory
kwargs = dict(max_entries=1000000)
import inspect
params = inspect.signature(mem._record_memory_history).parameters
host = "record_pinned_host_memory" in params
if host:
    kwargs["record_pinned_host_memory"] = True
torch.manual_seed(0)

class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
    def forward(self, x):
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        a = torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5, dim=-1) @ v
        x = x + self.proj(a)
        return x + self.ff(x)

class Model(nn.Module):
    def __init__(self, vocab=1000, d=256, layers=2):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d) for _ in range(layers))
        self.head = nn.Linear(d, vocab)
    def forward(self, ids):
        x = self.emb(ids)
        for b in self.blocks:
            x = b(x)
        return self.head(x)

dev = torch.device("cuda:0")
model = Model()
torch.cuda.synchronize()
torch.cuda.reset_peak_memory_stats()
mem._record_memory_history(**kwargs)
model.to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
pinned_bytes = []
for step in range(2):
    mem._set_memory_metadata("step %d" % step)
    batch = torch.randint(0, 1000, (4, 128), pin_memory=host)
    pinned_bytes.append(batch.untyped_storage().nbytes())
    ids = batch.to(dev, non_blocking=True)
    with torch.autograd.profiler.record_function("forward"):
        logits = model(ids)
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), ids.flatten())
    if step == 0 and hasattr(mem, "_annotate_tensor"):
        mem._annotate_tensor(logits, "logits kept for the loss")
        annotated = logits.untyped_storage().nbytes()
    with torch.autograd.profiler.record_function("backward"):
        loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    grad_bytes = sum(g.untyped_storage().nbytes() for g in grads)
    opt.step()
    opt.zero_grad(set_to_none=True)
    del logits, loss, ids, grads
torch.cuda.synchronize()
mem._dump_snapshot(out)
mem._record_memory_history(enabled=None)
weights = sum(t.untyped_storage().nbytes() for t in list(model.parameters()) + list(model.buffers()))
state = sum(v.untyped_storage().nbytes() for s in opt.state.values() for v in s.values()
            if torch.is_tensor(v) and v.is_cuda)
print(json.dumps({"max_allocated": torch.cuda.max_memory_allocated(), "weights": weights, "gradients": grad_bytes,
                  "optimizer_state": state, "host": host,
                  "annotated_bytes": annotated if hasattr(mem, "_annotate_tensor") else None,
                  "torch": torch.__version__}))
'''


class Refuse(__import__("pickle").Unpickler):
    def find_class(self, module, name):
        raise ValueError("a snapshot needs no globals: %s.%s" % (module, name))


def pickle_truth(path):
    """What the pickle itself holds: ranges, annotate entries, pinned blocks."""
    with open(path, "rb") as fh:
        snap = Refuse(fh).load()
    starts = sum(1 for a in snap.get("external_annotations", []) if a.get("stage") == "START")
    annotate = sum(1 for lst in snap.get("device_traces", []) for e in lst if e.get("action") == "annotate")
    host = snap.get("host_segments", [])
    return {"ranges": starts, "annotate": annotate, "host_segments": len(host),
            "host_bytes": sum(s.get("total_size", s.get("size", 0)) for s in host), "keys": sorted(snap)}


def main(memledger, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    snap = os.path.join(out_dir, "gpu-training.pickle")
    rec = subprocess.run([sys.executable, "-c", RECORD, snap], capture_output=True, text=True)
    if rec.returncode == 2:
        print("gpu-snapshots: this torch sees no CUDA GPU")
        return 2
    if rec.returncode != 0:
        print("gpu-snapshots: recording failed:", rec.stderr.strip().splitlines()[-3:])
        return 1
    truth = json.loads(rec.stdout.strip().splitlines()[-1])
    p = pickle_truth(snap)
    report = os.path.join(out_dir, "gpu-training.json")
    run = subprocess.run([memledger, "analyze", snap, "--json", report], capture_output=True, text=True)
    if run.returncode != 0:
        print("gpu-snapshots: memledger failed (exit %d): %s" % (run.returncode, (run.stderr or run.stdout)[-400:]))
        return 1
    with open(report) as fh:
        j = json.load(fh)
    led = j.get("ledgers", {})
    snapj = j.get("snapshot", {})
    within = lambda ours, theirs: ours is not None and 0 <= theirs - ours <= 0.01 * theirs
    rows = [
        ("peak_total_bytes", j.get("peak_total_bytes"), truth["max_allocated"], within),
        ("weights ledger, max", led.get("weights", {}).get("max"), truth["weights"]),
        ("gradients ledger, max", led.get("gradients", {}).get("max"), truth["gradients"]),
        ("optimizer_state ledger, max", led.get("optimizer_state", {}).get("max"), truth["optimizer_state"]),
        ("record_function ranges", len(snapj.get("annotations", [])), p["ranges"]),
    ]
    if truth["annotated_bytes"] is not None:
        listed = snapj.get("tensor_annotations", [])
        rows.append(("tensor annotations", len(listed), p["annotate"]))
        rows.append(("annotated block, bytes", listed[0].get("bytes") if listed else None, truth["annotated_bytes"]))
    if truth["host"]:
        h = snapj.get("host", {})
        rows.append(("host (pinned) segments", h.get("segments"), p["host_segments"]))
        rows.append(("host (pinned) reserved", h.get("reserved_bytes"), p["host_bytes"]))
    print("gpu-snapshots: torch %s, %s (keys: %s)" % (truth["torch"], snap, ", ".join(p["keys"])))
    print("%-30s %16s %16s  %s" % ("figure", "memledger", "PyTorch", ""))
    failed = 0
    for row in rows:
        name, ours, theirs = row[:3]
        ok = row[3](ours, theirs) if len(row) > 3 else ours == theirs
        failed += 0 if ok else 1
        print("%-30s %16s %16s  %s" % (name, ours, theirs, "ok" if ok else "DIFFERS"))
    for n in j.get("notes", []):
        if "reads past" in n or "host (pinned)" in n or "annotation" in n:
            print("  note:", n)
    print("gpu-snapshots: %d of %d rows agree" % (len(rows) - failed, len(rows)))
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
