// Second derivatives and the eikonal term: the MLP's and the elementwise encodings' backward
// of the input gradient and the eikonal gradient on strided rows. In the
// GPU and OpenCL suites only: under the sanitizers their CPU references added ~140 s to the
// unit suite's determinism sweep (the CPU references have their own double-precision checks).
#include "harness.h"
#include "support/half.h"
#include "support/random.h"
#include "tessera/ops/dispatch.h"
#include "tessera/ops/encodings.h"
#include "tessera/ops/mlp.h"

namespace tessera::test {
namespace {

// g: the middle 3 of 5 columns; a row of zeros (no direction: zero gradient).
std::vector<double> run_eikonal(Backend& b, uint64_t seed) {
  const size_t n = 10001;
  auto g = random_floats(n * 5, -2, 2, seed);
  for (int k = 0; k < 5; ++k) g[777 * 5 + k] = 0.0f;
  Buffer<float> dg = upload(b, g), out(b.device(), n * 3);
  ops::call<ops::EikonalGradient>(b.default_stream(), 0.3f, dg.matrix(n, 5).columns(1, 3), out.matrix(n, 3));
  std::vector<double> r;
  append(r, out.to_host());
  return r;
}

// The MLP's second backward; `wide`: the row views are column slices of wider matrices
// and the parameter gradients are added to random ones (GradientMode::accumulate).
std::vector<double> run_mlp_second(Backend& b, uint64_t seed, const MlpShape& s, size_t batch, Activation act,
                                   bool wide) {
  // Weights and inputs are fp16 values (CUDA's operands), so the backends differ only in
  // how they round what they compute.
  auto fp16_values = [](std::vector<float> v) {
    for (float& e : v) e = from_half_bits(half_bits(e));
    return v;
  };
  auto params = fp16_values(random_floats(s.n_params(), -0.3f, 0.3f, seed));
  for (uint32_t l = 0; l < s.n_layers(); ++l)  // the padding is zero in real networks
    for (uint32_t o = 0; o < s.layer_out(l); ++o)
      for (uint32_t i = 0; i < s.layer_in(l); ++i)
        if (o >= s.layer_out_logical(l) || i >= s.layer_in_logical(l))
          params[s.layer_offset(l) + size_t(o) * s.layer_in(l) + i] = 0.0f;
  const size_t in = s.input_width, out = s.output_width, pad = wide ? 3 : 0;
  Buffer<float> p = upload(b, params), x = upload(b, fp16_values(random_floats(batch * (in + pad), -1, 1, seed + 1))),
                dy = upload(b, random_floats(batch * (out + pad), -1, 1, seed + 2)),
                v = upload(b, random_floats(batch * (in + pad), -1, 1, seed + 3)), ddy(b.device(), batch * (out + pad)),
                dx(b.device(), batch * (in + pad)),
                dp = wide ? upload(b, random_floats(s.n_params(), -1, 1, seed + 4)) : Buffer<float>(b.device(), s.n_params());
  auto rows = [&](Buffer<float>& m, size_t w) { return m.matrix(batch, w + pad).columns(pad, w); };
  ops::call<ops::MlpBackwardBackward>(b.default_stream(), s, ops::MlpActivations{act, Activation::None}, p.view(),
                                      rows(x, in), rows(dy, out), rows(v, in), rows(ddy, out), dp.view(),
                                      rows(dx, in), wide ? ops::GradientMode::accumulate : ops::GradientMode::overwrite);
  std::vector<double> r;
  // Only the views' columns: the columns around them are never written.
  auto append_rows = [&](Buffer<float>& m, size_t w) {
    const auto h = m.to_host();
    for (size_t i = 0; i < batch; ++i)
      for (size_t c = 0; c < w; ++c) r.push_back(h[i * (w + pad) + pad + c]);
  };
  append_rows(ddy, out);
  append_rows(dx, in);
  append(r, dp.to_host());
  return r;
}

std::vector<double> run_elementwise_second(Backend& b, uint64_t seed, ops::ElementwiseKind kind, uint32_t order) {
  ops::ElementwiseEncoding e;
  e.kind = kind;
  e.n_dims = 3;
  e.order = order;
  const size_t batch = 1000;
  const uint32_t w = e.output_width();
  Buffer<float> x = upload(b, random_floats(batch * 3, 0, 1, seed)), dy = upload(b, random_floats(batch * w, -1, 1, seed + 1)),
                v = upload(b, random_floats(batch * 3, -1, 1, seed + 2)), ddy(b.device(), batch * w),
                dx(b.device(), batch * 3);
  ops::call<ops::ElementwiseEncodeBackwardBackward>(b.default_stream(), e, x.matrix(batch, 3), dy.matrix(batch, w),
                                                    v.matrix(batch, 3), ddy.matrix(batch, w), dx.matrix(batch, 3));
  std::vector<double> r;
  append(r, ddy.to_host());
  append(r, dx.to_host());
  return r;
}

RegisterOpCases cases([](std::vector<OpCase>& cases) {
  cases.push_back({"eikonal_gradient", "strided_3d_and_a_zero_row", 1e-6, has_op<ops::EikonalGradient>(), run_eikonal});
  // fp16 operands on CUDA (as the fused MLP's): tolerances 3x the largest error measured on
  // an H100. Smooth activations, as in cases_fused_mlp.cpp: a ReLU's fp16 pre-activation near
  // 0 switches the unit (the Python module tests cover ReLU with their own tolerance).
  for (Activation act : {Activation::Tanh, Activation::Softplus, Activation::SiLU, Activation::Sigmoid})
    cases.push_back({"mlp_backward_backward", std::string("5_32x2_3_") + to_string(act), 1e-2,
                     has_op<ops::MlpBackwardBackward>(), [act](Backend& b, uint64_t s) {
                       return run_mlp_second(b, s, MlpShape{5, 32, 2, 3}, 256, act, false);
                     }});
  // fit sdf's network (a 32-wide grid encoding in, one output), a batch that is not a
  // multiple of 16, strided rows, accumulated parameter gradients.
  cases.push_back({"mlp_backward_backward", "32_64x2_1_Softplus_strided_accumulate", 1e-2,
                   has_op<ops::MlpBackwardBackward>(), [](Backend& b, uint64_t s) {
                     return run_mlp_second(b, s, MlpShape{32, 64, 2, 1}, 1001, Activation::Softplus, true);
                   }});
  cases.push_back({"mlp_backward_backward", "16_128x3_20_Tanh", 1e-2, has_op<ops::MlpBackwardBackward>(),
                   [](Backend& b, uint64_t s) {
                     return run_mlp_second(b, s, MlpShape{16, 128, 3, 20}, 333, Activation::Tanh, false);
                   }});
  cases.push_back({"elementwise_encode_backward_backward", "frequency_6", 1e-4,
                   has_op<ops::ElementwiseEncodeBackwardBackward>(), [](Backend& b, uint64_t s) {
                     return run_elementwise_second(b, s, ops::ElementwiseKind::Frequency, 6);
                   }});
  cases.push_back({"elementwise_encode_backward_backward", "spherical_harmonics_4", 1e-4,
                   has_op<ops::ElementwiseEncodeBackwardBackward>(), [](Backend& b, uint64_t s) {
                     return run_elementwise_second(b, s, ops::ElementwiseKind::SphericalHarmonics, 4);
                   }});
});

}  // namespace
}  // namespace tessera::test
