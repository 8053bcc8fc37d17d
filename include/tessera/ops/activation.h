#pragma once
// Elementwise activations shared by every backend. Each has a value and a derivative;
// the derivative is written in terms of the forward OUTPUT y where that is possible
// (so the fused kernels need store only y), and in terms of the input z otherwise
// (SiLU, Sine: the kernels then also keep z).
#include <cmath>
#include <string>
#include <type_traits>

#include "tessera/core/hd.h"

namespace tessera {

enum class Activation { None, ReLU, LeakyReLU, Sigmoid, Tanh, Softplus, Exponential, SiLU, Sine };

constexpr float kLeakyReluSlope = 0.01f;

// tiny-cuda-nn spelling ("None", "ReLU", ...); case-insensitive. Unknown names are an
// error listing the valid ones.
Activation parse_activation(const std::string& name);
const char* to_string(Activation a);
const char* activation_names();  // "None, ReLU, ..." for messages

TESSERA_HD constexpr bool activation_needs_input(Activation a) {
  return a == Activation::SiLU || a == Activation::Sine;
}

}  // namespace tessera
