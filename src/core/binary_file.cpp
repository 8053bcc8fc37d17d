#include "tessera/core/binary_file.h"

#include <cstring>

#include "tessera/core/error.h"

namespace tessera {

uint64_t fnv1a(const void* data, size_t bytes, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

BinaryWriter::BinaryWriter(const char (&magic)[8], uint32_t version, const Json& header) {
  const std::string text = header.dump();
  put_bytes(magic, sizeof(magic));
  put(version);
  put(uint32_t(text.size()));
  bytes_ += text;
}

BinaryReader::BinaryReader(std::string_view bytes, std::string kind, std::string name)
    : bytes_(bytes), kind_(std::move(kind)), name_(std::move(name)) {}

void BinaryReader::take(void* dst, size_t n) {
  TESSERA_CHECK(n <= bytes_.size() - pos_, "{} is truncated ({} bytes)", where(), bytes_.size());
  std::memcpy(dst, bytes_.data() + pos_, n);
  pos_ += n;
}

Json BinaryReader::read_header(const char (&magic)[8], uint32_t version, uint64_t max_header_bytes) {
  char got[8];
  take(got, sizeof(got));
  TESSERA_CHECK(std::memcmp(got, magic, sizeof(got)) == 0, "'{}' is not a tessera {}", name_, kind_);
  uint32_t got_version = 0, header_len = 0;
  take(&got_version, sizeof(got_version));
  TESSERA_CHECK(got_version == version, "{} has format version {}; this build reads version {}", where(), got_version,
                version);
  take(&header_len, sizeof(header_len));
  // Checked before allocating: a header length from a corrupt file must not ask for GiBs.
  TESSERA_CHECK(header_len <= max_header_bytes && header_len <= bytes_.size() - pos_,
                "{} is truncated or corrupt (its header claims {} bytes of {})", where(), header_len, bytes_.size());
  const Json header = parse_json(std::string(bytes_.substr(pos_, header_len)), "the header of " + where());
  pos_ += header_len;
  return header;
}

}  // namespace tessera
