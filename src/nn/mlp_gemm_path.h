#pragma once
// The layer-by-layer MLP for networks the fused kernel does not take ("MLP" /
// "CutlassMLP" configs, any width): per layer one tensor-core GEMM (fp16 weights and
// activations, fp32 accumulation) whose epilogue applies the activation as it writes the
// fp16 output (ops::GemmActivation); backward, the input-gradient product applies the
// layer below's activation derivative the same way, and the weight gradients are split-K
// GEMMs over the batch reading the stored activations. Activations whose derivative needs
// the input (SiLU, Sine) keep fp32 pre-activations and separate activation passes;
// activations kept in device memory for backward;
// the backward pass runs under the dynamic loss scale of TrainState. Same padded
// parameter layout as the fused kernel (MlpShape), fp32 master weights, so snapshots and
// optimizers are shared.
//
// On a backend without fp16 ops (OpenCL without cl_khr_fp16) the same passes run in fp32:
// weights, activations and gradients stay fp32, every activation is applied in a GEMM
// epilogue (so SiLU and Sine, whose derivative needs the input, are not available there),
// the weight gradients are written (or accumulated, beta = 1) straight into the gradient
// array, and no loss scale is applied.
#include <cstddef>
#include <vector>

#include "tessera/core/buffer.h"
#include "tessera/ops/gemm.h"
#include "tessera/ops/mlp.h"
#include "tessera/ops/mlp_shape.h"
#include "tessera/ops/train_state.h"

namespace tessera::nn {

class MlpGemmPath {
 public:
  MlpGemmPath(const MlpShape& shape, ops::MlpActivations acts, Device device);
  // The stream its passes run on (default: the device's default stream).
  void set_stream(Stream& stream) { stream_ = &stream; }
  // input [batch, in] fp32; output [batch, out] (may be empty when keep); keep: store z,
  // y of every layer.
  void forward(const TensorView& params, const TensorView& input, const TensorView& output, bool keep);
  // After forward(keep = true): parameter gradients (per mode) and dL_dinput (unless
  // empty) from the activations and fp16 weights forward() kept. settle: settle the step
  // on the device at the end (false inside a larger model). state: the TrainState's bytes.
  void backward(const TensorView& dL_doutput, const TensorView& grads, ops::GradientMode mode,
                const TensorView& dL_dinput, const TensorView& state, bool settle = true);
  void forward_backward_loss(const TensorView& params, const TensorView& input, const TensorView& target,
                             const LossParams& loss, const TensorView& output, const TensorView& grads,
                             const TensorView& dL_dinput, const TensorView& state, bool settle);

 private:
  // Whether hidden layers apply their activation (and its derivative) in the GEMM epilogue.
  bool hidden_fused() const;
  void gemm_epilogue(DType type, size_t M, size_t N, size_t K, const TensorView& A, size_t lda, bool ta,
                     const TensorView& B, size_t ldb, bool tb, const TensorView& C, size_t ldc,
                     ops::GemmEpilogueKind kind, Activation act, const TensorView& Y);
  void forward_f32(const TensorView& params, const TensorView& input, const TensorView& output, bool keep);
  void backward_f32(const TensorView& dL_doutput, const TensorView& grads, ops::GradientMode mode,
                    const TensorView& dL_dinput, const TensorView& state, bool settle);
  TensorView last_output(size_t n) const;

  MlpShape s_;
  ops::MlpActivations acts_;
  Device device_;
  Stream* stream_;
  bool half_;  // fp16 passes (else fp32 throughout)
  // Device scratch, grown on demand (Buffer::ensure).
  Buffer<uint16_t> w16_, x16_;                 // fp16 weights and input of the last forward()
  std::vector<Buffer<float>> z_;               // per layer, [batch, layer_out_logical], fp32 (only
                                               // the last layer's when hidden_fused())
  std::vector<Buffer<uint16_t>> y16_;          // per layer, activations, fp16
  Buffer<uint16_t> dz16_, dz16b_;              // dL/dz of the current / next layer down (scaled), fp16
  Buffer<float> dx_, y_out_, grad_scaled_;     // dL/d(layer input) (scaled), fp32 output, scaled dW
  Buffer<float> dL_doutput_, loss_partials_;
  std::vector<Buffer<float>> y32_;             // fp32 mode: per layer, activations
  Buffer<float> x32_, dz32_, dz32b_;           // fp32 mode: the input, dL/dz of alternate layers
  TensorView params_f32_;                      // fp32 mode: the weights forward() read (the master
                                               // copy itself: no optimizer step runs before backward)
  size_t batch_ = 0;  // of the last forward(keep = true)
};

}  // namespace tessera::nn
