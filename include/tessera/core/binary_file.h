#pragma once
// tessera's binary files (parameter files, NeRF snapshots) share one frame: an 8-byte
// magic, a u32 format version, a u32 length and a JSON header, then the payload. The
// writer builds the bytes (written atomically by the caller); the reader checks the frame
// and never reads past the end, naming the file in every error.
#include <cstdint>
#include <string>
#include <string_view>

#include "tessera/core/config.h"

namespace tessera {

// FNV-1a over `bytes`, continuing from `seed` (chain calls to hash several arrays).
uint64_t fnv1a(const void* data, size_t bytes, uint64_t seed = 1469598103934665603ULL);

class BinaryWriter {
 public:
  BinaryWriter(const char (&magic)[8], uint32_t version, const Json& header);
  void put_bytes(const void* data, size_t n) { bytes_.append(static_cast<const char*>(data), n); }
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
  Json read_header(const char (&magic)[8], uint32_t version, uint64_t max_header_bytes);
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
};

}  // namespace tessera
