#pragma once
// Minimal leveled logging to stderr (fmt-formatted). Library code logs warnings only
// where it skips something the user should know about; results go through return values.
#include <cstdio>

#include <fmt/format.h>

namespace tessera {

enum class LogLevel { debug = 0, info = 1, warning = 2, error = 3, quiet = 4 };
void set_log_level(LogLevel level);
LogLevel log_level();

template <typename... Args>
void log(LogLevel level, fmt::format_string<Args...> format, Args&&... args) {
  if (level < log_level()) return;
  static const char* names[] = {"debug", "info", "warning", "error"};
  fmt::print(stderr, "tessera {}: {}\n", names[static_cast<int>(level)],
             fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace tessera
