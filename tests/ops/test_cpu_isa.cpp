// The AVX2 + FMA copies of the CPU kernels' hot loops (ops/cpu/cpu_isa.h) against the
// baseline copies, on fresh random data: MLP forward and backward, hash-grid encode and
// backward, Adam. They differ only by rounding (FMA contraction, vector order).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include "support/random.h"
#include "tessera/ops/encodings.h"
#include "tessera/ops/optimizers.h"
#include "ops/cpu/cpu_isa.h"
#include "ops/cpu/cpu_kernels.h"

namespace tessera {
namespace {

using ops::cpu::CpuIsa;

struct Output {
  const char* name;
  std::vector<float> values;
  // Of the output's largest magnitude. Measured over 30 seeds: MLP <= 5.6e-7, Adam <= 8e-8
  // (fused multiply-adds rounding once); the grid <= 6.1e-6: x * scale + 0.5 fused, the
  // cell fraction moves by an ulp of the fine levels' positions (~60 here).
  double tolerance;
};

// Every output of the hot kernels.
std::vector<Output> hot_kernel_outputs(uint64_t seed) {
  std::vector<Output> all;
  double tolerance = 2e-6;
  const auto append = [&](const char* name, const std::vector<float>& v) { all.push_back({name, v, tolerance}); };
  {  // MLP, a batch that is not a whole number of row tiles
    const MlpShape s{19, 64, 3, 2};
    // Tanh, not ReLU: rounding that flips a pre-activation near 0 would flip its derivative.
    const ops::MlpActivations acts{Activation::Tanh, Activation::None};
    const size_t batch = 37;
    const auto params = test::random_floats(s.n_params(), -0.2f, 0.2f, seed);
    const auto x = test::random_floats(batch * s.input_width, -1, 1, seed + 1);
    const auto dy = test::random_floats(batch * s.output_width, -1, 1, seed + 2);
    std::vector<float> y(batch * s.output_width), dparams(s.n_params()), dx(x.size());
    ops::cpu::MlpTape<float> tape;
    ops::cpu::mlp_forward<float>(s, acts, params.data(), x.data(), batch, y.data(), &tape);
    ops::cpu::mlp_backward<float>(s, acts, params.data(), x.data(), batch, tape, dy.data(), dparams.data(),
                                  ops::GradientMode::overwrite, dx.data());
    append("mlp y", y), append("mlp dparams", dparams), append("mlp dx", dx);
  }
  {  // hash grid, 3-D (the compile-time dimension path)
    tolerance = 2e-5;
    const auto g = ops::make_grid_layout(3, 6, 2, 14, 4.0f, 1.7f, true, ops::GridInterpolation::Linear);
    const size_t batch = 300, n = size_t(g.n_params()), w = g.output_width();
    const auto params = test::random_floats(n, -1, 1, seed + 3);
    const auto x = test::random_floats(batch * 3, 0, 1, seed + 4);
    const auto dout = test::random_floats(batch * w, -1, 1, seed + 5);
    std::vector<float> out(batch * w), dparams(n, 0.0f), dx(batch * 3);
    ops::cpu::grid_encode<float>(g, params.data(), x.data(), 3, batch, out.data(), uint32_t(w));
    ops::cpu::grid_encode_backward<float>(g, params.data(), x.data(), 3, batch, dout.data(), uint32_t(w),
                                          dparams.data(), dx.data(), 3);
    append("grid out", out), append("grid dparams", dparams), append("grid dx", dx);
  }
  tolerance = 2e-6;
  {  // Adam over more elements than one chunk, matrix and non-matrix parts
    const ops::AdamHyper h{0.01f, 0.9f, 0.99f, 1e-8f, 1e-3f};
    const size_t n = 10000, n_matrix = 6000;
    const auto g = test::random_floats(n, -1, 1, seed + 6);
    auto p = test::random_floats(n, -1, 1, seed + 7);
    auto m = test::random_floats(n, -0.1f, 0.1f, seed + 8), v = test::random_floats(n, 0.0f, 0.1f, seed + 9);
    ops::TrainState state;
    state.optimizer_steps = 3;
    ops::cpu::adam_step(h, n, n_matrix, g.data(), p.data(), m.data(), v.data(), nullptr, 0.0f, state);
    append("adam params", p), append("adam m", m), append("adam v", v);
  }
  return all;
}

TEST(CpuIsa, Avx2FmaCopiesMatchTheBaseline) {
  if (ops::cpu::best_cpu_isa() != CpuIsa::avx2_fma) GTEST_SKIP() << "this CPU has no AVX2 + FMA";
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  struct RestoreIsa {
    CpuIsa isa = ops::cpu::cpu_isa();
    ~RestoreIsa() { ops::cpu::set_cpu_isa(isa); }
  } restore;
  ops::cpu::set_cpu_isa(CpuIsa::baseline);
  const std::vector<Output> baseline = hot_kernel_outputs(seed);
  ops::cpu::set_cpu_isa(CpuIsa::avx2_fma);
  const std::vector<Output> avx2 = hot_kernel_outputs(seed);
  ASSERT_EQ(baseline.size(), avx2.size());
  size_t n_differing = 0;
  for (size_t k = 0; k < baseline.size(); ++k) {
    const std::vector<float>&a = baseline[k].values, &b = avx2[k].values;
    ASSERT_EQ(a.size(), b.size());
    // Against the output's largest magnitude: sums with cancellation (gradients over a
    // batch) leave small entries whose relative rounding error says nothing; a wrong lane
    // or a skipped tail is off by a whole value.
    double largest = 0, worst = 0;
    for (size_t i = 0; i < a.size(); ++i) largest = std::max({largest, std::abs(double(a[i])), std::abs(double(b[i]))});
    for (size_t i = 0; i < a.size(); ++i) {
      worst = std::max(worst, std::abs(double(a[i]) - b[i]) / largest);
      n_differing += a[i] != b[i];
    }
    std::printf("%-12s worst difference %.3g of its largest magnitude %.3g\n", baseline[k].name, worst, largest);
    EXPECT_GT(largest, 0.0) << baseline[k].name;
    EXPECT_LT(worst, baseline[k].tolerance) << baseline[k].name;
  }
  // Fused multiply-adds round differently (gcc and clang both fuse here): outputs equal to
  // the last bit everywhere would mean the AVX2 copy never ran.
  EXPECT_GT(n_differing, 0u);
}

TEST(CpuIsa, ACopyTheCpuLacksIsRefusedOrRuns) {
  if (ops::cpu::best_cpu_isa() == CpuIsa::avx2_fma) {
    const CpuIsa before = ops::cpu::cpu_isa();
    ops::cpu::set_cpu_isa(CpuIsa::avx2_fma);
    EXPECT_EQ(ops::cpu::cpu_isa(), CpuIsa::avx2_fma);
    ops::cpu::set_cpu_isa(before);
  } else {
    EXPECT_THROW(ops::cpu::set_cpu_isa(CpuIsa::avx2_fma), Error);
  }
}

TEST(CpuIsa, AnUnknownSettingIsAClearError) {
  const char* old = std::getenv("TESSERA_CPU_ISA");
  const std::string saved = old ? old : "";
  setenv("TESSERA_CPU_ISA", "avx512", 1);
  try {
    ops::cpu::check_cpu_isa_setting();
    ADD_FAILURE() << "TESSERA_CPU_ISA=avx512 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("TESSERA_CPU_ISA=avx512: not a choice"), std::string::npos) << e.what();
  }
  setenv("TESSERA_CPU_ISA", "baseline", 1);
  EXPECT_NO_THROW(ops::cpu::check_cpu_isa_setting());
  if (old) setenv("TESSERA_CPU_ISA", saved.c_str(), 1);
  else unsetenv("TESSERA_CPU_ISA");
}

}  // namespace
}  // namespace tessera
