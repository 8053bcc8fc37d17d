// The backend layer: op tables, the error for an op a backend lacks, stream workspaces,
// events, and the error for a backend the build or machine does not have.
#include <gtest/gtest.h>

#include "support/errors.h"
#include "tessera/core/backend.h"
#include "tessera/core/buffer.h"
#include "tessera/core/device_timer.h"
#include "tessera/ops/dispatch.h"
#include "tessera/ops/encodings.h"
#include "tessera/ops/fused_mlp.h"
#include "tessera/ops/gemv.h"
#include "tessera/ops/optimizers.h"
#include "support/views.h"
#include "ops/cpu/cpu_kernels.h"

namespace tessera {
namespace {

TEST(Backend, CpuRegistersTheReferenceOps) {
  Backend& cpu = backend_for(DeviceKind::cpu);
  EXPECT_EQ(cpu.kind(), DeviceKind::cpu);
  EXPECT_EQ(cpu.name(), "cpu");
  EXPECT_GE(cpu.attributes().sm_count, 1);
  EXPECT_TRUE(cpu.supports<ops::AdamStep>());
  EXPECT_TRUE(cpu.supports<ops::GridEncode>());
  EXPECT_TRUE(cpu.supports<ops::Gemv>());
  EXPECT_FALSE(cpu.uses_half_params());
  // the fused MLP's reference (the harness compares the kernels with it); the launch
  // queries are the kernels' own
  EXPECT_TRUE(cpu.supports<ops::FusedMlpTrain>());
  EXPECT_FALSE(cpu.supports<ops::FusedMlpAcceptsHalfInput>());
  const auto names = cpu.op_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "adam_step"), names.end());
}

TEST(Backend, UnsupportedOpIsAnErrorNamingOpAndBackend) {
  const std::string msg = test::error_of([] {
    // The CPU runs the fused MLP's reference, but has no launch plan to describe.
    ops::call<ops::FusedMlpLaunchInfo>(DeviceKind::cpu, MlpShape{}, ops::MlpActivations{}, size_t(1024), true,
                                       ops::FusedMlpOptions{});
  });
  EXPECT_NE(msg.find("fused_mlp_launch_info"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cpu backend"), std::string::npos) << msg;
  EXPECT_NE(msg.find("adam_step"), std::string::npos) << "the message lists what the backend has: " << msg;
}

TEST(Backend, DispatchRunsTheRegisteredOp) {
  // y = sigmoid(A x) through ops::call on the CPU, against the direct reference call.
  const ops::GemvShape s{ops::GemvOp::N, 3, 2, 2};
  const std::vector<float> A{1, 2, -1, 0.5f, 0, 3}, x{0.25f, -1};
  std::vector<float> y(3), ref(3);
  ops::call<ops::Gemv>(DeviceKind::cpu, s.op, 1.0f, TensorView::of_matrix(A.data(), 3, 2, 2), test::test_view(x), 0.0f,
                       test::test_view(y), Activation::Sigmoid);
  ops::cpu::gemv<float>(s, 1.0f, A.data(), x.data(), 0.0f, ref.data(), Activation::Sigmoid);
  EXPECT_EQ(y, ref);
  EXPECT_NEAR(y[0], 1.0f / (1.0f + std::exp(-(0.25f - 2.0f))), 1e-6f);
}

TEST(Backend, StreamWorkspaceGrowsRarelyAndKeepsSlotsApart) {
  Backend& cpu = backend_for(DeviceKind::cpu);
  auto stream = cpu.create_stream();
  Workspace& ws = stream->workspace();
  void* a = ws.get("test.a", 1000);
  EXPECT_EQ(ws.get("test.a", 800), a) << "a smaller request reuses the block";
  void* b = ws.get("test.b", 100);
  EXPECT_NE(a, b);
  ws.get("test.a", 1001);  // grows by at least half again
  const size_t held = ws.bytes_held();
  EXPECT_GE(held, 1500u + 100u);
  ws.get("test.a", 1400);
  EXPECT_EQ(ws.bytes_held(), held) << "a size within the grown block does not reallocate";
  // another stream has its own workspace
  auto other = cpu.create_stream();
  EXPECT_EQ(other->workspace().bytes_held(), 0u);
  stream->synchronize();
}

TEST(Backend, CpuEventsTimeHostWork) {
  DeviceTimer t(DeviceKind::cpu);
  t.start();
  volatile double sink = 0;
  for (int i = 0; i < 100000; ++i) sink = sink + i;
  t.stop();
  EXPECT_GE(t.milliseconds(), 0.0f);
}

TEST(Backend, MissingCudaBackendSaysWhy) {
  if (cuda_available()) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_FALSE(backend_available(DeviceKind::cuda));
  const std::string msg = test::error_of([] { backend_for(DeviceKind::cuda); });
  EXPECT_NE(msg.find("cuda:0"), std::string::npos) << msg;
  EXPECT_TRUE(msg.find("no CUDA backend") != std::string::npos || msg.find("no usable CUDA device") != std::string::npos)
      << msg;
  EXPECT_NE(test::error_of([] { Buffer<float> b(DeviceKind::cuda, 4); }), "");
}

}  // namespace
}  // namespace tessera
