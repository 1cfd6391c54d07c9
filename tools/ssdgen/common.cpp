// Shared CLI plumbing: exit codes, error output, option scanning, small parsers.
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <limits>

#include <fmt/format.h>

#include "cli.h"
#include "common/log.h"
#include "common/text.h"

namespace ssdgen {

int exit_code_for(ssd_status status) {
  switch (status) {
    case SSD_OK:
      return kExitOk;
    case SSD_ERROR_INVALID_ARGUMENT:
    case SSD_ERROR_INVALID_CONFIG:
    case SSD_ERROR_INVALID_SHAPE:
    case SSD_ERROR_INVALID_STRIDE:
    case SSD_ERROR_INVALID_DTYPE:
    case SSD_ERROR_INVALID_ALIGNMENT:
    case SSD_ERROR_NULL_POINTER:
    case SSD_ERROR_UNSUPPORTED:
      return kExitInvalid;
    case SSD_ERROR_COMPILE:
      return kExitCompile;
    case SSD_ERROR_CACHE_MISS:
      return kExitCacheMiss;
    case SSD_ERROR_CACHE:
      return kExitCache;
    case SSD_ERROR_NO_DRIVER:
    case SSD_ERROR_NO_DEVICE:
    case SSD_ERROR_CUDA:
      return kExitNoDevice;
    case SSD_ERROR_OUT_OF_MEMORY:
    case SSD_ERROR_WORKSPACE_TOO_SMALL:
    case SSD_ERROR_INTERNAL:
      return kExitInternal;
  }
  return kExitInternal;
}

const char* status_name(ssd_status status) {
  const char* name = ssd_status_string(status);  // the C API's name: "SSD_ERROR_INVALID_CONFIG"
  return name ? name : "SSD_ERROR_UNKNOWN_STATUS";
}

namespace {

// Messages echo user input (arguments, file names, file contents): control bytes and invalid UTF-8
// are written as \xNN, so they cannot drive the terminal or cut the line short.
void write_stderr(const std::string& raw) {
  const std::string line = ssd::printable(raw, /*keep_line_breaks=*/true);
  std::fflush(stdout);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

void print_error_json(const std::string& status, const std::string& detail, int code) {
  print_json({{"error", {{"status", status}, {"detail", ssd::printable(detail, true)}, {"exit_code", code}}}});
}

}  // namespace

int fail_stderr(ssd_status code, const std::string& detail) {
  if (code == SSD_OK) code = SSD_ERROR_INTERNAL;  // a failure without a code is our bug
  write_stderr(fmt::format("ssdgen: error: {}: {}\n", status_name(code), detail));
  return exit_code_for(code);
}

int fail(const Context& ctx, ssd_status code, const std::string& detail) {
  if (code == SSD_OK) code = SSD_ERROR_INTERNAL;
  const int exit_code = fail_stderr(code, detail);
  if (ctx.json) print_error_json(status_name(code), detail, exit_code);
  return exit_code;
}

int fail(const Context& ctx, const ssd::Status& status) { return fail(ctx, status.code, status.detail); }

int usage_error(const Context& ctx, const std::string& detail) {
  std::string hint = ctx.command.empty() ? "see 'ssdgen --help'"
                                         : fmt::format("see 'ssdgen help {}'", ctx.command);
  write_stderr(fmt::format("ssdgen: error: usage: {} ({})\n", detail, hint));
  if (ctx.json) print_error_json("USAGE", detail, kExitUsage);
  return kExitUsage;
}

void note(const std::string& text) { write_stderr(fmt::format("ssdgen: note: {}\n", text)); }

std::unique_ptr<ssd::cache::DiskCache> open_disk_cache(const ssd::cache::Options& options) {
  std::vector<std::pair<ssd::LogLevel, std::string>> held;
  ssd::set_log_sink([&held](ssd::LogLevel level, std::string_view message) { held.emplace_back(level, message); });
  std::unique_ptr<ssd::cache::DiskCache> cache;
  try {
    cache = std::make_unique<ssd::cache::DiskCache>(options);
  } catch (...) {
    ssd::set_log_sink(nullptr);
    throw;
  }
  ssd::set_log_sink(nullptr);
  for (const auto& [level, message] : held)
    if (cache->disk_enabled() || message.find(cache->disabled_reason()) == std::string::npos)
      ssd::log_message(level, message);
  return cache;
}

void print_json(const nlohmann::json& j) {
  std::string text = j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  text += '\n';
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

// ---- ArgCursor ---------------------------------------------------------------------------

void ArgCursor::skip_double_dash() {
  if (!options_done_ && i_ < args_.size() && args_[i_] == "--") {
    options_done_ = true;
    ++i_;
  }
}

bool ArgCursor::at_option() const {
  if (options_done_ || i_ >= args_.size()) return false;
  const std::string& a = args_[i_];
  return a.size() > 1 && a[0] == '-';
}

bool ArgCursor::flag(const char* name, const char* alias) {
  skip_double_dash();
  if (!at_option()) return false;
  const std::string& a = args_[i_];
  if (a == name || (alias && a == alias)) {
    ++i_;
    return true;
  }
  return false;
}

std::optional<std::string> ArgCursor::value(const char* name, const char* alias) {
  skip_double_dash();
  if (!at_option()) return std::nullopt;
  const std::string a = args_[i_];
  for (const char* n : {name, alias}) {
    if (!n) continue;
    const std::string opt = n;
    if (a == opt) {
      if (i_ + 1 >= args_.size()) {
        error_ = fmt::format("option '{}' needs a value", opt);
        return std::nullopt;
      }
      i_ += 2;
      return args_[i_ - 1];
    }
    // --name=value for long options; -jN for single-letter short options.
    const bool is_long = opt.size() > 2 && opt[1] == '-';
    if (is_long && a.size() > opt.size() && a.compare(0, opt.size(), opt) == 0 && a[opt.size()] == '=') {
      ++i_;
      return a.substr(opt.size() + 1);
    }
    if (!is_long && opt.size() == 2 && a.size() > 2 && a.compare(0, 2, opt) == 0) {
      ++i_;
      return a.substr(2);
    }
  }
  return std::nullopt;
}

bool json_nested_deeper_than(const nlohmann::json& root, int limit) {
  std::vector<std::pair<const nlohmann::json*, int>> stack{{&root, 1}};
  while (!stack.empty()) {
    auto [node, depth] = stack.back();
    stack.pop_back();
    if (depth > limit) return true;
    if (node->is_structured())
      for (const auto& child : *node) stack.emplace_back(&child, depth + 1);
  }
  return false;
}

// ---- small parsers -----------------------------------------------------------------------

ssd::Result<std::string> read_text_file(const std::string& path, uint64_t max_bytes) {
  std::FILE* f = nullptr;
  bool is_stdin = path == "-";
  if (is_stdin) {
    f = stdin;
  } else {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0)
      return ssd::make_error(SSD_ERROR_INVALID_ARGUMENT,
                             fmt::format("cannot read '{}': {}", path, std::strerror(errno)));
    if (S_ISDIR(st.st_mode))
      return ssd::make_error(SSD_ERROR_INVALID_ARGUMENT, fmt::format("cannot read '{}': is a directory", path));
    if (S_ISREG(st.st_mode) && uint64_t(st.st_size) > max_bytes)
      return ssd::make_error(SSD_ERROR_INVALID_ARGUMENT,
                             fmt::format("cannot read '{}': larger than {}", path, format_bytes(max_bytes)));
    f = std::fopen(path.c_str(), "rb");
    if (!f)
      return ssd::make_error(SSD_ERROR_INVALID_ARGUMENT,
                             fmt::format("cannot read '{}': {}", path, std::strerror(errno)));
  }
  std::string text;
  char buf[65536];
  bool too_big = false;
  for (;;) {
    size_t n = std::fread(buf, 1, sizeof buf, f);
    if (n == 0) break;
    text.append(buf, n);
    if (text.size() > max_bytes) {
      too_big = true;
      break;
    }
  }
  const bool read_error = std::ferror(f) != 0;
  if (!is_stdin) std::fclose(f);
  const std::string shown = is_stdin ? std::string("<stdin>") : path;
  if (too_big)
    return ssd::make_error(SSD_ERROR_INVALID_ARGUMENT,
                           fmt::format("cannot read '{}': larger than {}", shown, format_bytes(max_bytes)));
  if (read_error)
    return ssd::make_error(SSD_ERROR_INVALID_ARGUMENT, fmt::format("cannot read '{}': read error", shown));
  return text;
}

ssd::Result<uint64_t> parse_byte_size(const std::string& text, const char* what) {
  auto bad = [&] {
    return ssd::make_error(SSD_ERROR_INVALID_ARGUMENT,
                           fmt::format("{}: '{}' is not a size (use N, NK, NM, NG or NT)", what, text));
  };
  size_t i = 0;
  uint64_t value = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
    const uint64_t digit = uint64_t(text[i] - '0');
    if (value > (std::numeric_limits<uint64_t>::max() - digit) / 10) return bad();
    value = value * 10 + digit;
    ++i;
  }
  if (i == 0) return bad();
  std::string suffix = text.substr(i);
  for (char& c : suffix) c = char(std::toupper(static_cast<unsigned char>(c)));
  int shift = -1;
  const char* units[] = {"", "K", "M", "G", "T"};
  for (int u = 0; u < 5; ++u) {
    const std::string unit = units[u];
    if (suffix == unit || suffix == unit + "B" || (u > 0 && suffix == unit + "IB")) shift = 10 * u;
  }
  if (shift < 0) return bad();
  if (shift && value > (std::numeric_limits<uint64_t>::max() >> shift)) return bad();
  return value << shift;
}

ssd::Result<int> parse_positive_int(const std::string& text, const char* what, int max_value) {
  long long v = 0;
  bool ok = !text.empty() && text.size() <= 10;
  for (char c : text) ok = ok && c >= '0' && c <= '9';
  if (ok) v = std::stoll(text);
  if (!ok || v < 1 || v > max_value)
    return ssd::make_error(SSD_ERROR_INVALID_ARGUMENT,
                           fmt::format("{}: '{}' is not an integer in 1..{}", what, text, max_value));
  return int(v);
}

std::string format_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", v, units[u]);
}

namespace {
// Edits (insert, delete, substitute, swap two neighbours) that turn `a` into `b`.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1])});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}
}  // namespace

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  // A typo is at most 2 edits away (1 for words of up to 3 letters); the first closest one wins.
  // Longer words are not compared at all: nothing here is near a 64-character argument.
  if (word.empty() || word.size() > 64) return "";
  const size_t limit = word.size() <= 3 ? 1 : 2;
  const std::string* best = nullptr;
  size_t best_distance = limit + 1;
  for (const std::string& c : candidates) {
    const size_t distance = edit_distance(word, c);
    if (distance < best_distance) {
      best = &c;
      best_distance = distance;
    }
  }
  return best ? fmt::format("; did you mean '{}'?", *best) : "";
}

}  // namespace ssdgen
