// ConvDesc arithmetic, the algorithms' names and where their math applies.
#include <utility>

#include "tessera/core/error.h"
#include "tessera/ops/conv.h"

namespace tessera::ops {

const char* to_string(ConvLayout l) { return l == ConvLayout::nchw ? "NCHW" : "NHWC"; }

namespace {
constexpr std::pair<ConvAlgo, const char*> kAlgoNames[] = {
    {ConvAlgo::automatic, "auto"},           {ConvAlgo::direct, "direct"},
    {ConvAlgo::im2col_gemm, "im2col_gemm"},  {ConvAlgo::implicit_gemm, "implicit_gemm"},
    {ConvAlgo::winograd_2x2, "winograd_2x2"}, {ConvAlgo::winograd_4x4, "winograd_4x4"},
    {ConvAlgo::benchmark, "benchmark"}};
}  // namespace

const char* to_string(ConvAlgo a) {
  for (const auto& [algo, name] : kAlgoNames)
    if (algo == a) return name;
  return "?";
}

ConvAlgo conv_algo_from_string(const std::string& name) {
  std::string valid;
  for (const auto& [algo, n] : kAlgoNames) {
    if (name == n) return algo;
    valid += std::string(valid.empty() ? "" : ", ") + n;
  }
  throw Error(format_message("conv algorithm '{}' unknown; valid: {}", name, valid));
}

const char* to_string(ConvOp op) {
  switch (op) {
    case ConvOp::forward: return "conv2d_forward";
    case ConvOp::backward_data: return "conv2d_backward_data";
    default: return "conv2d_backward_weight";
  }
}

std::string conv_algo_rejects(ConvAlgo a, ConvOp op, const ConvDesc& d) {
  if (a != ConvAlgo::winograd_2x2 && a != ConvAlgo::winograd_4x4) return "";
  if (op == ConvOp::backward_weight) return "Winograd computes forward and backward-data only";
  if (d.R != 3 || d.S != 3 || d.stride_h != 1 || d.stride_w != 1 || d.dilation_h != 1 || d.dilation_w != 1 ||
      d.groups != 1)
    return fmt::format("Winograd needs a 3x3 kernel, stride 1, dilation 1 and groups 1 (got {}x{}, stride {}x{}, "
                       "dilation {}x{}, groups {})",
                       d.R, d.S, d.stride_h, d.stride_w, d.dilation_h, d.dilation_w, d.groups);
  if (op == ConvOp::backward_data && (d.pad_h > 2 || d.pad_w > 2))
    return fmt::format("Winograd backward-data needs padding of at most 2 (got {}x{})", d.pad_h, d.pad_w);
  return "";
}

namespace {
// Output extent of one axis; 0 when the dilated kernel does not fit the padded input.
uint32_t out_extent(uint32_t in, uint32_t kernel, uint32_t pad, uint32_t dilation, uint32_t stride) {
  const uint64_t padded = uint64_t(in) + 2ull * pad, span = uint64_t(dilation) * (kernel - 1) + 1;
  if (stride == 0 || kernel == 0 || span > padded) return 0;
  return uint32_t((padded - span) / stride + 1);
}
}  // namespace

uint32_t ConvDesc::P() const { return out_extent(H, R, pad_h, dilation_h, stride_h); }
uint32_t ConvDesc::Q() const { return out_extent(W, S, pad_w, dilation_w, stride_w); }

void check_conv(const ConvDesc& d, const char* op) {
  TESSERA_CHECK(d.N >= 1 && d.C >= 1 && d.H >= 1 && d.W >= 1,
                "{}: input N, C, H, W must be at least 1 (got {}, {}, {}, {})", op, d.N, d.C, d.H, d.W);
  TESSERA_CHECK(d.K >= 1, "{}: K (output channels) must be at least 1", op);
  TESSERA_CHECK(d.R >= 1 && d.S >= 1 && d.R <= 7 && d.S <= 7, "{}: kernel {}x{} out of range; R and S are 1 to 7", op,
                d.R, d.S);
  TESSERA_CHECK(d.stride_h >= 1 && d.stride_w >= 1, "{}: stride must be at least 1", op);
  TESSERA_CHECK(d.dilation_h >= 1 && d.dilation_w >= 1, "{}: dilation must be at least 1", op);
  TESSERA_CHECK(d.groups == 1 || d.groups == d.C, "{}: groups {} not supported; valid: 1 or C ({}, depthwise)", op,
                d.groups, d.C);
  TESSERA_CHECK(d.K % d.groups == 0, "{}: K {} must be a multiple of groups {}", op, d.K, d.groups);
  TESSERA_CHECK(d.type == DType::f32 || d.type == DType::f16 || d.type == DType::bf16,
                "{}: type {} not supported; valid: f32, f16, bf16", op, to_string(d.type));
  TESSERA_CHECK(d.P() >= 1 && d.Q() >= 1,
                "{}: the {}x{} kernel (dilation {}x{}) does not fit the {}x{} input padded by {}x{}", op, d.R, d.S,
                d.dilation_h, d.dilation_w, d.H, d.W, d.pad_h, d.pad_w);
  TESSERA_CHECK(d.input_elements() < (1ull << 40) && d.output_elements() < (1ull << 40), "{}: tensors too large", op);
}

void require_conv_algo(ConvOp op, ConvAlgo algo, const char* backend, std::initializer_list<ConvAlgo> available) {
  std::string valid;
  bool found = false;
  for (ConvAlgo a : available) {
    valid += std::string(valid.empty() ? "" : ", ") + to_string(a);
    found = found || a == algo;
  }
  TESSERA_CHECK(found, "{}: algorithm {} is not available on the {} backend; valid: {}", to_string(op),
                to_string(algo), backend, valid);
}

}  // namespace tessera::ops
