#pragma once
// General matrix multiply C = alpha * op(A) * op(B) + beta * C for any M, N, K.
// Each operand has a storage layout (row- or column-major) and a leading dimension; op
// transposes A and/or B. Inputs fp32, fp16 or bf16 (A and B the same type), fp32
// accumulation, C in fp32, fp16 or bf16. Strided-batched: `batch` independent products,
// operand i starting at base + i * stride. beta = 0 never reads C (as in BLAS).
#include <cstddef>
#include <cstdint>

#include "tessera/core/op_contract.h"
#include "tessera/core/tensor.h"
#include "tessera/ops/activation.h"

namespace tessera {
class Stream;
}

namespace tessera::ops {

using tessera::DType;  // gemm operands are f32, f16 or bf16
enum class Layout { row_major, col_major };

struct GemmOperand {
  DType type = DType::f32;
  Layout layout = Layout::row_major;
  bool transpose = false;  // op(X) = X^T (for C: must be false)
  size_t ld = 0;           // leading dimension of the stored matrix
  int64_t batch_stride = 0;  // elements between consecutive batch entries
};

struct GemmDesc {
  size_t M = 0, N = 0, K = 0, batch = 1;
  GemmOperand a, b, c;  // op(A): M x K, op(B): K x N, C: M x N
  float alpha = 1.0f, beta = 0.0f;
};

using tessera::dtype_size;
using tessera::to_string;
// Checks leading dimensions, types and transpose flags; throws tessera::Error naming
// what is wrong.
void check_gemm(const GemmDesc& d, const char* op = "gemm");

// Element strides of a stored operand seen as a rows x cols logical matrix after op:
// element (r, c) sits at r * row_stride + c * col_stride.
struct OperandStrides {
  size_t row, col;
};
inline OperandStrides operand_strides(const GemmOperand& o) {
  const bool row_major_view = (o.layout == Layout::row_major) != o.transpose;
  return row_major_view ? OperandStrides{o.ld, 1} : OperandStrides{1, o.ld};
}

// Op tag (dispatch.h): the backend's fastest kernel for the problem. A, B, C: views of
// the operands' storage (vectors from the first element of batch entry 0), of the types
// the descriptor names, holding the problem.
struct Gemm {
  static constexpr const char* name = "gemm";
  using Fn = void(Stream&, const GemmDesc& d, const TensorView& A, const TensorView& B, const TensorView& C);
  static Contract<Fn> check;
};

// A layer of a layer-by-layer MLP as one product: the activation (forward) or the
// derivative of the layer below's activation (backward) applied as C is written, so no
// fp32 pre-activation makes a round trip through memory.
//   activation:            C = act(alpha op(A) op(B))
//   activation_derivative: C = alpha op(A) op(B) * act'(y), y = Y at C's position (the
//                          layer's forward output: Y has C's type, layout, ld and batch
//                          stride)
// beta must be 0; act must be one whose derivative follows from its output (not SiLU or
// Sine).
enum class GemmEpilogueKind { activation, activation_derivative };
struct GemmEpilogue {
  GemmEpilogueKind kind = GemmEpilogueKind::activation;
  Activation act = Activation::None;
};
const char* to_string(GemmEpilogueKind k);
struct GemmActivation {
  static constexpr const char* name = "gemm_activation";
  using Fn = void(Stream&, const GemmDesc& d, const GemmEpilogue& e, const TensorView& A, const TensorView& B,
                  const TensorView& C, const TensorView& Y);
  static Contract<Fn> check;
};

}  // namespace tessera::ops
