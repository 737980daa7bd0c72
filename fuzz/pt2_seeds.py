#!/usr/bin/env python3
"""Seeds for fuzz/fuzz_pt2: the JSON records (models/*.json, data/*/*_config.json) of real torch.export programs,
copied out of their archives at run time (they are megabytes, so none is committed but fuzz/corpus-pt2/'s small
one).

    pt2_seeds.py OUT_DIR [PROGRAM.pt2 | DIR ...]    (default: build/fixtures, searched for *.pt2)

Only the standard library."""
import sys
import zipfile
from pathlib import Path


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    sources = [Path(p) for p in sys.argv[2:]] or [Path(__file__).resolve().parent.parent / "build" / "fixtures"]
    programs = [p for s in sources for p in ([s] if s.is_file() else sorted(s.rglob("*.pt2")))]
    count = 0
    for program in programs:
        try:  # the tests' hostile programs are among them: what cannot be read is left out
            z = zipfile.ZipFile(program)
            names = z.namelist()
        except (zipfile.BadZipFile, OSError, EOFError, ValueError):
            continue
        for name in names:
            if name.endswith(".json") and ("/models/" in name or name.endswith("_config.json")):
                try:
                    data = z.read(name)
                except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError):
                    continue
                (out / f"{program.stem}-{Path(name).name}").write_bytes(data)
                count += 1
    print(f"{count} seeds from {len(programs)} programs in {out}")


if __name__ == "__main__":
    main()
