// Backend-independent checks of the views an op is given: every backend's registration
// calls these before it unwraps the views, so a wrong call is the same clear error
// everywhere.
#include <cmath>
#include <initializer_list>

#include "tessera/core/error.h"
#include "tessera/ops/encodings.h"
#include "tessera/ops/fused_mlp.h"
#include "tessera/ops/gemm.h"
#include "tessera/ops/gemv.h"
#include "tessera/ops/matrix.h"
#include "tessera/ops/mlp.h"
#include "tessera/ops/nerf.h"
#include "tessera/ops/optimizers.h"
#include "tessera/ops/train_state.h"
#include "ops/activation_math.h"

namespace tessera::ops {

void check_adam_views(const AdamHyper& h, size_t n, const TensorView& grad, const TensorView& m, const TensorView& v,
                      const ParamsAverage& average) {
  check_view(grad, "adam_step: grad", DType::f32, n);
  if (h.bf16_moments) {
    check_view(m, "adam_step: packed bf16 moments", DType::u32, n);
    TESSERA_CHECK(v.empty(), "adam_step: with bf16_moments, m holds both moments and v must be empty");
  } else {
    check_view(m, "adam_step: m", DType::f32, n);
    check_view(v, "adam_step: v", DType::f32, n);
  }
  if (!average.values.empty()) check_view(average.values, "adam_step: average", DType::f32, n);
}

GemvShape gemv_shape(GemvOp op, const TensorView& A, const TensorView& x, const TensorView& y) {
  TESSERA_CHECK(A.rank == 2, "gemv: A must be a matrix view (rank 2), not rank {}", A.rank);
  TESSERA_CHECK(A.dtype == DType::f32 || A.dtype == DType::f16, "gemv: A is {}; fp32 and fp16 are supported",
                to_string(A.dtype));
  GemvShape s;
  s.op = op;
  s.rows = A.rows();
  s.cols = A.cols();
  s.lda = A.row_stride();
  check_view(x, "gemv: x", A.dtype, s.x_size());
  check_view(y, "gemv: y", A.dtype, s.y_size());
  TESSERA_CHECK(x.contiguous() && y.contiguous(), "gemv: x and y must be contiguous vectors");
  return s;
}

namespace {
// Elements an operand spans from its first element: the last batch entry's last element + 1.
size_t operand_extent(const GemmOperand& o, size_t rows, size_t cols, size_t batch) {
  if (rows == 0 || cols == 0 || batch == 0) return 0;
  // Stored shape: op(X) is rows x cols; the stored matrix is its transpose when transposed.
  const size_t stored_rows = o.transpose ? cols : rows, stored_cols = o.transpose ? rows : cols;
  const size_t outer = o.layout == Layout::row_major ? stored_rows : stored_cols;
  const size_t inner = o.layout == Layout::row_major ? stored_cols : stored_rows;
  const size_t one = (outer - 1) * o.ld + inner;
  return size_t(o.batch_stride) * (batch - 1) + one;
}
}  // namespace

void check_gemm_views(const GemmDesc& d, const TensorView& A, const TensorView& B, const TensorView& C) {
  check_gemm(d);
  check_view(A, "gemm: A", d.a.type, operand_extent(d.a, d.M, d.K, d.batch));
  check_view(B, "gemm: B", d.b.type, operand_extent(d.b, d.K, d.N, d.batch));
  check_view(C, "gemm: C", d.c.type, operand_extent(d.c, d.M, d.N, d.batch));
  for (const TensorView* v : {&A, &B, &C})
    TESSERA_CHECK(v->contiguous(), "gemm: operands are given as contiguous storage (the descriptor has the strides)");
}

void check_gemm_activation_views(const GemmDesc& d, const GemmEpilogue& e, const TensorView& A, const TensorView& B,
                                 const TensorView& C, const TensorView& Y) {
  check_gemm_views(d, A, B, C);
  TESSERA_CHECK(d.beta == 0.0f, "gemm_activation: beta must be 0 (the epilogue replaces C), not {}", d.beta);
  TESSERA_CHECK(!activation_needs_input(e.act),
                "gemm_activation: {} needs its input for the derivative; only activations whose derivative "
                "follows from the output can be fused",
                to_string(e.act));
  if (e.kind == GemmEpilogueKind::activation_derivative) {
    check_view(Y, "gemm_activation: Y", d.c.type, operand_extent(d.c, d.M, d.N, d.batch));
    TESSERA_CHECK(Y.contiguous(), "gemm_activation: Y is given as contiguous storage (C's strides apply)");
  }
}

size_t check_encoding_views(const char* op, uint32_t in_width, uint32_t out_width, const TensorView& in,
                            const TensorView& out, DType out_dtype) {
  TESSERA_CHECK(in.rank == 2 && out.rank == 2, "{}: input and output must be matrix views", op);
  TESSERA_CHECK(in.dtype == DType::f32, "{}: the input is {}, not fp32", op, to_string(in.dtype));
  TESSERA_CHECK(out.dtype == out_dtype, "{}: the output is {}, not {}", op, to_string(out.dtype),
                to_string(out_dtype));
  TESSERA_CHECK(in.cols() >= in_width, "{}: the input has {} columns, the encoding reads {}", op, in.cols(),
                in_width);
  TESSERA_CHECK(out.cols() == out_width, "{}: the output has {} columns, the encoding writes {}", op, out.cols(),
                out_width);
  TESSERA_CHECK(in.rows() == out.rows(), "{}: {} input rows but {} output rows", op, in.rows(), out.rows());
  TESSERA_CHECK(in.strides[1] == 1 && out.strides[1] == 1, "{}: rows must be contiguous", op);
  return in.rows();
}

size_t check_grid_backward_backward(const GridLayout& g, const TensorView& params, const TensorView& in,
                                    const TensorView& dL_dout, const TensorView& dL_ddLdin,
                                    const TensorView& dL_ddLdout, const TensorView& dL_dparams,
                                    const TensorView& dL_din, const TensorView& dL_dout_first) {
  const char* op = "grid_encode_backward_backward";
  if (dL_dout_first) {
    check_encoding_views(op, g.n_dims, g.output_width(), in, dL_dout_first);
    TESSERA_CHECK(dL_dparams, "grid_encode_backward_backward: dL_dout_first needs dL_dparams (its gradients go there)");
  }
  const size_t batch = check_encoding_views(op, g.n_dims, g.output_width(), in, dL_dout);
  check_encoding_views(op, g.n_dims, g.n_dims, in, dL_ddLdin);
  if (dL_ddLdout) check_encoding_views(op, g.n_dims, g.output_width(), in, dL_ddLdout);
  if (dL_din) check_encoding_views(op, g.n_dims, g.n_dims, in, dL_din);
  check_view(params, "grid_encode_backward_backward: params", DType::f32, g.n_params());
  if (dL_dparams) check_view(dL_dparams, "grid_encode_backward_backward: dL_dparams", DType::f32, g.n_params());
  return batch;
}

size_t check_eikonal_gradient(float weight, const TensorView& g, const TensorView& dE_dg) {
  TESSERA_CHECK(std::isfinite(weight), "eikonal_gradient: the weight {} is not finite", weight);
  for (const auto& [v, name] : {std::pair{&g, "g"}, std::pair{&dE_dg, "dE_dg"}})
    TESSERA_CHECK(v->rank == 2 && v->dtype == DType::f32 && v->strides[1] == 1,
                  "eikonal_gradient: {} must be an fp32 matrix view with contiguous rows", name);
  TESSERA_CHECK(g.rows() == dE_dg.rows() && g.cols() == dE_dg.cols(), "eikonal_gradient: g is {}x{} but dE_dg {}x{}",
                g.rows(), g.cols(), dE_dg.rows(), dE_dg.cols());
  return g.rows();
}

size_t check_mlp_backward_backward(const MlpShape& shape, const TensorView& params, const TensorView& in,
                                   const TensorView& dL_dout, const TensorView& dL_ddLdin,
                                   const TensorView& dL_ddLdout, const TensorView& dL_dparams,
                                   const TensorView& dL_din) {
  const char* op = "mlp_backward_backward";
  const size_t batch = in.rank == 2 ? in.rows() : 0;
  const auto matrix = [&](const TensorView& v, const char* name, uint32_t width) {
    TESSERA_CHECK(v.rank == 2 && v.dtype == DType::f32 && v.strides[1] == 1,
                  "{}: {} must be an fp32 matrix view with contiguous rows", op, name);
    TESSERA_CHECK(v.rows() == batch && v.cols() == width, "{}: {} is {}x{}, expected {}x{}", op, name, v.rows(),
                  v.cols(), batch, width);
  };
  matrix(in, "in", shape.input_width);
  matrix(dL_dout, "dL_dout", shape.output_width);
  matrix(dL_ddLdin, "dL_ddLdin", shape.input_width);
  if (dL_ddLdout) matrix(dL_ddLdout, "dL_ddLdout", shape.output_width);
  if (dL_din) matrix(dL_din, "dL_din", shape.input_width);
  check_view(params, "mlp_backward_backward: params", DType::f32, shape.n_params());
  if (dL_dparams) check_view(dL_dparams, "mlp_backward_backward: dL_dparams", DType::f32, shape.n_params());
  return batch;
}

void check_matrix_axpby(const char* op, const TensorView& src, const TensorView& dst) {
  TESSERA_CHECK(dst.rank == 2 && dst.dtype == DType::f32, "{}: dst must be an fp32 matrix view", op);
  TESSERA_CHECK(dst.strides[1] == 1, "{}: rows must be contiguous", op);
  if (src.empty()) return;
  TESSERA_CHECK(src.rank == 2 && src.dtype == DType::f32 && src.strides[1] == 1,
                "{}: src must be an fp32 matrix view with contiguous rows", op);
  TESSERA_CHECK(src.rows() == dst.rows() && src.cols() == dst.cols(), "{}: src is {}x{} but dst is {}x{}", op,
                src.rows(), src.cols(), dst.rows(), dst.cols());
}

void check_activation_backward(Activation act, const TensorView& y, const TensorView& g, const TensorView& dz) {
  TESSERA_CHECK(!activation_needs_input(act),
                "activation_backward: {}'s derivative needs its input, not its output", to_string(act));
  const size_t n = dz.numel();
  check_view(dz, "activation_backward: dz", DType::f32, n);
  check_view(y, "activation_backward: y", DType::f32, n);
  check_view(g, "activation_backward: g", DType::f32, n);
  TESSERA_CHECK(dz.contiguous() && y.contiguous() && g.contiguous(), "activation_backward: views must be contiguous");
}

void check_nerf_march_views(const NerfRaySelection& rays, const TensorView& ray_out, const TensorView& samples,
                            const TensorView& dt, const TensorView& counters) {
  check_view(ray_out, "nerf_march_rays: rays", DType::u8, size_t(rays.n_rays) * sizeof(NerfRay));
  TESSERA_CHECK(samples.rank == 2 && samples.cols() == kNerfInputWidth && samples.contiguous(),
                "nerf_march_rays: samples must be a contiguous [max_samples, {}] matrix", kNerfInputWidth);
  check_view(samples, "nerf_march_rays: samples", DType::f32, 0);
  check_view(dt, "nerf_march_rays: dt", DType::f32, samples.rows());
  check_view(counters, "nerf_march_rays: counters", DType::u32, 2);
}

void check_nerf_composite_views(const TensorView& rays, uint32_t n_rays, const TensorView& outputs,
                                const TensorView& dt, const TensorView& dL_doutputs) {
  check_view(rays, "nerf composite: rays", DType::u8, size_t(n_rays) * sizeof(NerfRay));
  TESSERA_CHECK(outputs.rank == 2 && outputs.cols() == kNerfOutputWidth && outputs.contiguous(),
                "nerf composite: outputs must be a contiguous [samples, {}] matrix", kNerfOutputWidth);
  check_view(outputs, "nerf composite: outputs", DType::f32, 0);
  check_view(dt, "nerf composite: dt", DType::f32, outputs.rows());
  if (!dL_doutputs.empty()) check_view(dL_doutputs, "nerf composite: dL_doutputs", DType::f32, outputs.numel());
}

namespace {
// A fused MLP's fp32 row matrix [batch, width]: each row's values contiguous; rows apart
// (columns of a wider matrix) only where `strided`.
void check_fused_rows(const char* op, const char* what, const TensorView& v, size_t batch, size_t width,
                      bool strided) {
  if (v.empty()) return;
  TESSERA_CHECK(v.rank == 2 && v.dtype == DType::f32 && v.rows() == batch && v.cols() == width && v.strides[1] == 1,
                "{}: {} must be an fp32 [{}, {}] matrix view, got {} of rank {} [{}, {}]", op, what, batch, width,
                to_string(v.dtype), v.rank, v.rows(), v.cols());
  TESSERA_CHECK(strided || v.contiguous(), "{}: {} must be contiguous rows (its row stride is {} for {} columns)", op,
                what, v.row_stride(), width);
}

void check_fused_input(const char* op, const MlpShape& s, const GridLayout* grid, const TensorView& input) {
  TESSERA_CHECK(input.rank == 2 && (!input.empty() || input.rows() == 0),
                "{}: the input must be a matrix view [batch, {}]", op, grid ? grid->n_dims : s.input_width);
  if (grid) {
    TESSERA_CHECK(grid->output_width() == s.input_width, "{}: the grid puts out {} features, the network takes {}", op,
                  grid->output_width(), s.input_width);
    return check_fused_rows(op, "the grid's coordinates", input, input.rows(), grid->n_dims, true);
  }
  if (input.dtype == DType::f16) {
    TESSERA_CHECK(input.cols() == s.input_width && input.contiguous(),
                  "{}: an fp16 input must be contiguous rows [batch, {}], got [{}, {}]", op, s.input_width,
                  input.rows(), input.cols());
    return;
  }
  check_fused_rows(op, "the input", input, input.rows(), s.input_width, false);
}
}  // namespace

void check_fused_mlp_inference(const char* op, const MlpShape& s, const GridLayout* grid, const TensorView& input,
                               const TensorView& output) {
  check_fused_input(op, s, grid, input);
  TESSERA_CHECK(!output.empty() || input.rows() == 0, "{}: no output given", op);
  check_fused_rows(op, "the output", output, input.rows(), s.output_width, true);
}

void check_fused_mlp_train(const MlpShape& s, const FusedMlpTrainArgs& a) {
  const char* op = "fused_mlp_train";
  check_fused_input(op, s, a.grid.layout, a.input);
  const size_t batch = a.input.rows();
  TESSERA_CHECK(a.target.empty() != a.dL_doutput.empty(),
                "{}: give exactly one of a target (with a loss) or dL/doutput", op);
  check_fused_rows(op, "the target", a.target, batch, s.output_width, true);
  check_fused_rows(op, "dL/doutput", a.dL_doutput, batch, s.output_width, true);
  check_fused_rows(op, "the output", a.output, batch, s.output_width, true);
  TESSERA_CHECK(!a.grid.layout || a.dL_dinput.empty(), "{}: no dL/dinput with a grid input", op);
  check_fused_rows(op, "dL/dinput", a.dL_dinput, batch, s.input_width, false);
  check_view(a.dL_dparams, "fused_mlp_train: dL_dparams", DType::f32, s.n_params());
  check_view(a.state, "fused_mlp_train: state", DType::u8, sizeof(TrainState));
}

namespace {
void check_sample_rows(const TensorView& v, const char* what) {
  TESSERA_CHECK(v.rank == 2 && v.cols() >= kNerfInputWidth && v.contiguous() && v.dtype == DType::f32,
                "{} must be a contiguous fp32 [rows, {} + embedding width] matrix", what, kNerfInputWidth);
}
}  // namespace

NerfDistortion nerf_distortion_of(const TensorView& samples, float weight, const TensorView& outputs) {
  TESSERA_CHECK(std::isfinite(weight) && weight >= 0.0f,
                "nerf_composite_train: the distortion weight must be finite and >= 0 (got {})", weight);
  if (weight == 0.0f) return {};
  check_sample_rows(samples, "nerf_composite_train: samples (for the distortion loss)");
  TESSERA_CHECK(samples.rows() >= outputs.rows(), "nerf_composite_train: samples has {} rows for {} outputs",
                samples.rows(), outputs.rows());
  return {weight, samples.data<const float>(), samples.row_stride()};
}

void check_nerf_frame_gradient_views(const NerfScene& scene, const TensorView& rays, uint32_t n_rays,
                                     const TensorView& samples, const TensorView& dL_dsamples,
                                     const TensorView& pose_gradient, const TensorView& focal_gradient,
                                     const TensorView& embedding_gradient) {
  check_view(rays, "nerf_frame_gradients: rays", DType::u8, size_t(n_rays) * sizeof(NerfRay));
  check_sample_rows(samples, "nerf_frame_gradients: samples");
  check_sample_rows(dL_dsamples, "nerf_frame_gradients: dL_dsamples");
  TESSERA_CHECK(dL_dsamples.rows() == samples.rows() && dL_dsamples.cols() == samples.cols(),
                "nerf_frame_gradients: dL_dsamples [{}, {}] for samples [{}, {}]", dL_dsamples.rows(),
                dL_dsamples.cols(), samples.rows(), samples.cols());
  if (!pose_gradient.empty())
    check_view(pose_gradient, "nerf_frame_gradients: pose_gradient", DType::f32, size_t(scene.n_frames) * 6);
  if (!focal_gradient.empty())
    check_view(focal_gradient, "nerf_frame_gradients: focal_gradient", DType::f32, scene.n_frames);
  if (!embedding_gradient.empty())
    check_view(embedding_gradient, "nerf_frame_gradients: embedding_gradient", DType::f32,
               size_t(scene.n_frames) * (samples.cols() - kNerfInputWidth));
}

uint32_t check_nerf_append_embeddings_views(const TensorView& rays, uint32_t n_rays, const TensorView& samples,
                                            const TensorView& embeddings, const TensorView& inputs) {
  check_view(rays, "nerf_append_embeddings: rays", DType::u8, size_t(n_rays) * sizeof(NerfRay));
  TESSERA_CHECK(samples.rank == 2 && samples.cols() == kNerfInputWidth && samples.contiguous() &&
                    samples.dtype == DType::f32,
                "nerf_append_embeddings: samples must be a contiguous fp32 [rows, {}] matrix", kNerfInputWidth);
  check_sample_rows(inputs, "nerf_append_embeddings: inputs");
  const uint32_t e = uint32_t(inputs.cols() - kNerfInputWidth);
  TESSERA_CHECK(inputs.rows() >= samples.rows(), "nerf_append_embeddings: {} input rows for {} samples",
                inputs.rows(), samples.rows());
  TESSERA_CHECK(embeddings.rank == 2 && embeddings.cols() == e && embeddings.contiguous() &&
                    embeddings.dtype == DType::f32,
                "nerf_append_embeddings: embeddings must be a contiguous fp32 [frames, {}] matrix", e);
  return e;
}

void check_nerf_compact_views(const TensorView& rays, uint32_t n_rays, const TensorView& raw_density,
                              uint32_t density_every, const TensorView& samples, const TensorView& dt,
                              const TensorView& compact_samples, const TensorView& compact_dt,
                              const TensorView& count) {
  check_view(rays, "nerf_compact_samples: rays", DType::u8, size_t(n_rays) * sizeof(NerfRay));
  const auto matrix = [](const TensorView& v, uint32_t cols, const char* what) {
    TESSERA_CHECK(v.rank == 2 && v.cols() == cols && v.contiguous(),
                  "{} must be a contiguous [rows, {}] matrix", what, cols);
    check_view(v, what, DType::f32, 0);
  };
  matrix(samples, kNerfInputWidth, "nerf_compact_samples: samples");
  matrix(compact_samples, kNerfInputWidth, "nerf_compact_samples: compact_samples");
  const size_t rows = samples.rows();
  TESSERA_CHECK(density_every == 1 || density_every == 2,
                "nerf_compact_samples: density_every must be 1 or 2 (got {})", density_every);
  const size_t density_rows = (rows + density_every - 1) / density_every;
  TESSERA_CHECK(raw_density.rank == 2 && raw_density.cols() == 1 && raw_density.dtype == DType::f32 &&
                    raw_density.rows() == density_rows,
                "nerf_compact_samples: raw_density must be an fp32 [{}, 1] column view (one per {} of {} samples)",
                density_rows, density_every == 1 ? "each" : "every other", rows);
  check_view(dt, "nerf_compact_samples: dt", DType::f32, rows);
  TESSERA_CHECK(compact_samples.rows() >= 1, "nerf_compact_samples: compact_samples (the batch) has no rows");
  check_view(compact_dt, "nerf_compact_samples: compact_dt", DType::f32, compact_samples.rows());
  check_view(count, "nerf_compact_samples: count", DType::u32, 2);
}

void check_nerf_pad_batch_views(const TensorView& count, const TensorView& batch) {
  check_view(count, "nerf_pad_batch: count", DType::u32, 1);
  TESSERA_CHECK(batch.rank == 2 && batch.contiguous() && batch.cols() >= 1,
                "nerf_pad_batch: batch must be a contiguous [rows, width] matrix");
  check_view(batch, "nerf_pad_batch: batch", DType::f32, 0);
}

uint32_t check_nerf_grid_update_views(uint32_t n_cascades, const TensorView& cells, const TensorView& raw_density,
                                      const TensorView& density, const TensorView& scratch,
                                      const TensorView& bitfield) {
  TESSERA_CHECK(raw_density.rank == 2 && raw_density.cols() == 1 && raw_density.dtype == DType::f32,
                "nerf_grid_update: raw_density must be an fp32 [n, 1] column view");
  const size_t n = raw_density.rows(), cells_total = size_t(n_cascades) * nerf::kGridCells;
  check_view(cells, "nerf_grid_update: cells", DType::u32, n);
  check_view(density, "nerf_grid_update: density", DType::f32, cells_total);
  check_view(scratch, "nerf_grid_update: scratch", DType::f32, cells_total);
  check_view(bitfield, "nerf_grid_update: bitfield", DType::u8, cells_total / 8);
  return uint32_t(n);
}

}  // namespace tessera::ops
