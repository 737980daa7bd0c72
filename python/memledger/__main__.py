"""python -m memledger [FILE] [memledger's options]: opens the memledger window (or runs a memledger command
such as `analyze`) with the installed or built executable."""

import os
import sys

from .binary import BinaryNotFound, find_binary


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
    os.execv(binary, [binary] + argv)


if __name__ == "__main__":
    sys.exit(main())
