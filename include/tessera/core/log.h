#pragma once
// Minimal leveled logging (fmt-formatted). Library code logs warnings only where it skips
// something the user should know about; results go through return values. Lines go to
// stderr unless a front end (a Python binding, a GUI) installs its own sink.
#include <functional>
#include <string>

#include <fmt/format.h>

namespace tessera {

enum class LogLevel { debug = 0, info = 1, warning = 2, error = 3, quiet = 4 };
void set_log_level(LogLevel level);
LogLevel log_level();

// Receives every line at or above the level (without the "tessera <level>: " prefix the
// stderr sink adds). An empty function puts stderr back. Called from the logging thread.
using LogSink = std::function<void(LogLevel level, const std::string& message)>;
void set_log_sink(LogSink sink);
void emit_log(LogLevel level, const std::string& message);

template <typename... Args>
void log(LogLevel level, fmt::format_string<Args...> format, Args&&... args) {
  if (level < log_level()) return;
  emit_log(level, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace tessera
