// GEMV (every case of the former GemvCudaVsCpu suite, plus Tanh), ger, and GEMM through
// the dispatch (the backend's own kernel choice; tests/ops/test_gemm_cuda.cpp covers each
// named CUDA kernel).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>

#include "harness.h"
#include "support/half.h"
#include "support/random.h"
#include "tessera/ops/dispatch.h"
#include "tessera/ops/gemm.h"
#include "tessera/ops/gemv.h"
#include "tessera/ops/ger.h"
#include "ops/activation_math.h"

namespace tessera::test {
namespace {

using ops::GemvOp;

// Tolerances measured on the H100 (GEMV: worst of the suite) x margin.
constexpr double kGemvTolF32 = 1e-5, kGemvTolF16 = 2e-3;

struct GemvCase {
  GemvOp op;
  size_t rows, cols, lda_pad, offset;  // offset: elements to shift A and x by (misalignment)
  float alpha, beta;
  Activation act;
  bool half;
};

std::string gemv_name(const GemvCase& c) {
  std::string act = to_string(c.act);
  for (auto& ch : act) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return std::string(c.half ? "f16_" : "f32_") + (c.op == GemvOp::N ? "N_" : "T_") + std::to_string(c.rows) + "x" +
         std::to_string(c.cols) + (c.lda_pad ? "_pad" + std::to_string(c.lda_pad) : "") +
         (c.offset ? "_off" + std::to_string(c.offset) : "") + (c.beta != 0 ? "_beta" : "") + "_" + act;
}

template <typename T>
std::vector<double> run_gemv(Backend& b, const GemvCase& c, uint64_t seed) {
  const ops::GemvShape s{c.op, c.rows, c.cols, c.cols + c.lda_pad};
  auto to_t = [](const std::vector<float>& v) {
    std::vector<T> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      if constexpr (std::is_same_v<T, float>) out[i] = v[i];
      else out[i] = half_bits(v[i]);
    }
    return out;
  };
  Buffer<T> A = upload(b, to_t(random_floats(c.offset + c.rows * s.lda, -1, 1, seed)));
  Buffer<T> x = upload(b, to_t(random_floats(c.offset + s.x_size(), -1, 1, seed + 1)));
  Buffer<T> y = upload(b, to_t(random_floats(s.y_size(), -1, 1, seed + 2)));
  // beta = 0 must not read y: NaN there on the backend under test.
  if (c.beta == 0 && b.kind() != DeviceKind::cpu) detail::fill_bytes(b.device(), y.data(), 0xff, y.bytes());
  // The operands start `offset` elements into their allocations: views, not moved pointers.
  const TensorView A_view = TensorView::matrix(A.data(), dtype_of<T>(), c.rows, c.cols, s.lda, c.offset);
  const TensorView x_view = x.view(c.offset, s.x_size());
  ops::call<ops::Gemv>(b.default_stream(), c.op, c.alpha, A_view, x_view, c.beta, y.view(), c.act);
  std::vector<double> out;
  for (T v : y.to_host()) {
    if constexpr (std::is_same_v<T, float>) out.push_back(v);
    else out.push_back(from_half_bits(v));
  }
  return out;
}

const RegisterOpCases gemv_cases([](std::vector<OpCase>& cases) {
  std::vector<GemvCase> v;
  for (bool half : {false, true})
    for (GemvOp op : {GemvOp::N, GemvOp::T}) {
      v.push_back({op, 1, 1, 0, 0, 1.0f, 0.0f, Activation::None, half});
      v.push_back({op, 17, 33, 0, 0, 1.0f, 0.0f, Activation::None, half});
      v.push_back({op, 777, 333, 3, 1, 0.5f, 0.25f, Activation::None, half});  // misaligned: scalar path
      v.push_back({op, 333, 1999, 0, 0, 1.0f, 0.0f, Activation::Sigmoid, half});
      v.push_back({op, 1000, 1024, 8, 0, -1.0f, 1.0f, Activation::ReLU, half});
      v.push_back({op, 500, 700, 0, 0, 1.0f, 0.5f, Activation::Tanh, half});  // any activation of the MLP set
      v.push_back({op, 64, 100003, 0, 0, 1.0f, 0.0f, Activation::None, half});  // few long rows
      v.push_back({op, 4096, 4096, 0, 0, 1.0f, 0.0f, Activation::None, half});
    }
  for (const GemvCase& c : v) {
    if (c.half)
      cases.push_back({"gemv_half", gemv_name(c), kGemvTolF16, has_op<ops::Gemv>(),
                       [c](Backend& b, uint64_t seed) { return run_gemv<uint16_t>(b, c, seed); }});
    else
      cases.push_back({"gemv", gemv_name(c), kGemvTolF32, has_op<ops::Gemv>(),
                       [c](Backend& b, uint64_t seed) { return run_gemv<float>(b, c, seed); }});
  }
});

const RegisterOpCases ger_cases([](std::vector<OpCase>& cases) {
  cases.push_back({"ger", "333x1001_lda1003", 1e-6, has_op<ops::Ger>(), [](Backend& b, uint64_t seed) {
                     const size_t rows = 333, cols = 1001, lda = 1003;
                     Buffer<float> A = upload(b, random_floats(rows * lda, -1, 1, seed));
                     Buffer<float> x = upload(b, random_floats(rows, -1, 1, seed + 1));
                     Buffer<float> y = upload(b, random_floats(cols, -1, 1, seed + 2));
                     ops::call<ops::Ger>(b.default_stream(), 0.3f, x.view(), y.view(),
                                        TensorView::of_matrix(A.data(), rows, cols, lda));
                     std::vector<double> out;
                     append(out, A.to_host());
                     return out;
                   }});
});

// fp32 values as the storage of type t (fp32 as two 16-bit words), and back as doubles.
std::vector<uint16_t> pack_bits(const std::vector<float>& v, ops::DType t) {
  std::vector<uint16_t> bits(v.size() * (t == ops::DType::f32 ? 2 : 1));
  if (t == ops::DType::f32) std::memcpy(bits.data(), v.data(), v.size() * 4);
  else
    for (size_t i = 0; i < v.size(); ++i) bits[i] = t == ops::DType::f16 ? half_bits(v[i]) : bfloat_bits(v[i]);
  return bits;
}

std::vector<double> unpack_bits(const std::vector<uint16_t>& bits, ops::DType t, size_t n) {
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (t == ops::DType::f32) {
      float f;
      std::memcpy(&f, &bits[2 * i], 4);
      out[i] = f;
    } else {
      out[i] = t == ops::DType::f16 ? from_half_bits(bits[i]) : from_bfloat_bits(bits[i]);
    }
  }
  return out;
}

