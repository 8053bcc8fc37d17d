// The CPU GEMV reference on hand-checked values: both ops, lda > cols, alpha/beta,
// activations, and beta = 0 never reading y.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tessera/ops/gemv.h"
#include "ops/cpu/cpu_kernels.h"

namespace tessera {
namespace {

using ops::GemvOp;

TEST(GemvCpu, BothOpsWithPaddingAlphaBetaAndActivations) {
  // A = [[1, 2, 3], [4, 5, 6]] stored with lda 4 (the 4th column is padding).
  const float A[8] = {1, 2, 3, 99, 4, 5, 6, 99};
  const float x3[3] = {1, -1, 2}, x2[2] = {0.5f, -1};
  float y[3] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::quiet_NaN(), 0};
  ops::cpu::gemv<float>({GemvOp::N, 2, 3, 4}, 2.0f, A, x3, 0.0f, y, Activation::None);
  EXPECT_FLOAT_EQ(y[0], 2 * (1 - 2 + 6));  // beta = 0 ignores the NaN
  EXPECT_FLOAT_EQ(y[1], 2 * (4 - 5 + 12));
  float yt[3] = {1, 1, 1};
  ops::cpu::gemv<float>({GemvOp::T, 2, 3, 4}, 1.0f, A, x2, 0.5f, yt, Activation::None);
  EXPECT_FLOAT_EQ(yt[0], 0.5f * 1 - 4 + 0.5f);
  EXPECT_FLOAT_EQ(yt[1], 0.5f * 2 - 5 + 0.5f);
  EXPECT_FLOAT_EQ(yt[2], 0.5f * 3 - 6 + 0.5f);
  float yr[2];
  ops::cpu::gemv<float>({GemvOp::N, 2, 3, 4}, -1.0f, A, x3, 0.0f, yr, Activation::ReLU);
  EXPECT_EQ(yr[0], 0.0f);
  EXPECT_EQ(yr[1], 0.0f);
  float ys[2];
  ops::cpu::gemv<float>({GemvOp::N, 2, 3, 4}, 0.1f, A, x3, 0.0f, ys, Activation::Sigmoid);
  EXPECT_NEAR(ys[0], 1.0 / (1.0 + std::exp(-0.5)), 1e-6);
}

}  // namespace
}  // namespace tessera
