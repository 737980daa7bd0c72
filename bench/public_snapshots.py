#!/usr/bin/env python3
"""Checks memledger against real CUDA memory snapshots from public GitHub repositories.

The files are NOT part of the project: bench/public_snapshots.txt lists where each comes from
(`repo commit path`). Put them in a folder (default /tmp/pubsnaps), named REPO-OWNER__REPO__PATH with
every "/" of the path made "_" (the name --download and --mirror give them), then:

    python3 bench/public_snapshots.py [--dir /tmp/pubsnaps] [--memledger build/app/memledger]
    python3 bench/public_snapshots.py --download          # fetch the listed files first (raw.githubusercontent.com)
    python3 bench/public_snapshots.py --mirror ROOT       # or take them from bare git mirrors ROOT/OWNER+NAME/repo

For each file the script reads the pickle itself with an unpickler that refuses every global (a snapshot
needs none), works out the figures below, runs `memledger analyze FILE --json OUT` (with a timeout), and
compares. It prints a Markdown table and exits 1 when memledger crashed, timed out, failed on a snapshot,
opened a file that is not a snapshot, or disagreed on a figure.

What is compared (docs/snapshots.md says what memledger means by each):
- segments, reserved (sum of segments' total_size), allocated (sum of the size of blocks whose state is
  active_allocated): snapshot.segments / reserved_bytes / allocated_bytes.
- trace entries (all device_traces lists) and each action's count: snapshot.trace_entries / trace_actions
  (memledger counts the actions it knows; any other action is "skipped", so the script compares the known ones).
- devices: the segments' devices, the entries' `device`, and one per device_traces list (PyTorch writes one
  list per device, an empty one too): snapshot.devices.
- external_annotations: entries (snapshot.annotation_entries) and START/END ranges (snapshot.annotations[]:
  an END closes the latest open START of its name and device; an END without one is left out; a START never
  closed is a range with end null).
- user_metadata / compile_context: per non-empty value ("" and compile_context "N/A" mean none), the allocs
  and bytes they allocated: snapshot.user_metadata[] / compile_contexts[] (value, allocations, allocated_bytes).
- host_segments / host_traces (pinned host memory): counts, reserved (size or total_size) and entries:
  snapshot.host.
- peak (peak_bytes): an independent replay of the trace. The trace is a ring buffer, so what was alive before
  its first entry is told block by block, in the trace's unit (its entries carry the bytes requested; a block's
  size is rounded up): the blocks alive at the end that no alloc of the trace made, by their requested_size,
  and each block a free_completed frees without its alloc in the trace (alive_before()). The entries are merged
  in time order (a stable sort on time_us, when more than one list has entries and all have times; else list
  order); an alloc adds its size, a free_completed subtracts it; the peak is the most bytes alive at once, from
  that start on. Without entries (a bare list of segments, an empty trace) it is the blocks' sizes at the end;
  a trace of frees only (a file dumped just after recording began) peaks at its start. The script also reports
  the lowest start that keeps the replay from going below zero (`start_min`), and how much larger than their
  requests the blocks are that the trace allocated and the end holds (the notes). Per-device peaks are listed in
  the notes for files of several GPUs.
- annotation ranges' peak_bytes / added_bytes, as docs/snapshots.md defines them (see truths()).
Listed, not compared: the allocator model's reproduced segment allocations (allocator_model).
"""
from __future__ import annotations

import argparse
import bisect
import collections
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
KNOWN_ACTIONS = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
                 "segment_map", "segment_unmap", "oom", "snapshot"}


class SafeUnpickler(pickle.Unpickler):
    def find_class(self, module, name):  # a snapshot needs no globals: refuse every one
        raise pickle.UnpicklingError(f"refused global {module}.{name}")


def local_name(repo: str, path: str) -> str:
    return repo.replace("/", "__") + "__" + path.replace("/", "_")


