#pragma once
// Helpers of the device-vs-CPU tests: a visible skip without a device (CUDA, OpenCL), and the relative L2
// error every comparison reports.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tessera/core/device.h"
#include "tessera/core/error.h"

#define REQUIRE_CUDA() \
  if (!::tessera::cuda_available()) GTEST_SKIP() << "no CUDA device: GPU test skipped"

#define REQUIRE_OPENCL() \
  if (!::tessera::opencl_available()) GTEST_SKIP() << "no OpenCL platform: OpenCL test skipped"

namespace tessera::test {

// Runs a test's body; where this GPU cannot run the configuration at all (DeviceLimitError:
// a smaller GPU's shared memory or compute capability, as under TESSERA_CUDA_PROFILE), the
// test is skipped, visibly, with the library's reason. Any other error still fails it.
template <class Body>
void unless_the_gpu_cannot(Body&& body) {
  try {
    body();
  } catch (const DeviceLimitError& e) {
    GTEST_SKIP() << "this GPU cannot run it: " << e.message();
  }
}

// ||got - want|| / ||want|| (absolute when want is zero); infinite if got has a non-finite.
inline double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num += std::pow(double(got[i]) - want[i], 2);
    den += std::pow(double(want[i]), 2);
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace tessera::test
