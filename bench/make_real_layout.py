#!/usr/bin/python3
"""Writes a real CUDA memory snapshot's trace repeated to N entries, for bench_snapshot (issue 31, item 8).

The source is a snapshot written by torch.cuda.memory._dump_snapshot() on a real GPU (by default
../shared/snapshots/training-loop-annotations-python-frames.pickle: an SGD training loop, Python frames only).
It is read with an unpickler that refuses every global, then its first device trace is repeated until it has N
entries, each repetition later on the trace's clock by the span of the source trace. Sharing follows what
PyTorch writes, as the source file itself has it:

- every repeated entry is a new dict (its keys and action names the same string objects throughout, which
  pickle memoizes once);
- every entry gets a new frames list (a captured traceback is one list per allocation), holding the source's
  frame dicts themselves, so a frame is written once and referred to through the memo afterwards;
- user_metadata and compile_context strings stay the source's objects.

Segments, allocator_settings and external_annotations are the source's.

Usage: make_real_layout.py OUT.pickle [--entries N] [--source SNAPSHOT.pickle]
"""
import argparse
import os
import pickle
import sys


class DataOnly(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refused global {module}.{name}: a snapshot holds data only")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--entries", type=int, default=1000000)
    ap.add_argument("--source", default=os.path.join(
        here, "..", "..", "shared", "snapshots", "training-loop-annotations-python-frames.pickle"))
    a = ap.parse_args()
    with open(a.source, "rb") as f:
        snap = DataOnly(f).load()
    traces = snap.get("device_traces") or []
    base = next((t for t in traces if t), None)
    if not base:
        sys.exit(f"{a.source}: no trace entries to repeat")
    times = [e["time_us"] for e in base if isinstance(e.get("time_us"), int)]
    span = (max(times) - min(times) + 1) if times else 0
    out = []
    rep = 0
    while len(out) < a.entries:
        for e in base:
            if len(out) == a.entries:
                break
            d = dict(e)
            if rep and isinstance(d.get("time_us"), int):
                d["time_us"] = e["time_us"] + rep * span
            if isinstance(e.get("frames"), list):
                d["frames"] = list(e["frames"])
            out.append(d)
        rep += 1
    device = traces.index(base)
    snap["device_traces"] = [out if i == device else t for i, t in enumerate(traces)]
    with open(a.out, "wb") as f:
        pickle.dump(snap, f, protocol=4)


if __name__ == "__main__":
    main()
