// The CPU GEMM reference on a hand-checked product in every layout/transpose, fp16/bf16
// storage, and argument errors that name the problem.
#include <gtest/gtest.h>

#include <cstring>

#include "support/errors.h"
#include "support/half.h"
#include "tessera/ops/gemm.h"

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

}  // namespace
}  // namespace tessera
