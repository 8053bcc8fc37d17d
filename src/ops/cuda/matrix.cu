// Strided matrix axpby (ops/matrix.h): one thread per element, rows in the grid's y.
#include <algorithm>

#include "stream.h"
#include "tessera/core/cuda_check.h"
#include "tessera/ops/matrix.h"

namespace tessera::ops::cuda {
namespace {

__global__ void axpby_kernel(size_t rows, uint32_t cols, float alpha, const float* __restrict__ src,
                             uint32_t src_stride, float beta, float* __restrict__ dst, uint32_t dst_stride) {
  const uint32_t c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  for (size_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const float from_src = src ? alpha * src[r * src_stride + c] : 0.0f;
    float& d = dst[r * dst_stride + c];
    d = beta == 0.0f ? from_src : from_src + beta * d;
  }
}

}  // namespace

void matrix_axpby(size_t rows, uint32_t cols, float alpha, const float* src, uint32_t src_stride, float beta,
                  float* dst, uint32_t dst_stride, Stream* stream) {
  if (rows == 0 || cols == 0) return;
  TESSERA_CHECK(dst, "matrix_axpby: null destination");
  const unsigned threads = cols >= 128 ? 128 : (cols + 31) / 32 * 32;
  const dim3 grid((cols + threads - 1) / threads, unsigned(std::min<size_t>(rows, 65535)));
  axpby_kernel<<<grid, threads, 0, detail::native_stream(stream)>>>(rows, cols, alpha, src, src_stride, beta, dst,
                                                                     dst_stride);
  TESSERA_CUDA_CHECK_LAUNCH("axpby_kernel");
}

}  // namespace tessera::ops::cuda
