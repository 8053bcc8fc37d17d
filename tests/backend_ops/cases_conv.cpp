// Convolution forward, backward-data and backward-weight through the dispatch (the
// backend's automatic choice; the CPU side runs the direct double reference): odd shapes
// (C, K, H, W not multiples of anything, a 1x1 image, padding larger than the kernel,
// stride 2 and 3, dilation 2, depthwise), both layouts, fp32 and fp16 storage, fused
// activation / derivative, and the bias gradient.
#include <string>

#include "harness.h"
#include "support/half.h"
#include "support/random.h"
#include "tessera/ops/conv.h"
#include "tessera/ops/dispatch.h"

namespace tessera::test {
namespace {

using ops::ConvDesc;
using ops::ConvLayout;
using ops::ConvOp;

// Relative L2 tolerances: fp32 accumulation order (fp32), inputs and outputs rounded to
// fp16 (f16; the CPU rounds its double result once, the GPU its fp32 one). fp32 measured up
// to 1.08e-5 (H200, backward data of the 1x1 image padded past the kernel, a few outputs
// summed from terms that cancel; seed 1715216585).
constexpr double kTolF32 = 3e-5, kTolF16 = 2e-3;

struct ConvCase {
  std::string name;
  ConvDesc d;
};

std::vector<ConvCase> shapes() {
  std::vector<ConvCase> v;
  auto add = [&](const std::string& name, uint32_t N, uint32_t C, uint32_t H, uint32_t W, uint32_t K, uint32_t R,
                 uint32_t S, uint32_t stride, uint32_t pad, uint32_t dilation, uint32_t groups) {
    ConvDesc d;
    d.N = N, d.C = C, d.H = H, d.W = W, d.K = K, d.R = R, d.S = S;
    d.stride_h = d.stride_w = stride, d.pad_h = d.pad_w = pad, d.dilation_h = d.dilation_w = dilation;
    d.groups = groups;
    v.push_back({name, d});
  };
  add("odd_N2_C3_7x5_K5_3x3", 2, 3, 7, 5, 5, 3, 3, 1, 1, 1, 1);
  add("image_1x1_kernel_1x1", 3, 4, 1, 1, 3, 1, 1, 1, 0, 1, 1);
  add("pad_4_past_kernel", 1, 2, 1, 1, 2, 3, 3, 1, 4, 1, 1);
  add("stride2_C13_17x15_K11", 2, 13, 17, 15, 11, 3, 3, 2, 1, 1, 1);
  add("stride3_5x3_kernel", 1, 5, 11, 10, 3, 5, 3, 3, 2, 1, 1);
  add("dilation2", 1, 3, 9, 9, 2, 3, 3, 1, 2, 2, 1);
  add("depthwise_2_per_channel", 2, 4, 6, 7, 8, 3, 3, 1, 1, 1, 4);
  add("depthwise_7x7_stride2", 1, 3, 13, 12, 3, 7, 7, 2, 3, 1, 3);
  add("N4_C32_20x20_K24", 4, 32, 20, 20, 24, 3, 3, 1, 1, 1, 1);
  return v;
}

template <typename T>
std::vector<T> typed(const std::vector<float>& v) {
  std::vector<T> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if constexpr (std::is_same_v<T, float>) out[i] = v[i];
    else out[i] = half_bits(v[i]);
  }
  return out;
}

template <typename T>
void append_typed(std::vector<double>& out, const std::vector<T>& v) {
  for (T e : v) {
    if constexpr (std::is_same_v<T, float>) out.push_back(e);
    else out.push_back(from_half_bits(e));
  }
}

template <typename T>
std::vector<double> run_conv(Backend& b, ConvOp op, ConvDesc d, uint64_t seed,
                             ops::ConvAlgo algo = ops::ConvAlgo::automatic) {
  d.type = std::is_same_v<T, float> ? DType::f32 : DType::f16;
  d.algo = b.kind() == DeviceKind::cpu ? ops::ConvAlgo::direct : algo;
  auto x_host = random_floats(d.input_elements(), -1, 1, seed);
  for (size_t i = 0; i < x_host.size(); i += 3) x_host[i] = 0.0f;  // a ReLU's output: the derivative is 0 there
  for (float& e : x_host) e = e < 0 ? -e : e;
  Buffer<T> x = upload(b, typed<T>(x_host));
  Buffer<T> w = upload(b, typed<T>(random_floats(d.filter_elements(), -1, 1, seed + 1)));
  Buffer<T> dz = upload(b, typed<T>(random_floats(d.output_elements(), -1, 1, seed + 2)));
  Buffer<float> bias = upload(b, random_floats(d.K, -1, 1, seed + 3));
  Stream& s = b.default_stream();
  std::vector<double> out;
  if (op == ConvOp::forward) {
    Buffer<T> y(b.device(), d.output_elements());
    ops::call<ops::Conv2dForward>(s, d, Activation::Tanh, x.view(), w.view(), bias.view(), y.view());
    append_typed(out, y.to_host());
  } else if (op == ConvOp::backward_data) {
    Buffer<T> dx(b.device(), d.input_elements());
    ops::call<ops::Conv2dBackwardData>(s, d, Activation::ReLU, dz.view(), w.view(), x.view(), dx.view());
    append_typed(out, dx.to_host());
  } else {
    Buffer<T> dw(b.device(), d.filter_elements());
    Buffer<float> dbias(b.device(), d.K);
    ops::call<ops::Conv2dBackwardWeight>(s, d, x.view(), dz.view(), dw.view(), dbias.view());
    append_typed(out, dw.to_host());
    append(out, dbias.to_host());
  }
  return out;
}

const RegisterOpCases conv_cases([](std::vector<OpCase>& cases) {
  for (ConvOp op : {ConvOp::forward, ConvOp::backward_data, ConvOp::backward_weight})
    for (const ConvCase& c : shapes())
      for (ConvLayout layout : {ConvLayout::nchw, ConvLayout::nhwc})
        for (bool half : {false, true}) {
          ConvDesc d = c.d;
          d.layout = layout;
          const std::string name = std::string(half ? "f16_" : "f32_") + (layout == ConvLayout::nchw ? "nchw_" : "nhwc_") + c.name;
          auto supported = [op, half](const Backend& be) {
            if (half && be.kind() == DeviceKind::opencl) return false;  // fp32 only there so far
            return op == ConvOp::forward         ? be.supports<ops::Conv2dForward>()
                   : op == ConvOp::backward_data ? be.supports<ops::Conv2dBackwardData>()
                                                 : be.supports<ops::Conv2dBackwardWeight>();
          };
          cases.push_back({ops::to_string(op), name, half ? kTolF16 : kTolF32, supported,
                           [op, d, half](Backend& b, uint64_t seed) {
                             return half ? run_conv<uint16_t>(b, op, d, seed) : run_conv<float>(b, op, d, seed);
                           }});
        }
});

// Winograd F(2x2,3x3) chosen explicitly (forward and backward-data, fp32) on the backends
// that have it: cut tiles (odd sizes), padding 0, 1 and 2, both layouts.
const RegisterOpCases winograd_cases([](std::vector<OpCase>& cases) {
  struct Shape {
    const char* name;
    uint32_t N, C, H, W, K, pad;
  };
  const Shape shapes[] = {{"N2_C3_7x5_K5_pad1", 2, 3, 7, 5, 5, 1},
                          {"N1_C6_9x8_K4_pad0", 1, 6, 9, 8, 4, 0},
                          {"N2_C5_6x7_K3_pad2", 2, 5, 6, 7, 3, 2},
                          {"N4_C32_20x20_K24_pad1", 4, 32, 20, 20, 24, 1}};
  for (ConvOp op : {ConvOp::forward, ConvOp::backward_data})
    for (const Shape& sh : shapes)
      for (ConvLayout layout : {ConvLayout::nchw, ConvLayout::nhwc}) {
        ConvDesc d;
        d.N = sh.N, d.C = sh.C, d.H = sh.H, d.W = sh.W, d.K = sh.K, d.R = d.S = 3, d.pad_h = d.pad_w = sh.pad;
        d.layout = layout;
        const std::string name =
            std::string("winograd_2x2_f32_") + (layout == ConvLayout::nchw ? "nchw_" : "nhwc_") + sh.name;
        auto supported = [op](const Backend& be) {
          return op == ConvOp::forward ? be.supports<ops::Conv2dForward>() : be.supports<ops::Conv2dBackwardData>();
        };
        cases.push_back({ops::to_string(op), name, kTolF32, supported, [op, d](Backend& b, uint64_t seed) {
                           return run_conv<float>(b, op, d, seed, ops::ConvAlgo::winograd_2x2);
                         }});
      }
});

// Implicit GEMM chosen explicitly (fp16 NHWC, the backends that have it): pixel counts
// that cut the 128-row tiles, K past one 64- or 128-wide block, C below one 32-channel
// stage, stride, dilation, non-square and 1x1 kernels, padding past the kernel, and a
// deep product on few pixels (split-K).
const RegisterOpCases implicit_gemm_cases([](std::vector<OpCase>& cases) {
  struct Shape {
    const char* name;
    uint32_t N, C, H, W, K, R, S, stride, pad, dilation;
  };
  const Shape shapes[] = {{"N2_C8_9x7_K24_3x3", 2, 8, 9, 7, 24, 3, 3, 1, 1, 1},
                          {"N3_C40_13x11_K136_3x3", 3, 40, 13, 11, 136, 3, 3, 1, 1, 1},
                          {"N1_C64_10x10_K72_5x3_pad2", 1, 64, 10, 10, 72, 5, 3, 1, 2, 1},
                          {"N2_C16_12x9_K8_1x1", 2, 16, 12, 9, 8, 1, 1, 1, 0, 1},
                          {"N1_C24_6x6_K16_dilation2", 1, 24, 6, 6, 16, 3, 3, 1, 2, 2},
                          {"N1_C8_3x3_K8_pad4", 1, 8, 3, 3, 8, 3, 3, 1, 4, 1},
                          {"N2_C32_15x17_K48_stride2", 2, 32, 15, 17, 48, 3, 3, 2, 1, 1},
                          {"N1_C256_5x4_K136_split_k", 1, 256, 5, 4, 136, 3, 3, 1, 1, 1}};
  for (ConvOp op : {ConvOp::forward, ConvOp::backward_data, ConvOp::backward_weight})
    for (const Shape& sh : shapes) {
      if (op == ConvOp::backward_data && sh.stride != 1) continue;  // the kernel's backward-data is stride 1
      ConvDesc d;
      d.N = sh.N, d.C = sh.C, d.H = sh.H, d.W = sh.W, d.K = sh.K, d.R = sh.R, d.S = sh.S;
      d.stride_h = d.stride_w = sh.stride, d.pad_h = d.pad_w = sh.pad, d.dilation_h = d.dilation_w = sh.dilation;
      d.layout = ConvLayout::nhwc;
      auto supported = [](const Backend& be) { return be.kind() == DeviceKind::cpu || be.kind() == DeviceKind::cuda; };
      cases.push_back({ops::to_string(op), std::string("implicit_gemm_f16_nhwc_") + sh.name, kTolF16, supported,
                       [op, d](Backend& b, uint64_t seed) {
                         return run_conv<uint16_t>(b, op, d, seed, ops::ConvAlgo::implicit_gemm);
                       }});
    }
});

}  // namespace
}  // namespace tessera::test
