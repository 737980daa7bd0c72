#!/usr/bin/env bash
# Installs what is missing (Debian packages), configures and builds memledger into build/.
set -euo pipefail
cd "$(dirname "$0")/.."
./packaging/install-deps.sh
if [ ! -f build/CMakeCache.txt ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build build -j2
