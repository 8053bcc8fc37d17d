// Grid encodings (every case of the former GridCudaVsCpu suite) on fresh random points,
// every 7th moved onto a cell face of some level, and tiny tables full of hash collisions.
// Both backends get the same fp16-rounded table (the CPU reads the fp32 copy, CUDA the
// fp16 bits), so forward differences are float rounding only; parameter gradients differ
// by the order of the atomic additions.
#include <algorithm>
#include <cmath>
#include <utility>

#include "harness.h"
#include "support/half.h"
#include "support/random.h"
#include "tessera/ops/dispatch.h"
#include "tessera/ops/encodings.h"

namespace tessera::test {
namespace {

// Measured on an H100 (2026-11-22): forward 1.7e-6, parameter grads 1.6e-6, input grads
// 8.5e-7.
constexpr double kForwardTol = 1e-5, kGradTol = 1e-5, kInputGradTol = 1e-4;
// fp16 output: each value rounded once, a few a unit apart where the fp32 sums differ in
// their last bits (measured <= 1.1e-5 on the H200).
constexpr double kForwardHalfTol = 1e-4;

struct GridCase {
  const char* name;
  uint32_t dims, levels, features, log2_size;
  float base, scale;
  bool hashed;
  ops::GridInterpolation interp;
  // Points in runs along random rays (a NeRF batch: a ray's samples are consecutive rows and
  // share their cell at the coarse levels), where the CUDA scatter merges equal cells.
  bool ray_runs = false;
};

// Runs of 1-16 points a 1/600 step apart along random directions from random origins.
std::vector<float> points_in_runs(size_t batch, uint32_t dims, uint64_t seed) {
  const auto u = random_floats(batch * (2 * dims + 1), 0, 1, seed);
  std::vector<float> x(batch * dims);
  size_t i = 0, k = 0;
  while (i < batch) {
    const size_t run = std::min(batch - i, size_t(1 + u[k++] * 15.999f));
    float o[4], dir[4], norm = 0;
    for (uint32_t d = 0; d < dims; ++d) {
      o[d] = 0.1f + 0.8f * u[k++];
      dir[d] = u[k++] - 0.5f;
      norm += dir[d] * dir[d];
    }
    for (size_t j = 0; j < run; ++j, ++i)
      for (uint32_t d = 0; d < dims; ++d)
        x[i * dims + d] = std::clamp(o[d] + float(j) / 600.0f * dir[d] / std::sqrt(norm + 1e-12f), 0.0f, 1.0f);
  }
  return x;
}

enum class Output {
  forward,
  forward_half,
  param_grads,
  input_grads,
  second_params,
  second_params_with_first,
  second_dout,
  second_inputs
};
// The second backward (GridEncodeBackwardBackward): the same sums in another arrangement,
// fp32 both sides; measured <= 3.4e-6 on the H200 (2026-11-25).
constexpr double kSecondTol = 2e-5;

std::vector<double> run_grid(Backend& b, const GridCase& c, Output what, uint64_t seed) {
  const auto g = ops::make_grid_layout(c.dims, c.levels, c.features, c.log2_size, c.base, c.scale, c.hashed, c.interp);
  const size_t batch = 4099, n = size_t(g.n_params());
  const uint32_t out_w = g.output_width();
  auto x = c.ray_runs ? points_in_runs(batch, c.dims, seed) : random_floats(batch * c.dims, 0, 1, seed);
  for (size_t i = 0; i < batch; i += 7) {
    const uint32_t l = uint32_t(i / 7) % c.levels, d = uint32_t(i / 7) % c.dims;
    const float p = std::floor(x[i * c.dims + d] * g.scale[l]) + 0.5f;
    x[i * c.dims + d] = std::min(1.0f, p / g.scale[l]);
  }
  auto table = random_floats(n, -1, 1, seed + 1);
  std::vector<uint16_t> table_half(n);
  for (size_t k = 0; k < n; ++k) {
    table_half[k] = half_bits(table[k]);
    table[k] = from_half_bits(table_half[k]);
  }
  Buffer<float> d_table = upload(b, table), d_x = upload(b, x);
  Buffer<uint16_t> d_half = upload(b, table_half);
  Stream& s = b.default_stream();
  std::vector<double> out;
  if (what == Output::forward) {
    Buffer<float> y(b.device(), batch * out_w);
    detail::fill_bytes(b.device(), y.data(), 0xff, y.bytes());  // NaN poison: unwritten outputs fail
    ops::call<ops::GridEncode>(s, g, d_table.view(), d_half.view(), d_x.matrix(batch, c.dims), y.matrix(batch, out_w));
    append(out, y.to_host());
    return out;
  }
  if (what == Output::forward_half) {  // for a consumer that reads fp16: the values, rounded
    Buffer<uint16_t> y(b.device(), batch * out_w);
    detail::fill_bytes(b.device(), y.data(), 0xff, y.bytes());  // NaN poison
    ops::call<ops::GridEncodeHalf>(s, g, d_table.view(), d_half.view(), d_x.matrix(batch, c.dims),
                                   y.matrix(batch, out_w));
    for (uint16_t h : y.to_host()) out.push_back(from_half_bits(h));
    return out;
  }
  Buffer<float> dout = upload(b, random_floats(batch * out_w, -1, 1, seed + 2));
  Buffer<float> dparams(b.device(), n), dx(b.device(), batch * c.dims);
  dparams.zero();
  detail::fill_bytes(b.device(), dx.data(), 0xff, dx.bytes());
  if (what == Output::second_params || what == Output::second_params_with_first || what == Output::second_dout ||
      what == Output::second_inputs) {
    const bool params = what == Output::second_params || what == Output::second_params_with_first;
    Buffer<float> ddin = upload(b, random_floats(batch * c.dims, -1, 1, seed + 3));
    // A first backward's upstream gradient, scattered in the same pass.
    Buffer<float> first = upload(b, random_floats(batch * out_w, -1, 1, seed + 4));
    Buffer<float> ddout(b.device(), batch * out_w);
    detail::fill_bytes(b.device(), ddout.data(), 0xff, ddout.bytes());  // NaN poison
    ops::call<ops::GridEncodeBackwardBackward>(
        s, g, d_table.view(), d_half.view(), d_x.matrix(batch, c.dims), dout.matrix(batch, out_w),
        ddin.matrix(batch, c.dims), what == Output::second_dout ? ddout.matrix(batch, out_w) : TensorView(),
        params ? dparams.view() : TensorView(), what == Output::second_inputs ? dx.matrix(batch, c.dims) : TensorView(),
        what == Output::second_params_with_first ? first.matrix(batch, out_w) : TensorView());
    append(out, params ? dparams.to_host()
                : what == Output::second_dout ? ddout.to_host()
                                              : dx.to_host());
    return out;
  }
  ops::call<ops::GridEncodeBackward>(s, g, d_table.view(), d_half.view(), d_x.matrix(batch, c.dims),
                                     dout.matrix(batch, out_w), dparams.view(),
                                     what == Output::input_grads ? dx.matrix(batch, c.dims) : TensorView());
  append(out, what == Output::param_grads ? dparams.to_host() : dx.to_host());
  return out;
}

const RegisterOpCases grid_cases([](std::vector<OpCase>& cases) {
  const GridCase list[] = {
      {"Hash2D_config_hash", 2, 16, 2, 15, 16, 1.5f, true, ops::GridInterpolation::Linear},
      {"Hash3D_tiny_table_collisions", 3, 8, 2, 14, 16, 2.0f, true, ops::GridInterpolation::Linear},
      {"Hash1D_F1", 1, 12, 1, 14, 4, 2.0f, true, ops::GridInterpolation::Linear},
      {"Hash3D_F4_smoothstep", 3, 6, 4, 14, 8, 2.0f, true, ops::GridInterpolation::Smoothstep},
      {"Hash4D_F8", 4, 4, 8, 14, 4, 2.0f, true, ops::GridInterpolation::Linear},
      {"Dense3D_F2", 3, 3, 2, 14, 8, 2.0f, false, ops::GridInterpolation::Linear},
      {"Hash3D_nerf_ray_runs", 3, 16, 2, 14, 16, 1.3819f, true, ops::GridInterpolation::Linear, true}};
  for (const GridCase& c : list) {
    cases.push_back({"grid_encode", c.name, kForwardTol, has_op<ops::GridEncode>(),
                     [c](Backend& b, uint64_t seed) { return run_grid(b, c, Output::forward, seed); }});
    cases.push_back({"grid_encode_half", c.name, kForwardHalfTol, has_op<ops::GridEncodeHalf>(),
                     [c](Backend& b, uint64_t seed) { return run_grid(b, c, Output::forward_half, seed); }});
    cases.push_back({"grid_encode_backward", std::string(c.name) + "_params", kGradTol, has_op<ops::GridEncodeBackward>(),
                     [c](Backend& b, uint64_t seed) { return run_grid(b, c, Output::param_grads, seed); }});
    cases.push_back({"grid_encode_backward", std::string(c.name) + "_inputs", kInputGradTol,
                     has_op<ops::GridEncodeBackward>(),
                     [c](Backend& b, uint64_t seed) { return run_grid(b, c, Output::input_grads, seed); }});
    const std::pair<const char*, Output> second[] = {
        {"_params", Output::second_params},
        {"_params_with_first", Output::second_params_with_first},
        {"_dout", Output::second_dout},
        {"_inputs", Output::second_inputs}};
    for (const auto& [suffix, output] : second) {
      const Output what = output;  // (C++20 lambdas cannot capture a structured binding in clang 15)
      cases.push_back({"grid_encode_backward_backward", std::string(c.name) + suffix, kSecondTol,
                       has_op<ops::GridEncodeBackwardBackward>(),
                       [c, what](Backend& b, uint64_t seed) { return run_grid(b, c, what, seed); }});
    }
  }
});

}  // namespace
}  // namespace tessera::test
