// On-disk kernel cache. Layout, format and guarantees: docs/cache.md.
//
// <root>/v1/entries/<key[0:2]>/<key>.ssdk   immutable entry (header + cubin), published by link()
// <root>/v1/entries/<key[0:2]>/<key>.used   last use, "<unix seconds>.<nanoseconds>\n" (temp+rename)
// <root>/locks/<key>.lock                   per-key compile lock (flock)
// <root>/tmp/                               private temp files (same file system as the entries)
// <root>/quarantine/                        entries that failed verification
// <root>/index.json                         advisory view, rebuilt from the entries
#include "cache/disk_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <limits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <cctype>
#include <mutex>
#include <set>
#include <system_error>
#include <thread>
#include <unordered_set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "common/sha256.h"

namespace ssd::cache {
namespace {

using nlohmann::json;

// ---- format constants (docs/cache.md, "Entry file") ----
constexpr char kMagic[8] = {'S', 'S', 'D', 'K', '\r', '\n', '\x1a', '\n'};
constexpr uint32_t kSchemaVersion = 1;
constexpr size_t kPrefixBytes = 48;                 // magic 8 + schema 4 + header length 4 + sha256 32
constexpr uint32_t kMaxHeaderBytes = 1u << 20;      // 1 MiB of JSON header is already absurd
constexpr uint64_t kMaxEntryBytes = 1ull << 31;     // 2 GiB: larger is not a cubin we wrote
constexpr const char* kVersionDir = "v1";
constexpr const char* kEntrySuffix = ".ssdk";
constexpr const char* kUsedSuffix = ".used";
// Temp files: a writer holds flock(LOCK_EX) on its temp file while it exists. One that is unlocked
// and unmodified for kTempGraceNs belongs to a dead writer (the grace covers the moment between
// creating and locking, and closing and publishing). Where flock is unavailable, age alone decides.
constexpr int64_t kTempGraceNs = 120ll * 1000000000ll;
constexpr int64_t kStaleTempNs = 3600ll * 1000000000ll;

std::string errno_text(int e) { return std::error_code(e, std::generic_category()).message(); }

int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t(ts.tv_sec) * 1000000000ll + ts.tv_nsec;
}

int64_t now_unix() { return now_ns() / 1000000000ll; }

bool is_hex_key(const std::string& key) {
  if (key.size() != 64) return false;
  for (char c : key)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

std::string join(const std::string& a, const std::string& b) { return a + "/" + b; }

// Absolute, without trailing slashes (lstat("dir/") would follow a symlink).
std::string normalize_root(std::string p) {
  if (p.empty()) return p;
  if (p[0] != '/') {
    std::error_code ec;
    auto cwd = std::filesystem::current_path(ec);
    if (!ec) p = cwd.string() + "/" + p;
  }
  p = std::filesystem::path(p).lexically_normal().string();
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

class UniqueFd {
 public:
  explicit UniqueFd(int fd = -1) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const { return fd_; }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

int open_retry(const char* path, int flags, mode_t mode = 0) {
  int fd;
  do fd = ::open(path, flags, mode);
  while (fd < 0 && errno == EINTR);
  return fd;
}

// Returns 0 or an errno value.
int write_all(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EIO;
    p += n;
    size -= size_t(n);
  }
  return 0;
}

// Returns 0, an errno value, or -1 when the file ended early.
int pread_all(int fd, void* data, size_t size, off_t offset) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    ssize_t n = ::pread(fd, p, size, offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return -1;
    p += n;
    size -= size_t(n);
    offset += n;
  }
  return 0;
}

void fsync_dir(const std::string& dir) {
  int fd = open_retry(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);  // best effort: some file systems refuse fsync on directories
  ::close(fd);
}

uint32_t get_u32le(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

void put_u32le(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}

std::string hex_of(const uint8_t* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  s.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    s.push_back(digits[p[i] >> 4]);
    s.push_back(digits[p[i] & 15]);
  }
  return s;
}

// Why a directory with this lstat/fstat result is not acceptable in the cache ("" when it is).
std::string stat_dir_problem(const struct stat& st, bool group_shared) {
  if (S_ISLNK(st.st_mode)) return "is a symbolic link";
  if (!S_ISDIR(st.st_mode)) return "is not a directory";
  if (st.st_uid != ::geteuid())
    return fmt::format("is owned by uid {}, not by the current user (uid {})", unsigned(st.st_uid),
                       unsigned(::geteuid()));
  if (st.st_mode & S_IWOTH) return "is world-writable";
  if ((st.st_mode & S_IWGRP) && !group_shared)
    return "is group-writable (SSD_CACHE_SHARED=1 accepts a group-shared cache)";
  return "";
}

// Why `path` is not acceptable as a cache directory ("" when it is).
std::string dir_problem(const std::string& path, bool group_shared) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return fmt::format("cannot be examined ({})", errno_text(errno));
  return stat_dir_problem(st, group_shared);
}

// Opens the directory `path` for reading files relative to it, if it passes the checks store()
// applies when it creates one (not a symlink, ours, not writable by others). On failure returns -1
// and sets *problem to the reason, or leaves it empty when the directory does not exist or cannot
// be opened (a miss, not a reason to distrust it).
int open_checked_dir(const std::string& path, bool group_shared, std::string* problem) {
  problem->clear();
  int fd;
  do fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    const int e = errno;
    struct stat st {};
    if ((e == ELOOP || e == ENOTDIR) && ::lstat(path.c_str(), &st) == 0) *problem = stat_dir_problem(st, group_shared);
    return -1;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return -1;
  }
  *problem = stat_dir_problem(st, group_shared);
  if (!problem->empty()) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// mkdir + check. Returns "" or the reason the directory cannot be used.
std::string ensure_dir(const std::string& path, mode_t mode, bool group_shared) {
  if (::mkdir(path.c_str(), mode) == 0) {
    if (group_shared) (void)::chmod(path.c_str(), mode);  // the umask may have removed group bits
    return "";
  }
  if (errno != EEXIST) return fmt::format("cannot be created ({})", errno_text(errno));
  return dir_problem(path, group_shared);
}

// mkdir -p for the parents of `path` (mode 0700 for the ones we create). Errors surface later.
void make_parents(const std::string& path) {
  for (size_t pos = path.find('/', 1); pos != std::string::npos; pos = path.find('/', pos + 1)) {
    std::string prefix = path.substr(0, pos);
    if (::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) return;
  }
}

// ---- entry header ----

struct Header {
  EntryInfo info;
  int64_t created = 0;
  uint64_t cubin_size = 0;
  std::string cubin_sha256;
  size_t cubin_offset = 0;
};

bool get_string(const json& j, const char* name, std::string* out) {
  auto it = j.find(name);
  if (it == j.end() || !it->is_string()) return false;
  *out = it->get<std::string>();
  return true;
}

template <class Int>
bool get_int(const json& j, const char* name, Int* out) {
  auto it = j.find(name);
  if (it == j.end() || !it->is_number_integer()) return false;
  // Out of Int's range counts as the wrong type (get<Int>() would wrap it silently).
  const __int128 v = it->is_number_unsigned() ? __int128(it->template get<uint64_t>())
                                              : __int128(it->template get<int64_t>());
  if (v < __int128(std::numeric_limits<Int>::min()) || v > __int128(std::numeric_limits<Int>::max())) return false;
  *out = it->template get<Int>();
  return true;
}

// Checks the fixed prefix and the header. `data` holds at least `avail` bytes of the file, which is
// `file_size` long. Returns "" or the reason the entry is bad; on "" and a too-short `avail`, sets
// *need to the number of bytes required.
std::string parse_header(const uint8_t* data, size_t avail, uint64_t file_size, Header* out,
                         size_t* need = nullptr) {
  if (file_size < kPrefixBytes) return fmt::format("truncated: {} bytes, shorter than the header", file_size);
  if (avail < kPrefixBytes) {
    if (need) *need = kPrefixBytes;
    return "";
  }
  if (std::memcmp(data, kMagic, sizeof kMagic) != 0) return "bad magic bytes (not an ssdgen kernel file)";
  uint32_t schema = get_u32le(data + 8);
  if (schema != kSchemaVersion)
    return fmt::format("schema version {} where {} was expected", schema, kSchemaVersion);
  uint32_t header_len = get_u32le(data + 12);
  if (header_len > kMaxHeaderBytes || kPrefixBytes + header_len > file_size)
    return fmt::format("header length {} does not fit the {}-byte file", header_len, file_size);
  if (avail < kPrefixBytes + header_len) {
    if (need) *need = kPrefixBytes + header_len;
    return "";
  }
  if (need) *need = 0;
  const uint8_t* hdr = data + kPrefixBytes;
  if (ssd::sha256_hex(hdr, header_len) != hex_of(data + 16, 32)) return "header checksum mismatch";
  json j = json::parse(hdr, hdr + header_len, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return "header is not a JSON object";
  Header h;
  EntryInfo& i = h.info;
  if (!get_string(j, "key", &i.key) || !get_string(j, "key_record", &i.key_record) ||
      !get_string(j, "kernel", &i.kernel) || !get_string(j, "spec_json", &i.spec_json) ||
      !get_string(j, "symbol", &i.symbol) || !get_string(j, "arch", &i.arch) ||
      !get_string(j, "toolchain", &i.toolchain) || !get_int(j, "registers", &i.registers) ||
      !get_int(j, "shared_bytes", &i.shared_bytes) || !get_int(j, "created", &h.created) ||
      !get_int(j, "cubin_size", &h.cubin_size) || !get_string(j, "cubin_sha256", &h.cubin_sha256))
    return "header is missing a field or has one of the wrong type";
  h.cubin_offset = kPrefixBytes + header_len;
  if (h.cubin_size != file_size - h.cubin_offset)
    return fmt::format("cubin size {} in the header, {} bytes in the file", h.cubin_size,
                       file_size - h.cubin_offset);
  *out = std::move(h);
  return "";
}

std::vector<uint8_t> serialize(const Entry& e, const std::string& cubin_sha, int64_t created) {
  json j = {{"key", e.info.key},
            {"key_record", e.info.key_record},
            {"kernel", e.info.kernel},
            {"spec_json", e.info.spec_json},
            {"symbol", e.info.symbol},
            {"arch", e.info.arch},
            {"toolchain", e.info.toolchain},
            {"registers", e.info.registers},
            {"shared_bytes", e.info.shared_bytes},
            {"created", created},
            {"cubin_size", uint64_t(e.cubin.size())},
            {"cubin_sha256", cubin_sha}};
  std::string header = j.dump();  // throws json::type_error on invalid UTF-8
  std::vector<uint8_t> out(kPrefixBytes);
  std::memcpy(out.data(), kMagic, sizeof kMagic);
  put_u32le(out.data() + 8, kSchemaVersion);
  put_u32le(out.data() + 12, uint32_t(header.size()));
  Sha256 h;
  h.update(header);
  auto digest = h.digest();
  std::memcpy(out.data() + 16, digest.data(), 32);
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), e.cubin.begin(), e.cubin.end());
  return out;
}

