#pragma once
// An on-disk cache of compiled device programs (OpenCL binaries), so a kernel is compiled
// once per device, driver and source, not once per process. An entry is keyed by a string
// (device, driver, build options, source) and stored as one file named by the key's hash:
// a header, the full key (a hash collision is a miss, not a wrong program), the binary and
// its checksum. Anything unexpected in a file (truncated, corrupt, another key, another
// version) is a miss: the entry is removed and the caller rebuilds; it is never trusted.
// Entries are written atomically (a temporary file renamed into place).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tessera {

class ProgramCache {
 public:
  // `folder`: created on first store; "" disables the cache (every load misses).
  explicit ProgramCache(std::string folder) : folder_(std::move(folder)) {}
  // The default folder: $TESSERA_CACHE_DIR, else $XDG_CACHE_HOME/tessera, else
  // $HOME/.cache/tessera; then /opencl. "" when none of these is set.
  static std::string default_folder();

  std::optional<std::vector<uint8_t>> load(const std::string& key) const;
  // Failures to write are not errors (the cache is an optimization): returns false.
  bool store(const std::string& key, const std::vector<uint8_t>& binary) const;
  std::string path_for(const std::string& key) const;
  const std::string& folder() const { return folder_; }

  // An entry's bytes as load() reads them (for tests and the fuzz target): the binary, or
  // nullopt when the bytes are not a valid entry for `key`.
  static std::optional<std::vector<uint8_t>> parse(const std::string& bytes, const std::string& key);
  static std::string serialize(const std::string& key, const std::vector<uint8_t>& binary);

 private:
  std::string folder_;
};

}  // namespace tessera
