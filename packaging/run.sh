#!/usr/bin/env bash
# Installs, builds and starts memledger on its built-in demo model (extra arguments are passed on).
set -euo pipefail
cd "$(dirname "$0")/.."
./packaging/build.sh >&2
exec ./build/app/memledger "$@"
