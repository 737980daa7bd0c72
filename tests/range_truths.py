#!/usr/bin/python3
"""Truths for tests/test_range*.cpp, read from a CUDA memory snapshot with Python's pickle alone (no memledger
code): the state at the end per device and, for a single-device trace, what events [FIRST, END) allocate and
the most bytes alive at a moment of that range.

usage: range_truths.py SNAPSHOT [FIRST END]   -> one JSON object on stdout
"""
import json
import pickle
import sys


class RefuseGlobals(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"global {module}.{name} refused")


def alive_before(segments, traces):
    """Bytes alive when the trace began, in the trace's unit (the bytes requested): the blocks alive at the end
    that no alloc of the trace made, and the blocks the trace frees without having allocated them. Also the
    truth of tests/test_diff.cpp."""
    made, freed_unmade = {}, 0
    for device, entries in enumerate(traces):
        for e in entries:
            key = (e.get("device", device), e.get("addr"))
            if e["action"] == "alloc":
                made[key] = e["size"]
            elif e["action"] == "free_completed":
                if key in made:
                    del made[key]
                else:
                    freed_unmade += e["size"]
    traced = any(entries for entries in traces)  # without a trace, no unit of its own: the blocks' sizes
    return freed_unmade + sum((b.get("requested_size") if traced else None) or b["size"]
                              for seg in segments for b in seg["blocks"]
                              if b["state"] == "active_allocated" and (seg["device"], b["address"]) not in made)


def main():
    path = sys.argv[1]
    with open(path, "rb") as f:
        data = RefuseGlobals(f).load()
    segments = data if isinstance(data, list) else data["segments"]
    traces = [] if isinstance(data, list) else data.get("device_traces", [])
    out = {"devices": {}}
    for seg in segments:
        d = out["devices"].setdefault(str(seg["device"]), {"reserved": 0, "allocated": 0, "requested": 0, "blocks": 0,
                                                          "largest": 0})
        d["reserved"] += seg["total_size"]
        for b in seg["blocks"]:
            if b["state"] == "active_allocated":
                d["allocated"] += b["size"]
                d["requested"] += b.get("requested_size") or b["size"]  # the trace's unit
                d["blocks"] += 1
                d["largest"] = max(d["largest"], b["size"])
    out["allocated"] = sum(d["allocated"] for d in out["devices"].values())
    entries = [e for t in traces for e in t]
    out["entries"] = len(entries)
    if not entries:  # no trace, no unit of its own: the blocks' sizes
        for d in out["devices"].values():
            d["requested"] = d["allocated"]
    out["has_time"] = bool(entries) and all("time_us" in e for e in entries)
    if len(sys.argv) > 3 and len([t for t in traces if t]) == 1:
        first, end = int(sys.argv[2]), int(sys.argv[3])
        live = alive_before(segments, traces)
        peak = None
        total = count = largest = 0
        for i, e in enumerate(entries[:end]):
            if i == first:
                peak = live  # the level the range starts at
            if e["action"] == "alloc":
                live += e["size"]
                if i >= first:
                    total += e["size"]
                    count += 1
                    largest = max(largest, e["size"])
            elif e["action"] == "free_completed":
                live -= e["size"]
            else:
                continue
            if i >= first:
                peak = max(peak, live)
        out["range"] = {"first": first, "end": end, "peak": peak, "allocated": total, "count": count,
                        "largest": largest}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
