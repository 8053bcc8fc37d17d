// The CPU convolution reference: forward against an independent im2col + matrix product
// (both layouts, odd shapes, stride, padding past the kernel, dilation, depthwise),
// backward-data and backward-weight against finite differences of the forward, the fused
// activation derivative against applying it separately, fp16 storage, and bad shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "support/errors.h"
#include "support/random.h"
#include "tessera/ops/conv.h"
#include "tessera/ops/dispatch.h"

namespace tessera {
namespace {

using ops::ConvDesc;
using ops::ConvLayout;

TensorView f32(std::vector<float>& v) { return TensorView::of(v.data(), v.size()); }

// Index helpers in NCHW / KCRS order, independent of the library's.
struct Shapes {
  ConvDesc d;
  uint32_t P, Q, Cg, Kg;
  explicit Shapes(const ConvDesc& desc)
      : d(desc), P(desc.P()), Q(desc.Q()), Cg(desc.C / desc.groups), Kg(desc.K / desc.groups) {}
};

// Converts an NCHW-ordered tensor [a, b, c, e] to [a, c, e, b] (NHWC / KRSC).
std::vector<float> to_channels_last(const std::vector<float>& v, uint32_t a, uint32_t b, uint32_t c, uint32_t e) {
  std::vector<float> out(v.size());
  for (uint32_t i = 0; i < a; ++i)
    for (uint32_t j = 0; j < b; ++j)
      for (uint32_t k = 0; k < c; ++k)
        for (uint32_t l = 0; l < e; ++l) out[((size_t(i) * c + k) * e + l) * b + j] = v[((size_t(i) * b + j) * c + k) * e + l];
  return out;
}

// Forward by im2col: each output pixel's receptive field as a row, times the filters.
std::vector<double> im2col_forward(const Shapes& s, const std::vector<float>& x, const std::vector<float>& w,
                                   const std::vector<float>& bias) {
  const ConvDesc& d = s.d;
  std::vector<double> y(size_t(d.N) * d.K * s.P * s.Q);
  std::vector<double> col(size_t(s.Cg) * d.R * d.S);
  for (uint32_t n = 0; n < d.N; ++n)
    for (uint32_t g = 0; g < d.groups; ++g)
      for (uint32_t p = 0; p < s.P; ++p)
        for (uint32_t q = 0; q < s.Q; ++q) {
          size_t j = 0;
          for (uint32_t cg = 0; cg < s.Cg; ++cg)
            for (uint32_t r = 0; r < d.R; ++r)
              for (uint32_t t = 0; t < d.S; ++t, ++j) {
                const int h = int(p * d.stride_h + r * d.dilation_h) - int(d.pad_h);
                const int e = int(q * d.stride_w + t * d.dilation_w) - int(d.pad_w);
                const bool inside = h >= 0 && h < int(d.H) && e >= 0 && e < int(d.W);
                col[j] = inside ? x[((size_t(n) * d.C + g * s.Cg + cg) * d.H + h) * d.W + e] : 0.0;
              }
          for (uint32_t kg = 0; kg < s.Kg; ++kg) {
            const uint32_t k = g * s.Kg + kg;
            double acc = bias.empty() ? 0.0 : bias[k];
            for (size_t i = 0; i < col.size(); ++i) acc += col[i] * w[size_t(k) * col.size() + i];
            y[((size_t(n) * d.K + k) * s.P + p) * s.Q + q] = acc;
          }
        }
  return y;
}

std::vector<float> random_vector(std::mt19937_64& gen, size_t n) {
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(n);
  for (auto& e : v) e = u(gen);
  return v;
}

std::vector<ConvDesc> odd_shapes() {
  std::vector<ConvDesc> shapes;
  auto add = [&](uint32_t N, uint32_t C, uint32_t H, uint32_t W, uint32_t K, uint32_t R, uint32_t S, uint32_t stride,
                 uint32_t pad, uint32_t dilation, uint32_t groups) {
    ConvDesc d;
    d.N = N, d.C = C, d.H = H, d.W = W, d.K = K, d.R = R, d.S = S;
    d.stride_h = d.stride_w = stride, d.pad_h = d.pad_w = pad, d.dilation_h = d.dilation_w = dilation;
    d.groups = groups;
    d.algo = ops::ConvAlgo::direct;  // the reference; the other algorithms are tested against it below
    shapes.push_back(d);
  };
  add(2, 3, 7, 5, 5, 3, 3, 1, 1, 1, 1);   // odd everything
  add(1, 4, 1, 1, 3, 1, 1, 1, 0, 1, 1);   // a 1x1 image, 1x1 kernel
  add(1, 2, 1, 1, 2, 3, 3, 1, 4, 1, 1);   // padding larger than the kernel
  add(2, 3, 9, 8, 4, 3, 3, 2, 1, 1, 1);   // stride 2
  add(1, 5, 11, 10, 3, 5, 3, 3, 2, 1, 1); // stride 3, non-square kernel
  add(1, 3, 9, 9, 2, 3, 3, 1, 2, 2, 1);   // dilation 2
  add(2, 4, 6, 7, 8, 3, 3, 1, 1, 1, 4);   // depthwise, two filters per channel
  add(1, 3, 13, 12, 3, 7, 7, 2, 3, 1, 3); // depthwise 7x7, stride 2
  return shapes;
}

TEST(ConvCpu, ForwardMatchesIm2colInBothLayouts) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 gen(seed);
  for (ConvDesc d : odd_shapes()) {
    const Shapes s(d);
    SCOPED_TRACE(testing::Message() << "N" << d.N << " C" << d.C << " " << d.H << "x" << d.W << " K" << d.K << " "
                                    << d.R << "x" << d.S << " stride " << d.stride_h << " pad " << d.pad_h
                                    << " dilation " << d.dilation_h << " groups " << d.groups);
    std::vector<float> x = random_vector(gen, d.input_elements()), w = random_vector(gen, d.filter_elements());
    std::vector<float> bias = random_vector(gen, d.K), y(d.output_elements());
    const std::vector<double> expected = im2col_forward(s, x, w, bias);
    d.layout = ConvLayout::nchw;
    ops::call<ops::Conv2dForward>(DeviceKind::cpu, d, Activation::None, f32(x), f32(w), f32(bias), f32(y));
    for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], expected[i], 1e-5 * (1 + std::fabs(expected[i]))) << i;
    // NHWC: the same numbers, channels last.
    d.layout = ConvLayout::nhwc;
    std::vector<float> xl = to_channels_last(x, d.N, d.C, d.H, d.W), wl = to_channels_last(w, d.K, s.Cg, d.R, d.S);
    std::vector<float> yl(y.size());
    ops::call<ops::Conv2dForward>(DeviceKind::cpu, d, Activation::None, f32(xl), f32(wl), f32(bias), f32(yl));
    EXPECT_EQ(yl, to_channels_last(y, d.N, d.K, s.P, s.Q));
    // A fused activation: the same as applying it after.
    std::vector<float> yr(y.size());
    ops::call<ops::Conv2dForward>(DeviceKind::cpu, d, Activation::Tanh, f32(xl), f32(wl), f32(bias), f32(yr));
    for (size_t i = 0; i < yr.size(); ++i) ASSERT_NEAR(yr[i], std::tanh(double(yl[i])), 1e-6) << i;
  }
}

