// The entry file format of the disk cache (entry_format.h, docs/cache.md "Entry file").
#include "cache/entry_format.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/sha256.h"

namespace ssd::cache {
namespace {

using nlohmann::json;

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
std::string parse_header(const uint8_t* data, size_t avail, uint64_t file_size, EntryHeader* out,
                         size_t* need = nullptr) {
  if (file_size < kEntryPrefixBytes) return fmt::format("truncated: {} bytes, shorter than the header", file_size);
  if (avail < kEntryPrefixBytes) {
    if (need) *need = kEntryPrefixBytes;
    return "";
  }
  if (std::memcmp(data, kEntryMagic, sizeof kEntryMagic) != 0) return "bad magic bytes (not an ssdgen kernel file)";
  uint32_t schema = get_u32le(data + 8);
  if (schema != kEntrySchemaVersion)
    return fmt::format("schema version {} where {} was expected", schema, kEntrySchemaVersion);
  uint32_t header_len = get_u32le(data + 12);
  if (header_len > kEntryMaxHeaderBytes || kEntryPrefixBytes + header_len > file_size)
    return fmt::format("header length {} does not fit the {}-byte file", header_len, file_size);
  if (avail < kEntryPrefixBytes + header_len) {
    if (need) *need = kEntryPrefixBytes + header_len;
    return "";
  }
  if (need) *need = 0;
  const uint8_t* hdr = data + kEntryPrefixBytes;
  if (ssd::sha256_hex(hdr, header_len) != hex_of(data + 16, 32)) return "header checksum mismatch";
  json j = json::parse(hdr, hdr + header_len, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return "header is not a JSON object";
  EntryHeader h;
  EntryInfo& i = h.info;
  if (!get_string(j, "key", &i.key) || !get_string(j, "key_record", &i.key_record) ||
      !get_string(j, "kernel", &i.kernel) || !get_string(j, "spec_json", &i.spec_json) ||
      !get_string(j, "symbol", &i.symbol) || !get_string(j, "arch", &i.arch) ||
      !get_string(j, "toolchain", &i.toolchain) || !get_int(j, "registers", &i.registers) ||
      !get_int(j, "shared_bytes", &i.shared_bytes) || !get_int(j, "created", &h.created) ||
      !get_int(j, "cubin_size", &h.cubin_size) || !get_string(j, "cubin_sha256", &h.cubin_sha256))
    return "header is missing a field or has one of the wrong type";
  h.cubin_offset = kEntryPrefixBytes + header_len;
  if (h.cubin_size != file_size - h.cubin_offset)
    return fmt::format("cubin size {} in the header, {} bytes in the file", h.cubin_size,
                       file_size - h.cubin_offset);
  *out = std::move(h);
  return "";
}

}  // namespace

std::vector<uint8_t> serialize_entry(const Entry& e, const std::string& cubin_sha, int64_t created) {
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
  std::vector<uint8_t> out(kEntryPrefixBytes);
  std::memcpy(out.data(), kEntryMagic, sizeof kEntryMagic);
  put_u32le(out.data() + 8, kEntrySchemaVersion);
  put_u32le(out.data() + 12, uint32_t(header.size()));
  Sha256 h;
  h.update(header);
  auto digest = h.digest();
  std::memcpy(out.data() + 16, digest.data(), 32);
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), e.cubin.begin(), e.cubin.end());
  return out;
}

std::string read_entry_header(const EntryReader& read_at, uint64_t file_size, EntryHeader* out) {
  // The prefix first: it says how long the header is.
  std::vector<uint8_t> head(size_t(std::min<uint64_t>(file_size, kEntryPrefixBytes)));
  size_t need = 0;
  std::string bad = read_at(head.data(), head.size(), 0);
  if (bad.empty()) bad = parse_header(head.data(), head.size(), file_size, out, &need);
  if (bad.empty() && need > head.size()) {
    head.resize(need);
    bad = read_at(head.data(), head.size(), 0);
    if (bad.empty()) bad = parse_header(head.data(), head.size(), file_size, out, &need);
  }
  return bad;
}

std::string verify_entry(const EntryReader& read_at, uint64_t file_size, const std::string& key,
                         const std::string* key_record, Entry* out) {
  if (file_size > kMaxEntryBytes) return fmt::format("implausibly large ({} bytes)", file_size);
  // Prefix and header first: the header's sizes are checked against the file size before the
  // cubin is read (a huge sparse file whose header disagrees is rejected without reading it).
  EntryHeader h;
  std::string bad = read_entry_header(read_at, file_size, &h);
  if (!bad.empty()) return bad;
  if (h.info.key != key) return fmt::format("header key {} does not match the file's key {}", h.info.key, key);
  if (key_record && h.info.key_record != *key_record)
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

}  // namespace ssd::cache
