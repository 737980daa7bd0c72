#!/usr/bin/env bash
# cmake --install puts the binary, desktop file, icon and metainfo in place; cpack -G DEB makes a .deb
# whose dependencies are Debian's runtime packages.
set -euo pipefail
build=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
for f in bin/memledger lib/memledger/libmemledger_core.so lib/memledger/libmemledger_torch.so share/applications/memledger.desktop share/icons/hicolor/scalable/apps/memledger.svg \
         share/metainfo/io.github.memledger.metainfo.xml; do
  [ -f "$work/prefix/$f" ] || { echo "not installed: $f"; exit 1; }
done
version=$("$work/prefix/bin/memledger" --version)
echo "$version"
# The installed binary finds its libtorch part (loaded when a model runs) through its RPATH: the demo runs.
"$work/prefix/bin/memledger" analyze --json "$work/demo.json" >/dev/null \
  || { echo "the installed memledger cannot run its demo model"; exit 1; }
(cd "$work" && cpack -G DEB --config "$build/CPackConfig.cmake" -B "$work/deb" >/dev/null)
deb=$(ls "$work"/deb/memledger_*.deb)
info=$(dpkg-deb -I "$deb")
contents=$(dpkg-deb -c "$deb")
if grep -q "libtorch 1\." <<<"$version"; then # Debian's libtorch: a package dependency
  grep -q "Depends:.*libtorch1.13" <<<"$info" || { echo "the .deb does not depend on libtorch1.13"; exit 1; }
else # pip's libtorch: found through the RPATH, never Debian's package
  ! grep -q "Depends:.*libtorch" <<<"$info" || { echo "the PyTorch 2 build's .deb depends on Debian's libtorch"; exit 1; }
fi
grep -q "libqcustomplot2.1-qt6" <<<"$info" || { echo "the .deb does not depend on QCustomPlot"; exit 1; }
grep -q "usr/bin/memledger" <<<"$contents" || { echo "the .deb has no binary"; exit 1; }
grep -q "usr/lib/memledger/libmemledger_torch.so" <<<"$contents" || { echo "the .deb has no libtorch part"; exit 1; }
echo "packaging ok: $(basename "$deb")"
