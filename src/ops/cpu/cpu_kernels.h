#pragma once
// The CPU reference kernels behind the CPU op table (register_ops.cpp): raw pointers,
// the arithmetic every other backend is tested against. Private: the library calls them
// through ops::call; tests call them directly.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "tessera/ops/conv.h"
#include "tessera/ops/encodings.h"
#include "tessera/ops/gemm.h"
#include "tessera/ops/gemv.h"
#include "tessera/ops/ger.h"
#include "tessera/ops/image_sample.h"
#include "tessera/ops/isosurface.h"
#include "tessera/ops/matrix.h"
#include "tessera/ops/mlp.h"
#include "tessera/ops/nerf.h"
#include "tessera/ops/optimizers.h"

namespace tessera::ops::cpu {

// ---- conv (tessera/ops/conv.h) ----
// The reference (direct, double accumulation; desc.algo is not read).
void conv2d_forward(const ConvDesc& d, Activation activation, const void* x, const void* w, const float* bias, void* y);
void conv2d_backward_data(const ConvDesc& d, Activation below, const void* dz, const void* w, const void* x, void* dx);
void conv2d_backward_weight(const ConvDesc& d, const void* x, const void* dz, void* dw, float* dbias);
// im2col + fp32 matrix products, tiled over output pixels (every shape the descriptor allows).
void conv2d_forward_im2col(const ConvDesc& d, Activation activation, const void* x, const void* w, const float* bias,
                           void* y);
void conv2d_backward_data_im2col(const ConvDesc& d, Activation below, const void* dz, const void* w, const void* x,
                                 void* dx);
void conv2d_backward_weight_im2col(const ConvDesc& d, const void* x, const void* dz, void* dw, float* dbias);
// Winograd F(m x m, 3x3), m = 2 or 4, in fp32 (conv_algo_rejects must say "" first).
void conv2d_forward_winograd(const ConvDesc& d, int m, Activation activation, const void* x, const void* w,
                             const float* bias, void* y);
void conv2d_backward_data_winograd(const ConvDesc& d, int m, Activation below, const void* dz, const void* w,
                                   const void* x, void* dx);

// ---- encodings (tessera/ops/encodings.h) ----
// in: [batch, >= n_dims] (stride in_stride); out: [batch, output_width] (stride out_stride).
template <typename T>
void elementwise_encode(const ElementwiseEncoding& e, const T* in, uint32_t in_stride, size_t batch, T* out,
                        uint32_t out_stride);
// Writes dL_din [batch, n_dims] (overwrite).
template <typename T>
void elementwise_encode_backward(const ElementwiseEncoding& e, const T* in, uint32_t in_stride, size_t batch,
                                 const T* dL_dout, uint32_t dout_stride, T* dL_din, uint32_t din_stride);

// ElementwiseEncodeBackwardBackward; dL_ddLdout and dL_din may be null.
template <typename T>
void elementwise_encode_backward_backward(const ElementwiseEncoding& e, const T* in, uint32_t in_stride, size_t batch,
                                          const T* dL_dout, uint32_t dout_stride, const T* dL_ddLdin,
                                          uint32_t ddin_stride, T* dL_ddLdout, uint32_t ddout_stride, T* dL_din,
                                          uint32_t din_stride);

// params: [n_params] (entry-major, features innermost).
template <typename T>
void grid_encode(const GridLayout& g, const T* params, const T* in, uint32_t in_stride, size_t batch, T* out,
                 uint32_t out_stride);
// Adds into dL_dparams [n_params]; writes dL_din [batch, n_dims] (overwrite) when non-null.
// The same rounded to fp16 (bits), for a consumer that reads fp16 (ops::GridEncodeHalf).
void grid_encode_half(const GridLayout& g, const float* params, const float* in, uint32_t in_stride, size_t batch,
                      uint16_t* out, uint32_t out_stride);
template <typename T>
void grid_encode_backward(const GridLayout& g, const T* params, const T* in, uint32_t in_stride, size_t batch,
                          const T* dL_dout, uint32_t dout_stride, T* dL_dparams, T* dL_din, uint32_t din_stride);
// GridEncodeBackwardBackward (tessera/ops/encodings.h); null outputs are skipped.
template <typename T>
void grid_encode_backward_backward(const GridLayout& g, const T* params, const T* in, uint32_t in_stride,
                                   size_t batch, const T* dL_dout, uint32_t dout_stride, const T* dL_ddLdin,
                                   uint32_t ddin_stride, T* dL_ddLdout, uint32_t ddout_stride, T* dL_dparams,
                                   T* dL_din, uint32_t din_stride);

// ---- gemm (tessera/ops/gemm.h) ----
// Reference: double accumulation. Pointers to fp32, or fp16/bf16 bits.
void gemm(const GemmDesc& d, const void* A, const void* B, void* C);
// The epilogue computed in double on the accumulated product (Y: bits of C's type).
void gemm_activation(const GemmDesc& d, const GemmEpilogue& e, const void* A, const void* B, void* C, const void* Y);

// ---- gemv (tessera/ops/gemv.h) ----
// Reference: double accumulation. T = float, or uint16_t for fp16 bits.
template <typename T>
void gemv(const GemvShape& s, float alpha, const T* A, const T* x, float beta, T* y, Activation act);

// ---- ger (tessera/ops/ger.h) ----
void ger(size_t rows, size_t cols, float alpha, const float* x, const float* y, float* A, size_t lda);

// ---- image_sample (tessera/ops/image_sample.h) ----
// xy: [n, 2]; target: [n, 3].
void sample_image(const float* image, uint32_t width, uint32_t height, uint64_t seed, size_t n, float* xy,
                  float* target);

// ---- isosurface (tessera/ops/isosurface.h) ----
void isosurface_count(const float* field, uint32_t res, float threshold, uint8_t* crossings, uint32_t* vertex_first,
                      uint32_t* triangle_first);
void isosurface_emit(const float* field, uint32_t res, float threshold, const nerf::Aabb& box, const uint8_t* crossings,
                     const uint32_t* vertex_first, const uint32_t* triangle_first, float* positions, float* normals,
                     uint32_t* triangles);

// ---- matrix (tessera/ops/matrix.h) ----
void activation_backward(Activation act, size_t n, const float* y, const float* g, float* dz);
void matrix_axpby(size_t rows, uint32_t cols, float alpha, const float* src, uint32_t src_stride, float beta,
                  float* dst, uint32_t dst_stride);

// ---- mlp (tessera/ops/mlp.h) ----
// What the forward pass keeps for backward: per layer, pre-activations z and outputs y,
// each [batch, layer_out_logical].
template <typename T>
struct MlpTape {
  std::vector<std::vector<T>> z, y;
};

// output: [batch, output_width]; params: shape.n_params() (padded layout, see MlpShape).
// tape may be null (inference).
template <typename T>
void mlp_forward(const MlpShape& shape, MlpActivations acts, const T* params, const T* input,
                 size_t batch, T* output, MlpTape<T>* tape);

// dL_doutput: [batch, output_width]. Writes dL_dparams (shape.n_params(), padded entries
// zero) per `mode`, and dL_dinput [batch, input_width] when non-null.
template <typename T>
void mlp_backward(const MlpShape& shape, MlpActivations acts, const T* params, const T* input,
                  size_t batch, const MlpTape<T>& tape, const T* dL_doutput, T* dL_dparams,
                  GradientMode mode, T* dL_dinput);

// The backward of the input gradient (ops::MlpBackwardBackward), the forward recomputed
// from input: row b of a matrix starts at b * its stride. Adds to dL_dparams (the caller
// zeroes it to overwrite); dL_ddLdout and dL_dinput may be null.
template <typename T>
void mlp_backward_backward(const MlpShape& shape, MlpActivations acts, const T* params, size_t batch, const T* input,
                           size_t in_stride, const T* dL_doutput, size_t dout_stride, const T* dL_ddLdin,
                           size_t ddin_stride, T* dL_ddLdout, size_t ddout_stride, T* dL_dparams, T* dL_dinput,
                           size_t din_stride);

// The layer-by-layer MLP's passes (ops::ActivationForwardHalf, ...): y16 = fp16(act(z))
// (and y32 = act(z) when non-null); dz16 = fp16(s * dy * act'(z)), s = the loss scale
// when scale_by_loss_scale, else 1; dst = (accumulate ? dst : 0) + scaled / loss scale.
void activation_forward_half(Activation act, const float* z, uint16_t* y16, float* y32, size_t n);
void activation_backward_half(Activation act, const float* z, const float* dy, uint16_t* dz16, size_t n,
                              const TrainState& state, bool scale_by_loss_scale);
void unscale(const float* scaled, float* dst, size_t n, bool accumulate, const TrainState& state);

// ---- optimizers (tessera/ops/optimizers.h) ----
// The first n_matrix of the n parameters are network weights (see adam_update); average
// (optional): ParamsAverage's values, updated with weight `keep` after the step.
void adam_step(const AdamHyper& h, size_t n, size_t n_matrix, const float* grad, float* params, float* m, float* v,
               float* average, float keep, const TrainState& state);
// The same with AdamHyper::bf16_moments: moments[i] packs m and v (adam_math.h).
void adam_step_bf16_moments(const AdamHyper& h, size_t n, size_t n_matrix, const float* grad, float* params,
                            uint32_t* moments, float* average, float keep, const TrainState& state);
void sgd_step(float learning_rate, float l2_reg, size_t n, const float* grad, float* params,
              const TrainState& state);
void convert_to_half(const float* src, uint16_t* dst, size_t n);
void gradient_bf16_exchange(float* grads, uint16_t* packed, size_t n, bool to_bf16, uint32_t ranks);

}  // namespace tessera::ops::cpu
