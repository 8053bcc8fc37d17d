#pragma once
// Helpers the module implementations share (not public API).
#include <memory>

#include "tessera/nn/module.h"
#include "tessera/ops/fused_mlp.h"

namespace tessera::nn::detail {

// dst = src + beta * dst over the views (beta 0: a copy).
void copy_view(Stream& stream, ConstView src, View dst, float beta);
void zero_view(Stream& stream, View dst);
// A contiguous [rows, cols] view of `buffer`, grown if needed (contents not kept).
View scratch_view(Buffer<float>& buffer, size_t rows, uint32_t cols);
// Converts the bound fp32 parameters to the fp16 copy where the backend keeps one.
void refresh_half(Stream& stream, const ParamBinding& p, size_t n);

}  // namespace tessera::nn::detail

namespace tessera::nn {
class Encoding;
class FullyFusedMlp;
}  // namespace tessera::nn

namespace tessera::nn::detail {

// The fast paths of Sequential{encoding, MLP} (tiny-cuda-nn's NetworkWithInputEncoding):
// a grid encoding computed inside the MLP's fused kernel, the encoding's fp16 output
// straight into the MLP, and the fused training step (loss in the MLP's kernel).
class EncodedMlp {
 public:
  // Null unless `first` is an encoding and `second` an MLP.
  static std::unique_ptr<EncodedMlp> recognise(Module& first, Module& second);
  EncodedMlp(Encoding& encoding, FullyFusedMlp& mlp);
  // Inference with the grid inside the MLP's kernel; false where that path does not apply
  // (the Sequential then runs its children one by one).
  bool inference(ConstView in, View out);
  // See Module::fused_training_step; false where the views are not contiguous fp32.
  bool fused_training_step(ConstView in, ConstView target, const LossParams& loss, bool settle);

 private:
  bool grid_in_kernel(size_t batch, bool training) const;
  ops::FusedGridInputViews grid_views() const;

  Encoding& encoding_;
  FullyFusedMlp& mlp_;
  Buffer<float> encoded_, encoded_grad_;  // [batch, encoding width], grow-only
  Buffer<uint16_t> encoded_half_;
};

}  // namespace tessera::nn::detail
