// The harness's cases on the CPU alone (CI has no GPU): every case's op exists on the CPU
// reference, runs, gives finite outputs, and gives the same outputs twice for one seed
// (the reference is deterministic, so a backend compared against it is compared against
// one answer).
#include <gtest/gtest.h>

#include <cmath>

#include "harness.h"
#include "support/random.h"

namespace tessera::test {
namespace {

TEST(BackendOpsHarness, EveryCaseRunsOnTheCpuReferenceAndIsDeterministic) {
  Backend& cpu = backend_for(DeviceKind::cpu);
  ASSERT_GT(op_cases().size(), 40u);
  for (const OpCase& c : op_cases()) {
    SCOPED_TRACE(c.op + "/" + c.name);
    ASSERT_TRUE(c.supported(cpu)) << "no CPU reference";
    const uint64_t seed = fresh_seed();
    const auto a = c.run(cpu, seed), b = c.run(cpu, seed);
    ASSERT_FALSE(a.empty());
    ASSERT_EQ(a.size(), b.size());
    size_t nonfinite = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!std::isfinite(a[i])) ++nonfinite;
      ASSERT_TRUE(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i]))) << "element " << i;
    }
    // Only the cases built around non-finite values may produce them.
    if (c.op != "settle_step" && c.op != "convert_to_half") EXPECT_EQ(nonfinite, 0u);
  }
}

}  // namespace
}  // namespace tessera::test
