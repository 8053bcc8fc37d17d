#include "tessera/core/error.h"

#include <filesystem>

namespace tessera {

static std::string with_location(const std::string& message, const std::source_location& where) {
  return fmt::format("{} [{}:{}]", message,
                     std::filesystem::path(where.file_name()).filename().string(), where.line());
}

Error::Error(const std::string& message, std::source_location where)
    : std::runtime_error(with_location(message, where)), message_(message) {}

}  // namespace tessera