TEST(ConvCpu, BackwardMatchesFiniteDifferencesOfTheForward) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 gen(seed);
  for (ConvDesc d : odd_shapes())
    for (ConvLayout layout : {ConvLayout::nchw, ConvLayout::nhwc}) {
      d.layout = layout;
      SCOPED_TRACE(testing::Message() << to_string(layout) << " C" << d.C << " " << d.H << "x" << d.W << " K" << d.K
                                      << " stride " << d.stride_h << " groups " << d.groups);
      std::vector<float> x = random_vector(gen, d.input_elements()), w = random_vector(gen, d.filter_elements());
      std::vector<float> g = random_vector(gen, d.output_elements()), z(d.output_elements());
      // L = sum(g * conv(x, w)); the conv is linear in x and in w, so a central difference
      // with step 1 is exact but for the rounding of z.
      auto loss = [&](std::vector<float>& xv, std::vector<float>& wv) {
        ops::call<ops::Conv2dForward>(DeviceKind::cpu, d, Activation::None, f32(xv), f32(wv), TensorView(), f32(z));
        double l = 0;
        for (size_t i = 0; i < z.size(); ++i) l += double(g[i]) * z[i];
        return l;
      };
      std::vector<float> dx(x.size()), dw(w.size()), dbias(d.K);
      ops::call<ops::Conv2dBackwardData>(DeviceKind::cpu, d, Activation::None, f32(g), f32(w), TensorView(), f32(dx));
      ops::call<ops::Conv2dBackwardWeight>(DeviceKind::cpu, d, f32(x), f32(g), f32(dw), f32(dbias));
      // About 40 entries of `v` (x or w), each against its central difference.
      auto check = [&](std::vector<float>& v, const std::vector<float>& grad, const char* what) {
        for (size_t i = 0; i < v.size(); i += 1 + v.size() / 40) {
          const float keep = v[i];
          v[i] = keep + 1;
          const double up = loss(x, w);
          v[i] = keep - 1;
          const double down = loss(x, w);
          v[i] = keep;
          ASSERT_NEAR(grad[i], (up - down) / 2, 1e-4 * (1 + std::fabs(grad[i]))) << what << " " << i;
        }
      };
      check(x, dx, "dx");
      check(w, dw, "dw");
      // dbias: dL/db_k = the sum of g over channel k.
      const Shapes s(d);
      for (uint32_t k = 0; k < d.K; ++k) {
        double sum = 0;
        for (uint32_t n = 0; n < d.N; ++n)
          for (uint32_t pq = 0; pq < s.P * s.Q; ++pq)
            sum += layout == ConvLayout::nchw ? g[(size_t(n) * d.K + k) * s.P * s.Q + pq]
                                              : g[(size_t(n) * s.P * s.Q + pq) * d.K + k];
        ASSERT_NEAR(dbias[k], sum, 1e-5 * (1 + std::fabs(sum))) << "dbias " << k;
      }
      // The fused derivative of the layer below (ReLU, at its output x) = applying it after.
      std::vector<float> dx_relu(x.size());
      ops::call<ops::Conv2dBackwardData>(DeviceKind::cpu, d, Activation::ReLU, f32(g), f32(w), f32(x), f32(dx_relu));
      for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(dx_relu[i], x[i] > 0 ? dx[i] : 0.0f) << i;
    }
}

