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

#include "cache/entry_format.h"
#include "cache/options.h"
#include "common/status.h"

namespace ssd::cache {

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
