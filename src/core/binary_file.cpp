#include "tessera/core/binary_file.h"

#include <cmath>
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
  if (n == 0) return;  // an empty array's data() may be null, which memcpy must not get
  TESSERA_CHECK(n <= bytes_.size() - pos_, "{} is truncated ({} bytes)", where(), bytes_.size());
  std::memcpy(dst, bytes_.data() + pos_, n);
  pos_ += n;
}

Json BinaryReader::read_header(const char (&magic)[8], uint32_t oldest, uint32_t newest, uint64_t max_header_bytes) {
  char got[8];
  take(got, sizeof(got));
  TESSERA_CHECK(std::memcmp(got, magic, sizeof(got)) == 0, "'{}' is not a tessera {}", name_, kind_);
  uint32_t got_version = 0, header_len = 0;
  take(&got_version, sizeof(got_version));
  TESSERA_CHECK(got_version >= oldest && got_version <= newest, "{} has format version {}; this build reads {}", where(),
                got_version,
                oldest == newest ? fmt::format("version {}", newest) : fmt::format("versions {} to {}", oldest, newest));
  version_ = got_version;
  take(&header_len, sizeof(header_len));
  // Checked before allocating: a header length from a corrupt file must not ask for GiBs.
  TESSERA_CHECK(header_len <= max_header_bytes && header_len <= bytes_.size() - pos_,
                "{} is truncated or corrupt (its header claims {} bytes of {})", where(), header_len, bytes_.size());
  const Json header = parse_json(std::string(bytes_.substr(pos_, header_len)), "the header of " + where());
  pos_ += header_len;
  return header;
}

std::string array_file_bytes(const char (&magic)[8], uint32_t version, Json header,
                             const std::vector<NamedArray>& arrays) {
  Json list = Json::array();
  for (const NamedArray& a : arrays) list.push_back(Json::array({a.name, a.values.size()}));
  header["arrays"] = list;
  BinaryWriter out(magic, version, header);
  uint64_t hash = fnv1a(nullptr, 0);
  for (const NamedArray& a : arrays) {
    out.put_bytes(a.values.data(), a.values.size() * sizeof(float));
    hash = fnv1a(a.values.data(), a.values.size() * sizeof(float), hash);
  }
  out.put(hash);
  return out.bytes();
}

std::vector<NamedArray> read_arrays(BinaryReader& in, const Json& header) {
  const std::string where = in.where();
  TESSERA_CHECK(header.is_object() && header.contains("arrays") && header.at("arrays").is_array(),
                "{}: the header does not list its arrays", where);
  const Json& list = header.at("arrays");
  // The claimed sizes must add up to the file's bytes before anything is allocated.
  uint64_t total = 0;
  const uint64_t left = in.size() - in.position();
  for (const Json& entry : list) {
    TESSERA_CHECK(entry.is_array() && entry.size() == 2 && entry[0].is_string() && entry[1].is_number_unsigned(),
                  "{}: an array entry of the header is not [name, count]", where);
    const uint64_t count = entry[1].get<uint64_t>();
    TESSERA_CHECK(count <= left / sizeof(float) && total + count <= left / sizeof(float),
                  "{} is truncated or corrupt (its header lists more array values than its {} bytes hold)", where,
                  in.size());
    total += count;
  }
  TESSERA_CHECK(left == total * sizeof(float) + sizeof(uint64_t),
                "{} has {} bytes; its header implies {} (truncated or corrupt)", where, in.size(),
                in.position() + total * sizeof(float) + sizeof(uint64_t));
  std::vector<NamedArray> arrays;
  uint64_t hash = fnv1a(nullptr, 0);
  for (const Json& entry : list) {
    NamedArray a{entry[0].get<std::string>(), std::vector<float>(entry[1].get<uint64_t>())};
    in.take(a.values.data(), a.values.size() * sizeof(float));
    hash = fnv1a(a.values.data(), a.values.size() * sizeof(float), hash);
    arrays.push_back(std::move(a));
  }
  uint64_t stored = 0;
  in.take(&stored, sizeof(stored));
  TESSERA_CHECK(stored == hash, "{} is corrupt (checksum mismatch)", where);
  for (const NamedArray& a : arrays)
    for (size_t i = 0; i < a.values.size(); ++i)
      TESSERA_CHECK(std::isfinite(a.values[i]), "{} holds a non-finite value ({} at index {} of '{}')", where,
                    a.values[i], i, a.name);
  return arrays;
}

NamedArray& find_array(std::vector<NamedArray>& arrays, const std::string& name, const std::string& where) {
  for (NamedArray& a : arrays)
    if (a.name == name) return a;
  throw Error(format_message("{} has no '{}' array", where, name));
}

}  // namespace tessera
