// How the disk cache is configured: its mode, root directory, size bound and lock timeout, with
// their defaults, and how they are read from the environment (SSD_CACHE_DIR, XDG_CACHE_HOME, HOME,
// SSD_CACHE_MODE, SSD_CACHE_MAX_BYTES, SSD_CACHE_SHARED, SSD_CACHE_LOCK_TIMEOUT_MS; docs/cache.md).
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace ssd::cache {

enum class Mode { ReadWrite, ReadOnly, RequireCached, Off };

const char* mode_name(Mode mode);  // "readwrite", "readonly", "require-cached", "off"
Result<Mode> parse_mode(const std::string& text);

struct Options {
  std::string root;             // cache root directory (absolute)
  Mode mode = Mode::ReadWrite;
  bool group_shared = false;    // opt-in: accept a group-writable root owned by us (SSD_CACHE_SHARED=1)
  uint64_t max_bytes = 4ull << 30;  // LRU bound on entry bytes (SSD_CACHE_MAX_BYTES)
  int lock_timeout_ms = 120000;     // then compile without the lock (SSD_CACHE_LOCK_TIMEOUT_MS)
};

// Root: $SSD_CACHE_DIR, else $XDG_CACHE_HOME/ssdgen, else $HOME/.cache/ssdgen. Mode: $SSD_CACHE_MODE.
// A malformed variable is an error naming the variable and its legal values.
Result<Options> options_from_env();

}  // namespace ssd::cache
