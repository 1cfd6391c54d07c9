// Sample cache entries for the cache unit tests (test_cache.cpp through the disk, test_entry_format.cpp
// in memory): a well-formed entry for a key record, and the header length field of an entry file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cache/entry_format.h"
#include "common/sha256.h"

namespace cache_test {

inline std::string key_of(const std::string& record) { return ssd::sha256_hex(record); }

// `cubin_bytes` bytes of cubin whose content depends on `seed` (same record, other seed: same key,
// other bytes).
inline ssd::cache::Entry make_entry(const std::string& record, size_t cubin_bytes = 1000, uint8_t seed = 1) {
  ssd::cache::Entry e;
  e.info.key = key_of(record);
  e.info.key_record = record;
  e.info.kernel = "chunk_cumsum_fwd";
  e.info.spec_json = R"({"chunk":64,"dtype":"f16"})";
  e.info.symbol = "ssd_chunk_cumsum_fwd_kernel";
  e.info.arch = "sm_90a";
  e.info.toolchain = "nvrtc 13.0";
  e.info.registers = 40;
  e.info.shared_bytes = 4096;
  for (size_t i = 0; i < cubin_bytes; ++i) e.cubin.push_back(uint8_t(i * 31 + seed));
  return e;
}

// The header length N of an entry file (bytes 12..15, little-endian).
inline uint32_t header_len_of(const std::vector<uint8_t>& file) {
  return uint32_t(file[12]) | uint32_t(file[13]) << 8 | uint32_t(file[14]) << 16 | uint32_t(file[15]) << 24;
}

}  // namespace cache_test