TEST(ConvCpu, HalfStorageAgreesWithFloatWithinItsPrecision) {
  std::mt19937_64 gen(test::fresh_seed());
  ConvDesc d = odd_shapes()[0];
  std::vector<float> x = random_vector(gen, d.input_elements()), w = random_vector(gen, d.filter_elements());
  std::vector<float> y(d.output_elements());
  ops::call<ops::Conv2dForward>(DeviceKind::cpu, d, Activation::None, f32(x), f32(w), TensorView(), f32(y));
  std::vector<_Float16> xh(x.begin(), x.end()), wh(w.begin(), w.end()), yh(y.size());
  auto half = [](std::vector<_Float16>& v) {
    return TensorView::vector(v.data(), DType::f16, v.size());
  };
  d.type = DType::f16;
  ops::call<ops::Conv2dForward>(DeviceKind::cpu, d, Activation::None, half(xh), half(wh), TensorView(), half(yh));
  // Inputs rounded to fp16 (2^-11 relative) over 27 products, the output rounded again.
  for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(float(yh[i]), y[i], 0.02f + 2e-3f * std::fabs(y[i])) << i;
}

// Every algorithm of the CPU backend against the direct double reference, forward and both
// backward ops, both layouts, on the odd shapes (Winograd on those it applies to) and a few
// 3x3 ones, fresh random data. Tolerances: measured worst errors relative to the largest
// reference value, with 4-20x headroom (printed as "measured").
TEST(ConvCpu, EveryAlgorithmMatchesTheDirectReference) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 gen(seed);
  std::vector<ConvDesc> shapes = odd_shapes();
  auto add3x3 = [&](uint32_t N, uint32_t C, uint32_t H, uint32_t W, uint32_t K, uint32_t pad) {
    ConvDesc d = shapes[0];
    d.N = N, d.C = C, d.H = H, d.W = W, d.K = K, d.R = d.S = 3, d.pad_h = d.pad_w = pad;
    d.stride_h = d.stride_w = d.dilation_h = d.dilation_w = d.groups = 1;
    shapes.push_back(d);
  };
  add3x3(2, 16, 13, 11, 24, 1);  // tiles cut by the edge (13 and 11 not multiples of 2 or 4)
  add3x3(1, 33, 9, 17, 7, 0);
  add3x3(1, 5, 6, 6, 9, 2);
  add3x3(3, 1, 1, 1, 2, 1);      // a 1x1 image
  struct Case {
    ops::ConvAlgo algo;
    double tolerance;  // of |error| / (1 + max |reference|)
  };
  const Case cases[] = {{ops::ConvAlgo::im2col_gemm, 2e-6},
                        {ops::ConvAlgo::winograd_2x2, 5e-6},
                        {ops::ConvAlgo::winograd_4x4, 4e-5}};
  double worst[3][3] = {{-1, -1, -1}, {-1, -1, -1}, {-1, -1, -1}};  // -1: not applicable
  for (ConvDesc d : shapes)
    for (ConvLayout layout : {ConvLayout::nchw, ConvLayout::nhwc}) {
      d.layout = layout;
      SCOPED_TRACE(testing::Message() << to_string(layout) << " N" << d.N << " C" << d.C << " " << d.H << "x" << d.W
                                      << " K" << d.K << " " << d.R << "x" << d.S << " stride " << d.stride_h << " pad "
                                      << d.pad_h << " dilation " << d.dilation_h << " groups " << d.groups);
      std::vector<float> x = random_vector(gen, d.input_elements()), w = random_vector(gen, d.filter_elements());
      std::vector<float> bias = random_vector(gen, d.K), g = random_vector(gen, d.output_elements());
      for (float& v : x) v = std::fabs(v);  // a ReLU's output: the fused derivative zeroes some, keeps others
      for (size_t i = 0; i < x.size(); i += 3) x[i] = 0.0f;
      auto run = [&](ops::ConvAlgo algo, ops::ConvOp op, std::vector<float>& out, std::vector<float>& dbias) {
        ConvDesc e = d;
        e.algo = algo;
        if (op == ops::ConvOp::forward)
          ops::call<ops::Conv2dForward>(DeviceKind::cpu, e, Activation::ReLU, f32(x), f32(w), f32(bias), f32(out));
        else if (op == ops::ConvOp::backward_data)
          ops::call<ops::Conv2dBackwardData>(DeviceKind::cpu, e, Activation::ReLU, f32(g), f32(w), f32(x), f32(out));
        else
          ops::call<ops::Conv2dBackwardWeight>(DeviceKind::cpu, e, f32(x), f32(g), f32(out), f32(dbias));
      };
      for (ops::ConvOp op : {ops::ConvOp::forward, ops::ConvOp::backward_data, ops::ConvOp::backward_weight}) {
        const size_t n = op == ops::ConvOp::forward ? d.output_elements()
                         : op == ops::ConvOp::backward_data ? d.input_elements() : d.filter_elements();
        std::vector<float> ref(n), ref_bias(d.K);
        run(ops::ConvAlgo::direct, op, ref, ref_bias);
        double scale = 1;
        for (float v : ref) scale = std::max(scale, 1.0 + std::fabs(v));
        for (int c = 0; c < 3; ++c) {
          if (!ops::conv_algo_rejects(cases[c].algo, op, d).empty()) continue;
          SCOPED_TRACE(std::string(to_string(op)) + " " + to_string(cases[c].algo));
          std::vector<float> out(n, -7.0f), out_bias(d.K, -7.0f);
          run(cases[c].algo, op, out, out_bias);
          for (size_t i = 0; i < n; ++i) {
            const double err = std::fabs(double(out[i]) - ref[i]) / scale;
            worst[c][int(op)] = std::max(worst[c][int(op)], err);
            ASSERT_LE(err, cases[c].tolerance) << i << ": " << out[i] << " vs " << ref[i];
          }
          if (op == ops::ConvOp::backward_weight)
            for (uint32_t k = 0; k < d.K; ++k)
              ASSERT_NEAR(out_bias[k], ref_bias[k], 1e-5 * (1 + std::fabs(ref_bias[k]))) << "dbias " << k;
        }
      }
    }
  for (int c = 0; c < 3; ++c) {
    std::printf("[ measured ] %s worst error / (1 + max |ref|):", to_string(cases[c].algo));
    for (int op = 0; op < 3; ++op)
      if (worst[c][op] >= 0) std::printf(" %s %.2e", to_string(ops::ConvOp(op)), worst[c][op]);
    std::printf("\n");
  }
}

