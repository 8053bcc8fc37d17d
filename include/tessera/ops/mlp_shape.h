#pragma once
// The shape of a fully connected network (no biases, as in tiny-cuda-nn's FullyFusedMLP)
// and the layout of its parameters. Every layer's weight matrix W_l is stored
// [out_padded, in_padded] row-major (PyTorch's orientation), padded to multiples of 16 so
// the tensor-core kernels read it directly; padding entries are zero and stay zero
// (their gradients are exactly zero). Layers: in -> width, (n_hidden-1) x width -> width,
// width -> out.
#include <cstddef>
#include <cstdint>

namespace tessera {

constexpr uint32_t round_up(uint32_t x, uint32_t m) { return (x + m - 1) / m * m; }

struct MlpShape {
  uint32_t input_width = 0;
  uint32_t width = 64;
  uint32_t n_hidden_layers = 2;
  uint32_t output_width = 0;

  uint32_t input_padded() const { return round_up(input_width, 16); }
  uint32_t output_padded() const { return round_up(output_width, 16); }
  uint32_t n_layers() const { return n_hidden_layers + 1; }
  uint32_t layer_in(uint32_t l) const { return l == 0 ? input_padded() : width; }
  uint32_t layer_out(uint32_t l) const { return l + 1 == n_layers() ? output_padded() : width; }
  // Logical (unpadded) sizes, for the CPU reference loops and initialization fan-in/out.
  uint32_t layer_in_logical(uint32_t l) const { return l == 0 ? input_width : width; }
  uint32_t layer_out_logical(uint32_t l) const { return l + 1 == n_layers() ? output_width : width; }
  size_t layer_offset(uint32_t l) const {
    size_t off = 0;
    for (uint32_t i = 0; i < l; ++i) off += size_t(layer_in(i)) * layer_out(i);
    return off;
  }
  size_t n_params() const { return layer_offset(n_layers()); }
};

}  // namespace tessera
