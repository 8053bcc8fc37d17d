// CUDA GEMV against the CPU reference on fresh random data: both ops, fp32 and fp16, odd
// sizes, padded rows (lda > cols), misaligned starts (scalar paths), alpha/beta and the
// fused activations. Outputs are poisoned (NaN) before each run so unwritten elements
// fail. Tolerances: relative L2 error, measured worst case on an H100 times a margin.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "support/gpu.h"
#include "support/half.h"
#include "support/random.h"
#include "tessera/core/buffer.h"
#include "tessera/core/device.h"
#include "tessera/core/backend.h"
#include "tessera/ops/gemv.h"
#include "tessera/ops/ger.h"

namespace tessera {
namespace {

using test::rel_error;


// fp32: the GPU sums in a different order than the double reference: ~1e-7 measured.
// fp16: inputs are the same fp16 values on both sides; the output rounding to fp16
// dominates (2^-11 relative per element).
constexpr double kTolF32 = 1e-5;
constexpr double kTolF16 = 2e-3;

using ops::GemvOp;



struct Case {
  GemvOp op;
  size_t rows, cols, lda_pad, offset;  // offset: elements to shift A and x by (misalignment)
  float alpha, beta;
  Activation act;
  bool half;
};

std::string name_of(const Case& c) {
  std::string act = to_string(c.act);
  for (auto& ch : act) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return std::string(c.half ? "f16_" : "f32_") + (c.op == GemvOp::N ? "N_" : "T_") + std::to_string(c.rows) + "x" +
         std::to_string(c.cols) + (c.lda_pad ? "_pad" + std::to_string(c.lda_pad) : "") +
         (c.offset ? "_off" + std::to_string(c.offset) : "") + (c.beta != 0 ? "_beta" : "") + "_" +
         act;
}

class GemvCudaVsCpu : public ::testing::TestWithParam<Case> {};

TEST_P(GemvCudaVsCpu, MatchesReference) {
  REQUIRE_CUDA();
  const Case c = GetParam();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ops::GemvShape s{c.op, c.rows, c.cols, c.cols + c.lda_pad};
  auto a = test::random_floats(c.offset + c.rows * s.lda, -1, 1, seed);
  auto x = test::random_floats(c.offset + s.x_size(), -1, 1, seed + 1);
  auto y0 = test::random_floats(s.y_size(), -1, 1, seed + 2);
  std::vector<float> got, want;
  if (!c.half) {
    want = y0;
    ops::cpu::gemv<float>(s, c.alpha, a.data() + c.offset, x.data() + c.offset, c.beta, want.data(), c.act);
    Buffer<float> da = make_buffer(DeviceKind::cuda, a), dx = make_buffer(DeviceKind::cuda, x);
    Buffer<float> dy = make_buffer(DeviceKind::cuda, y0);
    if (c.beta == 0) detail::fill_bytes(DeviceKind::cuda, dy.data(), 0xff, dy.bytes());  // NaN: must not be read
    ops::cuda::gemv(s, c.alpha, da.data() + c.offset, dx.data() + c.offset, c.beta, dy.data(), c.act);
    got = dy.to_host();
  } else {
    std::vector<uint16_t> ah(a.size()), xh(x.size()), yh(y0.size());
    for (size_t i = 0; i < a.size(); ++i) ah[i] = test::half_bits(a[i]);
    for (size_t i = 0; i < x.size(); ++i) xh[i] = test::half_bits(x[i]);
    for (size_t i = 0; i < y0.size(); ++i) yh[i] = test::half_bits(y0[i]);
    std::vector<uint16_t> ref = yh;
    ops::cpu::gemv<uint16_t>(s, c.alpha, ah.data() + c.offset, xh.data() + c.offset, c.beta, ref.data(), c.act);
    Buffer<uint16_t> da = make_buffer(DeviceKind::cuda, ah), dx = make_buffer(DeviceKind::cuda, xh);
    Buffer<uint16_t> dy = make_buffer(DeviceKind::cuda, yh);
    if (c.beta == 0) detail::fill_bytes(DeviceKind::cuda, dy.data(), 0xff, dy.bytes());
    ops::cuda::gemv(s, c.alpha, da.data() + c.offset, dx.data() + c.offset, c.beta, dy.data(), c.act);
    for (uint16_t v : dy.to_host()) got.push_back(test::from_half_bits(v));
    for (uint16_t v : ref) want.push_back(test::from_half_bits(v));
  }
  const double e = rel_error(got, want);
  std::printf("[ measured ] %s: %.2e\n", name_of(c).c_str(), e);
  EXPECT_LT(e, c.half ? kTolF16 : kTolF32);
}

std::vector<Case> cases() {
  std::vector<Case> v;
  for (bool half : {false, true})
    for (GemvOp op : {GemvOp::N, GemvOp::T}) {
      v.push_back({op, 1, 1, 0, 0, 1.0f, 0.0f, Activation::None, half});
      v.push_back({op, 17, 33, 0, 0, 1.0f, 0.0f, Activation::None, half});
      v.push_back({op, 777, 333, 3, 1, 0.5f, 0.25f, Activation::None, half});  // misaligned: scalar path
      v.push_back({op, 333, 1999, 0, 0, 1.0f, 0.0f, Activation::Sigmoid, half});
      v.push_back({op, 1000, 1024, 8, 0, -1.0f, 1.0f, Activation::ReLU, half});
      v.push_back({op, 500, 700, 0, 0, 1.0f, 0.5f, Activation::Tanh, half});  // any activation of the MLP set
      v.push_back({op, 64, 100003, 0, 0, 1.0f, 0.0f, Activation::None, half});  // few long rows
      v.push_back({op, 4096, 4096, 0, 0, 1.0f, 0.0f, Activation::None, half});
    }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemvCudaVsCpu, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return name_of(info.param); });

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

TEST(GerCuda, MatchesCpu) {
  REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  const size_t rows = 333, cols = 1001, lda = 1003;
  auto a = test::random_floats(rows * lda, -1, 1, seed);
  auto x = test::random_floats(rows, -1, 1, seed + 1), y = test::random_floats(cols, -1, 1, seed + 2);
  Buffer<float> da = make_buffer(DeviceKind::cuda, a), dx = make_buffer(DeviceKind::cuda, x),
                dy = make_buffer(DeviceKind::cuda, y);
  ops::cpu::ger(rows, cols, 0.3f, x.data(), y.data(), a.data(), lda);
  ops::cuda::ger(rows, cols, 0.3f, dx.data(), dy.data(), da.data(), lda);
  EXPECT_LT(rel_error(da.to_host(), a), 1e-6);
}

}  // namespace
}  // namespace tessera
