#!/usr/bin/env bash
# Installs what is missing, configures and builds memledger.
#   default (or MEMLEDGER_TORCH=pip): PyTorch 2.x from pip (.venv-torch/, CUDA build) into build/
#   MEMLEDGER_TORCH=debian:           Debian's packages (libtorch 1.13, CPU) into build-debian/, same sources
set -euo pipefail
cd "$(dirname "$0")/.."
./packaging/install-deps.sh
case "${MEMLEDGER_TORCH:-}" in
  debian)
    # The window is built (the .deb ships it); its tests, which do not depend on the libtorch, run in the default
    # build only (MEMLEDGER_GUI_TESTS).
    if [ ! -f build-debian/CMakeCache.txt ] || ! grep -q '^MEMLEDGER_GUI_TESTS:BOOL=OFF' build-debian/CMakeCache.txt; then
      cmake -S . -B build-debian -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMEMLEDGER_GUI_TESTS=OFF >/dev/null
    fi
    cmake --build build-debian -j2
    ;;
  "" | pip)
    ./packaging/torch-venv.sh
    if [ ! -f build/CMakeCache.txt ]; then
      torch_dir=$(.venv-torch/bin/python -c 'import os, torch; print(os.path.dirname(torch.__file__))')
      # Torch's CMake config finds CUDA itself (the machine's nvcc; a GPU is not needed to build). Its libraries
      # are looked for in the wheel first (CMAKE_LIBRARY_PATH): Debian's libtorch must not be picked up.
      cuda_args=()
      if command -v nvcc >/dev/null; then
        cuda_args+=("-DCMAKE_CUDA_COMPILER=$(command -v nvcc)")
      fi
      cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DCMAKE_PREFIX_PATH="$torch_dir/share/cmake" -DCMAKE_LIBRARY_PATH="$torch_dir/lib" \
        -DMEMLEDGER_PYTHON="$PWD/.venv-torch/bin/python" "${cuda_args[@]}" >/dev/null
    fi
    cmake --build build -j2
    ;;
  *)
    echo "memledger: MEMLEDGER_TORCH='${MEMLEDGER_TORCH}' is not 'pip' (or unset: PyTorch 2 from pip) or 'debian' (libtorch 1.13)" >&2
    exit 2
    ;;
esac