struct GemmCase {
  const char* name;
  size_t M, N, K;
  ops::DType in, out;
  bool transpose_b;
  double tolerance;  // fp32 accumulation of fp16 inputs; rounding of the output type
};

const RegisterOpCases gemm_cases([](std::vector<OpCase>& cases) {
  const GemmCase list[] = {
      {"f32_130x70x201", 130, 70, 201, ops::DType::f32, ops::DType::f32, false, 1e-5},
      {"f16_to_f32_200x150x2000_NT", 200, 150, 2000, ops::DType::f16, ops::DType::f32, true, 1e-5},
      {"bf16_to_bf16_777x333x1999", 777, 333, 1999, ops::DType::bf16, ops::DType::bf16, false, 1e-3},  // H200: 5.3e-5
  };
  for (const GemmCase& g : list)
    cases.push_back({"gemm", g.name, g.tolerance, has_op<ops::Gemm>(),
                     [g](Backend& b, uint64_t seed) {
                       ops::GemmDesc d;
                       d.M = g.M, d.N = g.N, d.K = g.K;
                       d.a = {g.in, ops::Layout::row_major, false, g.K, 0};
                       d.b = {g.in, ops::Layout::row_major, g.transpose_b, g.transpose_b ? g.K : g.N, 0};
                       d.c = {g.out, ops::Layout::row_major, false, g.N, 0};
                       Buffer<uint16_t> A = upload(b, pack_bits(random_floats(g.M * g.K, -1, 1, seed), g.in));
                       Buffer<uint16_t> B = upload(b, pack_bits(random_floats(g.K * g.N, -1, 1, seed + 1), g.in));
                       Buffer<uint16_t> C(b.device(), g.M * g.N * (g.out == ops::DType::f32 ? 2 : 1));
                       ops::call<ops::Gemm>(b.default_stream(), d, TensorView::vector(A.data(), g.in, g.M * g.K),
                                            TensorView::vector(B.data(), g.in, g.K * g.N),
                                            TensorView::vector(C.data(), g.out, g.M * g.N));
                       return unpack_bits(C.to_host(), g.out, g.M * g.N);
                     }});
});

