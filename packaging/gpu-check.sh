#!/usr/bin/env bash
# On a machine with an NVIDIA GPU and PyTorch 2 (no Qt, no network, no apt): builds memledger's core and CLI
# against that torch into build-gpu/, makes the test fixtures, and for each fixture model (inference, and a
# training step) compares memledger's CUDA run with PyTorch's own counters over the same warm-up and run:
#   peak_total_bytes   against torch.cuda.max_memory_allocated()  (must agree within 1%)
#   reserved peak      against torch.cuda.max_memory_reserved()   (must agree within 2%)
#   simulated reserve  (memledger's allocator model) against the real one (shown, not judged)
#   then packaging/gpu_autocast.py: --autocast on a CUDA run and on the meta device against torch.autocast("cuda")
#   then packaging/gpu_snapshots.py: a real snapshot of two AdamW steps whose weights, gradients, optimizer
#   state, ranges, tensor annotation and pinned host memory the model tells, against memledger's analyze
# What the checks wrote (reports, snapshots, captures) stays in build-gpu/check/.
# Exits 0 only when every row agrees. Needs: cmake, a C++20 compiler, the CUDA toolkit (nvcc) of the torch's
# CUDA major version, and .gpu-deps/ (made by packaging/gpu-deps.sh on a Debian machine) for nlohmann_json.
# PYTHON (default python3) is the Python with torch; torchvision is needed for the fixtures.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
jobs=${JOBS:-$(nproc)}
"$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' || {
  echo "gpu-check: $python cannot import torch or sees no CUDA GPU" >&2
  exit 2
}
[ -f .gpu-deps/include/nlohmann/json.hpp ] || {
  echo "gpu-check: .gpu-deps/ is missing: run packaging/gpu-deps.sh on a Debian machine and copy it here" >&2
  exit 2
}
torch_dir=$("$python" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cuda_args=()
command -v nvcc >/dev/null && cuda_args=("-DCMAKE_CUDA_COMPILER=$(command -v nvcc)")
if [ ! -f build-gpu/CMakeCache.txt ]; then
  cmake -S . -B build-gpu "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DMEMLEDGER_BUILD_GUI=OFF \
    -DMEMLEDGER_BUILD_TESTS=OFF -DCMAKE_PREFIX_PATH="$torch_dir/share/cmake;$PWD/.gpu-deps" \
    -DCMAKE_LIBRARY_PATH="$torch_dir/lib" "${cuda_args[@]}" >build-gpu.log 2>&1 || {
    tail -30 build-gpu.log
    exit 2
  }
fi
cmake --build build-gpu -j"$jobs" --target memledger >>build-gpu.log 2>&1 || {
  tail -30 build-gpu.log
  exit 2
}
build-gpu/app/memledger --version
echo "gpu-check: built in ${SECONDS} s"
"$python" tests/fixtures/make_fixtures.py build-gpu/fixtures
rm -rf build-gpu/check
mkdir -p build-gpu/check
echo "gpu-check: fixtures made at ${SECONDS} s"
status=0
"$python" packaging/gpu_check.py build-gpu/app/memledger build-gpu/fixtures build-gpu/check/runs || status=1
# --autocast on a CUDA run (libtorch's own) and on the meta device (memledger's rules) against torch.autocast("cuda").
"$python" packaging/gpu_autocast.py build-gpu/app/memledger build-gpu/check/autocast || status=1
# Real snapshots whose contents the model tells: ledgers, ranges, annotations, pinned host memory.
"$python" packaging/gpu_snapshots.py build-gpu/app/memledger build-gpu/check/snapshots || status=1
# What a process holds outside the caching allocator (the CUDA context, the libraries' modules): measured, not judged.
"$python" packaging/gpu_context.py | tee build-gpu/check/context.json || true
echo "gpu-check: done at ${SECONDS} s"
exit $status
