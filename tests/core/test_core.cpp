#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tessera/core/buffer.h"
#include "tessera/core/config.h"
#include "tessera/core/device.h"
#include "tessera/core/error.h"
#include "tessera/core/rng.h"

namespace tessera {
namespace {

TEST(Device, UnknownNameIsAnErrorListingChoices) {
  try {
    select_device("tpu");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("auto, cpu, cuda"), std::string::npos) << e.what();
  }
  EXPECT_EQ(select_device("cpu"), DeviceKind::cpu);
}

TEST(Device, CudaRequestWithoutDeviceSaysWhy) {
  if (cuda_available()) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_THROW(select_device("cuda"), Error);
  EXPECT_EQ(select_device("auto"), DeviceKind::cpu);
}

TEST(Buffer, RoundTripsHostData) {
  Buffer<float> b(DeviceKind::cpu, 5);
  std::vector<float> v{1, 2, 3, 4, 5};
  b.copy_from_host(v);
  EXPECT_EQ(b.to_host(), v);
  EXPECT_THROW(b.copy_from_host(std::vector<float>(6)), Error);
}

TEST(Pcg32, IsReproducibleAndUniform) {
  Pcg32 a(5), b(5), c(6);
  double sum = 0;
  bool differs = false;
  for (int i = 0; i < 10000; ++i) {
    const float x = a.next_float();
    ASSERT_EQ(x, b.next_float());
    differs |= x != c.next_float();
    ASSERT_GE(x, 0.0f);
    ASSERT_LT(x, 1.0f);
    sum += x;
  }
  EXPECT_TRUE(differs);
  EXPECT_NEAR(sum / 10000, 0.5, 0.02);
}

TEST(Config, MalformedJsonNamesTheFile) {
  const auto path = std::filesystem::temp_directory_path() / "tessera_bad.json";
  std::ofstream(path) << "{\"network\": ";
  try {
    load_json_file(path.string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not valid JSON"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("tessera_bad.json"), std::string::npos);
  }
  EXPECT_THROW(load_json_file("/nonexistent/x.json"), Error);
}

TEST(Config, AtomicWriteLeavesNoTemporaries) {
  const auto dir = std::filesystem::temp_directory_path() / "tessera_atomic";
  std::filesystem::create_directories(dir);
  write_file_atomic((dir / "a.txt").string(), std::string("hello"));
  int files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir)) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
  EXPECT_THROW(write_file_atomic("/nonexistent_dir/a.txt", std::string("x")), Error);
  // Replacing keeps one file with the new content.
  write_file_atomic((dir / "a.txt").string(), std::string("bye"));
  std::ifstream in(dir / "a.txt");
  std::string content;
  std::getline(in, content);
  EXPECT_EQ(content, "bye");
  // A failure after the temporary file was written (the target is a folder, so the
  // rename fails) removes the temporary file and names the target.
  std::filesystem::create_directories(dir / "folder");
  try {
    write_file_atomic((dir / "folder").string(), std::string("x"));
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("folder"), std::string::npos) << e.what();
  }
  files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir))
    files += e.path().filename().string().find(".tmp") != std::string::npos;
  EXPECT_EQ(files, 0) << "a temporary file was left behind";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera
