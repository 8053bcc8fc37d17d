#pragma once
// The plain structs the NeRF ops exchange (device-copyable; see ops/nerf.h).
#include <cstdint>

#include "tessera/ops/nerf_math.h"

namespace tessera::ops {

constexpr uint32_t kNerfInputWidth = 6, kNerfOutputWidth = 4;

// One ray of a batch: which image and pixel it samples, and its samples [first, first + n).
// n_used: how many of them shaped its colour (those in front of its stop; set by
// NerfCompositeTrain, read by NerfCompactSamples).
struct NerfRay {
  uint32_t frame = 0, pixel = 0;  // pixel = y * width + x
  uint32_t first_sample = 0, n_samples = 0;
  uint32_t n_used = 0;
};

struct NerfScene {
  const nerf::FrameView* frames = nullptr;  // on the device
  uint32_t n_frames = 0;
  nerf::Aabb aabb;
  uint32_t n_cascades = 1;
  float cone_angle = 0.0f;
  const uint8_t* bitfield = nullptr;  // occupancy, one bit per cell of every cascade
};

// Which rays to march. Training: n_rays random pixels of random frames, jittered within the
// pixel and along the ray by counter-based random numbers of (seed, ray). Rendering: the
// pixels [first_pixel, first_pixel + n_rays) of frame `frame`, through pixel centres.
struct NerfRaySelection {
  bool training = true;
  // Training rays through pixel centres (instant-ngp's default; the test views are rendered
  // through pixel centres too) rather than jittered within the pixel.
  bool snap_to_pixel_centres = true;
  uint32_t n_rays = 0;
  uint32_t seed = 0;
  uint32_t frame = 0, first_pixel = 0;
};

// Training images: every frame's RGBA8 (sRGB colour, linear alpha) pixels, packed.
// The model's colours are sRGB (instant-ngp's default: the loss then weighs errors as the
// sRGB test metrics do) or, with linear_colours, linear RGB.
// A training pixel with alpha < 1 is composited over the ray's background in linear light
// (as a camera sees it; instant-ngp's target, and the reference of its run.py metric), or,
// with srgb_compositing and sRGB colours, in sRGB values (the NeRF-synthetic convention of
// compositing the PNGs over white, the reference of the NeRF-standard metric).
struct NerfImages {
  const uint8_t* rgba = nullptr;  // on the device, FrameView::pixel_offset indexes it
  bool linear_colours = false;
  bool srgb_compositing = false;
};

}  // namespace tessera::ops
