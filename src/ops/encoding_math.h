#pragma once
// Per-sample math of the input encodings, shared by the CPU reference and the CUDA
// kernels (TESSERA_HD). Templated on the scalar so the CPU gradient checks can run in
// double. Conventions follow tiny-cuda-nn so its configs mean the same thing here.
#include <cmath>
#include <cstdint>

#include "tessera/core/hd.h"
#include "tessera/ops/encodings.h"

namespace tessera::ops {

// ---- scalar helpers that pick the float intrinsic on the device ----
template <typename T>
TESSERA_HD T t_sin(T x) {
#ifdef __CUDA_ARCH__
  return sinf(x);
#else
  return std::sin(x);
#endif
}
template <typename T>
TESSERA_HD T t_cos(T x) {
#ifdef __CUDA_ARCH__
  return cosf(x);
#else
  return std::cos(x);
#endif
}
template <typename T>
TESSERA_HD T t_floor(T x) {
#ifdef __CUDA_ARCH__
  return floorf(x);
#else
  return std::floor(x);
#endif
}
template <typename T>
TESSERA_HD T t_sqrt(T x) {
#ifdef __CUDA_ARCH__
  return sqrtf(x);
#else
  return std::sqrt(x);
#endif
}
// x * 2^k for integer k (exact).
template <typename T>
TESSERA_HD T t_ldexp(T x, int k) {
#ifdef __CUDA_ARCH__
  return scalbnf(x, k);
#else
  return std::ldexp(x, k);
#endif
}

constexpr double kPi = 3.14159265358979323846;

// ---- grids (HashGrid / DenseGrid) ----
// The spatial-hash primes of Mueller et al. 2022, one per input dimension.
TESSERA_HD constexpr uint32_t hash_prime(uint32_t d) {
  return d == 0 ? 1u : d == 1 ? 2654435761u : d == 2 ? 805459861u : 3674653429u;
}

// The grid helpers below take the dimension count as a template argument when the caller
// knows it (the CUDA kernels, so loops unroll); D = 0 reads it from the layout.
#define TESSERA_GRID_DIMS(g) (D ? D : (g).n_dims)

// Index of integer grid vertex `pos` in level `level`'s table.
template <uint32_t D = 0>
TESSERA_HD uint32_t grid_vertex_index(const GridLayout& g, uint32_t level, const uint32_t* pos) {
  uint32_t index = 0;
  if (g.dense[level]) {
    uint32_t stride = 1;
    for (uint32_t d = 0; d < TESSERA_GRID_DIMS(g); ++d) {
      index += pos[d] * stride;
      stride *= g.resolution[level];
    }
  } else {
    for (uint32_t d = 0; d < TESSERA_GRID_DIMS(g); ++d) index ^= pos[d] * hash_prime(d);
  }
  // Hashed tables are powers of two (a mask); dense indices only wrap at the far edge.
  const uint32_t size = g.size[level];
  if ((size & (size - 1)) == 0) return index & (size - 1);
  return index < size ? index : index % size;
}

template <typename T>
TESSERA_HD T grid_weight(GridInterpolation interp, T t) {
  return interp == GridInterpolation::Smoothstep ? t * t * (T(3) - T(2) * t) : t;
}
template <typename T>
TESSERA_HD T grid_weight_derivative(GridInterpolation interp, T t) {
  return interp == GridInterpolation::Smoothstep ? T(6) * t * (T(1) - t) : T(1);
}

// Where sample x falls in a level: the cell's lower vertex and the fraction inside it.
template <uint32_t D = 0, typename T>
TESSERA_HD void grid_cell(const GridLayout& g, uint32_t level, const T* x, uint32_t* cell, T* frac) {
  for (uint32_t d = 0; d < TESSERA_GRID_DIMS(g); ++d) {
    const T p = x[d] * T(g.scale[level]) + T(0.5);
    const T f = t_floor(p);
    cell[d] = uint32_t(int32_t(f));  // negative coordinates wrap, as in the hash
    frac[d] = p - f;
  }
}

// Corner c (bit d set = upper vertex along d): its vertex and interpolation weight.
template <uint32_t D = 0, typename T>
TESSERA_HD T grid_corner(const GridLayout& g, uint32_t c, const uint32_t* cell, const T* frac, uint32_t* vertex) {
  T w = T(1);
  for (uint32_t d = 0; d < TESSERA_GRID_DIMS(g); ++d) {
    const T wd = grid_weight(g.interpolation, frac[d]);
    const bool upper = (c >> d) & 1u;
    vertex[d] = cell[d] + (upper ? 1u : 0u);
    w *= upper ? wd : T(1) - wd;
  }
  return w;
}

// d(weight of corner c)/d(x_dim), including the level scale.
template <uint32_t D = 0, typename T>
TESSERA_HD T grid_corner_weight_gradient(const GridLayout& g, uint32_t level, uint32_t c, const T* frac, uint32_t dim) {
  T w = T(1);
  for (uint32_t d = 0; d < TESSERA_GRID_DIMS(g); ++d) {
    const bool upper = (c >> d) & 1u;
    if (d == dim) {
      const T dw = grid_weight_derivative(g.interpolation, frac[d]) * T(g.scale[level]);
      w *= upper ? dw : -dw;
    } else {
      const T wd = grid_weight(g.interpolation, frac[d]);
      w *= upper ? wd : T(1) - wd;
    }
  }
  return w;
}

template <typename T>
TESSERA_HD T grid_weight_second_derivative(GridInterpolation interp, T t) {
  return interp == GridInterpolation::Smoothstep ? T(6) - T(12) * t : T(0);
}

// d^2(weight of corner c)/d(x_a) d(x_b), including the level scale twice (a == b: zero for
// linear interpolation; a != b: the product of the two axes' slopes).
template <uint32_t D = 0, typename T>
TESSERA_HD T grid_corner_weight_hessian(const GridLayout& g, uint32_t level, uint32_t c, const T* frac, uint32_t a,
                                        uint32_t b) {
  const T s = T(g.scale[level]);
  T w = T(1);
  for (uint32_t d = 0; d < TESSERA_GRID_DIMS(g); ++d) {
    const bool upper = (c >> d) & 1u;
    T factor;
    if (d == a && d == b) factor = grid_weight_second_derivative(g.interpolation, frac[d]) * s * s;
    else if (d == a || d == b) factor = grid_weight_derivative(g.interpolation, frac[d]) * s;
    else factor = upper ? grid_weight(g.interpolation, frac[d]) : T(1) - grid_weight(g.interpolation, frac[d]);
    w *= (d == a || d == b) && !upper ? -factor : factor;
  }
  return w;
}

constexpr uint32_t kMaxGridFeatures = 8;

// The second backward of one sample at one level (tiny-cuda-nn's backward_backward_input):
// the first backward gave dL/dx = sum_c (dout . T_c) dw_c/dx; with u = dL/d(dL/dx) [n_dims]
// this adds u . dw_c/dx x dout into each corner's parameter gradients (add(index, value),
// when add_params), writes dL/d(dout) [F] = sum_c (u . dw_c/dx) T_c (when ddout is not null)
// and adds the second-order dL/dx [n_dims] = sum_c (dout . T_c) u . d2w_c/dx2 (when dx is not
// null). features(index, f) reads the F features at table entry `index` (a parameter index).
template <uint32_t D = 0, typename T, typename Features, typename AddParam>
TESSERA_HD void grid_backward_backward_level(const GridLayout& g, uint32_t level, const T* x, const T* dout,
                                             const T* u, Features&& features, bool add_params, AddParam&& add,
                                             T* ddout, T* dx) {
  const uint32_t F = g.n_features;
  uint32_t cell[kMaxGridDims], vertex[kMaxGridDims];
  T frac[kMaxGridDims], acc[kMaxGridFeatures] = {};
  grid_cell<D>(g, level, x, cell, frac);
  for (uint32_t c = 0; c < (1u << TESSERA_GRID_DIMS(g)); ++c) {
    grid_corner<D>(g, c, cell, frac, vertex);
    const size_t base = (size_t(g.offset[level]) + grid_vertex_index<D>(g, level, vertex)) * F;
    T du = T(0);  // u . dw_c/dx
    for (uint32_t d = 0; d < TESSERA_GRID_DIMS(g); ++d) du += u[d] * grid_corner_weight_gradient<D>(g, level, c, frac, d);
    if (add_params)
      for (uint32_t k = 0; k < F; ++k) add(base + k, du * dout[k]);
    if (!ddout && !dx) continue;
    T f[kMaxGridFeatures];
    features(base, f);
    if (ddout)
      for (uint32_t k = 0; k < F; ++k) acc[k] += du * f[k];
    if (dx) {
      T dot = T(0);
      for (uint32_t k = 0; k < F; ++k) dot += dout[k] * f[k];
      for (uint32_t e = 0; e < TESSERA_GRID_DIMS(g); ++e) {
        T h = T(0);
        for (uint32_t d = 0; d < TESSERA_GRID_DIMS(g); ++d) h += u[d] * grid_corner_weight_hessian<D>(g, level, c, frac, d, e);
        dx[e] += dot * h;
      }
    }
  }
  if (ddout)
    for (uint32_t k = 0; k < F; ++k) ddout[k] = acc[k];
}

#undef TESSERA_GRID_DIMS

// ---- Frequency (NeRF positional encoding): per input dim, for k < n_frequencies,
// sin(2^k pi x) and cos(2^k pi x) (= sin with a pi/2 phase), interleaved. ----
template <typename T>
TESSERA_HD T frequency_value(T x, uint32_t j, T* dvalue_dx) {
  const int k = int(j / 2);
  const T arg = t_ldexp(x, k) * T(kPi) + ((j & 1u) ? T(kPi / 2) : T(0));
  if (dvalue_dx) *dvalue_dx = t_ldexp(T(kPi), k) * t_cos(arg);
  return t_sin(arg);
}

// ---- TriangleWave: per input dim, for k < n_frequencies, |2 frac(2^k x) - 1|: a
// triangle wave in [0, 1] of period 2^-k (a cheap stand-in for the sine features). ----
template <typename T>
TESSERA_HD T triangle_wave_value(T x, uint32_t k, T* dvalue_dx) {
  const T u = t_ldexp(x, int(k));
  const T s = T(2) * (u - t_floor(u)) - T(1);
  if (dvalue_dx) *dvalue_dx = (s >= T(0) ? T(1) : T(-1)) * t_ldexp(T(2), int(k));
  return s >= T(0) ? s : -s;
}

// ---- OneBlob (Mueller et al. 2019): per input dim in [0, 1], n_bins outputs; bin k
// holds the mass of a quartic kernel of radius 1/n_bins centred at x that falls in
// [k/n, (k+1)/n]. ----
template <typename T>
TESSERA_HD T quartic_cdf(T u, T n_bins) {
  T v = u * n_bins;
  v = v < T(-1) ? T(-1) : (v > T(1) ? T(1) : v);
  const T v2 = v * v;
  return T(15) / T(16) * v * (T(1) - T(2) / T(3) * v2 + T(1) / T(5) * v2 * v2) + T(0.5);
}
template <typename T>
TESSERA_HD T quartic_pdf(T u, T n_bins) {
  const T v = u * n_bins;
  const T t = T(1) - v * v;
  return t > T(0) ? T(15) / T(16) * t * t * n_bins : T(0);
}
template <typename T>
TESSERA_HD T one_blob_value(T x, uint32_t k, uint32_t n_bins, T* dvalue_dx) {
  const T n = T(n_bins), lo = T(k) / n - x, hi = T(k + 1) / n - x;
  if (dvalue_dx) *dvalue_dx = quartic_pdf(lo, n) - quartic_pdf(hi, n);
  return quartic_cdf(hi, n) - quartic_cdf(lo, n);
}

// ---- SphericalHarmonics: real SH up to degree D (D^2 outputs, index l^2 + l + m) of a
// direction given in [0, 1]^3 (d = 2 * in - 1, as tiny-cuda-nn expects; not
// renormalized). Evaluated with the associated-Legendre recurrence in Cartesian form,
// carrying derivatives along (forward-mode), so every degree shares one code path.
// Signs follow the Condon-Shortley convention (tiny-cuda-nn's tables). ----
constexpr uint32_t kMaxShDegree = 8;

template <typename T>
struct Dual3 {  // value and gradient w.r.t. (x, y, z)
  T v, d[3];
  TESSERA_HD static Dual3 constant(T c) { return {c, {T(0), T(0), T(0)}}; }
  TESSERA_HD friend Dual3 operator+(const Dual3& a, const Dual3& b) {
    return {a.v + b.v, {a.d[0] + b.d[0], a.d[1] + b.d[1], a.d[2] + b.d[2]}};
  }
  TESSERA_HD friend Dual3 operator-(const Dual3& a, const Dual3& b) {
    return {a.v - b.v, {a.d[0] - b.d[0], a.d[1] - b.d[1], a.d[2] - b.d[2]}};
  }
  TESSERA_HD friend Dual3 operator*(const Dual3& a, const Dual3& b) {
    return {a.v * b.v, {a.d[0] * b.v + a.v * b.d[0], a.d[1] * b.v + a.v * b.d[1], a.d[2] * b.v + a.v * b.d[2]}};
  }
  TESSERA_HD friend Dual3 operator*(T s, const Dual3& a) { return {s * a.v, {s * a.d[0], s * a.d[1], s * a.d[2]}}; }
};

// Value, gradient and Hessian w.r.t. (x, y, z) (second-order forward mode: the second
// derivatives of SphericalHarmonics); h holds xx, yy, zz, xy, xz, yz.
template <typename T>
struct Jet3 {
  T v, d[3], h[6];
  TESSERA_HD static Jet3 constant(T c) { return {c, {T(0), T(0), T(0)}, {T(0), T(0), T(0), T(0), T(0), T(0)}}; }
  TESSERA_HD static constexpr void pair(int k, int& a, int& b) {
    a = k < 3 ? k : (k == 5 ? 1 : 0);
    b = k < 3 ? k : (k == 3 ? 1 : 2);
  }
  TESSERA_HD friend Jet3 operator+(const Jet3& a, const Jet3& b) {
    Jet3 r;
    r.v = a.v + b.v;
    for (int i = 0; i < 3; ++i) r.d[i] = a.d[i] + b.d[i];
    for (int k = 0; k < 6; ++k) r.h[k] = a.h[k] + b.h[k];
    return r;
  }
  TESSERA_HD friend Jet3 operator-(const Jet3& a, const Jet3& b) { return a + T(-1) * b; }
  TESSERA_HD friend Jet3 operator*(const Jet3& a, const Jet3& b) {
    Jet3 r;
    r.v = a.v * b.v;
    for (int i = 0; i < 3; ++i) r.d[i] = a.d[i] * b.v + a.v * b.d[i];
    for (int k = 0; k < 6; ++k) {
      int i = 0, j = 0;
      pair(k, i, j);
      r.h[k] = a.h[k] * b.v + a.d[i] * b.d[j] + a.d[j] * b.d[i] + a.v * b.h[k];
    }
    return r;
  }
  TESSERA_HD friend Jet3 operator*(T s, const Jet3& a) {
    Jet3 r;
    r.v = s * a.v;
    for (int i = 0; i < 3; ++i) r.d[i] = s * a.d[i];
    for (int k = 0; k < 6; ++k) r.h[k] = s * a.h[k];
    return r;
  }
  // Second derivative d2/(dx_i dx_j).
  TESSERA_HD T hessian(int i, int j) const {
    if (i == j) return h[i];
    const int lo = i < j ? i : j, hi = i < j ? j : i;
    return h[lo == 0 ? (hi == 1 ? 3 : 4) : 5];
  }
};

// The number type's variable `dim` with value v and slope 2 (d = 2 * in - 1).
template <typename D, typename T>
TESSERA_HD D sh_variable(T v, int dim) {
  D r = D::constant(v);
  r.d[dim] = T(2);
  return r;
}

// Calls emit(index, value) for every output of degree `degree` at input `in` [3]; the
// value is a Dual3 (with gradient) or, for second derivatives, a Jet3 (with Hessian).
template <typename T, typename D = Dual3<T>, typename Emit>
TESSERA_HD void spherical_harmonics(const T* in, uint32_t degree, Emit&& emit) {
  const D x = sh_variable<D>(T(2) * in[0] - T(1), 0);
  const D y = sh_variable<D>(T(2) * in[1] - T(1), 1);
  const D z = sh_variable<D>(T(2) * in[2] - T(1), 2);
  D cm = D::constant(T(1)), sm = D::constant(T(0));  // Re, Im of (x + iy)^m
  T pmm = T(1);                                       // (-1)^m (2m-1)!!
  T norm_mm = T(1.0 / (4.0 * kPi));                   // (2l+1)/(4pi) (l-m)!/(l+m)! at l = m, without (2l+1)
  for (uint32_t m = 0; m < degree; ++m) {
    if (m > 0) {
      const D c = x * cm - y * sm, s = x * sm + y * cm;
      cm = c;
      sm = s;
      pmm *= -T(2 * m - 1);
      norm_mm /= T(2 * m) * T(2 * m - 1);
    }
    // P~_l^m(z) for l = m, m+1, ... via the three-term recurrence.
    D p_prev = D::constant(T(0)), p = D::constant(pmm);
    T norm = norm_mm;  // (l-m)!/(l+m)!/(4pi)
    for (uint32_t l = m; l < degree; ++l) {
      if (l > m) {
        const D next = (T(1) / T(l - m)) * (T(2 * l - 1) * (z * p) - T(l + m - 1) * p_prev);
        p_prev = p;
        p = next;
        norm *= T(l - m) / T(l + m);
      }
      const T k = t_sqrt(T(2 * l + 1) * norm);
      if (m == 0) {
        emit(l * l + l, k * p);
      } else {
        const T k2 = k * T(1.4142135623730951);
        emit(l * l + l + m, k2 * (p * cm));
        emit(l * l + l - m, k2 * (p * sm));
      }
    }
  }
}

// d2(output j)/dx2 of one input dim x of a per-dimension encoding (zero for Identity and,
// between its kinks, TriangleWave).
template <typename T>
TESSERA_HD T elementwise_second_derivative(const ElementwiseEncoding& e, T x, uint32_t j) {
  switch (e.kind) {
    case ElementwiseKind::Frequency: {
      const T w = t_ldexp(T(kPi), int(j / 2));
      return -w * w * frequency_value(x, j, static_cast<T*>(nullptr));
    }
    case ElementwiseKind::OneBlob: {
      // d/du of the quartic pdf at u (zero outside its support); d/dx of pdf(k/n - x) is -that.
      const T n = T(e.order);
      const auto pdf_slope = [n](T u) {
        const T v = u * n;
        return v > T(-1) && v < T(1) ? T(-15) / T(4) * v * (T(1) - v * v) * n * n : T(0);
      };
      return pdf_slope(T(j + 1) / n - x) - pdf_slope(T(j) / n - x);
    }
    default: return T(0);
  }
}

// Output j of one input dim x of a per-dimension encoding (not SphericalHarmonics), and
// its derivative when dvalue_dx is non-null.
template <typename T>
TESSERA_HD T elementwise_value(const ElementwiseEncoding& e, T x, uint32_t j, T* dvalue_dx) {
  switch (e.kind) {
    case ElementwiseKind::Identity:
      if (dvalue_dx) *dvalue_dx = T(e.scale);
      return x * T(e.scale) + T(e.offset);
    case ElementwiseKind::Frequency: return frequency_value(x, j, dvalue_dx);
    case ElementwiseKind::TriangleWave: return triangle_wave_value(x, j, dvalue_dx);
    case ElementwiseKind::OneBlob: return one_blob_value(x, j, e.order, dvalue_dx);
    case ElementwiseKind::SphericalHarmonics: break;
  }
  return T(0);
}

}  // namespace tessera::ops
