#include "tessera/core/log.h"

#include <atomic>

namespace tessera {

static std::atomic<LogLevel> g_level{LogLevel::info};
void set_log_level(LogLevel level) { g_level = level; }
LogLevel log_level() { return g_level; }

}  // namespace tessera
