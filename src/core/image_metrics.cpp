#include "tessera/core/image_metrics.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tessera/core/error.h"

namespace tessera {

namespace {

constexpr int kWindow = 11;
constexpr double kSigma = 1.5, kC1 = 0.01 * 0.01, kC2 = 0.03 * 0.03;

std::vector<double> gaussian_window() {
  std::vector<double> w(kWindow);
  double sum = 0;
  for (int i = 0; i < kWindow; ++i) {
    const double x = i - kWindow / 2;
    sum += w[i] = std::exp(-x * x / (2 * kSigma * kSigma));
  }
  for (double& v : w) v /= sum;
  return w;
}

}  // namespace

double psnr_from_mse(double mse) { return -10.0 * std::log10(std::max(mse, 1e-12)); }

double psnr(const float* a, const float* b, size_t n) {
  double se = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = double(std::clamp(a[i], 0.0f, 1.0f)) - double(std::clamp(b[i], 0.0f, 1.0f));
    se += d * d;
  }
  return psnr_from_mse(se / double(std::max<size_t>(n, 1)));
}

double laplacian_variance(const unsigned char* rgba, size_t width, size_t height) {
  if (width < 3 || height < 3) return 0;
  std::vector<float> luma(width * height);
  for (size_t i = 0; i < luma.size(); ++i)
    luma[i] = 0.299f * rgba[4 * i] + 0.587f * rgba[4 * i + 1] + 0.114f * rgba[4 * i + 2];
  double sum = 0, sum2 = 0;
  for (size_t y = 1; y + 1 < height; ++y)
    for (size_t x = 1; x + 1 < width; ++x) {
      const size_t i = y * width + x;
      const double l = double(luma[i - 1]) + luma[i + 1] + luma[i - width] + luma[i + width] - 4.0 * luma[i];
      sum += l, sum2 += l * l;
    }
  const double n = double((width - 2) * (height - 2));
  return std::max(0.0, sum2 / n - (sum / n) * (sum / n));
}

double ssim(const float* a, const float* b, size_t width, size_t height, size_t channels) {
  TESSERA_CHECK(width >= kWindow && height >= kWindow && channels >= 1,
                "ssim: a {}x{} image is smaller than the {}x{} window", width, height, kWindow, kWindow);
  const std::vector<double> w = gaussian_window();
  const size_t out_w = width - kWindow + 1, out_h = height - kWindow + 1;
  double total = 0;
  // The window is separable: filter rows first (the five moments of each pixel), then
  // columns. Rows of the output are independent, so they run in parallel.
  for (size_t c = 0; c < channels; ++c) {
    // Row-filtered moments: [height][out_w] each of mu_a, mu_b, a^2, b^2, ab.
    std::vector<double> rows(5 * height * out_w);
#pragma omp parallel for schedule(static)
    for (long long yy = 0; yy < (long long)height; ++yy) {
      const size_t y = size_t(yy);
      for (size_t x = 0; x < out_w; ++x) {
        double m[5] = {0, 0, 0, 0, 0};
        for (int i = 0; i < kWindow; ++i) {
          const size_t p = (y * width + x + i) * channels + c;
          const double va = a[p], vb = b[p];
          m[0] += w[i] * va, m[1] += w[i] * vb, m[2] += w[i] * va * va, m[3] += w[i] * vb * vb,
              m[4] += w[i] * va * vb;
        }
        for (int k = 0; k < 5; ++k) rows[(size_t(k) * height + y) * out_w + x] = m[k];
      }
    }
    double channel_sum = 0;
#pragma omp parallel for schedule(static) reduction(+ : channel_sum)
    for (long long yy = 0; yy < (long long)out_h; ++yy) {
      const size_t y = size_t(yy);
      for (size_t x = 0; x < out_w; ++x) {
        double m[5] = {0, 0, 0, 0, 0};
        for (int i = 0; i < kWindow; ++i)
          for (int k = 0; k < 5; ++k) m[k] += w[i] * rows[(size_t(k) * height + y + i) * out_w + x];
        const double var_a = m[2] - m[0] * m[0], var_b = m[3] - m[1] * m[1], cov = m[4] - m[0] * m[1];
        channel_sum += ((2 * m[0] * m[1] + kC1) * (2 * cov + kC2)) /
                       ((m[0] * m[0] + m[1] * m[1] + kC1) * (var_a + var_b + kC2));
      }
    }
    total += channel_sum;
  }
  return total / double(out_w * out_h * channels);
}

}  // namespace tessera
