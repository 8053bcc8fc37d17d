#include "tessera/nerf/evaluate.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "tessera/core/image_io.h"
#include "tessera/core/image_metrics.h"
#include "ops/nerf_math.h"

namespace tessera::nerf {

using ops::nerf::linear_to_srgb;
using ops::nerf::srgb_to_linear;

namespace {
float clip01(float v) { return std::clamp(v, 0.0f, 1.0f); }

// Colour of pixel i, channel k, over `background` (in the rendering's colour space), as sRGB.
float srgb_over(const RenderedImage& image, size_t i, int k, float background) {
  const float c = image.rgba[4 * i + k] + (1.0f - image.rgba[4 * i + 3]) * background;
  return image.linear_colours ? clip01(linear_to_srgb(clip01(c))) : clip01(c);
}
}  // namespace

std::vector<uint8_t> rendering_to_rgb8(const RenderedImage& image, Vec3 background) {
  std::vector<uint8_t> rgb(size_t(image.width) * image.height * 3);
  // The rendering was made over black: add the background where it shows through.
  float bg[3];
  for (int k = 0; k < 3; ++k) bg[k] = image.linear_colours ? background[k] : linear_to_srgb(background[k]);
  // srgb_over is in [0, 1]: adding 0.5 and truncating rounds as lround does, without a libm
  // call per channel (which cost the web viewer ~10 ms a 800x800 frame).
  for (size_t i = 0; i < size_t(image.width) * image.height; ++i)
    for (int k = 0; k < 3; ++k) rgb[3 * i + k] = uint8_t(255.0f * srgb_over(image, i, k, bg[k]) + 0.5f);
  return rgb;
}

void write_rendering_png(const std::string& path, const RenderedImage& image, Vec3 background) {
  write_png(path, int(image.width), int(image.height), 3, rendering_to_rgb8(image, background));
}

std::vector<FrameView> orbit_cameras(uint32_t n, const CameraModel& camera) {
  using ops::nerf::normalized;
  std::vector<FrameView> frames(n);
  const Vec3 centre{0.5f, 0.5f, 0.5f}, up{0.0f, 1.0f, 0.0f};  // NeRF's +z (up) is instant-ngp's +y
  const float radius = 1.32f, elevation = 0.5236f;
  for (uint32_t i = 0; i < n; ++i) {
    const float a = 6.2831853f * float(i) / float(n);
    const Vec3 eye = centre + radius * Vec3{std::cos(a) * std::cos(elevation), std::sin(elevation),
                                            std::sin(a) * std::cos(elevation)};
    const Vec3 fwd = normalized(centre - eye);
    const Vec3 right = normalized(Vec3{fwd.y * up.z - fwd.z * up.y, fwd.z * up.x - fwd.x * up.z,
                                       fwd.x * up.y - fwd.y * up.x});  // fwd x up
    const Vec3 down{fwd.y * right.z - fwd.z * right.y, fwd.z * right.x - fwd.x * right.z,
                    fwd.x * right.y - fwd.y * right.x};  // fwd x right
    const Vec3 cols[4] = {right, down, fwd, eye};
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 4; ++c) frames[i].c2w[r][c] = cols[c][r];
    frames[i].camera = camera;
  }
  return frames;
}

EvalResult evaluate(NerfTrainer& trainer, const Dataset& test, const EvalOptions& o) {
  EvalResult r;
  const size_t n_views = o.max_views ? std::min<size_t>(o.max_views, test.frames.size()) : test.frames.size();
  if (!o.write_folder.empty()) std::filesystem::create_directories(o.write_folder);
  // Held-back views come from the training photos' capture: its learned focal scale is theirs.
  const float focal_scale = trainer.learned_frame_values().focal_scale;
  for (size_t v = 0; v < n_views; ++v) {
    FrameView view = test.frames[v];
    view.camera.fl_x *= focal_scale, view.camera.fl_y *= focal_scale;
    // Over black once: colour + opacity give the white composite too.
    const RenderedImage img = trainer.render(view, Vec3{0, 0, 0}, o.samples_per_pixel);
    const uint8_t* ref = test.rgba.data() + test.frames[v].pixel_offset * 4;
    double se_white = 0, se_black = 0;
    const size_t n = size_t(img.width) * img.height;
    // The four sRGB images both ways compare (for SSIM, which needs whole images).
    std::vector<float> ref_w(3 * n), out_w(3 * n), ref_b(3 * n), out_b(3 * n);
    for (size_t i = 0; i < n; ++i) {
      const float a = ref[4 * i + 3] / 255.0f;
      for (int k = 0; k < 3; ++k) {
        const float s = ref[4 * i + k] / 255.0f;
        const float ref_white = s * a + (1.0f - a);
        const float out_white = srgb_over(img, i, k, 1.0f);
        const float ref_black = clip01(linear_to_srgb(clip01(srgb_to_linear(s) * a)));
        const float out_black = srgb_over(img, i, k, 0.0f);
        se_white += double(out_white - ref_white) * (out_white - ref_white);
        se_black += double(out_black - ref_black) * (out_black - ref_black);
        ref_w[3 * i + k] = ref_white, out_w[3 * i + k] = out_white;
        ref_b[3 * i + k] = ref_black, out_b[3 * i + k] = out_black;
      }
    }
    ViewScore s;
    s.psnr_white = psnr_from_mse(se_white / double(3 * n));
    s.psnr_black_linear = psnr_from_mse(se_black / double(3 * n));
    if (img.width >= 11 && img.height >= 11) {  // SSIM's window must fit
      s.ssim_white = ssim(out_w.data(), ref_w.data(), img.width, img.height, 3);
      s.ssim_black_linear = ssim(out_b.data(), ref_b.data(), img.width, img.height, 3);
    }
    r.views.push_back(s);
    r.psnr_white += s.psnr_white / double(n_views);
    r.psnr_black_linear += s.psnr_black_linear / double(n_views);
    r.ssim_white += s.ssim_white / double(n_views);
    r.ssim_black_linear += s.ssim_black_linear / double(n_views);
    if (!o.write_folder.empty())
      write_rendering_png((std::filesystem::path(o.write_folder) / fmt::format("test_{:03d}.png", v)).string(), img,
                          Vec3{1, 1, 1});
  }
  return r;
}

}  // namespace tessera::nerf
