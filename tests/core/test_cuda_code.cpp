// Which of the build's CUDA code each GPU runs (core/cuda_code.h): machine code of its own
// major revision at or below its minor, else the newest PTX at or below its capability,
// else none, for the default architecture list and the test builds.
#include <gtest/gtest.h>

#include "core/cuda_code.h"

namespace tessera::detail {
namespace {

using Kind = CudaCodeForDevice::Kind;

TEST(CudaCode, EveryGpuFromTuringOnRunsTheDefaultBuild) {
  const std::string archs = "75-real;80-real;86-real;89-real;90-real;100-real;110-real;120";
  struct Case {
    int cc;
    Kind kind;
    int arch;
  } cases[] = {{75, Kind::sass, 75},  {80, Kind::sass, 80},  {86, Kind::sass, 86},   {87, Kind::sass, 86},
               {89, Kind::sass, 89},  {90, Kind::sass, 90},  {100, Kind::sass, 100}, {103, Kind::sass, 100},
               {110, Kind::sass, 110}, {120, Kind::sass, 120}, {121, Kind::sass, 120}, {130, Kind::ptx, 120},
               {70, Kind::none, 0}};
  for (const Case& c : cases) {
    const CudaCodeForDevice code = cuda_code_for_device(archs, c.cc);
    EXPECT_EQ(code.kind, c.kind) << "compute " << c.cc << ": " << code.describe();
    EXPECT_EQ(code.arch, c.arch) << "compute " << c.cc << ": " << code.describe();
  }
}

TEST(CudaCode, PtxOnlyAndSingleArchitectureBuilds) {
  EXPECT_EQ(cuda_code_for_device("75-virtual", 90).kind, Kind::ptx);
  EXPECT_EQ(cuda_code_for_device("75-virtual", 90).arch, 75);
  EXPECT_EQ(cuda_code_for_device("75-virtual", 70).kind, Kind::none);
  // "90" alone: sm_90 code and compute_90 PTX, so an RTX 4090 has nothing and Blackwell JITs.
  EXPECT_EQ(cuda_code_for_device("90", 89).kind, Kind::none);
  EXPECT_EQ(cuda_code_for_device("75-real,90-real", 89).kind, Kind::none);  // as the build records it
  EXPECT_EQ(cuda_code_for_device("75-real,90-real", 90).arch, 90);
  EXPECT_EQ(cuda_code_for_device("90", 120).kind, Kind::ptx);
  EXPECT_EQ(cuda_code_for_device("90", 90).kind, Kind::sass);
  EXPECT_EQ(cuda_code_for_device("90a-real", 90).kind, Kind::sass);
  EXPECT_EQ(cuda_code_for_device("90a-real", 100).kind, Kind::none);
  EXPECT_EQ(cuda_code_for_device("", 90).kind, Kind::none);
  EXPECT_EQ(cuda_code_for_device("garbage;;x", 90).kind, Kind::none);
  EXPECT_NE(cuda_code_for_device("80", 86).describe().find("sm_80 machine code"), std::string::npos);
}

}  // namespace
}  // namespace tessera::detail
