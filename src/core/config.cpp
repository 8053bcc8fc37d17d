#include <algorithm>
#include <cctype>
#include <string_view>
#include "tessera/core/config.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <type_traits>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tessera/core/error.h"

namespace tessera {

// Configs are small text files: anything else (a folder, a FIFO, /dev/zero, a huge file) is
// refused before reading, not read until memory runs out or forever.
constexpr uintmax_t kMaxConfigBytes = 64ull << 20;

uintmax_t check_input_file(const std::string& path, const char* what, uintmax_t max_bytes) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  TESSERA_CHECK(!ec && fs::exists(st), "cannot open {} '{}': no such file", what, path);
  TESSERA_CHECK(fs::is_regular_file(st), "{} '{}' is not a regular file ({})", what, path,
                fs::is_directory(st) ? "it is a folder" : "a device, pipe or socket");
  const uintmax_t size = fs::file_size(path, ec);
  TESSERA_CHECK(!ec && size <= max_bytes, "{} '{}' is {} bytes, more than the {} bytes it can be", what, path, size,
                max_bytes);
  return size;
}

Json load_json_file(const std::string& path) {
  return parse_json(read_input_file(path, "config file", kMaxConfigBytes), "config file '" + path + "'");
}

Json parse_json(const std::string& text, const std::string& what) {
  try {
    return Json::parse(text, nullptr, true, /*ignore_comments=*/true);
  } catch (const Json::exception& e) {  // parse errors, and numbers too large for a double (1e999)
    throw Error(fmt::format("{} is not valid JSON: {}", what, e.what()));
  }
}

std::string canonical_name(const std::string& name, std::initializer_list<const char*> choices) {
  const auto same = [](unsigned char a, unsigned char b) { return std::tolower(a) == std::tolower(b); };
  for (const char* choice : choices) {
    const std::string_view c(choice);
    if (c.size() == name.size() && std::equal(c.begin(), c.end(), name.begin(), same)) return std::string(c);
  }
  return name;
}

void check_known_keys(const Json& object, const std::string& what,
                      std::initializer_list<const char*> allowed) {
  TESSERA_CHECK(object.is_object(), "{} must be a JSON object", what);
  for (auto it = object.begin(); it != object.end(); ++it) {
    bool known = false;
    std::string valid;
    for (const char* key : allowed) {
      known = known || it.key() == key;
      valid += valid.empty() ? key : std::string(", ") + key;
    }
    TESSERA_CHECK(known, "{}: unknown key '{}'; valid keys: {}", what, it.key(), valid);
  }
}

namespace {
[[noreturn]] void bad_value(const char* key, const char* expected, const Json& v) {
  throw Error(fmt::format("config key '{}' must be {} (got {})", key, expected, v.dump()));
}
}  // namespace

// Strict: an integer key takes a whole number in range (16.9 is not 16, -64 is not
// 4294967232), a float key a finite number, a string key a string, a bool key a bool.
template <typename T>
T json_get(const Json& object, const char* key, const T& default_value) {
  if (!object.is_object() || !object.contains(key)) return default_value;
  const Json& v = object.at(key);
  if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) bad_value(key, "true or false", v);
    return v.get<bool>();
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string()) bad_value(key, "a string", v);
    return v.get<std::string>();
  } else if constexpr (std::is_integral_v<T>) {
    if (!v.is_number_integer()) bad_value(key, "a whole number", v);
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      if (u > uint64_t(std::numeric_limits<T>::max())) bad_value(key, "a smaller whole number", v);
      return T(u);
    }
    const int64_t s = v.get<int64_t>();
    if (s < int64_t(std::numeric_limits<T>::min()))
      bad_value(key, std::is_signed_v<T> ? "a larger whole number" : "a whole number of at least 0", v);
    if (s > 0 && uint64_t(s) > uint64_t(std::numeric_limits<T>::max())) bad_value(key, "a smaller whole number", v);
    return T(s);
  } else {
    if (!v.is_number()) bad_value(key, "a number", v);
    const double d = v.get<double>();
    if (!std::isfinite(d) || std::abs(d) > double(std::numeric_limits<T>::max())) bad_value(key, "a finite number", v);
    return T(d);
  }
}
template int json_get<int>(const Json&, const char*, const int&);
template uint32_t json_get<uint32_t>(const Json&, const char*, const uint32_t&);
template uint64_t json_get<uint64_t>(const Json&, const char*, const uint64_t&);
template float json_get<float>(const Json&, const char*, const float&);
template double json_get<double>(const Json&, const char*, const double&);
template bool json_get<bool>(const Json&, const char*, const bool&);
template std::string json_get<std::string>(const Json&, const char*, const std::string&);

