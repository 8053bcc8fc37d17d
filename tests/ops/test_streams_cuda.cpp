// Ops on a stream of their own: the same results as on the default stream, bit for bit
// (the kernels are deterministic), while two streams each hold their own workspace. The
// cases use the scratch paths: GEMM split-K partials, GEMV op-T partials, the grid scatter
// and the fused MLP's training step with its reduction.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include "support/errors.h"
#include "support/gpu.h"
#include "support/random.h"
#include "tessera/core/backend.h"
#include "tessera/core/buffer.h"
#include "tessera/ops/dispatch.h"
#include "tessera/ops/encodings.h"
#include "tessera/ops/fused_mlp.h"
#include "tessera/ops/gemm.h"
#include "tessera/ops/gemv.h"
#include "tessera/ops/optimizers.h"

namespace tessera {
namespace {

template <typename T>
std::vector<T> on_host(const Buffer<T>& b) {
  return b.to_host();
}

TEST(StreamsCuda, OpsOnAStreamMatchTheDefaultStream) {
  REQUIRE_CUDA();
  Backend& cuda = backend_for(DeviceKind::cuda);
  auto side = cuda.create_stream();
  ASSERT_NE(side->native(), nullptr);
  Stream& main = cuda.default_stream();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);

  // GEMM fp16 -> fp32, skinny enough to split K (partials in the stream's workspace).
  const size_t M = 64, N = 48, K = 8192;
  auto host_a = test::random_floats(M * K, -1, 1, seed), host_b = test::random_floats(K * N, -1, 1, seed + 1);
  Buffer<float> a32 = make_buffer(DeviceKind::cuda, host_a), b32 = make_buffer(DeviceKind::cuda, host_b);
  Buffer<uint16_t> a16(DeviceKind::cuda, M * K), b16(DeviceKind::cuda, K * N);
  ops::call<ops::ConvertToHalf>(main, a32.view(), a16.view());
  ops::call<ops::ConvertToHalf>(main, b32.view(), b16.view());
  ops::GemmDesc d;
  d.M = M, d.N = N, d.K = K;
  d.a = {ops::DType::f16, ops::Layout::row_major, false, K, 0};
  d.b = {ops::DType::f16, ops::Layout::row_major, false, N, 0};
  d.c = {ops::DType::f32, ops::Layout::row_major, false, N, 0};
  Buffer<float> c_main(DeviceKind::cuda, M * N), c_side(DeviceKind::cuda, M * N);
  main.synchronize();
  ops::call<ops::Gemm>(main, d, a16.view(), b16.view(), c_main.view());
  ops::call<ops::Gemm>(*side, d, a16.view(), b16.view(), c_side.view());
  main.synchronize();
  side->synchronize();
  EXPECT_EQ(on_host(c_main), on_host(c_side));
  EXPECT_GT(side->workspace().bytes_held(), 0u) << "split-K scratch comes from the side stream's workspace";

  // GEMV op T with split rows (partials in the workspace).
  const ops::GemvShape gs{ops::GemvOp::T, 20000, 300, 300};
  Buffer<float> A = make_buffer(DeviceKind::cuda, test::random_floats(gs.rows * gs.cols, -1, 1, seed + 2));
  Buffer<float> x = make_buffer(DeviceKind::cuda, test::random_floats(gs.rows, -1, 1, seed + 3));
  Buffer<float> y_main(DeviceKind::cuda, gs.cols), y_side(DeviceKind::cuda, gs.cols);
  ops::call<ops::Gemv>(main, gs.op, 1.0f, A.matrix(gs.rows, gs.cols), x.view(), 0.0f, y_main.view(), Activation::None);
  ops::call<ops::Gemv>(*side, gs.op, 1.0f, A.matrix(gs.rows, gs.cols), x.view(), 0.0f, y_side.view(),
                       Activation::None);
  main.synchronize();
  side->synchronize();
  EXPECT_EQ(on_host(y_main), on_host(y_side));

