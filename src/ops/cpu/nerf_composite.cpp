// CPU reference of NerfCompositeTrain and NerfCompositeRender: volume rendering front to
// back, and for training its exact backward to every sample's raw colour and density.
#include <cmath>

#include "nerf_cpu.h"

namespace tessera::ops::cpu {

using namespace nerf;

namespace {
constexpr float kMinTransmittance = 1e-4f;

struct SampleValues {
  float rgb[3], sigma, alpha;
};
SampleValues sample_values(const float* raw, float dt) {
  SampleValues s;
  for (int k = 0; k < 3; ++k) s.rgb[k] = sigmoid(raw[k]);
  s.sigma = density_activation(raw[3]);
  s.alpha = 1.0f - std::exp(-s.sigma * dt);
  return s;
}

// Composites a ray's samples; returns how many were used (the rest lie behind T < 1e-4).
uint32_t composite(const NerfRay& r, const float* outputs, const float* dt, Vec3 bg, float colour[3],
                   float& transmittance) {
  float T = 1.0f;
  colour[0] = colour[1] = colour[2] = 0.0f;
  uint32_t used = 0;
  for (uint32_t j = 0; j < r.n_samples && T >= kMinTransmittance; ++j, ++used) {
    const uint32_t s = r.first_sample + j;
    const SampleValues v = sample_values(outputs + size_t(s) * kNerfOutputWidth, dt[s]);
    for (int k = 0; k < 3; ++k) colour[k] += T * v.alpha * v.rgb[k];
    T *= 1.0f - v.alpha;
  }
  for (int k = 0; k < 3; ++k) colour[k] += T * bg[k];
  transmittance = T;
  return used;
}
}  // namespace

void nerf_composite_train(const NerfScene& scene, const NerfImages& images, const NerfRay* rays, uint32_t n_rays,
                          const float* outputs, const float* dt, const LossParams& loss, uint32_t seed,
                          float* dL_doutputs, TrainState* state) {
  const float norm = 1.0f / (3.0f * float(n_rays));
  double loss_sum = 0.0;
  for (uint32_t i = 0; i < n_rays; ++i) {
    const NerfRay& r = rays[i];
    const Vec3 bg{random_uniform(seed, i, 10, 1), random_uniform(seed, i, 11, 1), random_uniform(seed, i, 12, 1)};
    const uint8_t* px = images.rgba + (scene.frames[r.frame].pixel_offset + r.pixel) * 4;
    const float alpha = px[3] / 255.0f;
    float target[3], colour[3], T_end;
    for (int k = 0; k < 3; ++k) target[k] = srgb_to_linear(px[k] / 255.0f) * alpha + bg[k] * (1.0f - alpha);
    const uint32_t used = composite(r, outputs, dt, bg, colour, T_end);
    float dL_dC[3];
    for (int k = 0; k < 3; ++k) {
      loss_sum += r.n_samples ? loss_value(loss, colour[k], target[k]) : 0.0f;
      dL_dC[k] = norm * loss_gradient(loss, colour[k], target[k]);
    }
    // dC/dsigma_j = dt_j (T_{j+1} c_j - (C - C_{<=j})), C including the background term.
    float T = 1.0f, prefix[3] = {0, 0, 0};
    for (uint32_t j = 0; j < r.n_samples; ++j) {
      const uint32_t s = r.first_sample + j;
      float* g = dL_doutputs + size_t(s) * kNerfOutputWidth;
      if (j >= used) {
        g[0] = g[1] = g[2] = g[3] = 0.0f;
        continue;
      }
      const float* raw = outputs + size_t(s) * kNerfOutputWidth;
      const SampleValues v = sample_values(raw, dt[s]);
      const float w = T * v.alpha, T_next = T * (1.0f - v.alpha);
      float dL_dsigma = 0.0f;
      for (int k = 0; k < 3; ++k) {
        prefix[k] += w * v.rgb[k];
        g[k] = dL_dC[k] * w * v.rgb[k] * (1.0f - v.rgb[k]);
        dL_dsigma += dL_dC[k] * (T_next * v.rgb[k] - (colour[k] - prefix[k]));
      }
      g[3] = dL_dsigma * dt[s] * density_gradient(raw[3]);
      T = T_next;
    }
  }
  state->last_loss = float(loss_sum * norm);
}

void nerf_composite_render(const NerfRay* rays, uint32_t n_rays, const float* outputs, const float* dt,
                           Vec3 background, float* rgba) {
  for (uint32_t i = 0; i < n_rays; ++i) {
    float colour[3], T;
    composite(rays[i], outputs, dt, background, colour, T);
    for (int k = 0; k < 3; ++k) rgba[4 * i + k] = colour[k];
    rgba[4 * i + 3] = 1.0f - T;
  }
}

}  // namespace tessera::ops::cpu
