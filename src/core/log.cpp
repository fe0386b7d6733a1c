#include "core/log.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace loom {

LogLevel log_level() {
  static const LogLevel level = [] {
    const char* s = std::getenv("LOOM_LOG");
    if (!s) return LogLevel::Warn;
    if (!std::strcmp(s, "debug")) return LogLevel::Debug;
    if (!std::strcmp(s, "info")) return LogLevel::Info;
    if (!std::strcmp(s, "error")) return LogLevel::Error;
    return LogLevel::Warn;
  }();
  return level;
}

void log_line(LogLevel level, const std::string& msg) {
  static std::mutex mu;
  static const char* names[] = {"debug", "info", "warn", "error"};
  std::lock_guard<std::mutex> lock(mu);
  std::fprintf(stderr, "[loom %s] %s\n", names[int(level)], msg.c_str());
}

}  // namespace loom
