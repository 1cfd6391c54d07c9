// Diagnostics that must not fail the caller (cache degradation, workspace allocation) go here.
#pragma once

#include <functional>
#include <string_view>

namespace ssd {

enum class LogLevel { Warning, Info };

// Default sink: stderr as "ssdgen: warning: ...". SSD_LOG=quiet silences warnings.
void log_message(LogLevel level, std::string_view message);
inline void log_warning(std::string_view message) { log_message(LogLevel::Warning, message); }

// Replace the sink (tests capture warnings); pass nullptr to restore the default. Thread-safe.
void set_log_sink(std::function<void(LogLevel, std::string_view)> sink);

}  // namespace ssd
