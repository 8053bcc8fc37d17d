// Contracts of the encodings (elementwise and grid: forward, backward, second backward)
// and of the image sampler. Inputs and outputs are matrix views [batch, width] whose rows
// are contiguous (the rows themselves may be apart: column slices of a wider matrix).
#include "contract_checks.h"
#include "tessera/core/backend.h"
#include "tessera/ops/encodings.h"
#include "tessera/ops/image_sample.h"

namespace tessera::ops {

void ElementwiseEncode::check(Stream&, const ElementwiseEncoding& e, const TensorView& in, const TensorView& out) {
  contract::encoding_views(name, e.n_dims, e.output_width(), in, out);
}

void ElementwiseEncodeBackward::check(Stream&, const ElementwiseEncoding& e, const TensorView& in,
                                      const TensorView& dL_dout, const TensorView& dL_din) {
  contract::encoding_views(name, e.n_dims, e.output_width(), in, dL_dout);
  contract::encoding_views(name, e.n_dims, e.n_dims, in, dL_din);
}

void ElementwiseEncodeBackwardBackward::check(Stream&, const ElementwiseEncoding& e, const TensorView& in,
                                              const TensorView& dL_dout, const TensorView& dL_ddLdin,
                                              const TensorView& dL_ddLdout, const TensorView& dL_din) {
  contract::encoding_views(name, e.n_dims, e.output_width(), in, dL_dout);
  contract::encoding_views(name, e.n_dims, e.n_dims, in, dL_ddLdin);
  if (dL_ddLdout) contract::encoding_views(name, e.n_dims, e.output_width(), in, dL_ddLdout);
  if (dL_din) contract::encoding_views(name, e.n_dims, e.n_dims, in, dL_din);
}

namespace {
// Both parameter copies a grid op gets: the fp32 master always; the fp16 copy where the
// backend reads it (Backend::uses_half_params), and if given, whole.
void grid_params(const char* op, const Stream& stream, const GridLayout& g, const TensorView& params,
                 const TensorView& params_half) {
  contract::view(op, "params", params, DType::f32, g.n_params());
  if (stream.backend().uses_half_params()) contract::view(op, "params_half", params_half, DType::f16, g.n_params());
  else contract::optional_view(op, "params_half", params_half, DType::f16, g.n_params());
}
}  // namespace

void GridEncode::check(Stream& s, const GridLayout& g, const TensorView& params, const TensorView& params_half,
                       const TensorView& in, const TensorView& out) {
  grid_params(name, s, g, params, params_half);
  contract::encoding_views(name, g.n_dims, g.output_width(), in, out);
}

void GridEncodeHalf::check(Stream& s, const GridLayout& g, const TensorView& params, const TensorView& params_half,
                           const TensorView& in, const TensorView& out) {
  grid_params(name, s, g, params, params_half);
  contract::encoding_views(name, g.n_dims, g.output_width(), in, out, DType::f16);
}

void GridEncodeBackward::check(Stream& s, const GridLayout& g, const TensorView& params,
                               const TensorView& params_half, const TensorView& in, const TensorView& dL_dout,
                               const TensorView& dL_dparams, const TensorView& dL_din) {
  grid_params(name, s, g, params, params_half);
  contract::encoding_views(name, g.n_dims, g.output_width(), in, dL_dout);
  contract::optional_view(name, "dL_dparams", dL_dparams, DType::f32, g.n_params());
  if (dL_din) contract::encoding_views(name, g.n_dims, g.n_dims, in, dL_din);
}

void GridEncodeBackwardBackward::check(Stream& s, const GridLayout& g, const TensorView& params,
                                       const TensorView& params_half, const TensorView& in,
                                       const TensorView& dL_dout, const TensorView& dL_ddLdin,
                                       const TensorView& dL_ddLdout, const TensorView& dL_dparams,
                                       const TensorView& dL_din, const TensorView& dL_dout_first) {
  grid_params(name, s, g, params, params_half);
  if (dL_dout_first) {
    contract::encoding_views(name, g.n_dims, g.output_width(), in, dL_dout_first);
    TESSERA_CHECK(dL_dparams, "grid_encode_backward_backward: dL_dout_first needs dL_dparams (its gradients go there)");
  }
  contract::encoding_views(name, g.n_dims, g.output_width(), in, dL_dout);
  contract::encoding_views(name, g.n_dims, g.n_dims, in, dL_ddLdin);
  if (dL_ddLdout) contract::encoding_views(name, g.n_dims, g.output_width(), in, dL_ddLdout);
  if (dL_din) contract::encoding_views(name, g.n_dims, g.n_dims, in, dL_din);
  contract::optional_view(name, "dL_dparams", dL_dparams, DType::f32, g.n_params());
}

void SampleImage::check(Stream&, const TensorView& image, uint32_t width, uint32_t height, uint64_t,
                        const TensorView& xy, const TensorView& rgb) {
  TESSERA_CHECK(width >= 1 && height >= 1, "sample_image: the image is {}x{}", width, height);
  contract::view(name, "image", image, DType::f32, size_t(width) * height * 3);
  TESSERA_CHECK(xy.rank == 2 && xy.cols() == 2 && xy.contiguous(), "sample_image: xy must be a contiguous [n, 2] matrix");
  contract::view(name, "xy", xy, DType::f32, xy.rows() * 2);
  contract::view(name, "rgb", rgb, DType::f32, xy.rows() * 3);
  TESSERA_CHECK(rgb.contiguous(), "sample_image: rgb must be contiguous");
}

}  // namespace tessera::ops
