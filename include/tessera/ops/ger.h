#pragma once
// Rank-1 update A += alpha * x y^T (BLAS ger), A row-major [rows, cols] with leading
// dimension lda: the weight update of contrastive divergence and other outer-product
// learning rules. fp32.
#include <cstddef>

namespace tessera {
class Stream;
}

namespace tessera::ops {

struct Ger {
  static constexpr const char* name = "ger";
  using Fn = void(Stream&, size_t rows, size_t cols, float alpha, const float* x, const float* y, float* A,
                  size_t lda);
};

namespace cpu {
void ger(size_t rows, size_t cols, float alpha, const float* x, const float* y, float* A, size_t lda);
}
namespace cuda {
void ger(size_t rows, size_t cols, float alpha, const float* x, const float* y, float* A, size_t lda, Stream* stream = nullptr);
}

}  // namespace tessera::ops
