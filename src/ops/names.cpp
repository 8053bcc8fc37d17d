// Names of the runtime choices shared by every backend (tiny-cuda-nn spellings).
#include <algorithm>
#include <array>
#include <cctype>
#include <string>

#include "tessera/core/error.h"
#include "tessera/ops/activation.h"
#include "tessera/ops/fused_mlp.h"
#include "tessera/ops/loss_kind.h"

namespace tessera {

namespace {
std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}
constexpr std::array<std::pair<Activation, const char*>, 9> kActivations{{
    {Activation::None, "None"}, {Activation::ReLU, "ReLU"}, {Activation::LeakyReLU, "LeakyReLU"},
    {Activation::Sigmoid, "Sigmoid"}, {Activation::Tanh, "Tanh"}, {Activation::Softplus, "Softplus"},
    {Activation::Exponential, "Exponential"}, {Activation::SiLU, "SiLU"}, {Activation::Sine, "Sine"}}};
constexpr std::array<std::pair<LossKind, const char*>, 4> kLosses{{
    {LossKind::L2, "L2"}, {LossKind::L1, "L1"}, {LossKind::Huber, "Huber"}, {LossKind::RelativeL2, "RelativeL2"}}};
}  // namespace

const char* activation_names() { return "None, ReLU, LeakyReLU, Sigmoid, Tanh, Softplus, Exponential, SiLU, Sine"; }

Activation parse_activation(const std::string& name) {
  for (const auto& [a, n] : kActivations)
    if (lower(name) == lower(n)) return a;
  throw Error(format_message("unknown activation '{}'; valid choices: {}", name, activation_names()));
}

const char* to_string(Activation a) {
  for (const auto& [k, n] : kActivations)
    if (k == a) return n;
  return "?";
}

LossKind parse_loss_kind(const std::string& name) {
  for (const auto& [k, n] : kLosses)
    if (lower(name) == lower(n)) return k;
  throw Error(format_message("unknown loss '{}'; valid choices: L2, L1, Huber, RelativeL2", name));
}

const char* to_string(LossKind k) {
  for (const auto& [kind, n] : kLosses)
    if (kind == k) return n;
  return "?";
}

namespace ops {
const std::string& fused_width_choices() {
  static const std::string list = [] {
    std::string s;
    for (uint32_t w : kFusedWidths) s += (s.empty() ? "" : ", ") + std::to_string(w);
    return s;
  }();
  return list;
}

const char* to_string(FusedMlpKernel k) {
  switch (k) {
    case FusedMlpKernel::automatic: return "auto";
    case FusedMlpKernel::mma: return "mma";
    case FusedMlpKernel::wmma: return "wmma";
  }
  return "?";
}
const char* to_string(FusedWeightGrads g) {
  switch (g) {
    case FusedWeightGrads::automatic: return "auto";
    case FusedWeightGrads::in_kernel: return "in_kernel";
    case FusedWeightGrads::gemm: return "gemm";
  }
  return "?";
}
}  // namespace ops

}  // namespace tessera
