// The disk cache's options and their environment variables (options.h).
#include "cache/options.h"

#include <pwd.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>

#include <fmt/format.h>

#include "cache/fs.h"

namespace ssd::cache {

const char* mode_name(Mode mode) {
  switch (mode) {
    case Mode::ReadWrite: return "readwrite";
    case Mode::ReadOnly: return "readonly";
    case Mode::RequireCached: return "require-cached";
    case Mode::Off: return "off";
  }
  return "?";
}

Result<Mode> parse_mode(const std::string& text) {
  for (Mode m : {Mode::ReadWrite, Mode::ReadOnly, Mode::RequireCached, Mode::Off})
    if (text == mode_name(m)) return m;
  return make_error(SSD_ERROR_INVALID_ARGUMENT,
                    fmt::format("SSD_CACHE_MODE='{}' is not valid; legal values: readwrite, readonly, "
                                "require-cached, off",
                                text));
}

namespace {

const char* env_or_null(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

// Decimal digits only; false on overflow or anything else.
bool parse_u64(const std::string& s, uint64_t* out) {
  if (s.empty()) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    if (v > (UINT64_MAX - uint64_t(c - '0')) / 10) return false;
    v = v * 10 + uint64_t(c - '0');
  }
  *out = v;
  return true;
}

}  // namespace

Result<Options> options_from_env() {
  Options o;
  if (const char* dir = env_or_null("SSD_CACHE_DIR")) {
    o.root = normalize_root(dir);
  } else if (const char* xdg = env_or_null("XDG_CACHE_HOME"); xdg && xdg[0] == '/') {
    o.root = normalize_root(std::string(xdg) + "/ssdgen");  // XDG: relative values are ignored
  } else {
    std::string home;
    if (const char* h = env_or_null("HOME")) {
      home = h;
    } else {
      struct passwd pw {};
      struct passwd* res = nullptr;
      char buf[4096];
      if (getpwuid_r(::geteuid(), &pw, buf, sizeof buf, &res) == 0 && res && res->pw_dir)
        home = res->pw_dir;
    }
    // No home at all: root stays empty and DiskCache runs memory-only with a warning.
    if (!home.empty()) o.root = normalize_root(home + "/.cache/ssdgen");
  }

  if (const char* m = env_or_null("SSD_CACHE_MODE")) {
    SSD_ASSIGN_OR_RETURN(o.mode, parse_mode(m));
  }

  if (const char* mb = env_or_null("SSD_CACHE_MAX_BYTES")) {
    std::string s = mb;
    uint64_t mult = 1;
    if (!s.empty()) {
      switch (s.back()) {
        case 'K': case 'k': mult = 1ull << 10; break;
        case 'M': case 'm': mult = 1ull << 20; break;
        case 'G': case 'g': mult = 1ull << 30; break;
        case 'T': case 't': mult = 1ull << 40; break;
        default: break;
      }
      if (mult != 1) s.pop_back();
    }
    uint64_t v = 0;
    if (!parse_u64(s, &v) || (mult != 1 && v > UINT64_MAX / mult))
      return make_error(SSD_ERROR_INVALID_ARGUMENT,
                        fmt::format("SSD_CACHE_MAX_BYTES='{}' is not valid; expected a byte count, "
                                    "optionally with a K, M, G or T suffix (e.g. 4G, 512M, 1000000)",
                                    mb));
    o.max_bytes = v * mult;
  }

  if (const char* sh = env_or_null("SSD_CACHE_SHARED")) {
    std::string s = sh;
    if (s == "1") o.group_shared = true;
    else if (s == "0") o.group_shared = false;
    else
      return make_error(SSD_ERROR_INVALID_ARGUMENT,
                        fmt::format("SSD_CACHE_SHARED='{}' is not valid; legal values: 0, 1", s));
  }

  if (const char* t = env_or_null("SSD_CACHE_LOCK_TIMEOUT_MS")) {
    uint64_t v = 0;
    if (!parse_u64(t, &v) || v > uint64_t(INT_MAX))
      return make_error(SSD_ERROR_INVALID_ARGUMENT,
                        fmt::format("SSD_CACHE_LOCK_TIMEOUT_MS='{}' is not valid; expected milliseconds "
                                    "as a non-negative integer",
                                    t));
    o.lock_timeout_ms = int(v);
  }
  return o;
}

}  // namespace ssd::cache
