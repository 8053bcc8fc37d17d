// The fused MLP ops' CPU reference: what a fused kernel computes, in fp32 from the same
// fp16 weights (and fp16 input or grid table where the kernel reads those), for the
// backend-ops harness. FullyFusedMlp itself runs the CPU reference path with a tape
// (nn/fully_fused_mlp.cpp); these ops recompute, as the kernels do.
#include "fused_mlp_cpu.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/ops/encodings.h"
#include "train_step_cpu.h"
#include "typed_storage.h"
#include "ops/cpu/cpu_kernels.h"

namespace tessera::ops::cpu {

namespace {

std::vector<float> to_floats(const TensorView& v, const char* what, size_t n) {
  TESSERA_CHECK(v.numel() >= n && (v.dtype == DType::f16 || v.dtype == DType::f32) && v.contiguous(),
                "{}: expects {} contiguous fp16 or fp32 values, got {} {}", what, n, v.numel(), to_string(v.dtype));
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = float(load_as_double(v.address(), v.dtype, i));
  return out;
}

// Rows [batch, width] of a (possibly strided) fp32 view, to and from packed rows.
std::vector<float> packed_rows(const TensorView& v, size_t batch, uint32_t width) {
  std::vector<float> out(batch * width);
  const float* src = v.data<const float>();
  for (size_t r = 0; r < batch; ++r) std::copy_n(src + r * v.row_stride(), width, out.data() + r * width);
  return out;
}
void store_rows(const std::vector<float>& rows, size_t batch, uint32_t width, const TensorView& v) {
  float* dst = v.data<float>();
  for (size_t r = 0; r < batch; ++r) std::copy_n(rows.data() + r * width, width, dst + r * v.row_stride());
}

// The network's input rows as fp32: the input itself, or (grid input) the grid's features
// of the coordinates, from the fp16 table as the kernel reads it.
std::vector<float> network_input(const MlpShape& s, const FusedGridInputViews& grid, const TensorView& input,
                                 size_t batch) {
  if (!grid.layout) return to_floats(input, "fused_mlp: input", batch * s.input_width);
  const GridLayout& g = *grid.layout;
  const std::vector<float> table = to_floats(grid.table, "fused_mlp: grid table", size_t(g.n_params()));
  std::vector<float> features(batch * s.input_width);
  grid_encode<float>(g, table.data(), input.data<const float>(), uint32_t(input.row_stride()), batch,
                     features.data(), s.input_width);
  return features;
}

}  // namespace

void fused_mlp_inference_reference(const MlpShape& s, MlpActivations acts, const TensorView& weights,
                                   const FusedGridInputViews& grid, const TensorView& input,
                                   const TensorView& output) {
  const size_t batch = input.rows();
  if (batch == 0) return;
  const std::vector<float> w = to_floats(weights, "fused_mlp_inference: weights", s.n_params());
  const std::vector<float> x = network_input(s, grid, input, batch);
  std::vector<float> y(batch * s.output_width);
  mlp_forward<float>(s, acts, w.data(), x.data(), batch, y.data(), nullptr);
  store_rows(y, batch, s.output_width, output);
}

void fused_mlp_train_reference(const MlpShape& s, MlpActivations acts, const FusedMlpTrainArgs& a) {
  const size_t batch = a.input.rows();
  auto& state = *a.state.data<TrainState>();
  if (batch == 0) return;
  const std::vector<float> w = to_floats(a.weights, "fused_mlp_train: weights", s.n_params());
  const std::vector<float> x = network_input(s, a.grid, a.input, batch);
  const size_t n_out = batch * s.output_width;
  std::vector<float> y(n_out), dy(n_out);
  MlpTape<float> tape;
  mlp_forward<float>(s, acts, w.data(), x.data(), batch, y.data(), &tape);
  if (!a.target.empty()) {  // the loss as the kernels take it: mean over batch x outputs
    const std::vector<float> target = packed_rows(a.target, batch, s.output_width);
    state.last_loss = loss_forward_backward(a.loss, y.data(), target.data(), n_out, 1.0f / float(n_out), dy.data());
  } else {
    dy = packed_rows(a.dL_doutput, batch, s.output_width);
  }
  if (!a.output.empty()) store_rows(y, batch, s.output_width, a.output);
  const bool want_dx = !a.dL_dinput.empty() || a.grid.layout;
  std::vector<float> dx(want_dx ? batch * s.input_width : 0);
  mlp_backward<float>(s, acts, w.data(), x.data(), batch, tape, dy.data(), a.dL_dparams.data<float>(), a.mode,
                      want_dx ? dx.data() : nullptr);
  if (!a.dL_dinput.empty()) std::copy(dx.begin(), dx.end(), a.dL_dinput.data<float>());
  if (a.grid.layout) {  // the grid's gradient is added in, as the kernel's scatter does
    const GridLayout& g = *a.grid.layout;
    const std::vector<float> table = to_floats(a.grid.table, "fused_mlp_train: grid table", size_t(g.n_params()));
    grid_encode_backward<float>(g, table.data(), a.input.data<const float>(), uint32_t(a.input.row_stride()), batch,
                                dx.data(), s.input_width, a.grid.gradients.data<float>(), nullptr, 0);
  }
  if (a.settle) settle_step(state, a.dL_dparams.data<const float>(), s.n_params());
}

}  // namespace tessera::ops::cpu
