#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tessera/core/log.h"
#include "tessera/core/buffer.h"
#include "tessera/core/config.h"
#include "tessera/core/device.h"
#include "tessera/core/error.h"
#include "tessera/core/rng.h"
#include "tessera/core/backend.h"
#include "support/errors.h"

namespace tessera {
namespace {

TEST(Log, ASinkReceivesLinesAtOrAboveTheLevel) {
  std::vector<std::pair<LogLevel, std::string>> got;
  set_log_sink([&](LogLevel level, const std::string& message) { got.push_back({level, message}); });
  const LogLevel before = log_level();
  set_log_level(LogLevel::warning);
  log(LogLevel::info, "not shown {}", 1);
  log(LogLevel::warning, "shown {} of {}", 1, 2);
  set_log_level(before);
  set_log_sink(nullptr);  // back to stderr
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].first, LogLevel::warning);
  EXPECT_EQ(got[0].second, "shown 1 of 2");
}

TEST(Device, UnknownNameIsAnErrorListingChoices) {
  EXPECT_NE(test::error_of([] { Device::parse("tpu"); }).find("cpu, cuda, cuda:N, opencl, opencl:N"), std::string::npos);
  EXPECT_NE(test::error_of([] { Device::parse("cuda:x"); }).find("must be a number"), std::string::npos);
  EXPECT_NE(test::error_of([] { Device::parse("cuda:"); }).find("must be a number"), std::string::npos);
  EXPECT_NE(test::error_of([] { Device::parse("cuda:-1"); }).find("must be a number"), std::string::npos);
  EXPECT_EQ(parse_device("cpu"), Device(DeviceKind::cpu));
}

TEST(Device, ParsesAndPrintsEveryForm) {
  EXPECT_EQ(Device::parse("cuda"), Device(DeviceKind::cuda, 0));
  EXPECT_EQ(Device::parse("cuda:3"), Device(DeviceKind::cuda, 3));
  EXPECT_EQ(Device::parse("opencl:1"), Device(DeviceKind::opencl, 1));
  EXPECT_EQ(Device::parse("cpu:2"), Device(DeviceKind::cpu, 2));
  EXPECT_NE(Device::parse("cuda:1"), Device(DeviceKind::cuda, 0));
  for (const char* s : {"cpu", "cpu:2", "cuda:0", "cuda:12", "opencl:0"}) EXPECT_EQ(Device::parse(s).str(), s);
  EXPECT_EQ(Device(DeviceKind::cuda).str(), "cuda:0");
}

TEST(Device, MissingCudaDeviceIsOneClearError) {
  // cuda:7 on a host without it: the error names the device and what the host has.
  const std::string e = test::error_of([] { parse_device("cuda:7"); });
  EXPECT_NE(e.find("cuda:7"), std::string::npos) << e;
  if (!built_with_cuda()) EXPECT_NE(e.find("no CUDA backend"), std::string::npos) << e;
  else if (!cuda_available()) EXPECT_NE(e.find("no usable CUDA device"), std::string::npos) << e;
  else if (cuda_devices().size() < 8) EXPECT_NE(e.find("this machine has"), std::string::npos) << e;
  EXPECT_FALSE(backend_available(Device(DeviceKind::cpu, 99)));
}

// Two devices of one kind in one process: each has its own backend object (ops table,
// streams, workspaces), buffers remember theirs, and ops dispatch to the stream's backend.
TEST(Device, TwoCpuDevicesKeepTheirOwnBackends) {
  Backend& a = backend_for(Device(DeviceKind::cpu, 0));
  Backend& b = backend_for(Device(DeviceKind::cpu, 1));
  EXPECT_NE(&a, &b);
  EXPECT_EQ(&a, &backend_for(DeviceKind::cpu));
  EXPECT_EQ(&b, &backend_for(Device::parse("cpu:1")));
  EXPECT_EQ(a.name(), "cpu");
  EXPECT_EQ(b.name(), "cpu:1");
  EXPECT_EQ(b.attributes().index, 1);
  EXPECT_EQ(a.op_names(), b.op_names());
  void* slot_a = a.default_stream().workspace().get("test.slot", 64);
  void* slot_b = b.default_stream().workspace().get("test.slot", 64);
  EXPECT_NE(slot_a, slot_b);
  Buffer<float> on_b(Device(DeviceKind::cpu, 1), 4);
  EXPECT_EQ(on_b.device(), Device(DeviceKind::cpu, 1));
  auto wrapped = b.wrap_stream(nullptr);
  EXPECT_EQ(&wrapped->backend(), &b);
  EXPECT_NE(test::error_of([&] { b.wrap_stream(&on_b); }).find("no native streams"), std::string::npos);
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
