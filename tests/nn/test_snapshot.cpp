#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "support/errors.h"
#include "tessera/core/error.h"
#include "tessera/nn/trainer.h"

namespace tessera {
namespace {

std::unique_ptr<nn::Network> make_net(uint32_t width = 32) {
  return nn::create_network({{"otype", "FullyFusedMLP"}, {"n_neurons", width}, {"n_hidden_layers", 2}}, 3, 2,
                            DeviceKind::cpu);
}

using test::error_of;

TEST(Snapshot, RoundTripsAndRejectsBadFiles) {
  const auto dir = std::filesystem::temp_directory_path() / "tessera_snapshot";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "net.tsp").string();
  auto a = make_net();
  a->initialize(99);
  nn::save_parameters(*a, path);
  auto b = make_net();
  b->initialize(1);
  nn::load_parameters(*b, path);
  EXPECT_TRUE(std::equal(a->params(), a->params() + a->n_params(), b->params()));

  // truncated
  const auto size = std::filesystem::file_size(path);
  std::filesystem::copy_file(path, dir / "cut.tsp", std::filesystem::copy_options::overwrite_existing);
  std::filesystem::resize_file(dir / "cut.tsp", size - 10);
  EXPECT_NE(error_of([&] { nn::load_parameters(*b, (dir / "cut.tsp").string()); }).find("truncated"), std::string::npos);
  // foreign
  std::ofstream(dir / "foreign.tsp") << "PNG....not a snapshot";
  EXPECT_NE(error_of([&] { nn::load_parameters(*b, (dir / "foreign.tsp").string()); }).find("not a tessera parameter file"),
            std::string::npos);
  // different network
  auto c = make_net(64);
  EXPECT_NE(error_of([&] { nn::load_parameters(*c, path); }).find("different network"), std::string::npos);
  // corrupted payload
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size - 20));
    f.put('\x7f');
  }
  EXPECT_NE(error_of([&] { nn::load_parameters(*b, path); }).find("checksum"), std::string::npos);
}

}  // namespace
}  // namespace tessera
