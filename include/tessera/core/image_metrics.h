#pragma once
// Image quality metrics for evaluation (PSNR, SSIM) and a sharpness score.
#include <cstddef>

namespace tessera {

// Structural similarity (Wang et al. 2004) of two images with values in [0, 1], as NeRF
// papers report it: an 11x11 Gaussian window (sigma 1.5), K1 = 0.01, K2 = 0.03, the window
// only where it fits in the image ("valid"), the mean of the SSIM map over positions and
// channels. a, b: width x height pixels of `channels` interleaved floats. Images smaller
// than the window are an error.
double ssim(const float* a, const float* b, size_t width, size_t height, size_t channels);

// Peak signal-to-noise ratio for values in [0, 1]: -10 log10(mse), the mse floored at 1e-12
// (120 dB for identical images, a number every JSON writer can hold).
double psnr_from_mse(double mse);
// Of n values, each clamped to [0, 1] first.
double psnr(const float* a, const float* b, size_t n);

// Sharpness of an 8-bit RGBA image (width x height, rows top to bottom): the variance of the
// 4-neighbour Laplacian of its luma (0-255 scale) over the interior pixels. Blur lowers it;
// frames of one capture compare by it. Images under 3x3 score 0.
double laplacian_variance(const unsigned char* rgba, size_t width, size_t height);

}  // namespace tessera
