#!/usr/bin/env bash
# Installs, builds and starts memledger on its built-in demo model (extra arguments are passed on).
# Default: the build against PyTorch 2.x from pip (build/); MEMLEDGER_TORCH=debian: Debian's libtorch 1.13.
set -euo pipefail
cd "$(dirname "$0")/.."
./packaging/build.sh >&2
exec "./$(./packaging/build-dir.sh)/app/memledger" "$@"
