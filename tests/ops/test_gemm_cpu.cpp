// The CPU GEMM reference on a hand-checked product in every layout/transpose, fp16/bf16
// storage, the activation epilogue against the plain product, and argument errors that
// name the problem.
#include <gtest/gtest.h>

#include <cstring>

#include "support/errors.h"
#include "support/half.h"
#include "tessera/core/backend.h"
#include "tessera/ops/dispatch.h"
#include "tessera/ops/gemm.h"
#include "ops/activation_math.h"
#include "ops/cpu/cpu_kernels.h"

namespace tessera {
namespace {

using ops::DType;
using ops::GemmDesc;
using ops::Layout;

// Stores the logical rows x cols matrix m in operand o's storage.
std::vector<float> store(const std::vector<std::vector<float>>& m, const ops::GemmOperand& o) {
  const size_t rows = m.size(), cols = m[0].size();
  const auto s = ops::operand_strides(o);
  std::vector<float> out((o.transpose ? cols : rows) * (o.transpose ? rows : cols) + 8, -999.0f);
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) out[r * s.row + c * s.col] = m[r][c];
  return out;
}

TEST(GemmCpu, EveryLayoutAndTransposeGivesTheSameProduct) {
  const std::vector<std::vector<float>> A = {{1, 2, 3}, {4, 5, 6}};   // 2 x 3
  const std::vector<std::vector<float>> B = {{1, -1}, {0, 2}, {3, 1}};  // 3 x 2
  const float want[2][2] = {{10, 6}, {22, 12}};
  for (int bits = 0; bits < 32; ++bits) {
    GemmDesc d;
    d.M = 2, d.N = 2, d.K = 3;
    d.a = {DType::f32, bits & 4 ? Layout::col_major : Layout::row_major, bool(bits & 1), 0, 0};
    d.b = {DType::f32, bits & 8 ? Layout::col_major : Layout::row_major, bool(bits & 2), 0, 0};
    d.c = {DType::f32, bits & 16 ? Layout::col_major : Layout::row_major, false, 0, 0};
    auto ld = [](const ops::GemmOperand& o, size_t rows, size_t cols) {
      const size_t sr = o.transpose ? cols : rows, sc = o.transpose ? rows : cols;
      return o.layout == Layout::row_major ? sc : sr;
    };
    d.a.ld = ld(d.a, 2, 3), d.b.ld = ld(d.b, 3, 2), d.c.ld = 2;
    const auto a = store(A, d.a), b = store(B, d.b);
    std::vector<float> c(4, 1.0f);
    d.alpha = 2.0f, d.beta = 0.5f;
    ops::cpu::gemm(d, a.data(), b.data(), c.data());
    const auto sc = ops::operand_strides(d.c);
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j) ASSERT_EQ(c[i * sc.row + j * sc.col], 2 * want[i][j] + 0.5f) << "layout bits " << bits;
  }
}

TEST(GemmCpu, HalfAndBfloatStorage) {
  // 1x2 times 2x1 with values exact in both formats; C in the input type.
  for (DType t : {DType::f16, DType::bf16}) {
    auto bits = [t](float v) { return t == DType::f16 ? test::half_bits(v) : test::bfloat_bits(v); };
    const uint16_t a[2] = {bits(1.5f), bits(-2.0f)}, b[2] = {bits(4.0f), bits(0.25f)};
    uint16_t c[1] = {0};
    GemmDesc d;
    d.M = 1, d.N = 1, d.K = 2;
    d.a = {t, Layout::row_major, false, 2, 0};
    d.b = {t, Layout::row_major, false, 1, 0};
    d.c = {t, Layout::row_major, false, 1, 0};
    ops::cpu::gemm(d, a, b, c);
    EXPECT_EQ(c[0], bits(5.5f)) << to_string(t);
  }
}

TEST(GemmCpu, BadArgumentsAreClearErrors) {
  GemmDesc d;
  d.M = 4, d.N = 5, d.K = 6;
  d.a = {DType::f32, Layout::row_major, false, 3, 0};  // needs 6
  d.b = {DType::f32, Layout::row_major, false, 5, 0};
  d.c = {DType::f32, Layout::row_major, false, 5, 0};
  std::vector<float> buf(64);
  EXPECT_NE(test::error_of([&] { ops::cpu::gemm(d, buf.data(), buf.data(), buf.data()); }).find("lda 3"),
            std::string::npos);
  d.a.ld = 6;
  d.b.type = DType::f16;
  EXPECT_NE(test::error_of([&] { ops::cpu::gemm(d, buf.data(), buf.data(), buf.data()); }).find("same type"),
            std::string::npos);
}

