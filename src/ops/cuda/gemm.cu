// GEMM dispatcher: argument checks, operand strides, kernel choice.
#include <algorithm>
#include <mutex>

#include "device_attributes.h"
#include "gemm_internal.h"
#include "tessera/core/cuda_check.h"

namespace tessera::ops::cuda {

namespace {
std::mutex& workspace_mutex() {
  static std::mutex m;
  return m;
}
// Split-K partials, grown on demand and kept for the life of the process. All work runs on
// the default stream, so a later call cannot overwrite partials an earlier one still reads.
float* split_k_workspace(size_t floats) {
  static float* buffer = nullptr;
  static size_t capacity = 0;
  if (capacity < floats) {
    if (buffer) TESSERA_CUDA_CHECK(cudaFree(buffer));
    buffer = nullptr;
    capacity = 0;
    TESSERA_CUDA_CHECK(cudaMalloc(&buffer, floats * sizeof(float)));
    capacity = floats;
  }
  return buffer;
}
}  // namespace

GemmKernel gemm_kernel_for(const GemmDesc& d) {
  return d.a.type == DType::f32 ? GemmKernel::simt : GemmKernel::wmma;
}

void gemm(const GemmDesc& d, const void* A, const void* B, void* C) {
  check_gemm(d);
  if (d.M == 0 || d.N == 0) return;
  TESSERA_CHECK(A && B && C, "gemm: null pointer argument");
  TESSERA_CHECK(d.M < (1u << 31) && d.N < (1u << 31) && d.K < (1u << 31) && d.batch <= 65535,
                "gemm: dimensions beyond 2^31 or more than 65535 batch entries are not supported");
  detail::GemmParams p{};
  p.A = A, p.B = B, p.C = C;
  p.M = int64_t(d.M), p.N = int64_t(d.N), p.K = int64_t(d.K), p.batch = int64_t(d.batch);
  const OperandStrides sa = operand_strides(d.a), sb = operand_strides(d.b), sc = operand_strides(d.c);
  p.a_row_stride = sa.row, p.a_col_stride = sa.col;
  p.b_row_stride = sb.row, p.b_col_stride = sb.col;
  p.c_row_stride = sc.row, p.c_col_stride = sc.col;
  p.stride_a = d.a.batch_stride, p.stride_b = d.b.batch_stride, p.stride_c = d.c.batch_stride;
  p.alpha = d.alpha, p.beta = d.beta;
  const size_t e = dtype_size(d.a.type);
  auto vec_ok = [&](const void* base, size_t ld, int64_t batch_stride) {
    return reinterpret_cast<uintptr_t>(base) % 16 == 0 && (ld * e) % 16 == 0 && (batch_stride * int64_t(e)) % 16 == 0;
  };
  p.a_vec = vec_ok(A, d.a.ld, d.a.batch_stride);
  p.b_vec = vec_ok(B, d.b.ld, d.b.batch_stride);
  // K == 0 leaves C = beta * C: the kernels' K loops are then empty.
  p.splits = 1, p.k_split = p.K, p.partials = nullptr;
  if (gemm_kernel_for(d) == GemmKernel::simt) {
    detail::launch_simt_gemm(p);
    return;
  }
  // Split K when the output tiles cannot fill the GPU (small or skinny products): aim at
  // one block per SM, each keeping at least 4 of the kernel's 32-deep K tiles. (Two per SM
  // made 1000^3 slower: 0.048 -> 0.054 ms on the H100, the partials' traffic outweighing
  // the extra parallelism; 777x333x1999 went 0.135 -> 0.050 ms.)
  constexpr int64_t kTile = 128, kDepth = 32;
  const int64_t tiles = ((p.M + kTile - 1) / kTile) * ((p.N + kTile - 1) / kTile) * p.batch;
  const int64_t want = (int64_t(detail::sm_count()) + tiles - 1) / tiles;
  const int64_t max_splits = std::max<int64_t>(1, p.K / (4 * kDepth));
  const int64_t splits = std::min<int64_t>({want, max_splits, 32});
  if (splits > 1) {
    p.k_split = ((p.K + splits - 1) / splits + kDepth - 1) / kDepth * kDepth;
    p.splits = int((p.K + p.k_split - 1) / p.k_split);
    const size_t need = size_t(p.splits) * size_t(p.M * p.N * p.batch);
    std::lock_guard<std::mutex> lock(workspace_mutex());
    p.partials = split_k_workspace(need);
    detail::launch_wmma_gemm(p, d.a.type, d.c.type);
    detail::launch_split_k_reduce(p, d.c.type);
    return;
  }
  detail::launch_wmma_gemm(p, d.a.type, d.c.type);
}

}  // namespace tessera::ops::cuda
