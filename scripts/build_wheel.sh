#!/usr/bin/env bash
# `make wheel`: a binary wheel of the Python package that pip installs on an x86-64 Linux
# with no compiler and no build tree. It holds libtessera.so from BUILD_DIR (the CUDA
# runtime linked in, every architecture of the default build) and, beside it (RUNPATH
# $ORIGIN), every shared library it needs beyond what manylinux lets a wheel assume (glibc,
# libstdc++, libgcc_s): the image codecs, zlib, OpenMP's runtime, the OpenCL ICD loader.
# Its platform tag says the newest glibc any of them needs (manylinux_2_NN_x86_64).
# Usage: scripts/build_wheel.sh BUILD_DIR [OUT_DIR (default dist)]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: build_wheel.sh BUILD_DIR [OUT_DIR]}
out=${2:-dist}
python=/usr/bin/python3
[ -f "$build/libtessera.so" ] || { echo "build_wheel: $build/libtessera.so is missing (make build)"; exit 1; }
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp -r python "$stage/python"
rm -rf "$stage/python/build" "$stage"/python/*.egg-info "$stage"/python/tessera/*.so*
pkg="$stage/python/tessera"
install -m 755 "$build/libtessera.so" "$pkg/"
# What the loader would take from the system, less manylinux's own libraries. A library
# bundled here finds its own dependencies in the same folder (patchelf: RUNPATH $ORIGIN).
assumed='^(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux-x86-64|linux-vdso)\.'
for lib in $(ldd "$build/libtessera.so" | awk '$3 ~ /^\// {print $3}'); do
  name=$(basename "$lib")
  [[ "$name" =~ $assumed ]] && continue
  install -m 644 "$(readlink -f "$lib")" "$pkg/$name"
  patchelf --set-rpath '$ORIGIN' "$pkg/$name"
done
# The newest glibc symbol version any of them needs sets the manylinux tag.
glibc_minor=$(objdump -T "$pkg"/*.so* | grep -o 'GLIBC_2\.[0-9]*' | cut -d. -f2 | sort -n | tail -1)
tag="py3-none-manylinux_2_${glibc_minor}_x86_64"
"$python" -m pip wheel --quiet --no-deps --no-build-isolation -w "$stage/pure" "$stage/python" 2> >(grep -v 'Setuptools is replacing\|warnings.warn' >&2)
"$python" -m wheel unpack -d "$stage/unpacked" "$stage"/pure/*.whl > /dev/null
sed -i -e 's/^Root-Is-Purelib: true/Root-Is-Purelib: false/' -e "s/^Tag: py3-none-any$/Tag: $tag/" \
  "$stage"/unpacked/*/*.dist-info/WHEEL
mkdir -p "$out"
"$python" -m wheel pack -d "$out" "$stage"/unpacked/* 2>&1 | grep -v 'Setuptools is replacing\|warnings.warn' || true
wheel=$(ls -t "$out"/tessera-*-"$tag".whl | head -1)
echo "wheel: $wheel ($(du -h "$wheel" | cut -f1); libtessera.so $(du -h "$pkg/libtessera.so" | cut -f1) unpacked;" \
     "bundled: $(cd "$pkg" && ls *.so.* 2>/dev/null | tr '\n' ' '))"
