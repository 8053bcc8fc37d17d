// GEMM on the CPU: the reference the CUDA kernels are tested against (double accumulation).
#include <cstring>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/ops/gemm.h"
#include "typed_storage.h"
#include "ops/activation_math.h"
#include "ops/cpu/cpu_kernels.h"

namespace tessera::ops::cpu {

namespace {
double load(const void* base, DType t, size_t index) { return load_as_double(base, t, index); }
void store(void* base, DType t, size_t index, double v) { store_from_double(base, t, index, v); }

// C = finish(alpha op(A) op(B) + beta C, index of the element in C).
template <typename Finish>
void gemm_with(const GemmDesc& d, const void* A, const void* B, void* C, Finish&& finish) {
  check_gemm(d);
  const OperandStrides sa = operand_strides(d.a), sb = operand_strides(d.b), sc = operand_strides(d.c);
  const size_t ea = dtype_size(d.a.type), eb = dtype_size(d.b.type), ec = dtype_size(d.c.type);
  for (size_t bi = 0; bi < d.batch; ++bi) {
    const char* a = static_cast<const char*>(A) + int64_t(bi) * d.a.batch_stride * int64_t(ea);
    const char* b = static_cast<const char*>(B) + int64_t(bi) * d.b.batch_stride * int64_t(eb);
    char* c = static_cast<char*>(C) + int64_t(bi) * d.c.batch_stride * int64_t(ec);
#pragma omp parallel for schedule(static)
    for (long long i = 0; i < (long long)d.M; ++i) {
      std::vector<double> row(d.K);
      for (size_t k = 0; k < d.K; ++k) row[k] = load(a, d.a.type, size_t(i) * sa.row + k * sa.col);
      for (size_t j = 0; j < d.N; ++j) {
        double acc = 0;
        for (size_t k = 0; k < d.K; ++k) acc += row[k] * load(b, d.b.type, k * sb.row + j * sb.col);
        const size_t ci = size_t(i) * sc.row + j * sc.col;
        double v = double(d.alpha) * acc;
        if (d.beta != 0.0f) v += double(d.beta) * load(c, d.c.type, ci);
        store(c, d.c.type, ci, finish(v, bi, ci));
      }
    }
  }
}

}  // namespace

void gemm(const GemmDesc& d, const void* A, const void* B, void* C) {
  gemm_with(d, A, B, C, [](double v, size_t, size_t) { return v; });
}

void gemm_activation(const GemmDesc& d, const GemmEpilogue& e, const void* A, const void* B, void* C, const void* Y) {
  TESSERA_CHECK(d.beta == 0.0f, "gemm_activation: beta must be 0, not {}", d.beta);
  const size_t ec = dtype_size(d.c.type);
  gemm_with(d, A, B, C, [&](double v, size_t bi, size_t ci) {
    if (e.kind == GemmEpilogueKind::activation) return activation_value<double>(e.act, v);
    const char* y = static_cast<const char*>(Y) + int64_t(bi) * d.c.batch_stride * int64_t(ec);
    return v * activation_derivative<double>(e.act, load(y, d.c.type, ci), 0.0);
  });
}

}  // namespace tessera::ops::cpu
