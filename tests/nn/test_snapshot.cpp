#include <gtest/gtest.h>

#include <cstring>

#include <filesystem>
#include <limits>
#include <fstream>

#include "support/errors.h"
#include "support/paths.h"
#include "tessera/core/error.h"
#include "tessera/nn/training_snapshot.h"

namespace tessera {
namespace {

// Parameter files hold a trainer's model parameters.
std::unique_ptr<nn::ModelTrainer> make_net(uint32_t width = 32, uint64_t seed = 1337) {
  return nn::ModelTrainer::from_config(
      {{"network", {{"otype", "FullyFusedMLP"}, {"n_neurons", width}, {"n_hidden_layers", 2}}}}, 3, 2,
      DeviceKind::cpu, seed);
}

using test::error_of;

TEST(Snapshot, RoundTripsAndRejectsBadFiles) {
  const auto dir = test::fresh_dir("tessera_snapshot");
  const std::string path = (dir / "net.tsp").string();
  auto a = make_net(32, 99);
  nn::save_parameters(*a, path);
  auto b = make_net(32, 1);
  nn::load_parameters(*b, path);
  EXPECT_TRUE(std::equal(a->params().data<float>(), a->params().data<float>() + a->n_params(),
                         b->params().data<float>()));

  // truncated
  const auto size = std::filesystem::file_size(path);
  std::filesystem::copy_file(path, dir / "cut.tsp", std::filesystem::copy_options::overwrite_existing);
  std::filesystem::resize_file(dir / "cut.tsp", size - 10);
  EXPECT_NE(error_of([&] { nn::load_parameters(*b, (dir / "cut.tsp").string()); }).find("truncated"), std::string::npos);
  // foreign
  std::ofstream(dir / "foreign.tsp") << "PNG....not a snapshot";
  EXPECT_NE(error_of([&] { nn::load_parameters(*b, (dir / "foreign.tsp").string()); }).find("not a tessera parameter file"),
            std::string::npos);
  // different network: the message names what differs, not two whole headers
  auto c = make_net(64);
  const std::string differs = error_of([&] { nn::load_parameters(*c, path); });
  EXPECT_NE(differs.find("different model"), std::string::npos) << differs;
  EXPECT_NE(differs.find("model.n_neurons: file 32, this model 64"), std::string::npos) << differs;
  EXPECT_LT(differs.size(), 300u) << differs;
  // a header that claims 4 GiB: refused before allocating
  {
    std::string bytes;
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    const uint32_t huge = 0xFFFFFFF0u;
    std::memcpy(&bytes[12], &huge, sizeof(huge));
    std::ofstream(dir / "huge_header.tsp", std::ios::binary) << bytes;
  }
  EXPECT_NE(error_of([&] { nn::load_parameters(*b, (dir / "huge_header.tsp").string()); }).find("header claims"),
            std::string::npos);
  // a folder, a device, an oversized file
  EXPECT_NE(error_of([&] { nn::load_parameters(*b, dir.string()); }).find("it is a folder"), std::string::npos);
  EXPECT_NE(error_of([&] { nn::load_parameters(*b, "/dev/zero"); }).find("not a regular file"), std::string::npos);
  std::filesystem::copy_file(path, dir / "big.tsp", std::filesystem::copy_options::overwrite_existing);
  std::filesystem::resize_file(dir / "big.tsp", size + (2 << 20));
  EXPECT_NE(error_of([&] { nn::load_parameters(*b, (dir / "big.tsp").string()); }).find("more than the"),
            std::string::npos);
  // corrupted payload
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size - 20));
    f.put('\x7f');
  }
  EXPECT_NE(error_of([&] { nn::load_parameters(*b, path); }).find("checksum"), std::string::npos);
  // a diverged run's NaNs, saved with a valid checksum: refused on load
  a->params().data<float>()[5] = std::numeric_limits<float>::quiet_NaN();
  nn::save_parameters(*a, (dir / "nan.tsp").string());
  EXPECT_NE(error_of([&] { nn::load_parameters(*b, (dir / "nan.tsp").string()); }).find("non-finite parameter (nan at index 5)"),
            std::string::npos);
}

// Files written before models were modules (format version 1, the network config in
// tiny-cuda-nn's spelling) still load: the fuzz target's seed is one.
TEST(Snapshot, VersionOneFilesStillLoad) {
  const std::string path = test::source_path("tests/fuzz/corpus/snapshot/mlp16_v1.tsp");
  auto t = nn::ModelTrainer::from_config(
      {{"network", {{"otype", "FullyFusedMLP"}, {"n_neurons", 16}, {"n_hidden_layers", 1}}}}, 3, 2, DeviceKind::cpu);
  std::vector<float> before(t->params().data<float>(), t->params().data<float>() + t->n_params());
  nn::load_parameters(*t, path);
  std::vector<float> after(t->params().data<float>(), t->params().data<float>() + t->n_params());
  EXPECT_NE(before, after);
  // Saved again, it is a version-2 file that loads into the same model.
  const std::string again = (test::fresh_dir("tessera_snapshot_v1") / "again.tsp").string();
  nn::save_parameters(*t, again);
  auto u = nn::ModelTrainer::from_config(
      {{"network", {{"otype", "FullyFusedMLP"}, {"n_neurons", 16}, {"n_hidden_layers", 1}}}}, 3, 2, DeviceKind::cpu, 9);
  nn::load_parameters(*u, again);
  EXPECT_TRUE(std::equal(after.begin(), after.end(), u->params().data<float>()));
  // Into another model: one clear error naming the difference.
  auto wide = nn::ModelTrainer::from_config(
      {{"network", {{"otype", "FullyFusedMLP"}, {"n_neurons", 32}, {"n_hidden_layers", 1}}}}, 3, 2, DeviceKind::cpu);
  const std::string err = error_of([&] { nn::load_parameters(*wide, path); });
  EXPECT_NE(err.find("n_neurons: file 16, this model 32"), std::string::npos) << err;
}

}  // namespace
}  // namespace tessera
