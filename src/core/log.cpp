#include "tessera/core/log.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>

namespace tessera {

namespace {
std::atomic<LogLevel> g_level{LogLevel::info};
std::mutex g_sink_mutex;
LogSink g_sink;  // empty: stderr
}  // namespace

void set_log_level(LogLevel level) { g_level = level; }
LogLevel log_level() { return g_level; }

void set_log_sink(LogSink sink) {
  std::lock_guard<std::mutex> lock(g_sink_mutex);
  g_sink = std::move(sink);
}

void emit_log(LogLevel level, const std::string& message) {
  std::lock_guard<std::mutex> lock(g_sink_mutex);
  if (g_sink) return g_sink(level, message);
  static const char* names[] = {"debug", "info", "warning", "error"};
  fmt::print(stderr, "tessera {}: {}\n", names[std::min(static_cast<int>(level), 3)], message);
}

}  // namespace tessera
