// A Restricted Boltzmann Machine learning 4x4 bars-and-stripes with contrastive divergence
// (CD-1), its visible/hidden updates on tessera's GEMV (fused sigmoid) and rank-1 update
// ops, on the CPU, CUDA or OpenCL:   example_rbm [cpu|cuda|opencl[:N]|auto] [epochs]
// Biases ride along as an always-on unit on each side (row/column n of W), so one GEMV
// computes sigmoid(W^T v + c) and one rank-1 update also trains the biases.
// Prints the mean reconstruction error per epoch; exits 1 if it did not fall below a
// quarter of its start, 77 if CUDA was asked for and there is no device.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include <tessera/tessera.h>

using namespace tessera;

namespace {

constexpr int kSide = 4, kVisible = kSide * kSide, kHidden = 24;
constexpr int kV = kVisible + 1, kH = kHidden + 1;  // + the always-on bias units

// All 4x4 bars-and-stripes patterns: any set of rows on, or any set of columns on (30
// distinct: the empty and full grids appear in both families).
std::vector<std::vector<float>> bars_and_stripes() {
  std::vector<std::vector<float>> out;
  for (int stripes = 0; stripes < 2; ++stripes)
    for (int mask = 0; mask < (1 << kSide); ++mask) {
      if (stripes && (mask == 0 || mask == (1 << kSide) - 1)) continue;
      std::vector<float> v(kV, 0.0f);
      for (int r = 0; r < kSide; ++r)
        for (int c = 0; c < kSide; ++c) v[r * kSide + c] = ((mask >> (stripes ? c : r)) & 1) ? 1.0f : 0.0f;
      v[kVisible] = 1.0f;
      out.push_back(v);
    }
  return out;
}

// The RBM's state on one device; vectors are device buffers of kV or kH floats.
struct Rbm {
  Device dev;
  Buffer<float> W, v0, h0, v1, h1;  // W: [kV, kH] row-major
  explicit Rbm(Device d)
      : dev(d), W(d, kV * kH), v0(d, kV), h0(d, kH), v1(d, kV), h1(d, kH) {}

  // out = sigmoid(op(W) in), then the bias unit of `out` back to 1.
  void propagate(ops::GemvOp op, const Buffer<float>& in, Buffer<float>& out) {
    ops::call<ops::Gemv>(dev, op, 1.0f, W.matrix(kV, kH), in.view(), 0.0f, out.view(), Activation::Sigmoid);
    const float one = 1.0f;
    upload_to_view(dev, out.view(out.size() - 1, 1), &one, sizeof(float));
  }
  void rank1(float alpha, const Buffer<float>& v, const Buffer<float>& h) {
    ops::call<ops::Ger>(dev, alpha, v.view(), h.view(), W.matrix(kV, kH));
  }
};

// Mean squared reconstruction error of v -> p(h|v) -> p(v|h) over the patterns.
double reconstruction_error(Rbm& m, const std::vector<std::vector<float>>& data) {
  double err = 0;
  std::vector<float> v1(kV);
  for (const auto& v : data) {
    m.v0.copy_from_host(v);
    m.propagate(ops::GemvOp::T, m.v0, m.h0);
    m.propagate(ops::GemvOp::N, m.h0, m.v1);
    m.v1.copy_to_host(v1.data(), kV);
    for (int i = 0; i < kVisible; ++i) err += (v[i] - v1[i]) * (v[i] - v1[i]);
  }
  return err / (double(data.size()) * kVisible);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string which = argc > 1 ? argv[1] : "auto";
    if (which == "cuda" && !cuda_available()) {
      std::printf("example_rbm: no CUDA device, skipped\n");
      return 77;
    }
    if (which.rfind("opencl", 0) == 0 && !opencl_available()) {
      std::printf("example_rbm: no OpenCL device, skipped\n");
      return 77;
    }
    const Device dev = which != "auto"       ? parse_device(which)
                       : cuda_available() ? Device(DeviceKind::cuda)
                                          : Device(DeviceKind::cpu);
    const int epochs = argc > 2 ? std::max(1, std::atoi(argv[2])) : 100;
    const float lr = 0.1f;
    auto data = bars_and_stripes();
    Rbm m(dev);
    Pcg32 rng(2024);
    std::vector<float> w(kV * kH, 0.0f);
    for (int i = 0; i < kVisible; ++i)
      for (int j = 0; j < kHidden; ++j) w[i * kH + j] = 0.1f * rng.normal();
    m.W.copy_from_host(w);

    const double start = reconstruction_error(m, data);
    std::printf("RBM %d visible x %d hidden, CD-1, lr %.2f, %zu bars-and-stripes patterns, on %s\n", kVisible, kHidden,
                lr, data.size(), dev.str().c_str());
    std::printf("epoch %4d  reconstruction error %.3e\n", 0, start);
    std::vector<size_t> order(data.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::vector<float> h(kH);
    double err = start;
    for (int epoch = 1; epoch <= epochs; ++epoch) {
      for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.next_uint() % i]);
      for (size_t k : order) {
        m.v0.copy_from_host(data[k]);
        m.propagate(ops::GemvOp::T, m.v0, m.h0);  // p(h | v0)
        m.h0.copy_to_host(h.data(), kH);           // sample h0 ~ p(h | v0) on the host
        for (int j = 0; j < kHidden; ++j) h[j] = rng.next_float() < h[j] ? 1.0f : 0.0f;
        m.h1.copy_from_host(h);                    // h1 holds the sample for a moment
        m.propagate(ops::GemvOp::N, m.h1, m.v1);  // p(v | h0 sample)
        m.propagate(ops::GemvOp::T, m.v1, m.h1);  // p(h | v1)
        m.rank1(lr, m.v0, m.h0);                   // positive phase
        m.rank1(-lr, m.v1, m.h1);                  // negative phase
      }
      err = reconstruction_error(m, data);
      if (epoch % 25 == 0 || epoch == epochs) std::printf("epoch %4d  reconstruction error %.3e\n", epoch, err);
    }
    std::printf("reconstruction error %.3e -> %.3e (%.0fx lower)\n", start, err, start / std::max(err, 1e-12));
    return err < 0.25 * start ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "example_rbm: error: %s\n", e.what());
    return 2;
  }
}
