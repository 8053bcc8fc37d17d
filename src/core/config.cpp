#include "tessera/core/config.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "tessera/core/error.h"

namespace tessera {

Json load_json_file(const std::string& path) {
  std::ifstream in(path);
  TESSERA_CHECK(in.good(), "cannot open config file '{}'", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_json(ss.str(), "config file '" + path + "'");
}

Json parse_json(const std::string& text, const std::string& what) {
  try {
    return Json::parse(text, nullptr, true, /*ignore_comments=*/true);
  } catch (const Json::parse_error& e) {
    throw Error(fmt::format("{} is not valid JSON: {}", what, e.what()));
  }
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

template <typename T>
T json_get(const Json& object, const char* key, const T& default_value) {
  if (!object.contains(key)) return default_value;
  try {
    return object.at(key).get<T>();
  } catch (const Json::exception&) {
    throw Error(fmt::format("config key '{}' has the wrong type (value {})", key, object.at(key).dump()));
  }
}
template int json_get<int>(const Json&, const char*, const int&);
template uint32_t json_get<uint32_t>(const Json&, const char*, const uint32_t&);
template float json_get<float>(const Json&, const char*, const float&);
template double json_get<double>(const Json&, const char*, const double&);
template bool json_get<bool>(const Json&, const char*, const bool&);
template std::string json_get<std::string>(const Json&, const char*, const std::string&);

void write_file_atomic(const std::string& path, const void* data, size_t bytes) {
  namespace fs = std::filesystem;
  fs::path target(path);
  fs::path tmp = target;
  tmp += fmt::format(".tmp{}", static_cast<long>(getpid()));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    TESSERA_CHECK(out.good(), "cannot write '{}' (does the folder exist and is it writable?)", tmp.string());
    out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
    out.flush();
    TESSERA_CHECK(out.good(), "writing '{}' failed (disk full?)", tmp.string());
  }
  std::error_code ec;
  fs::rename(tmp, target, ec);
  if (ec) {
    fs::remove(tmp);
    throw Error(fmt::format("cannot move '{}' into place as '{}': {}", tmp.string(), path, ec.message()));
  }
}

void write_file_atomic(const std::string& path, const std::string& text) {
  write_file_atomic(path, text.data(), text.size());
}

}  // namespace tessera
