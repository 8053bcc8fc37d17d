#!/usr/bin/env bash
# Runs on the GPU host over binaries built here (`make build`; sm_90, static CUDA runtime):
# prints the GPU, runs the gpu-labelled tests, the MLP benchmark, and optionally
# compute-sanitizer. Logs go to $OUT (or ./gpu_out); a short table is printed last.
#   scripts/gpu/run.sh [tests] [bench] [sanitize] [fit]   (default: tests bench)
set -uo pipefail
BUILD=${BUILD:-build}
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(tests bench)
summary=()

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
"$BUILD/tessera" info | tee -a "$OUT/gpu.txt"

for step in "${steps[@]}"; do
  case "$step" in
    tests)
      "$BUILD/tests/tessera_gpu_tests" --gtest_color=no 2>&1 | tee "$OUT/gpu_tests.log" | grep -E '^\[( +OK|  FAILED|  PASSED|  SKIPPED|measured)|FAILED TEST' | tail -60
      summary+=("gpu tests: $(grep -E '^\[  PASSED|^\[  FAILED' "$OUT/gpu_tests.log" | tr '\n' ' ')")
      ;;
    bench)
      "$BUILD/tessera" bench mlp --device cuda --json "$OUT/bench_mlp.json" 2>&1 | tee "$OUT/bench_mlp.log"
      summary+=("bench mlp: see bench_mlp.log")
      ;;
    sanitize)
      compute-sanitizer --tool memcheck "$BUILD/tests/tessera_gpu_tests" --gtest_filter='*in1_w16*:*in37*:*in5_w64_h2_out3_SiLU*:*Optimizers*' > "$OUT/memcheck.log" 2>&1
      summary+=("memcheck: $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)")
      compute-sanitizer --tool racecheck "$BUILD/tests/tessera_gpu_tests" --gtest_filter='*in1_w16*:*in37*:*in5_w64_h2_out3_SiLU*' > "$OUT/racecheck.log" 2>&1
      summary+=("racecheck: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/racecheck.log" | tail -1)")
      ;;
    fit)
      "$BUILD/tessera" fit function --device cuda --out "$OUT/fit_adam" --json "$OUT/fit_adam.json" --no-progress 2>&1 | tee "$OUT/fit.log"
      "$BUILD/tessera" fit function --device cuda --optimizer sgd --out "$OUT/fit_sgd" --json "$OUT/fit_sgd.json" --no-progress 2>&1 | tee -a "$OUT/fit.log"
      summary+=("fit: $(grep -E 'final MSE|first at|never' "$OUT/fit.log" | tr '\n' ' ')")
      ;;
  esac
done
echo "==== summary"
printf '%s\n' "${summary[@]}"
