#pragma once
// The CUDA launchers behind the CUDA op table (register_ops.cpp): raw device pointers,
// every kernel of one call on `stream` (null: the CUDA backend's default stream). Private:
// the library calls them through ops::call; tests and the benchmarks call them directly.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

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
#include "tessera/ops/train_state.h"

namespace tessera::ops::cuda {

// ---- conv (tessera/ops/conv.h) ----
// Direct: every shape, one thread per output (input) element; the baseline (not tuned).
void conv2d_forward_direct(const ConvDesc& d, Activation activation, const void* x, const void* w, const float* bias,
                           void* y, Stream* stream);
void conv2d_backward_data_direct(const ConvDesc& d, Activation below, const void* dz, const void* w, const void* x,
                                 void* dx, Stream* stream);
void conv2d_backward_weight_direct(const ConvDesc& d, const void* x, const void* dz, void* dw, float* dbias,
                                   Stream* stream);
// im2col + our GEMM (fp32: SIMT; fp16/bf16: tensor cores) into fp32, groups = 1; stream
// workspace for the columns and the fp32 product.
void conv2d_forward_im2col(Stream& stream, const ConvDesc& d, Activation activation, const void* x, const void* w,
                           const float* bias, void* y);
void conv2d_backward_data_im2col(Stream& stream, const ConvDesc& d, Activation below, const void* dz, const void* w,
                                 const void* x, void* dx);
void conv2d_backward_weight_im2col(Stream& stream, const ConvDesc& d, const void* x, const void* dz, void* dw,
                                   float* dbias);
// Implicit GEMM on tensor cores (fp16/bf16 NHWC, groups 1, C and K multiples of 8; forward
// with bias + activation, backward-data at stride 1 with the layer below's derivative,
// backward-weight with the bias gradient):
// implicit_gemm_rejects says "" where it applies, else why not.
std::string implicit_gemm_rejects(ConvOp op, const ConvDesc& d);
void conv2d_forward_implicit_gemm(Stream& stream, const ConvDesc& d, Activation activation, const void* x,
                                  const void* w, const float* bias, void* y);
void conv2d_backward_data_implicit_gemm(Stream& stream, const ConvDesc& d, Activation below, const void* dz,
                                        const void* w, const void* x, void* dx);
void conv2d_backward_weight_implicit_gemm(Stream& stream, const ConvDesc& d, const void* x, const void* dz, void* dw,
                                          float* dbias);
// The algorithm automatic means on CUDA for the op and shape (direct, im2col_gemm,
// implicit_gemm or winograd_4x4).
ConvAlgo automatic_conv_algo(ConvOp op, const ConvDesc& d);
// The algorithm ConvAlgo::benchmark measured fastest for the op and shape on the current
// device, or automatic when it has not measured it yet.
ConvAlgo benchmarked_conv_algo(ConvOp op, const ConvDesc& d);
// Throws unless the CUDA backend has `algo` for the op and it runs the shape here (its
// math, the kernel's limits; DeviceLimitError where this GPU is too old for it).
void require_cuda_conv_algo(ConvOp op, const ConvDesc& d, ConvAlgo algo);
// The algorithm an op runs (conv_select.cpp): the one asked for, automatic's choice, or
// benchmark's (which times `run` with each candidate on the stream, the first time).
ConvAlgo resolve_conv_algo(Stream& s, ConvOp op, const ConvDesc& d, const std::function<void(ConvAlgo)>& run);
// Winograd F(m x m, 3x3), m = 2 or 4, fp32 storage (conv_algo_rejects must say "" first):
// transforms and the alpha^2 batched products in fp32 (stream workspace for U, V, M).
void conv2d_forward_winograd(Stream& stream, const ConvDesc& d, int m, Activation activation, const float* x,
                             const float* w, const float* bias, float* y);
void conv2d_backward_data_winograd(Stream& stream, const ConvDesc& d, int m, Activation below, const float* dz,
                                   const float* w, const float* x, float* dx);

// ---- encodings (tessera/ops/encodings.h) ----
void elementwise_encode(const ElementwiseEncoding& e, const float* in, uint32_t in_stride, size_t batch, float* out,
                        uint32_t out_stride, Stream* stream = nullptr);
void elementwise_encode_backward(const ElementwiseEncoding& e, const float* in, uint32_t in_stride, size_t batch,
                                 const float* dL_dout, uint32_t dout_stride, float* dL_din, uint32_t din_stride, Stream* stream = nullptr);
// ElementwiseEncodeBackwardBackward; null outputs are skipped.
void elementwise_encode_backward_backward(const ElementwiseEncoding& e, const float* in, uint32_t in_stride,
                                          size_t batch, const float* dL_dout, uint32_t dout_stride,
                                          const float* dL_ddLdin, uint32_t ddin_stride, float* dL_ddLdout,
                                          uint32_t ddout_stride, float* dL_din, uint32_t din_stride,
                                          Stream* stream = nullptr);
// params_half: fp16 bits [n_params].
void grid_encode(const GridLayout& g, const uint16_t* params_half, const float* in, uint32_t in_stride, size_t batch,
                 float* out, uint32_t out_stride, Stream* stream = nullptr);
// The same with fp16 output (fp16 bits), for consumers that read fp16 (the fused MLP).
void grid_encode_half(const GridLayout& g, const uint16_t* params_half, const float* in, uint32_t in_stride,
                      size_t batch, uint16_t* out, uint32_t out_stride, Stream* stream = nullptr);
// Adds into dL_dparams [n_params] (fp32 atomics) when non-null; writes dL_din when non-null.
void grid_encode_backward(const GridLayout& g, const uint16_t* params_half, const float* in, uint32_t in_stride,
                          size_t batch, const float* dL_dout, uint32_t dout_stride, float* dL_dparams, float* dL_din,
                          uint32_t din_stride, Stream* stream = nullptr);
// GridEncodeBackwardBackward: adds into dL_dparams (fp32 atomics; with dL_dout_first, a
// first backward's too, in the same scatter); null outputs are skipped.
void grid_encode_backward_backward(const GridLayout& g, const uint16_t* params_half, const float* in,
                                   uint32_t in_stride, size_t batch, const float* dL_dout, uint32_t dout_stride,
                                   const float* dL_ddLdin, uint32_t ddin_stride, float* dL_ddLdout,
                                   uint32_t ddout_stride, float* dL_dparams, float* dL_din, uint32_t din_stride,
                                   const float* dL_dout_first = nullptr, uint32_t first_stride = 0,
                                   Stream* stream = nullptr);

// ---- gemm (tessera/ops/gemm.h) ----
// simt: fp32 CUDA cores. wmma: fp16/bf16 on WMMA 16x16x16 (any NVIDIA tensor-core GPU).
// wgmma: fp16/bf16 on Hopper's warpgroup MMA fed by TMA (compute capability 9.0 only;
// operands whose base, leading dimension or batch stride is not 16-byte aligned are first
// copied to aligned scratch). tf32x3: fp32 on TF32 tensor cores (compute capability 8.0
// or later) at fp32 accuracy: each operand split into two TF32 parts, three products.
enum class GemmKernel { simt, wmma, wgmma, tf32x3 };
const char* to_string(GemmKernel k);
// Runs the fastest kernel that can: fp32 -> simt; fp16/bf16 -> wgmma on Hopper, else wmma.
// Without a stream: the CUDA backend's default stream.
void gemm(Stream& stream, const GemmDesc& d, const void* A, const void* B, void* C);
void gemm(const GemmDesc& d, const void* A, const void* B, void* C);
// Runs the named kernel; throws tessera::Error saying why when it cannot run this problem
// on this GPU.
void gemm(Stream& stream, const GemmDesc& d, const void* A, const void* B, void* C, GemmKernel kernel);
void gemm(const GemmDesc& d, const void* A, const void* B, void* C, GemmKernel kernel);
// The GEMM with an activation epilogue (see GemmActivation): on Hopper the wgmma kernel
// applies it as it writes C; otherwise (and for split-K or transposed-A problems) the
// product goes to fp32 scratch and one elementwise pass applies it.
void gemm_activation(Stream& stream, const GemmDesc& d, const GemmEpilogue& e, const void* A, const void* B, void* C,
                     const void* Y);
// Whether gemm_activation fuses the epilogue into the product for this problem.
bool gemm_activation_is_fused(const GemmDesc& d, const GemmEpilogue& e, const void* A, const void* B);
// Whether `kernel` can run this problem (with these operand addresses) on the current GPU.
bool gemm_kernel_can_run(GemmKernel kernel, const GemmDesc& d, const void* A, const void* B);
// Which kernel gemm() without a kernel argument would use.
GemmKernel gemm_kernel_for(const GemmDesc& d, const void* A, const void* B);

// ---- gemv (tessera/ops/gemv.h) ----
// On `stream` (null: the default stream); the op-T split reduction's partials live in its
// workspace.
void gemv(const GemvShape& s, float alpha, const float* A, const float* x, float beta, float* y, Activation act,
          Stream* stream = nullptr);
// fp16 bits for A, x, y.
void gemv(const GemvShape& s, float alpha, const uint16_t* A, const uint16_t* x, float beta, uint16_t* y,
          Activation act, Stream* stream = nullptr);

// ---- ger (tessera/ops/ger.h) ----
void ger(size_t rows, size_t cols, float alpha, const float* x, const float* y, float* A, size_t lda, Stream* stream = nullptr);

// ---- image_sample (tessera/ops/image_sample.h) ----
void sample_image(const float* image, uint32_t width, uint32_t height, uint64_t seed, size_t n, float* xy,
                  float* target, Stream* stream = nullptr);

// ---- isosurface (tessera/ops/isosurface.h) ----
void isosurface_count(const float* field, uint32_t res, float threshold, uint8_t* crossings, uint32_t* vertex_first,
                      uint32_t* triangle_first, Stream* stream);
void isosurface_emit(const float* field, uint32_t res, float threshold, const nerf::Aabb& box, const uint8_t* crossings,
                     const uint32_t* vertex_first, const uint32_t* triangle_first, float* positions, float* normals,
                     uint32_t* triangles, Stream* stream);

// ---- matrix (tessera/ops/matrix.h) ----
void activation_backward(Activation act, size_t n, const float* y, const float* g, float* dz, Stream* stream = nullptr);
void matrix_axpby(size_t rows, uint32_t cols, float alpha, const float* src, uint32_t src_stride, float beta,
                  float* dst, uint32_t dst_stride, Stream* stream = nullptr);

// ---- nerf (tessera/ops/nerf.h) ----
void nerf_march_rays(const NerfScene& scene, const NerfRaySelection& rays, uint32_t max_samples, NerfRay* ray_out,
                     float* samples, float* dt, uint32_t* counters, Stream* stream);
size_t nerf_composite_train_partials(uint32_t n_rays);
void nerf_composite_train(const NerfScene& scene, const NerfImages& images, NerfRay* rays, uint32_t n_rays,
                          const float* outputs, const float* dt, const NerfDistortion& distortion,
                          const LossParams& loss, uint32_t seed, float* dL_doutputs, float* loss_partials,
                          TrainState* state, Stream* stream);
void nerf_composite_render(const NerfRay* rays, uint32_t n_rays, const float* outputs, const float* dt,
                           nerf::Vec3 background, float* rgba, Stream* stream);
size_t nerf_compact_scratch(uint32_t n_rays);
void nerf_compact_samples(NerfRay* rays, uint32_t n_rays, const float* raw_density, size_t density_stride,
                          uint32_t density_every, const float* samples, const float* dt, uint32_t capacity,
                          float* compact_samples, float* compact_dt, uint32_t* count, uint32_t* scratch,
                          Stream* stream);
void nerf_pad_batch(const uint32_t* count, float* batch, uint32_t rows, uint32_t width, Stream* stream);
void nerf_grid_samples(const NerfScene& scene, uint32_t n_uniform, uint32_t n_occupied, uint32_t seed,
                       uint32_t* cells, float* positions, Stream* stream);
void nerf_grid_update(uint32_t n_cascades, const uint32_t* cells, const float* raw_density, uint32_t stride,
                      uint32_t n, float decay, float* density, float* scratch, uint8_t* bitfield, Stream* stream);
void nerf_mark_untrained(const NerfScene& scene, float* density, Stream* stream);
void nerf_frame_gradients(const NerfScene& scene, const NerfRay* rays, uint32_t n_rays, const float* samples,
                          const float* dL_dsamples, uint32_t width, float* pose_gradient, float* focal_gradient,
                          float* embedding_gradient, Stream* stream);
void nerf_append_embeddings(const NerfRay* rays, uint32_t n_rays, const float* samples, const float* embeddings,
                            uint32_t n_frames, uint32_t n_embedding, float* inputs, Stream* stream);

// ---- optimizers (tessera/ops/optimizers.h) ----
// params_fp16 (optional): fp16 copy refreshed in the same pass, for the tensor-core kernels;
// average (optional): ParamsAverage's values, updated with weight `keep` in the same pass.
// Adam over fp32 moments (m, v) or, where `moments` is given, packed bf16 ones
// (AdamHyper::bf16_moments; m and v null).
void adam_step(const AdamHyper& h, size_t n, size_t n_matrix, const float* grad, float* params,
               uint16_t* params_fp16, float* m, float* v, uint32_t* moments, float* average, float keep,
               const TrainState* state, Stream* stream = nullptr);
void sgd_step(float learning_rate, float l2_reg, size_t n, const float* grad, float* params,
              uint16_t* params_fp16, const TrainState* state, Stream* stream = nullptr);
void convert_to_half(const float* src, uint16_t* dst, size_t n, Stream* stream = nullptr);


// ---- the layer-by-layer MLP's elementwise passes (tessera/ops/mlp.h) ----
// y16 = fp16(act(z)); y32 = act(z) too when non-null.
void activation_forward_half(Activation act, const float* z, uint16_t* y16, float* y32, size_t n, Stream* stream = nullptr);
// dz16 = fp16(s * dy * act'(z)), s = state->loss_scale (read on the device) when
// scale_by_loss_scale, else 1 (dy already carries the scale).
void activation_backward_half(Activation act, const float* z, const float* dy, uint16_t* dz16, size_t n,
                              const TrainState* state, bool scale_by_loss_scale, Stream* stream = nullptr);
// dst = (accumulate ? dst : 0) + scaled / state->loss_scale.
void unscale(const float* scaled, float* dst, size_t n, bool accumulate, const TrainState* state, Stream* stream = nullptr);
// dL_dy = norm * loss'(y, target); state->last_loss = norm * sum loss(y, target)
// (fixed-order sum). partials: scratch of loss_partials_needed(n) floats.
size_t loss_partials_needed(size_t n);
void loss_forward_backward(const LossParams& loss, const float* y, const float* target, size_t n, float norm,
                           float* dL_dy, float* partials, TrainState* state, Stream* stream = nullptr);
// ops::MlpBackwardBackward, fused (mlp_backward_backward.cu): widths 16, 32, 64 and 128
// whose fp16 weights fit in shared memory; mlp_backward_backward_rejects says "" for
// those, else why not. Strides in elements; null outputs are skipped; the parameter
// gradients are added (accumulate) or written. Stream workspace: the weight-gradient
// GEMMs' operands (2 x batch rows of bf16 per layer input and output).
std::string mlp_backward_backward_rejects(const MlpShape& s);
void mlp_backward_backward(Stream& stream, const MlpShape& s, MlpActivations acts, const float* params,
                           size_t batch, const float* in, size_t in_stride, const float* dL_dout, size_t dout_stride,
                           const float* dL_ddLdin, size_t ddin_stride, float* dL_ddLdout, size_t ddout_stride,
                           float* dL_dparams, bool accumulate, float* dL_din, size_t din_stride);
// ops::EikonalGradient over rows of d values (row strides in elements).
void eikonal_gradient(float weight, const float* g, size_t g_stride, float* dE_dg, size_t out_stride, size_t batch,
                      uint32_t d, Stream* stream = nullptr);
// Settles the step on the device: skip it when any of grads[0..n) is not finite.
void settle_step(const float* grads, size_t n, TrainState* state, Stream* stream = nullptr);
void gradient_bf16_exchange(float* grads, uint16_t* packed, size_t n, bool to_bf16, uint32_t ranks,
                            Stream* stream);

}  // namespace tessera::ops::cuda
