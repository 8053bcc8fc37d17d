// Contracts of the NeRF ops (march, compaction, composite and its backward, occupancy grid,
// per-frame gradients) and of the isosurface extraction. Ray buffers hold NerfRay records
// (u8 views); sample rows are contiguous fp32 [rows, 6 + embedding width].
#include <cmath>

#include "contract_checks.h"
#include "tessera/core/backend.h"
#include "tessera/ops/isosurface.h"
#include "tessera/ops/nerf.h"

namespace tessera::ops {

namespace {
// A contiguous fp32 matrix [rows, cols] (any number of rows).
void sample_matrix(const char* op, const char* what, const TensorView& v, uint32_t cols) {
  TESSERA_CHECK(v.rank == 2 && v.cols() == cols && v.contiguous() && v.dtype == DType::f32,
                "{}: {} must be a contiguous fp32 [rows, {}] matrix", op, what, cols);
}

void composite_views(const char* op, const TensorView& rays, uint32_t n_rays, const TensorView& outputs,
                     const TensorView& dt) {
  contract::nerf_rays(op, rays, n_rays);
  sample_matrix(op, "outputs", outputs, kNerfOutputWidth);
  contract::view(op, "dt", dt, DType::f32, outputs.rows());
}
}  // namespace

void NerfMarchRays::check(Stream&, const NerfScene&, const NerfRaySelection& rays, const TensorView& ray_out,
                          const TensorView& samples, const TensorView& dt, const TensorView& counters) {
  contract::nerf_rays(name, ray_out, rays.n_rays);
  sample_matrix(name, "samples", samples, kNerfInputWidth);
  contract::view(name, "dt", dt, DType::f32, samples.rows());
  contract::view(name, "counters", counters, DType::u32, 2);
}

void NerfCompositeTrain::check(Stream& stream, const NerfScene&, const NerfImages&, const TensorView& rays,
                               uint32_t n_rays, const TensorView& outputs, const TensorView& dt,
                               const TensorView& samples, float distortion_weight, const LossParams&, uint32_t,
                               const TensorView& dL_doutputs, const TensorView& loss_partials,
                               const TensorView& state) {
  composite_views(name, rays, n_rays, outputs, dt);
  contract::view(name, "dL_doutputs", dL_doutputs, DType::f32, outputs.numel());
  TESSERA_CHECK(std::isfinite(distortion_weight) && distortion_weight >= 0.0f,
                "nerf_composite_train: the distortion weight must be finite and >= 0 (got {})", distortion_weight);
  if (distortion_weight > 0.0f) {
    contract::nerf_sample_rows(name, "samples (for the distortion loss)", samples);
    TESSERA_CHECK(samples.rows() >= outputs.rows(), "nerf_composite_train: samples has {} rows for {} outputs",
                  samples.rows(), outputs.rows());
  }
  contract::view(name, "loss_partials", loss_partials, DType::f32,
                 stream.backend().op<NerfCompositeTrainPartials>()(stream, n_rays));
  contract::train_state(name, state);
}

void NerfCompositeTrainPartials::check(Stream&, uint32_t) {}  // a query: any ray count

void NerfCompactSamples::check(Stream& stream, const TensorView& rays, uint32_t n_rays,
                               const TensorView& raw_density, uint32_t density_every, const TensorView& samples,
                               const TensorView& dt, const TensorView& compact_samples,
                               const TensorView& compact_dt, const TensorView& count, const TensorView& scratch) {
  contract::nerf_rays(name, rays, n_rays);
  sample_matrix(name, "samples", samples, kNerfInputWidth);
  sample_matrix(name, "compact_samples", compact_samples, kNerfInputWidth);
  const size_t rows = samples.rows();
  TESSERA_CHECK(density_every == 1 || density_every == 2,
                "nerf_compact_samples: density_every must be 1 or 2 (got {})", density_every);
  const size_t density_rows = (rows + density_every - 1) / density_every;
  TESSERA_CHECK(raw_density.rank == 2 && raw_density.cols() == 1 && raw_density.dtype == DType::f32 &&
                    raw_density.rows() == density_rows,
                "nerf_compact_samples: raw_density must be an fp32 [{}, 1] column view (one per {} of {} samples)",
                density_rows, density_every == 1 ? "each" : "every other", rows);
  contract::view(name, "dt", dt, DType::f32, rows);
  TESSERA_CHECK(compact_samples.rows() >= 1, "nerf_compact_samples: compact_samples (the batch) has no rows");
  contract::view(name, "compact_dt", compact_dt, DType::f32, compact_samples.rows());
  contract::view(name, "count", count, DType::u32, 2);
  contract::view(name, "scratch", scratch, DType::u32, stream.backend().op<NerfCompactScratch>()(stream, n_rays));
}

void NerfCompactScratch::check(Stream&, uint32_t) {}  // a query: any ray count

void NerfPadBatch::check(Stream&, const TensorView& count, const TensorView& batch) {
  contract::view(name, "count", count, DType::u32, 1);
  TESSERA_CHECK(batch.empty() || (batch.rank == 2 && batch.contiguous() && batch.cols() >= 1),
                "nerf_pad_batch: batch must be a contiguous [rows, width] matrix");
  contract::view(name, "batch", batch, DType::f32, 0);
}

void NerfCompositeRender::check(Stream&, const TensorView& rays, uint32_t n_rays, const TensorView& outputs,
                                const TensorView& dt, nerf::Vec3, const TensorView& rgba) {
  composite_views(name, rays, n_rays, outputs, dt);
  contract::view(name, "rgba", rgba, DType::f32, size_t(n_rays) * 4);
}

void NerfAppendEmbeddings::check(Stream&, const TensorView& rays, uint32_t n_rays, const TensorView& samples,
                                 const TensorView& embeddings, const TensorView& inputs) {
  contract::nerf_rays(name, rays, n_rays);
  sample_matrix(name, "samples", samples, kNerfInputWidth);
  contract::nerf_sample_rows(name, "inputs", inputs);
  const uint32_t e = uint32_t(inputs.cols() - kNerfInputWidth);
  TESSERA_CHECK(inputs.rows() >= samples.rows(), "nerf_append_embeddings: {} input rows for {} samples",
                inputs.rows(), samples.rows());
  TESSERA_CHECK(embeddings.rank == 2 && embeddings.cols() == e && embeddings.contiguous() &&
                    embeddings.dtype == DType::f32,
                "nerf_append_embeddings: embeddings must be a contiguous fp32 [frames, {}] matrix", e);
}

void NerfFrameGradients::check(Stream&, const NerfScene& scene, const TensorView& rays, uint32_t n_rays,
                               const TensorView& samples, const TensorView& dL_dsamples,
                               const TensorView& pose_gradient, const TensorView& focal_gradient,
                               const TensorView& embedding_gradient) {
  contract::nerf_rays(name, rays, n_rays);
  contract::nerf_sample_rows(name, "samples", samples);
  contract::nerf_sample_rows(name, "dL_dsamples", dL_dsamples);
  TESSERA_CHECK(dL_dsamples.rows() == samples.rows() && dL_dsamples.cols() == samples.cols(),
                "nerf_frame_gradients: dL_dsamples [{}, {}] for samples [{}, {}]", dL_dsamples.rows(),
                dL_dsamples.cols(), samples.rows(), samples.cols());
  contract::optional_view(name, "pose_gradient", pose_gradient, DType::f32, size_t(scene.n_frames) * 6);
  contract::optional_view(name, "focal_gradient", focal_gradient, DType::f32, scene.n_frames);
  contract::optional_view(name, "embedding_gradient", embedding_gradient, DType::f32,
                          size_t(scene.n_frames) * (samples.cols() - kNerfInputWidth));
}

void NerfGridSamples::check(Stream&, const NerfScene&, uint32_t n_uniform, uint32_t n_occupied, uint32_t,
                            const TensorView& cells, const TensorView& positions) {
  contract::view(name, "cells", cells, DType::u32, size_t(n_uniform) + n_occupied);
  contract::view(name, "positions", positions, DType::f32, (size_t(n_uniform) + n_occupied) * 6);
}

void NerfGridUpdate::check(Stream&, uint32_t n_cascades, const TensorView& cells, const TensorView& raw_density,
                           float decay, const TensorView& density, const TensorView& scratch,
                           const TensorView& bitfield) {
  TESSERA_CHECK(n_cascades >= 1, "nerf_grid_update: no cascade");
  TESSERA_CHECK(std::isfinite(decay), "nerf_grid_update: the decay {} is not finite", decay);
  TESSERA_CHECK(raw_density.rank == 2 && raw_density.cols() == 1 && raw_density.dtype == DType::f32,
                "nerf_grid_update: raw_density must be an fp32 [n, 1] column view");
  const size_t n = raw_density.rows(), cells_total = size_t(n_cascades) * nerf::kGridCells;
  contract::view(name, "cells", cells, DType::u32, n);
  contract::view(name, "density", density, DType::f32, cells_total);
  contract::view(name, "scratch", scratch, DType::f32, cells_total);
  contract::view(name, "bitfield", bitfield, DType::u8, cells_total / 8);
}

void NerfMarkUntrained::check(Stream&, const NerfScene& scene, const TensorView& density) {
  contract::view(name, "density", density, DType::f32, size_t(scene.n_cascades) * nerf::kGridCells);
}

namespace {
void isosurface_grid(const char* op, const TensorView& field, uint32_t res, const TensorView& crossings,
                     const TensorView& vertex_first, const TensorView& triangle_first) {
  TESSERA_CHECK(res >= 2 && res <= 1024, "{}: res {} is not in 2..1024", op, res);
  const size_t points = size_t(res) * res * res, cubes = size_t(res - 1) * (res - 1) * (res - 1);
  contract::view(op, "field", field, DType::f32, points);
  contract::view(op, "crossings", crossings, DType::u8, points);
  contract::view(op, "vertex_first", vertex_first, DType::u32, points + 1);
  contract::view(op, "triangle_first", triangle_first, DType::u32, cubes + 1);
}
}  // namespace

void IsosurfaceCount::check(Stream&, const TensorView& field, uint32_t res, float, const TensorView& crossings,
                            const TensorView& vertex_first, const TensorView& triangle_first) {
  isosurface_grid(name, field, res, crossings, vertex_first, triangle_first);
}

void IsosurfaceEmit::check(Stream&, const TensorView& field, uint32_t res, float, const nerf::Aabb&,
                           const TensorView& crossings, const TensorView& vertex_first,
                           const TensorView& triangle_first, const TensorView& positions, const TensorView& normals,
                           const TensorView& triangles) {
  isosurface_grid(name, field, res, crossings, vertex_first, triangle_first);
  contract::view(name, "positions", positions, DType::f32, 0);
  contract::view(name, "normals", normals, DType::f32, 0);
  contract::view(name, "triangles", triangles, DType::u32, 0);
}

}  // namespace tessera::ops