TEST(GemmCpu, ActivationEpilogueIsTheActivationOfTheProduct) {
  // 3 x 4 x 5 product with mixed signs; forward = act(alpha AB), derivative = alpha AB *
  // act'(y), each against the plain product computed separately.
  const size_t M = 3, N = 4, K = 5;
  std::vector<float> a(M * K), b(K * N), y(M * N);
  for (size_t i = 0; i < a.size(); ++i) a[i] = float(int(i % 7) - 3) * 0.25f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = float(int(i % 5) - 2) * 0.5f;
  for (size_t i = 0; i < y.size(); ++i) y[i] = 0.05f + 0.07f * float(i);  // sigmoid-like outputs
  GemmDesc d;
  d.M = M, d.N = N, d.K = K, d.alpha = 1.5f;
  d.a = {DType::f32, Layout::row_major, false, K, 0};
  d.b = {DType::f32, Layout::row_major, false, N, 0};
  d.c = {DType::f32, Layout::row_major, false, N, 0};
  std::vector<float> plain(M * N), got(M * N);
  ops::cpu::gemm(d, a.data(), b.data(), plain.data());
  for (Activation act : {Activation::ReLU, Activation::Sigmoid, Activation::Tanh}) {
    ops::cpu::gemm_activation(d, {ops::GemmEpilogueKind::activation, act}, a.data(), b.data(), got.data(), nullptr);
    for (size_t i = 0; i < M * N; ++i) EXPECT_NEAR(got[i], activation_value<double>(act, plain[i]), 1e-6) << i;
    ops::cpu::gemm_activation(d, {ops::GemmEpilogueKind::activation_derivative, act}, a.data(), b.data(), got.data(),
                              y.data());
    for (size_t i = 0; i < M * N; ++i)
      EXPECT_NEAR(got[i], plain[i] * activation_derivative<double>(act, y[i], 0.0), 1e-6) << i;
  }
  // ReLU's epilogue zeroes the negative products: the test data has both signs.
  ops::cpu::gemm_activation(d, {ops::GemmEpilogueKind::activation, Activation::ReLU}, a.data(), b.data(), got.data(),
                            nullptr);
  size_t zeros = 0;
  for (size_t i = 0; i < M * N; ++i) zeros += plain[i] < 0 && got[i] == 0.0f;
  EXPECT_GT(zeros, 0u);
}

TEST(GemmCpu, ActivationEpilogueErrorsNameTheProblem) {
  auto& cpu = backend_for(DeviceKind::cpu);
  std::vector<float> buf(64);
  GemmDesc d;
  d.M = 4, d.N = 4, d.K = 4;
  d.a = {DType::f32, Layout::row_major, false, 4, 0};
  d.b = {DType::f32, Layout::row_major, false, 4, 0};
  d.c = {DType::f32, Layout::row_major, false, 4, 0};
  const TensorView v = TensorView::vector(buf.data(), DType::f32, 16);
  auto run = [&](const ops::GemmEpilogue& e, const TensorView& Y) {
    return test::error_of([&] { ops::call<ops::GemmActivation>(cpu.default_stream(), d, e, v, v, v, Y); });
  };
  EXPECT_NE(run({ops::GemmEpilogueKind::activation, Activation::SiLU}, {}).find("SiLU needs its input"),
            std::string::npos);
  EXPECT_NE(run({ops::GemmEpilogueKind::activation_derivative, Activation::ReLU}, {}).find("gemm_activation: Y"),
            std::string::npos);
  EXPECT_EQ(run({ops::GemmEpilogueKind::activation_derivative, Activation::ReLU}, v), "");
  d.beta = 1.0f;
  EXPECT_NE(run({ops::GemmEpilogueKind::activation, Activation::ReLU}, {}).find("beta must be 0"), std::string::npos);
}

}  // namespace
}  // namespace tessera
