// CUDA GEMM (SIMT fp32; WMMA and Hopper wgmma fp16/bf16) against the CPU reference on
// fresh random data: shapes 1x1x1, 17x33x65, 777x333x1999 and 4096^3 (sampled rows), every
// transpose of A and B, row- and column-major A, B and C, padded leading dimensions,
// strided batches, alpha/beta. Each case runs the kernel gemm() picks, or one named kernel
// (wgmma cases skip visibly on GPUs other than compute capability 9.0; with leading
// dimensions rounded up to 8 elements TMA reads the operands in place, otherwise they are
// first copied to aligned scratch). C is poisoned (NaN) before each run when beta = 0, so unwritten elements
// fail. Tolerances (relative L2 error): fp32 and fp32-output runs differ from the double
// reference by summation order only (measured ~1e-7); fp16/bf16 outputs by their rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>

#include "support/errors.h"
#include "support/gpu.h"
#include "support/half.h"
#include "support/random.h"
#include "tessera/core/buffer.h"
#include "tessera/core/device.h"
#include "tessera/core/version.h"
#include "tessera/ops/gemm.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cuda/cuda_kernels.h"

namespace tessera {
namespace {

using test::rel_error;


using ops::DType;
using ops::GemmDesc;
using ops::Layout;
using ops::cuda::GemmKernel;

double tolerance(DType out) { return out == DType::f32 ? 1e-5 : out == DType::f16 ? 1.5e-3 : 1e-2; }


uint16_t to_bits(float v, DType t) { return t == DType::f16 ? test::half_bits(v) : test::bfloat_bits(v); }
float from_bits(uint16_t b, DType t) { return t == DType::f16 ? test::from_half_bits(b) : test::from_bfloat_bits(b); }

// A host matrix of `count` elements of type t, random in [-1, 1], as raw bytes.
std::vector<char> random_bytes(size_t count, DType t, uint64_t seed) {
  auto f = test::random_floats(count, -1, 1, seed);
  std::vector<char> out(count * ops::dtype_size(t));
  if (t == DType::f32) {
    std::memcpy(out.data(), f.data(), out.size());
  } else {
    auto* b = reinterpret_cast<uint16_t*>(out.data());
    for (size_t i = 0; i < count; ++i) b[i] = to_bits(f[i], t);
  }
  return out;
}
std::vector<float> as_floats(const std::vector<char>& bytes, DType t) {
  const size_t n = bytes.size() / ops::dtype_size(t);
  std::vector<float> v(n);
  if (t == DType::f32) std::memcpy(v.data(), bytes.data(), bytes.size());
  else
    for (size_t i = 0; i < n; ++i) v[i] = from_bits(reinterpret_cast<const uint16_t*>(bytes.data())[i], t);
  return v;
}


// Elements a stored operand of logical rows x cols (after op) needs, and its ld.
size_t stored_ld(const ops::GemmOperand& o, size_t rows, size_t cols, size_t pad, bool align8) {
  const size_t sr = o.transpose ? cols : rows, sc = o.transpose ? rows : cols;
  const size_t ld = (o.layout == Layout::row_major ? sc : sr) + pad;
  return align8 ? (ld + 7) / 8 * 8 : ld;
}
size_t stored_count(const ops::GemmOperand& o, size_t rows, size_t cols) {
  const size_t sr = o.transpose ? cols : rows, sc = o.transpose ? rows : cols;
  return o.layout == Layout::row_major ? sr * o.ld : sc * o.ld;
}

struct Case {
  size_t M, N, K, batch;
  bool ta, tb;
  Layout la, lb, lc;
  DType in, out;
  size_t pad;
  float beta;
  size_t sample_rows;  // 0: check every row; else this many rows (big shapes)
  std::optional<ops::cuda::GemmKernel> kernel = std::nullopt;  // none: gemm() picks
  bool align8 = false;  // leading dimensions rounded up to 8 elements (TMA reads in place)
};

std::string name_of(const Case& c) {
  auto L = [](Layout l) { return l == Layout::row_major ? "r" : "c"; };
  return fmt::format("{}x{}x{}{}_{}{}_{}{}{}_{}_to_{}{}{}", c.M, c.N, c.K, c.batch > 1 ? fmt::format("_b{}", c.batch) : "",
                     c.ta ? "T" : "N", c.tb ? "T" : "N", L(c.la), L(c.lb), L(c.lc), to_string(c.in), to_string(c.out),
                     c.pad ? "_pad" : "", c.beta != 0 ? "_beta" : "") +
         (c.kernel ? std::string("_") + ops::cuda::to_string(*c.kernel) : std::string()) + (c.align8 ? "_ld8" : "");
}

// A Hopper GPU running this build's sm_90 code (the wgmma kernel is there and chosen).
bool hopper() {
  const auto devices = cuda_devices();
  return !devices.empty() && devices[0].compute_major == 9 && devices[0].compute_minor == 0 &&
         std::string(cuda_architectures()).find("90") != std::string::npos;
}

class GemmCudaVsCpu : public ::testing::TestWithParam<Case> {};

TEST_P(GemmCudaVsCpu, MatchesReference) {
  REQUIRE_CUDA();
  test::unless_the_gpu_cannot([&] {
    const Case c = GetParam();
    const uint64_t seed = test::fresh_seed();
    SCOPED_TRACE("seed " + std::to_string(seed));
    GemmDesc d;
    d.M = c.M, d.N = c.N, d.K = c.K, d.batch = c.batch;
    d.a = {c.in, c.la, c.ta, 0, 0};
    d.b = {c.in, c.lb, c.tb, 0, 0};
    d.c = {c.out, c.lc, false, 0, 0};
    const bool align8 = c.align8;
    d.a.ld = stored_ld(d.a, c.M, c.K, c.pad, align8);
    d.b.ld = stored_ld(d.b, c.K, c.N, c.pad, align8);
    d.c.ld = stored_ld(d.c, c.M, c.N, c.pad, align8);
    const size_t na = stored_count(d.a, c.M, c.K), nb = stored_count(d.b, c.K, c.N), nc = stored_count(d.c, c.M, c.N);
    d.a.batch_stride = int64_t(na), d.b.batch_stride = int64_t(nb), d.c.batch_stride = int64_t(nc);
    d.alpha = 0.75f, d.beta = c.beta;
    auto a = random_bytes(na * c.batch, c.in, seed), b = random_bytes(nb * c.batch, c.in, seed + 1);
    auto c0 = random_bytes(nc * c.batch, c.out, seed + 2);
    Buffer<char> da = make_buffer(DeviceKind::cuda, a), db = make_buffer(DeviceKind::cuda, b),
                 dc = make_buffer(DeviceKind::cuda, c0);
    if (c.beta == 0) detail::fill_bytes(DeviceKind::cuda, dc.data(), 0xff, dc.bytes());  // NaN in every type
    if (c.kernel) {
      if (*c.kernel == ops::cuda::GemmKernel::wgmma && !hopper())
        GTEST_SKIP() << "the wgmma kernel needs a compute capability 9.0 GPU";
      if (*c.kernel == ops::cuda::GemmKernel::tf32x3 && cuda_devices()[0].compute_major < 8)
        GTEST_SKIP() << "the tf32x3 kernel needs a compute capability 8.0 GPU";
      if (c.in == DType::bf16 && cuda_devices()[0].compute_major < 8)
        GTEST_SKIP() << "bf16 tensor-core products need a compute capability 8.0 GPU";
      ASSERT_TRUE(ops::cuda::gemm_kernel_can_run(*c.kernel, d, da.data(), db.data()));
      ops::cuda::gemm(d, da.data(), db.data(), dc.data(), *c.kernel);
    } else {
      ops::cuda::gemm(d, da.data(), db.data(), dc.data());
    }
    const auto got = as_floats(dc.to_host(), c.out);

    std::vector<float> want_all = as_floats(c0, c.out), got_checked, want_checked;
    if (c.sample_rows == 0) {
      auto ref = c0;
      ops::cpu::gemm(d, a.data(), b.data(), ref.data());
      want_checked = as_floats(ref, c.out);
      got_checked = got;
      // Padding between rows/columns must stay as it was (NaN when beta = 0 is "untouched").
    } else {
      // Rows i of C: the reference for a one-row GEMM starting at row i.
      const auto sa = ops::operand_strides(d.a), sc = ops::operand_strides(d.c);
      const size_t ec = ops::dtype_size(c.out), ea = ops::dtype_size(c.in);
      for (size_t s = 0; s < c.sample_rows; ++s) {
        const size_t i = (s * 2654435761u + seed) % c.M;
        GemmDesc row = d;
        row.M = 1, row.batch = 1;
        std::vector<char> ref_row = c0;
        ops::cpu::gemm(row, a.data() + i * sa.row * ea, b.data(), ref_row.data() + i * sc.row * ec);
        const auto ref_f = as_floats(ref_row, c.out);
        for (size_t j = 0; j < c.N; ++j) {
          want_checked.push_back(ref_f[i * sc.row + j * sc.col]);
          got_checked.push_back(got[i * sc.row + j * sc.col]);
        }
      }
    }
    // Only logical elements count (padding stays NaN when beta = 0).
    if (c.sample_rows == 0 && (c.pad || align8)) {
      const auto sc = ops::operand_strides(d.c);
      std::vector<float> g2, w2;
      for (size_t bi = 0; bi < c.batch; ++bi)
        for (size_t i = 0; i < c.M; ++i)
          for (size_t j = 0; j < c.N; ++j) {
            const size_t k = bi * nc + i * sc.row + j * sc.col;
            g2.push_back(got_checked[k]);
            w2.push_back(want_checked[k]);
          }
      got_checked.swap(g2);
      want_checked.swap(w2);
    }
    const double e = rel_error(got_checked, want_checked);
    std::printf("[ measured ] %s: %.2e\n", name_of(c).c_str(), e);
    EXPECT_LT(e, tolerance(c.out));
  });
}

std::vector<Case> cases() {
  std::vector<Case> v;
  const std::pair<DType, DType> precisions[] = {{DType::f32, DType::f32}, {DType::f16, DType::f32},
                                                {DType::f16, DType::f16}, {DType::bf16, DType::f32},
                                                {DType::bf16, DType::bf16}};
  // Small shapes: every transpose x layout of A, B, C, every precision.
  for (auto [in, out] : precisions)
    for (int bits = 0; bits < 32; ++bits) {
      const bool ta = bits & 1, tb = bits & 2;
      const Layout la = bits & 4 ? Layout::col_major : Layout::row_major;
      const Layout lb = bits & 8 ? Layout::col_major : Layout::row_major;
      const Layout lc = bits & 16 ? Layout::col_major : Layout::row_major;
      v.push_back({17, 33, 65, 1, ta, tb, la, lb, lc, in, out, 0, 0.0f, 0});
      if (bits % 7 == 0) v.push_back({1, 1, 1, 1, ta, tb, la, lb, lc, in, out, 0, 0.0f, 0});
    }
  // Odd mid-size shape, padded leading dimensions, beta, batches.
  for (auto [in, out] : precisions) {
    v.push_back({777, 333, 1999, 1, false, false, Layout::row_major, Layout::row_major, Layout::row_major, in, out, 0, 0.0f, 0});
    v.push_back({777, 333, 1999, 1, true, true, Layout::row_major, Layout::col_major, Layout::col_major, in, out, 3, 0.5f, 0});
    v.push_back({130, 70, 200, 3, false, true, Layout::col_major, Layout::row_major, Layout::row_major, in, out, 8, 0.0f, 0});
  }
  // 4096^3, checked on sampled rows.
  v.push_back({4096, 4096, 4096, 1, false, false, Layout::row_major, Layout::row_major, Layout::row_major, DType::f16, DType::f32, 0, 0.0f, 8});
  v.push_back({4096, 4096, 4096, 1, true, false, Layout::row_major, Layout::row_major, Layout::row_major, DType::bf16, DType::bf16, 0, 0.0f, 8});
  v.push_back({4096, 4096, 4096, 1, false, true, Layout::row_major, Layout::row_major, Layout::row_major, DType::f32, DType::f32, 0, 0.0f, 8});
  // fp32 products large enough for the 128 x 128 SIMT kernel (aligned leading dimensions),
  // every K-/MN-contiguity of A and B, tails in M, N and K.
  for (int bits = 0; bits < 4; ++bits)
    v.push_back({1030, 1100, 37, 1, bool(bits & 1), bool(bits & 2), Layout::row_major, Layout::row_major,
                 bits == 3 ? Layout::col_major : Layout::row_major, DType::f32, DType::f32, 0, bits == 1 ? 0.5f : 0.0f,
                 0, GemmKernel::simt, true});
  // The 3xTF32 kernel: every transpose x layout (element copies for the MN-contiguous
  // operands), 16-byte copies with tails and padding, beta, batches, and 4096^3; its
  // tolerance is fp32's.
  for (int bits = 0; bits < 32; ++bits) {
    const Layout la = bits & 4 ? Layout::col_major : Layout::row_major, lb = bits & 8 ? Layout::col_major : Layout::row_major;
    v.push_back({17, 33, 65, 1, bool(bits & 1), bool(bits & 2), la, lb, bits & 16 ? Layout::col_major : Layout::row_major,
                 DType::f32, DType::f32, 0, 0.0f, 0, GemmKernel::tf32x3});
  }
  v.push_back({777, 333, 1999, 1, false, false, Layout::row_major, Layout::row_major, Layout::row_major, DType::f32, DType::f32, 0, 0.0f, 0, GemmKernel::tf32x3, true});
  v.push_back({777, 333, 1999, 1, false, false, Layout::row_major, Layout::row_major, Layout::row_major, DType::f32, DType::f32, 3, 0.5f, 0, GemmKernel::tf32x3});
  v.push_back({64, 6272, 64, 36, false, false, Layout::row_major, Layout::row_major, Layout::row_major, DType::f32, DType::f32, 0, 0.0f, 0, GemmKernel::tf32x3, true});
  v.push_back({130, 70, 203, 3, true, false, Layout::row_major, Layout::row_major, Layout::col_major, DType::f32, DType::f32, 8, 0.0f, 0, GemmKernel::tf32x3});
  v.push_back({4096, 4096, 4096, 1, false, false, Layout::row_major, Layout::row_major, Layout::row_major, DType::f32, DType::f32, 0, 0.0f, 8, GemmKernel::tf32x3, true});
  // The same 4096^3 products on the WMMA kernel (gemm() picks wgmma for them on Hopper).
  v.push_back({4096, 4096, 4096, 1, false, false, Layout::row_major, Layout::row_major, Layout::row_major, DType::f16, DType::f32, 0, 0.0f, 8, GemmKernel::wmma});
  v.push_back({4096, 4096, 4096, 1, true, false, Layout::row_major, Layout::row_major, Layout::row_major, DType::bf16, DType::bf16, 0, 0.0f, 8, GemmKernel::wmma});
  // The wgmma kernel: every K-/MN-major combination of A and B and C layout with M, N, K
  // tails (128 x 128 tiles), split-K, batches, and 128 x 256 tiles (2048 x 2300, 2100 x
  // 2048, 4096^3).
  const std::pair<DType, DType> half_precisions[] = {{DType::f16, DType::f32}, {DType::f16, DType::f16},
                                                     {DType::bf16, DType::f32}, {DType::bf16, DType::bf16}};
  for (auto [in, out] : half_precisions) {
    for (int bits = 0; bits < 32; ++bits) {
      const bool ta = bits & 1, tb = bits & 2;
      const Layout la = bits & 4 ? Layout::col_major : Layout::row_major;
      const Layout lb = bits & 8 ? Layout::col_major : Layout::row_major;
      const Layout lc = bits & 16 ? Layout::col_major : Layout::row_major;
      v.push_back({17, 33, 65, 1, ta, tb, la, lb, lc, in, out, 0, 0.0f, 0, GemmKernel::wgmma, true});
      if (bits % 5 == 0) v.push_back({17, 33, 65, 1, ta, tb, la, lb, lc, in, out, 0, 0.0f, 0, GemmKernel::wgmma, false});
      if (bits % 7 == 0) v.push_back({1, 1, 1, 1, ta, tb, la, lb, lc, in, out, 0, 0.0f, 0, GemmKernel::wgmma, true});
    }
    v.push_back({777, 333, 1999, 1, false, false, Layout::row_major, Layout::row_major, Layout::row_major, in, out, 0, 0.0f, 0, GemmKernel::wgmma, true});
    v.push_back({777, 333, 1999, 1, false, false, Layout::row_major, Layout::row_major, Layout::row_major, in, out, 0, 0.0f, 0, GemmKernel::wgmma, false});
    v.push_back({777, 333, 1999, 1, true, true, Layout::row_major, Layout::col_major, Layout::col_major, in, out, 3, 0.5f, 0, GemmKernel::wgmma, true});
    v.push_back({130, 70, 200, 3, false, true, Layout::col_major, Layout::row_major, Layout::row_major, in, out, 8, 0.0f, 0, GemmKernel::wgmma, true});
    v.push_back({130, 70, 201, 3, true, false, Layout::col_major, Layout::row_major, Layout::row_major, in, out, 1, 0.0f, 0, GemmKernel::wgmma, false});
    v.push_back({2048, 2300, 200, 1, false, false, Layout::row_major, Layout::row_major, Layout::row_major, in, out, 0, 0.25f, 0, GemmKernel::wgmma, true});
  }
  v.push_back({2048, 2300, 200, 1, true, true, Layout::col_major, Layout::row_major, Layout::col_major, DType::f16, DType::f32, 0, 0.0f, 0, GemmKernel::wgmma, true});
  // Batches and split-K together (2 x 2 x 2 output tiles, K split 3 ways), with beta.
  v.push_back({200, 150, 2000, 2, false, false, Layout::row_major, Layout::row_major, Layout::row_major, DType::f16, DType::f16, 0, 0.5f, 0, GemmKernel::wgmma, true});
  v.push_back({200, 150, 2000, 2, true, false, Layout::row_major, Layout::col_major, Layout::col_major, DType::bf16, DType::f32, 0, 0.0f, 0, GemmKernel::wgmma, false});
  // An odd number of M tiles on the 128 x 256 path (K-major and N-major B, K tail).
  v.push_back({2100, 2048, 136, 1, false, false, Layout::row_major, Layout::row_major, Layout::row_major, DType::f16, DType::f16, 0, 0.0f, 0, GemmKernel::wgmma, true});
  v.push_back({2100, 2048, 136, 1, false, true, Layout::row_major, Layout::row_major, Layout::row_major, DType::bf16, DType::f32, 0, 0.0f, 0, GemmKernel::wgmma, true});
  v.push_back({4096, 4096, 4096, 1, false, false, Layout::row_major, Layout::row_major, Layout::row_major, DType::f16, DType::f32, 0, 0.0f, 8, GemmKernel::wgmma, true});
  v.push_back({4096, 4096, 4096, 1, true, false, Layout::row_major, Layout::row_major, Layout::row_major, DType::bf16, DType::bf16, 0, 0.0f, 8, GemmKernel::wgmma, true});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Shapes, GemmCudaVsCpu, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return name_of(info.param); });

// A kernel that cannot run a problem says why instead of computing garbage.
TEST(GemmCuda, NamedKernelThatCannotRunIsAnError) {
  REQUIRE_CUDA();
  GemmDesc d;
  d.M = d.N = d.K = 64;
  d.a = {DType::f32, Layout::row_major, false, 64, 0};
  d.b = d.a;
  d.c = d.a;
  Buffer<float> a(DeviceKind::cuda, 64 * 64), c(DeviceKind::cuda, 64 * 64);
  auto expect_error_containing = [](const std::function<void()>& f, const std::string& part) {
    const std::string message = test::error_of(f);
    EXPECT_NE(message.find(part), std::string::npos) << "message: '" << message << "', expected: " << part;
  };
  EXPECT_FALSE(ops::cuda::gemm_kernel_can_run(GemmKernel::wmma, d, a.data(), a.data()));
  expect_error_containing([&] { ops::cuda::gemm(d, a.data(), a.data(), c.data(), GemmKernel::wmma); },
                                "fp16 or bf16 inputs only");
  d.a.type = d.b.type = DType::f16;
  d.a.ld = d.b.ld = 65;  // 130-byte rows: wgmma copies them to aligned scratch first
  Buffer<uint16_t> h(DeviceKind::cuda, 64 * 65);
  expect_error_containing([&] { ops::cuda::gemm(d, h.data(), h.data(), c.data(), GemmKernel::simt); },
                                "fp32 inputs only");
  expect_error_containing([&] { ops::cuda::gemm(d, h.data(), h.data(), c.data(), GemmKernel::tf32x3); },
                          "tf32x3 kernel takes fp32 inputs only");
  if (!hopper()) {
    // "needs a compute capability 9.0 (Hopper) GPU", or "this build has no wgmma kernel"
    expect_error_containing([&] { ops::cuda::gemm(d, h.data(), h.data(), c.data(), GemmKernel::wgmma); },
                            "wgmma kernel");
  }
  EXPECT_EQ(ops::cuda::gemm_kernel_for(d, h.data(), h.data()), hopper() ? GemmKernel::wgmma : GemmKernel::wmma);
}

}  // namespace
}  // namespace tessera
