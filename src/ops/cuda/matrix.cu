// Strided matrix axpby (ops/matrix.h): one thread per element of the flattened rows x cols,
// a grid-stride loop, so a warp covers consecutive elements however narrow the matrix (a
// block per column range and row, as before, left most of each warp idle for the 1- to
// 16-column copies between modules).
#include <algorithm>

#include "stream.h"
#include "core/cuda/cuda_check.h"
#include "tessera/ops/matrix.h"
#include "ops/activation_math.h"
#include "ops/cuda/cuda_kernels.h"

namespace tessera::ops::cuda {
namespace {

template <typename Index>  // 32-bit index arithmetic where the element count allows
__global__ void axpby_kernel(Index n, uint32_t cols, float alpha, const float* __restrict__ src,
                             uint32_t src_stride, float beta, float* __restrict__ dst, uint32_t dst_stride) {
  for (Index e = Index(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += Index(gridDim.x) * blockDim.x) {
    const Index r = e / cols, c = e - r * cols;
    const float from_src = src ? alpha * src[size_t(r) * src_stride + c] : 0.0f;
    float& d = dst[size_t(r) * dst_stride + c];
    d = beta == 0.0f ? from_src : from_src + beta * d;
  }
}

__global__ void activation_backward_kernel(Activation act, size_t n, const float* __restrict__ y,
                                           const float* g, float* dz) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dz[i] = g[i] * activation_derivative<float>(act, y[i], y[i]);
}

}  // namespace

void activation_backward(Activation act, size_t n, const float* y, const float* g, float* dz, Stream* stream) {
  if (n == 0) return;
  constexpr unsigned kThreads = 256;
  const unsigned blocks = unsigned(std::min<size_t>((n + kThreads - 1) / kThreads, 1u << 16));
  activation_backward_kernel<<<blocks, kThreads, 0, detail::native_stream(stream)>>>(act, n, y, g, dz);
  TESSERA_CUDA_CHECK_LAUNCH("activation_backward_kernel");
}

void matrix_axpby(size_t rows, uint32_t cols, float alpha, const float* src, uint32_t src_stride, float beta,
                  float* dst, uint32_t dst_stride, Stream* stream) {
  if (rows == 0 || cols == 0) return;
  TESSERA_CHECK(dst, "matrix_axpby: null destination");
  constexpr unsigned kThreads = 256;
  const uint64_t n = uint64_t(rows) * cols;
  const unsigned blocks = unsigned(std::min<uint64_t>((n + kThreads - 1) / kThreads, 1u << 16));
  const cudaStream_t s = detail::native_stream(stream);
  if (n <= 0xffffffffull - uint64_t(blocks) * kThreads)
    axpby_kernel<uint32_t><<<blocks, kThreads, 0, s>>>(uint32_t(n), cols, alpha, src, src_stride, beta, dst, dst_stride);
  else
    axpby_kernel<uint64_t><<<blocks, kThreads, 0, s>>>(n, cols, alpha, src, src_stride, beta, dst, dst_stride);
  TESSERA_CUDA_CHECK_LAUNCH("axpby_kernel");
}

}  // namespace tessera::ops::cuda
