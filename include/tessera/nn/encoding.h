#pragma once
// Input encodings with tiny-cuda-nn config names: HashGrid, DenseGrid, Frequency,
// SphericalHarmonics, OneBlob, TriangleWave, Identity, Composite.
// An encoding maps [batch, input_width] -> [batch, output_width]. Inputs and outputs are
// fp32 matrix views [batch, width]; a view may be a column slice of a wider matrix. Trainable encodings (the
// grids) do not own their parameters: the model holding them binds a slice of its
// parameter array, so one optimizer pass updates network and encoding together.
#include <cstdint>
#include <memory>

#include "tessera/core/config.h"
#include "tessera/core/device.h"
#include "tessera/core/rng.h"
#include "tessera/nn/params.h"
#include "tessera/ops/encoding_math.h"

namespace tessera::nn {


class Encoding {
 public:
  virtual ~Encoding() = default;
  virtual uint32_t input_width() const = 0;
  virtual uint32_t output_width() const = 0;
  virtual size_t n_params() const { return 0; }
  virtual Json config() const = 0;
  Device device() const { return device_; }

  virtual void bind_params(const ParamBinding& p) { p_ = p; }
  // Fills host_params [n_params] with the initial values.
  virtual void initialize(float* host_params, Pcg32& rng) { (void)host_params, (void)rng; }

  // in: [batch, input_width]; out: [batch, output_width].
  virtual void encode(const TensorView& in, const TensorView& out) = 0;
  // An fp16 output view for a consumer that reads fp16; only where can_encode_half().
  virtual bool can_encode_half() const { return false; }
  virtual void encode_half(const TensorView& in, const TensorView& out);
  // Adds parameter gradients into the bound gradients; writes dL_din [batch, input_width]
  // (overwrite) unless it is empty.
  virtual void backward(const TensorView& in, const TensorView& dL_dout, const TensorView& dL_din) = 0;
  // A hash or dense grid's layout (a consumer may compute the encoding itself: the fused
  // MLP's input stage); null for every other encoding.
  virtual const ops::GridLayout* grid_layout() const { return nullptr; }
  const ParamBinding& param_binding() const { return p_; }

 protected:
  explicit Encoding(Device device) : device_(device) {}
  Device device_;
  ParamBinding p_;
};

// Builds an encoding of n_input_dims from a tiny-cuda-nn style config. Unknown otype or
// key is an error listing the valid choices.
std::unique_ptr<Encoding> create_encoding(const Json& config, uint32_t n_input_dims, Device device);

}  // namespace tessera::nn
