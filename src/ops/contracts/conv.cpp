// Contracts of the convolution ops: the descriptor, the tensors it describes, and the
// algorithm when the caller names one (whether its math applies to the shape; whether a
// backend has it is that backend's answer).
#include "contract_checks.h"
#include "ops/activation_math.h"
#include "tessera/ops/conv.h"

namespace tessera::ops {

namespace {
void tensor(ConvOp op, const char* what, const TensorView& v, const ConvDesc& d, size_t elements) {
  const char* name = to_string(op);
  TESSERA_CHECK(!v.empty(), "{}: {}: no data given", name, what);
  TESSERA_CHECK(v.dtype == d.type, "{}: {}: {} data where the descriptor says {}", name, what, to_string(v.dtype),
                to_string(d.type));
  TESSERA_CHECK(v.numel() >= elements, "{}: {}: {} elements where {} are needed", name, what, v.numel(), elements);
  TESSERA_CHECK(v.contiguous(), "{}: {}: must be contiguous", name, what);
}

void descriptor(ConvOp op, const ConvDesc& d) {
  check_conv(d, to_string(op));
  if (d.algo == ConvAlgo::automatic || d.algo == ConvAlgo::benchmark) return;
  const std::string why = conv_algo_rejects(d.algo, op, d);
  TESSERA_CHECK(why.empty(), "{}: algorithm {} does not apply: {}", to_string(op), to_string(d.algo), why);
}
}  // namespace

void Conv2dForward::check(Stream&, const ConvDesc& d, Activation, const TensorView& x, const TensorView& w,
                          const TensorView& bias, const TensorView& y) {
  descriptor(ConvOp::forward, d);
  tensor(ConvOp::forward, "x", x, d, d.input_elements());
  tensor(ConvOp::forward, "w", w, d, d.filter_elements());
  tensor(ConvOp::forward, "y", y, d, d.output_elements());
  contract::optional_view(name, "bias", bias, DType::f32, d.K);
}

void Conv2dBackwardData::check(Stream&, const ConvDesc& d, Activation below, const TensorView& dz,
                               const TensorView& w, const TensorView& x, const TensorView& dx) {
  descriptor(ConvOp::backward_data, d);
  TESSERA_CHECK(!activation_needs_input(below),
                "conv2d_backward_data: the activation below ({}) needs its input for its derivative; apply it "
                "separately",
                to_string(below));
  tensor(ConvOp::backward_data, "dz", dz, d, d.output_elements());
  tensor(ConvOp::backward_data, "w", w, d, d.filter_elements());
  if (below != Activation::None) tensor(ConvOp::backward_data, "x", x, d, d.input_elements());
  tensor(ConvOp::backward_data, "dx", dx, d, d.input_elements());
}

void Conv2dBackwardWeight::check(Stream&, const ConvDesc& d, const TensorView& x, const TensorView& dz,
                                 const TensorView& dw, const TensorView& dbias) {
  descriptor(ConvOp::backward_weight, d);
  tensor(ConvOp::backward_weight, "x", x, d, d.input_elements());
  tensor(ConvOp::backward_weight, "dz", dz, d, d.output_elements());
  tensor(ConvOp::backward_weight, "dw", dw, d, d.filter_elements());
  contract::optional_view(name, "dbias", dbias, DType::f32, d.K);
}

}  // namespace tessera::ops