def read_list(path: str):
    out = []
    if not os.path.exists(path):
        return out
    for line in open(path, encoding="utf-8"):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        repo, commit, fpath = line.split(None, 2)
        out.append((repo, commit, fpath))
    return out


def fetch_files(entries, folder, mirror_root=None):
    os.makedirs(folder, exist_ok=True)
    for repo, commit, fpath in entries:
        dest = os.path.join(folder, local_name(repo, fpath))
        if os.path.exists(dest):
            continue
        try:
            if mirror_root:
                gitdir = os.path.join(mirror_root, repo.replace("/", "+"), "repo")
                if os.path.isdir(os.path.join(gitdir, ".git")):
                    gitdir = os.path.join(gitdir, ".git")
                data = subprocess.run(["git", f"--git-dir={gitdir}", "show", f"{commit}:{fpath}"],
                                      check=True, capture_output=True).stdout
            else:
                url = f"https://raw.githubusercontent.com/{repo}/{commit}/{fpath}"
                with urllib.request.urlopen(url, timeout=60) as r:
                    data = r.read()
            with open(dest, "wb") as f:
                f.write(data)
        except Exception as e:  # noqa: BLE001 - reported, the rest go on
            print(f"could not fetch {repo}@{commit[:7]}:{fpath}: {e}", file=sys.stderr)


def size_of_segment(s):
    if not isinstance(s, dict):
        return 0
    v = s.get("total_size", s.get("size", 0))
    return v if isinstance(v, int) else 0


def alive_before(segs, addr_rows, device=None):
    """Bytes alive when the trace began, block by block, in the trace's unit (a trace entry carries the bytes
    requested, a block's size is rounded up): the blocks alive at the end that no alloc of the trace made
    (same device and address, not freed since), by their requested_size, and each block a free_completed frees
    without its alloc in the trace. A file without a trace has no unit of its own: the blocks' sizes.
    Returns (start, slack, traced): slack is how much larger than their requests the blocks are that the trace
    allocated and the end holds (the 512-byte rounding, a remainder the allocator did not split off)."""
    open_allocs, freed_before = {}, 0
    for d, a, size, addr in addr_rows:
        if device is not None and d != device:
            continue
        if a == "alloc":
            open_allocs[(d, addr)] = size
        elif a == "free_completed" and open_allocs.pop((d, addr), None) is None:
            freed_before += size
    start, slack, traced = freed_before, 0, 0
    for s in segs:
        if not isinstance(s, dict) or (device is not None and s.get("device") != device):
            continue
        off = s.get("address", 0) if isinstance(s.get("address"), int) else 0
        for b in s.get("blocks") or []:
            if not isinstance(b, dict):
                continue
            bsize = b.get("size", 0) if isinstance(b.get("size"), int) else 0
            addr = b.get("address", off)
            if b.get("state") == "active_allocated":
                if (s.get("device"), addr) in open_allocs:
                    slack += bsize - open_allocs[(s.get("device"), addr)]
                    traced += 1
                else:
                    req = b.get("requested_size")
                    start += req if addr_rows and isinstance(req, int) and req > 0 else bsize
            off += bsize
    return start, slack, traced


def replay_peak(entries, start):
    """entries: list of (device, action, size) in the merged order. Returns (peak, start_min): the most bytes
    alive at once from `start` on, and the least start that keeps the replay from going below zero."""
    net = low = 0
    live = peak = start
    for _, a, size in entries:
        if a == "alloc":
            net += size
            live += size
        elif a == "free_completed":
            net -= size
            live -= size
        else:
            continue
        low = min(low, net)
        peak = max(peak, live)
    return peak, -low


