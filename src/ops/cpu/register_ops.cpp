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
}  // namespace

void register_ops(Backend& b) {
  check_cpu_isa_setting();
  // Convolution: automatic takes im2col + fp32 GEMM (the fast path); direct is the double
  // reference; Winograd in fp32 where its math applies.
  b.add_op<Conv2dForward>([](Stream&, const ConvDesc& d, Activation activation, V x, V w, V bias, V y) {
    check_conv_forward_views(d, x, w, bias, y);
    const ConvAlgo algo = is_automatic(d.algo) ? ConvAlgo::im2col_gemm : d.algo;
    check_conv_algo(ConvOp::forward, d, algo, "cpu",
                    {ConvAlgo::direct, ConvAlgo::im2col_gemm, ConvAlgo::winograd_2x2, ConvAlgo::winograd_4x4});
    const float* b = bias.data<const float>();
    if (algo == ConvAlgo::direct) conv2d_forward(d, activation, x.address(), w.address(), b, y.address());
    else if (algo == ConvAlgo::im2col_gemm) conv2d_forward_im2col(d, activation, x.address(), w.address(), b, y.address());
    else
      conv2d_forward_winograd(d, algo == ConvAlgo::winograd_2x2 ? 2 : 4, activation, x.address(), w.address(), b,
                              y.address());
  });
  b.add_op<Conv2dBackwardData>([](Stream&, const ConvDesc& d, Activation below, V dz, V w, V x, V dx) {
    check_conv_backward_data_views(d, below, dz, w, x, dx);
    const ConvAlgo algo = is_automatic(d.algo) ? ConvAlgo::im2col_gemm : d.algo;
    check_conv_algo(ConvOp::backward_data, d, algo, "cpu",
                    {ConvAlgo::direct, ConvAlgo::im2col_gemm, ConvAlgo::winograd_2x2, ConvAlgo::winograd_4x4});
    if (algo == ConvAlgo::direct) conv2d_backward_data(d, below, dz.address(), w.address(), x.address(), dx.address());
    else if (algo == ConvAlgo::im2col_gemm)
      conv2d_backward_data_im2col(d, below, dz.address(), w.address(), x.address(), dx.address());
    else
      conv2d_backward_data_winograd(d, algo == ConvAlgo::winograd_2x2 ? 2 : 4, below, dz.address(), w.address(),
                                    x.address(), dx.address());
  });
  b.add_op<Conv2dBackwardWeight>([](Stream&, const ConvDesc& d, V x, V dz, V dw, V dbias) {
    check_conv_backward_weight_views(d, x, dz, dw, dbias);
    const ConvAlgo algo = is_automatic(d.algo) ? ConvAlgo::im2col_gemm : d.algo;
    check_conv_algo(ConvOp::backward_weight, d, algo, "cpu", {ConvAlgo::direct, ConvAlgo::im2col_gemm});
    if (algo == ConvAlgo::direct) conv2d_backward_weight(d, x.address(), dz.address(), dw.address(), dbias.data<float>());
    else conv2d_backward_weight_im2col(d, x.address(), dz.address(), dw.address(), dbias.data<float>());
  });
  b.add_op<AdamStep>([](Stream&, const AdamHyper& h, size_t n_matrix, V grad, V params, V, V m, V v,
                        const ParamsAverage& average, V state) {
    const size_t n = params.numel();
    check_adam_views(h, n, grad, m, v, average);
    if (h.bf16_moments)
      adam_step_bf16_moments(h, n, n_matrix, grad.data<const float>(), params.data<float>(), m.data<uint32_t>(),
                             average.values.data<float>(), average.keep, *state.data<TrainState>());
    else
      adam_step(h, n, n_matrix, grad.data<const float>(), params.data<float>(), m.data<float>(), v.data<float>(),
                average.values.data<float>(), average.keep, *state.data<TrainState>());
  });
  b.add_op<SgdStep>([](Stream&, float lr, float l2, V grad, V params, V, V state) {
    check_view(grad, "sgd_step: grad", DType::f32, params.numel());
    sgd_step(lr, l2, params.numel(), grad.data<const float>(), params.data<float>(), *state.data<TrainState>());
  });
  b.add_op<ConvertToHalf>([](Stream&, V src, V dst) {
    check_view(dst, "convert_to_half: dst", DType::f16, src.numel());
    convert_to_half(src.data<const float>(), dst.data<uint16_t>(), src.numel());
  });
  b.add_op<ElementwiseEncode>([](Stream&, const ElementwiseEncoding& e, V in, V out) {
    const size_t batch = check_encoding_views("elementwise_encode", e.n_dims, e.output_width(), in, out);
    elementwise_encode<float>(e, in.data<const float>(), uint32_t(in.row_stride()), batch, out.data<float>(),
                              uint32_t(out.row_stride()));
  });
  b.add_op<ElementwiseEncodeBackward>([](Stream&, const ElementwiseEncoding& e, V in, V dL_dout, V dL_din) {
    const size_t batch =
        check_encoding_views("elementwise_encode_backward", e.n_dims, e.output_width(), in, dL_dout);
    check_encoding_views("elementwise_encode_backward", e.n_dims, e.n_dims, in, dL_din);
    elementwise_encode_backward<float>(e, in.data<const float>(), uint32_t(in.row_stride()), batch,
                                       dL_dout.data<const float>(), uint32_t(dL_dout.row_stride()),
                                       dL_din.data<float>(), uint32_t(dL_din.row_stride()));
  });
  b.add_op<ElementwiseEncodeBackwardBackward>([](Stream&, const ElementwiseEncoding& e, V in, V dL_dout, V dL_ddLdin,
                                                 V dL_ddLdout, V dL_din) {
    const char* op = "elementwise_encode_backward_backward";
    const size_t batch = check_encoding_views(op, e.n_dims, e.output_width(), in, dL_dout);
    check_encoding_views(op, e.n_dims, e.n_dims, in, dL_ddLdin);
    if (dL_ddLdout) check_encoding_views(op, e.n_dims, e.output_width(), in, dL_ddLdout);
    if (dL_din) check_encoding_views(op, e.n_dims, e.n_dims, in, dL_din);
    elementwise_encode_backward_backward<float>(
        e, in.data<const float>(), uint32_t(in.row_stride()), batch, dL_dout.data<const float>(),
        uint32_t(dL_dout.row_stride()), dL_ddLdin.data<const float>(), uint32_t(dL_ddLdin.row_stride()),
        dL_ddLdout.data<float>(), uint32_t(dL_ddLdout.row_stride()), dL_din.data<float>(),
        uint32_t(dL_din.row_stride()));
  });
  b.add_op<GridEncode>([](Stream&, const GridLayout& g, V params, V, V in, V out) {
    const size_t batch = check_encoding_views("grid_encode", g.n_dims, g.output_width(), in, out);
    grid_encode<float>(g, params.data<const float>(), in.data<const float>(), uint32_t(in.row_stride()), batch,
                       out.data<float>(), uint32_t(out.row_stride()));
  });
  b.add_op<GridEncodeHalf>([](Stream&, const GridLayout& g, V params, V, V in, V out) {
    const size_t batch = check_encoding_views("grid_encode_half", g.n_dims, g.output_width(), in, out, DType::f16);
    grid_encode_half(g, params.data<const float>(), in.data<const float>(), uint32_t(in.row_stride()), batch,
                     out.data<uint16_t>(), uint32_t(out.row_stride()));
  });
  b.add_op<GridEncodeBackward>([](Stream&, const GridLayout& g, V params, V, V in, V dL_dout, V dL_dparams,
                                  V dL_din) {
    const size_t batch = check_encoding_views("grid_encode_backward", g.n_dims, g.output_width(), in, dL_dout);
    if (dL_din) check_encoding_views("grid_encode_backward", g.n_dims, g.n_dims, in, dL_din);
    grid_encode_backward<float>(g, params.data<const float>(), in.data<const float>(), uint32_t(in.row_stride()),
                                batch, dL_dout.data<const float>(), uint32_t(dL_dout.row_stride()),
                                dL_dparams.data<float>(), dL_din.data<float>(), uint32_t(dL_din.row_stride()));
  });
  b.add_op<GridEncodeBackwardBackward>([](Stream&, const GridLayout& g, V params, V, V in, V dL_dout, V dL_ddLdin,
                                          V dL_ddLdout, V dL_dparams, V dL_din, V dL_dout_first) {
    const size_t batch = check_grid_backward_backward(g, params, in, dL_dout, dL_ddLdin, dL_ddLdout, dL_dparams, dL_din,
                                                      dL_dout_first);
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
    check_view(image, "sample_image: image", DType::f32, size_t(w) * h * 3);
    check_view(rgb, "sample_image: rgb", DType::f32, xy.rows() * 3);
    sample_image(image.data<const float>(), w, h, seed, xy.rows(), xy.data<float>(), rgb.data<float>());
  });
  b.add_op<Gemv>([](Stream&, GemvOp op, float alpha, V A, V x, float beta, V y, Activation act) {
    const GemvShape s = gemv_shape(op, A, x, y);
    if (A.dtype == DType::f32)
      gemv<float>(s, alpha, A.data<const float>(), x.data<const float>(), beta, y.data<float>(), act);
    else
      gemv<uint16_t>(s, alpha, A.data<const uint16_t>(), x.data<const uint16_t>(), beta, y.data<uint16_t>(), act);
  });
  b.add_op<Ger>([](Stream&, float alpha, V x, V y, V A) {
    check_view(A, "ger: A", DType::f32, A.rows() * A.cols());
    check_view(x, "ger: x", DType::f32, A.rows());
    check_view(y, "ger: y", DType::f32, A.cols());
    ger(A.rows(), A.cols(), alpha, x.data<const float>(), y.data<const float>(), A.data<float>(), A.row_stride());
  });
  b.add_op<Gemm>([](Stream&, const GemmDesc& d, V A, V B, V C) {
    check_gemm_views(d, A, B, C);
    gemm(d, A.address(), B.address(), C.address());
  });
  b.add_op<GemmActivation>([](Stream&, const GemmDesc& d, const GemmEpilogue& e, V A, V B, V C, V Y) {
    check_gemm_activation_views(d, e, A, B, C, Y);
    gemm_activation(d, e, A.address(), B.address(), C.address(), Y.empty() ? nullptr : Y.address());
  });
  b.add_op<ActivationBackward>([](Stream&, Activation act, V y, V g, V dz) {
    check_activation_backward(act, y, g, dz);
    activation_backward(act, dz.numel(), y.data<const float>(), g.data<const float>(), dz.data<float>());
  });
  b.add_op<MatrixAxpby>([](Stream&, float alpha, V src, float beta, V dst) {
    check_matrix_axpby("matrix_axpby", src, dst);
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
    TESSERA_CHECK(grid.layout, "fused_mlp_inference_grid_input: no grid layout given");
    fused_mlp_inference_reference(s, acts, weights, grid, coords, output);
  });
  b.add_op<FusedMlpTrain>([](Stream&, const MlpShape& s, MlpActivations acts, const FusedMlpTrainArgs& args,
                             Workspace&) { fused_mlp_train_reference(s, acts, args); });
  b.add_op<MlpBackwardBackward>([](Stream&, const MlpShape& s, MlpActivations acts, V params, V in, V dL_dout,
                                   V dL_ddLdin, V dL_ddLdout, V dL_dparams, V dL_din, GradientMode mode) {
    const size_t batch = check_mlp_backward_backward(s, params, in, dL_dout, dL_ddLdin, dL_ddLdout, dL_dparams, dL_din);
    if (dL_dparams && mode == GradientMode::overwrite) std::fill_n(dL_dparams.data<float>(), s.n_params(), 0.0f);
    mlp_backward_backward<float>(s, acts, params.data<const float>(), batch, in.data<const float>(), in.row_stride(),
                                 dL_dout.data<const float>(), dL_dout.row_stride(), dL_ddLdin.data<const float>(),
                                 dL_ddLdin.row_stride(), dL_ddLdout.data<float>(), dL_ddLdout.row_stride(),
                                 dL_dparams.data<float>(), dL_din.data<float>(), dL_din.row_stride());
  });
  b.add_op<ActivationForwardHalf>([](Stream&, Activation act, V z, V y16, V y32) {
    check_view(y16, "activation_forward_half: y16", DType::f16, z.numel());
    activation_forward_half(act, z.data<const float>(), y16.data<uint16_t>(), y32.data<float>(), z.numel());
  });
  b.add_op<ActivationBackwardHalf>([](Stream&, Activation act, V z, V dy, V dz16, V state, bool scale_by_loss_scale) {
    check_view(dy, "activation_backward_half: dy", DType::f32, z.numel());
    check_view(dz16, "activation_backward_half: dz16", DType::f16, z.numel());
    activation_backward_half(act, z.data<const float>(), dy.data<const float>(), dz16.data<uint16_t>(), z.numel(),
                             *state.data<const TrainState>(), scale_by_loss_scale);
  });
  b.add_op<Unscale>([](Stream&, V scaled, V dst, bool accumulate, V state) {
    check_view(dst, "unscale: dst", DType::f32, scaled.numel());
    unscale(scaled.data<const float>(), dst.data<float>(), scaled.numel(), accumulate, *state.data<const TrainState>());
  });
  b.add_op<LossPartialsNeeded>([](Stream&, size_t) { return size_t(1); });
  b.add_op<EikonalGradient>([](Stream&, float weight, V g, V dE_dg) {
    const size_t batch = check_eikonal_gradient(weight, g, dE_dg);
#pragma omp parallel for schedule(static) if (batch > 4096)
    for (long long r = 0; r < (long long)batch; ++r)
      eikonal_row_gradient(g.data<const float>() + r * g.row_stride(), dE_dg.data<float>() + r * dE_dg.row_stride(),
                           uint32_t(g.cols()), weight, 1.0f / float(batch));
  });
  b.add_op<LossForwardBackward>([](Stream&, const LossParams& loss, V y_view, V target_view, float norm,
                                   V dL_dy_view, V, V state) {
    const size_t n = y_view.numel();
    check_view(target_view, "loss: target", DType::f32, n);
    check_view(dL_dy_view, "loss: dL_dy", DType::f32, n);
    state.data<TrainState>()->last_loss = loss_forward_backward(
        loss, y_view.data<const float>(), target_view.data<const float>(), n, norm, dL_dy_view.data<float>());
  });
  b.add_op<SettleStep>([](Stream&, V grads_view, V state) {
    settle_step(*state.data<TrainState>(), grads_view.data<const float>(), grads_view.numel());
  });
  b.add_op<GradientBf16Exchange>([](Stream&, V grads, V packed, bool to_bf16, uint32_t ranks) {
    check_view(grads, "gradient_bf16_exchange: grads", DType::f32, grads.numel());
    check_view(packed, "gradient_bf16_exchange: packed", DType::bf16, grads.numel());
    gradient_bf16_exchange(grads.data<float>(), packed.data<uint16_t>(), grads.numel(), to_bf16, ranks);
  });
  b.add_op<NerfMarchRays>([](Stream&, const NerfScene& scene, const NerfRaySelection& rays, V ray_out, V samples,
                              V dt, V counters) {
    check_nerf_march_views(rays, ray_out, samples, dt, counters);
    nerf_march_rays(scene, rays, uint32_t(samples.rows()), ray_out.data<NerfRay>(), samples.data<float>(),
                    dt.data<float>(), counters.data<uint32_t>());
  });
  b.add_op<NerfCompositeTrain>([](Stream&, const NerfScene& scene, const NerfImages& images, V rays, uint32_t n_rays,
                                  V outputs, V dt, V samples, float distortion, const LossParams& loss, uint32_t seed,
                                  V dL_doutputs, V, V state) {
    check_nerf_composite_views(rays, n_rays, outputs, dt, dL_doutputs);
    nerf_composite_train(scene, images, rays.data<NerfRay>(), n_rays, outputs.data<const float>(),
                         dt.data<const float>(), nerf_distortion_of(samples, distortion, outputs), loss, seed,
                         dL_doutputs.data<float>(), state.data<TrainState>());
  });
  b.add_op<NerfCompositeTrainPartials>([](Stream&, uint32_t) { return size_t(1); });
  b.add_op<NerfCompactSamples>([](Stream&, V rays, uint32_t n_rays, V raw_density, uint32_t density_every,
                                  V samples, V dt, V compact_samples, V compact_dt, V count, V) {
    check_nerf_compact_views(rays, n_rays, raw_density, density_every, samples, dt, compact_samples, compact_dt, count);
    nerf_compact_samples(rays.data<NerfRay>(), n_rays, raw_density.data<const float>(), raw_density.row_stride(),
                         density_every, samples.data<const float>(), dt.data<const float>(),
                         uint32_t(compact_samples.rows()), compact_samples.data<float>(), compact_dt.data<float>(),
                         count.data<uint32_t>());
  });
  b.add_op<NerfCompactScratch>([](Stream&, uint32_t) { return size_t(0); });
  b.add_op<NerfPadBatch>([](Stream&, V count, V batch) {
    check_nerf_pad_batch_views(count, batch);
    if (batch.empty()) return;
    nerf_pad_batch(count.data<const uint32_t>()[0], batch.data<float>(), uint32_t(batch.rows()),
                   uint32_t(batch.cols()));
  });
  b.add_op<NerfCompositeRender>([](Stream&, V rays, uint32_t n_rays, V outputs, V dt, nerf::Vec3 background,
                                   V rgba) {
    check_nerf_composite_views(rays, n_rays, outputs, dt, TensorView());
    check_view(rgba, "nerf_composite_render: rgba", DType::f32, size_t(n_rays) * 4);
    nerf_composite_render(rays.data<const NerfRay>(), n_rays, outputs.data<const float>(), dt.data<const float>(),
                          background, rgba.data<float>());
  });
  b.add_op<NerfGridSamples>([](Stream&, const NerfScene& scene, uint32_t n_uniform, uint32_t n_occupied,
                               uint32_t seed, V cells, V positions) {
    check_view(cells, "nerf_grid_samples: cells", DType::u32, size_t(n_uniform) + n_occupied);
    check_view(positions, "nerf_grid_samples: positions", DType::f32, (size_t(n_uniform) + n_occupied) * 6);
    nerf_grid_samples(scene, n_uniform, n_occupied, seed, cells.data<uint32_t>(), positions.data<float>());
  });
  b.add_op<NerfFrameGradients>([](Stream&, const NerfScene& scene, V rays, uint32_t n_rays, V samples, V dL_dsamples,
                                  V pose_gradient, V focal_gradient, V embedding_gradient) {
    check_nerf_frame_gradient_views(scene, rays, n_rays, samples, dL_dsamples, pose_gradient, focal_gradient,
                                    embedding_gradient);
    nerf_frame_gradients(scene, rays.data<const NerfRay>(), n_rays, samples.data<const float>(),
                         dL_dsamples.data<const float>(), uint32_t(samples.cols()),
                         pose_gradient.empty() ? nullptr : pose_gradient.data<float>(),
                         focal_gradient.empty() ? nullptr : focal_gradient.data<float>(),
                         embedding_gradient.empty() ? nullptr : embedding_gradient.data<float>());
  });
  b.add_op<NerfAppendEmbeddings>([](Stream&, V rays, uint32_t n_rays, V samples, V embeddings, V inputs) {
    const uint32_t e = check_nerf_append_embeddings_views(rays, n_rays, samples, embeddings, inputs);
    nerf_append_embeddings(rays.data<const NerfRay>(), n_rays, samples.data<const float>(),
                           embeddings.data<const float>(), uint32_t(embeddings.rows()), e, inputs.data<float>());
  });
  b.add_op<NerfMarkUntrained>([](Stream&, const NerfScene& scene, V density) {
    check_view(density, "nerf_mark_untrained: density", DType::f32, size_t(scene.n_cascades) * nerf::kGridCells);
    nerf_mark_untrained(scene, density.data<float>());
  });
  b.add_op<IsosurfaceCount>([](Stream&, V field, uint32_t res, float threshold, V crossings, V vertex_first,
                               V triangle_first) {
    check_isosurface_count_views(field, res, crossings, vertex_first, triangle_first);
    isosurface_count(field.data<const float>(), res, threshold, crossings.data<uint8_t>(), vertex_first.data<uint32_t>(),
                     triangle_first.data<uint32_t>());
  });
  b.add_op<IsosurfaceEmit>([](Stream&, V field, uint32_t res, float threshold, const nerf::Aabb& box, V crossings,
                              V vertex_first, V triangle_first, V positions, V normals, V triangles) {
    check_isosurface_emit_views(field, res, crossings, vertex_first, triangle_first, positions, normals, triangles);
    isosurface_emit(field.data<const float>(), res, threshold, box, crossings.data<const uint8_t>(),
                    vertex_first.data<const uint32_t>(), triangle_first.data<const uint32_t>(), positions.data<float>(),
                    normals.data<float>(), triangles.data<uint32_t>());
  });
  b.add_op<NerfGridUpdate>([](Stream&, uint32_t n_cascades, V cells, V raw_density, float decay, V density,
                              V scratch, V bitfield) {
    const uint32_t n = check_nerf_grid_update_views(n_cascades, cells, raw_density, density, scratch, bitfield);
    nerf_grid_update(n_cascades, cells.data<const uint32_t>(), raw_density.data<const float>(),
                     uint32_t(raw_density.row_stride()), n, decay, density.data<float>(), scratch.data<float>(),
                     bitfield.data<uint8_t>());
  });
}

}  // namespace tessera::ops::cpu
