#pragma once
// The activations' values and derivatives, shared by every backend's kernels
// (TESSERA_HD; OpenCL mirrors them in common.cl).
#include <cmath>
#include <type_traits>

#include "tessera/core/hd.h"
#include "tessera/ops/activation.h"

namespace tessera {

// Device code uses the fast intrinsics (the networks run in fp16, so their ~2 ulp
// error is invisible) and avoids sinf's slow path, which needs local memory.
namespace act_math {
#ifdef __CUDA_ARCH__
__device__ __forceinline__ float exp(float x) { return __expf(x); }
__device__ __forceinline__ float sin(float x) { return __sinf(x); }
__device__ __forceinline__ float cos(float x) { return __cosf(x); }
__device__ __forceinline__ float log1p(float x) { return __logf(1.0f + x); }
__device__ __forceinline__ float tanh(float x) { return tanhf(x); }
#else
template <typename T> T exp(T x) { return std::exp(x); }
template <typename T> T sin(T x) { return std::sin(x); }
template <typename T> T cos(T x) { return std::cos(x); }
template <typename T> T log1p(T x) { return std::log1p(x); }
template <typename T> T tanh(T x) { return std::tanh(x); }
#endif
}  // namespace act_math

template <typename T>
TESSERA_HD T activation_value(Activation a, T z) {
  using namespace act_math;
  switch (a) {
    case Activation::None: return z;
    case Activation::ReLU: return z > T(0) ? z : T(0);
    case Activation::LeakyReLU: return z > T(0) ? z : T(kLeakyReluSlope) * z;
    case Activation::Sigmoid: return T(1) / (T(1) + exp(-z));
    case Activation::Tanh: return tanh(z);
    // log(1+e^z) computed without overflow for large z.
    case Activation::Softplus: return z > T(15) ? z : log1p(exp(z));
    case Activation::Exponential: return exp(z);
    case Activation::SiLU: return z / (T(1) + exp(-z));
    case Activation::Sine: return sin(z);
  }
  return z;
}

// dy/dz given the output y and (for SiLU/Sine) the input z.
template <typename T>
TESSERA_HD T activation_derivative(Activation a, T y, T z) {
  using namespace act_math;
  switch (a) {
    case Activation::None: return T(1);
    case Activation::ReLU: return y > T(0) ? T(1) : T(0);
    case Activation::LeakyReLU: return y > T(0) ? T(1) : T(kLeakyReluSlope);
    case Activation::Sigmoid: return y * (T(1) - y);
    case Activation::Tanh: return T(1) - y * y;
    case Activation::Softplus: return T(1) - exp(-y);  // sigmoid(z) = 1 - e^{-softplus(z)}
    case Activation::Exponential: return y;
    case Activation::SiLU: {
      T s = T(1) / (T(1) + exp(-z));
      return s * (T(1) + z * (T(1) - s));
    }
    case Activation::Sine: return cos(z);
  }
  return T(1);
}

// d2y/dz2 given the output y and the input z (second derivatives through an MLP: the
// backward of its input gradient). Zero for the piecewise-linear ones.
template <typename T>
TESSERA_HD T activation_second_derivative(Activation a, T y, T z) {
  using namespace act_math;
  switch (a) {
    case Activation::None:
    case Activation::ReLU:
    case Activation::LeakyReLU: return T(0);
    case Activation::Sigmoid: return y * (T(1) - y) * (T(1) - T(2) * y);
    case Activation::Tanh: return T(-2) * y * (T(1) - y * y);
    case Activation::Softplus: {
      const T s = T(1) - exp(-y);  // sigmoid(z)
      return s * (T(1) - s);
    }
    case Activation::Exponential: return y;
    case Activation::SiLU: {
      const T s = T(1) / (T(1) + exp(-z));
      return s * (T(1) - s) * (T(2) + z * (T(1) - T(2) * s));
    }
    case Activation::Sine: return -y;
  }
  return T(0);
}

// Calls f(std::integral_constant<Activation, a>{}) so that code inside f sees the
// activation as a constant: a kernel then holds one specialized loop per activation
// instead of a switch per element (which bloats the hot loop and thrashes the i-cache).
template <typename F>
TESSERA_HD void with_activation(Activation a, F&& f) {
  switch (a) {
    case Activation::None: f(std::integral_constant<Activation, Activation::None>{}); return;
    case Activation::ReLU: f(std::integral_constant<Activation, Activation::ReLU>{}); return;
    case Activation::LeakyReLU: f(std::integral_constant<Activation, Activation::LeakyReLU>{}); return;
    case Activation::Sigmoid: f(std::integral_constant<Activation, Activation::Sigmoid>{}); return;
    case Activation::Tanh: f(std::integral_constant<Activation, Activation::Tanh>{}); return;
    case Activation::Softplus: f(std::integral_constant<Activation, Activation::Softplus>{}); return;
    case Activation::Exponential: f(std::integral_constant<Activation, Activation::Exponential>{}); return;
    case Activation::SiLU: f(std::integral_constant<Activation, Activation::SiLU>{}); return;
    case Activation::Sine: f(std::integral_constant<Activation, Activation::Sine>{}); return;
  }
}

}  // namespace tessera
