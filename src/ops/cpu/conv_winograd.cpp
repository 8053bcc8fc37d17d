// Winograd F(m x m, 3x3) on the CPU in fp32 (m = 2: 4x4 tiles, 2.25x fewer multiplies than
// direct; m = 4: 6x6 tiles, 4x fewer): filters transformed once (U = G g G^T), each input
// tile transformed (V = B^T d B), then for each of the alpha^2 tile positions a product
// over channels (M = U V: K x C times C x tiles), and each output tile transformed back
// (Y = A^T M A). The reference the GPU transforms are tested against; its error against
// the double direct reference is measured in tests/ops/test_conv_cpu.cpp.
// Backward-data is the forward of the flipped, transposed filters over dz padded by 2 - pad.
#include <algorithm>
#include <vector>

#include "conv_index.h"
#include "tessera/ops/conv.h"
#include "typed_storage.h"
#include "ops/activation_math.h"
#include "ops/cpu/cpu_kernels.h"

namespace tessera::ops::cpu {

namespace {

// Lavin & Gray's matrices. F(2x2,3x3): interpolation points 0, 1, -1 (and infinity).
constexpr float kBT2[4][4] = {{1, 0, -1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, 1, 0, -1}};
constexpr float kG2[4][3] = {{1, 0, 0}, {0.5f, 0.5f, 0.5f}, {0.5f, -0.5f, 0.5f}, {0, 0, 1}};
constexpr float kAT2[2][4] = {{1, 1, 1, 0}, {0, 1, -1, -1}};
// F(4x4,3x3): points 0, 1, -1, 2, -2 (and infinity).
constexpr float kBT4[6][6] = {{4, 0, -5, 0, 1, 0},  {0, -4, -4, 1, 1, 0}, {0, 4, -4, -1, 1, 0},
                              {0, -2, -1, 2, 1, 0}, {0, 2, -1, -2, 1, 0}, {0, 4, 0, -5, 0, 1}};
constexpr float kG4[6][3] = {{1.0f / 4, 0, 0},
                             {-1.0f / 6, -1.0f / 6, -1.0f / 6},
                             {-1.0f / 6, 1.0f / 6, -1.0f / 6},
                             {1.0f / 24, 1.0f / 12, 1.0f / 6},
                             {1.0f / 24, -1.0f / 12, 1.0f / 6},
                             {0, 0, 1}};
constexpr float kAT4[4][6] = {{1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 0}, {0, 1, 1, 4, 4, 0}, {0, 1, -1, 8, -8, 1}};

constexpr int kMaxAlpha = 6;
constexpr uint32_t kTilesPerItem = 32;  // output tiles per unit of parallel work

struct Transforms {
  int m, alpha;
  const float* BT;  // [alpha][alpha]
  const float* G;   // [alpha][3]
  const float* AT;  // [m][alpha]
  explicit Transforms(int m_)
      : m(m_), alpha(m_ + 2), BT(m_ == 2 ? &kBT2[0][0] : &kBT4[0][0]), G(m_ == 2 ? &kG2[0][0] : &kG4[0][0]),
        AT(m_ == 2 ? &kAT2[0][0] : &kAT4[0][0]) {}
  // out[a x b] = L[a x n] in[n x n'] R^T where R is [b x n'] (row-major, all small).
  static void sandwich(const float* L, int a, int n, const float* in, int n2, const float* R, int b, float* out) {
    float tmp[kMaxAlpha * kMaxAlpha];
    for (int i = 0; i < a; ++i)
      for (int j = 0; j < n2; ++j) {
        float s = 0;
        for (int k = 0; k < n; ++k) s += L[i * n + k] * in[k * n2 + j];
        tmp[i * n2 + j] = s;
      }
    for (int i = 0; i < a; ++i)
      for (int j = 0; j < b; ++j) {
        float s = 0;
        for (int k = 0; k < n2; ++k) s += tmp[i * n2 + k] * R[j * n2 + k];
        out[i * b + j] = s;
      }
  }
};

// y(n, k, p, q) = store(n, k, p, q, sum over c of the 3x3 correlation of x(n, c) with
// filter(k, c)), d describing x and y (3x3, stride 1, dilation 1, groups 1).
template <class Filter, class Store>
void winograd(const ConvDesc& d, int m, const void* x, Filter&& filter, Store&& store) {
  const Transforms tf(m);
  const int A = tf.alpha, A2 = A * A;
  const ConvIndex ix(d);
  const uint32_t th = (ix.P + m - 1) / m, tw = (ix.Q + m - 1) / m, tiles = th * tw;
  // U[xi][k][c]
  std::vector<float> U(size_t(A2) * d.K * d.C);
  for (uint32_t k = 0; k < d.K; ++k)
    for (uint32_t c = 0; c < d.C; ++c) {
      float g[9], u[kMaxAlpha * kMaxAlpha];
      for (uint32_t r = 0; r < 3; ++r)
        for (uint32_t s = 0; s < 3; ++s) g[r * 3 + s] = filter(k, c, r, s);
      Transforms::sandwich(tf.G, A, 3, g, 3, tf.G, A, u);
      for (int xi = 0; xi < A2; ++xi) U[(size_t(xi) * d.K + k) * d.C + c] = u[xi];
    }
  const uint32_t chunks = (tiles + kTilesPerItem - 1) / kTilesPerItem;
  const long long items = (long long)d.N * chunks;
#pragma omp parallel
  {
    // V[xi][c][t], M[xi][k][t] for the item's tiles.
    std::vector<float> V(size_t(A2) * d.C * kTilesPerItem), M(size_t(A2) * d.K * kTilesPerItem);
#pragma omp for schedule(static)
    for (long long item = 0; item < items; ++item) {
      const uint32_t n = uint32_t(item / chunks), t0 = uint32_t(item % chunks) * kTilesPerItem;
      const uint32_t count = std::min(kTilesPerItem, tiles - t0);
      for (uint32_t c = 0; c < d.C; ++c)
        for (uint32_t t = 0; t < count; ++t) {
          const int64_t h0 = int64_t((t0 + t) / tw) * m - d.pad_h, w0 = int64_t((t0 + t) % tw) * m - d.pad_w;
          float patch[kMaxAlpha * kMaxAlpha], v[kMaxAlpha * kMaxAlpha];
          for (int i = 0; i < A; ++i)
            for (int j = 0; j < A; ++j) {
              const int64_t h = h0 + i, w = w0 + j;
              patch[i * A + j] = h >= 0 && w >= 0 && h < int64_t(d.H) && w < int64_t(d.W)
                                     ? float(load_as_double(x, d.type, ix.x(n, c, uint32_t(h), uint32_t(w))))
                                     : 0.0f;
            }
          Transforms::sandwich(tf.BT, A, A, patch, A, tf.BT, A, v);
          for (int xi = 0; xi < A2; ++xi) V[(size_t(xi) * d.C + c) * kTilesPerItem + t] = v[xi];
        }
      // alpha^2 products M[xi] (K x tiles) = U[xi] (K x C) V[xi] (C x tiles).
      std::fill(M.begin(), M.end(), 0.0f);
      for (int xi = 0; xi < A2; ++xi)
        for (uint32_t k = 0; k < d.K; ++k) {
          float* mk = M.data() + (size_t(xi) * d.K + k) * kTilesPerItem;
          const float* uk = U.data() + (size_t(xi) * d.K + k) * d.C;
          for (uint32_t c = 0; c < d.C; ++c) {
            const float a = uk[c];
            const float* vc = V.data() + (size_t(xi) * d.C + c) * kTilesPerItem;
            for (uint32_t t = 0; t < kTilesPerItem; ++t) mk[t] += a * vc[t];
          }
        }
      for (uint32_t k = 0; k < d.K; ++k)
        for (uint32_t t = 0; t < count; ++t) {
          float mt[kMaxAlpha * kMaxAlpha], yt[4 * 4];
          for (int xi = 0; xi < A2; ++xi) mt[xi] = M[(size_t(xi) * d.K + k) * kTilesPerItem + t];
          Transforms::sandwich(tf.AT, m, A, mt, A, tf.AT, m, yt);
          const uint32_t p0 = (t0 + t) / tw * m, q0 = (t0 + t) % tw * m;
          for (int i = 0; i < m; ++i)
            for (int j = 0; j < m; ++j)
              if (p0 + i < ix.P && q0 + j < ix.Q) store(n, k, p0 + i, q0 + j, yt[i * m + j]);
        }
    }
  }
}

}  // namespace

void conv2d_forward_winograd(const ConvDesc& d, int m, Activation activation, const void* x, const void* w,
                             const float* bias, void* y) {
  const ConvIndex ix(d);
  winograd(
      d, m, x, [&](uint32_t k, uint32_t c, uint32_t r, uint32_t s) { return float(load_as_double(w, d.type, ix.w(k, c, r, s))); },
      [&](uint32_t n, uint32_t k, uint32_t p, uint32_t q, float v) {
        store_from_double(y, d.type, ix.y(n, k, p, q), activation_value<float>(activation, v + (bias ? bias[k] : 0.0f)));
      });
}

void conv2d_backward_data_winograd(const ConvDesc& d, int m, Activation below, const void* dz, const void* w,
                                   const void* x, void* dx) {
  // dx(n, c, h, w) = sum over k, r, s of dz(n, k, h + pad - r, w + pad - s) w(k, c, r, s): a
  // correlation of dz, padded by 2 - pad, with w flipped in r and s and C, K swapped.
  ConvDesc t = d;
  t.C = d.K, t.K = d.C, t.H = d.P(), t.W = d.Q(), t.pad_h = 2 - d.pad_h, t.pad_w = 2 - d.pad_w;
  const ConvIndex ix(d);
  winograd(
      t, m, dz,
      [&](uint32_t c, uint32_t k, uint32_t r, uint32_t s) {
        return float(load_as_double(w, d.type, ix.w(k, c, 2 - r, 2 - s)));
      },
      [&](uint32_t n, uint32_t c, uint32_t h, uint32_t wi, float v) {
        const size_t at = ix.x(n, c, h, wi);
        if (below != Activation::None) {
          const float y_below = float(load_as_double(x, d.type, at));
          v *= activation_derivative<float>(below, y_below, y_below);
        }
        store_from_double(dx, d.type, at, v);
      });
}

}  // namespace tessera::ops::cpu
