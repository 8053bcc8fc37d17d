#!/usr/bin/env bash
# Runs every libFuzzer target of a TESSERA_FUZZ build for a fixed time each, starting from
# its seed corpus in git (tests/fuzz/corpus/<name>/) plus what earlier runs found
# (<build>/fuzz-corpus/<name>/, not in git), and prints one line per target with its
# execution count. A finding stops the script with the fuzzer's report and a reproducer
# (crash-*/oom-*/timeout-* in <build>/fuzz-findings/).
#   scripts/fuzz.sh BUILD_DIR SECONDS_PER_TARGET [TARGET...]
# FUZZ_SEED=N fixes libFuzzer's random seed (CI does, so a red run can be replayed).
set -euo pipefail
build=${1:?build folder}
seconds=${2:?seconds per target}
shift 2
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(image config module snapshot training_snapshot transforms nerf_snapshot program_cache camera_path
                                  viewer_message c_api colmap llff mesh)
root="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$build/fuzz-findings"
summary=""
for t in "${targets[@]}"; do
  bin="$build/tests/fuzz/fuzz_$t"
  [ -x "$bin" ] || { echo "fuzz: $bin is missing (build with -DTESSERA_FUZZ=ON: make build-san)"; exit 1; }
  work="$build/fuzz-corpus/$t"
  mkdir -p "$work"
  log="$build/fuzz-findings/$t.log"
  echo "fuzz: $t for ${seconds}s"
  # -rss_limit_mb bounds the whole process, -malloc_limit_mb any one allocation, -timeout
  # any one input (seconds): each is a finding when crossed.
  seed_arg=()
  [ -n "${FUZZ_SEED:-}" ] && seed_arg=(-seed="$FUZZ_SEED")
  if ! "$bin" "${seed_arg[@]}" -max_total_time="$seconds" -rss_limit_mb=2048 -malloc_limit_mb=512 -timeout=10 \
       -print_final_stats=1 -artifact_prefix="$build/fuzz-findings/$t-" \
       "$work" "$root/tests/fuzz/corpus/$t" >"$log" 2>&1; then
    tail -n 60 "$log"
    echo "fuzz: $t FOUND A PROBLEM (log $log, reproducer in $build/fuzz-findings/)"
    exit 1
  fi
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo "?")
  summary+=$(printf '%-10s %10s executions  %6s coverage edges  %ss, clean' "$t" "$execs" "$cov" "$seconds")$'\n'
done
printf '\nfuzz summary\n%s' "$summary"
