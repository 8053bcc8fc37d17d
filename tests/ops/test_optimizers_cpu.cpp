#include <gtest/gtest.h>

#include <cmath>

#include "support/random.h"
#include "tessera/ops/optimizers.h"
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
