#include "core/program_cache.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "tessera/core/config.h"

namespace tessera {

namespace {

constexpr char kMagic[8] = {'T', 'S', 'R', 'P', 'R', 'G', '0', '1'};
constexpr size_t kMaxKey = 1u << 24, kMaxBinary = size_t(1) << 30;

// FNV-1a, 64-bit: file names and the binary's checksum (not security: the full key is
// compared, and a wrong binary only costs a failed build, which is then redone from source).
uint64_t fnv1a(const void* data, size_t n, uint64_t h = 0xcbf29ce484222325ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(char((v >> (8 * i)) & 0xff));
}
bool get_u64(const std::string& in, size_t& at, uint64_t& v) {
  if (in.size() < at + 8) return false;
  v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(static_cast<unsigned char>(in[at + i])) << (8 * i);
  at += 8;
  return true;
}

}  // namespace

std::string ProgramCache::default_folder() {
  const char* dir = std::getenv("TESSERA_CACHE_DIR");
  if (dir && *dir) return (std::filesystem::path(dir) / "opencl").string();
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return (std::filesystem::path(xdg) / "tessera" / "opencl").string();
  if (const char* home = std::getenv("HOME"); home && *home)
    return (std::filesystem::path(home) / ".cache" / "tessera" / "opencl").string();
  return "";
}

std::string ProgramCache::path_for(const std::string& key) const {
  return (std::filesystem::path(folder_) / fmt::format("{:016x}.bin", fnv1a(key.data(), key.size()))).string();
}

std::string ProgramCache::serialize(const std::string& key, const std::vector<uint8_t>& binary) {
  std::string out(kMagic, sizeof(kMagic));
  put_u64(out, key.size());
  out += key;
  put_u64(out, binary.size());
  out.append(reinterpret_cast<const char*>(binary.data()), binary.size());
  put_u64(out, fnv1a(binary.data(), binary.size()));
  return out;
}

std::optional<std::vector<uint8_t>> ProgramCache::parse(const std::string& bytes, const std::string& key) {
  if (bytes.size() < sizeof(kMagic) || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) return std::nullopt;
  size_t at = sizeof(kMagic);
  uint64_t key_size = 0, binary_size = 0, checksum = 0;
  if (!get_u64(bytes, at, key_size) || key_size > kMaxKey || bytes.size() - at < key_size) return std::nullopt;
  if (bytes.compare(at, key_size, key) != 0 || key_size != key.size()) return std::nullopt;
  at += key_size;
  if (!get_u64(bytes, at, binary_size) || binary_size == 0 || binary_size > kMaxBinary ||
      bytes.size() - at < binary_size)
    return std::nullopt;
  std::vector<uint8_t> binary(bytes.begin() + at, bytes.begin() + at + binary_size);
  at += binary_size;
  if (!get_u64(bytes, at, checksum) || at != bytes.size() || checksum != fnv1a(binary.data(), binary.size()))
    return std::nullopt;
  return binary;
}

std::optional<std::vector<uint8_t>> ProgramCache::load(const std::string& key) const {
  if (folder_.empty()) return std::nullopt;
  const std::string path = path_for(key);
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  auto binary = parse(ss.str(), key);
  if (!binary) {
    std::error_code ec;
    std::filesystem::remove(path, ec);  // corrupt or foreign: rebuilt and rewritten by the caller
  }
  return binary;
}

bool ProgramCache::store(const std::string& key, const std::vector<uint8_t>& binary) const {
  if (folder_.empty() || binary.empty()) return false;
  try {
    std::filesystem::create_directories(folder_);
    const std::string bytes = serialize(key, binary);
    write_file_atomic(path_for(key), bytes.data(), bytes.size());
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace tessera
