// Which convolution algorithm the CUDA backend runs: the kernels' own limits, automatic's
// choice by shape, and benchmark's measured choice (cuDNN's benchmark mode).
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/device_attributes.h"
#include "tessera/core/backend.h"
#include "tessera/ops/conv.h"

namespace tessera::ops::cuda {

namespace {
// bf16 tensor-core products need compute capability 8.0.
bool bf16_needs_newer_gpu(const ConvDesc& d) { return d.type == DType::bf16 && detail::compute_capability() < 80; }

}  // namespace

void require_cuda_conv_algo(ConvOp op, const ConvDesc& d, ConvAlgo algo) {
  if (op == ConvOp::backward_weight)
    require_conv_algo(op, algo, "cuda", {ConvAlgo::direct, ConvAlgo::im2col_gemm, ConvAlgo::implicit_gemm});
  else
    require_conv_algo(op, algo, "cuda",
                      {ConvAlgo::direct, ConvAlgo::im2col_gemm, ConvAlgo::implicit_gemm, ConvAlgo::winograd_2x2,
                       ConvAlgo::winograd_4x4});
  // Named algorithms passed the op's contract; automatic's and benchmark's candidates are
  // asked here.
  const std::string math = conv_algo_rejects(algo, op, d);
  TESSERA_CHECK(math.empty(), "{}: algorithm {} does not apply: {}", to_string(op), to_string(algo), math);
  TESSERA_CHECK(algo != ConvAlgo::im2col_gemm || d.groups == 1,
                "{}: the CUDA im2col_gemm takes groups = 1 (got {}); use direct", to_string(op), d.groups);
  if (algo == ConvAlgo::implicit_gemm) {
    const std::string why = implicit_gemm_rejects(op, d);
    if (!why.empty() && bf16_needs_newer_gpu(d))
      throw DeviceLimitError(format_message("{} on {}: {}", to_string(op), detail::current_attributes().name, why));
    TESSERA_CHECK(why.empty(), "{}: {}; use im2col_gemm or direct", to_string(op), why);
  }
}

// The implicit-GEMM kernel's limits (conv_implicit_gemm.cu).
std::string implicit_gemm_rejects(ConvOp op, const ConvDesc& d) {
  if (d.layout != ConvLayout::nhwc || (d.type != DType::f16 && d.type != DType::bf16))
    return "the CUDA implicit_gemm takes fp16 or bf16 NHWC tensors (tensor cores)";
  if (bf16_needs_newer_gpu(d)) return "the CUDA implicit_gemm takes bf16 on compute capability 8.0 and later GPUs only";
  if (d.groups != 1) return "the CUDA implicit_gemm takes groups = 1";
  if (d.C % 8 != 0 || d.K % 8 != 0)
    return fmt::format("the CUDA implicit_gemm needs C and K multiples of 8 (16-byte copies; got C {}, K {})", d.C, d.K);
  if (uint64_t(d.N) * d.P() * d.Q() >= (1ull << 31) || uint64_t(d.N) * d.H * d.W >= (1ull << 31))
    return "the CUDA implicit_gemm indexes pixels in 32 bits (N P Q and N H W below 2^31)";
  if (op == ConvOp::backward_data && (d.stride_h != 1 || d.stride_w != 1))
    return fmt::format("the CUDA implicit_gemm backward-data needs stride 1 (got {}x{})", d.stride_h, d.stride_w);
  return "";
}

ConvAlgo automatic_conv_algo(ConvOp op, const ConvDesc& d) {
  // Measured on the H200 (BENCHMARKS.md, issue 12): Winograd F(4x4) fp32 beats im2col and
  // direct where it applies, implicit GEMM (fp16/bf16 NHWC) beats im2col; im2col + GEMM beats
  // direct by 10-100x elsewhere with groups 1.
  if (d.type == DType::f32 && conv_algo_rejects(ConvAlgo::winograd_4x4, op, d).empty()) return ConvAlgo::winograd_4x4;
  // fp16 NHWC on the bench shapes: implicit GEMM 0.044-0.083 ms against im2col's 0.06-0.56.
  if (implicit_gemm_rejects(op, d).empty()) return ConvAlgo::implicit_gemm;
  return d.groups == 1 ? ConvAlgo::im2col_gemm : ConvAlgo::direct;
}

namespace {
// ConvAlgo::benchmark's choices: per device, op and shape (every ConvDesc field but algo).
struct BenchmarkedConvAlgos {
  std::mutex mutex;
  std::map<std::string, ConvAlgo> chosen;
};
BenchmarkedConvAlgos& benchmarked() {
  static BenchmarkedConvAlgos b;
  return b;
}
std::string benchmark_key(ConvOp op, const ConvDesc& d) {
  int device = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&device));
  return fmt::format("{} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {}", device, int(op), d.N, d.C, d.H, d.W, d.K,
                     d.R, d.S, d.stride_h, d.stride_w, d.pad_h, d.pad_w, d.dilation_h, d.dilation_w, d.groups,
                     int(d.layout), int(d.type));
}