// A unique temporary file in the target's folder (mkstemp: two writers never share one),
// written in full and flushed to the disk (fsync) before the rename, and the folder flushed
// after it, so a crash leaves either the old file or the new one; on any failure the
// temporary file is removed (no *.tmp litter, no disk left full).
void write_file_atomic(const std::string& path, const void* data, size_t bytes) {
  std::string tmp = path + ".tmpXXXXXX";
  const int fd = ::mkstemp(tmp.data());
  TESSERA_CHECK(fd >= 0, "cannot write '{}': {} (does the folder exist and is it writable?)", path,
                std::strerror(errno));
  auto fail = [&](const char* what) {
    const std::string reason = std::strerror(errno);
    ::close(fd);
    ::unlink(tmp.c_str());
    throw Error(fmt::format("writing '{}' failed while {}: {}", path, what, reason));
  };
  if (::fchmod(fd, 0644) != 0) fail("setting its permissions");
  const char* p = static_cast<const char*>(data);
  for (size_t left = bytes; left > 0;) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("writing");
    p += n;
    left -= size_t(n);
  }
  if (::fsync(fd) != 0) fail("flushing to disk");
  if (::close(fd) != 0) {
    const std::string reason = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw Error(fmt::format("writing '{}' failed while closing: {}", path, reason));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw Error(fmt::format("cannot move the new '{}' into place: {}", path, reason));
  }
  // The rename itself is durable once the folder is flushed; a failure here loses nothing.
  const std::string folder = std::filesystem::path(path).parent_path().string();
  const int dir_fd = ::open(folder.empty() ? "." : folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

std::string read_input_file(const std::string& path, const char* what, uintmax_t max_bytes) {
  const uintmax_t size = check_input_file(path, what, max_bytes);
  std::ifstream in(path, std::ios::binary);
  TESSERA_CHECK(in.good(), "cannot open {} '{}' (permissions?)", what, path);
  std::string bytes(size_t(size), '\0');
  in.read(bytes.data(), std::streamsize(size));
  TESSERA_CHECK(in.gcount() == std::streamsize(size), "cannot read {} '{}': it changed or a read failed", what, path);
  return bytes;
}

void write_file_atomic(const std::string& path, const std::string& text) {
  write_file_atomic(path, text.data(), text.size());
}

namespace {
void collect_differences(const Json& file, const Json& mine, const std::string& at, const std::string& label,
                         std::vector<std::string>& out) {
  if (file.is_object() && mine.is_object()) {
    for (auto it = mine.begin(); it != mine.end(); ++it) {
      const std::string key = at.empty() ? it.key() : at + "." + it.key();
      if (!file.contains(it.key())) out.push_back(key + ": missing in the file");
      else if (file.at(it.key()) != it.value()) collect_differences(file.at(it.key()), it.value(), key, label, out);
    }
    for (auto it = file.begin(); it != file.end(); ++it)
      if (!mine.contains(it.key())) out.push_back((at.empty() ? it.key() : at + "." + it.key()) + ": only in the file");
    return;
  }
  if (file.is_array() && mine.is_array() && file.size() == mine.size()) {  // a list of modules: say which one
    for (size_t i = 0; i < file.size(); ++i)
      if (file[i] != mine[i]) collect_differences(file[i], mine[i], fmt::format("{}[{}]", at, i), label, out);
    return;
  }
  auto brief = [](const Json& v) {
    std::string s = v.dump();
    return s.size() > 60 ? s.substr(0, 57) + "..." : s;
  };
  out.push_back((at.empty() ? std::string("header") : at) + ": file " + brief(file) + ", " + label + " " + brief(mine));
}
}  // namespace

std::string json_differences(const Json& file, const Json& mine, const std::string& mine_label) {
  std::vector<std::string> all;
  collect_differences(file, mine, "", mine_label, all);
  std::string text;
  for (size_t i = 0; i < all.size() && i < 4; ++i) text += (i ? "; " : "") + all[i];
  if (all.size() > 4) text += fmt::format("; and {} more", all.size() - 4);
  return text;
}

}  // namespace tessera
