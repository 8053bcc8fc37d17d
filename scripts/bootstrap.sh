#!/usr/bin/env bash
# Installs the Debian packages tessera's build needs, only those missing. Idempotent.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  nlohmann-json3-dev libcli11-dev libfmt-dev libstb-dev libpng-dev libjpeg-dev zlib1g-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  # clang-15 and its OpenMP runtime for the sanitizer/fuzz build (GCC builds use libgomp).
  # Not libomp-dev: it is LLVM 14's and conflicts with libomp-15-dev.
  clang-15 libomp-15-dev
  ocl-icd-opencl-dev opencl-headers pocl-opencl-icd
  # The NeRF web viewer: Boost.Beast (header-only) serves it; the browser test drives
  # headless Chromium; nerf render makes its MP4 with ffmpeg.
  libboost-dev chromium ffmpeg
  # nerf prepare: structure from motion on a user's photos or video (ffmpeg takes the frames).
  colmap
  # The Python package's tests (python/tessera over libtessera.so): PyTorch (CPU), numpy,
  # pytest; pip and setuptools install the package (make python).
  python3-torch python3-numpy python3-pytest python3-pip python3-setuptools python3-wheel python3-venv
  # make wheel: the libraries bundled beside libtessera.so find each other (RUNPATH $ORIGIN).
  patchelf
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "bootstrap: all packages present"
  exit 0
fi

echo "bootstrap: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
