// Sequential{encoding, MLP}'s fast paths (module_internal.h).
#include "module_internal.h"

#include "tessera/core/error.h"
#include "tessera/nn/encoding.h"
#include "tessera/nn/fully_fused_mlp.h"

namespace tessera::nn::detail {

std::unique_ptr<EncodedMlp> EncodedMlp::recognise(Module& first, Module& second) {
  auto* encoding = dynamic_cast<Encoding*>(&first);
  auto* mlp = dynamic_cast<FullyFusedMlp*>(&second);
  if (!encoding || !mlp) return nullptr;
  return std::make_unique<EncodedMlp>(*encoding, *mlp);
}

EncodedMlp::EncodedMlp(Encoding& encoding, FullyFusedMlp& mlp)
    : encoding_(encoding), mlp_(mlp), encoded_(mlp.device(), 0), encoded_grad_(mlp.device(), 0),
      encoded_half_(mlp.device(), 0) {}

bool EncodedMlp::grid_in_kernel(size_t batch, bool training) const {
  const ops::GridLayout* g = encoding_.grid_layout();
  return g && batch > 0 && mlp_.accepts_grid_input(*g, batch, training);
}

ops::FusedGridInputViews EncodedMlp::grid_views() const {
  const ParamBinding& p = encoding_.tables();
  return {encoding_.grid_layout(), p.params_half, p.gradients};
}

namespace {
bool contiguous_f32(ConstView v) { return v.dtype == DType::f32 && v.contiguous(); }
}  // namespace

bool EncodedMlp::inference(ConstView in, View out) {
  if (!grid_in_kernel(in.rows(), false) || !contiguous_f32(in) || !contiguous_f32(out)) return false;
  mlp_.inference_grid_input(grid_views(), in, out);
  return true;
}

bool EncodedMlp::fused_training_step(ConstView in, ConstView target, const LossParams& loss, bool settle) {
  if (!contiguous_f32(in) || !contiguous_f32(target) || in.rows() == 0) return false;
  const size_t batch = in.rows();
  if (grid_in_kernel(batch, true)) {  // the kernel adds the grid's gradient: start from zero
    if (encoding_.n_params()) zero_view_bytes(mlp_.stream(), encoding_.tables().gradients);
    mlp_.fused_training_step_grid_input(grid_views(), in, target, loss, settle);
    return true;
  }
  const uint32_t width = encoding_.output_width();
  // The encoding writes fp16 straight into the MLP's input where both sides can: half the
  // bytes of the fp32 hand-over.
  const bool half = encoding_.can_output_half() && mlp_.accepts_half_input(batch, true);
  View encoded;
  if (half) {
    encoded_half_.ensure(batch * width);
    encoded = encoded_half_.matrix(batch, width);
  } else {
    encoded = scratch_view(encoded_, batch, width);
  }
  encoding_.inference(in, encoded);
  const bool encoding_trains = encoding_.n_params() > 0;
  const View encoded_grad = encoding_trains ? scratch_view(encoded_grad_, batch, width) : View();
  mlp_.fused_training_step(encoded, target, loss, encoded_grad, settle);
  if (encoding_trains) {
    ModuleContext none;  // encodings keep nothing from forward
    encoding_.backward(none, in, encoded_grad, View(), GradientMode::overwrite);
  }
  return true;
}

}  // namespace tessera::nn::detail
