// Parameter-free encodings forward and backward on strided slices (every case of the
// former ElementwiseCudaVsCpu suite), and the image sampler of `fit image`. The grid
// encodings keep their own suite (tests/ops/test_encodings_cuda.cpp): its points are
// placed on cell faces and its scatter compares with an order-dependent tolerance.
#include "harness.h"
#include "support/random.h"
#include "tessera/ops/dispatch.h"
#include "tessera/ops/encodings.h"
#include "tessera/ops/image_sample.h"

namespace tessera::test {
namespace {

constexpr double kElementwiseTol = 1e-4;  // H100: worst case x margin (former suite)

struct ElementwiseCase {
  const char* name;
  ops::ElementwiseKind kind;
  uint32_t dims, order;
};

// Inputs are a slice of a wider matrix (stride dims + 2, from column 1); outputs are
// NaN-poisoned first so a missed element shows.
std::vector<double> run_elementwise(Backend& b, const ElementwiseCase& c, uint64_t seed) {
  ops::ElementwiseEncoding e;
  e.kind = c.kind, e.n_dims = c.dims, e.order = c.order, e.scale = 2.5f, e.offset = 0.25f;
  const size_t batch = 1001;
  const uint32_t in_stride = c.dims + 2, out_w = e.output_width();
  Buffer<float> x = upload(b, random_floats(batch * in_stride, 0, 1, seed));
  Buffer<float> dout = upload(b, random_floats(batch * out_w, -1, 1, seed + 1));
  Buffer<float> out(b.device(), batch * out_w), dx(b.device(), batch * c.dims);
  detail::fill_bytes(b.device(), out.data(), 0xff, out.bytes());
  detail::fill_bytes(b.device(), dx.data(), 0xff, dx.bytes());
  const TensorView in = TensorView::matrix(x.data(), DType::f32, batch, c.dims, in_stride, 1);
  ops::call<ops::ElementwiseEncode>(b.default_stream(), e, in, out.matrix(batch, out_w));
  ops::call<ops::ElementwiseEncodeBackward>(b.default_stream(), e, in, dout.matrix(batch, out_w),
                                            dx.matrix(batch, c.dims));
  std::vector<double> r;
  append(r, out.to_host());
  append(r, dx.to_host());
  return r;
}

std::vector<double> run_sample_image(Backend& b, uint64_t seed) {
  const uint32_t w = 67, h = 45;
  Buffer<float> image = upload(b, random_floats(size_t(w) * h * 3, 0, 1, seed));
  const size_t n = 20000;
  Buffer<float> xy(b.device(), n * 2), rgb(b.device(), n * 3);
  ops::call<ops::SampleImage>(b.default_stream(), image.view(), w, h, seed, xy.matrix(n, 2), rgb.matrix(n, 3));
  std::vector<double> r;
  append(r, xy.to_host());
  append(r, rgb.to_host());
  return r;
}

const RegisterOpCases encoding_cases([](std::vector<OpCase>& cases) {
  const ElementwiseCase list[] = {{"Identity", ops::ElementwiseKind::Identity, 3, 1},
                                  {"Frequency12", ops::ElementwiseKind::Frequency, 3, 12},
                                  {"TriangleWave", ops::ElementwiseKind::TriangleWave, 2, 8},
                                  {"OneBlob", ops::ElementwiseKind::OneBlob, 2, 32},
                                  {"SH4", ops::ElementwiseKind::SphericalHarmonics, 3, 4},
                                  {"SH8", ops::ElementwiseKind::SphericalHarmonics, 3, 8}};
  for (const ElementwiseCase& c : list)
    cases.push_back({"elementwise_encode", c.name, kElementwiseTol, has_op<ops::ElementwiseEncode>(),
                     [c](Backend& b, uint64_t seed) { return run_elementwise(b, c, seed); }});
  cases.push_back({"sample_image", "67x45_20000", 1e-6, has_op<ops::SampleImage>(), run_sample_image});
});

}  // namespace
}  // namespace tessera::test
