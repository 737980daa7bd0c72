#!/usr/bin/env bash
# The wheel, as a user installs it (issue 58): packaging/wheel.sh builds it, pip installs it into a fresh venv
# whose torch is .venv-torch's (a .pth file: the same torch, no second download), and from that venv alone:
# `memledger --version`, `memledger analyze demo:gpt.pt2 --json`, memledger.export of a small model,
# `python -m memledger` on it (the window, a screenshot under Xvfb). Arguments: the build folder, the checkout.
set -euo pipefail
build=$(realpath "$1")
src=$(realpath "$2")
torch_py=$src/.venv-torch/bin/python
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "wheel: $*" >&2; exit 1; }

MEMLEDGER_WHEEL_PYTHON=$torch_py "$src/packaging/wheel.sh" "$work/dist" >"$work/wheel.log" 2>&1 \
  || { tail -30 "$work/wheel.log"; fail "packaging/wheel.sh failed"; }
wheel=$(ls "$work"/dist/memledger-*.whl)
echo "built $(basename "$wheel") ($(du -h "$wheel" | cut -f1))"
case "$(basename "$wheel")" in
  *manylinux*) ;;
  *) fail "$(basename "$wheel") is not tagged manylinux: auditwheel did not repair it" ;;
esac

# A fresh venv (the system's python3, the wheel's Python version) that sees .venv-torch's torch.
/usr/bin/python3 -m venv "$work/venv"
site=$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
torch_site=$("$torch_py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$torch_site" >"$site/torch-from-memledger-venv.pth"
# torch itself (and the NVIDIA libraries its RPATH names) beside the package, as `pip install torch` puts it: the
# wheel's libtorch part finds libtorch there ($ORIGIN/../../../torch/lib).
for d in torch nvidia "$(cd "$torch_site" && ls -d torch-*.dist-info)"; do
  [ -e "$torch_site/$d" ] && ln -s "$torch_site/$d" "$site/$d"
done
# Nothing is downloaded (--no-index); --no-deps, since pip would also ask for torch's own requirements, which this
# venv's setuptools shadows: the wheel's one requirement, torch at the version it was built against, is checked below.
"$work/venv/bin/python" -m pip install --no-index --no-deps --quiet "$wheel" >"$work/pip.log" 2>&1 \
  || { cat "$work/pip.log"; fail "pip install of the wheel failed"; }
"$work/venv/bin/python" - <<'PY' || fail "the wheel does not require the torch it was built against"
from importlib.metadata import requires
import torch
wanted = "torch==" + torch.__version__.split("+")[0]
assert requires("memledger") == [wanted], (requires("memledger"), wanted)
PY
unset MEMLEDGER_BINARY
export PATH="$work/venv/bin:/usr/bin:/bin"
cd "$work"

# The installed program, not the checkout's: the launcher finds the package's own.
binary=$(python -m memledger --print-binary)
[[ "$binary" == "$site/memledger/bin/memledger" ]] || fail "python -m memledger runs $binary, not the wheel's"
! ldd "$binary" "$site"/memledger/lib/memledger/*.so | grep -q "$build\|$src/build" \
  || fail "the installed program links a library from the build folder"
ldd "$site"/memledger/lib/memledger/libmemledger_torch.so | grep "libtorch_cpu.so =>" | grep -q "$site/.*torch/lib/" \
  || { ldd "$site"/memledger/lib/memledger/libmemledger_torch.so; fail "the wheel's libtorch part does not load the venv's torch"; }

version=$(memledger --version)
echo "$version"
grep -q "memledger $(cat "$src/VERSION")" <<<"$version" || fail "memledger --version says '$version'"
python -c "import memledger, sys; sys.exit(memledger.__version__ != '$(cat "$src/VERSION")')" \
  || fail "memledger.__version__ is not $(cat "$src/VERSION")"

memledger analyze demo:gpt.pt2 --json gpt.json >/dev/null || fail "memledger analyze demo:gpt.pt2 failed"
python - <<'PY' || fail "analyze demo:gpt.pt2 --json wrote no report with a peak"
import json
report = json.load(open("gpt.json"))
assert report["peak_bytes"] > 0, sorted(report)
PY

python - <<'PY' || fail "memledger.export of a small model failed"
import torch, memledger
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
memledger.export(model, (torch.randn(2, 16),), "small.pt2")
PY
[ -s small.pt2 ] || fail "memledger.export wrote no small.pt2"
memledger analyze small.pt2 --json small.json >/dev/null || fail "memledger analyze small.pt2 failed"

# The window from the installed wheel, through python -m memledger (Qt's plugins from the wheel: qt.conf).
MEMLEDGER_SCREENSHOT="$work/window.png" timeout 120 xvfb-run -a -s "-screen 0 1400x900x24" \
  python -m memledger small.pt2 >window.log 2>&1 || { cat window.log; fail "python -m memledger small.pt2 did not show the window"; }
[ "$(stat -c %s window.png 2>/dev/null || echo 0)" -gt 20000 ] || fail "the window's screenshot is missing or blank"
mkdir -p "$build/wheel"
cp window.png "$build/wheel/window.png"
cp "$wheel" "$build/wheel/"
echo "wheel ok: $(basename "$wheel"); the window: $build/wheel/window.png"
