// CPU reference MLP: gradients against central finite differences, in double.
#include <gtest/gtest.h>

#include <cmath>

#include "support/random.h"
#include "tessera/ops/mlp.h"
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

TEST_P(MlpGradientCheck, ParamAndInputGradientsMatchFiniteDifferences) {
  const GradCase c = GetParam();
  MlpShape s{3, 16, 2, 5};
  const ops::MlpActivations acts{c.hidden, c.output};
  const size_t batch = 4;
  std::vector<double> params, x, w, y(batch * s.output_width), grad(s.n_params(), 7.0);
  MlpTape<double> tape;
  // ReLU and LeakyReLU have kinks: a pre-activation within reach of a +-eps perturbation
  // makes the central difference meaningless (a fresh seed once put one 1e-7 from zero).
  // Such draws are replaced by the next seed; smooth activations never need it.
  auto kinked = [](Activation a) { return a == Activation::ReLU || a == Activation::LeakyReLU; };
  uint64_t seed = test::fresh_seed();
  for (int attempt = 0;; ++attempt, seed += 7919) {
    params.assign(s.n_params(), 0.0);
    // Weights in +-0.3 keep Exponential-of-Exponential outputs small enough that central
    // differences do not lose their digits to cancellation (+-0.6 failed for some seeds).
    auto r = test::random_floats(s.n_params(), -0.3f, 0.3f, seed);
    // only logical entries are nonzero; padding stays zero as in real networks
    for (uint32_t l = 0; l < s.n_layers(); ++l)
      for (uint32_t o = 0; o < s.layer_out_logical(l); ++o)
        for (uint32_t i = 0; i < s.layer_in_logical(l); ++i) {
          size_t k = s.layer_offset(l) + size_t(o) * s.layer_in(l) + i;
          params[k] = r[k];
        }
    auto xf = test::random_floats(batch * s.input_width, -1, 1, seed + 1);
    auto wf = test::random_floats(batch * s.output_width, -1, 1, seed + 2);
    x.assign(xf.begin(), xf.end());
    w.assign(wf.begin(), wf.end());
    ops::cpu::mlp_forward<double>(s, acts, params.data(), x.data(), batch, y.data(), &tape);
    double nearest = 1e9;
    for (uint32_t l = 0; l < s.n_layers(); ++l)
      if (kinked(l + 1 == s.n_layers() ? acts.output : acts.hidden))
        for (double z : tape.z[l]) nearest = std::min(nearest, std::abs(z));
    if (nearest > 1e-4) break;
    ASSERT_LT(attempt, 50) << "no kink-free draw";
  }
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

}  // namespace
}  // namespace tessera
