"""python -m memledger [FILE] [memledger's options]: opens the memledger window (or runs a memledger command
such as `analyze`) with the installed or built executable."""

import os
import sys
from pathlib import Path

from .binary import WHEEL_BINARY, BinaryNotFound, find_binary


def _environment(binary):
    """The program's environment: this one, and where the wheel's program is run, the libtorch of this Python's torch
    first on the library path, wherever that torch is installed (the program's RPATH reaches only a torch installed
    beside it), so that no other libtorch on the machine is loaded. torch is located, not imported."""
    env = dict(os.environ)
    if Path(binary).resolve() != WHEEL_BINARY:
        return env
    import importlib.util
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.origin:
        lib = os.path.join(os.path.dirname(spec.origin), "lib")
        if os.path.isdir(lib):
            env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (lib, env.get("LD_LIBRARY_PATH")) if p)
    return env


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        binary = find_binary()
    except BinaryNotFound as error:
        print(error, file=sys.stderr)
        return 2
    if argv[:1] == ["--print-binary"]:
        print(binary)
        return 0
    os.execve(binary, [binary] + argv, _environment(binary))


if __name__ == "__main__":
    sys.exit(main())