  // Hash-grid forward on the side stream (the backward's atomics are order-dependent,
  // so only the forward is compared bit for bit).
  const auto g = ops::make_grid_layout(3, 8, 2, 14, 16.0f, 1.5f, true, ops::GridInterpolation::Linear);
  const size_t batch = 5000;
  Buffer<float> table = make_buffer(DeviceKind::cuda, test::random_floats(g.n_params(), -1, 1, seed + 4));
  Buffer<uint16_t> table16(DeviceKind::cuda, g.n_params());
  ops::call<ops::ConvertToHalf>(*side, table.view(), table16.view());
  Buffer<float> pts = make_buffer(DeviceKind::cuda, test::random_floats(batch * 3, 0, 1, seed + 5));
  Buffer<float> enc_main(DeviceKind::cuda, batch * g.output_width()), enc_side(DeviceKind::cuda, batch * g.output_width());
  side->synchronize();
  ops::call<ops::GridEncode>(main, g, table.view(), table16.view(), pts.matrix(batch, 3),
                             enc_main.matrix(batch, g.output_width()));
  ops::call<ops::GridEncode>(*side, g, table.view(), table16.view(), pts.matrix(batch, 3),
                             enc_side.matrix(batch, g.output_width()));
  main.synchronize();
  side->synchronize();
  EXPECT_EQ(on_host(enc_main), on_host(enc_side));
}

// A GEMM of fresh data on `stream`, C returned to the host (the op is deterministic, so
// the same inputs give the same bits on any stream or GPU of one kind).
std::vector<float> gemm_on(Stream& stream, uint64_t seed) {
  const Device dev = stream.backend().device();
  const size_t M = 96, N = 80, K = 4096;
  Buffer<float> a = make_buffer(dev, test::random_floats(M * K, -1, 1, seed));
  Buffer<float> b = make_buffer(dev, test::random_floats(K * N, -1, 1, seed + 1));
  Buffer<float> c(dev, M * N);
  ops::GemmDesc d;
  d.M = M, d.N = N, d.K = K;
  d.a = {ops::DType::f32, ops::Layout::row_major, false, K, 0};
  d.b = {ops::DType::f32, ops::Layout::row_major, false, N, 0};
  d.c = {ops::DType::f32, ops::Layout::row_major, false, N, 0};
  ops::call<ops::Gemm>(stream, d, a.view(), b.view(), c.view());
  stream.synchronize();
  return c.to_host();
}

// A stream the caller made (as PyTorch's current stream) runs the ops as such.
TEST(StreamsCuda, ACallersStreamIsUsedAsIs) {
  REQUIRE_CUDA();
  Backend& cuda = backend_for(DeviceKind::cuda);
  cudaStream_t mine = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&mine, cudaStreamNonBlocking), cudaSuccess);
  {
    auto wrapped = cuda.wrap_stream(mine);
    EXPECT_EQ(wrapped->native(), static_cast<void*>(mine));
    const uint64_t seed = test::fresh_seed();
    EXPECT_EQ(gemm_on(*wrapped, seed), gemm_on(cuda.default_stream(), seed));
  }
  // the wrapper did not destroy it
  EXPECT_EQ(cudaStreamSynchronize(mine), cudaSuccess);
  cudaStreamDestroy(mine);
}

// Two GPUs in one process: each device has its own backend; work for cuda:1 runs there even
// when the caller left cuda:0 current; a stream of one GPU is refused for the other.
TEST(DevicesCuda, TheSecondGpuRunsItsOwnWork) {
  REQUIRE_CUDA();
  if (cuda_devices().size() < 2) GTEST_SKIP() << "one CUDA device: two-GPU test skipped";
  Backend& gpu0 = backend_for(Device(DeviceKind::cuda, 0));
  Backend& gpu1 = backend_for(Device::parse("cuda:1"));
  ASSERT_NE(&gpu0, &gpu1);
  EXPECT_EQ(gpu1.name(), "cuda:1");
  EXPECT_EQ(gpu1.attributes().index, 1);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  Buffer<float> on1(Device(DeviceKind::cuda, 1), 1024);
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, on1.data()), cudaSuccess);
  EXPECT_EQ(attr.device, 1);
  const uint64_t seed = test::fresh_seed();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  const std::vector<float> c1 = gemm_on(gpu1.default_stream(), seed);
  const std::vector<float> c0 = gemm_on(gpu0.default_stream(), seed);
  EXPECT_EQ(c0, c1);
  auto side0 = gpu0.create_stream();
  EXPECT_NE(test::error_of([&] { gpu1.wrap_stream(side0->native()); }).find("belongs to cuda:0"), std::string::npos);
}

}  // namespace
}  // namespace tessera
