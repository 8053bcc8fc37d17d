#!/usr/bin/env bash
# Packs what a GPU call needs from this machine into .gpu/ (ignored), under the device
# tool's 64 MiB carry limit: the stripped binaries of $BUILD (default build) as
# .gpu/build.txz, and in .gpu/lib the shared libraries the GPU host lacks (libjpeg.so.62,
# which libtessera.so links). The binaries share one fatbin, so xz with a dictionary larger
# than a binary stores it about once: ~13 MB for the four.
# In the call: carry .gpu/build.txz and .gpu/lib (and a scene), then
#   tar xJf .gpu/build.txz -C /root && BUILD=/root/build scripts/gpu/run.sh ...
# (/root/build stays while the machine is warm: later calls need not carry it again).
set -euo pipefail
cd "$(dirname "$0")/../.."
# (A build of every architecture, the default, does not fit the limit: build the GPU's own,
# e.g. make build CUDA_ARCHS=90-real, or cmake -DTESSERA_CUDA_ARCHS=90 in another folder.)
BUILD=${BUILD:-build}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/build/tests" .gpu/lib
for f in tessera libtessera.so tests/tessera_gpu_tests tests/tessera_backend_ops_tests tests/test_c_api; do
  strip -o "$stage/build/$f" "$BUILD/$f"
done
tar cf - -C "$stage" build | xz -T1 --lzma2=preset=6,dict=192MiB > .gpu/build.txz.tmp
mv .gpu/build.txz.tmp .gpu/build.txz
cp -L "$(ldconfig -p | awk '/libjpeg.so.62 / {print $NF; exit}')" .gpu/lib/
du -h .gpu/build.txz .gpu/lib/*