TEST(ConvCpu, AlgorithmsThatDoNotApplyAreClearErrors) {
  ConvDesc d;
  d.C = 3, d.K = 4, d.H = d.W = 8, d.R = d.S = 5, d.pad_h = d.pad_w = 2;
  std::vector<float> buf(4096);
  d.algo = ops::ConvAlgo::winograd_4x4;
  const std::string msg = test::error_of([&] {
    ops::call<ops::Conv2dForward>(DeviceKind::cpu, d, Activation::None, f32(buf), f32(buf), TensorView(), f32(buf));
  });
  EXPECT_NE(msg.find("winograd_4x4"), std::string::npos) << msg;
  EXPECT_NE(msg.find("3x3 kernel"), std::string::npos) << msg;
  d.R = d.S = 3, d.pad_h = d.pad_w = 3;
  EXPECT_NE(test::error_of([&] {
              ops::call<ops::Conv2dBackwardData>(DeviceKind::cpu, d, Activation::None, f32(buf), f32(buf),
                                                 TensorView(), f32(buf));
            }).find("padding of at most 2"),
            std::string::npos);
  d.algo = ops::ConvAlgo::implicit_gemm;  // a GPU algorithm
  const std::string cpu_msg = test::error_of([&] {
    ops::call<ops::Conv2dBackwardWeight>(DeviceKind::cpu, d, f32(buf), f32(buf), f32(buf), TensorView());
  });
  EXPECT_NE(cpu_msg.find("not available on the cpu backend"), std::string::npos) << cpu_msg;
  EXPECT_NE(cpu_msg.find("im2col_gemm"), std::string::npos) << cpu_msg;
  EXPECT_NE(test::error_of([] { ops::conv_algo_from_string("fft"); }).find("winograd_4x4"), std::string::npos);
  EXPECT_EQ(ops::conv_algo_from_string("winograd_2x2"), ops::ConvAlgo::winograd_2x2);
}

