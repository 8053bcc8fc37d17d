// The harness's cases on the CPU alone (CI has no GPU): every case's op exists on the CPU
// reference, runs, gives finite outputs, and gives the same outputs twice for one seed
// within a tenth of the case's tolerance (the grid scatter adds in thread order), so a
// backend is compared against one answer, not against the reference's own noise; a case's
// own comparison rule accepts the reference against itself.
#include <gtest/gtest.h>

#include <cmath>

#include "harness.h"
#include "support/gpu.h"
#include "support/random.h"

namespace tessera::test {
namespace {

TEST(BackendOpsHarness, RegistersTheCases) { EXPECT_GT(op_cases().size(), 40u); }

// One test per case, so ctest -j spreads them (under ASan they are minutes together).
class CpuReferenceCase : public ::testing::TestWithParam<size_t> {};

TEST_P(CpuReferenceCase, RunsAndIsDeterministic) {
  const OpCase& c = op_cases().at(GetParam());
  Backend& cpu = backend_for(DeviceKind::cpu);
  ASSERT_TRUE(c.supported(cpu)) << "no CPU reference";
  const uint64_t seed = fresh_seed();
  const auto a = c.run(cpu, seed), b = c.run(cpu, seed);
  ASSERT_FALSE(a.empty());
  ASSERT_EQ(a.size(), b.size());
  size_t nonfinite = 0;
  for (double v : a) nonfinite += !std::isfinite(v);
  EXPECT_LE(rel_l2(b, a), 0.1 * c.tolerance);
  // A case's own rule holds of the reference against itself (its sanity checks, such as
  // a least number of marked cells, run here too, not only on a GPU host).
  if (c.compare) EXPECT_EQ(c.compare(a, b), "");
  // Only the cases built around non-finite values may produce them.
  if (c.op != "settle_step" && c.op != "convert_to_half" && c.op != "gradient_bf16_exchange")
    EXPECT_EQ(nonfinite, 0u);
}

INSTANTIATE_TEST_SUITE_P(Cases, CpuReferenceCase, ::testing::Range<size_t>(0, op_cases().size()),
                         [](const auto& info) {
                           const OpCase& c = op_cases().at(info.param);
                           return c.op + "_" + c.name;
                         });

}  // namespace
}  // namespace tessera::test
