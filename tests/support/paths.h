#pragma once
// Files of the source tree (configs/...) from tests that may run from another checkout
// (the GPU host): $TESSERA_SOURCE_DIR, then the tree the test was built from, then ".".
#include <cstdlib>
#include <filesystem>
#include <string>

namespace tessera::test {

inline std::string source_path(const std::string& relative) {
  const char* roots[] = {std::getenv("TESSERA_SOURCE_DIR"), TESSERA_SOURCE_DIR, "."};
  for (const char* root : roots) {
    if (!root) continue;
    const auto p = std::filesystem::path(root) / relative;
    if (std::filesystem::exists(p)) return p.string();
  }
  return relative;
}

// An empty folder `name` under the system's temporary folder (emptied if it exists).
inline std::filesystem::path fresh_dir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace tessera::test
