// The CPU backend's op table: the reference implementations, behind the same signatures
// every backend registers (ops/dispatch.h).
#include <cmath>

#include "../register_ops.h"
#include "tessera/ops/encodings.h"
#include "tessera/ops/gemm.h"
#include "tessera/ops/gemv.h"
#include "tessera/ops/ger.h"
#include "tessera/ops/image_sample.h"
#include "tessera/ops/matrix.h"
#include "nerf_cpu.h"
#include "tessera/ops/mlp_gemm_cuda.h"
#include "tessera/ops/optimizers.h"

namespace tessera::ops::cpu {

void register_ops(Backend& b) {
  b.add_op<AdamStep>([](Stream&, const AdamHyper& h, size_t n, size_t n_matrix, const float* grad, float* params,
                        uint16_t*, float* m, float* v, TrainState* state) {
    adam_step(h, n, n_matrix, grad, params, m, v, *state);
  });
  b.add_op<SgdStep>([](Stream&, float lr, float l2, size_t n, const float* grad, float* params, uint16_t*,
                       TrainState* state) { sgd_step(lr, l2, n, grad, params, *state); });
  b.add_op<ConvertToHalf>([](Stream&, const float* src, uint16_t* dst, size_t n) { convert_to_half(src, dst, n); });
  b.add_op<ElementwiseEncode>([](Stream&, const ElementwiseEncoding& e, const float* in, uint32_t in_stride,
                                 size_t batch, float* out, uint32_t out_stride) {
    elementwise_encode<float>(e, in, in_stride, batch, out, out_stride);
  });
  b.add_op<ElementwiseEncodeBackward>([](Stream&, const ElementwiseEncoding& e, const float* in, uint32_t in_stride,
                                         size_t batch, const float* dL_dout, uint32_t dout_stride, float* dL_din,
                                         uint32_t din_stride) {
    elementwise_encode_backward<float>(e, in, in_stride, batch, dL_dout, dout_stride, dL_din, din_stride);
  });
  b.add_op<GridEncode>([](Stream&, const GridLayout& g, const float* params, const uint16_t*, const float* in,
                          uint32_t in_stride, size_t batch, float* out, uint32_t out_stride) {
    grid_encode<float>(g, params, in, in_stride, batch, out, out_stride);
  });
  b.add_op<GridEncodeBackward>([](Stream&, const GridLayout& g, const float* params, const uint16_t*,
                                  const float* in, uint32_t in_stride, size_t batch, const float* dL_dout,
                                  uint32_t dout_stride, float* dL_dparams, float* dL_din, uint32_t din_stride) {
    grid_encode_backward<float>(g, params, in, in_stride, batch, dL_dout, dout_stride, dL_dparams, dL_din,
                                din_stride);
  });
  b.add_op<SampleImage>([](Stream&, const float* image, uint32_t w, uint32_t h, uint64_t seed, size_t n, float* xy,
                           float* rgb) { sample_image(image, w, h, seed, n, xy, rgb); });
  b.add_op<Gemv>([](Stream&, const GemvShape& s, float alpha, const float* A, const float* x, float beta, float* y,
                    Activation act) { gemv<float>(s, alpha, A, x, beta, y, act); });
  b.add_op<GemvHalf>([](Stream&, const GemvShape& s, float alpha, const uint16_t* A, const uint16_t* x, float beta,
                        uint16_t* y, Activation act) { gemv<uint16_t>(s, alpha, A, x, beta, y, act); });
  b.add_op<Ger>([](Stream&, size_t rows, size_t cols, float alpha, const float* x, const float* y, float* A,
                   size_t lda) { ger(rows, cols, alpha, x, y, A, lda); });
  b.add_op<Gemm>([](Stream&, const GemmDesc& d, const void* A, const void* B, void* C) { gemm(d, A, B, C); });
  b.add_op<MatrixAxpby>([](Stream&, size_t rows, uint32_t cols, float alpha, const float* src, uint32_t src_stride,
                           float beta, float* dst, uint32_t dst_stride) {
    matrix_axpby(rows, cols, alpha, src, src_stride, beta, dst, dst_stride);
  });
  b.add_op<LossPartialsNeeded>([](Stream&, size_t) { return size_t(1); });
  b.add_op<LossForwardBackward>([](Stream&, const LossParams& loss, const float* y, const float* target, size_t n,
                                   float norm, float* dL_dy, float*, TrainState* state) {
    double sum = 0.0;
    for (size_t i = 0; i < n; ++i) {
      sum += loss_value(loss, y[i], target[i]);
      dL_dy[i] = norm * loss_gradient(loss, y[i], target[i]);
    }
    state->last_loss = float(sum * norm);
  });
  b.add_op<SettleStep>([](Stream&, const float* grads, size_t n, TrainState* state) {
    bool finite = true;
    for (size_t i = 0; i < n && finite; ++i) finite = std::isfinite(grads[i]);
    finish_step(*state, finite);
  });
  b.add_op<NerfMarchRays>([](Stream&, const NerfScene& scene, const NerfRaySelection& rays, uint32_t max_samples,
                              NerfRay* ray_out, float* samples, float* dt, uint32_t* counters) {
    nerf_march_rays(scene, rays, max_samples, ray_out, samples, dt, counters);
  });
  b.add_op<NerfCompositeTrain>([](Stream&, const NerfScene& scene, const NerfImages& images, const NerfRay* rays,
                                  uint32_t n_rays, const float* outputs, const float* dt, const LossParams& loss,
                                  uint32_t seed, float* dL_doutputs, float*, TrainState* state) {
    nerf_composite_train(scene, images, rays, n_rays, outputs, dt, loss, seed, dL_doutputs, state);
  });
  b.add_op<NerfCompositeTrainPartials>([](Stream&, uint32_t) { return size_t(1); });
  b.add_op<NerfCompositeRender>([](Stream&, const NerfRay* rays, uint32_t n_rays, const float* outputs,
                                   const float* dt, nerf::Vec3 background, float* rgba) {
    nerf_composite_render(rays, n_rays, outputs, dt, background, rgba);
  });
  b.add_op<NerfGridSamples>([](Stream&, const NerfScene& scene, uint32_t n_uniform, uint32_t n_occupied,
                               uint32_t seed, uint32_t* cells, float* positions) {
    nerf_grid_samples(scene, n_uniform, n_occupied, seed, cells, positions);
  });
  b.add_op<NerfGridUpdate>([](Stream&, uint32_t n_cascades, const uint32_t* cells, const float* raw_density,
                              uint32_t stride, uint32_t n, float decay, float* density, float* scratch,
                              uint8_t* bitfield) {
    nerf_grid_update(n_cascades, cells, raw_density, stride, n, decay, density, scratch, bitfield);
  });
}

}  // namespace tessera::ops::cpu
