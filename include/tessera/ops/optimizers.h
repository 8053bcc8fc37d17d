#pragma once
// Optimizer update ops over flat fp32 parameter arrays. Each reads the step's
// TrainState: a step flagged skip_this_step (non-finite gradients) changes nothing.
#include <cstddef>
#include <cstdint>

#include "tessera/core/op_contract.h"
#include "tessera/core/tensor.h"
#include "tessera/ops/train_state.h"

namespace tessera {
class Stream;
}

namespace tessera::ops {

struct AdamHyper {
  float learning_rate = 1e-3f;
  float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f;
  float l2_reg = 0.0f;  // added to the gradient as l2_reg * param (tiny-cuda-nn's meaning)
  // Parameters past the network's matrices (encoding tables): see adam_update.
  float non_matrix_learning_rate_factor = 1.0f;
  bool optimize_matrix = true, optimize_non_matrix = true;
  // tiny-cuda-nn's weight decays (scaled by the step's bias-corrected rate) and AdaBound
  // (the step size clamped to bounds that close on 0.1): see adam_update.
  float relative_decay = 0.0f, absolute_decay = 0.0f;
  bool adabound = false;
  // Encoding entries no sample touched (zero gradient) are updated too, as PyTorch's Adam
  // updates every parameter (nerfacc's recipe); tiny-cuda-nn skips them. Their moments keep
  // moving them after the batch left them. The tables still take no L2 term: PyTorch's
  // weight decay there would be a gradient of its own on every untouched entry, which Adam
  // turns into a full-rate step towards zero (measured: NeRF lost 6 dB).
  bool update_untouched = false;
  // m and v stored as bf16, packed in one 32-bit word per parameter (m high, v low) and
  // stochastically rounded (adam_math.h): 8 bytes less to move per parameter and step, most
  // of a large hash table's Adam pass being memory traffic.
  bool bf16_moments = false;
};

// The moving average of the parameters an optimizer keeps beside them (Ema, what
// inference uses), updated in the optimizer's own pass once the step has moved the
// parameters: values = (1 - keep) * params + keep * values. A skipped step still averages
// (its parameters stand still). keep 0 starts the average at the parameters without reading
// values; values empty: no average.
struct ParamsAverage {
  TensorView values;  // fp32 [n]
  float keep = 0.0f;
};

// Op tags (ops::call<Op>(stream, ...), dispatch.h). params, grad, m, v: fp32 [n]; the first
// n_matrix are network weights. With h.bf16_moments, m is the packed moments, u32 [n], and
// v is empty. params_half (optional, empty view: none) is the fp16 copy
// refreshed in the same pass, and so is the average. state: the step's TrainState (a view
// of its bytes); a step flagged skip_this_step changes no parameter.
struct AdamStep {
  static constexpr const char* name = "adam_step";
  using Fn = void(Stream&, const AdamHyper& h, size_t n_matrix, const TensorView& grad, const TensorView& params,
                  const TensorView& params_half, const TensorView& m, const TensorView& v,
                  const ParamsAverage& average, const TensorView& state);
  static Contract<Fn> check;
};
struct SgdStep {
  static constexpr const char* name = "sgd_step";
  using Fn = void(Stream&, float learning_rate, float l2_reg, const TensorView& grad, const TensorView& params,
                  const TensorView& params_half, const TensorView& state);
  static Contract<Fn> check;
};
// dst (fp16) = src (fp32), elementwise over src's elements.
struct ConvertToHalf {
  static constexpr const char* name = "convert_to_half";
  using Fn = void(Stream&, const TensorView& src, const TensorView& dst);
  static Contract<Fn> check;
};

}  // namespace tessera::ops
