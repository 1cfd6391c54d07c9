// The on-disk kernel cache itself: lookup and publish of entries, per-key compile locks, quarantine of
// bad entries, the LRU size bound and index.json. Layout, format and guarantees: docs/cache.md. The
// entry file format is entry_format.h, the file-system helpers fs.h, the options options.h.
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
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>
#include <system_error>
#include <thread>
#include <unordered_set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cache/fs.h"
#include "common/log.h"
#include "common/sha256.h"

namespace ssd::cache {
namespace {

using nlohmann::json;

constexpr const char* kVersionDir = "v1";
constexpr const char* kEntrySuffix = ".ssdk";
constexpr const char* kUsedSuffix = ".used";
// Temp files: a writer holds flock(LOCK_EX) on its temp file while it exists. One that is unlocked
// and unmodified for kTempGraceNs belongs to a dead writer (the grace covers the moment between
// creating and locking, and closing and publishing). Where flock is unavailable, age alone decides.
constexpr int64_t kTempGraceNs = 120ll * 1000000000ll;
constexpr int64_t kStaleTempNs = 3600ll * 1000000000ll;

bool is_hex_key(const std::string& key) {
  if (key.size() != 64) return false;
  for (char c : key)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
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

  // Opens the entry of `key` through its checked shard directory and verifies it (verify_entry in
  // entry_format.h). `want_record` null: no key_record echo check (verify_all).
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
    // Returns "" or the reason; a read error (not the file's fault) makes the load a miss.
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
    std::string bad = verify_entry(read_at, size, key, want_record, out);
    if (read_failed) {
      *missing = true;
      return "";
    }
    return bad;
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
  static std::string read_header(const std::string& path, EntryHeader* h) {
    int fd = open_retry(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return errno_text(errno);
    UniqueFd guard(fd);
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return "not a regular file";
    auto read_at = [&](void* data, size_t n, uint64_t offset) -> std::string {
      return pread_all(fd, data, n, off_t(offset)) != 0 ? "read failed" : "";
    };
    return read_entry_header(read_at, uint64_t(st.st_size), h);
  }

  std::vector<ListedEntry> list() const {
    std::vector<ListedEntry> out;
    for (const FileRec& r : scan()) {
      EntryHeader h;
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
      bytes = serialize_entry(e, sha, created);
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
