#!/usr/bin/env bash
# Runs on the GPU host over binaries built here (`make build CUDA_ARCHS=90-real` for the
# H100/H200, a quarter of the default build's size; static CUDA runtime;
# scripts/gpu/pack.sh packs them under the carry limit):
# prints the GPU, runs the gpu-labelled tests, the MLP benchmark, and optionally
# compute-sanitizer. Logs go to $OUT (or ./gpu_out); a short table is printed last.
#   scripts/gpu/run.sh [tests] [profiles] [profile-fits] [bench] [bench-encoding] [eikonal] [python] [bench-gemv] [bench-gemm] [opencl] [bench-opencl] [fit] [fit-image] [nerf] [nerf-budgets] [nerf-kernels] [lens-check] [viewer] [mesh] [sanitize] [compare] [multi-gpu-checks] [multi-gpu-nerf] [kill-test]   (default: tests bench)
# multi-gpu-checks, multi-gpu-nerf: issue 34's figures on a host with 2+ GPUs (GPUS, default
# cuda:0,cuda:1), each under a device call's 10 minutes.
# compare: every bench suite with a baseline binary ($BASE, default .gpu/base/tessera: a
# build of the commit to compare against) and this build, interleaved in one run, then a
# table of new/baseline per figure.
set -uo pipefail
BUILD=${BUILD:-build}
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
# Shared libraries the host lacks (libjpeg.so.62 for libtessera.so; CLBlast), carried in .gpu/lib.
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:$PWD/.gpu/lib"
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(tests bench)
summary=()
# NVIDIA's OpenCL as the only ICD (the host registers PoCL alone): opencl:0 is then the GPU.
nvidia_icd() {
  mkdir -p /tmp/icd && echo libnvidia-opencl.so.1 > /tmp/icd/nvidia.icd
  export OCL_ICD_VENDORS=/tmp/icd
}

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
"$BUILD/tessera" info | tee -a "$OUT/gpu.txt"

# The GPUs of the multi-GPU steps, and how many.
gpus=${GPUS:-cuda:0,cuda:1}
n_gpus=$(echo "$gpus" | tr ',' '\n' | wc -l)

# Issue 34's process form: one process per GPU of $gpus (n_gpus of them).
multi_gpu_processes() {
  local port=29531 pids=()
  for r in $(seq 0 $((n_gpus - 1))); do
    "$BUILD/tessera" nerf train "${SCENE:-.data/lego}" --seconds 15 --eval-at 15 --rank $r --world-size $n_gpus \
      --init tcp://127.0.0.1:$port --device cuda:$r --out "/tmp/proc_$r" --no-progress > "$OUT/proc_$r.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait $p; echo "process exit $?" | tee -a "$OUT/multi.log"; done
  grep -hE ' s  step |took' "$OUT"/proc_*.log | tee -a "$OUT/multi.log"
  # The same 15 s in one process on N GPUs and on one: the process form must score alike
  # (on the fox it scored 27.5 dB against 30.3, 2026-11-27).
  for where in "--devices $gpus" "--device cuda:0"; do
    "$BUILD/tessera" nerf train "${SCENE:-.data/lego}" --seconds 15 --eval-at 15 $where --out /tmp/inproc \
      --no-progress 2>&1 | grep -E ' s  step ' | sed "s/^/$where: /" | tee -a "$OUT/multi.log"
  done
}

