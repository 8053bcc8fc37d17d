// Runs every registered op case on every non-CPU backend of this build against the CPU
// backend (see harness.h). Skips visibly where no device is present.
#include <gtest/gtest.h>

#include <cmath>

#include "harness.h"
#include "support/gpu.h"
#include "support/random.h"

namespace tessera::test {

namespace {

// The backends under test, from the registry at run time: every CUDA device in
// tessera_backend_ops_tests (label gpu), every OpenCL device in tessera_opencl_tests (label
// opencl; the same cases, built with TESSERA_TEST_OPENCL). Where the build has the backend
// but the machine no device, device 0 stands in and every case skips visibly.
std::vector<Device> backends_under_test() {
#ifdef TESSERA_TEST_OPENCL
  const DeviceKind kind = DeviceKind::opencl;
  const bool built = built_with_opencl();
#else
  const DeviceKind kind = DeviceKind::cuda;
  const bool built = built_with_cuda();
#endif
  std::vector<Device> devices;
  for (const Device& d : available_devices())
    if (d.kind == kind) devices.push_back(d);
  if (devices.empty() && built) devices.emplace_back(kind, 0);
  return devices;
}

struct Param {
  Device backend;
  size_t case_index;
};

class BackendOps : public ::testing::TestWithParam<Param> {};

TEST_P(BackendOps, MatchesCpuReference) {
  const Param p = GetParam();
  const OpCase& c = op_cases().at(p.case_index);
  if (!backend_available(p.backend)) GTEST_SKIP() << "no " << to_string(p.backend) << " device: skipped";
  Backend& backend = backend_for(p.backend);
  Backend& cpu = backend_for(DeviceKind::cpu);
  ASSERT_TRUE(c.supported(cpu)) << "op '" << c.op << "' has no CPU reference";
  test::unless_the_gpu_cannot([&] {
    if (!c.supported(backend)) GTEST_SKIP() << "op '" << c.op << "' is not on the " << backend.name() << " backend";
    const uint64_t seed = fresh_seed();
    SCOPED_TRACE(::testing::Message() << c.op << "/" << c.name << " seed " << seed);
    const std::vector<double> want = c.run(cpu, seed);
    const std::vector<double> got = c.run(backend, seed);
    backend.synchronize_all();
    if (c.compare) {
      const std::string why = c.compare(got, want);
      EXPECT_TRUE(why.empty()) << c.op << "/" << c.name << " on " << backend.name() << ": " << why;
      return;
    }
    const double err = rel_l2(got, want);
    std::printf("[ measured ] %s %s/%s: %.2e\n", backend.name().c_str(), c.op.c_str(), c.name.c_str(), err);
    EXPECT_LT(err, c.tolerance) << c.op << "/" << c.name << " on " << backend.name();
  });
}

std::vector<Param> all_params() {
  std::vector<Param> params;
  for (const Device& k : backends_under_test())
    for (size_t i = 0; i < op_cases().size(); ++i) {
      // OpenCL has a few ops so far: the cases of ops it lacks are left out rather than
      // listed as hundreds of skips (`tessera info` and the op-table error list its ops).
      if (k.kind == DeviceKind::opencl && backend_available(k) && !op_cases()[i].supported(backend_for(k))) continue;
      params.push_back({k, i});
    }
  return params;
}

INSTANTIATE_TEST_SUITE_P(Cases, BackendOps, ::testing::ValuesIn(all_params()), [](const auto& info) {
  const OpCase& c = op_cases().at(info.param.case_index);
  const Device& d = info.param.backend;
  return std::string(to_string(d.kind)) + (d.index ? std::to_string(d.index) : "") + "_" + c.op + "_" + c.name;
});
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(BackendOps);

}  // namespace
}  // namespace tessera::test
