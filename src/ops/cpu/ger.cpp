#include "tessera/ops/ger.h"

#include "tessera/core/error.h"
#include "ops/cpu/cpu_kernels.h"

namespace tessera::ops::cpu {

void ger(size_t rows, size_t cols, float alpha, const float* x, const float* y, float* A, size_t lda) {
  TESSERA_CHECK(lda >= cols, "ger: lda {} is smaller than cols {}", lda, cols);
#pragma omp parallel for schedule(static)
  for (long long i = 0; i < (long long)rows; ++i)
    for (size_t j = 0; j < cols; ++j) A[size_t(i) * lda + j] += alpha * x[i] * y[j];
}

}  // namespace tessera::ops::cpu
