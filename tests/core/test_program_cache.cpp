// The on-disk program cache: entries round-trip; a corrupt, truncated or foreign file is a
// miss (and removed), never a wrong program; a disabled or unwritable cache is not an error.
#include <gtest/gtest.h>

#include "support/paths.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/program_cache.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ProgramCache, RoundTripsAndRefusesWhatItDidNotWrite) {
  const ProgramCache cache(test::fresh_dir("tessera_program_cache").string());
  const std::vector<uint8_t> binary = {1, 2, 3, 250, 0, 7};
  EXPECT_FALSE(cache.load("key A").has_value());
  ASSERT_TRUE(cache.store("key A", binary));
  EXPECT_EQ(cache.load("key A"), binary);
  EXPECT_FALSE(cache.load("key B").has_value());

  // One byte of the binary flipped: the checksum catches it; the entry is removed.
  const std::string path = cache.path_for("key A");
  std::string bytes = read_file(path);
  bytes[bytes.size() - 10] ^= 0x40;
  std::ofstream(path, std::ios::binary) << bytes;
  EXPECT_FALSE(cache.load("key A").has_value());
  EXPECT_FALSE(fs::exists(path));

  // Truncated, and an entry of another key in this key's file (a hash collision).
  ASSERT_TRUE(cache.store("key A", binary));
  bytes = read_file(path);
  std::ofstream(path, std::ios::binary) << bytes.substr(0, bytes.size() - 3);
  EXPECT_FALSE(cache.load("key A").has_value());
  std::ofstream(path, std::ios::binary) << ProgramCache::serialize("key Z", binary);
  EXPECT_FALSE(cache.load("key A").has_value());
  EXPECT_EQ(ProgramCache::parse(ProgramCache::serialize("key Z", binary), "key Z"), binary);
}

TEST(ProgramCache, DisabledOrUnwritableIsNotAnError) {
  const ProgramCache off("");
  EXPECT_FALSE(off.store("k", {1}));
  EXPECT_FALSE(off.load("k").has_value());
  const ProgramCache unwritable("/proc/version/cache");
  EXPECT_FALSE(unwritable.store("k", {1}));
  EXPECT_FALSE(unwritable.load("k").has_value());
}

}  // namespace
}  // namespace tessera
