// The CUDA backend's op table: every op runs on the stream it is given.
#include "../register_ops.h"
#include "tessera/ops/encodings.h"
#include "tessera/ops/fused_mlp_cuda.h"
#include "tessera/ops/gemm.h"
#include "tessera/ops/gemv.h"
#include "tessera/ops/ger.h"
#include "tessera/ops/image_sample.h"
#include "tessera/ops/matrix.h"
#include "tessera/ops/nerf.h"
#include "tessera/ops/mlp_gemm_cuda.h"
#include "tessera/ops/optimizers.h"

namespace tessera::ops::cuda {
void register_ops(Backend& b) {
  b.add_op<AdamStep>([](Stream& s, const AdamHyper& h, size_t n, size_t n_matrix, const float* grad, float* params,
                        uint16_t* params_half, float* m, float* v, TrainState* state) {
    adam_step(h, n, n_matrix, grad, params, params_half, m, v, state, &s);
  });
  b.add_op<SgdStep>([](Stream& s, float lr, float l2, size_t n, const float* grad, float* params,
                       uint16_t* params_half, TrainState* state) {
    sgd_step(lr, l2, n, grad, params, params_half, state, &s);
  });
  b.add_op<ConvertToHalf>([](Stream& s, const float* src, uint16_t* dst, size_t n) {
    convert_to_half(src, dst, n, &s);
  });
  b.add_op<ElementwiseEncode>([](Stream& s, const ElementwiseEncoding& e, const float* in, uint32_t in_stride,
                                 size_t batch, float* out, uint32_t out_stride) {
    elementwise_encode(e, in, in_stride, batch, out, out_stride, &s);
  });
  b.add_op<ElementwiseEncodeBackward>([](Stream& s, const ElementwiseEncoding& e, const float* in,
                                         uint32_t in_stride, size_t batch, const float* dL_dout, uint32_t dout_stride,
                                         float* dL_din, uint32_t din_stride) {
    elementwise_encode_backward(e, in, in_stride, batch, dL_dout, dout_stride, dL_din, din_stride, &s);
  });
  b.add_op<GridEncode>([](Stream& s, const GridLayout& g, const float*, const uint16_t* params_half, const float* in,
                          uint32_t in_stride, size_t batch, float* out, uint32_t out_stride) {
    grid_encode(g, params_half, in, in_stride, batch, out, out_stride, &s);
  });
  b.add_op<GridEncodeHalf>([](Stream& s, const GridLayout& g, const float*, const uint16_t* params_half,
                              const float* in, uint32_t in_stride, size_t batch, uint16_t* out, uint32_t out_stride) {
    grid_encode_half(g, params_half, in, in_stride, batch, out, out_stride, &s);
  });
  b.add_op<GridEncodeBackward>([](Stream& s, const GridLayout& g, const float*, const uint16_t* params_half,
                                  const float* in, uint32_t in_stride, size_t batch, const float* dL_dout,
                                  uint32_t dout_stride, float* dL_dparams, float* dL_din, uint32_t din_stride) {
    grid_encode_backward(g, params_half, in, in_stride, batch, dL_dout, dout_stride, dL_dparams, dL_din, din_stride, &s);
  });
  b.add_op<SampleImage>([](Stream& s, const float* image, uint32_t w, uint32_t h, uint64_t seed, size_t n, float* xy,
                           float* rgb) {
    sample_image(image, w, h, seed, n, xy, rgb, &s);
  });
  b.add_op<Gemv>([](Stream& s, const GemvShape& shape, float alpha, const float* A, const float* x, float beta,
                    float* y, Activation act) {
    gemv(shape, alpha, A, x, beta, y, act, &s);
  });
  b.add_op<GemvHalf>([](Stream& s, const GemvShape& shape, float alpha, const uint16_t* A, const uint16_t* x,
                        float beta, uint16_t* y, Activation act) {
    gemv(shape, alpha, A, x, beta, y, act, &s);
  });
  b.add_op<Ger>([](Stream& s, size_t rows, size_t cols, float alpha, const float* x, const float* y, float* A,
                   size_t lda) {
    ger(rows, cols, alpha, x, y, A, lda, &s);
  });
  b.add_op<Gemm>([](Stream& s, const GemmDesc& d, const void* A, const void* B, void* C) { gemm(s, d, A, B, C); });
  b.add_op<MatrixAxpby>([](Stream& s, size_t rows, uint32_t cols, float alpha, const float* src, uint32_t src_stride,
                           float beta, float* dst, uint32_t dst_stride) {
    matrix_axpby(rows, cols, alpha, src, src_stride, beta, dst, dst_stride, &s);
  });

  b.add_op<FusedMlpInference>([](Stream& s, const MlpShape& shape, MlpActivations acts, const uint16_t* weights,
                                 const float* input, const uint16_t* input_half, size_t batch, float* output,
                                 const FusedMlpOptions& options) {
    if (input_half) fused_mlp_inference_half_input(shape, acts, weights, input_half, batch, output, options, &s);
    else fused_mlp_inference(shape, acts, weights, input, batch, output, options, &s);
  });
  b.add_op<FusedMlpTrain>([](Stream& s, const MlpShape& shape, MlpActivations acts, const FusedTrainArgs& args,
                             FusedMlpWorkspace& ws) {
    FusedTrainArgs on_stream = args;
    on_stream.stream = &s;
    fused_mlp_train(shape, acts, on_stream, ws);
  });
  b.add_op<FusedMlpAcceptsHalfInput>([](Stream&, const MlpShape& shape, MlpActivations acts, size_t batch,
                                        bool training, const FusedMlpOptions& options) {
    return fused_mlp_accepts_half_input(shape, acts, batch, training, options);
  });
  b.add_op<FusedMlpLaunchInfo>([](Stream&, const MlpShape& shape, MlpActivations acts, size_t batch, bool training,
                                  const FusedMlpOptions& options) {
    return fused_mlp_launch_info(shape, acts, batch, training, options);
  });

  b.add_op<ActivationForwardHalf>([](Stream& s, Activation act, const float* z, uint16_t* y16, float* y32,
                                     size_t n) {
    activation_forward_half(act, z, y16, y32, n, &s);
  });
  b.add_op<ActivationBackwardHalf>([](Stream& s, Activation act, const float* z, const float* dy, uint16_t* dz16,
                                      size_t n, const TrainState* state, bool scale_by_loss_scale) {
    activation_backward_half(act, z, dy, dz16, n, state, scale_by_loss_scale, &s);
  });
  b.add_op<Unscale>([](Stream& s, const float* scaled, float* dst, size_t n, bool accumulate,
                       const TrainState* state) {
    unscale(scaled, dst, n, accumulate, state, &s);
  });
  b.add_op<LossForwardBackward>([](Stream& s, const LossParams& loss, const float* y, const float* target, size_t n,
                                   float norm, float* dL_dy, float* partials, TrainState* state) {
    loss_forward_backward(loss, y, target, n, norm, dL_dy, partials, state, &s);
  });
  b.add_op<LossPartialsNeeded>([](Stream&, size_t n) { return loss_partials_needed(n); });
  b.add_op<SettleStep>([](Stream& s, const float* grads, size_t n, TrainState* state) {
    settle_step(grads, n, state, &s);
  });
  b.add_op<NerfMarchRays>([](Stream& s, const NerfScene& scene, const NerfRaySelection& rays, uint32_t max_samples,
                              NerfRay* ray_out, float* samples, float* dt, uint32_t* counters) {
    nerf_march_rays(scene, rays, max_samples, ray_out, samples, dt, counters, &s);
  });
  b.add_op<NerfCompositeTrain>([](Stream& s, const NerfScene& scene, const NerfImages& images, const NerfRay* rays,
                                  uint32_t n_rays, const float* outputs, const float* dt, const LossParams& loss,
                                  uint32_t seed, float* dL_doutputs, float* partials, TrainState* state) {
    nerf_composite_train(scene, images, rays, n_rays, outputs, dt, loss, seed, dL_doutputs, partials, state, &s);
  });
  b.add_op<NerfCompositeTrainPartials>([](Stream&, uint32_t n_rays) { return nerf_composite_train_partials(n_rays); });
  b.add_op<NerfCompositeRender>([](Stream& s, const NerfRay* rays, uint32_t n_rays, const float* outputs,
                                   const float* dt, nerf::Vec3 background, float* rgba) {
    nerf_composite_render(rays, n_rays, outputs, dt, background, rgba, &s);
  });
  b.add_op<NerfGridSamples>([](Stream& s, const NerfScene& scene, uint32_t n_uniform, uint32_t n_occupied,
                               uint32_t seed, uint32_t* cells, float* positions) {
    nerf_grid_samples(scene, n_uniform, n_occupied, seed, cells, positions, &s);
  });
  b.add_op<NerfGridUpdate>([](Stream& s, uint32_t n_cascades, const uint32_t* cells, const float* raw_density,
                              uint32_t stride, uint32_t n, float decay, float* density, float* scratch,
                              uint8_t* bitfield) {
    nerf_grid_update(n_cascades, cells, raw_density, stride, n, decay, density, scratch, bitfield, &s);
  });
}

}  // namespace tessera::ops::cuda
