#!/usr/bin/env bash
# Fills .gpu-deps/ (git-ignored) with what packaging/gpu-check.sh needs to build on a GPU machine that has
# PyTorch 2 but no apt, no network and no Debian packages: nlohmann_json's header and CMake config, copied
# from this Debian machine (nlohmann-json3-dev). Copy .gpu-deps/ with the source tree to the GPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
./packaging/install-deps.sh
rm -rf .gpu-deps
mkdir -p .gpu-deps/include .gpu-deps/share/cmake
cp -r /usr/include/nlohmann .gpu-deps/include/
cp -r /usr/share/cmake/nlohmann_json .gpu-deps/share/cmake/
echo "memledger: .gpu-deps/ ready ($(du -sh .gpu-deps | cut -f1)); carry it with the sources"
