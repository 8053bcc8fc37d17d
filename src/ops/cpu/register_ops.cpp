// The CPU backend's op table: the reference implementations, behind the same signatures
// every backend registers (ops/dispatch.h).
#include <cmath>

#include "../register_ops.h"
#include "tessera/ops/conv.h"
#include "tessera/ops/encodings.h"
#include "tessera/ops/gemm.h"
#include "tessera/ops/gemv.h"
#include "tessera/ops/ger.h"
#include "tessera/ops/image_sample.h"
#include "tessera/ops/isosurface.h"
#include "tessera/ops/matrix.h"
#include "fused_mlp_cpu.h"
#include "nerf_cpu.h"
#include "train_step_cpu.h"
#include "tessera/ops/mlp.h"
#include "tessera/ops/optimizers.h"
#include "ops/cpu/cpu_isa.h"
#include "ops/cpu/cpu_kernels.h"

namespace tessera::ops::cpu {

using V = const TensorView&;

namespace {
// benchmark measures on CUDA only; here it is automatic.
bool is_automatic(ConvAlgo a) { return a == ConvAlgo::automatic || a == ConvAlgo::benchmark; }
constexpr std::initializer_list<ConvAlgo> kAlgos = {ConvAlgo::direct, ConvAlgo::im2col_gemm, ConvAlgo::winograd_2x2,
                                                   ConvAlgo::winograd_4x4};
}  // namespace

void register_ops(Backend& b) {
  check_cpu_isa_setting();
  // Convolution: automatic takes im2col + fp32 GEMM (the fast path); direct is the double
  // reference; Winograd in fp32 where its math applies.
  b.add_op<Conv2dForward>([](Stream&, const ConvDesc& d, Activation activation, V x, V w, V bias, V y) {
    const ConvAlgo algo = is_automatic(d.algo) ? ConvAlgo::im2col_gemm : d.algo;
    require_conv_algo(ConvOp::forward, algo, "cpu", kAlgos);
    const float* b = bias.data<const float>();
    if (algo == ConvAlgo::direct) conv2d_forward(d, activation, x.address(), w.address(), b, y.address());
    else if (algo == ConvAlgo::im2col_gemm) conv2d_forward_im2col(d, activation, x.address(), w.address(), b, y.address());
    else
      conv2d_forward_winograd(d, algo == ConvAlgo::winograd_2x2 ? 2 : 4, activation, x.address(), w.address(), b,
                              y.address());
  });
  b.add_op<Conv2dBackwardData>([](Stream&, const ConvDesc& d, Activation below, V dz, V w, V x, V dx) {
    const ConvAlgo algo = is_automatic(d.algo) ? ConvAlgo::im2col_gemm : d.algo;
    require_conv_algo(ConvOp::backward_data, algo, "cpu", kAlgos);
    if (algo == ConvAlgo::direct) conv2d_backward_data(d, below, dz.address(), w.address(), x.address(), dx.address());
    else if (algo == ConvAlgo::im2col_gemm)
      conv2d_backward_data_im2col(d, below, dz.address(), w.address(), x.address(), dx.address());
    else
      conv2d_backward_data_winograd(d, algo == ConvAlgo::winograd_2x2 ? 2 : 4, below, dz.address(), w.address(),
                                    x.address(), dx.address());
  });
  b.add_op<Conv2dBackwardWeight>([](Stream&, const ConvDesc& d, V x, V dz, V dw, V dbias) {
    const ConvAlgo algo = is_automatic(d.algo) ? ConvAlgo::im2col_gemm : d.algo;
    require_conv_algo(ConvOp::backward_weight, algo, "cpu", {ConvAlgo::direct, ConvAlgo::im2col_gemm});
    if (algo == ConvAlgo::direct) conv2d_backward_weight(d, x.address(), dz.address(), dw.address(), dbias.data<float>());
    else conv2d_backward_weight_im2col(d, x.address(), dz.address(), dw.address(), dbias.data<float>());
  });
  b.add_op<AdamStep>([](Stream&, const AdamHyper& h, size_t n_matrix, V grad, V params, V, V m, V v,
                        const ParamsAverage& average, V state) {
    const size_t n = params.numel();
    if (h.bf16_moments)
      adam_step_bf16_moments(h, n, n_matrix, grad.data<const float>(), params.data<float>(), m.data<uint32_t>(),
                             average.values.data<float>(), average.keep, *state.data<TrainState>());
    else
      adam_step(h, n, n_matrix, grad.data<const float>(), params.data<float>(), m.data<float>(), v.data<float>(),
                average.values.data<float>(), average.keep, *state.data<TrainState>());
  });
  b.add_op<SgdStep>([](Stream&, float lr, float l2, V grad, V params, V, V state) {
    sgd_step(lr, l2, params.numel(), grad.data<const float>(), params.data<float>(), *state.data<TrainState>());
  });
  b.add_op<ConvertToHalf>([](Stream&, V src, V dst) {
    convert_to_half(src.data<const float>(), dst.data<uint16_t>(), src.numel());
  });
  b.add_op<ElementwiseEncode>([](Stream&, const ElementwiseEncoding& e, V in, V out) {
    const size_t batch = in.rows();
    elementwise_encode<float>(e, in.data<const float>(), uint32_t(in.row_stride()), batch, out.data<float>(),
                              uint32_t(out.row_stride()));
  });
  b.add_op<ElementwiseEncodeBackward>([](Stream&, const ElementwiseEncoding& e, V in, V dL_dout, V dL_din) {
    const size_t batch = in.rows();
    elementwise_encode_backward<float>(e, in.data<const float>(), uint32_t(in.row_stride()), batch,
                                       dL_dout.data<const float>(), uint32_t(dL_dout.row_stride()),
                                       dL_din.data<float>(), uint32_t(dL_din.row_stride()));
  });
  b.add_op<ElementwiseEncodeBackwardBackward>([](Stream&, const ElementwiseEncoding& e, V in, V dL_dout, V dL_ddLdin,
                                                 V dL_ddLdout, V dL_din) {
    const size_t batch = in.rows();
    elementwise_encode_backward_backward<float>(
        e, in.data<const float>(), uint32_t(in.row_stride()), batch, dL_dout.data<const float>(),
        uint32_t(dL_dout.row_stride()), dL_ddLdin.data<const float>(), uint32_t(dL_ddLdin.row_stride()),
        dL_ddLdout.data<float>(), uint32_t(dL_ddLdout.row_stride()), dL_din.data<float>(),
        uint32_t(dL_din.row_stride()));
  });
  b.add_op<GridEncode>([](Stream&, const GridLayout& g, V params, V, V in, V out) {
    const size_t batch = in.rows();
    grid_encode<float>(g, params.data<const float>(), in.data<const float>(), uint32_t(in.row_stride()), batch,
                       out.data<float>(), uint32_t(out.row_stride()));
  });
  b.add_op<GridEncodeHalf>([](Stream&, const GridLayout& g, V params, V, V in, V out) {
    const size_t batch = in.rows();
    grid_encode_half(g, params.data<const float>(), in.data<const float>(), uint32_t(in.row_stride()), batch,
                     out.data<uint16_t>(), uint32_t(out.row_stride()));
  });
  b.add_op<GridEncodeBackward>([](Stream&, const GridLayout& g, V params, V, V in, V dL_dout, V dL_dparams,
                                  V dL_din) {
    const size_t batch = in.rows();
    grid_encode_backward<float>(g, params.data<const float>(), in.data<const float>(), uint32_t(in.row_stride()),
                                batch, dL_dout.data<const float>(), uint32_t(dL_dout.row_stride()),
                                dL_dparams.data<float>(), dL_din.data<float>(), uint32_t(dL_din.row_stride()));
  });
  b.add_op<GridEncodeBackwardBackward>([](Stream&, const GridLayout& g, V params, V, V in, V dL_dout, V dL_ddLdin,
                                          V dL_ddLdout, V dL_dparams, V dL_din, V dL_dout_first) {
    const size_t batch = in.rows();
    if (dL_dout_first)  // the first backward's parameter gradients (the reference need not share the pass)
      grid_encode_backward<float>(g, params.data<const float>(), in.data<const float>(), uint32_t(in.row_stride()),
                                  batch, dL_dout_first.data<const float>(), uint32_t(dL_dout_first.row_stride()),
                                  dL_dparams.data<float>(), nullptr, 0);
    grid_encode_backward_backward<float>(
        g, params.data<const float>(), in.data<const float>(), uint32_t(in.row_stride()), batch,
        dL_dout.data<const float>(), uint32_t(dL_dout.row_stride()), dL_ddLdin.data<const float>(),
        uint32_t(dL_ddLdin.row_stride()), dL_ddLdout.data<float>(), uint32_t(dL_ddLdout.row_stride()),
        dL_dparams.data<float>(), dL_din.data<float>(), uint32_t(dL_din.row_stride()));
  });
  b.add_op<SampleImage>([](Stream&, V image, uint32_t w, uint32_t h, uint64_t seed, V xy, V rgb) {
    sample_image(image.data<const float>(), w, h, seed, xy.rows(), xy.data<float>(), rgb.data<float>());
  });
  b.add_op<Gemv>([](Stream&, GemvOp op, float alpha, V A, V x, float beta, V y, Activation act) {
    const GemvShape s = gemv_shape(op, A);
    if (A.dtype == DType::f32)
      gemv<float>(s, alpha, A.data<const float>(), x.data<const float>(), beta, y.data<float>(), act);
    else
      gemv<uint16_t>(s, alpha, A.data<const uint16_t>(), x.data<const uint16_t>(), beta, y.data<uint16_t>(), act);
  });
  b.add_op<Ger>([](Stream&, float alpha, V x, V y, V A) {
    ger(A.rows(), A.cols(), alpha, x.data<const float>(), y.data<const float>(), A.data<float>(), A.row_stride());
  });
  b.add_op<Gemm>([](Stream&, const GemmDesc& d, V A, V B, V C) {
    gemm(d, A.address(), B.address(), C.address());
  });
  b.add_op<GemmActivation>([](Stream&, const GemmDesc& d, const GemmEpilogue& e, V A, V B, V C, V Y) {
    gemm_activation(d, e, A.address(), B.address(), C.address(), Y.empty() ? nullptr : Y.address());
  });
  b.add_op<ActivationBackward>([](Stream&, Activation act, V y, V g, V dz) {
    activation_backward(act, dz.numel(), y.data<const float>(), g.data<const float>(), dz.data<float>());
  });
  b.add_op<MatrixAxpby>([](Stream&, float alpha, V src, float beta, V dst) {
    matrix_axpby(dst.rows(), uint32_t(dst.cols()), alpha, src.data<const float>(), uint32_t(src.row_stride()), beta,
                 dst.data<float>(), uint32_t(dst.row_stride()));
  });
  // The fused MLP's reference (the backend-ops harness compares the kernels with it);
  // FullyFusedMlp on the CPU runs its own path with a tape.
  b.add_op<FusedMlpInference>([](Stream&, const MlpShape& s, MlpActivations acts, V weights, V input, V output,
                                 const FusedMlpOptions&) {
    fused_mlp_inference_reference(s, acts, weights, {}, input, output);
  });
  b.add_op<FusedMlpInferenceGridInput>([](Stream&, const MlpShape& s, MlpActivations acts, V weights,
                                          const FusedGridInputViews& grid, V coords, V output,
                                          const FusedMlpOptions&) {
    fused_mlp_inference_reference(s, acts, weights, grid, coords, output);
  });
  b.add_op<FusedMlpTrain>([](Stream&, const MlpShape& s, MlpActivations acts, const FusedMlpTrainArgs& args,
                             Workspace&) { fused_mlp_train_reference(s, acts, args); });
  b.add_op<MlpBackwardBackward>([](Stream&, const MlpShape& s, MlpActivations acts, V params, V in, V dL_dout,
                                   V dL_ddLdin, V dL_ddLdout, V dL_dparams, V dL_din, GradientMode mode) {
    const size_t batch = in.rows();
    if (dL_dparams && mode == GradientMode::overwrite) std::fill_n(dL_dparams.data<float>(), s.n_params(), 0.0f);
    mlp_backward_backward<float>(s, acts, params.data<const float>(), batch, in.data<const float>(), in.row_stride(),
                                 dL_dout.data<const float>(), dL_dout.row_stride(), dL_ddLdin.data<const float>(),
                                 dL_ddLdin.row_stride(), dL_ddLdout.data<float>(), dL_ddLdout.row_stride(),
                                 dL_dparams.data<float>(), dL_din.data<float>(), dL_din.row_stride());
  });
  b.add_op<ActivationForwardHalf>([](Stream&, Activation act, V z, V y16, V y32) {
    activation_forward_half(act, z.data<const float>(), y16.data<uint16_t>(), y32.data<float>(), z.numel());
  });
  b.add_op<ActivationBackwardHalf>([](Stream&, Activation act, V z, V dy, V dz16, V state, bool scale_by_loss_scale) {
    activation_backward_half(act, z.data<const float>(), dy.data<const float>(), dz16.data<uint16_t>(), z.numel(),
                             *state.data<const TrainState>(), scale_by_loss_scale);
  });
  b.add_op<Unscale>([](Stream&, V scaled, V dst, bool accumulate, V state) {
    unscale(scaled.data<const float>(), dst.data<float>(), scaled.numel(), accumulate, *state.data<const TrainState>());
  });
  b.add_op<LossPartialsNeeded>([](Stream&, size_t) { return size_t(0); });  // one pass: no partial sums
  b.add_op<EikonalGradient>([](Stream&, float weight, V g, V dE_dg) {
    const size_t batch = g.rows();
#pragma omp parallel for schedule(static) if (batch > 4096)
    for (long long r = 0; r < (long long)batch; ++r)
      eikonal_row_gradient(g.data<const float>() + r * g.row_stride(), dE_dg.data<float>() + r * dE_dg.row_stride(),
                           uint32_t(g.cols()), weight, 1.0f / float(batch));
  });
  b.add_op<LossForwardBackward>([](Stream&, const LossParams& loss, V y_view, V target_view, float norm,
                                   V dL_dy_view, V, V state) {
    const size_t n = y_view.numel();
    state.data<TrainState>()->last_loss = loss_forward_backward(
        loss, y_view.data<const float>(), target_view.data<const float>(), n, norm, dL_dy_view.data<float>());
  });
  b.add_op<SettleStep>([](Stream&, V grads_view, V state) {
    settle_step(*state.data<TrainState>(), grads_view.data<const float>(), grads_view.numel());
  });
  b.add_op<GradientBf16Exchange>([](Stream&, V grads, V packed, bool to_bf16, uint32_t ranks) {
    gradient_bf16_exchange(grads.data<float>(), packed.data<uint16_t>(), grads.numel(), to_bf16, ranks);
  });
  b.add_op<NerfMarchRays>([](Stream&, const NerfScene& scene, const NerfRaySelection& rays, V ray_out, V samples,
                              V dt, V counters) {
    nerf_march_rays(scene, rays, uint32_t(samples.rows()), ray_out.data<NerfRay>(), samples.data<float>(),
                    dt.data<float>(), counters.data<uint32_t>());
  });
  b.add_op<NerfCompositeTrain>([](Stream&, const NerfScene& scene, const NerfImages& images, V rays, uint32_t n_rays,
                                  V outputs, V dt, V samples, float distortion, const LossParams& loss, uint32_t seed,
                                  V dL_doutputs, V, V state) {
    nerf_composite_train(scene, images, rays.data<NerfRay>(), n_rays, outputs.data<const float>(),
                         dt.data<const float>(), nerf_distortion_of(samples, distortion), loss, seed,
                         dL_doutputs.data<float>(), state.data<TrainState>());
  });
  b.add_op<NerfCompositeTrainPartials>([](Stream&, uint32_t) { return size_t(0); });
  b.add_op<NerfCompactSamples>([](Stream&, V rays, uint32_t n_rays, V raw_density, uint32_t density_every,
                                  V samples, V dt, V compact_samples, V compact_dt, V count, V) {
    nerf_compact_samples(rays.data<NerfRay>(), n_rays, raw_density.data<const float>(), raw_density.row_stride(),
                         density_every, samples.data<const float>(), dt.data<const float>(),
                         uint32_t(compact_samples.rows()), compact_samples.data<float>(), compact_dt.data<float>(),
                         count.data<uint32_t>());
  });
  b.add_op<NerfCompactScratch>([](Stream&, uint32_t) { return size_t(0); });
  b.add_op<NerfPadBatch>([](Stream&, V count, V batch) {
    if (batch.empty()) return;
    nerf_pad_batch(count.data<const uint32_t>()[0], batch.data<float>(), uint32_t(batch.rows()),
                   uint32_t(batch.cols()));
  });
  b.add_op<NerfCompositeRender>([](Stream&, V rays, uint32_t n_rays, V outputs, V dt, nerf::Vec3 background,
                                   V rgba) {
    nerf_composite_render(rays.data<const NerfRay>(), n_rays, outputs.data<const float>(), dt.data<const float>(),
                          background, rgba.data<float>());
  });
  b.add_op<NerfGridSamples>([](Stream&, const NerfScene& scene, uint32_t n_uniform, uint32_t n_occupied,
                               uint32_t seed, V cells, V positions) {
    nerf_grid_samples(scene, n_uniform, n_occupied, seed, cells.data<uint32_t>(), positions.data<float>());
  });
  b.add_op<NerfFrameGradients>([](Stream&, const NerfScene& scene, V rays, uint32_t n_rays, V samples, V dL_dsamples,
                                  V pose_gradient, V focal_gradient, V embedding_gradient) {
    nerf_frame_gradients(scene, rays.data<const NerfRay>(), n_rays, samples.data<const float>(),
                         dL_dsamples.data<const float>(), uint32_t(samples.cols()),
                         pose_gradient.empty() ? nullptr : pose_gradient.data<float>(),
                         focal_gradient.empty() ? nullptr : focal_gradient.data<float>(),
                         embedding_gradient.empty() ? nullptr : embedding_gradient.data<float>());
  });
  b.add_op<NerfAppendEmbeddings>([](Stream&, V rays, uint32_t n_rays, V samples, V embeddings, V inputs) {
    const uint32_t e = uint32_t(inputs.cols() - kNerfInputWidth);
    nerf_append_embeddings(rays.data<const NerfRay>(), n_rays, samples.data<const float>(),
                           embeddings.data<const float>(), uint32_t(embeddings.rows()), e, inputs.data<float>());
  });
  b.add_op<NerfMarkUntrained>([](Stream&, const NerfScene& scene, V density) {
    nerf_mark_untrained(scene, density.data<float>());
  });
  b.add_op<IsosurfaceCount>([](Stream&, V field, uint32_t res, float threshold, V crossings, V vertex_first,
                               V triangle_first) {
    isosurface_count(field.data<const float>(), res, threshold, crossings.data<uint8_t>(), vertex_first.data<uint32_t>(),
                     triangle_first.data<uint32_t>());
  });
  b.add_op<IsosurfaceEmit>([](Stream&, V field, uint32_t res, float threshold, const nerf::Aabb& box, V crossings,
                              V vertex_first, V triangle_first, V positions, V normals, V triangles) {
    isosurface_emit(field.data<const float>(), res, threshold, box, crossings.data<const uint8_t>(),
                    vertex_first.data<const uint32_t>(), triangle_first.data<const uint32_t>(), positions.data<float>(),
                    normals.data<float>(), triangles.data<uint32_t>());
  });
  b.add_op<NerfGridUpdate>([](Stream&, uint32_t n_cascades, V cells, V raw_density, float decay, V density,
                              V scratch, V bitfield) {
    const uint32_t n = uint32_t(raw_density.rows());
    nerf_grid_update(n_cascades, cells.data<const uint32_t>(), raw_density.data<const float>(),
                     uint32_t(raw_density.row_stride()), n, decay, density.data<float>(), scratch.data<float>(),
                     bitfield.data<uint8_t>());
  });
}

}  // namespace tessera::ops::cpu
