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

}  // namespace tessera::test
