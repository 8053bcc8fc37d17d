// The OpenCL backend's buffers and queue (PoCL on a CPU in CI, any vendor's GPU elsewhere):
// copies through views with element offsets, fills, device-to-device copies, events, the
// device list and selection errors. Skips visibly where no OpenCL platform is found.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <numeric>
#include <vector>

#include <filesystem>

#include "../../src/core/opencl/opencl_runtime.h"
#include "support/errors.h"
#include "support/gpu.h"
#include "tessera/core/backend.h"
#include "tessera/core/buffer.h"
#include "tessera/ops/dispatch.h"
#include "tessera/ops/gemv.h"

namespace tessera {
namespace {


TEST(OpenClBackend, BuffersCopyFillAndOffsetViews) {
  REQUIRE_OPENCL();
  Backend& b = backend_for(DeviceKind::opencl);
  EXPECT_EQ(b.kind(), DeviceKind::opencl);
  std::vector<float> host(1000);
  std::iota(host.begin(), host.end(), 0.0f);
  Buffer<float> a = make_buffer(DeviceKind::opencl, host), c(DeviceKind::opencl, 1000);
  EXPECT_EQ(a.to_host(), host);
  // A view from element 100 on: uploads and downloads land at the offset.
  const std::vector<float> part = {-1, -2, -3};
  upload_to_view(DeviceKind::opencl, a.view(100, 3), part.data(), 3 * sizeof(float));
  std::vector<float> back(3);
  download_from_view(DeviceKind::opencl, back.data(), a.view(99, 3), 3 * sizeof(float));
  EXPECT_EQ(back, (std::vector<float>{99, -1, -2}));
  copy_view_to_view(DeviceKind::opencl, c.view(10, 5), a.view(100, 5));
  c.to_host();
  EXPECT_EQ(c.to_host()[12], -3.0f);
  EXPECT_EQ(c.to_host()[14], 104.0f);
  c.zero();
  EXPECT_EQ(c.to_host(), std::vector<float>(1000, 0.0f));
  // Past the end of the buffer (at the backend, under the views' own checks): an error,
  // not a write somewhere else.
  const std::string overrun = test::error_of([&] { b.copy_to_device(a.data() + 998, host.data(), 12); });
  EXPECT_NE(overrun.find("overrun"), std::string::npos) << overrun;
  // Device-timed events.
  auto e0 = b.create_event(), e1 = b.create_event();
  e0->record(b.default_stream());
  c.zero();
  e1->record(b.default_stream());
  EXPECT_GE(e1->elapsed_since(*e0), 0.0f);
}

// A built program is written to the disk cache (the next process loads it from there).
TEST(OpenClBackend, BuiltProgramsGoToTheDiskCache) {
  REQUIRE_OPENCL();
  Backend& b = backend_for(DeviceKind::opencl);
  const auto& cache = detail::opencl_runtime(b).program_cache();
  if (cache.folder().empty()) GTEST_SKIP() << "no cache folder (no HOME, XDG_CACHE_HOME or TESSERA_CACHE_DIR)";
  Buffer<float> A = make_buffer(DeviceKind::opencl, std::vector<float>(6, 1.0f)),
                x = make_buffer(DeviceKind::opencl, std::vector<float>(3, 2.0f)), y(DeviceKind::opencl, 2);
  // An activation no other test uses, so this process compiles (or loads) the program now.
  ops::call<ops::Gemv>(b.default_stream(), ops::GemvOp::N, 1.0f, TensorView::of_matrix(A.data(), 2, 3, 3), x.view(),
                       0.0f, y.view(), Activation::Exponential);
  EXPECT_NEAR(y.to_host()[0], std::exp(6.0f), 1e-2f);
  size_t entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(cache.folder())) entries += e.path().extension() == ".bin";
  EXPECT_GT(entries, 0u) << cache.folder();
  std::printf("[ measured ] %d programs of this process came from the disk cache %s\n",
              detail::opencl_runtime(b).programs_from_cache(), cache.folder().c_str());
}

TEST(OpenClBackend, DeviceListAndSelection) {
  REQUIRE_OPENCL();
  const auto devices = opencl_devices();
  ASSERT_FALSE(devices.empty());
  for (size_t i = 0; i < devices.size(); ++i) {
    EXPECT_EQ(devices[i].index, int(i));
    EXPECT_FALSE(devices[i].name.empty());
    EXPECT_GT(devices[i].max_work_group_size, 0u);
  }
  EXPECT_EQ(parse_device("opencl"), Device(DeviceKind::opencl, 0));
  const std::string bad = "opencl:" + std::to_string(devices.size());
  EXPECT_NE(test::error_of([&] { parse_device(bad); }).find("valid OpenCL devices"), std::string::npos);
  EXPECT_NE(test::error_of([] { parse_device("opencl:x"); }).find("must be a number"), std::string::npos);
  EXPECT_NE(test::error_of([] { parse_device("vulkan"); }).find("opencl:N"), std::string::npos);
}

}  // namespace
}  // namespace tessera
