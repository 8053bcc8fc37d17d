// CPU reference MLP: gradients against central finite differences, in double.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

#include "support/errors.h"
#include "support/half.h"
#include "support/random.h"
#include "tessera/core/backend.h"
#include "tessera/ops/dispatch.h"
#include "tessera/ops/fused_mlp.h"
#include "tessera/ops/mlp.h"
#include "tessera/ops/train_state.h"
#include "ops/cpu/cpu_kernels.h"

namespace tessera {
namespace {

using ops::cpu::MlpTape;

struct GradCase {
  Activation hidden, output;
};

class MlpGradientCheck : public ::testing::TestWithParam<GradCase> {};

// L(params, x) = sum_i w_i * y_i for fixed random w, so dL/dy = w.
double functional(const MlpShape& s, ops::MlpActivations acts, const std::vector<double>& params,
                  const std::vector<double>& x, size_t batch, const std::vector<double>& w) {
  std::vector<double> y(batch * s.output_width);
  ops::cpu::mlp_forward<double>(s, acts, params.data(), x.data(), batch, y.data(), nullptr);
  double sum = 0;
  for (size_t i = 0; i < y.size(); ++i) sum += w[i] * y[i];
  return sum;
}

// Random weights (logical entries; the padding stays zero as in real networks), inputs and
// output weights w. ReLU and LeakyReLU have kinks: a pre-activation within reach of a
// +-eps perturbation makes a central difference meaningless (a fresh seed once put one
// 1e-7 from zero), so such draws are replaced by the next seed; smooth activations never
// need it.
struct Draw {
  std::vector<double> params, x, w;
  MlpTape<double> tape;
  uint64_t seed = 0;
};
Draw kink_free_draw(const MlpShape& s, ops::MlpActivations acts, size_t batch) {
  auto kinked = [](Activation a) { return a == Activation::ReLU || a == Activation::LeakyReLU; };
  Draw d;
  d.seed = test::fresh_seed();
  std::vector<double> y(batch * s.output_width);
  for (int attempt = 0;; ++attempt, d.seed += 7919) {
    d.params.assign(s.n_params(), 0.0);
    // Weights in +-0.3 keep Exponential-of-Exponential outputs small enough that central
    // differences do not lose their digits to cancellation (+-0.6 failed for some seeds).
    auto r = test::random_floats(s.n_params(), -0.3f, 0.3f, d.seed);
    for (uint32_t l = 0; l < s.n_layers(); ++l)
      for (uint32_t o = 0; o < s.layer_out_logical(l); ++o)
        for (uint32_t i = 0; i < s.layer_in_logical(l); ++i) {
          size_t k = s.layer_offset(l) + size_t(o) * s.layer_in(l) + i;
          d.params[k] = r[k];
        }
    auto xf = test::random_floats(batch * s.input_width, -1, 1, d.seed + 1);
    auto wf = test::random_floats(batch * s.output_width, -1, 1, d.seed + 2);
    d.x.assign(xf.begin(), xf.end());
    d.w.assign(wf.begin(), wf.end());
    ops::cpu::mlp_forward<double>(s, acts, d.params.data(), d.x.data(), batch, y.data(), &d.tape);
    double nearest = 1e9;
    for (uint32_t l = 0; l < s.n_layers(); ++l)
      if (kinked(l + 1 == s.n_layers() ? acts.output : acts.hidden))
        for (double z : d.tape.z[l]) nearest = std::min(nearest, std::abs(z));
    if (nearest > 1e-4) return d;
    if (attempt >= 50) throw std::runtime_error("no kink-free draw");
  }
}

TEST_P(MlpGradientCheck, ParamAndInputGradientsMatchFiniteDifferences) {
  const GradCase c = GetParam();
  MlpShape s{3, 16, 2, 5};
  const ops::MlpActivations acts{c.hidden, c.output};
  const size_t batch = 4;
  Draw draw = kink_free_draw(s, acts, batch);
  const std::vector<double>& params = draw.params;
  const std::vector<double>&x = draw.x, &w = draw.w;
  const MlpTape<double>& tape = draw.tape;
  const uint64_t seed = draw.seed;
  std::vector<double> grad(s.n_params(), 7.0);
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::vector<double> dx(x.size());
  ops::cpu::mlp_backward<double>(s, acts, params.data(), x.data(), batch, tape, w.data(), grad.data(),
                                 ops::GradientMode::overwrite, dx.data());
  const double eps = 1e-6;
  for (uint32_t l = 0; l < s.n_layers(); ++l)
    for (uint32_t o = 0; o < s.layer_out(l); ++o)
      for (uint32_t i = 0; i < s.layer_in(l); ++i) {
        const size_t k = s.layer_offset(l) + size_t(o) * s.layer_in(l) + i;
        const bool padding = o >= s.layer_out_logical(l) || i >= s.layer_in_logical(l);
        if (padding) {
          ASSERT_EQ(grad[k], 0.0) << "padding gradient must be exactly zero";
          continue;
        }
        auto p = params;
        p[k] += eps;
        const double up = functional(s, acts, p, x, batch, w);
        p[k] -= 2 * eps;
        const double down = functional(s, acts, p, x, batch, w);
        const double fd = (up - down) / (2 * eps);
        ASSERT_NEAR(grad[k], fd, 1e-6 + 1e-5 * std::abs(fd)) << "layer " << l << " out " << o << " in " << i;
      }
  for (size_t k = 0; k < x.size(); ++k) {
    auto xp = x;
    xp[k] += eps;
    const double up = functional(s, acts, params, xp, batch, w);
    xp[k] -= 2 * eps;
    const double down = functional(s, acts, params, xp, batch, w);
    ASSERT_NEAR(dx[k], (up - down) / (2 * eps), 1e-6 + 1e-5 * std::abs(dx[k])) << "input " << k;
  }
  // accumulate mode adds onto what is there
  std::vector<double> grad2 = grad;
  ops::cpu::mlp_backward<double>(s, acts, params.data(), x.data(), batch, tape, w.data(), grad2.data(),
                                 ops::GradientMode::accumulate, nullptr);
  for (size_t k = 0; k < grad.size(); ++k) ASSERT_NEAR(grad2[k], 2 * grad[k], 1e-12 * (1 + std::abs(grad[k])));
}

// S = sum(v * dL/dx) with dL/dx = J^T w (the first backward), the kind of loss an eikonal
// term is: its gradients with respect to the weights, the input and w, from
// mlp_backward_backward, against central differences of S.
TEST_P(MlpGradientCheck, SecondDerivativesMatchFiniteDifferences) {
  const GradCase c = GetParam();
  MlpShape s{3, 16, 2, 5};
  const ops::MlpActivations acts{c.hidden, c.output};
  const size_t batch = 4;
  Draw d = kink_free_draw(s, acts, batch);
  SCOPED_TRACE(::testing::Message() << "seed " << d.seed);
  const auto vf = test::random_floats(batch * s.input_width, -1, 1, d.seed + 3);
  const std::vector<double> v(vf.begin(), vf.end());
  auto second_loss = [&](const std::vector<double>& params, const std::vector<double>& x, const std::vector<double>& w) {
    MlpTape<double> tape;
    std::vector<double> y(batch * s.output_width), grad(s.n_params()), dx(x.size());
    ops::cpu::mlp_forward<double>(s, acts, params.data(), x.data(), batch, y.data(), &tape);
    ops::cpu::mlp_backward<double>(s, acts, params.data(), x.data(), batch, tape, w.data(), grad.data(),
                                   ops::GradientMode::overwrite, dx.data());
    double sum = 0;
    for (size_t k = 0; k < dx.size(); ++k) sum += v[k] * dx[k];
    return sum;
  };
  std::vector<double> dparams(s.n_params(), 0.0), dx(d.x.size()), dw(d.w.size());
  ops::cpu::mlp_backward_backward<double>(s, acts, d.params.data(), batch, d.x.data(), s.input_width, d.w.data(),
                                          s.output_width, v.data(), s.input_width, dw.data(), s.output_width,
                                          dparams.data(), dx.data(), s.input_width);
  const double eps = 1e-6;
  auto central = [&](auto perturbed) { return (perturbed(eps) - perturbed(-eps)) / (2 * eps); };
  size_t nonzero = 0;
  for (uint32_t l = 0; l < s.n_layers(); ++l)
    for (uint32_t o = 0; o < s.layer_out(l); ++o)
      for (uint32_t i = 0; i < s.layer_in(l); ++i) {
        const size_t k = s.layer_offset(l) + size_t(o) * s.layer_in(l) + i;
        if (o >= s.layer_out_logical(l) || i >= s.layer_in_logical(l)) {
          ASSERT_EQ(dparams[k], 0.0) << "padding gradient must be exactly zero";
          continue;
        }
        const double fd = central([&](double h) {
          auto p = d.params;
          p[k] += h;
          return second_loss(p, d.x, d.w);
        });
        nonzero += fd != 0.0;
        ASSERT_NEAR(dparams[k], fd, 1e-6 + 1e-5 * std::abs(fd)) << "layer " << l << " out " << o << " in " << i;
      }
  // Not all zero: with ReLU only the weights on active paths move S (a draw gave 180 of the
  // 768, under the n_params / 4 this asked before), smooth activations move nearly all.
  EXPECT_GT(nonzero, s.n_params() / 8);
  for (size_t k = 0; k < d.x.size(); ++k) {
    const double fd = central([&](double h) {
      auto x = d.x;
      x[k] += h;
      return second_loss(d.params, x, d.w);
    });
    ASSERT_NEAR(dx[k], fd, 1e-6 + 1e-5 * std::abs(fd)) << "input " << k;
  }
  for (size_t k = 0; k < d.w.size(); ++k) {
    const double fd = central([&](double h) {
      auto w = d.w;
      w[k] += h;
      return second_loss(d.params, d.x, w);
    });
    ASSERT_NEAR(dw[k], fd, 1e-6 + 1e-5 * std::abs(fd)) << "dL/dy " << k;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Activations, MlpGradientCheck,
    ::testing::Values(GradCase{Activation::None, Activation::None}, GradCase{Activation::ReLU, Activation::None},
                      GradCase{Activation::LeakyReLU, Activation::Sigmoid}, GradCase{Activation::Sigmoid, Activation::Sigmoid},
                      GradCase{Activation::Tanh, Activation::Tanh}, GradCase{Activation::Softplus, Activation::Softplus},
                      GradCase{Activation::Exponential, Activation::Exponential}, GradCase{Activation::SiLU, Activation::SiLU},
                      GradCase{Activation::Sine, Activation::Sine}, GradCase{Activation::ReLU, Activation::LeakyReLU}),
    [](const auto& info) {
      return std::string(to_string(info.param.hidden)) + "_" + to_string(info.param.output);
    });

TEST(MlpCpu, FloatForwardMatchesDouble) {
  MlpShape s{7, 32, 3, 3};
  const ops::MlpActivations acts{Activation::Tanh, Activation::None};
  const size_t batch = 33;
  auto pf = test::random_floats(s.n_params(), -0.3f, 0.3f, 11);
  auto xf = test::random_floats(batch * s.input_width, -1, 1, 12);
  std::vector<double> pd(pf.begin(), pf.end()), xd(xf.begin(), xf.end());
  std::vector<float> yf(batch * s.output_width);
  std::vector<double> yd(yf.size());
  ops::cpu::mlp_forward<float>(s, acts, pf.data(), xf.data(), batch, yf.data(), nullptr);
  ops::cpu::mlp_forward<double>(s, acts, pd.data(), xd.data(), batch, yd.data(), nullptr);
  for (size_t i = 0; i < yf.size(); ++i) ASSERT_NEAR(yf[i], yd[i], 1e-5);
}

// The fused MLP ops take output, target and dL/doutput as rows of any stride (a Parallel
// branch's columns), and name the view that is wrong (the CPU registration runs the checks
// every backend's does).
TEST(MlpCpu, FusedOpsTakeStridedOutputRowsAndNameAWrongView) {
  auto& cpu = backend_for(DeviceKind::cpu);
  const MlpShape s{5, 16, 1, 3};
  const ops::MlpActivations acts{Activation::ReLU, Activation::None};
  const size_t batch = 9, wide = 8;
  std::vector<uint16_t> weights(s.n_params());
  const auto w = test::random_floats(s.n_params(), -0.5f, 0.5f, 3);
  for (size_t i = 0; i < w.size(); ++i) weights[i] = test::half_bits(w[i]);
  const auto x = test::random_floats(batch * s.input_width, -1, 1, 4);
  std::vector<float> packed(batch * s.output_width), rows(batch * wide, 5.0f);
  const TensorView wv = TensorView::of(weights.data(), weights.size());
  const TensorView xv = TensorView::of_matrix(x.data(), batch, s.input_width, s.input_width);
  const TensorView columns = TensorView::matrix(rows.data(), DType::f32, batch, s.output_width, wide, 2);
  ops::call<ops::FusedMlpInference>(cpu.default_stream(), s, acts, wv, xv,
                                    TensorView::of_matrix(packed.data(), batch, s.output_width, s.output_width),
                                    ops::FusedMlpOptions{});
  ops::call<ops::FusedMlpInference>(cpu.default_stream(), s, acts, wv, xv, columns, ops::FusedMlpOptions{});
  for (size_t r = 0; r < batch; ++r)
    for (size_t c = 0; c < wide; ++c) {
      const bool written = c >= 2 && c < 2 + s.output_width;
      EXPECT_EQ(rows[r * wide + c], written ? packed[r * s.output_width + c - 2] : 5.0f) << r << ", " << c;
    }

  std::vector<float> grads(s.n_params()), dx(batch * wide);
  ops::TrainState state;
  ops::FusedMlpTrainArgs a;
  a.weights = wv;
  a.input = xv;
  a.dL_doutput = columns;
  a.dL_dparams = TensorView::of(grads.data(), grads.size());
  a.state = TensorView::of(&state, 1);
  Workspace ws(cpu);
  auto train = [&] { return test::error_of([&] { ops::call<ops::FusedMlpTrain>(cpu.default_stream(), s, acts, a, ws); }); };
  EXPECT_EQ(train(), "");
  a.dL_dinput = TensorView::matrix(dx.data(), DType::f32, batch, s.input_width, wide);
  EXPECT_NE(train().find("dL/dinput must be contiguous rows"), std::string::npos) << train();
  a.dL_dinput = {};
  a.output = TensorView::of_matrix(packed.data(), batch, 2, 2);
  EXPECT_NE(train().find("the output must be an fp32 [9, 3] matrix view"), std::string::npos) << train();
  a.output = {};
  a.target = columns;
  EXPECT_NE(train().find("exactly one of a target"), std::string::npos) << train();
}

}  // namespace
}  // namespace tessera
