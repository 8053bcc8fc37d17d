#!/usr/bin/env bash
# Runs every libFuzzer target of a TESSERA_FUZZ build for a fixed time each, starting from
# its seed corpus in git (tests/fuzz/corpus/<name>/) plus what earlier runs found
# (<build>/fuzz-corpus/<name>/, not in git), and prints one line per target with its
# execution count. A finding fails the script (after the targets under way) with the fuzzer's report and a reproducer
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
# Targets run FUZZ_JOBS at a time (default: a core each), so CI's 2 cores fuzz two at once.
jobs_max=${FUZZ_JOBS:-$(nproc)}
[[ "$jobs_max" =~ ^[1-9][0-9]*$ ]] || { echo "fuzz: FUZZ_JOBS must be a whole number >= 1, not '$jobs_max'"; exit 1; }
# Fuzzers still running when the script ends early (cancelled, an error) end with it.
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT
findings="$build/fuzz-findings"
mkdir -p "$findings"
for t in "${targets[@]}"; do
  [ -x "$build/tests/fuzz/fuzz_$t" ] || { echo "fuzz: $build/tests/fuzz/fuzz_$t is missing (build with -DTESSERA_FUZZ=ON: make build-san)"; exit 1; }
  rm -f "$findings/$t.summary" "$findings/$t.failed"
done

# One target from its corpora; a summary line when clean, a .failed marker when not.
fuzz_one() {
  local t=$1 work="$build/fuzz-corpus/$1" log="$findings/$1.log"
  mkdir -p "$work"
  # -rss_limit_mb bounds the whole process, -malloc_limit_mb any one allocation, -timeout
  # any one input (seconds): each is a finding when crossed.
  local seed_arg=()
  [ -n "${FUZZ_SEED:-}" ] && seed_arg=(-seed="$FUZZ_SEED")
  if ! "$build/tests/fuzz/fuzz_$t" "${seed_arg[@]}" -max_total_time="$seconds" -rss_limit_mb=2048 \
       -malloc_limit_mb=512 -timeout=10 -print_final_stats=1 -artifact_prefix="$findings/$t-" \
       "$work" "$root/tests/fuzz/corpus/$t" >"$log" 2>&1; then
    touch "$findings/$t.failed"
    return
  fi
  local execs cov
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo "?")
  printf '%-10s %10s executions  %6s coverage edges  %ss, clean\n' "$t" "$execs" "$cov" "$seconds" \
    > "$findings/$t.summary"
}

for t in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
  echo "fuzz: $t for ${seconds}s"
  fuzz_one "$t" &
done
wait

status=0
for t in "${targets[@]}"; do
  [ -e "$findings/$t.failed" ] || [ ! -e "$findings/$t.summary" ] || continue
  tail -n 60 "$findings/$t.log" 2>/dev/null || true
  echo "fuzz: $t FOUND A PROBLEM (log $findings/$t.log, reproducer in $findings/)"
  status=1
done
[ $status -eq 0 ] || exit 1
printf '\nfuzz summary\n'
for t in "${targets[@]}"; do cat "$findings/$t.summary"; done
