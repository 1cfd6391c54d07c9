#include "common/log.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "common/text.h"

namespace ssd {
namespace {
std::mutex g_mutex;
std::function<void(LogLevel, std::string_view)> g_sink;
}  // namespace

void log_message(LogLevel level, std::string_view message) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_sink) {
    g_sink(level, message);
    return;
  }
  const char* env = std::getenv("SSD_LOG");
  if (env && std::strcmp(env, "quiet") == 0) return;
  if (level == LogLevel::Info && !(env && std::strcmp(env, "info") == 0)) return;
  // Messages quote paths and values from the environment: no raw control bytes reach the terminal.
  std::string line = std::string("ssdgen: ") + (level == LogLevel::Warning ? "warning: " : "") +
                     printable(message, /*keep_line_breaks=*/true) + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
}

void set_log_sink(std::function<void(LogLevel, std::string_view)> sink) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_sink = std::move(sink);
}

}  // namespace ssd