// fp32 GEMM in every layout: A row- or column-major, either operand transposed, strided
// batches with one operand shared (stride 0), alpha and beta (C read), odd sizes.
struct GemmLayoutCase {
  const char* name;
  size_t M, N, K, batch;
  bool a_col_major, a_transpose, b_transpose, c_col_major, b_shared;
  float alpha, beta;
};

const RegisterOpCases gemm_layout_cases([](std::vector<OpCase>& cases) {
  const GemmLayoutCase list[] = {
      {"f32_TN_colA_97x33x65", 97, 33, 65, 1, true, true, false, false, false, 1.0f, 0.0f},
      {"f32_NT_batch3_sharedB_61x47x129_beta", 61, 47, 129, 3, false, false, true, false, true, 0.5f, -1.0f},
      {"f32_colC_1x1x1", 1, 1, 1, 1, false, false, false, true, false, 2.0f, 0.0f},
      {"f32_TT_257x255x31", 257, 255, 31, 1, false, true, true, false, false, 1.0f, 0.0f},
      {"f32_512x512x512", 512, 512, 512, 1, false, false, false, false, false, 1.0f, 0.0f},
      // Enough tiles for a large GPU's biggest tile size (OpenCL: 128 x 128 from 2 x CUs tiles);
      // sizes cut the last tiles.
      {"f32_TN_2305x2303x37_big_tiles", 2305, 2303, 37, 1, false, true, false, false, false, 1.0f, 0.0f},
  };
  for (const GemmLayoutCase& g : list)
    cases.push_back({"gemm", g.name, 1e-5, has_op<ops::Gemm>(), [g](Backend& b, uint64_t seed) {
                       ops::GemmDesc d;
                       d.M = g.M, d.N = g.N, d.K = g.K, d.batch = g.batch, d.alpha = g.alpha, d.beta = g.beta;
                       // Stored shapes: op(A) is M x K, A itself K x M when transposed.
                       const size_t a_rows = g.a_transpose ? g.K : g.M, a_cols = g.a_transpose ? g.M : g.K;
                       const size_t b_rows = g.b_transpose ? g.N : g.K, b_cols = g.b_transpose ? g.K : g.N;
                       const size_t a_n = a_rows * a_cols, b_n = b_rows * b_cols, c_n = g.M * g.N;
                       d.a = {ops::DType::f32, g.a_col_major ? ops::Layout::col_major : ops::Layout::row_major,
                              g.a_transpose, g.a_col_major ? a_rows : a_cols, int64_t(a_n)};
                       d.b = {ops::DType::f32, ops::Layout::row_major, g.b_transpose, b_cols,
                              g.b_shared ? 0 : int64_t(b_n)};
                       d.c = {ops::DType::f32, g.c_col_major ? ops::Layout::col_major : ops::Layout::row_major, false,
                              g.c_col_major ? g.M : g.N, int64_t(c_n)};
                       Buffer<float> A = upload(b, random_floats(a_n * g.batch, -1, 1, seed));
                       Buffer<float> B = upload(b, random_floats(b_n * (g.b_shared ? 1 : g.batch), -1, 1, seed + 1));
                       Buffer<float> C = upload(b, random_floats(c_n * g.batch, -1, 1, seed + 2));
                       ops::call<ops::Gemm>(b.default_stream(), d, A.view(), B.view(), C.view());
                       std::vector<double> out;
                       append(out, C.to_host());
                       return out;
                     }});
});

// The activation epilogue (GemmActivation) in the MLP's shapes: forward Z = X W^T with
// the activation, backward dX = dZ W with the derivative at Y. On Hopper the first four
// run fused in the wgmma kernel (fast tile path and ragged edges); the f32-C and the
// split-K (small M N, deep K) cases run the unfused path.
struct GemmActivationCase {
  const char* name;
  size_t M, N, K;
  ops::DType in, out;
  ops::GemmEpilogueKind kind;
  Activation act;
  double tolerance;
};

