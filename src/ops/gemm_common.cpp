// Backend-independent GEMM argument checks.
#include "tessera/core/error.h"
#include "tessera/ops/gemm.h"
#include "ops/activation_math.h"

namespace tessera::ops {

void check_gemm(const GemmDesc& d, const char* op) {
  for (const GemmOperand* o : {&d.a, &d.b, &d.c})
    TESSERA_CHECK(o->type == DType::f32 || o->type == DType::f16 || o->type == DType::bf16,
                  "{}: operands are fp32, fp16 or bf16, not {}", op, to_string(o->type));
  TESSERA_CHECK(d.a.type == d.b.type, "{}: A is {} but B is {}; both inputs must have the same type", op,
                to_string(d.a.type), to_string(d.b.type));
  TESSERA_CHECK(!d.c.transpose, "{}: C cannot be transposed (swap the layout instead)", op);
  TESSERA_CHECK(d.a.type != DType::f32 || d.c.type == DType::f32, "{}: fp32 inputs need an fp32 C", op);
  // Stored shapes: op(A) is M x K, so A itself is K x M when transposed.
  auto stored_cols = [](const GemmOperand& o, size_t rows, size_t cols) {
    const size_t sr = o.transpose ? cols : rows, sc = o.transpose ? rows : cols;
    return o.layout == Layout::row_major ? sc : sr;
  };
  const size_t need_a = stored_cols(d.a, d.M, d.K), need_b = stored_cols(d.b, d.K, d.N),
               need_c = stored_cols(d.c, d.M, d.N);
  TESSERA_CHECK(d.a.ld >= std::max<size_t>(need_a, 1), "{}: lda {} is smaller than {}", op, d.a.ld, need_a);
  TESSERA_CHECK(d.b.ld >= std::max<size_t>(need_b, 1), "{}: ldb {} is smaller than {}", op, d.b.ld, need_b);
  TESSERA_CHECK(d.c.ld >= std::max<size_t>(need_c, 1), "{}: ldc {} is smaller than {}", op, d.c.ld, need_c);
  TESSERA_CHECK(d.batch >= 1, "{}: batch must be at least 1", op);
}

const char* to_string(GemmEpilogueKind k) {
  return k == GemmEpilogueKind::activation ? "activation" : "activation_derivative";
}

}  // namespace tessera::ops
