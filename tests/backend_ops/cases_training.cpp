// The training-step ops: Adam (matrix and table parameters, untouched table entries, the
// fp16 copy), SGD, a skipped step, fp32 -> fp16, the loss pass, the step settle, the
// layer-by-layer MLP's fp16 activation passes and unscale, and the strided matrix axpby
// the composite modules are glued with.
#include <algorithm>
#include <cstring>

#include "harness.h"
#include "ops/adam_math.h"
#include "support/half.h"
#include "support/random.h"
#include "tessera/ops/dispatch.h"
#include "tessera/ops/matrix.h"
#include "tessera/ops/mlp.h"
#include "tessera/ops/optimizers.h"

namespace tessera::test {
namespace {

Buffer<ops::TrainState> upload_state(const Backend& b, const ops::TrainState& s) {
  Buffer<ops::TrainState> d(b.device(), 1);
  d.copy_from_host(&s, 1);
  return d;
}

std::vector<double> state_fields(const Buffer<ops::TrainState>& d) {
  ops::TrainState s;
  d.copy_to_host(&s, 1);
  return {s.loss_scale, s.applied_loss_scale, double(s.good_steps), double(s.skipped_steps), double(s.skip_this_step),
          double(s.optimizer_steps), s.last_loss};
}

// Adam, then SGD on the result, then a skipped SGD step (which must change nothing):
// former OptimizersCuda.AdamAndSgdMatchCpu. update_untouched: Adam moves the zero-gradient
// table entries too.
std::vector<double> run_optimizers(Backend& b, uint64_t seed, bool update_untouched) {
  const size_t n = 100003;
  auto g = random_floats(n, -1, 1, seed);
  for (size_t i = n / 2; i < n; i += 3) g[i] = 0.0f;  // untouched table entries
  Buffer<float> dg = upload(b, g), dp = upload(b, random_floats(n, -1, 1, seed + 1));
  Buffer<float> dm = upload(b, random_floats(n, -0.1f, 0.1f, seed + 2));
  Buffer<float> dv = upload(b, random_floats(n, 0.0f, 0.1f, seed + 3));
  Buffer<uint16_t> dh(b.device(), n);
  ops::AdamHyper h{0.01f, 0.9f, 0.99f, 1e-8f, 1e-4f};
  h.non_matrix_learning_rate_factor = 0.5f;
  h.update_untouched = update_untouched;
  ops::TrainState s;
  s.optimizer_steps = 3;
  Buffer<ops::TrainState> ds = upload_state(b, s);
  const TensorView half = b.uses_half_params() ? dh.view() : TensorView();
  ops::call<ops::AdamStep>(b.default_stream(), h, n / 2, dg.view(), dp.view(), half, dm.view(), dv.view(),
                           ops::ParamsAverage{}, ds.view());
  std::vector<double> out;
  append(out, dp.to_host());
  append(out, dm.to_host());
  append(out, dv.to_host());
  ops::call<ops::SgdStep>(b.default_stream(), 0.1f, 1e-3f, dg.view(), dp.view(), half, ds.view());
  append(out, dp.to_host());
  s.skip_this_step = 1;
  ds.copy_from_host(&s, 1);
  ops::call<ops::SgdStep>(b.default_stream(), 0.1f, 0.0f, dg.view(), dp.view(), half, ds.view());
  append(out, dp.to_host());
  return out;
}

// Adam with the parameters' moving average in its pass (Ema's): a step that starts the
// average (keep 0: the NaNs in the fresh buffer must not be read), a step that moves it, and
// a skipped step, which averages only. `offset` starts every array one element into its
// buffer, past the vector accesses' alignment; n is odd, so there is a remainder either way.
std::vector<double> run_adam_average(Backend& b, uint64_t seed, size_t offset) {
  const size_t n = 100003, size = n + offset;
  auto g = random_floats(size, -1, 1, seed);
  for (size_t i = n / 2; i < size; ++i)
    if ((i / 4) % 3 == 0) g[i] = 0.0f;  // untouched table entries, whole groups of four and single ones
  const auto p = random_floats(size, -1, 1, seed + 1);
  std::vector<uint16_t> p_half(size);
  for (size_t i = 0; i < size; ++i) p_half[i] = half_bits(p[i]);
  Buffer<float> dg = upload(b, g), dp = upload(b, p);
  Buffer<float> dm = upload(b, random_floats(size, -0.1f, 0.1f, seed + 2));
  Buffer<float> dv = upload(b, random_floats(size, 0.0f, 0.1f, seed + 3));
  std::vector<float> average(size, NAN);  // (the element before an offset view is never written)
  std::fill_n(average.begin(), offset, 0.0f);
  Buffer<float> da = upload(b, average);
  Buffer<uint16_t> dh(b.device(), size);
  dh.copy_from_host(p_half.data(), size);
  ops::AdamHyper h{0.01f, 0.9f, 0.99f, 1e-8f, 1e-4f};
  h.non_matrix_learning_rate_factor = 0.5f;
  ops::TrainState s;
  s.optimizer_steps = 3;
  Buffer<ops::TrainState> ds = upload_state(b, s);
  const auto at = [&](auto& buffer) { return buffer.view(offset, n); };
  const TensorView half = b.uses_half_params() ? at(dh) : TensorView();
  std::vector<double> out;
  for (const float keep : {0.0f, 0.75f, 0.5f}) {
    if (keep == 0.5f) {
      s.skip_this_step = 1;
      ds.copy_from_host(&s, 1);
    }
    ops::call<ops::AdamStep>(b.default_stream(), h, n / 2 + 1, at(dg), at(dp), half, at(dm), at(dv),
                             ops::ParamsAverage{at(da), keep}, ds.view());
    for (Buffer<float>* buffer : {&dp, &dm, &dv, &da}) append(out, buffer->to_host());
  }
  // The fp16 copy where the backend keeps one (else what it would hold): fp16 of params.
  const std::vector<uint16_t> kept = dh.to_host();
  const std::vector<float> params = dp.to_host();
  for (size_t i = 0; i < size; ++i)
    out.push_back(from_half_bits(b.uses_half_params() ? kept[i] : half_bits(params[i])));
  return out;
}

// Adam with bf16 moments packed in one word per parameter (AdamHyper::bf16_moments): three
// steps over matrix and table parameters, untouched entries, an unaligned remainder and the
// average. The stochastic rounding draws the same bits on every backend, so only an fp32
// difference at a rounding boundary can flip a bf16 step (measured: a few in 3 x 100k).
std::vector<double> run_adam_bf16_moments(Backend& b, uint64_t seed, bool update_untouched) {
  const size_t n = 100003;
  auto g = random_floats(n, -1, 1, seed);
  for (size_t i = n / 2; i < n; i += 3) g[i] = 0.0f;  // untouched table entries
  const auto m = random_floats(n, -0.1f, 0.1f, seed + 2), v = random_floats(n, 0.0f, 0.1f, seed + 3);
  std::vector<uint32_t> words(n);
  for (size_t i = 0; i < n; ++i) words[i] = ops::pack_moments(m[i], v[i], uint32_t(i) * 2654435761u);
  const auto p = random_floats(n, -1, 1, seed + 1);
  std::vector<uint16_t> p_half(n);  // the fp16 copy starts as the parameters' (a sparse step leaves some)
  for (size_t i = 0; i < n; ++i) p_half[i] = half_bits(p[i]);
  Buffer<float> dg = upload(b, g), dp = upload(b, p), da(b.device(), n);
  Buffer<uint32_t> dw(b.device(), n);
  dw.copy_from_host(words.data(), n);
  Buffer<uint16_t> dh(b.device(), n);
  dh.copy_from_host(p_half.data(), n);
  ops::AdamHyper h{0.01f, 0.9f, 0.99f, 1e-15f, 1e-4f};
  h.non_matrix_learning_rate_factor = 0.5f;
  h.update_untouched = update_untouched;
  h.bf16_moments = true;
  const TensorView half = b.uses_half_params() ? dh.view() : TensorView();
  std::vector<double> out;
  for (uint32_t step = 3; step <= 5; ++step) {
    ops::TrainState s;
    s.optimizer_steps = step;
    Buffer<ops::TrainState> ds = upload_state(b, s);
    ops::call<ops::AdamStep>(b.default_stream(), h, n / 2, dg.view(), dp.view(), half, dw.view(), TensorView(),
                             ops::ParamsAverage{da.view(), step == 3 ? 0.0f : 0.9f}, ds.view());
    append(out, dp.to_host());
    append(out, da.to_host());
    for (const uint32_t w : dw.to_host()) {
      float mi, vi;
      ops::unpack_moments(w, mi, vi);
      out.push_back(mi), out.push_back(vi);
    }
  }
  const std::vector<uint16_t> kept = dh.to_host();  // or, without an fp16 copy, what it would hold
  const std::vector<float> params = dp.to_host();
  for (size_t i = 0; i < n; ++i) out.push_back(from_half_bits(b.uses_half_params() ? kept[i] : half_bits(params[i])));
  return out;
}

std::vector<double> run_convert(Backend& b, uint64_t seed) {
  auto v = random_floats(70001, -70000.0f, 70000.0f, seed);  // past fp16's range too (inf)
  auto small = random_floats(1000, -1e-6f, 1e-6f, seed + 1);  // subnormals
  v.insert(v.end(), small.begin(), small.end());
  Buffer<float> src = upload(b, v);
  Buffer<uint16_t> dst(b.device(), v.size());
  ops::call<ops::ConvertToHalf>(b.default_stream(), src.view(), dst.view());
  std::vector<double> out;
  append(out, dst.to_host());  // the bits: must agree exactly
  return out;
}

// The data-parallel bf16 exchange: packing (the bits must agree: round to nearest even,
// fp32's range kept, tiny gradients not flushed, inf and an overflow non-finite; NaN is
// left out: the GPU writes the canonical 0x7fff, the reference keeps the payload's top),
// then unpacking a sum over 3 ranks into the average.
std::vector<double> run_bf16_exchange(Backend& b, uint64_t seed) {
  auto g = random_floats(50001, -3.0f, 3.0f, seed);
  const auto tiny = random_floats(1000, -1e-30f, 1e-30f, seed + 1);  // under fp16's range
  g.insert(g.end(), tiny.begin(), tiny.end());
  g.push_back(INFINITY), g.push_back(-3.3e38f), g.push_back(3.4e38f);  // the last rounds to inf
  Buffer<float> dg = upload(b, g);
  Buffer<uint16_t> packed(b.device(), g.size());
  const TensorView bits = packed.view().as(DType::bf16);
  ops::call<ops::GradientBf16Exchange>(b.default_stream(), dg.view(), bits, true, 1u);
  std::vector<double> out;
  for (uint16_t v : packed.to_host()) out.push_back(double(v));
  ops::call<ops::GradientBf16Exchange>(b.default_stream(), dg.view(), bits, false, 3u);
  append(out, dg.to_host());
  return out;
}

std::vector<double> run_loss(Backend& b, uint64_t seed, LossParams loss) {
  const size_t n = 50001;
  Buffer<float> y = upload(b, random_floats(n, -2, 2, seed)), t = upload(b, random_floats(n, -2, 2, seed + 1));
  Buffer<float> dy(b.device(), n);
  Buffer<float> partials(b.device(), ops::call<ops::LossPartialsNeeded>(b.default_stream(), n));
  Buffer<ops::TrainState> ds = upload_state(b, ops::TrainState{});
  ops::call<ops::LossForwardBackward>(b.default_stream(), loss, y.view(), t.view(), 1.0f / float(n), dy.view(),
                                      partials.view(), ds.view());
  std::vector<double> out;
  append(out, dy.to_host());
  ops::TrainState s;
  ds.copy_to_host(&s, 1);
  out.push_back(s.last_loss);
  return out;
}

// A clean step, then one with a NaN and one with an inf gradient: skip flags, counts and
// loss scale.
std::vector<double> run_settle(Backend& b, uint64_t seed) {
  auto g = random_floats(20011, -1, 1, seed);
  Buffer<float> dg = upload(b, g);
  ops::TrainState s;
  s.good_steps = ops::kLossScaleGrowthInterval - 1;  // the clean step doubles the scale
  Buffer<ops::TrainState> ds = upload_state(b, s);
  std::vector<double> out;
  ops::call<ops::SettleStep>(b.default_stream(), dg.view(), ds.view());
  append(out, state_fields(ds));
  g[12345] = NAN;
  dg.copy_from_host(g);
  ops::call<ops::SettleStep>(b.default_stream(), dg.view(), ds.view());
  append(out, state_fields(ds));
  g[12345] = 0.0f;
  g[20010] = INFINITY;
  dg.copy_from_host(g);
  ops::call<ops::SettleStep>(b.default_stream(), dg.view(), ds.view());
  append(out, state_fields(ds));
  return out;
}

// dst = alpha src + beta dst on column slices of wider matrices; beta = 0 over NaN.
std::vector<double> run_axpby(Backend& b, uint64_t seed, float alpha, float beta, bool with_src) {
  const size_t rows = 1537;
  const uint32_t cols = 37, src_stride = 41, dst_stride = 50;
  Buffer<float> src = upload(b, random_floats(rows * src_stride, -1, 1, seed));
  auto d = random_floats(rows * dst_stride, -1, 1, seed + 1);
  if (beta == 0.0f)
    for (size_t r = 0; r < rows; ++r)
      for (uint32_t c = 3; c < 3 + cols; ++c) d[r * dst_stride + c] = NAN;
  Buffer<float> dst = upload(b, d);
  // Column slices: views at element offsets 2 and 3 of their allocations.
  const TensorView src_view = TensorView::matrix(src.data(), DType::f32, rows, cols, src_stride, 2);
  ops::call<ops::MatrixAxpby>(b.default_stream(), alpha, with_src ? src_view : TensorView(), beta,
                              TensorView::matrix(dst.data(), DType::f32, rows, cols, dst_stride, 3));
  std::vector<double> out;
  append(out, dst.to_host());  // the columns outside the slice must be untouched as well
  return out;
}

// dz = g * act'(y) for each activation whose derivative follows from its output, and in
// place (dz aliasing g, as Conv2d's backward runs it).
std::vector<double> run_activation_backward(Backend& b, uint64_t seed, Activation act) {
  const size_t n = 30011;
  auto y = random_floats(n, -1.5f, 1.5f, seed);
  if (act == Activation::Sigmoid || act == Activation::Softplus || act == Activation::Exponential)
    for (float& v : y) v = std::abs(v);  // outputs these activations can produce
  Buffer<float> dy = upload(b, y), g = upload(b, random_floats(n, -1, 1, seed + 1)), dz(b.device(), n);
  ops::call<ops::ActivationBackward>(b.default_stream(), act, dy.view(), g.view(), dz.view());
  std::vector<double> out;
  append(out, dz.to_host());
  ops::call<ops::ActivationBackward>(b.default_stream(), act, dy.view(), g.view(), g.view());
  append(out, g.to_host());
  return out;
}

// The layer-by-layer MLP's fp16 passes: forward (fp16 and fp32 outputs), backward with
// and without the loss scale, and the unscale into fresh or accumulated gradients.
std::vector<double> run_activation_half(Backend& b, uint64_t seed, Activation act) {
  const size_t n = 30011;
  Buffer<float> z = upload(b, random_floats(n, -3, 3, seed)), dy = upload(b, random_floats(n, -1, 1, seed + 1));
  Buffer<uint16_t> y16(b.device(), n), dz16(b.device(), n);
  Buffer<float> y32(b.device(), n);
  ops::TrainState state;
  state.loss_scale = 64.0f;
  Buffer<ops::TrainState> ds = upload_state(b, state);
  Stream& s = b.default_stream();
  std::vector<double> out;
  const auto append_half = [&](const Buffer<uint16_t>& h) {
    for (uint16_t bits : h.to_host()) out.push_back(from_half_bits(bits));
  };
  ops::call<ops::ActivationForwardHalf>(s, act, z.view(), y16.view(), y32.view());
  append_half(y16);
  append(out, y32.to_host());
  for (bool scaled : {false, true}) {
    ops::call<ops::ActivationBackwardHalf>(s, act, z.view(), dy.view(), dz16.view(), ds.view(), scaled);
    append_half(dz16);
  }
  return out;
}

std::vector<double> run_unscale(Backend& b, uint64_t seed) {
  const size_t n = 50021;
  Buffer<float> scaled = upload(b, random_floats(n, -100, 100, seed)), dst = upload(b, random_floats(n, -1, 1, seed + 1));
  ops::TrainState state;
  state.loss_scale = 256.0f;
  Buffer<ops::TrainState> ds = upload_state(b, state);
  std::vector<double> out;
  ops::call<ops::Unscale>(b.default_stream(), scaled.view(), dst.view(), true, ds.view());
  append(out, dst.to_host());
  ops::call<ops::Unscale>(b.default_stream(), scaled.view(), dst.view(), false, ds.view());
  append(out, dst.to_host());
  return out;
}

const RegisterOpCases training_cases([](std::vector<OpCase>& cases) {
  for (const bool untouched : {false, true})
    cases.push_back({"adam_sgd", untouched ? "100003_half_tables_update_untouched" : "100003_half_tables", 1e-6,
                     has_op<ops::AdamStep>(),
                     [untouched](Backend& b, uint64_t seed) { return run_optimizers(b, seed, untouched); }});
  for (const size_t offset : {size_t(0), size_t(1)})
    cases.push_back({"adam_average", offset ? "100003_unaligned" : "100003", 4e-6, has_op<ops::AdamStep>(),
                     [offset](Backend& b, uint64_t seed) { return run_adam_average(b, seed, offset); }});
  for (const bool untouched : {false, true})
    cases.push_back({"adam_bf16_moments", untouched ? "100003_update_untouched" : "100003", 1e-4,
                     has_op<ops::AdamStep>(),
                     [untouched](Backend& b, uint64_t seed) { return run_adam_bf16_moments(b, seed, untouched); }});
  cases.push_back({"convert_to_half", "range_and_subnormals", 1e-12, has_op<ops::ConvertToHalf>(), run_convert});
  cases.push_back({"gradient_bf16_exchange", "range_tiny_inf", 1e-12, has_op<ops::GradientBf16Exchange>(),
                   run_bf16_exchange});
  const std::pair<const char*, LossParams> losses[] = {{"L2", {LossKind::L2, 0.1f}},
                                                       {"L1", {LossKind::L1, 0.1f}},
                                                       {"Huber", {LossKind::Huber, 0.3f}},
                                                       {"RelativeL2", {LossKind::RelativeL2, 0.1f}}};
  for (const auto& [name, loss] : losses)
    cases.push_back({"loss_forward_backward", name, 1e-5, has_op<ops::LossForwardBackward>(),
                     [loss = loss](Backend& b, uint64_t seed) { return run_loss(b, seed, loss); }});
  cases.push_back({"settle_step", "clean_nan_inf", 1e-12, has_op<ops::SettleStep>(), run_settle});
  cases.push_back({"matrix_axpby", "copy", 1e-12, has_op<ops::MatrixAxpby>(),
                   [](Backend& b, uint64_t s) { return run_axpby(b, s, 1.0f, 0.0f, true); }});
  cases.push_back({"matrix_axpby", "accumulate", 1e-6, has_op<ops::MatrixAxpby>(),
                   [](Backend& b, uint64_t s) { return run_axpby(b, s, 0.5f, 1.0f, true); }});
  for (Activation act : {Activation::None, Activation::ReLU, Activation::LeakyReLU, Activation::Sigmoid,
                         Activation::Tanh, Activation::Softplus, Activation::Exponential})
    cases.push_back({"activation_backward", to_string(act), 1e-6, has_op<ops::ActivationBackward>(),
                     [act](Backend& b, uint64_t s) { return run_activation_backward(b, s, act); }});
  // fp16 outputs: one rounding after the device's fast intrinsics (measured <= 7.7e-6 on
  // the H200).
  for (Activation act : {Activation::None, Activation::ReLU, Activation::LeakyReLU, Activation::Sigmoid,
                         Activation::Tanh, Activation::Softplus, Activation::Exponential, Activation::SiLU,
                         Activation::Sine})
    cases.push_back({"activation_half", to_string(act), 1e-4,
                     [](const Backend& b) {
                       return b.supports<ops::ActivationForwardHalf>() && b.supports<ops::ActivationBackwardHalf>();
                     },
                     [act](Backend& b, uint64_t s) { return run_activation_half(b, s, act); }});
  cases.push_back({"unscale", "accumulate_then_overwrite", 1e-7, has_op<ops::Unscale>(), run_unscale});
  cases.push_back({"matrix_axpby", "zero", 1e-12, has_op<ops::MatrixAxpby>(),
                   [](Backend& b, uint64_t s) { return run_axpby(b, s, 0.0f, 0.0f, false); }});
});

}  // namespace
}  // namespace tessera::test
