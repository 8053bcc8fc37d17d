// The unfused form of GemmActivation's epilogue: one elementwise pass from the product in
// fp32 scratch to C (used where the wgmma kernel cannot apply it as it writes C).
#include "gemm_internal.h"
#include "launch.h"
#include "core/cuda/cuda_check.h"
#include "ops/activation_math.h"
#include "ops/cuda/cuda_kernels.h"

namespace tessera::ops::cuda::detail {
namespace {

template <int Epi, Activation A, typename OutT>
__global__ void gemm_epilogue_kernel(GemmParams p, const float* __restrict__ src) {
  const int64_t per_entry = p.M * p.N, total = per_entry * p.batch;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t z = i / per_entry, r = (i % per_entry) / p.N, c = i % p.N;
    const int64_t at = z * p.stride_c + r * int64_t(p.c_row_stride) + c * int64_t(p.c_col_stride);
    const float y = Epi == 2 ? to_float(static_cast<const OutT*>(p.Y)[at]) : 0.0f;
    static_cast<OutT*>(p.C)[at] = from_float<OutT>(epilogue_value<Epi, A>(src[i], y));
  }
}

template <typename OutT>
void launch_typed(const GemmParams& p, const float* src) {
  const int64_t total = p.M * p.N * p.batch;
  const unsigned blocks = blocks_for(size_t(total), 256, 65535 * 8);
  with_activation(p.act, [&](auto a) {
    constexpr Activation A = decltype(a)::value;
    if (p.epilogue == 1) gemm_epilogue_kernel<1, A, OutT><<<blocks, 256, 0, p.stream>>>(p, src);
    else gemm_epilogue_kernel<2, A, OutT><<<blocks, 256, 0, p.stream>>>(p, src);
  });
  TESSERA_CUDA_CHECK_LAUNCH("gemm_epilogue_kernel");
}

}  // namespace

void launch_gemm_epilogue(const GemmParams& p, const float* src, DType out) {
  if (p.M == 0 || p.N == 0) return;
  switch (out) {
    case DType::f32: launch_typed<float>(p, src); break;
    case DType::f16: launch_typed<__half>(p, src); break;
    case DType::bf16: launch_typed<__nv_bfloat16>(p, src); break;
  }
}

}  // namespace tessera::ops::cuda::detail
