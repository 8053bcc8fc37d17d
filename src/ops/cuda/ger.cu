#include "stream.h"
#include "core/cuda/cuda_check.h"
#include "tessera/ops/ger.h"
#include "ops/cuda/cuda_kernels.h"

namespace tessera::ops::cuda {
namespace {

// One thread per element, consecutive threads along a row (coalesced).
__global__ void ger_kernel(size_t rows, size_t cols, float alpha, const float* __restrict__ x,  // [rows]
                           const float* __restrict__ y,                                       // [cols]
                           float* __restrict__ A, size_t lda) {                               // [rows, lda]
  const size_t j = blockIdx.x * size_t(blockDim.x) + threadIdx.x, i = blockIdx.y;
  if (j < cols) A[i * lda + j] += alpha * x[i] * y[j];
}

}  // namespace

void ger(size_t rows, size_t cols, float alpha, const float* x, const float* y, float* A, size_t lda, Stream* stream) {
  if (rows == 0 || cols == 0) return;
  TESSERA_CHECK(x && y && A, "ger: null pointer argument");
  TESSERA_CHECK(lda >= cols && rows <= 65535u, "ger: lda {} < cols {} or more than 65535 rows", lda, cols);
  ger_kernel<<<dim3(unsigned((cols + 255) / 256), unsigned(rows)), 256, 0, detail::native_stream(stream)>>>(rows, cols, alpha, x, y, A, lda);
  TESSERA_CUDA_CHECK_LAUNCH("ger_kernel");
}

}  // namespace tessera::ops::cuda
