// Minimal leveled logging to stderr. LOOM_LOG=debug|info|warn|error (default: warn).
#pragma once

#include <string>

#include "core/error.h"

namespace loom {

enum class LogLevel { Debug = 0, Info = 1, Warn = 2, Error = 3 };

LogLevel log_level();
void log_line(LogLevel level, const std::string& msg);

template <typename... Args>
void log_info(Args&&... args) {
  if (log_level() <= LogLevel::Info) log_line(LogLevel::Info, cat(std::forward<Args>(args)...));
}
template <typename... Args>
void log_debug(Args&&... args) {
  if (log_level() <= LogLevel::Debug) log_line(LogLevel::Debug, cat(std::forward<Args>(args)...));
}
template <typename... Args>
void log_warn(Args&&... args) {
  if (log_level() <= LogLevel::Warn) log_line(LogLevel::Warn, cat(std::forward<Args>(args)...));
}

}  // namespace loom
