// CPU encodings against central finite differences in double precision: parameter
// gradients (grids) and input gradients (every encoding). L = sum(out * R) with random R.
#include <gtest/gtest.h>

#include <cmath>

#include "support/random.h"
#include "tessera/ops/encodings.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/encoding_math.h"

namespace tessera {
namespace {

using ops::GridInterpolation;

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

struct GridCase {
  uint32_t dims, levels, features, log2_size;
  float base, scale;
  bool hashed;
  GridInterpolation interp;
};

class GridGradientCheck : public ::testing::TestWithParam<GridCase> {};

// Linear interpolation has kinks at cell faces: central differences across one are
// meaningless, so input-gradient checks skip samples within 2 eps of a face.
bool near_cell_face(const ops::GridLayout& g, const double* x, double eps) {
  for (uint32_t l = 0; l < g.n_levels; ++l)
    for (uint32_t d = 0; d < g.n_dims; ++d) {
      const double p = x[d] * g.scale[l] + 0.5, f = p - std::floor(p);
      if (f < 2 * eps * g.scale[l] || f > 1 - 2 * eps * g.scale[l]) return true;
    }
  return false;
}

TEST_P(GridGradientCheck, MatchesFiniteDifferences) {
  const GridCase c = GetParam();
  const auto g = ops::make_grid_layout(c.dims, c.levels, c.features, c.log2_size, c.base, c.scale, c.hashed, c.interp);
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const size_t batch = 24, n = size_t(g.n_params()), out_w = g.output_width();
  auto params = to_double(test::random_floats(n, -1, 1, seed));
  auto x = to_double(test::random_floats(batch * c.dims, 0, 1, seed + 1));
  auto r = to_double(test::random_floats(batch * out_w, -1, 1, seed + 2));
  auto loss = [&](const std::vector<double>& p, const std::vector<double>& xs) {
    std::vector<double> out(batch * out_w);
    ops::cpu::grid_encode<double>(g, p.data(), xs.data(), c.dims, batch, out.data(), out_w);
    return dot(out, r);
  };
  std::vector<double> dparams(n, 0.0), dx(batch * c.dims, 0.0);
  ops::cpu::grid_encode_backward<double>(g, params.data(), x.data(), c.dims, batch, r.data(), out_w, dparams.data(),
                                         dx.data(), c.dims);
  // The loss is linear in the parameters: differences are exact up to rounding. Check a
  // sample of entries, always including every touched one of the coarsest level.
  const double eps = 1e-3;
  for (size_t k = 0; k < n; k += (k < g.size[0] * c.features ? 1 : 97)) {
    auto p = params;
    p[k] += eps;
    const double up = loss(p, x);
    p[k] -= 2 * eps;
    const double fd = (up - loss(p, x)) / (2 * eps);
    ASSERT_NEAR(dparams[k], fd, 1e-8 + 1e-8 * std::abs(fd)) << "parameter " << k;
  }
  const double h = 1e-7;
  int checked = 0;
  for (size_t i = 0; i < batch; ++i) {
    if (c.interp == GridInterpolation::Linear && near_cell_face(g, &x[i * c.dims], h)) continue;
    ++checked;
    for (uint32_t d = 0; d < c.dims; ++d) {
      auto xp = x;
      xp[i * c.dims + d] += h;
      const double up = loss(params, xp);
      xp[i * c.dims + d] -= 2 * h;
      const double fd = (up - loss(params, xp)) / (2 * h);
      ASSERT_NEAR(dx[i * c.dims + d], fd, 1e-4 * (1 + std::abs(fd))) << "sample " << i << " dim " << d;
    }
  }
  EXPECT_GT(checked, int(batch / 2));
}

INSTANTIATE_TEST_SUITE_P(
    Grids, GridGradientCheck,
    ::testing::Values(GridCase{1, 4, 2, 14, 4, 2.0f, true, GridInterpolation::Linear},
                      GridCase{2, 8, 2, 14, 16, 1.5f, true, GridInterpolation::Linear},
                      GridCase{2, 6, 4, 14, 8, 2.0f, true, GridInterpolation::Smoothstep},
                      GridCase{3, 6, 2, 14, 16, 2.0f, true, GridInterpolation::Linear},  // collisions
                      GridCase{3, 3, 1, 14, 4, 2.0f, false, GridInterpolation::Smoothstep},
                      GridCase{4, 3, 8, 14, 4, 1.5f, true, GridInterpolation::Linear}),
    [](const auto& info) {
      const GridCase& c = info.param;
      return std::string(c.hashed ? "Hash" : "Dense") + std::to_string(c.dims) + "D_L" + std::to_string(c.levels) +
             "_F" + std::to_string(c.features) +
             (c.interp == GridInterpolation::Smoothstep ? "_Smoothstep" : "_Linear");
    });

TEST(GridLayout, DenseLevelsAreStoredDenselyAndFineLevelsHashed) {
  // tiny-cuda-nn's config_hash.json grid in 2-D: 16 levels, base 16, scale 1.5, T = 2^15.
  const auto g = ops::make_grid_layout(2, 16, 2, 15, 16.0f, 1.5f, true, GridInterpolation::Linear);
  EXPECT_EQ(g.resolution[0], 16u);
  EXPECT_EQ(g.size[0], 256u);
  EXPECT_TRUE(g.dense[0]);
  // 1.5^7 * 16 - 1 = 272.4 -> 274 vertices per axis, 75076 > 2^15: hashed
  EXPECT_EQ(g.resolution[7], 274u);
  EXPECT_FALSE(g.dense[7]);
  EXPECT_EQ(g.size[7], 32768u);
  for (uint32_t l = 0; l < 16; ++l) EXPECT_EQ(g.size[l] % 8, 0u);
  EXPECT_EQ(g.offset[16], g.offset[15] + g.size[15]);
}

struct ElementwiseCase {
  const char* name;
  ops::ElementwiseEncoding e;
};

class ElementwiseGradientCheck : public ::testing::TestWithParam<ElementwiseCase> {};

// Random inputs in [0, 1], moved at least `margin` away from the points where the encoding
// is not smooth enough for central differences of step h << margin: TriangleWave's kinks
// (multiples of 2^-order) and OneBlob's jumps in the third derivative (multiples of
// 1/n_bins, where a bin's quartic leaves its support). A CI run met an input 4e-7 from one.
std::vector<double> smooth_inputs(const ops::ElementwiseEncoding& e, size_t n, uint64_t seed, double margin) {
  auto x = to_double(test::random_floats(n, 0, 1, seed));
  double spacing = 0;
  if (e.kind == ops::ElementwiseKind::TriangleWave) spacing = std::ldexp(1.0, -int(e.order));
  if (e.kind == ops::ElementwiseKind::OneBlob) spacing = 1.0 / e.order;
  if (spacing == 0) return x;
  for (double& v : x) {
    const double nearest = spacing * std::round(v / spacing);
    if (std::abs(v - nearest) < margin) v = nearest + (v >= nearest ? margin : -margin);
  }
  return x;
}

TEST_P(ElementwiseGradientCheck, InputGradientsMatchFiniteDifferences) {
  const ops::ElementwiseEncoding e = GetParam().e;
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const size_t batch = 32;
  const uint32_t in_w = e.n_dims, out_w = e.output_width();
  auto x = smooth_inputs(e, batch * in_w, seed, 1e-4);
  auto r = to_double(test::random_floats(batch * out_w, -1, 1, seed + 1));
  auto loss = [&](const std::vector<double>& xs) {
    std::vector<double> out(batch * out_w);
    ops::cpu::elementwise_encode<double>(e, xs.data(), in_w, batch, out.data(), out_w);
    return dot(out, r);
  };
  std::vector<double> dx(batch * in_w, 0.0);
  ops::cpu::elementwise_encode_backward<double>(e, x.data(), in_w, batch, r.data(), out_w, dx.data(), in_w);
  const double h = 1e-6;
  for (size_t k = 0; k < x.size(); ++k) {
    auto xp = x;
    xp[k] += h;
    const double up = loss(xp);
    xp[k] -= 2 * h;
    const double fd = (up - loss(xp)) / (2 * h);
    ASSERT_NEAR(dx[k], fd, 1e-5 * (1 + std::abs(fd))) << "input " << k;
  }
}

// S = sum(v * dL/dx) with dL/dx = J^T r (the first backward): its gradients with respect
// to the input and r, from elementwise_encode_backward_backward, against central differences.
TEST_P(ElementwiseGradientCheck, SecondDerivativesMatchFiniteDifferences) {
  const ops::ElementwiseEncoding e = GetParam().e;
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const size_t batch = 32;
  const uint32_t in_w = e.n_dims, out_w = e.output_width();
  const auto x = smooth_inputs(e, batch * in_w, seed, 1e-4);
  const auto r = to_double(test::random_floats(batch * out_w, -1, 1, seed + 1));
  const auto v = to_double(test::random_floats(batch * in_w, -1, 1, seed + 2));
  auto second_loss = [&](const std::vector<double>& xs, const std::vector<double>& rs) {
    std::vector<double> dx(batch * in_w);
    ops::cpu::elementwise_encode_backward<double>(e, xs.data(), in_w, batch, rs.data(), out_w, dx.data(), in_w);
    return dot(dx, v);
  };
  std::vector<double> dx(batch * in_w, 7.0), dr(batch * out_w, 7.0);
  ops::cpu::elementwise_encode_backward_backward<double>(e, x.data(), in_w, batch, r.data(), out_w, v.data(), in_w,
                                                         dr.data(), out_w, dx.data(), in_w);
  // Central differences of S in entry k of `of` (x or r), the other held.
  auto central = [&](const std::vector<double>& of, size_t k) {
    const double h = 1e-6;
    auto p = of;
    p[k] += h;
    const double up = &of == &x ? second_loss(p, r) : second_loss(x, p);
    p[k] -= 2 * h;
    return (up - (&of == &x ? second_loss(p, r) : second_loss(x, p))) / (2 * h);
  };
  for (size_t k = 0; k < x.size(); ++k) {
    const double fd = central(x, k);
    ASSERT_NEAR(dx[k], fd, 1e-5 * (1 + std::abs(fd))) << "input " << k;
  }
  for (size_t k = 0; k < r.size(); ++k) {
    const double fd = central(r, k);
    ASSERT_NEAR(dr[k], fd, 1e-5 * (1 + std::abs(fd))) << "dL/dy " << k;
  }
}

ops::ElementwiseEncoding make(ops::ElementwiseKind k, uint32_t dims, uint32_t order) {
  ops::ElementwiseEncoding e;
  e.kind = k;
  e.n_dims = dims;
  e.order = order;
  if (k == ops::ElementwiseKind::Identity) e.scale = 1.7f, e.offset = -0.3f;
  return e;
}

INSTANTIATE_TEST_SUITE_P(
    Encodings, ElementwiseGradientCheck,
    ::testing::Values(ElementwiseCase{"Identity", make(ops::ElementwiseKind::Identity, 3, 1)},
                      ElementwiseCase{"Frequency", make(ops::ElementwiseKind::Frequency, 3, 6)},
                      ElementwiseCase{"TriangleWave", make(ops::ElementwiseKind::TriangleWave, 2, 4)},
                      ElementwiseCase{"OneBlob", make(ops::ElementwiseKind::OneBlob, 2, 16)},
                      ElementwiseCase{"SH1", make(ops::ElementwiseKind::SphericalHarmonics, 3, 1)},
                      ElementwiseCase{"SH4", make(ops::ElementwiseKind::SphericalHarmonics, 3, 4)},
                      ElementwiseCase{"SH8", make(ops::ElementwiseKind::SphericalHarmonics, 3, 8)}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(SphericalHarmonics, MatchesClosedFormsAndIsOrthonormal) {
  // Closed forms of degrees 0-2 (Condon-Shortley signs, as in tiny-cuda-nn's tables).
  const double in[3] = {0.8, 0.3, 0.6};
  double x = 2 * in[0] - 1, y = 2 * in[1] - 1, z = 2 * in[2] - 1;
  const double n = std::sqrt(x * x + y * y + z * z);
  const double u[3] = {(x / n + 1) / 2, (y / n + 1) / 2, (z / n + 1) / 2};
  x /= n, y /= n, z /= n;
  std::vector<double> sh(64);
  ops::spherical_harmonics<double>(u, 8, [&](uint32_t j, const ops::Dual3<double>& v) { sh[j] = v.v; });
  EXPECT_NEAR(sh[0], 0.28209479177387814, 1e-12);
  EXPECT_NEAR(sh[1], -0.48860251190291987 * y, 1e-12);
  EXPECT_NEAR(sh[2], 0.48860251190291987 * z, 1e-12);
  EXPECT_NEAR(sh[3], -0.48860251190291987 * x, 1e-12);
  EXPECT_NEAR(sh[4], 1.0925484305920792 * x * y, 1e-12);
  EXPECT_NEAR(sh[5], -1.0925484305920792 * y * z, 1e-12);
  EXPECT_NEAR(sh[6], 0.94617469575755997 * z * z - 0.31539156525251999, 1e-12);
  EXPECT_NEAR(sh[7], -1.0925484305920792 * x * z, 1e-12);
  EXPECT_NEAR(sh[8], 0.54627421529603959 * (x * x - y * y), 1e-12);
  // Orthonormality over the sphere (Monte Carlo-free: a fine latitude-longitude rule).
  const int nt = 96, np = 192;
  std::vector<double> gram(64 * 64, 0.0);
  for (int a = 0; a < nt; ++a)
    for (int b = 0; b < np; ++b) {
      const double th = (a + 0.5) * M_PI / nt, ph = (b + 0.5) * 2 * M_PI / np;
      const double w = std::sin(th) * (M_PI / nt) * (2 * M_PI / np);
      const double d[3] = {(std::sin(th) * std::cos(ph) + 1) / 2, (std::sin(th) * std::sin(ph) + 1) / 2,
                           (std::cos(th) + 1) / 2};
      ops::spherical_harmonics<double>(d, 8, [&](uint32_t j, const ops::Dual3<double>& v) { sh[j] = v.v; });
      for (int i = 0; i < 64; ++i)
        for (int j = 0; j < 64; ++j) gram[i * 64 + j] += w * sh[i] * sh[j];
    }
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < 64; ++j) ASSERT_NEAR(gram[i * 64 + j], i == j ? 1.0 : 0.0, 2e-3) << i << "," << j;
}

TEST(OneBlob, BinsHoldTheKernelMass) {
  // Away from the ends of [0, 1] the bins of one input sum to 1.
  const auto e = make(ops::ElementwiseKind::OneBlob, 1, 16);
  const double x = 0.41;
  std::vector<double> out(16);
  ops::cpu::elementwise_encode<double>(e, &x, 1, 1, out.data(), 16);
  double sum = 0;
  for (double v : out) {
    sum += v;
    EXPECT_GE(v, 0.0);
  }
  EXPECT_NEAR(sum, 1.0, 1e-12);
  EXPECT_GT(out[6], out[4]);  // x = 0.41 lies in bin 6
}

}  // namespace
}  // namespace tessera
