#include <gtest/gtest.h>

#include <cmath>

#include "support/random.h"
#include "tessera/ops/optimizers.h"
#include "ops/adam_math.h"
#include "ops/step_math.h"
#include "ops/cpu/cpu_kernels.h"

namespace tessera {
namespace {

TEST(AdamCpu, MatchesTextbookUpdateAndSkipsFlaggedSteps) {
  ops::AdamHyper h{0.01f, 0.9f, 0.99f, 1e-8f, 1e-3f};
  const size_t n = 37;
  auto g = test::random_floats(n, -1, 1, 3);
  auto p = test::random_floats(n, -1, 1, 4);
  std::vector<float> m(n, 0.0f), v(n, 0.0f), p0 = p;
  ops::TrainState s;
  s.optimizer_steps = 1;
  ops::cpu::adam_step(h, n, n, g.data(), p.data(), m.data(), v.data(), nullptr, 0.0f, s);
  for (size_t i = 0; i < n; ++i) {
    const double gi = g[i] + 1e-3 * p0[i];
    const double mh = (0.1 * gi) / 0.1, vh = (0.01 * gi * gi) / 0.01;
    ASSERT_NEAR(p[i], p0[i] - 0.01 * mh / (std::sqrt(vh) + 1e-8), 1e-6);
  }
  auto before = p;
  s.skip_this_step = 1;
  ops::cpu::adam_step(h, n, n, g.data(), p.data(), m.data(), v.data(), nullptr, 0.0f, s);
  EXPECT_EQ(p, before);
}

TEST(AdamCpu, NonMatrixParamsFollowTinyCudaNn) {
  // Past n_matrix: no L2 term, their own learning-rate factor, zero gradients leave the
  // parameter and its moments alone.
  ops::AdamHyper h{0.01f, 0.9f, 0.99f, 1e-8f, 0.5f};
  h.non_matrix_learning_rate_factor = 3.0f;
  const size_t n = 6, n_matrix = 2;
  std::vector<float> g = {0.5f, -0.25f, 0.5f, 0.0f, -0.25f, 0.0f}, p = {1, 1, 1, 1, 1, 1};
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  ops::TrainState s;
  s.optimizer_steps = 1;
  ops::cpu::adam_step(h, n, n_matrix, g.data(), p.data(), m.data(), v.data(), nullptr, 0.0f, s);
  // step 1 with bias correction: p -= lr * sign(g_eff)
  EXPECT_NEAR(p[0], 1.0f - 0.01f, 1e-6);   // matrix: g + 0.5 * p = 1.0 > 0
  EXPECT_NEAR(p[1], 1.0f - 0.01f, 1e-6);   // matrix: -0.25 + 0.5 = 0.25 > 0
  EXPECT_NEAR(p[2], 1.0f - 0.03f, 1e-6);   // non-matrix: lr x 3, no L2
  EXPECT_NEAR(p[4], 1.0f + 0.03f, 1e-6);
  EXPECT_EQ(p[3], 1.0f);
  EXPECT_EQ(m[3], 0.0f);
  EXPECT_EQ(v[5], 0.0f);
}

// update_untouched (PyTorch's Adam): a zero-gradient table entry is moved by its moments,
// while the default leaves it alone; tables take no L2 term either way.
TEST(AdamCpu, UpdateUntouchedMovesZeroGradientTableEntries) {
  ops::AdamHyper h{0.01f, 0.9f, 0.99f, 1e-8f, 0.0f};
  h.update_untouched = true;
  std::vector<float> g = {0.0f, 0.0f}, p = {1.0f, 1.0f}, m = {0.1f, 0.0f}, v = {0.01f, 0.0f};
  ops::TrainState s;
  s.optimizer_steps = 2;
  ops::cpu::adam_step(h, 2, 0, g.data(), p.data(), m.data(), v.data(), nullptr, 0.0f, s);
  const double m1 = 0.9 * 0.1, v1 = 0.99 * 0.01;
  const double m_hat = m1 / (1 - 0.81), v_hat = v1 / (1 - 0.9801);
  EXPECT_NEAR(p[0], 1.0 - 0.01 * m_hat / (std::sqrt(v_hat) + 1e-8), 1e-6);
  EXPECT_NEAR(m[0], m1, 1e-7);
  EXPECT_EQ(p[1], 1.0f);  // no moment, no L2: nothing moves it
  // No L2 on tables: with l2_reg an untouched entry without moments stays put (PyTorch's
  // weight decay would make that a full lr step towards 0); a matrix entry takes it.
  h.l2_reg = 1e-6f;
  h.epsilon = 1e-15f;  // instant-ngp's
  p = {2.0f, -2.0f}, m = {0.0f, 0.0f}, v = {0.0f, 0.0f};
  s.optimizer_steps = 1;
  ops::cpu::adam_step(h, 2, 1, g.data(), p.data(), m.data(), v.data(), nullptr, 0.0f, s);
  EXPECT_NEAR(p[0], 2.0 - 0.01, 1e-5);  // matrix: g = 2e-6, step 1 is lr x sign
  EXPECT_EQ(p[1], -2.0f);
  h.update_untouched = false;  // tiny-cuda-nn: untouched entries keep everything
  const auto before = p;
  ops::cpu::adam_step(h, 2, 0, g.data(), p.data(), m.data(), v.data(), nullptr, 0.0f, s);
  EXPECT_EQ(p, before);
}

// tiny-cuda-nn's Adam extras. Decays: p' = (1 - relative * lr_t) p - sign(p) absolute lr_t
// with lr_t = lr sqrt(1 - beta2^t) / (1 - beta1^t); a zero gradient (m = v = 0) leaves only
// the decay. AdaBound: the per-unit step lr / bias1 / (sqrt(v_hat) + eps) clamped to
// [0.1 - 0.1 / ((1 - beta2) t + 1), 0.1 + 0.1 / ((1 - beta2) t)].
TEST(AdamCpu, DecaysAndAdaBoundFollowTinyCudaNn) {
  ops::AdamHyper h{0.01f, 0.9f, 0.99f, 1e-8f, 0.0f};
  h.relative_decay = 0.5f;
  h.absolute_decay = 0.25f;
  std::vector<float> g = {0.0f, 0.0f}, p = {2.0f, -2.0f}, m(2, 0.0f), v(2, 0.0f);
  ops::TrainState s;
  s.optimizer_steps = 3;
  ops::cpu::adam_step(h, 2, 2, g.data(), p.data(), m.data(), v.data(), nullptr, 0.0f, s);
  const double lr_t = 0.01 * std::sqrt(1 - std::pow(0.99, 3)) / (1 - std::pow(0.9, 3));
  EXPECT_NEAR(p[0], (1 - 0.5 * lr_t) * 2.0 - 0.25 * lr_t, 1e-6);
  EXPECT_NEAR(p[1], (1 - 0.5 * lr_t) * -2.0 + 0.25 * lr_t, 1e-6);

  ops::AdamHyper b{1e-6f, 0.9f, 0.999f, 1e-8f, 0.0f};
  b.adabound = true;
  std::vector<float> gb = {1.0f}, pb = {0.0f}, mb(1, 0.0f), vb(1, 0.0f);
  s.optimizer_steps = 1;
  ops::cpu::adam_step(b, 1, 1, gb.data(), pb.data(), mb.data(), vb.data(), nullptr, 0.0f, s);
  // unclamped step 1e-6 / 0.1 = 1e-5 is under the lower bound at t = 1
  const double lower = 0.1 - 0.1 / (0.001 * 1 + 1);
  EXPECT_NEAR(pb[0], -lower * 0.1, 2e-8);  // the bound 0.1 - 0.1 / 1.001 cancels in fp32: 1e-4 relative
  b.adabound = false;
  pb = {0.0f}, mb = {0.0f}, vb = {0.0f};
  ops::cpu::adam_step(b, 1, 1, gb.data(), pb.data(), mb.data(), vb.data(), nullptr, 0.0f, s);
  EXPECT_NEAR(pb[0], -1e-6, 1e-9);
}

// bf16 moments: a value bf16 holds packs exactly whatever the random bits; others round to
// one of their two bf16 neighbours, up with the probability of the bits dropped (mean over
// 2^16 draws: the value itself); inf and NaN keep their class.
TEST(AdamCpu, Bf16MomentsRoundStochasticallyWithoutBias) {
  for (const uint32_t r : {0u, 1u, 0x8000u, 0xffffu}) {
    float m, v;
    ops::unpack_moments(ops::pack_moments(-0.375f, 0x1p-70f, r | r << 16), m, v);
    EXPECT_EQ(m, -0.375f);
    EXPECT_EQ(v, 0x1p-70f);
  }
  for (const float x : {0.3f, -1.2345e-7f, 7.77e12f}) {
    const float down = ops::bits_float(ops::float_bits(x) & 0xffff0000u);
    const float up = ops::bits_float((ops::float_bits(x) & 0xffff0000u) + 0x10000u);
    double sum = 0;
    for (uint32_t r = 0; r < 0x10000u; ++r) {
      const float y = ops::bits_float(ops::bf16_stochastic(x, r) << 16);
      ASSERT_TRUE(y == down || y == up) << x;
      sum += y;
    }
    EXPECT_NEAR(sum / 0x10000, x, std::abs(x) * 1e-6) << x;
  }
  EXPECT_TRUE(std::isinf(ops::bits_float(ops::bf16_stochastic(INFINITY, 0xffffu) << 16)));
  EXPECT_TRUE(std::isnan(ops::bits_float(ops::bf16_stochastic(NAN, 0u) << 16)));
}

// Untouched table entries (update_untouched) decay their moments by beta1 / beta2 a step.
// Rounded to nearest, bf16 v would decay by 0.984-0.996 a step depending on where it sits;
// stochastically the mean over many entries follows 0.99^t. Each entry random-walks around
// it by ~3% after 200 steps (the worst of 20000 measured 15%).
TEST(AdamCpu, Bf16MomentsDecayAsFp32OnesDo) {
  ops::AdamHyper h{0.01f, 0.9f, 0.99f, 1e-15f, 0.0f};
  h.update_untouched = true;
  h.bf16_moments = true;
  const size_t n = 20000;
  std::vector<float> g(n, 0.0f), p(n, 0.0f);
  std::vector<uint32_t> moments(n, ops::pack_moments(0.3125f, 0.5f, 0));  // both bf16 values
  ops::TrainState s;
  for (uint32_t t = 1; t <= 200; ++t) {
    s.optimizer_steps = t;
    ops::cpu::adam_step_bf16_moments(h, n, 0, g.data(), p.data(), moments.data(), nullptr, 0.0f, s);
    if (t == 40 || t == 200) {
      double m_sum = 0, v_sum = 0, v_worst = 0, v_square = 0;
      const double m_want = 0.3125 * std::pow(0.9, t), v_want = 0.5 * std::pow(0.99, t);
      for (const uint32_t w : moments) {
        float m, v;
        ops::unpack_moments(w, m, v);
        m_sum += m, v_sum += v;
        v_worst = std::max(v_worst, std::abs(v / v_want - 1));
        v_square += (v / v_want - 1) * (v / v_want - 1);
      }
      EXPECT_NEAR(m_sum / n / m_want, 1.0, 2e-3) << "step " << t;
      EXPECT_NEAR(v_sum / n / v_want, 1.0, 2e-3) << "step " << t;
      EXPECT_LT(std::sqrt(v_square / n), 0.05) << "step " << t;
      EXPECT_LT(v_worst, 0.25) << "step " << t;
    }
  }
}

// On a noisy quadratic, Adam with bf16 moments tracks fp32 Adam: after 500 steps the
// parameters differ by a small part of how far they moved.
TEST(AdamCpu, Bf16MomentsFollowFp32Adam) {
  ops::AdamHyper h{0.01f, 0.9f, 0.99f, 1e-15f, 0.0f};
  h.update_untouched = true;
  ops::AdamHyper packed = h;
  packed.bf16_moments = true;
  const size_t n = 4000;
  const auto target = test::random_floats(n, -1, 1, 11);
  std::vector<float> a(n, 0.0f), b(n, 0.0f), m(n, 0.0f), v(n, 0.0f), ga(n), gb(n);
  std::vector<uint32_t> moments(n, 0u);
  ops::TrainState s;
  for (uint32_t t = 1; t <= 500; ++t) {
    const auto noise = test::random_floats(n, -0.5f, 0.5f, 100 + t);
    for (size_t i = 0; i < n; ++i) {
      const bool touched = (i + t) % 3 != 0;  // a third of the entries sit each step out
      ga[i] = touched ? 2 * (a[i] - target[i]) + noise[i] : 0.0f;
      gb[i] = touched ? 2 * (b[i] - target[i]) + noise[i] : 0.0f;
    }
    s.optimizer_steps = t;
    ops::cpu::adam_step(h, n, n / 4, ga.data(), a.data(), m.data(), v.data(), nullptr, 0.0f, s);
    ops::cpu::adam_step_bf16_moments(packed, n, n / 4, gb.data(), b.data(), moments.data(), nullptr, 0.0f, s);
  }
  double moved = 0, differ = 0, error_a = 0, error_b = 0;
  for (size_t i = 0; i < n; ++i) {
    moved += std::abs(a[i]), differ += std::abs(a[i] - b[i]);
    error_a += std::abs(a[i] - target[i]), error_b += std::abs(b[i] - target[i]);
  }
  EXPECT_LT(differ / moved, 0.01);
  EXPECT_NEAR(error_b / error_a, 1.0, 0.02);
}

TEST(TrainState, LossScaleHalvesOnOverflowAndGrows) {
  ops::TrainState s;
  const float start = s.loss_scale;
  ops::finish_step(s, false);
  EXPECT_EQ(s.loss_scale, start / 2);
  EXPECT_EQ(s.skipped_steps, 1u);
  EXPECT_EQ(s.skip_this_step, 1u);
  EXPECT_EQ(s.optimizer_steps, 0u);
  for (uint32_t i = 0; i < ops::kLossScaleGrowthInterval; ++i) ops::finish_step(s, true);
  EXPECT_EQ(s.loss_scale, start);
  EXPECT_EQ(s.optimizer_steps, ops::kLossScaleGrowthInterval);
  EXPECT_EQ(s.skip_this_step, 0u);
}

}  // namespace
}  // namespace tessera
