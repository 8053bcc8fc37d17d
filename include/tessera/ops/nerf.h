#pragma once
// NeRF ops: sample rays through the occupancy grid, composite the model's outputs along
// each ray (volume rendering) with the loss and its backward, and keep the occupancy grid.
// The math they share is in src/ops/nerf_math.h; the nerf layer (src/nerf) strings them together.
//
// Samples are the model's input rows: [position in the box mapped to [0, 1]^3, direction
// mapped to [0, 1]^3] (6 floats), with their step length dt beside them. The model's output
// per sample is [raw r, g, b, raw density] (4 floats): sigmoid and exp are applied here.
#include <cstdint>

#include "tessera/core/backend.h"
#include "tessera/core/tensor.h"
#include "tessera/ops/loss_kind.h"
#include "tessera/ops/nerf_types.h"
#include "tessera/ops/train_state.h"

namespace tessera::ops {

// Marches the rays; writes ray_out (NerfRay [n_rays], as bytes), samples (fp32 [max_samples,
// 6]: max_samples is its rows), dt (fp32 [max_samples]) and counters (u32 [2]).
// counters[0] = the samples all rays asked for (the next batch's ray count adapts to it);
// min(counters[1], max_samples) bounds the rows written, every one of them belonging to a
// ray. A ray whose samples do not all fit below max_samples gets none (a ray cut short
// would composite as if it ended there), so a batch never overflows. Samples of one ray are
// consecutive; the order of rays' sample ranges, and so which rays miss out when the batch
// is full, may differ between backends.
struct NerfMarchRays {
  static constexpr const char* name = "nerf_march_rays";
  using Fn = void(Stream&, const NerfScene& scene, const NerfRaySelection& rays, const TensorView& ray_out,
                  const TensorView& samples, const TensorView& dt, const TensorView& counters);
  static Contract<Fn> check;
};

// Volume rendering + loss + backward for a training batch: per ray, composites the samples
// front to back (stopping once transmittance < 1e-4) over a random background colour
// (counter-based random numbers of (seed, ray)), compares with the pixel composited over the
// same colour (in the model's colour space; NerfImages says which and how the pixel is
// composited), and writes dL/d(raw output) of every sample (zero past the
// stop) for the mean loss over rays x 3 channels; the mean loss goes to state.last_loss.
// rays: the first n_rays NerfRays of the view (their n_used is set); outputs, dL_doutputs:
// fp32 [samples, 4]. distortion_weight > 0 adds mip-NeRF 360's distortion loss (NerfDistortion)
// x that weight per ray to the mean, and needs `samples`, the rows the outputs were computed
// from (fp32 [>= samples, 6 + embedding width]); otherwise samples may be empty.
struct NerfCompositeTrain {
  static constexpr const char* name = "nerf_composite_train";
  using Fn = void(Stream&, const NerfScene& scene, const NerfImages& images, const TensorView& rays,
                  uint32_t n_rays, const TensorView& outputs, const TensorView& dt, const TensorView& samples,
                  float distortion_weight, const LossParams& loss, uint32_t seed, const TensorView& dL_doutputs,
                  const TensorView& loss_partials, const TensorView& state);
  static Contract<Fn> check;
};
struct NerfCompositeTrainPartials {  // floats of loss_partials NerfCompositeTrain needs
  static constexpr const char* name = "nerf_composite_train_partials";
  using Fn = size_t(Stream&, uint32_t n_rays);
  static Contract<Fn> check;
};

// Compaction before training (instant-ngp's step, the colour network left out of the
// inference): each ray stops where its raw densities (a column of the density network's
// inference on every marched sample, raw_density [samples, 1]) make transmittance fall
// below 1e-4, as NerfCompositeTrain would. With density_every = 2 the network ran on every
// other sample only (rows 0, 2, 4, ...; raw_density [ceil(samples / 2), 1]), and a sample
// between takes the lower density of its neighbours in the same ray (nerf_math.h,
// StopDensities): an estimate of the stop at half the inference that errs towards later.
// The samples in front (n_used of them) and their steps are gathered ray by ray, in ray
// order, into consecutive rows of compact_samples (fp32 [capacity, 6]: the training batch)
// and compact_dt (fp32 [>= capacity]). Each ray is rewritten to its compacted rows
// (first_sample, n_samples = n_used), so that NerfCompositeTrain then runs on the model's
// training forward of compact_samples. Rays whose rows do not all fit below the capacity
// (those at the end, in ray order) keep none: n_samples = n_used = 0, a ray that teaches
// nothing. count (u32 [2]) = [the rows all rays wanted, the rows written]; rows past the
// written ones are left as they were (NerfPadBatch fills them). The counts stay on the
// device: the trainer reads them a step late, never waiting for them.
// scratch: u32 [NerfCompactScratch(n_rays)].
struct NerfCompactSamples {
  static constexpr const char* name = "nerf_compact_samples";
  using Fn = void(Stream&, const TensorView& rays, uint32_t n_rays, const TensorView& raw_density,
                  uint32_t density_every, const TensorView& samples, const TensorView& dt,
                  const TensorView& compact_samples, const TensorView& compact_dt, const TensorView& count,
                  const TensorView& scratch);
  static Contract<Fn> check;
};
struct NerfCompactScratch {
  static constexpr const char* name = "nerf_compact_scratch";
  using Fn = size_t(Stream&, uint32_t n_rays);
  static Contract<Fn> check;
};

// Fills the rows of a training batch past the ones written (batch fp32 [rows, width],
// contiguous; count u32 [>= 1] on the device: the rows written, count[0]) with copies of
// the written rows in turn (row q takes row q mod count), or zeros if none was written, so
// that a step on the whole batch computes only on finite inputs. The trainer gives these
// rows no gradient (dL/d(output) = 0): copies of real samples spread the zero writes of the
// encoding's backward over the cells real samples touch, where one repeated row would pile
// them all onto the same cells.
struct NerfPadBatch {
  static constexpr const char* name = "nerf_pad_batch";
  using Fn = void(Stream&, const TensorView& count, const TensorView& batch);
  static Contract<Fn> check;
};

// Volume rendering for images: rgba[n_rays x 4] = linear colour over `background` and the
// opacity (1 - final transmittance).
struct NerfCompositeRender {
  static constexpr const char* name = "nerf_composite_render";
  using Fn = void(Stream&, const TensorView& rays, uint32_t n_rays, const TensorView& outputs,
                  const TensorView& dt, nerf::Vec3 background, const TensorView& rgba);
  static Contract<Fn> check;
};

// Per-frame appearance embeddings (instant-ngp's n_extra_learnable_dims) as model input: for
// each ray, the rows of its samples (fp32 [rows, 6]) are copied into `inputs` (fp32 [rows, 6 +
// E]) followed by its frame's embedding (embeddings fp32 [frames, E], indexed by NerfRay::frame).
struct NerfAppendEmbeddings {
  static constexpr const char* name = "nerf_append_embeddings";
  using Fn = void(Stream&, const TensorView& rays, uint32_t n_rays, const TensorView& samples,
                  const TensorView& embeddings, const TensorView& inputs);
  static Contract<Fn> check;
};

// Gradients of the per-frame parameters trained beside the model from the model's input
// gradient, for each ray of a compacted batch (rays as NerfCompactSamples left them):
// dL_dsamples and samples are fp32 [rows, 6 + E] (the model's inputs). Where pose_gradient
// (fp32 [n_frames, 6]) is not empty, the position and direction gradients are carried back
// to the ray's origin and direction and added to its frame's: d/d(position offset), then
// d/d(rotation as angle-axis about the camera's centre, applied on the world side)
// (instant-ngp's extrinsics training). Where focal_gradient (fp32 [n_frames]) is not empty,
// d/d(delta) for the frame's focal lengths scaled by e^delta is added to the frame's. Where
// embedding_gradient (fp32 [n_frames, E]) is not empty, the embedding columns' gradients are
// added to the frame's.
struct NerfFrameGradients {
  static constexpr const char* name = "nerf_frame_gradients";
  using Fn = void(Stream&, const NerfScene& scene, const TensorView& rays, uint32_t n_rays, const TensorView& samples,
                  const TensorView& dL_dsamples, const TensorView& pose_gradient,
                  const TensorView& focal_gradient, const TensorView& embedding_gradient);
  static Contract<Fn> check;
};

// ---- occupancy grid: density[n_cascades * kGridCells] (an optical thickness: density x
// kMinStep), its bitfield, and the samples that refresh it ----

// Picks n_uniform random cells and n_occupied random cells among those occupied now
// (rejection sampling from the bitfield, a few tries), a random point in each: writes
// cells (u32 [n]) and model inputs positions (fp32 [n, 6]; direction columns left as they
// are), n = n_uniform + n_occupied.
struct NerfGridSamples {
  static constexpr const char* name = "nerf_grid_samples";
  using Fn = void(Stream&, const NerfScene& scene, uint32_t n_uniform, uint32_t n_occupied, uint32_t seed,
                  const TensorView& cells, const TensorView& positions);
  static Contract<Fn> check;
};

// density[cell] = max(density[cell] * decay, new) for every cell (new = the largest
// density x kMinStep among the cell's samples, 0 without any: unvisited cells fade, as in
// instant-ngp; untrained cells, density < 0, stay), then the bitfield: occupied where
// density > min(0.01, mean density of the finest cascade, untrained cells counted as 0).
// cells: u32 [n]; raw_density: fp32 [n, 1] (a column of the model's output,
// n its rows); scratch holds n_cascades * kGridCells floats.
struct NerfGridUpdate {
  static constexpr const char* name = "nerf_grid_update";
  using Fn = void(Stream&, uint32_t n_cascades, const TensorView& cells, const TensorView& raw_density,
                  float decay, const TensorView& density, const TensorView& scratch, const TensorView& bitfield);
  static Contract<Fn> check;
};

// Marks the cells no training camera sees (none of a cell's corners in front of a camera
// and inside its image): their density becomes -1, which NerfGridUpdate keeps and never
// counts as occupied. scene: its frames (on the device) are the training cameras;
// density: fp32 [n_cascades * kGridCells].
struct NerfMarkUntrained {
  static constexpr const char* name = "nerf_mark_untrained";
  using Fn = void(Stream&, const NerfScene& scene, const TensorView& density);
  static Contract<Fn> check;
};

// NerfCompositeTrain's distortion arguments as the kernels take them (from a call its
// contract passed).
inline NerfDistortion nerf_distortion_of(const TensorView& samples, float weight) {
  if (weight == 0.0f) return {};
  return {weight, samples.data<const float>(), samples.row_stride()};
}

}  // namespace tessera::ops
