#!/usr/bin/env bash
# Installs the Debian bookworm packages memledger needs to build, run and test.
# Idempotent and quiet: does nothing when everything is already installed.
set -euo pipefail
packages=(
  build-essential cmake ninja-build ccache pkg-config
  libtorch-dev qt6-base-dev qt6-svg-dev libqcustomplot-dev libqcustomplot2.1-qt6 nlohmann-json3-dev
  python3-torch python3-torchvision python3-pil
  xvfb xauth chromium clang libclang-rt-14-dev
  dpkg-dev file libgtest-dev libbenchmark-dev
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "memledger: installing ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >/dev/null
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
