// TESSERA_CUDA_PROFILE: a profile lowers the limits the kernels' plans are sized by to a
// smaller GPU's, takes that GPU's compute capability, never raises a limit, and an unknown
// name is an error that lists the known ones.
#include <gtest/gtest.h>

#include "core/device_profile.h"
#include "tessera/core/error.h"

namespace tessera::detail {
namespace {

DeviceAttributes h200() {
  DeviceAttributes a;
  a.name = "NVIDIA H200";
  a.sm_count = 132;
  a.compute_major = 9;
  a.compute_minor = 0;
  a.shared_memory_per_block_optin = 232448;
  a.l2_cache_bytes = size_t(60) << 20;
  return a;
}

TEST(DeviceProfile, PresentsTheSmallerGpusLimits) {
  const DeviceAttributes a = apply_device_profile(h200(), "rtx4090");
  EXPECT_EQ(a.shared_memory_per_block_optin, 101376u);
  EXPECT_EQ(a.sm_count, 128);
  EXPECT_EQ(a.compute_major * 10 + a.compute_minor, 89);
  EXPECT_EQ(a.l2_cache_bytes, size_t(60) << 20);  // the 4090's 72 MB is more than the H200 has
  EXPECT_NE(a.name.find("NVIDIA H200 as GeForce RTX 4090"), std::string::npos) << a.name;
  const DeviceAttributes t4 = apply_device_profile(h200(), "t4");
  EXPECT_EQ(t4.shared_memory_per_block_optin, 65536u);
  EXPECT_EQ(t4.sm_count, 40);
  EXPECT_EQ(t4.l2_cache_bytes, size_t(4) << 20);
  EXPECT_EQ(t4.compute_major * 10 + t4.compute_minor, 75);
}

TEST(DeviceProfile, EveryProfileOnlyLowersMemoryLimits) {
  DeviceAttributes small = h200();
  small.shared_memory_per_block_optin = 49152;
  small.sm_count = 8;
  small.l2_cache_bytes = 1 << 20;
  for (const DeviceProfile& p : device_profiles()) {
    const DeviceAttributes a = apply_device_profile(small, p.name);
    EXPECT_EQ(a.shared_memory_per_block_optin, 49152u) << p.name;
    EXPECT_EQ(a.sm_count, 8) << p.name;
    EXPECT_EQ(a.l2_cache_bytes, size_t(1) << 20) << p.name;
  }
}

TEST(DeviceProfile, NoProfileChangesNothingAndAnUnknownOneIsNamed) {
  const DeviceAttributes a = apply_device_profile(h200(), "");
  EXPECT_EQ(a.name, "NVIDIA H200");
  EXPECT_EQ(a.shared_memory_per_block_optin, 232448u);
  try {
    apply_device_profile(h200(), "rtx9999");
    FAIL() << "an unknown profile was accepted";
  } catch (const tessera::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("no profile 'rtx9999'"), std::string::npos) << what;
    EXPECT_NE(what.find("rtx3090"), std::string::npos) << what;
  }
}

TEST(DeviceProfile, PlansFollowTheCodeThatRunsAndAProfileNeverClaimsMore) {
  // The default build's own sm_90 code: the H200 as it is, or as any profile says.
  const std::string all = "75-real,80-real,86-real,89-real,90-real,100-real,110-real,120";
  EXPECT_EQ(plan_attributes(h200(), all, "").compute_major, 9);
  EXPECT_EQ(plan_attributes(h200(), all, "rtx5090").compute_major, 12);
  // Only compute_75 PTX: planned as Turing, named so, and a newer profile cannot lift it.
  const DeviceAttributes ptx = plan_attributes(h200(), "75-virtual", "");
  EXPECT_EQ(ptx.compute_major * 10 + ptx.compute_minor, 75);
  EXPECT_NE(ptx.name.find("running compute_75 PTX"), std::string::npos) << ptx.name;
  const DeviceAttributes ptx_5090 = plan_attributes(h200(), "75-virtual", "rtx5090");
  EXPECT_EQ(ptx_5090.compute_major * 10 + ptx_5090.compute_minor, 75);
  EXPECT_EQ(ptx_5090.shared_memory_per_block_optin, 101376u);
}

}  // namespace
}  // namespace tessera::detail
