// The on-disk kernel cache (docs/cache.md): one immutable, self-verifying file per key, an advisory
// index.json view, per-key compile locks across processes, LRU size bound. Nothing here may fail a
// caller that only wants a kernel: every disk problem degrades to "miss" / "kept in memory" with at
// most one warning, except SSD_CACHE_MODE=require-cached, which turns a miss into an error.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

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

// What an entry's header records besides the cubin itself.
struct EntryInfo {
  std::string key;          // 64 lowercase hex chars, SHA-256 of key_record
  std::string key_record;   // canonical key record text (echoed and compared on load)
  std::string kernel;       // kernel family name, e.g. "chunk_cumsum_fwd"
  std::string spec_json;    // the specialization as compact JSON (for index.json and `cache ls`)
  std::string symbol;       // entry-point name in the cubin
  std::string arch;         // "sm_90a"
  std::string toolchain;    // "nvrtc 13.0"
  int32_t registers = -1;
  int32_t shared_bytes = -1;
};

struct Entry {
  EntryInfo info;
  std::vector<uint8_t> cubin;
  std::string cubin_sha256;  // hex; filled by the cache on load, by the producer on store
  int64_t created_unix = 0;
};

// One row of `cache ls` / index.json.
struct ListedEntry {
  std::string key;
  std::string kernel;
  std::string spec_json;
  std::string arch;
  uint64_t file_bytes = 0;
  std::string cubin_sha256;
  int64_t created_unix = 0;
  int64_t last_used_unix = 0;
};

struct VerifyReport {
  int ok = 0;
  int quarantined = 0;                 // bad entries moved aside
  std::vector<std::string> problems;   // one line per bad entry: "<file>: <reason>"
};

struct PruneReport {
  int removed = 0;
  uint64_t bytes_before = 0;
  uint64_t bytes_after = 0;
};

class DiskCache {
 public:
  explicit DiskCache(Options options);
  ~DiskCache();
  DiskCache(const DiskCache&) = delete;
  DiskCache& operator=(const DiskCache&) = delete;

  const Options& options() const;
  // False when the root was refused (foreign owner, symlink, group/world-writable without opt-in),
  // could not be created, or mode is Off: the cache then behaves as always-miss, never-store.
  bool disk_enabled() const;
  // Why the disk is disabled ("" when enabled).
  const std::string& disabled_reason() const;

  // Verified lookup. A miss returns nullopt. A corrupt or mismatching entry is moved to
  // <root>/quarantine/ with one warning and reported as a miss. Records the use for LRU.
  std::optional<Entry> load(const std::string& key, const std::string& key_record);

  // Atomic publish (temp file in the root, fsync, link into place; never overwrites an existing
  // entry). Errors are returned for diagnostics only; callers keep the kernel in memory.
  Status store(const Entry& entry);

  // The kernel path: load; on a miss take the per-key lock (bounded wait), load again, else call
  // `compile`, store, and return it. RequireCached: a miss is SSD_ERROR_CACHE_MISS, compile is not
  // called. ReadOnly: compile on a miss but do not store. Off: always compile.
  Result<Entry> get_or_compile(const std::string& key, const std::string& key_record,
                               const std::function<Result<Entry>()>& compile);

  // Maintenance (the `ssdgen cache` subcommands).
  std::vector<ListedEntry> list() const;
  VerifyReport verify_all();
  PruneReport prune(uint64_t max_bytes);
  Status clear();          // removes entries, locks, quarantine, index; keeps the root
  Status rebuild_index();  // rescans entries and rewrites index.json atomically

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace ssd::cache
