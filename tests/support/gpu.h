#pragma once
// Helpers of the device-vs-CPU tests: a visible skip without a device (CUDA, OpenCL), and the relative L2
// error every comparison reports.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tessera/core/device.h"

#define REQUIRE_CUDA() \
  if (!::tessera::cuda_available()) GTEST_SKIP() << "no CUDA device: GPU test skipped"

#define REQUIRE_OPENCL() \
  if (!::tessera::opencl_available()) GTEST_SKIP() << "no OpenCL platform: OpenCL test skipped"

namespace tessera::test {

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
