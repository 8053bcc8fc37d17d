// The fused MLP ops (inference, the training step with the loss inside or an upstream
// gradient, fp16 input, a grid encoding computed inside the kernel) against the CPU
// reference, which computes in fp32 from the same fp16 weights (and fp16 input or table).
// Each kernel variant (mma, WMMA; weight gradients in the kernel or by GEMM) is a case.
// Smooth activations: a ReLU's fp16 pre-activation flips its derivative near 0, which the
// module tests cover with their own tolerance.
#include <cmath>

#include "harness.h"
#include "support/half.h"
#include "support/random.h"
#include "tessera/core/rng.h"
#include "tessera/ops/dispatch.h"
#include "tessera/ops/encodings.h"
#include "tessera/ops/fused_mlp.h"
#include "tessera/ops/train_state.h"

namespace tessera::test {
namespace {

using ops::GradientMode;
using ops::MlpActivations;
using ops::TrainState;

// Measured on an H200 (2026-11-25, worst of these cases over 11 fresh seeds each) times a
// margin: forward 4.5e-4 -> 3e-3; parameter gradients 5.6e-4 -> 4e-3; input gradients
// 7.6e-4 -> 5e-3; the loss 3.5e-6 -> 3e-5. fp16 activations between the layers are the
// difference.
constexpr double kForwardTol = 3e-3, kParamGradTol = 4e-3, kInputGradTol = 5e-3, kLossTol = 3e-5;

struct MlpCase {
  const char* name;
  uint32_t in, width, hidden, out;
  Activation hidden_act, out_act;
  size_t batch;
  ops::FusedMlpKernel kernel;
  ops::FusedWeightGrads weight_grads = ops::FusedWeightGrads::automatic;
};

constexpr MlpCase kCases[] = {
    {"in32_w64_h2_out16_tanh_mma", 32, 64, 2, 16, Activation::Tanh, Activation::None, 3001, ops::FusedMlpKernel::mma},
    {"in32_w64_h2_out16_tanh_wmma", 32, 64, 2, 16, Activation::Tanh, Activation::None, 3001,
     ops::FusedMlpKernel::wmma},
    {"in5_w16_h1_out3_sigmoid", 5, 16, 1, 3, Activation::Sigmoid, Activation::Sigmoid, 777, ops::FusedMlpKernel::mma},
    {"in37_w32_h3_out7_silu", 37, 32, 3, 7, Activation::SiLU, Activation::None, 1025, ops::FusedMlpKernel::mma},
    {"in16_w128_h2_out32_softplus_gemm_dw", 16, 128, 2, 32, Activation::Softplus, Activation::None, 20000,
     ops::FusedMlpKernel::mma, ops::FusedWeightGrads::gemm},
};

MlpShape shape_of(const MlpCase& c) {
  MlpShape s;
  s.input_width = c.in, s.width = c.width, s.n_hidden_layers = c.hidden, s.output_width = c.out;
  return s;
}

// Xavier-range weights rounded to fp16, zero in the padding.
std::vector<uint16_t> random_weights(const MlpShape& s, uint64_t seed) {
  std::vector<uint16_t> w(s.n_params(), half_bits(0.0f));
  Pcg32 rng(seed);
  for (uint32_t l = 0; l < s.n_layers(); ++l) {
    const float r = std::sqrt(6.0f / float(s.layer_in_logical(l) + s.layer_out_logical(l)));
    for (uint32_t o = 0; o < s.layer_out_logical(l); ++o)
      for (uint32_t i = 0; i < s.layer_in_logical(l); ++i)
        w[s.layer_offset(l) + size_t(o) * s.layer_in(l) + i] = half_bits(rng.uniform(-r, r));
  }
  return w;
}

ops::FusedMlpOptions options_of(const MlpCase& c) {
  ops::FusedMlpOptions o;
  o.kernel = c.kernel;
  o.weight_grads = c.weight_grads;
  return o;
}

enum class Output { inference, params, input, output, loss, accumulate };

// A new trainer's step state (loss scale and counters) on the backend.
Buffer<TrainState> fresh_state(const Backend& b) {
  Buffer<TrainState> state(b.device(), 1);
  const TrainState fresh;
  state.copy_from_host(&fresh, 1);
  return state;
}

// Output-side matrices [batch, out] (output, target, dL/doutput): contiguous, or (strided)
// columns [kStrideOffset, kStrideOffset + out) of rows kStridePad wider, the rest of each row
// a value the kernels must leave alone (a branch of a Parallel module writes so).
constexpr size_t kStrideOffset = 3, kStridePad = 5;
struct OutputRows {
  Buffer<float> buffer;
  size_t batch, cols, stride;
  OutputRows(Backend& b, size_t batch_, size_t cols_, bool strided, std::vector<float> values = {})
      : buffer(b.device(), 0), batch(batch_), cols(cols_), stride(strided ? cols_ + kStridePad : cols_) {
    std::vector<float> host(batch * stride, 7.0f);  // finite: untouched columns compare equal
    for (size_t r = 0; r < batch && !values.empty(); ++r)
      std::copy_n(values.data() + r * cols, cols, host.data() + r * stride + offset());
    buffer = upload(b, host);
  }
  size_t offset() const { return stride == cols ? 0 : kStrideOffset; }
  TensorView view() const {
    return TensorView::matrix(buffer.view().memory, DType::f32, batch, cols, stride, buffer.view().offset + offset());
  }
};

std::vector<double> run_mlp(Backend& b, const MlpCase& c, Output what, bool half_input, uint64_t seed,
                            bool strided = false) {
  const MlpShape s = shape_of(c);
  const Device d = b.device();
  Stream& stream = b.default_stream();
  Buffer<uint16_t> weights = upload(b, random_weights(s, seed));
  auto x = random_floats(c.batch * c.in, -1, 1, seed + 1);
  std::vector<uint16_t> x_half(x.size());
  for (size_t i = 0; i < x.size(); ++i) x_half[i] = half_bits(x[i]);
  Buffer<float> x32 = upload(b, x);
  Buffer<uint16_t> x16 = upload(b, x_half);
  const TensorView input = half_input ? TensorView::matrix(x16.data(), DType::f16, c.batch, c.in, c.in)
                                      : x32.matrix(c.batch, c.in);
  std::vector<double> out;
  if (what == Output::inference && strided) {
    OutputRows y(b, c.batch, c.out, true);
    ops::call<ops::FusedMlpInference>(stream, s, MlpActivations{c.hidden_act, c.out_act}, weights.view(), input,
                                      y.view(), options_of(c));
    append(out, y.buffer.to_host());
    return out;
  }
  if (what == Output::inference) {
    Buffer<float> y(d, c.batch * c.out);
    detail::fill_bytes(d, y.data(), 0xff, y.bytes());  // NaN poison: unwritten outputs fail
    ops::call<ops::FusedMlpInference>(stream, s, MlpActivations{c.hidden_act, c.out_act}, weights.view(), input,
                                      y.matrix(c.batch, c.out), options_of(c));
    append(out, y.to_host());
    return out;
  }
  const OutputRows target(b, c.batch, c.out, strided, random_floats(c.batch * c.out, -1, 1, seed + 2));
  const OutputRows upstream(b, c.batch, c.out, strided, random_floats(c.batch * c.out, -1e-3f, 1e-3f, seed + 3));
  OutputRows y(b, c.batch, c.out, strided);
  Buffer<float> dx(d, c.batch * c.in), grads(d, s.n_params());
  Buffer<TrainState> state = fresh_state(b);
  Workspace ws(b);
  ops::FusedMlpTrainArgs a;
  a.weights = weights.view();
  a.input = input;
  a.dL_dparams = grads.view();
  a.state = state.view();
  a.options = options_of(c);
  if (what == Output::accumulate) {  // an upstream gradient twice: overwrite, then accumulate
    a.dL_doutput = upstream.view();
    ops::call<ops::FusedMlpTrain>(stream, s, MlpActivations{c.hidden_act, c.out_act}, a, ws);
    a.mode = GradientMode::accumulate;
    ops::call<ops::FusedMlpTrain>(stream, s, MlpActivations{c.hidden_act, c.out_act}, a, ws);
    append(out, grads.to_host());
    return out;
  }
  a.target = target.view();
  a.loss = LossParams{LossKind::Huber, 0.1f};
  a.output = y.view();
  if (!half_input) a.dL_dinput = dx.matrix(c.batch, c.in);
  ops::call<ops::FusedMlpTrain>(stream, s, MlpActivations{c.hidden_act, c.out_act}, a, ws);
  switch (what) {
    case Output::params: append(out, grads.to_host()); break;
    case Output::input: append(out, dx.to_host()); break;
    case Output::output: append(out, y.buffer.to_host()); break;
    default: {
      TrainState st;
      state.copy_to_host(&st, 1);
      out = {st.last_loss};
    }
  }
  return out;
}

// The fp16-input cases need the kernel to take fp16 for this shape (the CPU always does).
std::function<bool(const Backend&)> takes_half_input(const MlpCase& c, bool training) {
  return [c, training](const Backend& b) {
    if (!b.supports<ops::FusedMlpTrain>()) return false;
    if (!b.supports<ops::FusedMlpAcceptsHalfInput>()) return b.kind() == DeviceKind::cpu;
    return ops::call<ops::FusedMlpAcceptsHalfInput>(const_cast<Backend&>(b).default_stream(), shape_of(c),
                                                    MlpActivations{c.hidden_act, c.out_act}, c.batch, training,
                                                    options_of(c));
  };
}

// A hash grid (2 features per level, 3 dims) computed inside a width-64 kernel.
const ops::GridLayout& grid_layout() {
  static const ops::GridLayout g =
      ops::make_grid_layout(3, 8, 2, 15, 16.0f, 1.5f, true, ops::GridInterpolation::Linear);
  return g;
}

std::vector<double> run_grid_mlp(Backend& b, Output what, uint64_t seed) {
  const ops::GridLayout& g = grid_layout();
  MlpShape s;
  s.input_width = g.output_width(), s.width = 64, s.n_hidden_layers = 2, s.output_width = 4;
  const MlpActivations acts{Activation::Tanh, Activation::None};
  const Device d = b.device();
  Stream& stream = b.default_stream();
  const size_t batch = 5000, n_table = size_t(g.n_params());
  Buffer<uint16_t> weights = upload(b, random_weights(s, seed));
  const auto t = random_floats(n_table, -1, 1, seed + 1);
  std::vector<uint16_t> table(n_table);
  for (size_t i = 0; i < n_table; ++i) table[i] = half_bits(t[i]);
  Buffer<uint16_t> d_table = upload(b, table);
  Buffer<float> coords = upload(b, random_floats(batch * 3, 0, 1, seed + 2));
  Buffer<float> grid_grads(d, n_table);
  detail::fill_bytes(d, grid_grads.data(), 0, grid_grads.bytes());
  const ops::FusedGridInputViews grid{&g, d_table.view(), grid_grads.view()};
  std::vector<double> out;
  if (what == Output::inference) {
    Buffer<float> y(d, batch * s.output_width);
    detail::fill_bytes(d, y.data(), 0xff, y.bytes());
    ops::call<ops::FusedMlpInferenceGridInput>(stream, s, acts, weights.view(), grid, coords.matrix(batch, 3),
                                               y.matrix(batch, s.output_width), ops::FusedMlpOptions{});
    append(out, y.to_host());
    return out;
  }
  Buffer<float> target = upload(b, random_floats(batch * s.output_width, -1, 1, seed + 3));
  Buffer<float> grads(d, s.n_params());
  Buffer<TrainState> state = fresh_state(b);
  Workspace ws(b);
  ops::FusedMlpTrainArgs a;
  a.weights = weights.view();
  a.input = coords.matrix(batch, 3);
  a.target = target.matrix(batch, s.output_width);
  a.loss = LossParams{LossKind::L2, 0.1f};
  a.dL_dparams = grads.view();
  a.state = state.view();
  a.grid = grid;
  ops::call<ops::FusedMlpTrain>(stream, s, acts, a, ws);
  append(out, what == Output::params ? grads.to_host() : grid_grads.to_host());
  return out;
}

std::function<bool(const Backend&)> takes_grid_input(bool training) {
  return [training](const Backend& b) {
    if (!b.supports<ops::FusedMlpTrain>()) return false;
    if (!b.supports<ops::FusedMlpAcceptsGridInput>()) return b.kind() == DeviceKind::cpu;
    MlpShape s;
    s.input_width = grid_layout().output_width(), s.width = 64, s.n_hidden_layers = 2, s.output_width = 4;
    return ops::call<ops::FusedMlpAcceptsGridInput>(const_cast<Backend&>(b).default_stream(), s,
                                                    MlpActivations{Activation::Tanh, Activation::None}, grid_layout(),
                                                    size_t(5000), training, ops::FusedMlpOptions{});
  };
}

const RegisterOpCases registered([](std::vector<OpCase>& cases) {
  for (const MlpCase& c : kCases) {
    const auto run = [c](Output what, bool half, bool strided = false) {
      return [c, what, half, strided](Backend& b, uint64_t seed) { return run_mlp(b, c, what, half, seed, strided); };
    };
    const std::string n = c.name;
    cases.push_back({"fused_mlp_inference", n, kForwardTol, has_op<ops::FusedMlpInference>(),
                     run(Output::inference, false)});
    cases.push_back({"fused_mlp_train", n + "_params", kParamGradTol, has_op<ops::FusedMlpTrain>(),
                     run(Output::params, false)});
    cases.push_back({"fused_mlp_train", n + "_input", kInputGradTol, has_op<ops::FusedMlpTrain>(),
                     run(Output::input, false)});
    cases.push_back({"fused_mlp_train", n + "_output", kForwardTol, has_op<ops::FusedMlpTrain>(),
                     run(Output::output, false)});
    cases.push_back({"fused_mlp_train", n + "_loss", kLossTol, has_op<ops::FusedMlpTrain>(), run(Output::loss, false)});
    cases.push_back({"fused_mlp_train", n + "_accumulate", kParamGradTol, has_op<ops::FusedMlpTrain>(),
                     run(Output::accumulate, false)});
    // Output, target and dL/doutput as columns of wider rows (the other columns untouched).
    cases.push_back({"fused_mlp_inference", n + "_strided", kForwardTol, has_op<ops::FusedMlpInference>(),
                     run(Output::inference, false, true)});
    cases.push_back({"fused_mlp_train", n + "_strided_output", kForwardTol, has_op<ops::FusedMlpTrain>(),
                     run(Output::output, false, true)});
    cases.push_back({"fused_mlp_train", n + "_strided_params", kParamGradTol, has_op<ops::FusedMlpTrain>(),
                     run(Output::params, false, true)});
    cases.push_back({"fused_mlp_train", n + "_strided_accumulate", kParamGradTol, has_op<ops::FusedMlpTrain>(),
                     run(Output::accumulate, false, true)});
    if (c.in % 8 == 0 && c.kernel != ops::FusedMlpKernel::wmma) {  // fp16 input: the mma kernel's
      cases.push_back({"fused_mlp_inference", n + "_half_input", kForwardTol, takes_half_input(c, false),
                       run(Output::inference, true)});
      cases.push_back({"fused_mlp_train", n + "_half_input_params", kParamGradTol, takes_half_input(c, true),
                       run(Output::params, true)});
    }
  }
  cases.push_back({"fused_mlp_inference_grid_input", "hash3d_w64", kForwardTol, takes_grid_input(false),
                   [](Backend& b, uint64_t seed) { return run_grid_mlp(b, Output::inference, seed); }});
  cases.push_back({"fused_mlp_train", "grid_input_hash3d_w64_params", kParamGradTol, takes_grid_input(true),
                   [](Backend& b, uint64_t seed) { return run_grid_mlp(b, Output::params, seed); }});
  cases.push_back({"fused_mlp_train", "grid_input_hash3d_w64_table", kParamGradTol, takes_grid_input(true),
                   [](Backend& b, uint64_t seed) { return run_grid_mlp(b, Output::input, seed); }});
});

}  // namespace
}  // namespace tessera::test