const RegisterOpCases gemm_activation_cases([](std::vector<OpCase>& cases) {
  using K = ops::GemmEpilogueKind;
  const GemmActivationCase list[] = {
      {"f16_forward_relu_4096x256x256", 4096, 256, 256, ops::DType::f16, ops::DType::f16, K::activation,
       Activation::ReLU, 2e-3},
      {"f16_derivative_sigmoid_4096x256x256", 4096, 256, 256, ops::DType::f16, ops::DType::f16,
       K::activation_derivative, Activation::Sigmoid, 2e-3},
      {"bf16_forward_tanh_777x333x199", 777, 333, 199, ops::DType::bf16, ops::DType::bf16, K::activation,
       Activation::Tanh, 1e-2},
      {"f16_derivative_relu_1001x96x64", 1001, 96, 64, ops::DType::f16, ops::DType::f16, K::activation_derivative,
       Activation::ReLU, 2e-3},
      {"f16_to_f32_derivative_tanh_300x200x100", 300, 200, 100, ops::DType::f16, ops::DType::f32,
       K::activation_derivative, Activation::Tanh, 1e-5},
      {"f16_forward_softplus_splitk_64x64x8192", 64, 64, 8192, ops::DType::f16, ops::DType::f16, K::activation,
       Activation::Softplus, 2e-3},
      // fp32 throughout (the OpenCL MLP's layers): odd sizes cut every tile.
      {"f32_forward_sigmoid_1001x97x65", 1001, 97, 65, ops::DType::f32, ops::DType::f32, K::activation,
       Activation::Sigmoid, 1e-5},
      {"f32_derivative_tanh_777x64x129", 777, 64, 129, ops::DType::f32, ops::DType::f32, K::activation_derivative,
       Activation::Tanh, 1e-5},
  };
  for (const GemmActivationCase& g : list)
    cases.push_back({"gemm_activation", g.name, g.tolerance,
                     has_op<ops::GemmActivation>(),
                     [g](Backend& b, uint64_t seed) {
                       const bool forward = g.kind == ops::GemmEpilogueKind::activation;
                       ops::GemmDesc d;
                       d.M = g.M, d.N = g.N, d.K = g.K;
                       // Forward: B = W [N, K] transposed; backward: B = W [K, N].
                       d.a = {g.in, ops::Layout::row_major, false, g.K, 0};
                       d.b = {g.in, ops::Layout::row_major, forward, forward ? g.K : g.N, 0};
                       d.c = {g.out, ops::Layout::row_major, false, g.N, 0};
                       d.alpha = forward ? 1.0f : 0.75f;
                       const float scale = 1.0f / std::sqrt(float(g.K));
                       Buffer<uint16_t> A = upload(b, pack_bits(random_floats(g.M * g.K, -1, 1, seed), g.in));
                       Buffer<uint16_t> B =
                           upload(b, pack_bits(random_floats(g.K * g.N, -scale, scale, seed + 1), g.in));
                       // Y: outputs of the layer below, in (0, 1) with some exact zeros (ReLU's).
                       std::vector<float> y = random_floats(g.M * g.N, -0.2f, 1, seed + 2);
                       for (float& v : y) v = std::max(v, 0.0f);
                       Buffer<uint16_t> Y = upload(b, pack_bits(y, g.out));
                       const size_t c_elems = g.M * g.N * (g.out == ops::DType::f32 ? 2 : 1);
                       Buffer<uint16_t> C(b.device(), c_elems);
                       ops::call<ops::GemmActivation>(
                           b.default_stream(), d, ops::GemmEpilogue{g.kind, g.act},
                           TensorView::vector(A.data(), g.in, g.M * g.K), TensorView::vector(B.data(), g.in, g.K * g.N),
                           TensorView::vector(C.data(), g.out, g.M * g.N),
                           forward ? TensorView{} : TensorView::vector(Y.data(), g.out, g.M * g.N));
                       return unpack_bits(C.to_host(), g.out, g.M * g.N);
                     }});
});

}  // namespace
}  // namespace tessera::test
