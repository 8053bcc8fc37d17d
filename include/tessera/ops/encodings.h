#pragma once
// Input-encoding ops. Inputs and outputs are column slices of row-major matrices
// (pointer to the slice's first column + the matrix's row stride), so a Composite
// encoding can hand each nested encoding its slice without copies.
// The CPU functions are the reference; CUDA reads the fp16 copy of grid parameters.
#include <cstddef>
#include <cstdint>

#include "tessera/core/op_contract.h"
#include "tessera/core/tensor.h"
#include "tessera/core/hd.h"
#include "tessera/ops/grid_layout.h"

namespace tessera {
class Stream;
}

namespace tessera::ops {

// Encodings without parameters, applied per input dimension (SphericalHarmonics: per
// 3-vector).
enum class ElementwiseKind { Identity, Frequency, TriangleWave, OneBlob, SphericalHarmonics };

struct ElementwiseEncoding {
  ElementwiseKind kind = ElementwiseKind::Identity;
  uint32_t n_dims = 1;
  uint32_t order = 1;  // n_frequencies (Frequency, TriangleWave), n_bins (OneBlob), degree (SH)
  float scale = 1.0f, offset = 0.0f;  // Identity
  TESSERA_HD uint32_t outputs_per_dim() const {
    switch (kind) {
      case ElementwiseKind::Identity: return 1;
      case ElementwiseKind::Frequency: return 2 * order;
      case ElementwiseKind::TriangleWave: return order;
      case ElementwiseKind::OneBlob: return order;
      case ElementwiseKind::SphericalHarmonics: return 0;
    }
    return 0;
  }
  TESSERA_HD uint32_t output_width() const {
    return kind == ElementwiseKind::SphericalHarmonics ? order * order : n_dims * outputs_per_dim();
  }
};

// Uniform initialization of grid parameters as tiny-cuda-nn does: U(-1e-4, 1e-4).
constexpr float kGridInitRange = 1e-4f;

// Builds the per-level table layout: levels whose dense grid (rounded up to 8 entries)
// fits in 2^log2_hashmap_size entries are stored densely, others are hashed.
GridLayout make_grid_layout(uint32_t n_dims, uint32_t n_levels, uint32_t n_features, uint32_t log2_hashmap_size,
                            float base_resolution, float per_level_scale, bool hashed, GridInterpolation interpolation);

// Op tags (dispatch.h). Inputs and outputs are fp32 matrix views [batch, width] (strided:
// column slices of a wider matrix). Grid ops get both parameter copies (params fp32 and
// params_half fp16, [n_params]): the CPU reads the fp32 master, CUDA the fp16 copy.
struct ElementwiseEncode {
  static constexpr const char* name = "elementwise_encode";
  using Fn = void(Stream&, const ElementwiseEncoding& e, const TensorView& in, const TensorView& out);
  static Contract<Fn> check;
};
// Writes dL_din [batch, n_dims] (overwrite).
struct ElementwiseEncodeBackward {
  static constexpr const char* name = "elementwise_encode_backward";
  using Fn = void(Stream&, const ElementwiseEncoding& e, const TensorView& in, const TensorView& dL_dout,
                  const TensorView& dL_din);
  static Contract<Fn> check;
};
// The second backward through ElementwiseEncodeBackward's input gradient (no parameters):
// given dL_ddLdin [batch, n_dims], writes dL_ddLdout [batch, width] and the second-order
// dL_din [batch, n_dims], each only where its view is not empty.
struct ElementwiseEncodeBackwardBackward {
  static constexpr const char* name = "elementwise_encode_backward_backward";
  using Fn = void(Stream&, const ElementwiseEncoding& e, const TensorView& in, const TensorView& dL_dout,
                  const TensorView& dL_ddLdin, const TensorView& dL_ddLdout, const TensorView& dL_din);
  static Contract<Fn> check;
};
struct GridEncode {
  static constexpr const char* name = "grid_encode";
  using Fn = void(Stream&, const GridLayout& g, const TensorView& params, const TensorView& params_half,
                  const TensorView& in, const TensorView& out);
  static Contract<Fn> check;
};
// fp16 output for consumers that read fp16 (the fused MLP).
struct GridEncodeHalf {
  static constexpr const char* name = "grid_encode_half";
  using Fn = void(Stream&, const GridLayout& g, const TensorView& params, const TensorView& params_half,
                  const TensorView& in, const TensorView& out);
  static Contract<Fn> check;
};
// Adds into dL_dparams [n_params] unless empty; writes dL_din [batch, n_dims] (overwrite)
// unless empty.
struct GridEncodeBackward {
  static constexpr const char* name = "grid_encode_backward";
  using Fn = void(Stream&, const GridLayout& g, const TensorView& params, const TensorView& params_half,
                  const TensorView& in, const TensorView& dL_dout, const TensorView& dL_dparams,
                  const TensorView& dL_din);
  static Contract<Fn> check;
};
// The second backward through GridEncodeBackward's input gradient (tiny-cuda-nn's
// backward_backward_input, for losses on dL/d(in) such as an eikonal term): given
// dL_ddLdin [batch, n_dims], writes dL_ddLdout [batch, width], adds into dL_dparams
// [n_params] and writes the second-order dL_din [batch, n_dims]; each output only where its
// view is not empty. With dL_dout_first [batch, width] (not empty), GridEncodeBackward's
// parameter gradients for it are added too, in the same scatter on CUDA (a training step
// with an eikonal term: one pass over the table instead of two).
struct GridEncodeBackwardBackward {
  static constexpr const char* name = "grid_encode_backward_backward";
  using Fn = void(Stream&, const GridLayout& g, const TensorView& params, const TensorView& params_half,
                  const TensorView& in, const TensorView& dL_dout, const TensorView& dL_ddLdin,
                  const TensorView& dL_ddLdout, const TensorView& dL_dparams, const TensorView& dL_din,
                  const TensorView& dL_dout_first);
  static Contract<Fn> check;
};

}  // namespace tessera::ops
