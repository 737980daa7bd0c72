"""Finds the memledger executable: $MEMLEDGER_BINARY, then the wheel's (memledger/bin/memledger, beside this file),
then `memledger` on PATH (the Debian package installs /usr/bin/memledger), then the build trees of the repository
this package sits in (build/, build-debian/)."""

import os
import shutil
from pathlib import Path


class BinaryNotFound(RuntimeError):
    pass


# The program a wheel installs beside this package (pip install memledger).
WHEEL_BINARY = Path(__file__).resolve().parent / "bin" / "memledger"


def _is_launcher(path):
    # pip's console script for this package (`#!python ...`): it would run this code again, not the program.
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"#!"
    except OSError:
        return False


def _candidates():
    env = os.environ.get("MEMLEDGER_BINARY")
    if env:
        yield Path(env)
    # The wheel's own program (pip install memledger), before PATH: there `memledger` is this package's launcher.
    yield WHEEL_BINARY
    on_path = shutil.which("memledger")
    if on_path and not _is_launcher(on_path):
        yield Path(on_path)
    # A checkout: the repository root is two folders above this file's (python/memledger/). An install into
    # .venv-torch by the README's commands points back here through a .pth file, so this finds build/ too.
    root = Path(__file__).resolve().parents[2]
    for build in ("build", "build-debian"):
        yield root / build / "app" / "memledger"


def find_binary():
    tried = []
    for path in _candidates():
        tried.append(str(path))
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    raise BinaryNotFound(
        "memledger: no memledger executable found (tried: " + ", ".join(tried) + "). "
        "Build it with ./packaging/build.sh, install the Debian package, or set MEMLEDGER_BINARY.")