// Times `run(algo)` for every CUDA algorithm that can run the op and shape (automatic's
// choice first: one run to warm up, then the median of three on the stream's events; a
// candidate whose warm-up run takes over 4x the best median so far is not run again) and
// caches the fastest. The outputs are left as the last candidate wrote them: the caller
// runs the chosen one after.
ConvAlgo benchmark_conv_algo(Stream& s, ConvOp op, const ConvDesc& d, const std::function<void(ConvAlgo)>& run) {
  const std::string key = benchmark_key(op, d);
  {
    std::lock_guard<std::mutex> lock(benchmarked().mutex);
    if (auto it = benchmarked().chosen.find(key); it != benchmarked().chosen.end()) return it->second;
  }
  std::vector<ConvAlgo> candidates{automatic_conv_algo(op, d)};
  for (ConvAlgo a : {ConvAlgo::implicit_gemm, ConvAlgo::winograd_4x4, ConvAlgo::winograd_2x2, ConvAlgo::im2col_gemm,
                     ConvAlgo::direct}) {
    if (std::find(candidates.begin(), candidates.end(), a) != candidates.end()) continue;
    if ((a == ConvAlgo::winograd_2x2 || a == ConvAlgo::winograd_4x4) && d.type != DType::f32) continue;
    try {
      require_cuda_conv_algo(op, d, a);
      candidates.push_back(a);
    } catch (const Error&) {
    }
  }
  const cudaStream_t stream = static_cast<cudaStream_t>(s.native());
  cudaEvent_t start, stop;
  TESSERA_CUDA_CHECK(cudaEventCreate(&start));
  TESSERA_CUDA_CHECK(cudaEventCreate(&stop));
  auto timed = [&](ConvAlgo a) {
    TESSERA_CUDA_CHECK(cudaEventRecord(start, stream));
    run(a);
    TESSERA_CUDA_CHECK(cudaEventRecord(stop, stream));
    TESSERA_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    TESSERA_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    return ms;
  };
  ConvAlgo best = candidates.front();
  float best_ms = 0;
  try {
    for (ConvAlgo a : candidates) {
      float ms = timed(a);
      if (a == candidates.front() || ms < 4 * best_ms) {
        float t[3] = {timed(a), timed(a), timed(a)};
        std::sort(t, t + 3);
        ms = t[1];
      }
      if (a == candidates.front() || ms < best_ms) best = a, best_ms = ms;
    }
  } catch (...) {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    throw;
  }
  TESSERA_CUDA_CHECK(cudaEventDestroy(start));
  TESSERA_CUDA_CHECK(cudaEventDestroy(stop));
  std::lock_guard<std::mutex> lock(benchmarked().mutex);
  benchmarked().chosen[key] = best;
  return best;
}

}  // namespace

ConvAlgo benchmarked_conv_algo(ConvOp op, const ConvDesc& d) {
  const std::string key = benchmark_key(op, d);
  std::lock_guard<std::mutex> lock(benchmarked().mutex);
  const auto it = benchmarked().chosen.find(key);
  return it != benchmarked().chosen.end() ? it->second : automatic_conv_algo(op, d);
}

// The algorithm an op runs: the one asked for, automatic's choice, or benchmark's.
ConvAlgo resolve_conv_algo(Stream& s, ConvOp op, const ConvDesc& d, const std::function<void(ConvAlgo)>& run) {
  if (d.algo == ConvAlgo::automatic) return automatic_conv_algo(op, d);
  if (d.algo == ConvAlgo::benchmark) return benchmark_conv_algo(s, op, d, run);
  return d.algo;
}

}  // namespace tessera::ops::cuda