def truths(path: str) -> dict:
    """The figures of one file, read with a pickle reader that runs nothing."""
    t = {"snapshot": False}
    try:
        with open(path, "rb") as f:
            root = SafeUnpickler(f).load()
    except Exception as e:  # noqa: BLE001
        t["why"] = f"{type(e).__name__}: {e}"[:160]
        return t
    if isinstance(root, list):
        layout, segs, traces, root_d = "bare list", root, [], {}
    elif isinstance(root, dict) and isinstance(root.get("segments"), list):
        layout, segs, root_d = "dict", root["segments"], root
        traces = root.get("device_traces") or []
    else:
        t["why"] = "a pickle, but not a snapshot (no 'segments' list)"
        return t
    t.update(snapshot=True, layout=layout, keys=sorted(map(str, root_d.keys())))
    t["segments"] = len(segs)
    t["reserved"] = sum(size_of_segment(s) for s in segs)
    t["allocated"] = sum(b.get("size", 0) for s in segs if isinstance(s, dict)
                         for b in (s.get("blocks") or []) if isinstance(b, dict) and b.get("state") == "active_allocated")
    t["expandable"] = any(isinstance(s, dict) and s.get("is_expandable") for s in segs)
    t["legacy_history"] = any(isinstance(b, dict) and "history" in b for s in segs if isinstance(s, dict)
                              for b in (s.get("blocks") or []))
    devices = {s.get("device") for s in segs if isinstance(s, dict) and isinstance(s.get("device"), int)}
    devices |= set(range(len(traces)))
    lists = [(i, [e for e in (lst or []) if isinstance(e, dict)]) for i, lst in enumerate(traces)]
    actions = collections.Counter()
    entry_keys = collections.Counter()
    timed = True
    merged = []
    um = collections.defaultdict(lambda: [0, 0])
    cc = collections.defaultdict(lambda: [0, 0])
    for i, lst in lists:
        for e in lst:
            a = e.get("action")
            actions[a] += 1
            entry_keys.update(e.keys())
            dev = e.get("device", i)
            if isinstance(dev, int):
                devices.add(dev)
            if not isinstance(e.get("time_us"), int):
                timed = False
            merged.append((e.get("time_us") or 0, dev, a, e.get("size", 0) or 0, e.get("addr")))
            if a == "alloc":
                v = e.get("user_metadata")
                if isinstance(v, str) and v:
                    um[v][0] += 1
                    um[v][1] += e.get("size", 0) or 0
                v = e.get("compile_context")
                if isinstance(v, str) and v and v != "N/A":
                    cc[v][0] += 1
                    cc[v][1] += e.get("size", 0) or 0
    if sum(1 for _, lst in lists if lst) > 1 and timed:
        merged.sort(key=lambda r: r[0])  # stable: list order among equal times
    t["devices"] = sorted(devices)
    t["entries"] = sum(len(lst) for _, lst in lists)
    t["actions"] = dict(actions)
    t["unknown_actions"] = {k: v for k, v in actions.items() if k not in KNOWN_ACTIONS}
    t["entry_keys"] = sorted(map(str, entry_keys))
    t["timed"] = timed and t["entries"] > 0
    t["user_metadata"] = {k: tuple(v) for k, v in um.items()}
    t["compile_context"] = {k: tuple(v) for k, v in cc.items()}
    t["user_metadata_key"] = "user_metadata" in entry_keys
    t["compile_context_key"] = "compile_context" in entry_keys
    rows = [(d, a, s) for _, d, a, s, _ in merged]
    addr_rows = [(d, a, s, addr) for _, d, a, s, addr in merged]
    t["start"], t["slack"], t["slack_blocks"] = alive_before(segs, addr_rows)
    t["peak"], t["start_min"] = replay_peak(rows, t["start"])
    busy = {s.get("device") for s in segs if isinstance(s, dict)} | {r[0] for r in rows}
    if len(busy) > 1:
        per = {}
        for d in sorted(busy):
            rd = [r for r in rows if r[0] == d]
            per[d] = replay_peak(rd, alive_before(segs, addr_rows, d)[0])[0]
        t["peak_per_device"] = per
    ann = root_d.get("external_annotations") or []
    t["annotation_entries"] = len(ann) if isinstance(ann, list) else 0
    opened = collections.defaultdict(list)
    ranges = []
    for e in ann if isinstance(ann, list) else []:
        if not isinstance(e, dict) or not isinstance(e.get("stage"), str) or not isinstance(e.get("name"), str) \
                or not isinstance(e.get("time_us"), (int, float)):
            continue
        dev = e.get("device") if isinstance(e.get("device"), int) else 0
        key = (e["name"], dev)
        if e["stage"] == "START":
            opened[key].append(len(ranges))
            ranges.append([e["name"], dev, e["time_us"], None])
        elif e["stage"] == "END" and opened[key]:
            ranges[opened[key].pop()][3] = e["time_us"]
    ranges.sort(key=lambda r: r[2])  # stable: memledger lists them by start
    # Each range's figures as docs/snapshots.md tells them: of the bytes the trace allocated (an alloc adds, a
    # free_completed of an alloc in the trace subtracts; from 0), the most alive at a moment of the range
    # (entries whose time_us is in [start, end], end the last entry's time for an open range, and the bytes
    # alive just before it) and alive at its end minus alive before it.
    if t["timed"]:
        live, now, opened_a = [], 0, {}
        for _, d, a, size, addr in merged:
            if a == "alloc":
                now += size
                opened_a[(d, addr)] = True
            elif a == "free_completed" and opened_a.pop((d, addr), None):
                now -= size
            live.append(now)
        times = [r[0] for r in merged]
        figs = []
        for name, dev, start_us, end_us in ranges:
            end = end_us if end_us is not None else times[-1]
            first, last = bisect.bisect_left(times, start_us), bisect.bisect_right(times, end)
            before = live[first - 1] if first > 0 else 0
            peak = max([before] + live[first:last])
            added = (live[last - 1] if last > 0 else 0) - before
            figs.append((name, start_us, end_us, peak, added))
        t["annotation_figures"] = figs
    t["annotations"] = len(ranges)
    t["annotations_closed"] = sum(1 for r in ranges if r[3] is not None)
    hs, ht = root_d.get("host_segments"), root_d.get("host_traces")
    t["host"] = hs is not None or ht is not None
    if t["host"]:
        t["host_segments"] = len(hs) if isinstance(hs, list) else 0
        t["host_reserved"] = sum(size_of_segment(s) for s in hs) if isinstance(hs, list) else 0
        t["host_entries"] = len(ht) if isinstance(ht, list) else 0
    return t


