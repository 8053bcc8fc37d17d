#pragma once
// Test-view quality of a NeRF, both ways it is usually reported:
//  (a) NeRF-standard: the sRGB reference composited on white, the rendering on white;
//  (b) instant-ngp's scripts/run.py: the reference composited on black in linear space,
//      both converted to sRGB and clipped.
// Each is the mean over views of the per-view PSNR, and of the per-view SSIM (the sRGB
// images the PSNR compares; see core/image_metrics.h).
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/nerf/trainer.h"

namespace tessera::nerf {

struct ViewScore {
  double psnr_white = 0, psnr_black_linear = 0;
  double ssim_white = 0, ssim_black_linear = 0;  // 0 for views under 11x11 pixels
};

struct EvalResult {
  double psnr_white = 0, psnr_black_linear = 0;
  double ssim_white = 0, ssim_black_linear = 0;
  std::vector<ViewScore> views;
};

struct EvalOptions {
  uint32_t max_views = 0;      // 0: every view
  std::string write_folder;   // non-empty: the renderings (on white) as PNGs there
  // Renderings per pixel averaged (NerfTrainer::render); instant-ngp's run.py uses 8.
  uint32_t samples_per_pixel = 1;
};

// The test views render with the trainer's learned focal scale (1 unless it trains one).
EvalResult evaluate(NerfTrainer& trainer, const Dataset& test, const EvalOptions& options = {});

// n cameras on a circle around the scene's centre (radius 1.32 = NeRF-synthetic's camera
// distance 4 x 0.33, 30 degrees above it), looking at the centre, with `camera`'s intrinsics.
std::vector<FrameView> orbit_cameras(uint32_t n, const CameraModel& camera);

// 8-bit sRGB RGB pixels of a rendering over `background` (linear RGB).
std::vector<uint8_t> rendering_to_rgb8(const RenderedImage& image, Vec3 background);
// 8-bit sRGB PNG of a rendering over `background` (linear RGB).
void write_rendering_png(const std::string& path, const RenderedImage& image, Vec3 background);

}  // namespace tessera::nerf