# Rank 1 of N processes killed after 20 s: rank 0 must stop with an error within
# --group-timeout (+5 s for the monitor), not hang.
kill_test() {
  local port=29532 pids=()
  [ "$n_gpus" -gt 1 ] || return 0  # the kill test needs a second rank
  for r in $(seq 0 $((n_gpus - 1))); do
    NCCL_DEBUG=WARN timeout 120 stdbuf -oL "$BUILD/tessera" -v nerf train "${SCENE:-.data/lego}" --seconds 60 --eval-at 60 --rank $r --world-size $n_gpus \
      --init tcp://127.0.0.1:$port --device cuda:$r --group-timeout 30 --out "/tmp/kill_$r" --no-progress \
      > "$OUT/kill_$r.log" 2>&1 &
    pids+=($!)
  done
  # kill the tessera process itself: a SIGKILL to `timeout` would leave its child running
  sleep 20; pkill -9 -P "${pids[1]}"; echo "killed rank 1 at $(date +%T)" | tee -a "$OUT/multi.log"
  # Past --group-timeout + the monitor's 5 s: a rank 0 still alive is stuck; where its threads wait.
  sleep 45
  rank0=$(pgrep -P "${pids[0]}")
  if [ -n "$rank0" ]; then
    echo "rank 0 alive at $(date +%T); its threads:" | tee -a "$OUT/multi.log"
    ps -L -o tid,stat,wchan:32,comm -p "$rank0" | tee -a "$OUT/multi.log"
    for t in /proc/$rank0/task/*; do echo "$(cat $t/comm) $(cat $t/syscall 2>&1 | cut -c1-40)"; done | tee -a "$OUT/multi.log"
    command -v gdb > /dev/null && gdb -p "$rank0" -batch -ex "thread apply all bt 12" > "$OUT/kill_gdb.log" 2>&1
  fi
  for p in "${pids[@]}"; do wait $p; echo "kill test: process exit $? (124 = hung until timeout)" | tee -a "$OUT/multi.log"; done
  grep -hE "error|abort|step |debug|WARN" "$OUT"/kill_*.log 2>/dev/null | tee -a "$OUT/multi.log"
}

# Every gpu-labelled suite, one process per suite (a sticky CUDA error such as an illegal
# address in one suite must not take the others down), then every op on this GPU against
# the CPU reference (tests/backend_ops); the log is $OUT/$1.log.
gpu_tests() {
  local log="$OUT/$1.log"
  : > "$log"
  for suite in $("$BUILD/tests/tessera_gpu_tests" --gtest_list_tests | grep -E '^[^ ]' | tr -d '.'); do
    "$BUILD/tests/tessera_gpu_tests" --gtest_color=no --gtest_filter="$suite.*" >> "$log" 2>&1
  done
  "$BUILD/tests/tessera_backend_ops_tests" --gtest_color=no >> "$log" 2>&1
  grep -E '^\[( +OK|  FAILED|  SKIPPED)|measured|Failure|exception' "$log" | grep -v '^\[  FAILED  \] .*, where' | tail -80
  summary+=("$1: $(grep -c '^\[       OK' "$log") passed, $(grep -cE '^\[  FAILED  \] .*\([0-9]+ ms\)$' "$log") failed, $(grep -c '^\[  SKIPPED' "$log") skipped")
}

for step in "${steps[@]}"; do
  case "$step" in
    tests)
      gpu_tests gpu_tests
      ;;
    profiles)
      # The gpu suites as smaller GPUs would run them (TESSERA_CUDA_PROFILE: their shared
      # memory per block, SMs, L2 and compute capability; README "Supported GPUs").
      for p in ${PROFILES:-t4 a100 rtx4090}; do
        TESSERA_CUDA_PROFILE=$p "$BUILD/tessera" info > "$OUT/info_$p.txt" 2>&1
        TESSERA_CUDA_PROFILE=$p gpu_tests "gpu_tests_$p"
      done
      ;;
    profile-fits)
      # fit image 10 s and NeRF 30 s as they run today and under PROFILE (default rtx4090:
      # 99 KB of shared memory per block), for BENCHMARKS.md's "Smaller GPUs".
      for p in none ${PROFILE:-rtx4090}; do
        env_p=(); [ "$p" = none ] || env_p=(TESSERA_CUDA_PROFILE=$p)
        env "${env_p[@]}" "$BUILD/tessera" fit image "${IMAGE:-.data/lego_mosaic_1024.png}" --device cuda --seconds 10 \
          --out "/tmp/fit_image_$p" --no-progress > "$OUT/fit_image_$p.log" 2>&1
        env "${env_p[@]}" "$BUILD/tessera" nerf train "${SCENE:-.data/lego}" --device cuda --seconds 30 --eval-at 30 \
          --out "/tmp/nerf_$p" --no-progress > "$OUT/nerf_$p.log" 2>&1
        summary+=("profile $p: fit image $(grep -hE 'steps in|final PSNR' "$OUT/fit_image_$p.log" | tr -s ' ' | tr '\n' ' ')")
        summary+=("profile $p: nerf $(grep -hE 'steps in| s  step ' "$OUT/nerf_$p.log" | tr -s ' ' | tr '\n' ' ')")
      done
      ;;
    bench)
      "$BUILD/tessera" bench mlp --device cuda --json "$OUT/bench_mlp.json" 2>&1 | tee "$OUT/bench_mlp.log"
      summary+=("bench mlp: see bench_mlp.log")
      ;;
    bench-encoding)
      "$BUILD/tessera" bench encoding --device cuda --json "$OUT/bench_encoding.json" 2>&1 | tee "$OUT/bench_encoding.log"
      summary+=("bench encoding: see bench_encoding.log")
      ;;
    eikonal)
      # The step with an eikonal term against the plain step (C++), then the same model's
      # double backward in plain PyTorch autograd and through tessera.torch (Python).
      "$BUILD/tessera" bench eikonal --device cuda --json "$OUT/bench_eikonal.json" 2>&1 | tee "$OUT/bench_eikonal.log"
      TESSERA_LIBRARY="$BUILD/libtessera.so" PYTHONPATH="$PWD/python" python3 bench/python_eikonal.py \
        --json "$OUT/python_eikonal.json" 2>&1 | tee -a "$OUT/bench_eikonal.log"
      summary+=("bench eikonal: $(grep -E "eikonal term|faster than" "$OUT/bench_eikonal.log" | tr -s ' ' | tr '\n' ' ')")
      ;;
    bench-gemv)
      LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64" "$BUILD/tessera" bench gemv --json "$OUT/bench_gemv.json" 2>&1 | tee "$OUT/bench_gemv.log"
      summary+=("bench gemv: see bench_gemv.log")
      ;;
    bench-gemm)
      LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64" "$BUILD/tessera" bench gemm --json "$OUT/bench_gemm.json" 2>&1 | tee "$OUT/bench_gemm.log"
      summary+=("bench gemm: see bench_gemm.log")
      ;;
    fit-image)
      # IMAGE: a 1024x1024 photo carried along (see BENCHMARKS.md for how it was made)
      "$BUILD/tessera" fit image "${IMAGE:-.data/lego_mosaic_1024.png}" --device cuda --seconds 30 --out "$OUT/fit_image" \
        --json "$OUT/fit_image.json" --no-progress 2>&1 | tee "$OUT/fit_image.log"
      summary+=("fit image: $(grep -E 'final PSNR' "$OUT/fit_image.log")")
      ;;
    sanitize)
      compute-sanitizer --tool memcheck "$BUILD/tests/tessera_gpu_tests" --gtest_filter='*in1_w16*:*in37*:*in5_w64_h2_out3_SiLU*:*CudaVsCpu*:*NetworkWithInputEncodingCuda*:*ModulesCuda*:*StreamsCuda*:ConvCuda.*-*4096x4096x4096*' > "$OUT/memcheck.log" 2>&1
      compute-sanitizer --tool memcheck "$BUILD/tests/tessera_backend_ops_tests" --gtest_filter='-*4096x4096*' >> "$OUT/memcheck.log" 2>&1
      summary+=("memcheck: $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tr '\n' ' ')")
      compute-sanitizer --tool racecheck "$BUILD/tests/tessera_gpu_tests" --gtest_filter='*in1_w16*:*in37*:*in5_w64_h2_out3_SiLU*:*GridCudaVsCpu*:NetworkWithInputEncodingCuda.GridInKernel*:*17x33x65_NN*wgmma*:*130x70x20*wgmma*:ConvCuda.*' > "$OUT/racecheck.log" 2>&1
      compute-sanitizer --tool racecheck "$BUILD/tests/tessera_backend_ops_tests" --gtest_filter='*gemm_activation_f16_derivative_relu*:*gemm_activation_bf16*:*conv2d_backward_weight_f32_nchw_N4*:*conv2d_backward_weight_f16_nhwc_stride2*:*nerf_march_rays_1_cascades*:*nerf_composite*:*nerf_compact*' >> "$OUT/racecheck.log" 2>&1
      summary+=("racecheck: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/racecheck.log" | tr '\n' ' ')")
      ;;
    python)
      # The C API from C and the Python package's suite on this GPU (the host's python3 with
      # torch + CUDA over $BUILD/libtessera.so), then compute-sanitizer on Python training
      # runs, then step times from Python next to the C++ bench of the same cases.
      export TESSERA_LIBRARY="$BUILD/libtessera.so" PYTHONPATH="$PWD/python"
      "$BUILD/tests/test_c_api" cuda "$(mktemp -d)" > "$OUT/python.log" 2>&1
      summary+=("c api on cuda: $(tail -1 "$OUT/python.log")")
      TESSERA_TEST_DEVICE=cuda python3 -m pytest -q -s -p no:cacheprovider tests/python >> "$OUT/python.log" 2>&1
      summary+=("pytest on cuda: $(grep -E '(passed|failed)' "$OUT/python.log" | tail -1)")
      for mode in "" --fused; do
        compute-sanitizer --tool memcheck python3 examples/python/fit_image.py --steps 20 --batch 16384 $mode \
          >> "$OUT/python_memcheck.log" 2>&1
      done
      summary+=("python memcheck: $(grep -E 'ERROR SUMMARY' "$OUT/python_memcheck.log" | tr '\n' ' ')")
      "$BUILD/tessera" bench mlp --device cuda --only "in32 w64 h2" --json "$OUT/bench_mlp.json" > "$OUT/python_bench.log" 2>&1
      "$BUILD/tessera" bench encoding --device cuda --json "$OUT/bench_encoding.json" >> "$OUT/python_bench.log" 2>&1
      python3 bench/python_step.py --json "$OUT/python_step.json" >> "$OUT/python_bench.log" 2>&1
      cat "$OUT/python_bench.log"
      summary+=("python bench: see python_bench.log")
      ;;
    compare)
      BASE=${BASE:-.gpu/base/tessera}
      export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64"
      CMP=$(mktemp -d)  # the JSON stays there: only the table comes back
      : > "$OUT/compare.log"
      for suite in ${COMPARE_SUITES:-mlp encoding gemm gemv}; do
        dev=""; [ "$suite" = mlp ] || [ "$suite" = encoding ] && dev="--device cuda"
        for round in 1 2; do  # base, new, base, new: drift shows as base-vs-base spread
          "$BASE" bench $suite $dev --json "$CMP/cmp_${suite}_base$round.json" > /dev/null 2>&1
          "$BUILD/tessera" bench $suite $dev --json "$CMP/cmp_${suite}_new$round.json" > /dev/null 2>&1
        done
        python3 scripts/gpu/compare_bench.py "$CMP/cmp_${suite}_base2.json" "$CMP/cmp_${suite}_new2.json" | tee -a "$OUT/compare.log"
        python3 scripts/gpu/compare_bench.py "$CMP/cmp_${suite}_base1.json" "$CMP/cmp_${suite}_base2.json" | grep worst | sed 's/^/  base vs base (noise): /' | tee -a "$OUT/compare.log"
      done
      summary+=("compare: $(grep -c 'worst' "$OUT/compare.log") tables, see compare.log")
      ;;
    nerf)
      # SCENE: a NeRF-synthetic scene carried along (.data/lego: ../shared/data/nerf_synthetic/lego)
      "$BUILD/tessera" nerf train "${SCENE:-.data/lego}" --device cuda --seconds "${NERF_SECONDS:-60}" \
        --eval-at "${NERF_EVAL_AT:-5,15,30,60}" --out "$OUT/nerf" --json "$OUT/nerf.json" --no-progress 2>&1 | tee "$OUT/nerf.log"
      summary+=("nerf: $(grep -E ' s  step ' "$OUT/nerf.log" | tr -s ' ' | tr '\n' ';')")
      ;;
    nerf-budgets)
      # A run per budget (the schedule anneals within --seconds), as issue 32 measures:
      # NERF_BUDGETS (default 5 15 30 60 120 300) on SCENE, NERF_CONFIG optional (a JSON of
      # the sections to change). One line per budget: PSNR black/linear and white, steps/s,
      # device memory (evaluated at 8 renderings per pixel, instant-ngp's run.py and the GPU
      # default), then, if NERF_SPP is set, the same snapshot evaluated at NERF_SPP (1: the
      # figures of sessions before 2026-11-27). NERF_DEVICE (default cuda): runs of several
      # settings side by side on a host with several GPUs, one run.sh per GPU and OUT.
      cfg=(); [ -n "${NERF_CONFIG:-}" ] && cfg=(--config "$NERF_CONFIG")
      for budget in ${NERF_BUDGETS:-5 15 30 60 120 300}; do
        log="$OUT/nerf_budget_$budget.log"
        "$BUILD/tessera" nerf train "${SCENE:-.data/lego}" --device "${NERF_DEVICE:-cuda}" --seconds "$budget" --eval-at "$budget" \
          --out "$OUT/nerf_budget_$budget" --json "$OUT/nerf_budget_$budget.json" --no-progress "${cfg[@]}" > "$log" 2>&1
        line="$budget s: $(grep -E ' s  step ' "$log" | tail -1 | sed -E 's/.*PSNR +([0-9.]+) dB \(white\) +([0-9.]+) dB.*/\2 black, \1 white/'),"
        line+=" $(grep -oE '[0-9]+ steps/s' "$log" | head -1), $(grep -oE '[0-9]+ MiB' "$log" | head -1)"
        if [ -n "${NERF_SPP:-}" ]; then
          "$BUILD/tessera" nerf eval "$OUT/nerf_budget_$budget/model.tnerf" --scene "${SCENE:-.data/lego}" --device "${NERF_DEVICE:-cuda}" \
            --eval-spp "$NERF_SPP" > "$log.spp" 2>&1
          line+="; $NERF_SPP spp: $(sed -nE 's/.*PSNR ([0-9.]+) dB \(white[^)]*\), ([0-9.]+) dB \(black.*/\2 black, \1 white/p' "$log.spp")"
        fi
        echo "$line"
        summary+=("nerf budget $line")
      done
      ;;
    nerf-kernels)
      # Device time per kernel per training step (ncu, kernels serialized), on SCENE with
      # NERF_CONFIG optional. --steps 3000 with no evaluation before the end (an evaluation
      # renders thousands of launches: the 5-s one took the whole window of earlier lists),
      # the window from launch 20000 (~step 500, past the occupancy grid's 256 warm-up steps).
      cfg=(); [ -n "${NERF_CONFIG:-}" ] && cfg=(--config "$NERF_CONFIG")
      ncu --clock-control none --metrics gpu__time_duration.sum --launch-skip 20000 --launch-count 3000 --csv \
        "$BUILD/tessera" nerf train "${SCENE:-.data/lego}" --device cuda --steps 3000 --eval-at 100000 --no-progress \
        --out /tmp/nerf_kernels "${cfg[@]}" > "$OUT/nerf_kernels.csv" 2> "$OUT/nerf_kernels.err"
      python3 scripts/gpu/ncu_per_step.py "$OUT/nerf_kernels.csv" 2>&1 | tee "$OUT/nerf_kernels.txt"
      summary+=("nerf kernels: $(tail -1 "$OUT/nerf_kernels.txt")")
      ;;
    multi-gpu-checks)
      # Issue 34 on a host with several GPUs, part 1 (~5 min): the NCCL tests over every GPU
      # (2 GPUs = 1 GPU on the whole batch, NeRF ranks identical), DDP over NCCL, bench
      # data-parallel, the process form and a killed rank process.
      "$BUILD/tests/tessera_gpu_tests" --gtest_color=no --gtest_filter='NcclCuda.*' 2>&1 | tee "$OUT/multi.log" \
        | grep -E '^\[( +OK|  FAILED|  SKIPPED)|difference|NCCL over|Failure'
      TESSERA_LIBRARY="$BUILD/libtessera.so" PYTHONPATH="$PWD/python" TESSERA_TEST_DEVICE=cuda \
        python3 -m pytest -q -s -p no:cacheprovider tests/python/test_ddp.py 2>&1 | tee -a "$OUT/multi.log" | tail -5
      "$BUILD/tessera" bench data-parallel --devices "$gpus" --json "$OUT/bench_dp.json" 2>&1 | tee -a "$OUT/multi.log"
      "$BUILD/tessera" bench data-parallel --devices "$gpus" --bf16-gradients 2>&1 | tail -2 | tee -a "$OUT/multi.log"
      multi_gpu_processes
      kill_test
      summary+=("multi-gpu checks: see multi.log")
      ;;
    kill-test)
      kill_test
      summary+=("kill test: see multi.log")
      ;;
    multi-gpu-nerf)
      # Part 2 (~8 min): lego PSNR per budget on 1 and N GPUs (a run per budget), then nerf
      # render of 120 frames on 1 and N. DP_CONFIG: a --config for the N-GPU runs only (e.g.
      # scripts/gpu/nerf_half_batch.json: 2 GPUs train the one-GPU batch, in more steps).
      for budget in ${NERF_BUDGETS:-5 15 30 60}; do
        for where in "--device cuda:0" "--devices $gpus${DP_CONFIG:+ --config $DP_CONFIG}"; do
          tag=$(echo "$where" | tr -c 'a-z0-9' '_')
          "$BUILD/tessera" nerf train "${SCENE:-.data/lego}" $where --seconds "$budget" --eval-at "$budget" \
            --out "/tmp/dp_$budget$tag" --json "$OUT/dp_$budget$tag.json" --no-progress > "$OUT/dp_$budget$tag.log" 2>&1
          echo "$budget s $where: $(grep -E ' s  step ' "$OUT/dp_$budget$tag.log" | tail -1 | tr -s ' ') $(grep -oE '[0-9]+ steps/s' "$OUT/dp_$budget$tag.log" | head -1)" | tee -a "$OUT/multi_nerf.log"
        done
      done
      snap=/tmp/dp_${budget}__device_cuda_0_/model.tnerf  # the longest budget's, one GPU
      for where in "--device cuda:0" "--devices $gpus"; do
        [ -f "$snap" ] && "$BUILD/tessera" nerf render "$snap" --orbit 120 --width 800 --height 800 --no-video \
          --no-progress --out /tmp/dp_render $where 2>&1 | grep "frames of" | tee -a "$OUT/multi_nerf.log"
      done
      summary+=("multi-gpu nerf: see multi_nerf.log")
      ;;
    lens-check)
      # Is a comparison on a real capture fair? instant-ngp abe236ee's Python render passes no
      # lens to its renderer, so its test images of a distorted capture (the fox: OpenCV k1,
      # k2, p1, p2) are pinhole images scored against distorted photos. This trains SCENE
      # (default .data/fox) for LENS_SECONDS and scores the snapshot on the scene and on a copy
      # whose transforms.json lacks the distortion keys: the drop is what that handicap costs.
      scene=${SCENE:-.data/fox}
      "$BUILD/tessera" nerf train "$scene" --device cuda --seconds "${LENS_SECONDS:-30}" --eval-at "${LENS_SECONDS:-30}" \
        --out /tmp/lens_check --no-progress > "$OUT/lens_check.log" 2>&1
      rm -rf /tmp/pinhole_scene && mkdir -p /tmp/pinhole_scene
      for f in "$scene"/*; do [ "$(basename "$f")" = transforms.json ] || ln -s "$(realpath "$f")" /tmp/pinhole_scene/; done
      python3 -c 'import json,sys
t=json.load(open(sys.argv[1]))
for d in [t]+t.get("frames",[]):
    for k in ("k1","k2","k3","k4","p1","p2"): d.pop(k,None)
json.dump(t,open(sys.argv[2],"w"))' "$scene/transforms.json" /tmp/pinhole_scene/transforms.json
      for where in "$scene" /tmp/pinhole_scene; do
        "$BUILD/tessera" nerf eval /tmp/lens_check/model.tnerf --scene "$where" --device cuda --eval-spp 8 2>&1 | tee -a "$OUT/lens_check.log"
      done
      summary+=("lens check: $(grep -oE 'PSNR [0-9.]+ dB \(white[^)]*\), [0-9.]+ dB' "$OUT/lens_check.log" | tr '\n' ';')")
      ;;
    viewer)
      # The web viewer on SCENE (no browser on the host: `bench viewer` plays N of them):
      # training speed with 0, 1 and 4 viewers orbiting at 800x800 (steps per second of wall
      # time), then on the trained model frames/s at the adaptive resolution and the refined
      # 800x800 frame time, and the orbit video's rendering speed.
      scene=${SCENE:-.data/lego}
      for n in 0 1 4 stalled; do
        log="$OUT/viewer_train_$n.log"
        "$BUILD/tessera" nerf train "$scene" --device cuda --seconds "${VIEWER_SECONDS:-10}" --eval-at 1000 --serve 0 \
          --out "$OUT/viewer_$n" --json "$OUT/viewer_train_$n.json" --no-progress > "$log" 2>&1 &
        pid=$!
        until grep -q "viewer: open" "$log" || ! kill -0 $pid 2>/dev/null; do sleep 0.2; done
        url=$(grep -o "http://[^ ]*" "$log" | head -1)
        if [ "$n" = stalled ]; then  # a browser that stops reading: training must not wait for it
          "$BUILD/tessera" bench viewer "$url" --clients 1 --stalled --seconds "${VIEWER_SECONDS:-10}" \
            > "$OUT/viewer_clients_$n.log" 2>&1
        elif [ "$n" -gt 0 ]; then
          "$BUILD/tessera" bench viewer "$url" --clients $n --seconds "${VIEWER_SECONDS:-10}" \
            --json "$OUT/viewer_clients_$n.json" > "$OUT/viewer_clients_$n.log" 2>&1
        fi
        until grep -q "still serving" "$log" || ! kill -0 $pid 2>/dev/null; do sleep 0.2; done
        if [ "$n" = 0 ]; then
          "$BUILD/tessera" bench viewer "$url" --clients 1 --seconds 5 > "$OUT/viewer_idle_adaptive.log" 2>&1
          "$BUILD/tessera" bench viewer "$url" --clients 1 --seconds 5 --still > "$OUT/viewer_idle_refined.log" 2>&1
        fi
        kill -INT $pid; wait $pid
        summary+=("viewer, $n clients: $(grep -o 'nerf train: [0-9]* steps in [0-9.]* s of training ([0-9]* steps/s; [0-9.]* s wall[^)]*)' "$log")")
      done
      cat "$OUT"/viewer_clients_*.log "$OUT"/viewer_idle_*.log
      summary+=("viewer idle: $(grep -ho '[0-9.]* frames/s, [0-9.]* Mpixel[^,]*, render + JPEG [0-9.]* ms' "$OUT"/viewer_idle_*.log | tr '\n' ';')")
      "$BUILD/tessera" nerf render "$OUT/viewer_0/model.tnerf" --device cuda --path orbit --frames 60 --width 800 --height 800 \
        --out "$OUT/orbit" --no-progress 2>&1 | tail -3 | tee "$OUT/render_orbit.log"
      rm -f "$OUT"/orbit/frame_*.png "$OUT"/viewer_*/test/*.png
      summary+=("orbit video: $(grep -o 'nerf render: .*per frame[^,]*' "$OUT/render_orbit.log")")
      ;;
    mesh)
      # nerf mesh on a trained SCENE (the viewer step's model, else 20 s of training) at 256^3 and 512^3.
      snap="$OUT/viewer_0/model.tnerf"
      if [ ! -f "$snap" ]; then
        "$BUILD/tessera" nerf train "${SCENE:-.data/lego}" --device cuda --seconds 20 --eval-at 1000 --out "$OUT/mesh_train" \
          --no-progress > "$OUT/mesh_train.log" 2>&1
        snap="$OUT/mesh_train/model.tnerf"
      fi
      for r in 256 512; do
        "$BUILD/tessera" nerf mesh "$snap" --device cuda --resolution $r --out "$OUT/mesh_$r.ply" --json "$OUT/mesh_$r.json" 2>&1 | tee "$OUT/mesh_$r.log"
        summary+=("mesh $r: $(grep -o '[0-9]* triangles.*writing [0-9.]* s)' "$OUT/mesh_$r.log")")
      done
      rm -f "$OUT"/mesh_*.ply
      ;;
    opencl)
      # The opencl-labelled tests on NVIDIA's OpenCL (opencl:0 there), then the OpenCL benches
      # against CLBlast (libclblast.so.1 carried in .gpu/lib: the host has none).
      export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64:$PWD/.gpu/lib"
      nvidia_icd
      "$BUILD/tests/tessera_opencl_tests" --gtest_color=no > "$OUT/opencl_tests.log" 2>&1
      grep -E '^\[( +OK|  FAILED|  SKIPPED)|measured|Failure' "$OUT/opencl_tests.log" | grep -v '^\[  FAILED  \] .*, where' | tail -40
      summary+=("opencl tests: $(grep -c '^\[       OK' "$OUT/opencl_tests.log") passed, $(grep -cE '^\[  FAILED  \] .*\([0-9]+ ms\)$' "$OUT/opencl_tests.log") failed")
      "$BUILD/examples/example_rbm" opencl > "$OUT/rbm_opencl.log" 2>&1; summary+=("example_rbm opencl: exit $?")
      ;;
    bench-opencl)
      export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64:$PWD/.gpu/lib"
      nvidia_icd
      for suite in ${OPENCL_SUITES:-gemv gemm conv}; do
        "$BUILD/tessera" bench $suite --device opencl --json "$OUT/bench_opencl_$suite.json" 2>&1 | tee "$OUT/bench_opencl_$suite.log"
      done
      summary+=("bench opencl: see bench_opencl_*.log")
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