// benchmark measures on CUDA only: on the CPU it runs automatic's algorithm, bit for bit.
TEST(ConvCpu, BenchmarkModeIsAutomaticOnTheCpu) {
  EXPECT_EQ(ops::conv_algo_from_string("benchmark"), ops::ConvAlgo::benchmark);
  EXPECT_STREQ(ops::to_string(ops::ConvAlgo::benchmark), "benchmark");
  ConvDesc d;
  d.N = 2, d.C = 3, d.K = 5, d.H = 9, d.W = 7, d.pad_h = d.pad_w = 1;
  auto x = test::random_floats(d.input_elements(), -1.0f, 1.0f, test::fresh_seed());
  auto w = test::random_floats(d.filter_elements(), -1.0f, 1.0f, test::fresh_seed() + 1);
  std::vector<float> y_auto(d.output_elements()), y_bench(d.output_elements(), -7.0f);
  ops::call<ops::Conv2dForward>(DeviceKind::cpu, d, Activation::ReLU, f32(x), f32(w), TensorView(), f32(y_auto));
  d.algo = ops::ConvAlgo::benchmark;
  ops::call<ops::Conv2dForward>(DeviceKind::cpu, d, Activation::ReLU, f32(x), f32(w), TensorView(), f32(y_bench));
  EXPECT_EQ(y_auto, y_bench);
}

TEST(ConvCpu, BadShapesAreClearErrors) {
  std::vector<float> buf(4096);
  auto forward_error = [&](const ConvDesc& d) {
    return test::error_of([&] {
      ops::call<ops::Conv2dForward>(DeviceKind::cpu, d, Activation::None, f32(buf), f32(buf), TensorView(), f32(buf));
    });
  };
  ConvDesc d;
  d.C = 3, d.K = 4, d.H = d.W = 5;
  d.groups = 2;
  EXPECT_NE(forward_error(d).find("groups"), std::string::npos);
  d.groups = 3;  // depthwise, but K = 4 is not a multiple of 3
  EXPECT_NE(forward_error(d).find("multiple of groups"), std::string::npos);
  d.groups = 1, d.H = 1, d.W = 1;  // a 3x3 kernel on a 1x1 image without padding
  EXPECT_NE(forward_error(d).find("does not fit"), std::string::npos);
  d.H = d.W = 5, d.R = 9;
  EXPECT_NE(forward_error(d).find("kernel 9x3"), std::string::npos);
  d.R = 3, d.stride_h = 0;
  EXPECT_NE(forward_error(d).find("stride"), std::string::npos);
  d.stride_h = 1;
  std::vector<float> small(10);
  EXPECT_NE(test::error_of([&] {
              ops::call<ops::Conv2dForward>(DeviceKind::cpu, d, Activation::None, f32(small), f32(buf), TensorView(),
                                            f32(buf));
            }).find("conv2d_forward: x"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] {
              ops::call<ops::Conv2dBackwardData>(DeviceKind::cpu, d, Activation::SiLU, f32(buf), f32(buf), f32(buf),
                                                 f32(buf));
            }).find("SiLU"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera
