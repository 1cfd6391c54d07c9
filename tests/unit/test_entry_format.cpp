// The cache's entry file format on its own (src/cache/entry_format.h), in memory: what store()
// writes reads back field for field, and each way a file can be wrong is reported with its own
// reason. test_cache.cpp covers the same checks through the disk (quarantine, warnings).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache/entry_format.h"
#include "cache_test_entries.h"
#include "common/sha256.h"

using ssd::cache::Entry;
using ssd::cache::EntryHeader;
using ssd::cache::EntryReader;
using ssd::cache::kEntryPrefixBytes;
using ssd::cache::read_entry_header;
using ssd::cache::serialize_entry;
using ssd::cache::verify_entry;
using cache_test::header_len_of;

namespace {

Entry sample_entry(size_t cubin_bytes = 1000) { return cache_test::make_entry("record-format", cubin_bytes); }

std::string cubin_sha(const Entry& e) { return ssd::sha256_hex(e.cubin.data(), e.cubin.size()); }

std::vector<uint8_t> file_of(const Entry& e, int64_t created = 1700000000) {
  return serialize_entry(e, cubin_sha(e), created);
}

// Reads from `bytes` as pread would from a file of that content, recording every range it is asked
// for. A read past the end is reported as the end of the file.
struct MemoryFile {
  std::vector<uint8_t> bytes;
  std::vector<std::pair<uint64_t, size_t>> reads;  // (offset, size)

  EntryReader reader() {
    return [this](void* data, size_t size, uint64_t offset) -> std::string {
      reads.emplace_back(offset, size);
      if (offset > bytes.size() || size > bytes.size() - offset) return "truncated while reading";
      if (size) std::memcpy(data, bytes.data() + offset, size);
      return "";
    };
  }
  uint64_t furthest_read() const {
    uint64_t end = 0;
    for (const auto& [offset, size] : reads) end = std::max<uint64_t>(end, offset + size);
    return end;
  }
};

std::string verify(const std::vector<uint8_t>& bytes, const std::string& key, const std::string* record,
                   Entry* out = nullptr) {
  MemoryFile f{bytes, {}};
  return verify_entry(f.reader(), bytes.size(), key, record, out);
}

// The file `serialize_entry` would write, with the header JSON replaced by `header` (and its
// checksum and length made to match, so that only the header's content is wrong).
std::vector<uint8_t> with_header(const std::vector<uint8_t>& good, const std::string& header) {
  const uint32_t old_len = header_len_of(good);
  std::vector<uint8_t> out(good.begin(), good.begin() + kEntryPrefixBytes);
  for (int i = 0; i < 4; ++i) out[12 + i] = uint8_t(header.size() >> (8 * i));
  ssd::Sha256 h;
  h.update(header);
  const auto digest = h.digest();
  std::copy(digest.begin(), digest.end(), out.begin() + 16);
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), good.begin() + kEntryPrefixBytes + old_len, good.end());
  return out;
}

nlohmann::json header_json_of(const std::vector<uint8_t>& bytes) {
  const uint32_t len = header_len_of(bytes);
  return nlohmann::json::parse(bytes.begin() + kEntryPrefixBytes, bytes.begin() + kEntryPrefixBytes + len);
}

}  // namespace

TEST_CASE("entry format: round trip, kept and streamed") {
  const Entry e = sample_entry(3000);
  const std::vector<uint8_t> bytes = file_of(e);
  REQUIRE(bytes.size() == kEntryPrefixBytes + header_len_of(bytes) + 3000);

  Entry back;
  REQUIRE(verify(bytes, e.info.key, &e.info.key_record, &back) == "");
  CHECK(back.info.key == e.info.key);
  CHECK(back.info.key_record == e.info.key_record);
  CHECK(back.info.kernel == e.info.kernel);
  CHECK(back.info.spec_json == e.info.spec_json);
  CHECK(back.info.symbol == e.info.symbol);
  CHECK(back.info.arch == e.info.arch);
  CHECK(back.info.toolchain == e.info.toolchain);
  CHECK(back.info.registers == 40);
  CHECK(back.info.shared_bytes == 4096);
  CHECK(back.cubin == e.cubin);
  CHECK(back.cubin_sha256 == cubin_sha(e));
  CHECK(back.created_unix == 1700000000);

  // Without an output the cubin is only hashed; without a record the echo check is skipped.
  CHECK(verify(bytes, e.info.key, &e.info.key_record) == "");
  CHECK(verify(bytes, e.info.key, nullptr) == "");

  // The header alone.
  MemoryFile f{bytes, {}};
  EntryHeader h;
  REQUIRE(read_entry_header(f.reader(), bytes.size(), &h) == "");
  CHECK(h.info.key == e.info.key);
  CHECK(h.info.kernel == e.info.kernel);
  CHECK(h.created == 1700000000);
  CHECK(h.cubin_size == 3000);
  CHECK(h.cubin_sha256 == cubin_sha(e));
  CHECK(h.cubin_offset == kEntryPrefixBytes + header_len_of(bytes));
  CHECK(f.furthest_read() == h.cubin_offset);  // the cubin itself is not read

  // An empty cubin is a legal (if useless) entry.
  const Entry empty = sample_entry(0);
  CHECK(verify(file_of(empty), empty.info.key, &empty.info.key_record) == "");
}

TEST_CASE("entry format: a cubin larger than one streaming piece") {
  const Entry e = sample_entry((5u << 20) / 2);  // 2.5 MiB: three 1 MiB pieces when streamed
  std::vector<uint8_t> bytes = file_of(e);
  Entry back;
  CHECK(verify(bytes, e.info.key, &e.info.key_record, &back) == "");
  CHECK(back.cubin == e.cubin);
  CHECK(verify(bytes, e.info.key, &e.info.key_record) == "");
  bytes[bytes.size() - 1] ^= 0x40;  // in the last, partial piece
  CHECK(verify(bytes, e.info.key, &e.info.key_record) == "cubin sha256 mismatch");
  CHECK(verify(bytes, e.info.key, &e.info.key_record, &back) == "cubin sha256 mismatch");
}

TEST_CASE("entry format: each corruption is reported with its own reason") {
  const Entry e = sample_entry(1000);
  const std::string& key = e.info.key;
  const std::string* record = &e.info.key_record;
  const std::vector<uint8_t> good = file_of(e);
  const uint32_t hlen = header_len_of(good);
  std::vector<uint8_t> bytes = good;

  SUBCASE("shorter than the prefix") {
    bytes.resize(30);
    CHECK(verify(bytes, key, record) == "truncated: 30 bytes, shorter than the header");
  }
  SUBCASE("empty file") { CHECK(verify({}, key, record) == "truncated: 0 bytes, shorter than the header"); }
  SUBCASE("magic") {
    bytes[2] ^= 0x20;
    CHECK(verify(bytes, key, record) == "bad magic bytes (not an ssdgen kernel file)");
  }
  SUBCASE("schema version") {
    bytes[8] = 2;
    CHECK(verify(bytes, key, record) == "schema version 2 where 1 was expected");
  }
  SUBCASE("header length past the end of the file") {
    bytes.resize(kEntryPrefixBytes + hlen - 1);
    CHECK(verify(bytes, key, record) ==
          "header length " + std::to_string(hlen) + " does not fit the " + std::to_string(bytes.size()) + "-byte file");
  }
  SUBCASE("header length over 1 MiB") {
    bytes[14] = 0x10;  // header length 1 MiB + hlen
    bytes.resize((2u << 20) + 100, 0);
    CHECK(verify(bytes, key, record) == "header length " + std::to_string((1u << 20) + hlen) + " does not fit the " +
                                            std::to_string(bytes.size()) + "-byte file");
  }
  SUBCASE("header checksum") {
    bytes[20] ^= 0x80;
    CHECK(verify(bytes, key, record) == "header checksum mismatch");
  }
  SUBCASE("one flipped byte in the header JSON") {
    bytes[kEntryPrefixBytes + hlen / 2] ^= 0x01;
    CHECK(verify(bytes, key, record) == "header checksum mismatch");
  }
  SUBCASE("header is not JSON, or not an object") {
    CHECK(verify(with_header(good, "{\"key\":"), key, record) == "header is not a JSON object");
    CHECK(verify(with_header(good, "[1,2]"), key, record) == "header is not a JSON object");
  }
  SUBCASE("a field missing, of the wrong type, or out of its type's range") {
    const std::string why = "header is missing a field or has one of the wrong type";
    for (const char* field : {"key", "key_record", "kernel", "spec_json", "symbol", "arch", "toolchain",
                              "registers", "shared_bytes", "created", "cubin_size", "cubin_sha256"}) {
      CAPTURE(field);
      nlohmann::json j = header_json_of(good);
      j.erase(field);
      CHECK(verify(with_header(good, j.dump()), key, record) == why);
      j = header_json_of(good);
      j[field] = j[field].is_string() ? nlohmann::json(1) : nlohmann::json("1");
      CHECK(verify(with_header(good, j.dump()), key, record) == why);
    }
    nlohmann::json j = header_json_of(good);
    j["registers"] = int64_t(1) << 40;  // does not fit int32
    CHECK(verify(with_header(good, j.dump()), key, record) == why);
    j = header_json_of(good);
    j["cubin_size"] = -1;  // does not fit uint64
    CHECK(verify(with_header(good, j.dump()), key, record) == why);
  }
  SUBCASE("cubin size disagrees with the file") {
    bytes.push_back(0);
    CHECK(verify(bytes, key, record) == "cubin size 1000 in the header, 1001 bytes in the file");
    bytes.resize(bytes.size() - 101);
    CHECK(verify(bytes, key, record) == "cubin size 1000 in the header, 900 bytes in the file");
  }
  SUBCASE("key echo") {
    const std::string other = ssd::sha256_hex(std::string("another record"));
    CHECK(verify(bytes, other, record) == "header key " + key + " does not match the file's key " + other);
    const std::string wrong_record = "another record";
    CHECK(verify(bytes, key, &wrong_record) == "header key record does not match the requested key record");
  }
  SUBCASE("one flipped byte in the cubin") {
    bytes[kEntryPrefixBytes + hlen + 777] ^= 0x01;
    CHECK(verify(bytes, key, record) == "cubin sha256 mismatch");
    Entry out;
    CHECK(verify(bytes, key, record, &out) == "cubin sha256 mismatch");
  }
  SUBCASE("the header's digest is not the cubin's") {
    nlohmann::json j = header_json_of(good);
    j["cubin_sha256"] = std::string(64, '0');
    CHECK(verify(with_header(good, j.dump()), key, record) == "cubin sha256 mismatch");
  }
  SUBCASE("implausibly large: nothing is read") {
    MemoryFile f{good, {}};
    const uint64_t huge = ssd::cache::kMaxEntryBytes + 1;
    CHECK(verify_entry(f.reader(), huge, key, record, nullptr) ==
          "implausibly large (" + std::to_string(huge) + " bytes)");
    CHECK(f.reads.empty());
  }
}

TEST_CASE("entry format: every single flipped byte is detected") {
  const Entry e = sample_entry(64);
  const std::vector<uint8_t> good = file_of(e);
  for (size_t i = 0; i < good.size(); ++i) {
    for (uint8_t bit : {uint8_t(0x01), uint8_t(0x80)}) {
      std::vector<uint8_t> bytes = good;
      bytes[i] ^= bit;
      CAPTURE(i);
      CHECK(verify(bytes, e.info.key, &e.info.key_record) != "");
    }
  }
}

TEST_CASE("entry format: sizes are checked before the cubin is read") {
  // A file 1 GiB longer than its header says (a huge sparse file, say) is rejected after reading
  // the prefix and the header only.
  const Entry e = sample_entry(1000);
  MemoryFile f{file_of(e), {}};
  const uint64_t claimed = f.bytes.size() + (1ull << 30);
  CHECK(verify_entry(f.reader(), claimed, e.info.key, &e.info.key_record, nullptr) ==
        "cubin size 1000 in the header, " + std::to_string(claimed - kEntryPrefixBytes - header_len_of(f.bytes)) +
            " bytes in the file");
  CHECK(f.furthest_read() == kEntryPrefixBytes + header_len_of(f.bytes));
}

TEST_CASE("entry format: the reader's reason is passed on, and nothing is kept") {
  const Entry e = sample_entry(1000);
  const std::vector<uint8_t> good = file_of(e);
  for (uint64_t fail_at : {uint64_t(0), uint64_t(kEntryPrefixBytes + header_len_of(good))}) {
    CAPTURE(fail_at);
    EntryReader failing = [&](void* data, size_t size, uint64_t offset) -> std::string {
      if (offset >= fail_at) return "read error";
      std::memcpy(data, good.data() + offset, size);
      return "";
    };
    Entry out;
    CHECK(verify_entry(failing, good.size(), e.info.key, &e.info.key_record, &out) == "read error");
    CHECK(out.cubin.empty());
    CHECK(out.info.key.empty());
  }
}

TEST_CASE("entry format: a string that is not UTF-8 cannot be serialized") {
  Entry e = sample_entry(10);
  e.info.kernel = "bad \xff name";
  CHECK_THROWS_AS(file_of(e), nlohmann::json::type_error);
}
