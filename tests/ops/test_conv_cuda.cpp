// The CUDA convolution algorithms chosen explicitly (the backend-ops harness covers the
// automatic choice on odd shapes): Winograd F(2x2,3x3) and F(4x4,3x3) and im2col + GEMM,
// forward and backward-data, against
// the CPU double reference on fresh random data: output sizes that cut the tiles, padding
// 0, 1 and 2, both layouts, fused activation and derivative. Tolerances: the worst relative
// L2 error measured on the H200 x ~10 (printed as "measured").
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "support/errors.h"
#include "support/gpu.h"
#include "support/half.h"
#include "support/random.h"
#include "tessera/core/buffer.h"
#include "tessera/ops/conv.h"
#include "tessera/ops/dispatch.h"
#include "ops/cuda/cuda_kernels.h"

namespace tessera {
namespace {

using ops::ConvAlgo;
using ops::ConvDesc;
using ops::ConvLayout;

std::vector<ConvDesc> winograd_shapes() {
  std::vector<ConvDesc> v;
  auto add = [&](uint32_t N, uint32_t C, uint32_t H, uint32_t W, uint32_t K, uint32_t pad) {
    ConvDesc d;
    d.N = N, d.C = C, d.H = H, d.W = W, d.K = K, d.pad_h = d.pad_w = pad;
    v.push_back(d);
  };
  add(2, 3, 7, 5, 5, 1);
  add(1, 33, 13, 11, 17, 1);   // 13 and 11: tiles cut by the edge
  add(3, 16, 9, 17, 24, 0);
  add(1, 5, 6, 6, 9, 2);
  add(2, 1, 1, 1, 2, 1);       // a 1x1 image
  add(4, 64, 14, 14, 64, 1);
  return v;
}

TEST(ConvCuda, WinogradAndIm2colMatchTheCpuReference) {
  REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  struct Case {
    ConvAlgo algo;
    double tolerance;
  };
  const Case cases[] = {{ConvAlgo::winograd_2x2, 1e-5}, {ConvAlgo::winograd_4x4, 5e-5}, {ConvAlgo::im2col_gemm, 1e-5}};
  double worst[3][2] = {};
  uint64_t k = 0;
  for (ConvDesc d : winograd_shapes())
    for (ConvLayout layout : {ConvLayout::nchw, ConvLayout::nhwc}) {
      d.layout = layout;
      SCOPED_TRACE(testing::Message() << to_string(layout) << " N" << d.N << " C" << d.C << " " << d.H << "x" << d.W
                                      << " K" << d.K << " pad " << d.pad_h);
      const auto x = test::random_floats(d.input_elements(), 0.0f, 1.0f, seed + k++);  // >= 0: a ReLU's output
      const auto w = test::random_floats(d.filter_elements(), -1.0f, 1.0f, seed + k++);
      const auto bias = test::random_floats(d.K, -1.0f, 1.0f, seed + k++);
      const auto dz = test::random_floats(d.output_elements(), -1.0f, 1.0f, seed + k++);
      std::vector<float> ref_y(d.output_elements()), ref_dx(d.input_elements());
      ConvDesc r = d;
      r.algo = ConvAlgo::direct;
      ops::call<ops::Conv2dForward>(DeviceKind::cpu, r, Activation::Tanh, TensorView::of(x.data(), x.size()),
                                    TensorView::of(w.data(), w.size()), TensorView::of(bias.data(), bias.size()),
                                    TensorView::of(ref_y.data(), ref_y.size()));
      ops::call<ops::Conv2dBackwardData>(DeviceKind::cpu, r, Activation::ReLU, TensorView::of(dz.data(), dz.size()),
                                         TensorView::of(w.data(), w.size()), TensorView::of(x.data(), x.size()),
                                         TensorView::of(ref_dx.data(), ref_dx.size()));
      Buffer<float> gx = make_buffer(DeviceKind::cuda, x), gw = make_buffer(DeviceKind::cuda, w),
                    gb = make_buffer(DeviceKind::cuda, bias), gdz = make_buffer(DeviceKind::cuda, dz),
                    gy(DeviceKind::cuda, ref_y.size()), gdx(DeviceKind::cuda, ref_dx.size());
      for (int c = 0; c < 3; ++c) {
        SCOPED_TRACE(to_string(cases[c].algo));
        ConvDesc e = d;
        e.algo = cases[c].algo;
        ops::call<ops::Conv2dForward>(DeviceKind::cuda, e, Activation::Tanh, gx.view(), gw.view(), gb.view(), gy.view());
        const double fe = test::rel_error(gy.to_host(), ref_y);
        EXPECT_LT(fe, cases[c].tolerance) << "forward";
        if (d.pad_h <= 2) {
          ops::call<ops::Conv2dBackwardData>(DeviceKind::cuda, e, Activation::ReLU, gdz.view(), gw.view(), gx.view(),
                                             gdx.view());
          const double be = test::rel_error(gdx.to_host(), ref_dx);
          EXPECT_LT(be, cases[c].tolerance) << "backward-data";
          worst[c][1] = std::max(worst[c][1], be);
        }
        worst[c][0] = std::max(worst[c][0], fe);
      }
    }
  for (int c = 0; c < 3; ++c)
    std::printf("[ measured ] cuda %s worst relative L2 error: forward %.2e, backward-data %.2e\n",
                to_string(cases[c].algo), worst[c][0], worst[c][1]);
}

// fp32 backward-weight through im2col + the tf32x3 GEMM, the pixel sum split into several
// products per image (one batched product per image: a shorter last split its own) where
// the dW tiles alone would leave SMs idle, with the bias gradient; both layouts.
TEST(ConvCuda, Im2colWeightGradientWithPixelSplitsMatchesTheCpuReference) {
  REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  struct Shape {
    uint32_t N, C, H, W, K;
  };
  const Shape shapes[] = {{1, 8, 75, 75, 12}, {3, 5, 40, 41, 7}, {32, 4, 6, 6, 3}};
  double worst = 0, worst_bias = 0;
  uint64_t k = 0;
  for (const Shape& sh : shapes)
    for (ConvLayout layout : {ConvLayout::nchw, ConvLayout::nhwc}) {
      ConvDesc d;
      d.N = sh.N, d.C = sh.C, d.H = sh.H, d.W = sh.W, d.K = sh.K, d.pad_h = d.pad_w = 1, d.layout = layout;
      SCOPED_TRACE(testing::Message() << to_string(layout) << " N" << d.N << " C" << d.C << " " << d.H << "x" << d.W
                                      << " K" << d.K);
      const auto x = test::random_floats(d.input_elements(), -1.0f, 1.0f, seed + k++);
      const auto dz = test::random_floats(d.output_elements(), -1.0f, 1.0f, seed + k++);
      std::vector<float> ref_dw(d.filter_elements()), ref_db(d.K);
      ConvDesc r = d;
      r.algo = ConvAlgo::direct;
      ops::call<ops::Conv2dBackwardWeight>(DeviceKind::cpu, r, TensorView::of(x.data(), x.size()),
                                           TensorView::of(dz.data(), dz.size()),
                                           TensorView::of(ref_dw.data(), ref_dw.size()),
                                           TensorView::of(ref_db.data(), ref_db.size()));
      Buffer<float> gx = make_buffer(DeviceKind::cuda, x), gdz = make_buffer(DeviceKind::cuda, dz),
                    gdw(DeviceKind::cuda, ref_dw.size()), gdb(DeviceKind::cuda, ref_db.size());
      d.algo = ConvAlgo::im2col_gemm;
      ops::call<ops::Conv2dBackwardWeight>(DeviceKind::cuda, d, gx.view(), gdz.view(), gdw.view(), gdb.view());
      const double e = test::rel_error(gdw.to_host(), ref_dw), eb = test::rel_error(gdb.to_host(), ref_db);
      EXPECT_LT(e, 1e-5);
      EXPECT_LT(eb, 1e-5);
      worst = std::max(worst, e), worst_bias = std::max(worst_bias, eb);
    }
  std::printf("[ measured ] cuda im2col_gemm fp32 backward-weight worst relative L2 error: %.2e, bias %.2e\n", worst,
              worst_bias);
}

// ConvAlgo::benchmark: the first call of each op and shape times the algorithms that can
// run it and keeps the fastest; every op's result matches the CPU reference, the choice is
// one that applies (Winograd only forward/backward-data, fp32) and a second call reuses it.
TEST(ConvCuda, BenchmarkModeRunsTheFastestApplicableAlgorithm) {
  REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ConvDesc d;
  d.N = 4, d.C = 32, d.H = 20, d.W = 24, d.K = 48, d.pad_h = d.pad_w = 1;
  const auto x = test::random_floats(d.input_elements(), 0.0f, 1.0f, seed);
  const auto w = test::random_floats(d.filter_elements(), -1.0f, 1.0f, seed + 1);
  const auto dz = test::random_floats(d.output_elements(), -1.0f, 1.0f, seed + 2);
  std::vector<float> ref_y(d.output_elements()), ref_dx(d.input_elements()), ref_dw(d.filter_elements());
  ConvDesc r = d;
  r.algo = ConvAlgo::direct;
  auto host = [](const std::vector<float>& v) { return TensorView::of(v.data(), v.size()); };
  auto host_out = [](std::vector<float>& v) { return TensorView::of(v.data(), v.size()); };
  ops::call<ops::Conv2dForward>(DeviceKind::cpu, r, Activation::None, host(x), host(w), TensorView(), host_out(ref_y));
  ops::call<ops::Conv2dBackwardData>(DeviceKind::cpu, r, Activation::None, host(dz), host(w), TensorView(),
                                     host_out(ref_dx));
  ops::call<ops::Conv2dBackwardWeight>(DeviceKind::cpu, r, host(x), host(dz), host_out(ref_dw), TensorView());
  Buffer<float> gx = make_buffer(DeviceKind::cuda, x), gw = make_buffer(DeviceKind::cuda, w),
                gdz = make_buffer(DeviceKind::cuda, dz), gy(DeviceKind::cuda, ref_y.size()),
                gdx(DeviceKind::cuda, ref_dx.size()), gdw(DeviceKind::cuda, ref_dw.size());
  d.algo = ConvAlgo::benchmark;
  for (int call = 0; call < 2; ++call) {
    ops::call<ops::Conv2dForward>(DeviceKind::cuda, d, Activation::None, gx.view(), gw.view(), TensorView(), gy.view());
    ops::call<ops::Conv2dBackwardData>(DeviceKind::cuda, d, Activation::None, gdz.view(), gw.view(), TensorView(),
                                       gdx.view());
    ops::call<ops::Conv2dBackwardWeight>(DeviceKind::cuda, d, gx.view(), gdz.view(), gdw.view(), TensorView());
    EXPECT_LT(test::rel_error(gy.to_host(), ref_y), 1e-5);
    EXPECT_LT(test::rel_error(gdx.to_host(), ref_dx), 1e-5);
    EXPECT_LT(test::rel_error(gdw.to_host(), ref_dw), 1e-5);
  }
  const ConvAlgo fwd = ops::cuda::benchmarked_conv_algo(ops::ConvOp::forward, d),
                 bwd_w = ops::cuda::benchmarked_conv_algo(ops::ConvOp::backward_weight, d);
  EXPECT_NE(fwd, ConvAlgo::implicit_gemm);  // fp16/bf16 NHWC only
  EXPECT_TRUE(bwd_w == ConvAlgo::im2col_gemm || bwd_w == ConvAlgo::direct) << to_string(bwd_w);
  std::printf("[ measured ] benchmark chose: forward %s, backward-data %s, backward-weight %s\n", to_string(fwd),
              to_string(ops::cuda::benchmarked_conv_algo(ops::ConvOp::backward_data, d)), to_string(bwd_w));
}

// The implicit GEMM in bf16 (the backend-ops cases cover fp16): forward with bias + Tanh,
// backward-data with the ReLU derivative, backward-weight with the bias gradient, against
// the CPU reference on the same bf16 data. Measured on the H200: 3.0e-6 / 3.3e-5 / 4.1e-9
// relative L2 (both sides round the same sums to bf16, so most elements agree exactly); a
// rounding that goes the other way moves one element by ~4e-3, hence 2e-3 over thousands.
TEST(ConvCuda, ImplicitGemmInBf16MatchesTheCpuReference) {
  REQUIRE_CUDA();
  test::unless_the_gpu_cannot([&] {
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    ConvDesc d;
    d.N = 2, d.C = 32, d.H = 9, d.W = 11, d.K = 40, d.pad_h = d.pad_w = 1;
    d.layout = ConvLayout::nhwc, d.type = DType::bf16;
    auto bf16 = [](const std::vector<float>& v) {
      std::vector<uint16_t> out(v.size());
      for (size_t i = 0; i < v.size(); ++i) out[i] = test::bfloat_bits(v[i]);
      return out;
    };
    auto floats = [](const std::vector<uint16_t>& v) {
      std::vector<float> out(v.size());
      for (size_t i = 0; i < v.size(); ++i) out[i] = test::from_bfloat_bits(v[i]);
      return out;
    };
    const auto x = bf16(test::random_floats(d.input_elements(), 0.0f, 1.0f, seed));
    const auto w = bf16(test::random_floats(d.filter_elements(), -1.0f, 1.0f, seed + 1));
    const auto dz = bf16(test::random_floats(d.output_elements(), -1.0f, 1.0f, seed + 2));
    const auto bias = test::random_floats(d.K, -1.0f, 1.0f, seed + 3);
    auto view = [](auto& v) { return TensorView::vector(v.data(), DType::bf16, v.size()); };
    std::vector<uint16_t> y(d.output_elements()), dx(d.input_elements()), dw(d.filter_elements());
    std::vector<float> dbias(d.K);
    ConvDesc r = d;
    r.algo = ConvAlgo::direct;
    ops::call<ops::Conv2dForward>(DeviceKind::cpu, r, Activation::Tanh, view(x), view(w),
                                  TensorView::of(bias.data(), bias.size()), view(y));
    ops::call<ops::Conv2dBackwardData>(DeviceKind::cpu, r, Activation::ReLU, view(dz), view(w), view(x), view(dx));
    ops::call<ops::Conv2dBackwardWeight>(DeviceKind::cpu, r, view(x), view(dz), view(dw),
                                         TensorView::of(dbias.data(), dbias.size()));
    Buffer<uint16_t> gx = make_buffer(DeviceKind::cuda, x), gw = make_buffer(DeviceKind::cuda, w),
                     gdz = make_buffer(DeviceKind::cuda, dz), gy(DeviceKind::cuda, y.size()),
                     gdx(DeviceKind::cuda, dx.size()), gdw(DeviceKind::cuda, dw.size());
    Buffer<float> gb = make_buffer(DeviceKind::cuda, bias), gdb(DeviceKind::cuda, dbias.size());
    auto gview = [](Buffer<uint16_t>& b) { return TensorView::vector(b.data(), DType::bf16, b.size()); };
    d.algo = ConvAlgo::implicit_gemm;
    ops::call<ops::Conv2dForward>(DeviceKind::cuda, d, Activation::Tanh, gview(gx), gview(gw), gb.view(), gview(gy));
    ops::call<ops::Conv2dBackwardData>(DeviceKind::cuda, d, Activation::ReLU, gview(gdz), gview(gw), gview(gx),
                                       gview(gdx));
    ops::call<ops::Conv2dBackwardWeight>(DeviceKind::cuda, d, gview(gx), gview(gdz), gview(gdw), gdb.view());
    const double ey = test::rel_error(floats(gy.to_host()), floats(y));
    const double edx = test::rel_error(floats(gdx.to_host()), floats(dx));
    const double edw = test::rel_error(floats(gdw.to_host()), floats(dw));
    const double edb = test::rel_error(gdb.to_host(), dbias);
    std::printf("[ measured ] cuda implicit_gemm bf16 relative L2 error: forward %.2e, backward-data %.2e, "
                "backward-weight %.2e, bias gradient %.2e\n", ey, edx, edw, edb);
    EXPECT_LT(ey, 2e-3);
    EXPECT_LT(edx, 2e-3);
    EXPECT_LT(edw, 2e-3);
    EXPECT_LT(edb, 1e-4);
  });
}

TEST(ConvCuda, WinogradAndImplicitGemmRefuseWhatTheyCannotDo) {
  REQUIRE_CUDA();
  ConvDesc d;
  d.C = 4, d.K = 4, d.H = d.W = 8, d.pad_h = d.pad_w = 1, d.stride_h = d.stride_w = 2;
  d.algo = ConvAlgo::winograd_2x2;
  Buffer<float> buf(DeviceKind::cuda, 4096);
  EXPECT_NE(test::error_of([&] {
              ops::call<ops::Conv2dForward>(DeviceKind::cuda, d, Activation::None, buf.view(), buf.view(), TensorView(),
                                            buf.view());
            }).find("stride 1"),
            std::string::npos);
  d.stride_h = d.stride_w = 1;
  d.type = DType::f16;
  Buffer<uint16_t> half(DeviceKind::cuda, 4096);
  EXPECT_NE(test::error_of([&] {
              ops::call<ops::Conv2dForward>(DeviceKind::cuda, d, Activation::None, half.view(), half.view(),
                                            TensorView(), half.view());
            }).find("fp32"),
            std::string::npos);
  d.type = DType::f32;
  d.algo = ConvAlgo::implicit_gemm;
  EXPECT_NE(test::error_of([&] {
              ops::call<ops::Conv2dForward>(DeviceKind::cuda, d, Activation::None, buf.view(), buf.view(), TensorView(),
                                            buf.view());
            }).find("fp16 or bf16 NHWC"),
            std::string::npos);
  // The implicit GEMM's own limits name themselves: C not a multiple of 8, backward-data at
  // stride 2.
  d.type = DType::f16, d.layout = ConvLayout::nhwc, d.C = 12, d.K = 8;
  EXPECT_NE(test::error_of([&] {
              ops::call<ops::Conv2dForward>(DeviceKind::cuda, d, Activation::None, half.view(), half.view(),
                                            TensorView(), half.view());
            }).find("multiples of 8"),
            std::string::npos);
  d.C = 8, d.stride_h = d.stride_w = 2;
  EXPECT_NE(test::error_of([&] {
              ops::call<ops::Conv2dBackwardData>(DeviceKind::cuda, d, Activation::None, half.view(), half.view(),
                                                 TensorView(), half.view());
            }).find("stride 1"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera
