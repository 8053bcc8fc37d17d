// SSIM: known closed-form values (identical images; constant images, where only the
// luminance term is left) and a direct double-precision sum over every window on random
// images (the separable, parallel implementation must agree).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "support/errors.h"
#include "support/random.h"
#include "tessera/core/image_metrics.h"

namespace tessera {
namespace {

// SSIM by its definition: every 11x11 window summed directly, in double.
double ssim_direct(const std::vector<float>& a, const std::vector<float>& b, size_t w, size_t h, size_t ch) {
  double g[11], gs = 0;
  for (int i = 0; i < 11; ++i) gs += g[i] = std::exp(-double((i - 5) * (i - 5)) / (2 * 1.5 * 1.5));
  double sum = 0;
  for (size_t c = 0; c < ch; ++c)
    for (size_t y = 0; y + 11 <= h; ++y)
      for (size_t x = 0; x + 11 <= w; ++x) {
        double ma = 0, mb = 0, aa = 0, bb = 0, ab = 0;
        for (int j = 0; j < 11; ++j)
          for (int i = 0; i < 11; ++i) {
            const double wt = g[i] * g[j] / (gs * gs);
            const double va = a[((y + j) * w + x + i) * ch + c], vb = b[((y + j) * w + x + i) * ch + c];
            ma += wt * va, mb += wt * vb, aa += wt * va * va, bb += wt * vb * vb, ab += wt * va * vb;
          }
        const double c1 = 1e-4, c2 = 9e-4;
        sum += (2 * ma * mb + c1) * (2 * (ab - ma * mb) + c2) /
               ((ma * ma + mb * mb + c1) * ((aa - ma * ma) + (bb - mb * mb) + c2));
      }
  return sum / double((w - 10) * (h - 10) * ch);
}

TEST(ImageMetrics, SsimKnownValues) {
  std::vector<float> a(20 * 16 * 3), b(a.size());
  std::mt19937_64 gen(test::fresh_seed());
  std::uniform_real_distribution<float> u(0, 1);
  for (auto& v : a) v = u(gen);
  EXPECT_NEAR(ssim(a.data(), a.data(), 20, 16, 3), 1.0, 1e-12);
  // Constant images x and y: (2xy + C1) / (x^2 + y^2 + C1), the structure term being 1.
  std::fill(a.begin(), a.end(), 0.3f);
  std::fill(b.begin(), b.end(), 0.6f);
  const double x = double(0.3f), y = double(0.6f);
  EXPECT_NEAR(ssim(a.data(), b.data(), 20, 16, 3), (2 * x * y + 1e-4) / (x * x + y * y + 1e-4), 1e-12);
  EXPECT_NE(test::error_of([&] { ssim(a.data(), b.data(), 10, 40, 3); }).find("smaller than"), std::string::npos);
}

TEST(ImageMetrics, SsimMatchesADirectSumOnRandomImages) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> u(0, 1);
  std::normal_distribution<float> noise(0, 0.1f);
  const size_t w = 37, h = 29, ch = 3;
  std::vector<float> a(w * h * ch), b(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    // A smooth image and a noisy copy: SSIM well inside (0, 1).
    const size_t p = i / ch;
    a[i] = 0.5f + 0.4f * std::sin(0.3f * float(p % w) + float(i % ch)) * std::cos(0.2f * float(p / w));
    b[i] = std::clamp(a[i] + noise(gen), 0.0f, 1.0f);
  }
  const double fast = ssim(a.data(), b.data(), w, h, ch), direct = ssim_direct(a, b, w, h, ch);
  EXPECT_GT(direct, 0.2);
  EXPECT_LT(direct, 0.95);
  EXPECT_NEAR(fast, direct, 1e-10);
}

TEST(ImageMetrics, PsnrOfKnownErrorsClampsAndStaysFinite) {
  EXPECT_DOUBLE_EQ(psnr_from_mse(0.01), 20.0);
  EXPECT_DOUBLE_EQ(psnr_from_mse(0.0), 120.0);  // identical images: a finite number JSON can hold
  const float a[4] = {0.1f, 0.5f, 1.7f, -0.2f}, b[4] = {0.2f, 0.5f, 1.0f, 0.0f};  // 1.7 and -0.2 clamp: no error
  EXPECT_NEAR(psnr(a, b, 4), -10.0 * std::log10(0.01 / 4), 1e-5);
}

}  // namespace
}  // namespace tessera
