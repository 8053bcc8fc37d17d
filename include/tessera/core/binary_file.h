#pragma once
// tessera's binary files (parameter files, NeRF snapshots) share one frame: an 8-byte
// magic, a u32 format version, a u32 length and a JSON header, then the payload. The
// writer builds the bytes (written atomically by the caller); the reader checks the frame
// and never reads past the end, naming the file in every error.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/config.h"

namespace tessera {

// FNV-1a over `bytes`, continuing from `seed` (chain calls to hash several arrays).
uint64_t fnv1a(const void* data, size_t bytes, uint64_t seed = 1469598103934665603ULL);

class BinaryWriter {
 public:
  BinaryWriter(const char (&magic)[8], uint32_t version, const Json& header);
  void put_bytes(const void* data, size_t n) {
    if (n) bytes_.append(static_cast<const char*>(data), n);
  }
  template <typename T>
  void put(const T& v) {
    put_bytes(&v, sizeof(T));
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

class BinaryReader {
 public:
  // kind ("parameter file", "NeRF snapshot") and name (its path) are for messages.
  BinaryReader(std::string_view bytes, std::string kind, std::string name);
  // Checks the magic and the version and returns the header; a header longer than
  // max_header_bytes or than the file is refused before anything is allocated for it.
  Json read_header(const char (&magic)[8], uint32_t version, uint64_t max_header_bytes) {
    return read_header(magic, version, version, max_header_bytes);
  }
  // The same for a format that still reads older versions: any of [oldest, newest];
  // version() then says which.
  Json read_header(const char (&magic)[8], uint32_t oldest, uint32_t newest, uint64_t max_header_bytes);
  uint32_t version() const { return version_; }
  // The next n bytes into dst; past the end is an error ("... is truncated").
  void take(void* dst, size_t n);
  size_t position() const { return pos_; }
  size_t size() const { return bytes_.size(); }
  // "<kind> '<name>'", for the caller's own messages.
  std::string where() const { return kind_ + " '" + name_ + "'"; }

 private:
  std::string_view bytes_;
  std::string kind_, name_;
  size_t pos_ = 0;
  uint32_t version_ = 0;
};

// A named float array of a snapshot (parameters, optimizer moments, an occupancy grid).
struct NamedArray {
  std::string name;
  std::vector<float> values;
};

// Files whose payload is float arrays: the header lists them ("arrays": [[name, count],
// ...], added here), the payload holds their values in that order, then a u64 FNV-1a of
// all their bytes. Returns the file's bytes (the caller writes them atomically).
std::string array_file_bytes(const char (&magic)[8], uint32_t version, Json header,
                             const std::vector<NamedArray>& arrays);
// After read_header: the arrays the header lists. Counts are checked against the bytes
// left before anything is allocated; then the checksum, no trailing bytes, and every value
// finite (a run that diverged must not be trained on silently).
std::vector<NamedArray> read_arrays(BinaryReader& in, const Json& header);
// The array called `name`, or an error naming the file and what is missing.
NamedArray& find_array(std::vector<NamedArray>& arrays, const std::string& name, const std::string& where);

}  // namespace tessera
