#!/usr/bin/env python3
"""core/'s folders in their order, lowest first: a file may include its own folder's headers and those of the
folders below it, never one above (core/CMakeLists.txt says what each folder holds). Exits 1 naming every
include that points back up."""
import pathlib
import re
import sys

ORDER = ["support", "report", "allocator", "snapshot", "recording", "analysis", "whatif", "exports", "session"]

core = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent / "core")
rank = {name: i for i, name in enumerate(ORDER)}
bad = []
folders = sorted(p.name for p in core.iterdir() if p.is_dir())
for name in folders:
    if name not in rank:
        bad.append(f"core/{name}/: a folder the order does not name (tests/check_layering.py)")
for path in sorted(core.glob("*/*")):
    if path.suffix not in (".h", ".cpp") or path.parent.name not in rank:
        continue
    here = path.parent.name
    for number, line in enumerate(path.read_text().splitlines(), 1):
        m = re.match(r'\s*#\s*include\s+"([a-z_]+)/[^"]+"', line)
        if m and m.group(1) in rank and rank[m.group(1)] > rank[here]:
            bad.append(f"core/{here}/{path.name}:{number}: {here}/ includes {m.group(1)}/, which is above it")
for b in bad:
    print(b)
print(f"{len(bad)} include(s) against the order {' < '.join(ORDER)}")
sys.exit(1 if bad else 0)
