#pragma once
// Per-ray and per-cell work of the NeRF ops, shared by the CPU reference (a loop) and the
// CUDA kernels (a thread each), so both compute the same thing by construction.
#include "tessera/ops/loss_kind.h"
#include "tessera/ops/nerf_types.h"
#include "ops/nerf_math.h"
#include "ops/step_math.h"

namespace tessera::ops::nerf {

struct PixelRay {
  uint32_t frame, pixel;
  Ray ray;
  float t_jitter;
};

// Ray i of a selection: its frame and pixel, the ray through it, the jitter of its first step.
TESSERA_HD PixelRay select_ray(const NerfScene& scene, const NerfRaySelection& sel, uint32_t i) {
  PixelRay r;
  float u, v;
  if (sel.training) {
    const float fr = random_uniform(sel.seed, i, 0, 0) * float(scene.n_frames);
    r.frame = uint32_t(fr) < scene.n_frames ? uint32_t(fr) : scene.n_frames - 1;
    const CameraModel& c = scene.frames[r.frame].camera;
    uint32_t x = uint32_t(random_uniform(sel.seed, i, 1, 0) * float(c.width));
    uint32_t y = uint32_t(random_uniform(sel.seed, i, 2, 0) * float(c.height));
    x = x < c.width ? x : c.width - 1;
    y = y < c.height ? y : c.height - 1;
    r.pixel = y * c.width + x;
    u = float(x) + (sel.snap_to_pixel_centres ? 0.5f : random_uniform(sel.seed, i, 3, 0));
    v = float(y) + (sel.snap_to_pixel_centres ? 0.5f : random_uniform(sel.seed, i, 4, 0));
    r.t_jitter = random_uniform(sel.seed, i, 5, 0);
  } else {
    r.frame = sel.frame;
    r.pixel = sel.first_pixel + i;
    const uint32_t w = scene.frames[r.frame].camera.width;
    u = float(r.pixel % w) + 0.5f;
    v = float(r.pixel / w) + 0.5f;
    r.t_jitter = sel.render_passes == 0
                     ? 0.0f
                     : (float(sel.render_pass) + random_uniform(sel.seed, r.pixel, 5, 0)) / float(sel.render_passes);
  }
  r.ray = camera_ray(scene.frames[r.frame], u, v);
  return r;
}

TESSERA_HD MarchSettings march_settings(const NerfScene& s) { return {s.aabb, s.n_cascades, s.cone_angle, s.bitfield}; }

// Writes sample k of a ray (the model's input row and its step).
TESSERA_HD void write_sample(const Ray& ray, const Aabb& box, Vec3 p, float step, float* sample_row, float* dt) {
  const Vec3 q = to_unit_box(p, box);
  sample_row[0] = q.x, sample_row[1] = q.y, sample_row[2] = q.z;
  sample_row[3] = 0.5f * (ray.dir.x + 1.0f), sample_row[4] = 0.5f * (ray.dir.y + 1.0f);
  sample_row[5] = 0.5f * (ray.dir.z + 1.0f);
  *dt = step;
}

// The random background of training ray i.
TESSERA_HD Vec3 training_background(uint32_t seed, uint32_t i) {
  return {random_uniform(seed, i, 10, 1), random_uniform(seed, i, 11, 1), random_uniform(seed, i, 12, 1)};
}

// Adds v to *p: atomically on CUDA (rays of many threads add to one frame's gradient), in
// order on the CPU reference's single thread.
TESSERA_HD void accumulate(float* p, float v) {
#ifdef __CUDA_ARCH__
  atomicAdd(p, v);
#else
  *p += v;
#endif
}

// The colour a training pixel should have (NerfImages says how it is composited and which
// colour space): its sRGB byte s, alpha, the ray's background bg (linear), exposure scale
// `scale` on its linear colour. dtarget_dscale gets d(target)/d(scale).
TESSERA_HD float training_target(const NerfImages& images, float s, float alpha, float bg, float scale,
                                 float& dtarget_dscale) {
  const float lin = srgb_to_linear(s) * scale;
  if (images.linear_colours) {
    dtarget_dscale = srgb_to_linear(s) * alpha;
    return lin * alpha + bg * (1.0f - alpha);
  }
  if (images.srgb_compositing) {  // the exposed colour in sRGB, composited over bg in sRGB
    const float e = scale == 1.0f ? s : linear_to_srgb(lin);
    dtarget_dscale = alpha * linear_to_srgb_derivative(lin) * srgb_to_linear(s);
    return e * alpha + bg * (1.0f - alpha);
  }
  const float y = lin * alpha + srgb_to_linear(bg) * (1.0f - alpha);
  dtarget_dscale = linear_to_srgb_derivative(y) * srgb_to_linear(s) * alpha;
  return linear_to_srgb(y);
}

// The loss of ray r's composited colour against its pixel (summed over the 3 channels),
// dL/dC for the mean over `norm` = 1 / (3 n_rays) (zero for a masked pixel) and whether it
// is masked. With learned exposure and add_exposure_gradient, adds the ray's dL/d(exposure)
// to its frame's.
TESSERA_HD float pixel_loss(const NerfScene& scene, const NerfImages& images, const NerfRay& r, Vec3 bg,
                            const float colour[3], const LossParams& loss, float norm, bool add_exposure_gradient,
                            float dL_dC[3], bool& masked) {
  const uint64_t pixel = scene.frames[r.frame].pixel_offset + r.pixel;
  const uint8_t* px = images.rgba + pixel * 4;
  masked = images.mask && images.mask[pixel];
  const float alpha = float(px[3]) * (1.0f / 255.0f);
  float sum = 0.0f;
  for (int k = 0; k < 3; ++k) {
    // The pixel over the background, in the model's colour space; sRGB colours see the random
    // background as sRGB, so a transparent pixel's target is bg.
    const float scale = images.exposure ? std::exp2(images.exposure[3 * r.frame + k]) : 1.0f;
    float dtarget_dscale;
    const float target =
        training_target(images, float(px[k]) * (1.0f / 255.0f), alpha, bg[k], scale, dtarget_dscale);
    sum += loss_value(loss, colour[k], target);
    dL_dC[k] = masked ? 0.0f : norm * loss_gradient(loss, colour[k], target);
    // Every loss here depends on prediction - target alone, so dL/dtarget = -dL/dC.
    if (add_exposure_gradient && images.exposure_gradient && r.n_samples && !masked)
      accumulate(images.exposure_gradient + 3 * r.frame + k, -dL_dC[k] * dtarget_dscale * scale * kLn2);
  }
  return sum;
}

// Loss of training ray i (summed over its 3 channels) and dL/d(raw) of its samples, for the
// mean over `norm` = 1 / (3 n_rays), the distortion loss included when it is on; sets
// r.n_used. With learned exposure, adds the ray's dL/d(exposure) to its frame's.
TESSERA_HD float composite_train_ray(const NerfScene& scene, const NerfImages& images, NerfRay& r, uint32_t i,
                                     const float* outputs, const float* dt, const NerfDistortion& distortion,
                                     const LossParams& loss, uint32_t seed, float norm, float* dL_doutputs) {
  const Vec3 bg = training_background(seed, i);
  const float* raw = outputs + size_t(r.first_sample) * kNerfOutputWidth;
  const float* steps = dt + r.first_sample;
  float colour[3], T, dL_dC[3];
  const uint32_t used = composite_ray(raw, steps, r.n_samples, bg, colour, T);
  r.n_used = used;
  bool masked;
  float sum = pixel_loss(scene, images, r, bg, colour, loss, norm, true, dL_dC, masked);
  float* grad = dL_doutputs + size_t(r.first_sample) * kNerfOutputWidth;
  composite_ray_backward(raw, steps, r.n_samples, used, colour, dL_dC, grad);
  // The distortion loss is weight x L per ray in the mean over rays: 3 x weight x L in this
  // ray's sum over channels, weight x 3 x norm in its gradient.
  if (distortion.weight > 0.0f && used && !masked)
    sum += 3.0f * distortion.weight *
           distortion_ray_backward(raw, steps, distortion.rows + size_t(r.first_sample) * distortion.stride,
                                   distortion.stride, scene.aabb.max - scene.aabb.min, used,
                                   3.0f * norm * distortion.weight, grad);
  return r.n_samples && !masked ? sum : 0.0f;  // a ray without samples (missed the box) teaches nothing
}

// Ray r's part of its frame's gradients (NerfFrameGradients); rows of `width` = 6 + E floats.
// Pose: each sample at p = o + t d moves with the origin o and turns with the direction d
// about o, so dL/do = sum dL/dp and dL/d(angle-axis) = sum (p - o) x dL/dp + d x dL/dd.
// Focal length: the samples keep their distances t while d turns, so dL/d(delta) =
// (sum t dL/dp + dL/dd) . dd/d(delta). Embedding: the sum of its columns' gradients. Any
// output may be null.
TESSERA_HD void frame_gradients_ray(const NerfScene& scene, const NerfRay& r, const float* samples,
                                    const float* dL_dsamples, uint32_t width, float* pose_gradient,
                                    float* focal_gradient, float* embedding_gradient) {
  if (r.n_samples == 0) return;
  const uint32_t n_embedding = width - kNerfInputWidth;
  if (embedding_gradient) {
    float* out = embedding_gradient + size_t(r.frame) * n_embedding;
    for (uint32_t k = 0; k < n_embedding; ++k) {
      float sum = 0.0f;
      for (uint32_t j = 0; j < r.n_samples; ++j) sum += dL_dsamples[size_t(r.first_sample + j) * width + kNerfInputWidth + k];
      accumulate(out + k, sum);
    }
  }
  if (!pose_gradient && !focal_gradient) return;
  const FrameView& f = scene.frames[r.frame];
  const Vec3 o{f.c2w[0][3], f.c2w[1][3], f.c2w[2][3]};
  const Vec3 extent = scene.aabb.max - scene.aabb.min;
  float g_pos[3] = {0, 0, 0}, g_rot[3] = {0, 0, 0};
  Vec3 g_dir{0, 0, 0}, dir{0, 0, 0};
  for (uint32_t j = 0; j < r.n_samples; ++j) {
    const float* s = samples + size_t(r.first_sample + j) * width;
    const float* g = dL_dsamples + size_t(r.first_sample + j) * width;
    // Rows hold the position mapped to the unit box and the direction mapped to [0, 1].
    const Vec3 p = scene.aabb.min + Vec3{s[0] * extent.x, s[1] * extent.y, s[2] * extent.z} - o;
    const Vec3 dp{g[0] / extent.x, g[1] / extent.y, g[2] / extent.z};
    const Vec3 d{2.0f * s[3] - 1.0f, 2.0f * s[4] - 1.0f, 2.0f * s[5] - 1.0f};
    const Vec3 dd = 0.5f * Vec3{g[3], g[4], g[5]};
    const Vec3 a = cross(p, dp), b = cross(d, dd);
    for (int k = 0; k < 3; ++k) g_pos[k] += dp[k], g_rot[k] += a[k] + b[k];
    g_dir = g_dir + std::sqrt(dot(p, p)) * dp + dd;
    dir = d;
  }
  if (pose_gradient) {
    float* out = pose_gradient + 6 * size_t(r.frame);
    for (int k = 0; k < 3; ++k) accumulate(out + k, g_pos[k]), accumulate(out + 3 + k, g_rot[k]);
  }
  if (focal_gradient) accumulate(focal_gradient + r.frame, dot(g_dir, direction_focal_derivative(f, normalized(dir))));
}

// Ray r's model inputs (NerfAppendEmbeddings): its sample rows, then its frame's embedding
// (zeros for a frame past the n_frames rows of `embeddings`).
TESSERA_HD void append_embeddings_ray(const NerfRay& r, const float* samples, const float* embeddings,
                                      uint32_t n_frames, uint32_t n_embedding, float* inputs) {
  const uint32_t width = kNerfInputWidth + n_embedding;
  for (uint32_t j = 0; j < r.n_samples; ++j) {
    const size_t row = size_t(r.first_sample) + j;
    float* out = inputs + row * width;
    for (uint32_t k = 0; k < kNerfInputWidth; ++k) out[k] = samples[row * kNerfInputWidth + k];
    for (uint32_t k = 0; k < n_embedding; ++k)
      out[kNerfInputWidth + k] = r.frame < n_frames ? embeddings[size_t(r.frame) * n_embedding + k] : 0.0f;
  }
}

// Grid refresh sample i: a cell (uniform, or for i >= n_uniform one found occupied in a few
// tries) and a random point in it, as the model's input.
TESSERA_HD uint32_t grid_sample(const NerfScene& scene, uint32_t n_uniform, uint32_t seed, uint32_t i,
                                float* position_row) {
  const uint32_t total = scene.n_cascades * kGridCells;
  uint32_t cell = random_u32(seed, i, 0) % total;
  for (uint32_t t = 1; i >= n_uniform && t < 16 && !occupied(scene.bitfield, cell); ++t)
    cell = random_u32(seed, i, t) % total;
  float edge;
  const Vec3 corner = cell_corner(cell, edge);
  const Vec3 p = corner + edge * Vec3{random_uniform(seed, i, 100, 0), random_uniform(seed, i, 101, 0),
                                      random_uniform(seed, i, 102, 0)};
  const Vec3 q = to_unit_box(p, scene.aabb);
  position_row[0] = q.x, position_row[1] = q.y, position_row[2] = q.z;
  return cell;
}

// Whether camera f sees point p: its lens maps it inside the image.
TESSERA_HD bool camera_sees(const FrameView& f, Vec3 p) {
  const Vec3 d{p.x - f.c2w[0][3], p.y - f.c2w[1][3], p.z - f.c2w[2][3]};
  float q[3];  // camera coordinates: the rotation's transpose times d
  for (int k = 0; k < 3; ++k) q[k] = f.c2w[0][k] * d.x + f.c2w[1][k] * d.y + f.c2w[2][k] * d.z;
  const CameraModel& c = f.camera;
  float u, v;
  if (!project_to_pixel(c, {q[0], q[1], q[2]}, u, v)) return false;
  return u >= 0.0f && u < float(c.width) && v >= 0.0f && v < float(c.height);
}

// A cell (of any cascade) is trained when some training camera sees one of its corners
// (instant-ngp's mark_untrained_density_grid): the others are never marched through.
// Frame `first` is asked first and becomes the frame that saw the cell: neighbouring cells
// are mostly seen by the same frame, so a caller walking cells in order passes it on.
TESSERA_HD bool cell_seen(const NerfScene& scene, uint32_t cell, uint32_t& first) {
  float edge;
  const Vec3 corner = cell_corner(cell, edge);
  for (uint32_t i = 0; i < scene.n_frames; ++i) {
    const uint32_t f = i == 0 ? first : (i <= first ? i - 1 : i);  // first, then the others in order
    for (uint32_t k = 0; k < 8; ++k)
      if (camera_sees(scene.frames[f], corner + edge * Vec3{float(k & 1), float((k >> 1) & 1), float(k >> 2)})) {
        first = f;
        return true;
      }
  }
  return false;
}
TESSERA_HD bool cell_seen(const NerfScene& scene, uint32_t cell) {
  uint32_t first = 0;
  return cell_seen(scene, cell, first);
}

// A cell's density after an update: untrained cells (negative) stay as they are; others
// decay, and a sampled one takes its new largest density if that is higher.
TESSERA_HD float grid_cell_update(float old, float decay, float fresh) {
  if (old < 0.0f) return old;
  const float decayed = old * decay;
  return decayed > fresh ? decayed : fresh;
}

// The grid's threshold: occupied above min(0.01, mean density of the finest cascade).
TESSERA_HD float grid_threshold(float mean_density) { return mean_density < 0.01f ? mean_density : 0.01f; }

}  // namespace tessera::ops::nerf