// "<sec>.<nsec>" or "<sec>" -> ns; -1 when malformed.
int64_t parse_used(const std::string& text) {
  size_t i = 0;
  int64_t sec = 0, nsec = 0;
  if (i >= text.size() || !isdigit((unsigned char)text[i])) return -1;
  while (i < text.size() && isdigit((unsigned char)text[i])) {
    if (sec > (INT64_MAX / 1000000000ll) / 10) return -1;
    sec = sec * 10 + (text[i++] - '0');
  }
  if (i < text.size() && text[i] == '.') {
    ++i;
    int digits = 0;
    while (i < text.size() && isdigit((unsigned char)text[i])) {
      if (digits < 9) nsec = nsec * 10 + (text[i] - '0'), ++digits;
      ++i;
    }
    while (digits < 9) nsec *= 10, ++digits;
  }
  while (i < text.size() && (text[i] == '\n' || text[i] == ' ')) ++i;
  if (i != text.size()) return -1;
  return sec * 1000000000ll + nsec;
}

bool read_small_file(const std::string& path, std::string* out) {
  int fd = open_retry(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  UniqueFd guard(fd);
  char buf[128];
  ssize_t n;
  do n = ::read(fd, buf, sizeof buf);
  while (n < 0 && errno == EINTR);
  if (n < 0) return false;
  out->assign(buf, size_t(n));
  return true;
}

// Last-use marks already written by this process (path of the sidecar): at most one write per key.
std::mutex g_used_mutex;
std::unordered_set<std::string> g_used_written;

struct FileRec {
  std::string key;
  std::string path;
  uint64_t bytes = 0;
  int64_t last_used_ns = 0;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// modes and options

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
    auto mode = parse_mode(m);
    if (!mode.ok()) return mode.status();
    o.mode = mode.value();
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

// ---------------------------------------------------------------------------------------------

struct DiskCache::Impl {
  Options opt;
  bool enabled = false;
  std::string reason;

  std::string entries_dir, tmp_dir, locks_dir, quarantine_dir, index_path;
  mode_t dir_mode = 0700;
  mode_t file_mode = 0600;

  mutable std::mutex mu;  // guards the warning state below
  bool warned_persist = false;
  bool warned_lock = false;
  std::set<std::string> warned_bad;  // keys of bad entries already reported (not moved away)
  std::atomic<uint64_t> counter{0};

  bool writable() const { return enabled && opt.mode == Mode::ReadWrite; }
  std::string shard_dir(const std::string& key) const { return join(entries_dir, key.substr(0, 2)); }
  std::string entry_path(const std::string& key) const { return join(shard_dir(key), key + kEntrySuffix); }
  std::string used_path(const std::string& key) const { return join(shard_dir(key), key + kUsedSuffix); }

  std::string unique_suffix() {
    return fmt::format("{}.{}.{}", ::getpid(), counter.fetch_add(1), now_ns() % 1000000007ll);
  }

  void disable(std::string why, bool warn) {
    enabled = false;
    reason = std::move(why);
    std::string msg = fmt::format("kernel cache disabled: {}; compiled kernels are kept in memory only",
                                  reason);
    if (warn) log_warning(msg);
    else log_message(LogLevel::Info, msg);
  }

  void warn_persist_once(const std::string& detail) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (warned_persist) return;
      warned_persist = true;
    }
    log_warning(fmt::format("could not write to the kernel cache at {}: {}; compiled kernels are kept in "
                            "memory only (further cache write failures are not reported)",
                            opt.root, detail));
  }

  void init() {
    opt.root = normalize_root(opt.root);
    if (opt.mode == Mode::Off) {
      reason = "SSD_CACHE_MODE=off";
      return;
    }
    if (opt.root.empty()) {
      disable("no cache directory (set SSD_CACHE_DIR, XDG_CACHE_HOME or HOME)", true);
      return;
    }
    if (opt.group_shared) {
      dir_mode = 0770;
      file_mode = 0640;
    }
    const std::string vdir = join(opt.root, kVersionDir);
    entries_dir = join(vdir, "entries");
    tmp_dir = join(opt.root, "tmp");
    locks_dir = join(opt.root, "locks");
    quarantine_dir = join(opt.root, "quarantine");
    index_path = join(opt.root, "index.json");

    if (opt.mode == Mode::ReadWrite) {
      make_parents(opt.root);
      std::string p = ensure_dir(opt.root, dir_mode, opt.group_shared);
      if (!p.empty()) return disable(fmt::format("{} {}", opt.root, p), true);
      for (const std::string& d : {vdir, entries_dir}) {
        p = ensure_dir(d, dir_mode, opt.group_shared);
        if (!p.empty()) return disable(fmt::format("{} {}", d, p), true);
      }
      enabled = true;
      return;
    }
    // readonly / require-cached: create nothing.
    struct stat st {};
    if (::lstat(opt.root.c_str(), &st) != 0 && errno == ENOENT)
      return disable(fmt::format("{} does not exist", opt.root), false);
    for (const std::string& d : {opt.root, vdir, entries_dir}) {
      if (d != opt.root && ::lstat(d.c_str(), &st) != 0 && errno == ENOENT) break;  // empty cache
      std::string p = dir_problem(d, opt.group_shared);
      if (!p.empty()) return disable(fmt::format("{} {}", d, p), true);
    }
    enabled = true;
  }

  // ---- small files ----

  // Private temp file in tmp/ (O_EXCL). Returns fd, or -1 with *why set; *path receives its name.
  int create_temp(const std::string& stem, std::string* path, std::string* why) {
    std::string p = ensure_dir(tmp_dir, dir_mode, opt.group_shared);
    if (!p.empty()) {
      *why = fmt::format("{} {}", tmp_dir, p);
      return -1;
    }
    for (int attempt = 0; attempt < 16; ++attempt) {
      *path = join(tmp_dir, fmt::format("{}.{}.tmp", stem, unique_suffix()));
      int fd = open_retry(path->c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, file_mode);
      if (fd >= 0) {
        if (opt.group_shared) (void)::fchmod(fd, file_mode);
        // Held until the fd is closed: tells remove_dead_temps() this writer is alive.
        (void)::flock(fd, LOCK_EX | LOCK_NB);
        return fd;
      }
      if (errno != EEXIST) break;
    }
    *why = fmt::format("cannot create a temp file in {} ({})", tmp_dir, errno_text(errno));
    return -1;
  }

  // temp + rename over `dest`. Returns "" or the reason.
  std::string replace_file(const std::string& dest, const std::string& content, bool sync) {
    std::string tmp, why;
    int fd = create_temp("w", &tmp, &why);
    if (fd < 0) return why;
    UniqueFd guard(fd);
    int err = write_all(fd, content.data(), content.size());
    if (!err && sync && ::fsync(fd) != 0) err = errno;
    if (!err && ::close(guard.release()) != 0) err = errno;
    if (!err && ::rename(tmp.c_str(), dest.c_str()) != 0) err = errno;
    if (err) {
      ::unlink(tmp.c_str());
      return fmt::format("cannot write {} ({})", dest, errno_text(err));
    }
    return "";
  }

  void record_use(const std::string& key, bool force) {
    if (!enabled || opt.mode == Mode::ReadOnly || opt.mode == Mode::Off) return;
    std::string path = used_path(key);
    if (!force) {
      std::lock_guard<std::mutex> lock(g_used_mutex);
      if (!g_used_written.insert(path).second) return;
    }
    int64_t ns = now_ns();
    std::string err =
        replace_file(path, fmt::format("{}.{:09d}\n", ns / 1000000000ll, ns % 1000000000ll), false);
    if (!err.empty()) log_message(LogLevel::Info, "kernel cache: last-use mark not written: " + err);
  }

  // ---- entries ----

  // Reads and verifies the entry of `key`. `want_record` null: no key_record echo check (verify_all).
  // `out` null: the cubin is checked but not kept (streamed through the hash).
  // Returns "" (ok, *out filled), "miss" semantics via *missing, or the reason it is bad. When the
  // shard directory itself is refused (symlink, foreign owner, writable by others: what store()
  // refuses), *missing is set and *bad_dir says why; nothing in it is read.
  std::string read_entry(const std::string& key, const std::string* want_record, Entry* out, bool* missing,
                         dev_t* dev, ino_t* ino, std::string* bad_dir) {
    *missing = false;
    bad_dir->clear();
    const std::string path = entry_path(key);
    const std::string name = key + kEntrySuffix;
    // The entry is opened relative to the checked shard directory, so the directory that was
    // checked is the one read from.
    UniqueFd dir(open_checked_dir(shard_dir(key), opt.group_shared, bad_dir));
    if (dir.get() < 0) {
      *missing = true;
      return "";
    }
    int fd;
    do fd = ::openat(dir.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    while (fd < 0 && errno == EINTR);
    if (fd < 0) {
      int e = errno;
      if (e == ENOENT || e == ENOTDIR) {
        *missing = true;
        return "";
      }
      if (e == ELOOP) {
        struct stat st {};
        if (::fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) *dev = st.st_dev, *ino = st.st_ino;
        return "is a symbolic link";
      }
      *missing = true;  // unreadable (EACCES, EIO...): a miss, not a reason to move it
      log_message(LogLevel::Info, fmt::format("kernel cache: cannot open {} ({})", path, errno_text(e)));
      return "";
    }
    UniqueFd guard(fd);
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      *missing = true;
      return "";
    }
    *dev = st.st_dev;
    *ino = st.st_ino;
    if (!S_ISREG(st.st_mode)) return "is not a regular file";
    const uint64_t size = uint64_t(st.st_size);
    if (size > kMaxEntryBytes) return fmt::format("implausibly large ({} bytes)", size);
    // Returns "" or the reason; a read error is a miss.
    bool read_failed = false;
    auto read_at = [&](void* data, size_t n, uint64_t offset) -> std::string {
      int r = pread_all(fd, data, n, off_t(offset));
      if (r == -1) return "truncated while reading";
      if (r != 0) {
        read_failed = true;
        log_message(LogLevel::Info, fmt::format("kernel cache: cannot read {} ({})", path, errno_text(r)));
        return "read error";
      }
      return "";
    };
    // Prefix and header first: the header's sizes are checked against the file size before the
    // cubin is read (a huge sparse file whose header disagrees is rejected without reading it).
    std::vector<uint8_t> head(size_t(std::min<uint64_t>(size, kPrefixBytes)));
    Header h;
    size_t need = 0;
    std::string bad = read_at(head.data(), head.size(), 0);
    if (bad.empty()) bad = parse_header(head.data(), head.size(), size, &h, &need);
    if (bad.empty() && need > head.size()) {
      head.resize(need);
      bad = read_at(head.data(), head.size(), 0);
      if (bad.empty()) bad = parse_header(head.data(), head.size(), size, &h, &need);
    }
    if (read_failed) {
      *missing = true;
      return "";
    }
    if (!bad.empty()) return bad;
    if (h.info.key != key) return fmt::format("header key {} does not match the file's key {}", h.info.key, key);
    if (want_record && h.info.key_record != *want_record)
      return "header key record does not match the requested key record";
    Sha256 hash;
    std::vector<uint8_t> cubin;
    if (out) {
      cubin.resize(size_t(h.cubin_size));
      bad = read_at(cubin.data(), cubin.size(), h.cubin_offset);
      if (bad.empty()) hash.update(cubin.data(), cubin.size());
    } else {
      std::vector<uint8_t> chunk(size_t(std::min<uint64_t>(h.cubin_size, 1u << 20)));
      for (uint64_t done = 0; bad.empty() && done < h.cubin_size; done += chunk.size()) {
        const size_t n = size_t(std::min<uint64_t>(chunk.size(), h.cubin_size - done));
        bad = read_at(chunk.data(), n, h.cubin_offset + done);
        if (bad.empty()) hash.update(chunk.data(), n);
      }
    }
    if (read_failed) {
      *missing = true;
      return "";
    }
    if (!bad.empty()) return bad;
    std::string sha = hash.hex_digest();
    if (sha != h.cubin_sha256) return "cubin sha256 mismatch";
    if (out) {
      out->info = std::move(h.info);
      out->cubin = std::move(cubin);
      out->cubin_sha256 = std::move(sha);
      out->created_unix = h.created;
    }
    return "";
  }

  // Reports a refused shard directory once per directory (its entries are then misses). Storing
  // into it fails for the same reason, so that is not warned about again (one warning, not two).
  void warn_bad_dir_once(const std::string& dir, const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!warned_bad.insert(dir).second) return;
      warned_persist = true;
    }
    log_warning(fmt::format("kernel cache directory {} {}: its entries are not used (treated as misses); "
                            "'ssdgen cache verify' moves it to {}",
                            dir, why, quarantine_dir));
  }

  // Moves a bad entry aside. Returns true when it was moved (or someone else already did).
  bool quarantine(const std::string& key, const std::string& path, dev_t dev, ino_t ino, bool warn,
                  const std::string& why, std::string* moved_to) {
    auto report = [&](const std::string& msg) {
      if (!warn) return;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (!warned_bad.insert(key).second) return;
      }
      log_warning(msg);
    };
    if (opt.mode == Mode::ReadOnly) {
      report(fmt::format("kernel cache entry {} failed verification ({}); ignored, treated as a miss "
                         "(readonly mode: not moved to quarantine)",
                         path, why));
      return false;
    }
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || st.st_dev != dev || st.st_ino != ino) {
      // Already moved or replaced by another process: nothing of ours to move.
      report(fmt::format("kernel cache entry {} failed verification ({}); treated as a miss", path, why));
      return true;
    }
    std::string p = ensure_dir(quarantine_dir, dir_mode, opt.group_shared);
    std::string dest = join(quarantine_dir, fmt::format("{}.{}.{}{}", key, now_unix(), unique_suffix(), kEntrySuffix));
    int err = 0;
    if (!p.empty()) err = ENOTDIR;
    else if (::rename(path.c_str(), dest.c_str()) != 0) err = errno;
    if (err) {
      report(fmt::format("kernel cache entry {} failed verification ({}); it could not be moved to {} ({}); "
                         "treated as a miss",
                         path, why, quarantine_dir, p.empty() ? errno_text(err) : p));
      return false;
    }
    ::unlink(used_path(key).c_str());
    if (moved_to) *moved_to = dest;
    if (warn) {
      // A moved entry cannot be reported twice, so no dedup needed here.
      log_warning(fmt::format("kernel cache entry {} failed verification ({}); moved to {} and treated as "
                              "a miss",
                              path, why, dest));
    }
    return true;
  }

  std::optional<Entry> load(const std::string& key, const std::string& key_record) {
    if (!enabled || opt.mode == Mode::Off || !is_hex_key(key)) return std::nullopt;
    std::string path = entry_path(key);
    Entry e;
    bool missing = false;
    dev_t dev = 0;
    ino_t ino = 0;
    std::string bad_dir;
    std::string bad = read_entry(key, &key_record, &e, &missing, &dev, &ino, &bad_dir);
    if (!bad_dir.empty()) warn_bad_dir_once(shard_dir(key), bad_dir);
    if (missing) return std::nullopt;
    if (!bad.empty()) {
      quarantine(key, path, dev, ino, true, bad, nullptr);
      return std::nullopt;
    }
    record_use(key, false);
    return e;
  }

  // The shard directories under entries/ ("00".."ff" that exist), sorted.
  std::vector<std::string> shard_names() const {
    std::vector<std::string> shards;
    DIR* top = ::opendir(entries_dir.c_str());
    if (!top) return shards;
    while (dirent* d = ::readdir(top)) {
      std::string n = d->d_name;
      if (n.size() == 2 && is_hex_key(n + std::string(62, '0'))) shards.push_back(n);
    }
    ::closedir(top);
    std::sort(shards.begin(), shards.end());
    return shards;
  }

  // Names in a directory opened with open_checked_dir (takes ownership of `fd`).
  static std::vector<std::string> names_in(int fd) {
    std::vector<std::string> names;
    DIR* dir = ::fdopendir(fd);
    if (!dir) {
      ::close(fd);
      return names;
    }
    while (dirent* d = ::readdir(dir)) names.push_back(d->d_name);
    ::closedir(dir);
    return names;
  }

  // Every <key>.ssdk under entries/, with sizes and last-use times (no header reads). Shard
  // directories that store() would refuse are skipped (their entries are never loaded); they are
  // listed in *refused as (path, reason) when asked.
  std::vector<FileRec> scan(std::vector<std::pair<std::string, std::string>>* refused = nullptr) const {
    std::vector<FileRec> out;
    if (!enabled) return out;
    for (const std::string& shard : shard_names()) {
      std::string sdir = join(entries_dir, shard), problem;
      int fd = open_checked_dir(sdir, opt.group_shared, &problem);
      if (fd < 0) {
        if (!problem.empty() && refused) refused->emplace_back(sdir, problem);
        continue;
      }
      const int dfd = ::dup(fd);  // names_in() consumes fd; stat through the same directory
      UniqueFd dguard(dfd);
      for (const std::string& n : names_in(fd)) {
        const size_t sl = std::strlen(kEntrySuffix);
        if (n.size() != 64 + sl || n.compare(64, sl, kEntrySuffix) != 0) continue;
        std::string key = n.substr(0, 64);
        if (!is_hex_key(key) || key.compare(0, 2, shard) != 0) continue;
        FileRec r;
        r.key = key;
        r.path = join(sdir, n);
        struct stat st {};
        if (dfd < 0 || ::fstatat(dfd, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
        r.bytes = uint64_t(st.st_size);
        r.last_used_ns = int64_t(st.st_mtim.tv_sec) * 1000000000ll + st.st_mtim.tv_nsec;
        std::string text;
        if (read_small_file(join(sdir, key + kUsedSuffix), &text)) {
          int64_t used = parse_used(text);
          if (used > r.last_used_ns) r.last_used_ns = used;
        }
        out.push_back(std::move(r));
      }
    }
    return out;
  }

  // Header of one entry (no cubin read/check). Returns "" or the reason.
  static std::string read_header(const std::string& path, Header* h) {
    int fd = open_retry(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return errno_text(errno);
    UniqueFd guard(fd);
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return "not a regular file";
    uint64_t size = uint64_t(st.st_size);
    std::vector<uint8_t> buf(std::min<uint64_t>(size, kPrefixBytes));
    if (pread_all(fd, buf.data(), buf.size(), 0) != 0) return "read failed";
    size_t need = 0;
    std::string bad = parse_header(buf.data(), buf.size(), size, h, &need);
    if (!bad.empty() || need == 0) return bad;
    buf.resize(need);
    if (pread_all(fd, buf.data(), buf.size(), 0) != 0) return "read failed";
    return parse_header(buf.data(), buf.size(), size, h, &need);
  }

  std::vector<ListedEntry> list() const {
    std::vector<ListedEntry> out;
    for (const FileRec& r : scan()) {
      Header h;
      if (!read_header(r.path, &h).empty() || h.info.key != r.key) continue;  // verify_all reports these
      ListedEntry le;
      le.key = r.key;
      le.kernel = h.info.kernel;
      le.spec_json = h.info.spec_json;
      le.arch = h.info.arch;
      le.file_bytes = r.bytes;
      le.cubin_sha256 = h.cubin_sha256;
      le.created_unix = h.created;
      le.last_used_unix = std::max<int64_t>(r.last_used_ns / 1000000000ll, h.created);
      out.push_back(std::move(le));
    }
    std::sort(out.begin(), out.end(), [](const ListedEntry& a, const ListedEntry& b) { return a.key < b.key; });
    return out;
  }

  std::string write_index() {
    json idx = json::object();
    for (const ListedEntry& e : list()) {
      json spec = json::parse(e.spec_json, nullptr, false);
      if (spec.is_discarded()) spec = e.spec_json;
      idx[e.key] = {{"kernel", e.kernel},
                    {"spec", spec},
                    {"arch", e.arch},
                    {"file_bytes", e.file_bytes},
                    {"cubin_sha256", e.cubin_sha256},
                    {"created", e.created_unix},
                    {"last_used", e.last_used_unix}};
    }
    std::string text;
    try {
      text = idx.dump(1, ' ', false, json::error_handler_t::replace) + "\n";
    } catch (const std::exception& ex) {
      return ex.what();
    }
    return replace_file(index_path, text, true);
  }

  // Removes least-recently-used entries (never `keep`) until the total is <= max_bytes. The total
  // includes `other_bytes` (temp files of live writers), which are counted but not removed here.
  PruneReport prune_files(std::vector<FileRec> files, uint64_t max_bytes, const std::string& keep,
                          uint64_t other_bytes) {
    PruneReport rep;
    rep.bytes_before = other_bytes;
    for (const FileRec& f : files) rep.bytes_before += f.bytes;
    uint64_t total = rep.bytes_before;
    std::sort(files.begin(), files.end(), [](const FileRec& a, const FileRec& b) {
      return a.last_used_ns != b.last_used_ns ? a.last_used_ns < b.last_used_ns : a.key < b.key;
    });
    for (const FileRec& f : files) {
      if (total <= max_bytes) break;
      if (f.key == keep) continue;
      if (::unlink(f.path.c_str()) == 0 || errno == ENOENT) {
        ::unlink(used_path(f.key).c_str());
        total -= f.bytes;
        ++rep.removed;
      }
    }
    rep.bytes_after = total;
    return rep;
  }

  // Removes the temp files of dead writers: unlocked (a writer holds flock on its temp file) and
  // unmodified for kTempGraceNs, or, where flock does not work, older than kStaleTempNs. Returns the
  // bytes of the temp files that remain (live writers), which count towards the size bound.
  uint64_t remove_dead_temps() {
    uint64_t live_bytes = 0;
    std::string problem;
    int fd = open_checked_dir(tmp_dir, opt.group_shared, &problem);
    if (fd < 0) return 0;
    const int dfd = ::dup(fd);
    UniqueFd dguard(dfd);
    if (dfd < 0) {
      ::close(fd);
      return 0;
    }
    const int64_t now = now_ns();
    for (const std::string& n : names_in(fd)) {
      if (n == "." || n == "..") continue;
      struct stat st {};
      if (::fstatat(dfd, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || S_ISDIR(st.st_mode)) continue;
      const int64_t age = now - (int64_t(st.st_mtim.tv_sec) * 1000000000ll + st.st_mtim.tv_nsec);
      bool dead = false;
      if (age > kTempGraceNs) {
        if (!S_ISREG(st.st_mode)) {
          dead = true;  // nothing of ours
        } else {
          int tfd = ::openat(dfd, n.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
          if (tfd >= 0) {
            if (::flock(tfd, LOCK_EX | LOCK_NB) == 0) dead = true;
            else if (errno != EWOULDBLOCK) dead = age > kStaleTempNs;  // no flock here: age decides
            ::close(tfd);
          }
        }
      }
      if (dead && (::unlinkat(dfd, n.c_str(), 0) == 0 || errno == ENOENT)) continue;
      live_bytes += uint64_t(st.st_size);
    }
    return live_bytes;
  }

  // .used marks whose entry is gone (in the shard directories store() would write to).
  void remove_orphan_marks() {
    for (const std::string& shard : shard_names()) {
      std::string problem;
      int fd = open_checked_dir(join(entries_dir, shard), opt.group_shared, &problem);
      if (fd < 0) continue;
      const int dfd = ::dup(fd);
      UniqueFd dguard(dfd);
      const std::vector<std::string> names = names_in(fd);
      if (dfd < 0) continue;
      const size_t sl = std::strlen(kUsedSuffix);
      for (const std::string& n : names) {
        if (n.size() != 64 + sl || n.compare(64, sl, kUsedSuffix) != 0) continue;
        struct stat st {};
        const std::string entry = n.substr(0, 64) + kEntrySuffix;
        if (::fstatat(dfd, entry.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT)
          ::unlinkat(dfd, n.c_str(), 0);
      }
    }
  }

  Status store(const Entry& e) {
    if (opt.mode == Mode::Off) return make_error(SSD_ERROR_CACHE, "kernel cache is off (SSD_CACHE_MODE=off)");
    if (!enabled) return make_error(SSD_ERROR_CACHE, "kernel cache disabled: " + reason);
    if (opt.mode != Mode::ReadWrite)
      return make_error(SSD_ERROR_CACHE,
                        fmt::format("kernel cache is not writable in SSD_CACHE_MODE={}", mode_name(opt.mode)));
    const std::string& key = e.info.key;
    if (!is_hex_key(key))
      return make_error(SSD_ERROR_INVALID_ARGUMENT,
                        fmt::format("cache key '{}' is not 64 lowercase hex digits", key));
    std::string sha = ssd::sha256_hex(e.cubin.data(), e.cubin.size());
    if (!e.cubin_sha256.empty() && e.cubin_sha256 != sha)
      return make_error(SSD_ERROR_INVALID_ARGUMENT,
                        fmt::format("entry {}: cubin_sha256 {} does not match the cubin ({})", key,
                                    e.cubin_sha256, sha));
    int64_t created = e.created_unix > 0 ? e.created_unix : now_unix();
    std::vector<uint8_t> bytes;
    try {
      bytes = serialize(e, sha, created);
    } catch (const std::exception& ex) {
      return make_error(SSD_ERROR_INVALID_ARGUMENT,
                        fmt::format("entry {} cannot be serialized: {}", key, ex.what()));
    }

    // Directories (recreated if removed under us).
    for (const std::string& d : {join(opt.root, kVersionDir), entries_dir, shard_dir(key)}) {
      std::string p = ensure_dir(d, dir_mode, opt.group_shared);
      if (!p.empty()) return make_error(SSD_ERROR_CACHE, fmt::format("{} {}", d, p));
    }

    std::string tmp, why;
    int fd = create_temp(key.substr(0, 16), &tmp, &why);
    if (fd < 0) return make_error(SSD_ERROR_CACHE, why);
    UniqueFd guard(fd);
    int err = write_all(fd, bytes.data(), bytes.size());
    const char* step = "write";
    if (!err && ::fsync(fd) != 0) err = errno, step = "fsync";
    if (!err && ::close(guard.release()) != 0) err = errno, step = "close";
    if (err) {
      guard.reset();
      ::unlink(tmp.c_str());
      return make_error(SSD_ERROR_CACHE, fmt::format("{} of {} failed ({})", step, tmp, errno_text(err)));
    }
    const std::string dest = entry_path(key);
    bool existed = false;
    if (::link(tmp.c_str(), dest.c_str()) != 0) {
      err = errno;
      if (err == EEXIST) {
        existed = true;  // already published (by us or another process): never overwritten
        err = 0;
      } else if (err == EPERM || err == EOPNOTSUPP || err == ENOSYS || err == EMLINK) {
        // No hard links here: an atomic rename that also refuses to replace.
        if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dest.c_str(), RENAME_NOREPLACE) == 0) err = 0;
        else if (errno == EEXIST) existed = true, err = 0;
        else err = errno;
      }
    }
    ::unlink(tmp.c_str());
    if (err)
      return make_error(SSD_ERROR_CACHE, fmt::format("cannot publish {} ({})", dest, errno_text(err)));
    fsync_dir(shard_dir(key));
    if (existed) return Status::Ok();

    record_use(key, true);
    // Best effort from here: temp files of dead writers, size bound (live temp files count), index.
    const uint64_t temp_bytes = remove_dead_temps();
    std::vector<FileRec> files = scan();
    uint64_t total = temp_bytes;
    for (const FileRec& f : files) total += f.bytes;
    if (total > opt.max_bytes) prune_files(std::move(files), opt.max_bytes, key, temp_bytes);
    std::string ierr = write_index();
    if (!ierr.empty()) log_message(LogLevel::Info, "kernel cache: index.json not rewritten: " + ierr);
    return Status::Ok();
  }

  // Per-key flock with a bounded wait. Returns an fd holding the lock, or -1.
  int lock_key(const std::string& key) {
    std::string p = ensure_dir(locks_dir, dir_mode, opt.group_shared);
    if (!p.empty()) {
      log_message(LogLevel::Info, fmt::format("kernel cache: no compile lock: {} {}", locks_dir, p));
      return -1;
    }
    std::string path = join(locks_dir, key + ".lock");
    int fd = open_retry(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK,
                        opt.group_shared ? 0660 : 0600);
    if (fd < 0) {
      log_message(LogLevel::Info, fmt::format("kernel cache: no compile lock: {} ({})", path, errno_text(errno)));
      return -1;
    }
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = start + std::chrono::milliseconds(std::max(0, opt.lock_timeout_ms));
    auto nap = std::chrono::milliseconds(2);
    for (;;) {
      if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return fd;
      int e = errno;
      if (e == EINTR) continue;
      if (e != EWOULDBLOCK) {
        ::close(fd);
        log_message(LogLevel::Info, fmt::format("kernel cache: no compile lock: {} ({})", path, errno_text(e)));
        return -1;
      }
      auto now = std::chrono::steady_clock::now();
      if (now >= deadline) break;
      std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(nap, deadline - now));
      nap = std::min(nap * 2, std::chrono::milliseconds(50));
    }
    ::close(fd);
    bool warn = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      warn = !warned_lock;
      warned_lock = true;
    }
    std::string msg = fmt::format("waited {} ms for the compile lock {} (held by another process); compiling "
                                  "without it",
                                  opt.lock_timeout_ms, path);
    if (warn) log_warning(msg);
    else log_message(LogLevel::Info, msg);
    return -1;
  }
};

// ---------------------------------------------------------------------------------------------

DiskCache::DiskCache(Options options) : impl_(new Impl) {
  impl_->opt = std::move(options);
  impl_->init();
}

DiskCache::~DiskCache() { delete impl_; }

const Options& DiskCache::options() const { return impl_->opt; }
bool DiskCache::disk_enabled() const { return impl_->enabled; }
const std::string& DiskCache::disabled_reason() const { return impl_->reason; }

std::optional<Entry> DiskCache::load(const std::string& key, const std::string& key_record) {
  return impl_->load(key, key_record);
}

Status DiskCache::store(const Entry& entry) { return impl_->store(entry); }

Result<Entry> DiskCache::get_or_compile(const std::string& key, const std::string& key_record,
                                        const std::function<Result<Entry>()>& compile) {
  Impl& im = *impl_;
  const Mode mode = im.opt.mode;

  auto finish = [&](Result<Entry> r) -> Result<Entry> {
    if (!r.ok()) return r;
    Entry& e = r.value();
    e.info.key = key;  // the entry is, by construction, the one for this key
    e.info.key_record = key_record;
    if (e.cubin_sha256.empty()) e.cubin_sha256 = ssd::sha256_hex(e.cubin.data(), e.cubin.size());
    if (e.created_unix <= 0) e.created_unix = now_unix();
    return r;
  };
  auto require_cached_miss = [&]() {
    std::string why = im.enabled ? "" : fmt::format(" (cache disabled: {})", im.reason);
    return make_error(SSD_ERROR_CACHE_MISS,
                      fmt::format("SSD_CACHE_MODE=require-cached: the cache dir {} is missing this kernel "
                                  "(key {}){}",
                                  im.opt.root.empty() ? "(none)" : im.opt.root, key, why));
  };

  if (mode == Mode::Off) return finish(compile());
  if (auto hit = im.load(key, key_record)) return std::move(*hit);
  if (mode == Mode::RequireCached) return require_cached_miss();
  if (!im.writable()) return finish(compile());  // readonly, or disk disabled

  UniqueFd lock(is_hex_key(key) ? im.lock_key(key) : -1);
  if (lock.get() >= 0) {
    if (auto hit = im.load(key, key_record)) return std::move(*hit);  // compiled while we waited
  }
  Result<Entry> r = finish(compile());
  if (!r.ok()) return r;
  Status st = im.store(r.value());
  if (!st.ok()) im.warn_persist_once(st.detail);
  return r;  // `lock` is released after the entry is published
}

std::vector<ListedEntry> DiskCache::list() const { return impl_->list(); }

VerifyReport DiskCache::verify_all() {
  Impl& im = *impl_;
  VerifyReport rep;
  if (!im.enabled) {
    if (im.opt.mode != Mode::Off) rep.problems.push_back(fmt::format("cache disabled: {}", im.reason));
    return rep;
  }
  std::vector<std::pair<std::string, std::string>> refused;
  const std::vector<FileRec> files = im.scan(&refused);
  // Shard directories store() would refuse: their entries are never loaded. Moved aside so the
  // shard can be recreated (a symlink is moved, not followed).
  for (const auto& [dir, why] : refused) {
    std::string moved;
    if (im.writable() && ensure_dir(im.quarantine_dir, im.dir_mode, im.opt.group_shared).empty()) {
      const std::string dest = join(im.quarantine_dir, fmt::format("{}.{}.{}.dir", dir.substr(dir.size() - 2),
                                                                   now_unix(), im.unique_suffix()));
      if (::rename(dir.c_str(), dest.c_str()) == 0) moved = dest;
    }
    if (!moved.empty()) {
      ++rep.quarantined;
      rep.problems.push_back(fmt::format("{}: directory {}; its entries were not used (moved to {})", dir, why, moved));
    } else {
      rep.problems.push_back(fmt::format("{}: directory {}; its entries are not used", dir, why));
    }
  }
  for (const FileRec& f : files) {
    bool missing = false;
    dev_t dev = 0;
    ino_t ino = 0;
    std::string bad_dir;
    std::string bad = im.read_entry(f.key, nullptr, nullptr, &missing, &dev, &ino, &bad_dir);
    if (!bad_dir.empty()) {  // changed since the scan
      rep.problems.push_back(fmt::format("{}: directory {}; its entries are not used", im.shard_dir(f.key), bad_dir));
      continue;
    }
    if (missing && bad.empty()) {
      struct stat st {};
      if (::lstat(f.path.c_str(), &st) != 0) continue;  // removed meanwhile
      rep.problems.push_back(fmt::format("{}: cannot be read", f.path));
      continue;
    }
    if (bad.empty()) {
      ++rep.ok;
      continue;
    }
    std::string moved;
    if (im.quarantine(f.key, f.path, dev, ino, false, bad, &moved) && !moved.empty()) {
      ++rep.quarantined;
      rep.problems.push_back(fmt::format("{}: {} (moved to {})", f.path, bad, moved));
    } else {
      rep.problems.push_back(fmt::format("{}: {}", f.path, bad));
    }
  }
  if (im.writable()) {
    std::string ierr = im.write_index();
    if (!ierr.empty()) log_message(LogLevel::Info, "kernel cache: index.json not rewritten: " + ierr);
  }
  return rep;
}

PruneReport DiskCache::prune(uint64_t max_bytes) {
  Impl& im = *impl_;
  std::vector<FileRec> files = im.scan();
  if (!im.writable()) {  // report only
    PruneReport rep;
    for (const FileRec& f : files) rep.bytes_before += f.bytes;
    rep.bytes_after = rep.bytes_before;
    return rep;
  }
  const uint64_t temp_bytes = im.remove_dead_temps();
  PruneReport rep = im.prune_files(std::move(files), max_bytes, "", temp_bytes);
  im.remove_orphan_marks();
  std::string ierr = im.write_index();
  if (!ierr.empty()) log_message(LogLevel::Info, "kernel cache: index.json not rewritten: " + ierr);
  return rep;
}

Status DiskCache::clear() {
  Impl& im = *impl_;
  if (im.opt.mode == Mode::Off) return make_error(SSD_ERROR_CACHE, "kernel cache is off (SSD_CACHE_MODE=off)");
  if (!im.enabled) return make_error(SSD_ERROR_CACHE, "kernel cache disabled: " + im.reason);
  if (im.opt.mode != Mode::ReadWrite)
    return make_error(SSD_ERROR_CACHE,
                      fmt::format("cannot clear the kernel cache in SSD_CACHE_MODE={}", mode_name(im.opt.mode)));
  namespace fs = std::filesystem;
  std::vector<std::string> failures;
  auto remove = [&](const std::string& p) {
    std::error_code ec;
    fs::remove_all(p, ec);  // does not follow symlinks
    if (ec) failures.push_back(fmt::format("{} ({})", p, ec.message()));
  };
  if (DIR* dir = ::opendir(im.entries_dir.c_str())) {
    std::vector<std::string> names;
    while (dirent* d = ::readdir(dir)) names.push_back(d->d_name);
    ::closedir(dir);
    for (const std::string& n : names)
      if (n != "." && n != "..") remove(join(im.entries_dir, n));
  }
  remove(im.locks_dir);
  remove(im.quarantine_dir);
  remove(im.tmp_dir);
  if (::unlink(im.index_path.c_str()) != 0 && errno != ENOENT)
    failures.push_back(fmt::format("{} ({})", im.index_path, errno_text(errno)));
  {
    std::lock_guard<std::mutex> lock(g_used_mutex);
    for (auto it = g_used_written.begin(); it != g_used_written.end();)
      it = it->compare(0, im.entries_dir.size() + 1, im.entries_dir + "/") == 0 ? g_used_written.erase(it) : ++it;
  }
  if (!failures.empty()) {
    std::string all;
    for (const std::string& f : failures) all += (all.empty() ? "" : ", ") + f;
    return make_error(SSD_ERROR_CACHE, "could not remove: " + all);
  }
  return Status::Ok();
}

Status DiskCache::rebuild_index() {
  Impl& im = *impl_;
  if (im.opt.mode == Mode::Off) return make_error(SSD_ERROR_CACHE, "kernel cache is off (SSD_CACHE_MODE=off)");
  if (!im.enabled) return make_error(SSD_ERROR_CACHE, "kernel cache disabled: " + im.reason);
  if (im.opt.mode != Mode::ReadWrite)
    return make_error(SSD_ERROR_CACHE, fmt::format("cannot rewrite index.json in SSD_CACHE_MODE={}",
                                                   mode_name(im.opt.mode)));
  std::string err = im.write_index();
  if (!err.empty()) return make_error(SSD_ERROR_CACHE, err);
  return Status::Ok();
}

}  // namespace ssd::cache
