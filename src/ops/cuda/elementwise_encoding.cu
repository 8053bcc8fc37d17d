// Identity, Frequency, TriangleWave, OneBlob and SphericalHarmonics on CUDA: one thread
// per sample, the same per-element math as the CPU reference (encoding_math.h).
#include "launch.h"
#include "stream.h"
#include "core/cuda/cuda_check.h"
#include "tessera/ops/encodings.h"
#include "ops/encoding_math.h"
#include "ops/cuda/cuda_kernels.h"

namespace tessera::ops::cuda {
namespace {

constexpr uint32_t kThreads = 128;

__global__ void elementwise_forward_kernel(ElementwiseEncoding e, const float* __restrict__ in, uint32_t in_stride,
                                           uint64_t batch, float* __restrict__ out, uint32_t out_stride) {
  const uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x;
  if (i >= batch) return;
  const float* x = in + i * in_stride;
  float* y = out + i * out_stride;
  if (e.kind == ElementwiseKind::SphericalHarmonics) {
    spherical_harmonics<float>(x, e.order, [&](uint32_t j, const Dual3<float>& v) { y[j] = v.v; });
    return;
  }
  const uint32_t per_dim = e.outputs_per_dim();
  for (uint32_t d = 0; d < e.n_dims; ++d) {
    const float xd = x[d];
    for (uint32_t j = 0; j < per_dim; ++j) y[d * per_dim + j] = elementwise_value<float>(e, xd, j, nullptr);
  }
}

// Spherical harmonics, staged through shared memory so the block's rows are written as
// runs of consecutive columns (a thread per row writing its own row put each warp store
// across 32 rows: 32 transactions for 128 useful bytes).
__global__ void sh_forward_kernel(ElementwiseEncoding e, const float* __restrict__ in, uint32_t in_stride,
                                  uint64_t batch, float* __restrict__ out, uint32_t out_stride) {
  constexpr uint32_t kPitch = kMaxShDegree * kMaxShDegree + 1;  // +1: no bank conflicts
  __shared__ float stage[kThreads * kPitch];
  const uint32_t n_out = e.order * e.order, pitch = n_out + 1;
  const uint64_t first = blockIdx.x * uint64_t(kThreads), i = first + threadIdx.x;
  if (i < batch)
    spherical_harmonics<float>(in + i * in_stride, e.order,
                               [&](uint32_t j, const Dual3<float>& v) { stage[threadIdx.x * pitch + j] = v.v; });
  __syncthreads();
  const uint32_t rows = uint32_t(batch - first < kThreads ? batch - first : kThreads);
  for (uint32_t k = threadIdx.x; k < rows * n_out; k += kThreads) {
    const uint32_t r = k / n_out, c = k - r * n_out;
    out[(first + r) * out_stride + c] = stage[r * pitch + c];
  }
}

__global__ void elementwise_backward_kernel(ElementwiseEncoding e, const float* __restrict__ in, uint32_t in_stride,
                                            uint64_t batch, const float* __restrict__ dL_dout, uint32_t dout_stride,
                                            float* __restrict__ dL_din, uint32_t din_stride) {
  const uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x;
  if (i >= batch) return;
  const float* x = in + i * in_stride;
  const float* g = dL_dout + i * dout_stride;
  float* dx = dL_din + i * din_stride;
  if (e.kind == ElementwiseKind::SphericalHarmonics) {
    float acc[3] = {0.f, 0.f, 0.f};
    spherical_harmonics<float>(x, e.order, [&](uint32_t j, const Dual3<float>& v) {
      const float gj = g[j];
      acc[0] += gj * v.d[0], acc[1] += gj * v.d[1], acc[2] += gj * v.d[2];
    });
    dx[0] = acc[0], dx[1] = acc[1], dx[2] = acc[2];
    return;
  }
  const uint32_t per_dim = e.outputs_per_dim();
  for (uint32_t d = 0; d < e.n_dims; ++d) {
    const float xd = x[d];
    float acc = 0.0f;
    for (uint32_t j = 0; j < per_dim; ++j) {
      float dv;
      elementwise_value<float>(e, xd, j, &dv);
      acc += g[d * per_dim + j] * dv;
    }
    dx[d] = acc;
  }
}

// S = <dL_ddLdin, J^T dL_dout>, as the CPU reference (elementwise_encoding.cpp) computes it.
__global__ void elementwise_backward_backward_kernel(ElementwiseEncoding e, const float* __restrict__ in,
                                                     uint32_t in_stride, uint64_t batch,
                                                     const float* __restrict__ dL_dout, uint32_t dout_stride,
                                                     const float* __restrict__ dL_ddLdin, uint32_t ddin_stride,
                                                     float* __restrict__ dL_ddLdout, uint32_t ddout_stride,
                                                     float* __restrict__ dL_din, uint32_t din_stride) {
  const uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x;
  if (i >= batch) return;
  const float* x = in + i * in_stride;
  const float* g = dL_dout + i * dout_stride;
  const float* v = dL_ddLdin + i * ddin_stride;
  float* ddy = dL_ddLdout ? dL_ddLdout + i * ddout_stride : nullptr;
  float* dx = dL_din ? dL_din + i * din_stride : nullptr;
  if (e.kind == ElementwiseKind::SphericalHarmonics) {
    float acc[3] = {0.f, 0.f, 0.f};
    spherical_harmonics<float, Jet3<float>>(x, e.order, [&](uint32_t j, const Jet3<float>& f) {
      if (ddy) ddy[j] = f.d[0] * v[0] + f.d[1] * v[1] + f.d[2] * v[2];
      const float gj = g[j];
#pragma unroll
      for (int k = 0; k < 3; ++k) acc[k] += gj * (f.hessian(k, 0) * v[0] + f.hessian(k, 1) * v[1] + f.hessian(k, 2) * v[2]);
    });
    if (dx) dx[0] = acc[0], dx[1] = acc[1], dx[2] = acc[2];
    return;
  }
  const uint32_t per_dim = e.outputs_per_dim();
  for (uint32_t d = 0; d < e.n_dims; ++d) {
    const float xd = x[d];
    float acc = 0.0f;
    for (uint32_t j = 0; j < per_dim; ++j) {
      float slope = 0.0f;
      elementwise_value<float>(e, xd, j, &slope);
      if (ddy) ddy[d * per_dim + j] = slope * v[d];
      acc += g[d * per_dim + j] * elementwise_second_derivative<float>(e, xd, j);
    }
    if (dx) dx[d] = acc * v[d];
  }
}

unsigned blocks_for(uint64_t n) { return detail::blocks_for(n, kThreads); }

}  // namespace

void elementwise_encode(const ElementwiseEncoding& e, const float* in, uint32_t in_stride, size_t batch, float* out,
                        uint32_t out_stride, Stream* stream) {
  if (batch == 0) return;
  TESSERA_CHECK(in && out, "elementwise_encode: null pointer argument");
  const cudaStream_t s = detail::native_stream(stream);
  if (e.kind == ElementwiseKind::SphericalHarmonics && e.order <= kMaxShDegree) {
    sh_forward_kernel<<<blocks_for(batch), kThreads, 0, s>>>(e, in, in_stride, batch, out, out_stride);
    TESSERA_CUDA_CHECK_LAUNCH("sh_forward_kernel");
    return;
  }
  elementwise_forward_kernel<<<blocks_for(batch), kThreads, 0, s>>>(e, in, in_stride, batch, out, out_stride);
  TESSERA_CUDA_CHECK_LAUNCH("elementwise_forward_kernel");
}

void elementwise_encode_backward(const ElementwiseEncoding& e, const float* in, uint32_t in_stride, size_t batch,
                                 const float* dL_dout, uint32_t dout_stride, float* dL_din, uint32_t din_stride, Stream* stream) {
  if (batch == 0 || !dL_din) return;
  TESSERA_CHECK(in && dL_dout, "elementwise_encode_backward: null pointer argument");
  elementwise_backward_kernel<<<blocks_for(batch), kThreads, 0, detail::native_stream(stream)>>>(e, in, in_stride, batch, dL_dout, dout_stride, dL_din,
                                                               din_stride);
  TESSERA_CUDA_CHECK_LAUNCH("elementwise_backward_kernel");
}

void elementwise_encode_backward_backward(const ElementwiseEncoding& e, const float* in, uint32_t in_stride,
                                          size_t batch, const float* dL_dout, uint32_t dout_stride,
                                          const float* dL_ddLdin, uint32_t ddin_stride, float* dL_ddLdout,
                                          uint32_t ddout_stride, float* dL_din, uint32_t din_stride, Stream* stream) {
  if (batch == 0 || (!dL_ddLdout && !dL_din)) return;
  TESSERA_CHECK(in && dL_dout && dL_ddLdin, "elementwise_encode_backward_backward: null pointer argument");
  elementwise_backward_backward_kernel<<<blocks_for(batch), kThreads, 0, detail::native_stream(stream)>>>(
      e, in, in_stride, batch, dL_dout, dout_stride, dL_ddLdin, ddin_stride, dL_ddLdout, ddout_stride, dL_din,
      din_stride);
  TESSERA_CUDA_CHECK_LAUNCH("elementwise_backward_backward_kernel");
}

}  // namespace tessera::ops::cuda
