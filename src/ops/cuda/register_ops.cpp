// The CUDA backend's op table: every op runs on the stream it is given.
#include "../register_ops.h"
#include "tessera/ops/conv.h"
#include "tessera/ops/encodings.h"
#include "ops/cuda/fused_mlp_cuda.h"
#include "tessera/ops/gemm.h"
#include "tessera/ops/gemv.h"
#include "tessera/ops/ger.h"
#include "tessera/ops/image_sample.h"
#include "tessera/ops/isosurface.h"
#include "tessera/ops/matrix.h"
#include "tessera/ops/nerf.h"
#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/device_attributes.h"
#include "tessera/ops/optimizers.h"

namespace tessera::ops::cuda {
using V = const TensorView&;

namespace {
// The kernel's view of a grid input; coords: [batch, n_dims] fp32.
FusedGridInput grid_input(const FusedGridInputViews& g, const TensorView& coords) {
  FusedGridInput k;
  k.layout = g.layout;
  k.table = g.table.data<const uint16_t>();
  k.coord_stride = uint32_t(coords.row_stride());
  return k;
}

FusedTrainArgs unwrap(const FusedMlpTrainArgs& a, Stream& s) {
  FusedTrainArgs k;
  k.weights = a.weights.data<const uint16_t>();
  k.batch = a.input.rows();
  if (a.input.dtype == DType::f16) k.input_half = a.input.data<const uint16_t>();
  else k.input = a.input.data<const float>();
  k.target = a.target.data<const float>();
  k.loss = a.loss;
  k.dL_doutput = a.dL_doutput.data<const float>();
  k.target_stride = uint32_t(a.target ? a.target.row_stride() : a.dL_doutput.row_stride());
  k.output = a.output.data<float>();
  if (a.output) k.output_stride = uint32_t(a.output.row_stride());
  k.dL_dinput = a.dL_dinput.data<float>();
  k.dL_dparams = a.dL_dparams.data<float>();
  k.mode = a.mode;
  k.state = a.state.data<TrainState>();
  k.settle = a.settle;
  k.options = a.options;
  k.stream = &s;
  if (a.grid.layout) {
    k.grid = grid_input(a.grid, a.input);
    k.grid.gradients = a.grid.gradients.data<float>();
  }
  return k;
}
}  // namespace

void register_ops(Backend& b) {
  // Convolution: each op runs the algorithm asked for, automatic_conv_algo's choice, or the
  // one benchmark measured fastest.
  b.add_op<Conv2dForward>([](Stream& s, const ConvDesc& d, Activation activation, V x, V w, V bias, V y) {
    auto run = [&](ConvAlgo algo) {
      require_cuda_conv_algo(ConvOp::forward, d, algo);
      if (algo == ConvAlgo::direct)
        conv2d_forward_direct(d, activation, x.address(), w.address(), bias.data<const float>(), y.address(), &s);
      else if (algo == ConvAlgo::im2col_gemm)
        conv2d_forward_im2col(s, d, activation, x.address(), w.address(), bias.data<const float>(), y.address());
      else if (algo == ConvAlgo::implicit_gemm)
        conv2d_forward_implicit_gemm(s, d, activation, x.address(), w.address(), bias.data<const float>(),
                                     y.address());
      else
        conv2d_forward_winograd(s, d, algo == ConvAlgo::winograd_2x2 ? 2 : 4, activation, x.data<const float>(),
                                w.data<const float>(), bias.data<const float>(), y.data<float>());
    };
    run(resolve_conv_algo(s, ConvOp::forward, d, run));
  });
  b.add_op<Conv2dBackwardData>([](Stream& s, const ConvDesc& d, Activation below, V dz, V w, V x, V dx) {
    auto run = [&](ConvAlgo algo) {
      require_cuda_conv_algo(ConvOp::backward_data, d, algo);
      if (algo == ConvAlgo::direct)
        conv2d_backward_data_direct(d, below, dz.address(), w.address(), x.address(), dx.address(), &s);
      else if (algo == ConvAlgo::im2col_gemm)
        conv2d_backward_data_im2col(s, d, below, dz.address(), w.address(), x.address(), dx.address());
      else if (algo == ConvAlgo::implicit_gemm)
        conv2d_backward_data_implicit_gemm(s, d, below, dz.address(), w.address(), x.address(), dx.address());
      else
        conv2d_backward_data_winograd(s, d, algo == ConvAlgo::winograd_2x2 ? 2 : 4, below, dz.data<const float>(),
                                      w.data<const float>(), x.data<const float>(), dx.data<float>());
    };
    run(resolve_conv_algo(s, ConvOp::backward_data, d, run));
  });
  b.add_op<Conv2dBackwardWeight>([](Stream& s, const ConvDesc& d, V x, V dz, V dw, V dbias) {
    auto run = [&](ConvAlgo algo) {
      require_cuda_conv_algo(ConvOp::backward_weight, d, algo);
      if (algo == ConvAlgo::direct)
        conv2d_backward_weight_direct(d, x.address(), dz.address(), dw.address(), dbias.data<float>(), &s);
      else if (algo == ConvAlgo::implicit_gemm)
        conv2d_backward_weight_implicit_gemm(s, d, x.address(), dz.address(), dw.address(), dbias.data<float>());
      else
        conv2d_backward_weight_im2col(s, d, x.address(), dz.address(), dw.address(), dbias.data<float>());
    };
    run(resolve_conv_algo(s, ConvOp::backward_weight, d, run));
  });
  b.add_op<AdamStep>([](Stream& s, const AdamHyper& h, size_t n_matrix, V grad, V params, V params_half, V m, V v,
                        const ParamsAverage& average, V state) {
    const size_t n = params.numel();
    adam_step(h, n, n_matrix, grad.data<const float>(), params.data<float>(), params_half.data<uint16_t>(),
              h.bf16_moments ? nullptr : m.data<float>(), v.data<float>(),
              h.bf16_moments ? m.data<uint32_t>() : nullptr, average.values.data<float>(), average.keep,
              state.data<const TrainState>(), &s);
  });
  b.add_op<SgdStep>([](Stream& s, float lr, float l2, V grad, V params, V params_half, V state) {
    sgd_step(lr, l2, params.numel(), grad.data<const float>(), params.data<float>(), params_half.data<uint16_t>(),
             state.data<const TrainState>(), &s);
  });
  b.add_op<ConvertToHalf>([](Stream& s, V src, V dst) {
    convert_to_half(src.data<const float>(), dst.data<uint16_t>(), src.numel(), &s);
  });
  b.add_op<ElementwiseEncode>([](Stream& s, const ElementwiseEncoding& e, V in, V out) {
    const size_t batch = in.rows();
    elementwise_encode(e, in.data<const float>(), uint32_t(in.row_stride()), batch, out.data<float>(),
                       uint32_t(out.row_stride()), &s);
  });
  b.add_op<ElementwiseEncodeBackward>([](Stream& s, const ElementwiseEncoding& e, V in, V dL_dout, V dL_din) {
    const size_t batch = in.rows();
    elementwise_encode_backward(e, in.data<const float>(), uint32_t(in.row_stride()), batch,
                                dL_dout.data<const float>(), uint32_t(dL_dout.row_stride()), dL_din.data<float>(),
                                uint32_t(dL_din.row_stride()), &s);
  });
  b.add_op<ElementwiseEncodeBackwardBackward>([](Stream& s, const ElementwiseEncoding& e, V in, V dL_dout,
                                                 V dL_ddLdin, V dL_ddLdout, V dL_din) {
    const size_t batch = in.rows();
    elementwise_encode_backward_backward(e, in.data<const float>(), uint32_t(in.row_stride()), batch,
                                         dL_dout.data<const float>(), uint32_t(dL_dout.row_stride()),
                                         dL_ddLdin.data<const float>(), uint32_t(dL_ddLdin.row_stride()),
                                         dL_ddLdout.data<float>(), uint32_t(dL_ddLdout.row_stride()),
                                         dL_din.data<float>(), uint32_t(dL_din.row_stride()), &s);
  });
  b.add_op<GridEncode>([](Stream& s, const GridLayout& g, V, V params_half, V in, V out) {
    const size_t batch = in.rows();
    grid_encode(g, params_half.data<const uint16_t>(), in.data<const float>(), uint32_t(in.row_stride()), batch,
                out.data<float>(), uint32_t(out.row_stride()), &s);
  });
  b.add_op<GridEncodeHalf>([](Stream& s, const GridLayout& g, V, V params_half, V in, V out) {
    const size_t batch = in.rows();
    grid_encode_half(g, params_half.data<const uint16_t>(), in.data<const float>(), uint32_t(in.row_stride()), batch,
                     out.data<uint16_t>(), uint32_t(out.row_stride()), &s);
  });
  b.add_op<GridEncodeBackward>([](Stream& s, const GridLayout& g, V, V params_half, V in, V dL_dout, V dL_dparams,
                                  V dL_din) {
    const size_t batch = in.rows();
    grid_encode_backward(g, params_half.data<const uint16_t>(), in.data<const float>(), uint32_t(in.row_stride()),
                         batch, dL_dout.data<const float>(), uint32_t(dL_dout.row_stride()), dL_dparams.data<float>(),
                         dL_din.data<float>(), uint32_t(dL_din.row_stride()), &s);
  });
  b.add_op<GridEncodeBackwardBackward>([](Stream& s, const GridLayout& g, V params, V params_half, V in, V dL_dout,
                                          V dL_ddLdin, V dL_ddLdout, V dL_dparams, V dL_din, V dL_dout_first) {
    const size_t batch = in.rows();
    grid_encode_backward_backward(g, params_half.data<const uint16_t>(), in.data<const float>(),
                                  uint32_t(in.row_stride()), batch, dL_dout.data<const float>(),
                                  uint32_t(dL_dout.row_stride()), dL_ddLdin.data<const float>(),
                                  uint32_t(dL_ddLdin.row_stride()), dL_ddLdout.data<float>(),
                                  uint32_t(dL_ddLdout.row_stride()), dL_dparams.data<float>(), dL_din.data<float>(),
                                  uint32_t(dL_din.row_stride()), dL_dout_first.data<const float>(),
                                  uint32_t(dL_dout_first.row_stride()), &s);
  });
  b.add_op<SampleImage>([](Stream& s, V image, uint32_t w, uint32_t h, uint64_t seed, V xy, V rgb) {
    sample_image(image.data<const float>(), w, h, seed, xy.rows(), xy.data<float>(), rgb.data<float>(), &s);
  });
  b.add_op<Gemv>([](Stream& s, GemvOp op, float alpha, V A, V x, float beta, V y, Activation act) {
    const GemvShape shape = gemv_shape(op, A);
    if (A.dtype == DType::f32)
      gemv(shape, alpha, A.data<const float>(), x.data<const float>(), beta, y.data<float>(), act, &s);
    else
      gemv(shape, alpha, A.data<const uint16_t>(), x.data<const uint16_t>(), beta, y.data<uint16_t>(), act, &s);
  });
  b.add_op<Ger>([](Stream& s, float alpha, V x, V y, V A) {
    ger(A.rows(), A.cols(), alpha, x.data<const float>(), y.data<const float>(), A.data<float>(), A.row_stride(), &s);
  });
  b.add_op<Gemm>([](Stream& s, const GemmDesc& d, V A, V B, V C) {
    gemm(s, d, A.address(), B.address(), C.address());
  });
  b.add_op<GemmActivation>([](Stream& s, const GemmDesc& d, const GemmEpilogue& e, V A, V B, V C, V Y) {
    gemm_activation(s, d, e, A.address(), B.address(), C.address(), Y.empty() ? nullptr : Y.address());
  });
  b.add_op<ActivationBackward>([](Stream& s, Activation act, V y, V g, V dz) {
    activation_backward(act, dz.numel(), y.data<const float>(), g.data<const float>(), dz.data<float>(), &s);
  });
  b.add_op<MatrixAxpby>([](Stream& s, float alpha, V src, float beta, V dst) {
    matrix_axpby(dst.rows(), uint32_t(dst.cols()), alpha, src.data<const float>(), uint32_t(src.row_stride()), beta,
                 dst.data<float>(), uint32_t(dst.row_stride()), &s);
  });

  b.add_op<FusedMlpInference>([](Stream& s, const MlpShape& shape, MlpActivations acts, V weights, V input,
                                 V output, const FusedMlpOptions& options) {
    const size_t batch = input.rows();
    const uint32_t stride = uint32_t(output.row_stride());
    if (input.dtype == DType::f16)
      fused_mlp_inference_half_input(shape, acts, weights.data<const uint16_t>(), input.data<const uint16_t>(), batch,
                                     output.data<float>(), stride, options, &s);
    else
      fused_mlp_inference(shape, acts, weights.data<const uint16_t>(), input.data<const float>(), batch,
                          output.data<float>(), stride, options, &s);
  });
  b.add_op<FusedMlpTrain>([](Stream& s, const MlpShape& shape, MlpActivations acts, const FusedMlpTrainArgs& args,
                             Workspace& ws) { fused_mlp_train(shape, acts, unwrap(args, s), ws); });
  b.add_op<FusedMlpAcceptsHalfInput>([](Stream&, const MlpShape& shape, MlpActivations acts, size_t batch,
                                        bool training, const FusedMlpOptions& options) {
    return fused_mlp_accepts_half_input(shape, acts, batch, training, options);
  });
  b.add_op<FusedMlpAcceptsGridInput>([](Stream&, const MlpShape& shape, MlpActivations acts, const GridLayout& grid,
                                        size_t batch, bool training, const FusedMlpOptions& options) {
    return fused_mlp_accepts_grid_input(shape, acts, grid, batch, training, options);
  });
  b.add_op<FusedMlpInferenceGridInput>([](Stream& s, const MlpShape& shape, MlpActivations acts, V weights,
                                          const FusedGridInputViews& grid, V coords, V output,
                                          const FusedMlpOptions& options) {
    fused_mlp_inference_grid_input(shape, acts, weights.data<const uint16_t>(),
                                   grid_input(grid, coords),
                                   coords.data<const float>(), coords.rows(), output.data<float>(),
                                   uint32_t(output.row_stride()), options, &s);
  });
  b.add_op<FusedMlpLaunchInfo>([](Stream&, const MlpShape& shape, MlpActivations acts, size_t batch, bool training,
                                  const FusedMlpOptions& options) {
    return fused_mlp_launch_info(shape, acts, batch, training, options);
  });

  b.add_op<ActivationForwardHalf>([](Stream& s, Activation act, V z, V y16, V y32) {
    activation_forward_half(act, z.data<const float>(), y16.data<uint16_t>(), y32.data<float>(), z.numel(), &s);
  });
  b.add_op<ActivationBackwardHalf>([](Stream& s, Activation act, V z, V dy, V dz16, V state,
                                      bool scale_by_loss_scale) {
    activation_backward_half(act, z.data<const float>(), dy.data<const float>(), dz16.data<uint16_t>(), z.numel(),
                             state.data<const TrainState>(), scale_by_loss_scale, &s);
  });
  b.add_op<Unscale>([](Stream& s, V scaled, V dst, bool accumulate, V state) {
    unscale(scaled.data<const float>(), dst.data<float>(), scaled.numel(), accumulate, state.data<const TrainState>(),
            &s);
  });
  b.add_op<MlpBackwardBackward>([](Stream& s, const MlpShape& shape, MlpActivations acts, V params, V in, V dL_dout,
                                   V dL_ddLdin, V dL_ddLdout, V dL_dparams, V dL_din, GradientMode mode) {
    const size_t batch = in.rows();
    mlp_backward_backward(s, shape, acts, params.data<const float>(), batch, in.data<const float>(), in.row_stride(),
                          dL_dout.data<const float>(), dL_dout.row_stride(), dL_ddLdin.data<const float>(),
                          dL_ddLdin.row_stride(), dL_ddLdout.data<float>(), dL_ddLdout.row_stride(),
                          dL_dparams.data<float>(), mode == GradientMode::accumulate, dL_din.data<float>(),
                          dL_din.row_stride());
  });
  b.add_op<EikonalGradient>([](Stream& s, float weight, V g, V dE_dg) {
    const size_t batch = g.rows();
    eikonal_gradient(weight, g.data<const float>(), g.row_stride(), dE_dg.data<float>(), dE_dg.row_stride(), batch,
                     uint32_t(g.cols()), &s);
  });
  b.add_op<LossForwardBackward>([](Stream& s, const LossParams& loss, V y, V target, float norm, V dL_dy,
                                   V partials, V state) {
    const size_t n = y.numel();
    loss_forward_backward(loss, y.data<const float>(), target.data<const float>(), n, norm, dL_dy.data<float>(),
                          partials.data<float>(), state.data<TrainState>(), &s);
  });
  b.add_op<LossPartialsNeeded>([](Stream&, size_t n) { return loss_partials_needed(n); });
  b.add_op<SettleStep>([](Stream& s, V grads, V state) {
    settle_step(grads.data<const float>(), grads.numel(), state.data<TrainState>(), &s);
  });
  b.add_op<GradientBf16Exchange>([](Stream& s, V grads, V packed, bool to_bf16, uint32_t ranks) {
    gradient_bf16_exchange(grads.data<float>(), packed.data<uint16_t>(), grads.numel(), to_bf16, ranks, &s);
  });
  b.add_op<NerfMarchRays>([](Stream& s, const NerfScene& scene, const NerfRaySelection& rays, V ray_out, V samples,
                              V dt, V counters) {
    nerf_march_rays(scene, rays, uint32_t(samples.rows()), ray_out.data<NerfRay>(), samples.data<float>(),
                    dt.data<float>(), counters.data<uint32_t>(), &s);
  });
  b.add_op<NerfCompositeTrain>([](Stream& s, const NerfScene& scene, const NerfImages& images, V rays,
                                  uint32_t n_rays, V outputs, V dt, V samples, float distortion,
                                  const LossParams& loss, uint32_t seed, V dL_doutputs, V partials, V state) {
    nerf_composite_train(scene, images, rays.data<NerfRay>(), n_rays, outputs.data<const float>(),
                         dt.data<const float>(), nerf_distortion_of(samples, distortion), loss, seed, dL_doutputs.data<float>(), partials.data<float>(),
                         state.data<TrainState>(), &s);
  });
  b.add_op<NerfCompositeTrainPartials>([](Stream&, uint32_t n_rays) { return nerf_composite_train_partials(n_rays); });
  b.add_op<NerfCompactSamples>([](Stream& s, V rays, uint32_t n_rays, V raw_density, uint32_t density_every,
                                  V samples, V dt, V compact_samples, V compact_dt, V count, V scratch) {
    nerf_compact_samples(rays.data<NerfRay>(), n_rays, raw_density.data<const float>(), raw_density.row_stride(),
                         density_every, samples.data<const float>(), dt.data<const float>(),
                         uint32_t(compact_samples.rows()), compact_samples.data<float>(), compact_dt.data<float>(),
                         count.data<uint32_t>(), scratch.data<uint32_t>(), &s);
  });
  b.add_op<NerfCompactScratch>([](Stream&, uint32_t n_rays) { return nerf_compact_scratch(n_rays); });
  b.add_op<NerfPadBatch>([](Stream& s, V count, V batch) {
    if (batch.empty()) return;
    nerf_pad_batch(count.data<const uint32_t>(), batch.data<float>(), uint32_t(batch.rows()), uint32_t(batch.cols()),
                   &s);
  });
  b.add_op<NerfCompositeRender>([](Stream& s, V rays, uint32_t n_rays, V outputs, V dt, nerf::Vec3 background,
                                   V rgba) {
    nerf_composite_render(rays.data<const NerfRay>(), n_rays, outputs.data<const float>(), dt.data<const float>(),
                          background, rgba.data<float>(), &s);
  });
  b.add_op<NerfGridSamples>([](Stream& s, const NerfScene& scene, uint32_t n_uniform, uint32_t n_occupied,
                               uint32_t seed, V cells, V positions) {
    nerf_grid_samples(scene, n_uniform, n_occupied, seed, cells.data<uint32_t>(), positions.data<float>(), &s);
  });
  b.add_op<NerfFrameGradients>([](Stream& s, const NerfScene& scene, V rays, uint32_t n_rays, V samples,
                                  V dL_dsamples, V pose_gradient, V focal_gradient, V embedding_gradient) {
    nerf_frame_gradients(scene, rays.data<const NerfRay>(), n_rays, samples.data<const float>(),
                         dL_dsamples.data<const float>(), uint32_t(samples.cols()),
                         pose_gradient.empty() ? nullptr : pose_gradient.data<float>(),
                         focal_gradient.empty() ? nullptr : focal_gradient.data<float>(),
                         embedding_gradient.empty() ? nullptr : embedding_gradient.data<float>(), &s);
  });
  b.add_op<NerfAppendEmbeddings>([](Stream& s, V rays, uint32_t n_rays, V samples, V embeddings, V inputs) {
    const uint32_t e = uint32_t(inputs.cols() - kNerfInputWidth);
    nerf_append_embeddings(rays.data<const NerfRay>(), n_rays, samples.data<const float>(),
                           embeddings.data<const float>(), uint32_t(embeddings.rows()), e, inputs.data<float>(), &s);
  });
  b.add_op<NerfMarkUntrained>([](Stream& s, const NerfScene& scene, V density) {
    nerf_mark_untrained(scene, density.data<float>(), &s);
  });
  b.add_op<IsosurfaceCount>([](Stream& s, V field, uint32_t res, float threshold, V crossings, V vertex_first,
                               V triangle_first) {
    isosurface_count(field.data<const float>(), res, threshold, crossings.data<uint8_t>(), vertex_first.data<uint32_t>(),
                     triangle_first.data<uint32_t>(), &s);
  });
  b.add_op<IsosurfaceEmit>([](Stream& s, V field, uint32_t res, float threshold, const nerf::Aabb& box, V crossings,
                              V vertex_first, V triangle_first, V positions, V normals, V triangles) {
    isosurface_emit(field.data<const float>(), res, threshold, box, crossings.data<const uint8_t>(),
                    vertex_first.data<const uint32_t>(), triangle_first.data<const uint32_t>(), positions.data<float>(),
                    normals.data<float>(), triangles.data<uint32_t>(), &s);
  });
  b.add_op<NerfGridUpdate>([](Stream& s, uint32_t n_cascades, V cells, V raw_density, float decay, V density,
                              V scratch, V bitfield) {
    const uint32_t n = uint32_t(raw_density.rows());
    nerf_grid_update(n_cascades, cells.data<const uint32_t>(), raw_density.data<const float>(),
                     uint32_t(raw_density.row_stride()), n, decay, density.data<float>(), scratch.data<float>(),
                     bitfield.data<uint8_t>(), &s);
  });
}

}  // namespace tessera::ops::cuda
