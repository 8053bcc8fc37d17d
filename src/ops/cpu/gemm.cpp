// GEMM on the CPU: the reference the CUDA kernels are tested against (double accumulation).
#include <cstring>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/ops/gemm.h"

namespace tessera::ops::cpu {

namespace {

double load(const void* base, DType t, size_t index) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(base)[index];
    case DType::f16: {
      _Float16 h;
      std::memcpy(&h, static_cast<const uint16_t*>(base) + index, 2);
      return double(h);
    }
    case DType::bf16: {
      const uint32_t bits = uint32_t(static_cast<const uint16_t*>(base)[index]) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
  }
  return 0;
}

void store(void* base, DType t, size_t index, double v) {
  switch (t) {
    case DType::f32: static_cast<float*>(base)[index] = float(v); return;
    case DType::f16: {
      const _Float16 h = static_cast<_Float16>(float(v));
      std::memcpy(static_cast<uint16_t*>(base) + index, &h, 2);
      return;
    }
    case DType::bf16: {
      // Round to nearest even, as __float2bfloat16_rn.
      const float f = float(v);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      bits += 0x7fffu + ((bits >> 16) & 1u);
      static_cast<uint16_t*>(base)[index] = uint16_t(bits >> 16);
      return;
    }
  }
}

}  // namespace

void gemm(const GemmDesc& d, const void* A, const void* B, void* C) {
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
        store(c, d.c.type, ci, v);
      }
    }
  }
}

}  // namespace tessera::ops::cpu
