#pragma once
// Input encodings with tiny-cuda-nn config names: HashGrid, DenseGrid, Frequency,
// SphericalHarmonics, OneBlob, TriangleWave, Identity, and Composite (nested encodings on
// consecutive input columns: built as a Parallel module of them). Every encoding is a
// Module; its trainable tables (the grids) sit in the model's table region, so one
// optimizer pass updates network and encoding together. Encodings recompute from the input
// in backward: their forward keeps nothing.
#include <cstdint>
#include <memory>
#include <string>

#include "tessera/core/config.h"
#include "tessera/core/device.h"
#include "tessera/core/rng.h"
#include "tessera/nn/module.h"
#include "tessera/ops/grid_layout.h"

namespace tessera::nn {

class Encoding : public Module {
 public:
  Device device() const override { return device_; }
  size_t n_matrix_params() const override { return 0; }
  void bind_params(const ParamBinding& matrices, const ParamBinding& tables) override;
  void initialize(uint64_t seed) override;
  void params_changed() override;

  void inference(ConstView in, View out) override;
  std::unique_ptr<ModuleContext> forward(ConstView in, View out) override;
  void backward(ModuleContext& ctx, ConstView in, ConstView dL_dout, View dL_din, GradientMode mode) override;

  // A hash or dense grid's layout (a consumer may compute the encoding itself: the fused
  // MLP's input stage); null for every other encoding.
  virtual const ops::GridLayout* grid_layout() const { return nullptr; }
  // The bound tables (empty without parameters).
  const ParamBinding& tables() const { return p_; }

 protected:
  explicit Encoding(Device device) : device_(device) {}
  // in: [batch, input_width] fp32; out: [batch, output_width], fp32 or (where
  // can_output_half()) contiguous fp16. batch > 0.
  virtual void encode(ConstView in, View out) = 0;
  // Adds parameter gradients into the bound gradients; writes dL_din [batch, input_width]
  // (overwrite) unless it is empty. batch > 0.
  virtual void encode_backward(ConstView in, ConstView dL_dout, View dL_din) = 0;
  // Fills host [n_params] with the initial values.
  virtual void initialize_tables(float* host, Pcg32& rng) { (void)host, (void)rng; }

  Device device_;
  ParamBinding p_;
};

// Builds an encoding of n_input_dims from a tiny-cuda-nn style config. Unknown otype or
// key is an error listing the valid choices.
std::unique_ptr<Module> create_encoding(const Json& config, uint32_t n_input_dims, Device device);

// Composite encodings nest at most this deep (deeper configs are an error).
inline constexpr int kMaxCompositeDepth = 64;
// The otype as create_encoding reads it (its case set right; an unknown name unchanged).
std::string canonical_encoding_otype(const std::string& otype);
// Whether a canonical otype is a grid encoding (levels of cells: HashGrid, DenseGrid, Grid).
bool is_grid_encoding(const std::string& canonical_otype);

}  // namespace tessera::nn
