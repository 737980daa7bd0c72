#!/usr/bin/env bash
# Installs, builds and starts memledger on its built-in demo model (extra arguments are passed on).
# MEMLEDGER_TORCH=pip: the build against PyTorch 2.x from pip (build-torch2/).
set -euo pipefail
cd "$(dirname "$0")/.."
./packaging/build.sh >&2
exec "./$(./packaging/build-dir.sh)/app/memledger" "$@"
