// The cache's entry file (`.ssdk`, docs/cache.md "Entry file"): a fixed 48-byte prefix (magic,
// schema version, header length, SHA-256 of the header), a compact JSON header, then the cubin. This
// file writes that format and reads it back with every check a load applies to the bytes of a file
// (size bound, magic, schema, header checksum, header fields and types, sizes against the file size
// before the cubin is read, key echo, cubin checksum); where the file lives and how it is opened is
// the cache's business (disk_cache.cpp, fs.h). Every byte of a file is covered by a check, so a
// truncation or any single flipped byte is reported with its own reason.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ssd::cache {

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

// ---- format constants ----
constexpr char kEntryMagic[8] = {'S', 'S', 'D', 'K', '\r', '\n', '\x1a', '\n'};
constexpr uint32_t kEntrySchemaVersion = 1;
constexpr size_t kEntryPrefixBytes = 48;             // magic 8 + schema 4 + header length 4 + sha256 32
constexpr uint32_t kEntryMaxHeaderBytes = 1u << 20;  // 1 MiB of JSON header is already absurd
constexpr uint64_t kMaxEntryBytes = 1ull << 31;      // 2 GiB: larger is not a cubin we wrote

// An entry's header as read from its file.
struct EntryHeader {
  EntryInfo info;
  int64_t created = 0;
  uint64_t cubin_size = 0;
  std::string cubin_sha256;
  size_t cubin_offset = 0;  // where the cubin starts in the file
};

// The bytes of the entry file for `e`, whose cubin has the SHA-256 `cubin_sha` (hex), created at
// `created` (unix seconds). Throws nlohmann::json::type_error when a string is not valid UTF-8.
std::vector<uint8_t> serialize_entry(const Entry& e, const std::string& cubin_sha, int64_t created);

// Reads `size` bytes at `offset` of the entry file into `data`. Returns "" or why it could not; the
// caller's reader decides whether that makes the entry bad or the load a miss (a read error).
using EntryReader = std::function<std::string(void* data, size_t size, uint64_t offset)>;

// Reads and checks the prefix and the header of an entry file of `file_size` bytes (the cubin is
// not read). Returns "" (*out filled) or the reason the entry is bad (or the reader's reason).
std::string read_entry_header(const EntryReader& read_at, uint64_t file_size, EntryHeader* out);

// Reads and verifies a whole entry file of `file_size` bytes that is looked up under `key`: size
// bound, prefix and header, the key echo (and the key record, unless `key_record` is null), then the
// cubin's SHA-256. `out` null: the cubin is checked but not kept (streamed through the hash).
// Returns "" (*out filled) or the reason the entry is bad (or the reader's reason).
std::string verify_entry(const EntryReader& read_at, uint64_t file_size, const std::string& key,
                         const std::string* key_record, Entry* out);

}  // namespace ssd::cache