def run_memledger(binary, path, timeout):
    out = tempfile.NamedTemporaryFile(suffix=".json", delete=False)
    out.close()
    t0 = time.monotonic()
    try:
        p = subprocess.run([binary, "analyze", path, "--json", out.name], capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        os.unlink(out.name)
        return {"status": "timeout", "time": time.monotonic() - t0}
    dt = time.monotonic() - t0
    res = {"status": "ok" if p.returncode == 0 else "error", "rc": p.returncode, "time": dt,
           "stderr": (p.stderr or p.stdout).strip().splitlines()[-1:] }
    if p.returncode < 0 or p.returncode >= 128:
        res["status"] = "crash"
    if p.returncode == 0:
        try:
            with open(out.name) as f:
                res["json"] = json.load(f)
        except Exception as e:  # noqa: BLE001
            res["status"] = "error"
            res["stderr"] = [f"no readable JSON: {e}"]
    os.unlink(out.name)
    return res


def compare(t, m):
    """Returns (cells, problems, notes)."""
    problems, notes = [], []
    s = m["json"].get("snapshot", {})
    checks = [("segments", t["segments"], s.get("segments")),
              ("reserved", t["reserved"], s.get("reserved_bytes")),
              ("allocated", t["allocated"], s.get("allocated_bytes")),
              ("trace entries", t["entries"], s.get("trace_entries")),
              ("devices", t["devices"], s.get("devices")),
              ("annotation entries", t["annotation_entries"], s.get("annotation_entries")),
              ("annotation ranges", t["annotations"], len(s.get("annotations", []))),
              ("closed ranges", t["annotations_closed"],
               sum(1 for a in s.get("annotations", []) if a.get("end_us") is not None)),
              ("peak", t["peak"], m["json"].get("peak_bytes"))]
    if "annotation_figures" in t:
        got = [(a.get("name"), a.get("start_us"), a.get("end_us"), a.get("peak_bytes"), a.get("added_bytes"))
               for a in s.get("annotations", [])]
        bad = [(w, g) for w, g in zip(t["annotation_figures"], got) if tuple(w) != tuple(g)]
        if bad:
            problems.append(f"{len(bad)} annotation ranges differ (name, start_us, end_us, peak, added), first: "
                            f"python {bad[0][0]}, memledger {bad[0][1]}")
    ta = s.get("trace_actions", {})
    for a, n in sorted(t["actions"].items(), key=lambda kv: str(kv[0])):
        if a in KNOWN_ACTIONS:
            checks.append((f"{a} entries", n, ta.get(a, 0)))
    if "oom" in t["actions"]:
        checks.append(("ooms", t["actions"]["oom"], s.get("ooms")))
    for key, mkey in (("user_metadata", "user_metadata"), ("compile_context", "compile_contexts")):
        got = {e["value"]: (e["allocations"], e["allocated_bytes"]) for e in s.get(mkey, [])
               if e.get("value") is not None}
        checks.append((key, t[key], got))
    if t["host"]:
        h = s.get("host") or {}
        checks += [("host segments", t["host_segments"], h.get("segments")),
                   ("host reserved", t["host_reserved"], h.get("reserved_bytes")),
                   ("host entries", t["host_entries"], h.get("trace_entries"))]
        if -3 not in (h.get("device"),):
            problems.append(f"host device is {h.get('device')!r}, not -3")
        if "host (pinned)" not in s.get("device_names", []):
            problems.append("device_names lacks 'host (pinned)'")
    for name, want, got in checks:
        if want != got:
            problems.append(f"{name}: python {want}, memledger {got}")
    if t["start"] < t["start_min"]:
        notes.append(f"alive before the trace {t['start']} B < the {t['start_min']} B the trace frees first: "
                     "the replay goes below zero")
    elif t["start"] and t["entries"]:
        notes.append(f"alive before the trace {t['start']:,} B (min {t['start_min']:,})")
    if t["slack"]:
        notes.append(f"the {t['slack_blocks']:,} blocks the trace allocated and the end holds are {t['slack']:,} B "
                     "over their requests (the timeline and the peak count requests)")
    am = m["json"].get("allocator_model") or {}
    if am.get("recorded_segment_allocs"):
        notes.append(f"allocator model: {am.get('reproduced_segment_allocs')} of {am.get('recorded_segment_allocs')} "
                     f"{am.get('unit')} sizes reproduced" + ("" if am.get("matched") else
                                                             f" (model made {am.get('model_segment_allocs')})"))
    if "peak_per_device" in t:
        notes.append("per-device peaks " + ", ".join(f"cuda:{d} {p:,}" for d, p in t["peak_per_device"].items()))
    if t["unknown_actions"]:
        notes.append(f"other actions {t['unknown_actions']}")
    if t["user_metadata"] or t["compile_context"]:
        notes.append(f"user_metadata values {len(t['user_metadata'])}, compile_context values "
                     f"{len(t['compile_context'])}")
    elif t["user_metadata_key"] or t["compile_context_key"]:
        notes.append("entries carry user_metadata/compile_context, all empty")
    if t["expandable"]:
        notes.append("expandable segments")
    if t["legacy_history"]:
        notes.append("legacy history blocks")
    if not t["timed"] and t["entries"]:
        notes.append("no time_us")
    if t["host"]:
        notes.append(f"host: {t['host_segments']} segments, {t['host_entries']} entries")
    ignored = s.get("ignored_keys") or []
    if ignored:
        notes.append("ignored keys " + ", ".join(ignored))
    return problems, notes


def fmt_bytes(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default="/tmp/pubsnaps")
    ap.add_argument("--memledger", default="/tmp/ml-install/bin/memledger")
    ap.add_argument("--list", default=os.path.join(HERE, "public_snapshots.txt"))
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--download", action="store_true", help="fetch the listed files from raw.githubusercontent.com")
    ap.add_argument("--mirror", help="take the listed files from bare git mirrors ROOT/OWNER+NAME/repo")
    ap.add_argument("--details", help="write every file's figures (python and memledger) as JSON here")
    args = ap.parse_args()

    listed = read_list(args.list)
    if args.download or args.mirror:
        fetch_files(listed, args.dir, args.mirror)
    source = {local_name(r, p): f"{r} @ {c[:7]} : {p}" for r, c, p in listed}
    files = [n for n in (local_name(r, p) for r, _, p in listed) if os.path.exists(os.path.join(args.dir, n))]
    files += sorted(n for n in os.listdir(args.dir) if n not in source) if os.path.isdir(args.dir) else []
    missing = [n for n in source if n not in files]
    if not files:
        print(f"no files in {args.dir}: run with --download (or --mirror)", file=sys.stderr)
        return 2

    failed = False
    details = []
    print("| file | source | entries | annotations py / memledger | reserved | allocated | peak | time | notes |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for n in files:
        path = os.path.join(args.dir, n)
        t = truths(path)
        m = run_memledger(args.memledger, path, args.timeout)
        src = source.get(n, "(not listed)")
        short = n.split("__", 2)[-1]
        if m["status"] in ("crash", "timeout"):
            failed = True
            cells = ["-"] * 5 + [f"{m['time']:.2f} s",
                                 f"**memledger {m['status']}** (rc {m.get('rc')}): {' '.join(m.get('stderr', []))}"]
        elif not t["snapshot"]:
            if m["status"] == "ok":
                failed = True
                note = f"**not a snapshot ({t['why']}), yet memledger opened it**"
            else:
                note = f"not a snapshot ({t['why']}); memledger refuses it, rc {m['rc']}: {' '.join(m['stderr'])}"
            cells = ["-"] * 5 + [f"{m['time']:.2f} s", note]
        elif m["status"] != "ok":
            failed = True
            cells = [str(t["entries"])] + ["-"] * 4 + [f"{m['time']:.2f} s",
                                                     f"**memledger failed** rc {m['rc']}: {' '.join(m['stderr'])}"]
        else:
            problems, notes = compare(t, m)
            failed = failed or bool(problems)
            s = m["json"]["snapshot"]
            ann = f"{t['annotations']} / {len(s.get('annotations', []))}" if t["annotation_entries"] else "-"
            ok = lambda a, b: f"yes ({fmt_bytes(a)})" if a == b else f"**no** ({a} vs {b})"  # noqa: E731
            cells = [f"{t['entries']:,}", ann, ok(t["reserved"], s.get("reserved_bytes")),
                     ok(t["allocated"], s.get("allocated_bytes")), ok(t["peak"], m["json"].get("peak_bytes")),
                     f"{m['time']:.2f} s",
                     "; ".join([f"**{p}**" for p in problems] + notes)]
        details.append({"file": n, "source": src, "python": t,
                        "memledger": {k: v for k, v in m.items() if k != "json"},
                        "memledger_snapshot": (m.get("json") or {}).get("snapshot"),
                        "memledger_peak": (m.get("json") or {}).get("peak_bytes")})
        print(f"| {short} | {src.split(' : ')[0]} | " + " | ".join(cells) + " |", flush=True)
    for n in missing:
        print(f"| {n.split('__', 2)[-1]} | {source[n]} | (absent from {args.dir}) | | | | | | |")
    if args.details:
        with open(args.details, "w") as f:
            json.dump(details, f, indent=1, default=str)
    print()
    print(f"{len(files)} files; " + ("FAILED: a crash, a failure or a disagreement above" if failed
                                     else "memledger agrees on every figure"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
