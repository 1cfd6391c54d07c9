// On-disk kernel cache (src/cache/disk_cache.h, docs/cache.md).
#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <initializer_list>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache/disk_cache.h"
#include "cache_test_entries.h"
#include "common/log.h"
#include "common/sha256.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
using namespace ssd::cache;
using cache_test::header_len_of;
using cache_test::key_of;
using cache_test::make_entry;
using unittest::TempDir;

namespace {

// Captures warnings (and only warnings) for the lifetime of the object.
struct Warnings {
  std::mutex m;
  std::vector<std::string> list;
  Warnings() {
    ssd::set_log_sink([this](ssd::LogLevel level, std::string_view msg) {
      if (level != ssd::LogLevel::Warning) return;
      std::lock_guard<std::mutex> lock(m);
      list.emplace_back(msg);
    });
  }
  ~Warnings() { ssd::set_log_sink(nullptr); }
  size_t count() {
    std::lock_guard<std::mutex> lock(m);
    return list.size();
  }
  std::string all() {
    std::lock_guard<std::mutex> lock(m);
    std::string s;
    for (auto& w : list) s += w + "\n";
    return s;
  }
};

// Sets/unsets environment variables, restoring the previous values on destruction.
struct EnvGuard {
  std::vector<std::pair<std::string, std::optional<std::string>>> saved;
  EnvGuard() {
    for (const char* n : {"SSD_CACHE_DIR", "XDG_CACHE_HOME", "HOME", "SSD_CACHE_MODE", "SSD_CACHE_MAX_BYTES",
                          "SSD_CACHE_SHARED", "SSD_CACHE_LOCK_TIMEOUT_MS"}) {
      const char* v = std::getenv(n);
      saved.emplace_back(n, v ? std::optional<std::string>(v) : std::nullopt);
      ::unsetenv(n);
    }
  }
  ~EnvGuard() {
    for (auto& [n, v] : saved) {
      if (v) ::setenv(n.c_str(), v->c_str(), 1);
      else ::unsetenv(n.c_str());
    }
  }
  void set(const char* n, const char* v) { ::setenv(n, v, 1); }
};

Options opts(const std::string& root, Mode mode = Mode::ReadWrite) {
  Options o;
  o.root = root;
  o.mode = mode;
  o.lock_timeout_ms = 5000;
  return o;
}

// Stores the sample entries of `records` through a read-write cache over `root` (closed again).
void store_entries(const std::string& root, std::initializer_list<std::string> records) {
  DiskCache writer(opts(root));
  for (const std::string& r : records) REQUIRE(writer.store(make_entry(r)).ok());
}

// A compile function that counts its calls.
struct FakeCompiler {
  std::atomic<int> calls{0};
  std::function<ssd::Result<Entry>()> fn(const std::string& record, uint8_t seed = 1, int sleep_ms = 0) {
    return [this, record, seed, sleep_ms]() -> ssd::Result<Entry> {
      ++calls;
      if (sleep_ms) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
      return make_entry(record, 1000, seed);
    };
  }
};

std::vector<std::string> files_with_suffix(const std::string& dir, const std::string& suffix) {
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return out;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    std::string p = it->path().string();
    if (it->is_regular_file(ec) && p.size() >= suffix.size() &&
        p.compare(p.size() - suffix.size(), suffix.size(), suffix) == 0)
      out.push_back(p);
  }
  return out;
}

std::string entry_path(const std::string& root, const std::string& key) {
  return root + "/v1/entries/" + key.substr(0, 2) + "/" + key + ".ssdk";
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& data) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size()));
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

mode_t mode_of(const std::string& path) {
  struct stat st {};
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

TEST_CASE("cache: mode names and parsing") {
  for (Mode m : {Mode::ReadWrite, Mode::ReadOnly, Mode::RequireCached, Mode::Off}) {
    auto r = parse_mode(mode_name(m));
    REQUIRE(r.ok());
    CHECK(r.value() == m);
  }
  CHECK(std::string(mode_name(Mode::RequireCached)) == "require-cached");
  auto bad = parse_mode("read-only");
  REQUIRE(!bad.ok());
  CHECK(bad.status().code == SSD_ERROR_INVALID_ARGUMENT);
  CHECK(bad.status().detail.find("SSD_CACHE_MODE") != std::string::npos);
  CHECK(bad.status().detail.find("require-cached") != std::string::npos);
}

TEST_CASE("cache: options from the environment") {
  EnvGuard env;
  env.set("HOME", "/home/someone");
  {
    auto o = options_from_env();
    REQUIRE(o.ok());
    CHECK(o->root == "/home/someone/.cache/ssdgen");
    CHECK(o->mode == Mode::ReadWrite);
    CHECK(o->max_bytes == (4ull << 30));
    CHECK(!o->group_shared);
    CHECK(o->lock_timeout_ms == 120000);
  }
  env.set("XDG_CACHE_HOME", "/xdg/cache/");
  CHECK(options_from_env()->root == "/xdg/cache/ssdgen");
  env.set("XDG_CACHE_HOME", "relative/xdg");  // XDG: relative paths are ignored
  CHECK(options_from_env()->root == "/home/someone/.cache/ssdgen");
  env.set("SSD_CACHE_DIR", "/explicit/dir/");
  CHECK(options_from_env()->root == "/explicit/dir");

  SUBCASE("modes") {
    env.set("SSD_CACHE_MODE", "readonly");
    CHECK(options_from_env()->mode == Mode::ReadOnly);
    env.set("SSD_CACHE_MODE", "require-cached");
    CHECK(options_from_env()->mode == Mode::RequireCached);
    env.set("SSD_CACHE_MODE", "off");
    CHECK(options_from_env()->mode == Mode::Off);
    env.set("SSD_CACHE_MODE", "readwrite");
    CHECK(options_from_env()->mode == Mode::ReadWrite);
  }
  SUBCASE("bad SSD_CACHE_MODE names the variable and the legal values") {
    env.set("SSD_CACHE_MODE", "sometimes");
    auto o = options_from_env();
    REQUIRE(!o.ok());
    CHECK(o.status().code == SSD_ERROR_INVALID_ARGUMENT);
    const std::string& d = o.status().detail;
    CHECK(d.find("SSD_CACHE_MODE") != std::string::npos);
    CHECK(d.find("sometimes") != std::string::npos);
    for (const char* legal : {"readwrite", "readonly", "require-cached", "off"})
      CHECK(d.find(legal) != std::string::npos);
  }
  SUBCASE("max bytes with suffixes") {
    env.set("SSD_CACHE_MAX_BYTES", "12345");
    CHECK(options_from_env()->max_bytes == 12345);
    env.set("SSD_CACHE_MAX_BYTES", "64K");
    CHECK(options_from_env()->max_bytes == 64ull << 10);
    env.set("SSD_CACHE_MAX_BYTES", "512M");
    CHECK(options_from_env()->max_bytes == 512ull << 20);
    env.set("SSD_CACHE_MAX_BYTES", "2G");
    CHECK(options_from_env()->max_bytes == 2ull << 30);
    for (const char* bad : {"lots", "-5", "5X", "1.5G", "G", "99999999999999999999"}) {
      env.set("SSD_CACHE_MAX_BYTES", bad);
      auto o = options_from_env();
      CHECK_MESSAGE(!o.ok(), bad);
      if (!o.ok()) {
        CHECK(o.status().code == SSD_ERROR_INVALID_ARGUMENT);
        CHECK(o.status().detail.find("SSD_CACHE_MAX_BYTES") != std::string::npos);
      }
    }
  }
  SUBCASE("shared and lock timeout") {
    env.set("SSD_CACHE_SHARED", "1");
    CHECK(options_from_env()->group_shared);
    env.set("SSD_CACHE_SHARED", "0");
    CHECK(!options_from_env()->group_shared);
    env.set("SSD_CACHE_SHARED", "yes");
    auto o = options_from_env();
    REQUIRE(!o.ok());
    CHECK(o.status().detail.find("SSD_CACHE_SHARED") != std::string::npos);
    env.set("SSD_CACHE_SHARED", "1");
    env.set("SSD_CACHE_LOCK_TIMEOUT_MS", "2500");
    CHECK(options_from_env()->lock_timeout_ms == 2500);
    env.set("SSD_CACHE_LOCK_TIMEOUT_MS", "soon");
    auto t = options_from_env();
    REQUIRE(!t.ok());
    CHECK(t.status().detail.find("SSD_CACHE_LOCK_TIMEOUT_MS") != std::string::npos);
  }
}

TEST_CASE("cache: root is created 0700 with its parents") {
  TempDir tmp;
  Warnings warnings;
  std::string root = tmp / "a/b/cache";
  DiskCache cache(opts(root));
  CHECK(cache.disk_enabled());
  CHECK(cache.disabled_reason().empty());
  CHECK(mode_of(root) == 0700);
  CHECK(mode_of(tmp / "a") == 0700);
  CHECK(fs::is_directory(root + "/v1/entries"));
  CHECK(warnings.count() == 0);
}

TEST_CASE("cache: store and load roundtrip; file format") {
  TempDir tmp;
  Warnings warnings;
  DiskCache cache(opts(tmp.path));
  Entry e = make_entry("record-roundtrip", 3000);
  e.created_unix = 1700000000;
  REQUIRE(cache.store(e).ok());

  std::string path = entry_path(tmp.path, e.info.key);
  REQUIRE(fs::exists(path));
  auto bytes = read_bytes(path);
  CHECK(std::memcmp(bytes.data(), "SSDK\r\n\x1a\n", 8) == 0);
  CHECK(bytes[8] == 1);  // schema 1, little-endian
  uint32_t hlen = header_len_of(bytes);
  REQUIRE(bytes.size() == 48 + hlen + 3000);
  auto header = nlohmann::json::parse(bytes.begin() + 48, bytes.begin() + 48 + hlen);
  CHECK(header["key"] == e.info.key);
  CHECK(header["key_record"] == "record-roundtrip");
  CHECK(header["cubin_size"] == 3000);
  CHECK(header["cubin_sha256"] == ssd::sha256_hex(e.cubin.data(), e.cubin.size()));
  CHECK(header["created"] == 1700000000);
  CHECK(std::equal(e.cubin.begin(), e.cubin.end(), bytes.begin() + 48 + hlen));
  CHECK((mode_of(path) & 077) == 0);
  CHECK(files_with_suffix(tmp / "tmp", "").empty());  // temp file gone

  auto loaded = cache.load(e.info.key, e.info.key_record);
  REQUIRE(loaded.has_value());
  CHECK(loaded->cubin == e.cubin);
  CHECK(loaded->cubin_sha256 == ssd::sha256_hex(e.cubin.data(), e.cubin.size()));
  CHECK(loaded->created_unix == 1700000000);
  CHECK(loaded->info.kernel == e.info.kernel);
  CHECK(loaded->info.spec_json == e.info.spec_json);
  CHECK(loaded->info.symbol == e.info.symbol);
  CHECK(loaded->info.arch == e.info.arch);
  CHECK(loaded->info.toolchain == e.info.toolchain);
  CHECK(loaded->info.registers == 40);
  CHECK(loaded->info.shared_bytes == 4096);

  // A second instance (another process, in effect) sees it too; a miss is just a miss.
  DiskCache other(opts(tmp.path));
  CHECK(other.load(e.info.key, e.info.key_record).has_value());
  CHECK(!other.load(key_of("absent"), "absent").has_value());
  CHECK(!other.load("not-a-key", "x").has_value());
  CHECK(warnings.count() == 0);

  // A producer-supplied digest that does not match the cubin is refused.
  Entry liar = make_entry("record-liar");
  liar.cubin_sha256 = std::string(64, '0');
  CHECK(cache.store(liar).code == SSD_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("cache: an entry is never overwritten") {
  TempDir tmp;
  DiskCache cache(opts(tmp.path));
  Entry first = make_entry("record-once", 1000, 1);
  Entry second = make_entry("record-once", 1000, 2);  // same key, different bytes
  REQUIRE(cache.store(first).ok());
  std::string path = entry_path(tmp.path, first.info.key);
  struct stat before {};
  REQUIRE(::stat(path.c_str(), &before) == 0);
  CHECK(cache.store(second).ok());  // already there: success, nothing replaced
  struct stat after {};
  REQUIRE(::stat(path.c_str(), &after) == 0);
  CHECK(before.st_ino == after.st_ino);
  auto loaded = cache.load(first.info.key, first.info.key_record);
  REQUIRE(loaded.has_value());
  CHECK(loaded->cubin == first.cubin);
  CHECK(files_with_suffix(tmp.path, ".ssdk").size() == 1);
}

TEST_CASE("cache: key echo mismatch is quarantined") {
  TempDir tmp;
  Warnings warnings;
  DiskCache cache(opts(tmp.path));

  SUBCASE("same key, different key record") {
    Entry e = make_entry("record-echo");
    REQUIRE(cache.store(e).ok());
    CHECK(!cache.load(e.info.key, "a different record").has_value());
    CHECK(warnings.count() == 1);
    CHECK(warnings.all().find(e.info.key) != std::string::npos);
    CHECK(!fs::exists(entry_path(tmp.path, e.info.key)));
    CHECK(files_with_suffix(tmp / "quarantine", ".ssdk").size() == 1);
  }
  SUBCASE("a file placed under another key's name") {
    Entry a = make_entry("record-a");
    REQUIRE(cache.store(a).ok());
    std::string b_key = key_of("record-b");
    fs::create_directories(tmp.path + "/v1/entries/" + b_key.substr(0, 2));
    fs::copy_file(entry_path(tmp.path, a.info.key), entry_path(tmp.path, b_key));
    FakeCompiler cc;
    auto r = cache.get_or_compile(b_key, "record-b", cc.fn("record-b", 9));
    REQUIRE(r.ok());
    CHECK(cc.calls == 1);
    CHECK(r->cubin == make_entry("record-b", 1000, 9).cubin);
    CHECK(warnings.count() == 1);
    CHECK(files_with_suffix(tmp / "quarantine", ".ssdk").size() == 1);
    CHECK(cache.load(a.info.key, "record-a").has_value());  // the original is untouched
    auto b = cache.load(b_key, "record-b");
    REQUIRE(b.has_value());
    CHECK(b->info.key == b_key);
  }
}

TEST_CASE("cache: corrupt entries are quarantined once, warned once, recompiled") {
  TempDir tmp;
  const std::string record = "record-corrupt";
  const std::string key = key_of(record);
  {
    DiskCache writer(opts(tmp.path));
    REQUIRE(writer.store(make_entry(record, 2000, 1)).ok());
  }
  std::string path = entry_path(tmp.path, key);
  auto bytes = read_bytes(path);
  uint32_t hlen = header_len_of(bytes);

  SUBCASE("truncated") { bytes.resize(bytes.size() - 100); }
  SUBCASE("truncated inside the header") { bytes.resize(30); }
  SUBCASE("one flipped byte in the cubin") { bytes[48 + hlen + 777] ^= 0x01; }
  SUBCASE("one flipped byte in the header JSON") { bytes[48 + hlen / 2] ^= 0x01; }
  SUBCASE("one flipped byte in the magic") { bytes[2] ^= 0x20; }
  SUBCASE("one flipped byte in the header checksum") { bytes[20] ^= 0x80; }
  SUBCASE("wrong schema version") { bytes[8] = 2; }
  SUBCASE("appended garbage") { bytes.push_back(0); }
  write_bytes(path, bytes);

  Warnings warnings;
  DiskCache cache(opts(tmp.path));
  FakeCompiler cc;
  auto r = cache.get_or_compile(key, record, cc.fn(record, 5));
  REQUIRE(r.ok());
  CHECK(cc.calls == 1);
  CHECK(r->cubin == make_entry(record, 1000, 5).cubin);
  CHECK(warnings.count() == 1);
  CHECK(warnings.all().find(path) != std::string::npos);
  CHECK(warnings.all().find("quarantine") != std::string::npos);
  CHECK(files_with_suffix(tmp / "quarantine", ".ssdk").size() == 1);

  // The recompiled entry replaced it and is good.
  auto again = cache.get_or_compile(key, record, cc.fn(record, 5));
  REQUIRE(again.ok());
  CHECK(cc.calls == 1);
  CHECK(warnings.count() == 1);
}

TEST_CASE("cache: index.json is a view, tolerated missing or corrupt, rebuilt") {
  TempDir tmp;
  Warnings warnings;
  DiskCache cache(opts(tmp.path));
  Entry a = make_entry("record-index-a"), b = make_entry("record-index-b", 500);
  REQUIRE(cache.store(a).ok());
  REQUIRE(cache.store(b).ok());
  const std::string index = tmp / "index.json";
  {
    auto j = nlohmann::json::parse(read_text(index));
    REQUIRE(j.contains(a.info.key));
    REQUIRE(j.contains(b.info.key));
    auto& row = j[a.info.key];
    CHECK(row["kernel"] == "chunk_cumsum_fwd");
    CHECK(row["spec"]["chunk"] == 64);  // spec_json, parsed
    CHECK(row["arch"] == "sm_90a");
    CHECK(row["file_bytes"] == fs::file_size(entry_path(tmp.path, a.info.key)));
    CHECK(row["cubin_sha256"] == ssd::sha256_hex(a.cubin.data(), a.cubin.size()));
    CHECK(row["created"].is_number_integer());
    CHECK(row["last_used"].is_number_integer());
  }

  for (const char* damage : {"garbage", "missing"}) {
    CAPTURE(damage);
    if (std::string(damage) == "garbage") write_text(index, "{ this is not json");
    else fs::remove(index);
    DiskCache fresh(opts(tmp.path));
    auto rows = fresh.list();
    REQUIRE(rows.size() == 2);
    std::set<std::string> keys{rows[0].key, rows[1].key};
    CHECK(keys == std::set<std::string>{a.info.key, b.info.key});
    for (auto& row : rows) {
      CHECK(row.kernel == "chunk_cumsum_fwd");
      CHECK(row.arch == "sm_90a");
      CHECK(row.file_bytes == fs::file_size(entry_path(tmp.path, row.key)));
      CHECK(row.last_used_unix >= row.created_unix);
    }
    FakeCompiler cc;
    REQUIRE(fresh.get_or_compile(a.info.key, a.info.key_record, cc.fn(a.info.key_record)).ok());
    CHECK(cc.calls == 0);
    REQUIRE(fresh.rebuild_index().ok());
    auto j = nlohmann::json::parse(read_text(index));
    CHECK(j.size() == 2);
    CHECK(j.contains(a.info.key));
    CHECK(j[b.info.key]["file_bytes"] == fs::file_size(entry_path(tmp.path, b.info.key)));
  }
  CHECK(warnings.count() == 0);
}

TEST_CASE("cache: mode off never touches the disk") {
  TempDir tmp;
  Warnings warnings;
  std::string root = tmp / "root";
  DiskCache cache(opts(root, Mode::Off));
  CHECK(!cache.disk_enabled());
  FakeCompiler cc;
  const std::string record = "record-off";
  CHECK(cache.get_or_compile(key_of(record), record, cc.fn(record)).ok());
  CHECK(cache.get_or_compile(key_of(record), record, cc.fn(record)).ok());
  CHECK(cc.calls == 2);
  CHECK(cache.store(make_entry(record)).code == SSD_ERROR_CACHE);
  CHECK(!fs::exists(root));
  CHECK(warnings.count() == 0);
}

TEST_CASE("cache: readonly mode loads but never writes") {
  TempDir tmp;
  const std::string have = "record-ro-have", missing = "record-ro-missing";
  store_entries(tmp.path, {have});
  fs::remove(tmp / "index.json");
  fs::remove_all(tmp / "locks");
  fs::remove_all(tmp / "tmp");
  const std::string used = tmp.path + "/v1/entries/" + key_of(have).substr(0, 2) + "/" + key_of(have) + ".used";
  const std::string used_before = read_text(used);

  Warnings warnings;
  DiskCache cache(opts(tmp.path, Mode::ReadOnly));
  REQUIRE(cache.disk_enabled());
  FakeCompiler cc;
  auto hit = cache.get_or_compile(key_of(have), have, cc.fn(have));
  REQUIRE(hit.ok());
  CHECK(cc.calls == 0);
  auto miss = cache.get_or_compile(key_of(missing), missing, cc.fn(missing));
  REQUIRE(miss.ok());
  CHECK(cc.calls == 1);
  CHECK(!fs::exists(entry_path(tmp.path, key_of(missing))));
  CHECK(!fs::exists(tmp / "index.json"));
  CHECK(!fs::exists(tmp / "locks"));
  CHECK(!fs::exists(tmp / "tmp"));
  CHECK(read_text(used) == used_before);
  CHECK(cache.store(make_entry(missing)).code == SSD_ERROR_CACHE);
  CHECK(cache.clear().code == SSD_ERROR_CACHE);
  CHECK(fs::exists(entry_path(tmp.path, key_of(have))));

  // A corrupt entry: warned once, not moved (that would be a write), recompiled in memory.
  auto bytes = read_bytes(entry_path(tmp.path, key_of(have)));
  bytes.back() ^= 0xff;
  write_bytes(entry_path(tmp.path, key_of(have)), bytes);
  for (int i = 0; i < 3; ++i) REQUIRE(cache.get_or_compile(key_of(have), have, cc.fn(have)).ok());
  CHECK(cc.calls == 4);
  CHECK(warnings.count() == 1);
  CHECK(fs::exists(entry_path(tmp.path, key_of(have))));
  CHECK(!fs::exists(tmp / "quarantine"));

  // A root that does not exist is not created.
  DiskCache nothing(opts(tmp / "nowhere", Mode::ReadOnly));
  CHECK(nothing.get_or_compile(key_of(missing), missing, cc.fn(missing)).ok());
  CHECK(!fs::exists(tmp / "nowhere"));
  CHECK(warnings.count() == 1);
}

TEST_CASE("cache: require-cached mode") {
  TempDir tmp;
  const std::string have = "record-rc-have", missing = "record-rc-missing";
  store_entries(tmp.path, {have});
  Warnings warnings;
  DiskCache cache(opts(tmp.path, Mode::RequireCached));
  FakeCompiler cc;
  auto hit = cache.get_or_compile(key_of(have), have, cc.fn(have));
  REQUIRE(hit.ok());
  CHECK(hit->cubin == make_entry(have).cubin);

  auto miss = cache.get_or_compile(key_of(missing), missing, cc.fn(missing));
  REQUIRE(!miss.ok());
  CHECK(miss.status().code == SSD_ERROR_CACHE_MISS);
  CHECK(miss.status().detail.find(key_of(missing)) != std::string::npos);
  CHECK(miss.status().detail.find("missing this kernel") != std::string::npos);
  CHECK(miss.status().detail.find(tmp.path) != std::string::npos);
  CHECK(cc.calls == 0);
  CHECK(warnings.count() == 0);

  // A bad entry is quarantined and then is a miss like any other.
  auto path = entry_path(tmp.path, key_of(have));
  auto bytes = read_bytes(path);
  bytes[bytes.size() / 2] ^= 0x10;
  write_bytes(path, bytes);
  auto bad = cache.get_or_compile(key_of(have), have, cc.fn(have));
  REQUIRE(!bad.ok());
  CHECK(bad.status().code == SSD_ERROR_CACHE_MISS);
  CHECK(bad.status().detail.find(key_of(have)) != std::string::npos);
  CHECK(cc.calls == 0);
  CHECK(warnings.count() == 1);
  CHECK(files_with_suffix(tmp / "quarantine", ".ssdk").size() == 1);

  // No cache dir at all: still a clean CACHE_MISS, nothing created.
  DiskCache none(opts(tmp / "absent", Mode::RequireCached));
  auto r = none.get_or_compile(key_of(have), have, cc.fn(have));
  CHECK(r.status().code == SSD_ERROR_CACHE_MISS);
  CHECK(r.status().detail.find("missing this kernel") != std::string::npos);
  CHECK(!fs::exists(tmp / "absent"));
  CHECK(cc.calls == 0);
}

TEST_CASE("cache: LRU prune by explicit last use") {
  TempDir tmp;
  Warnings warnings;
  std::vector<std::string> records = {"lru-a", "lru-b", "lru-c", "lru-d"};
  {
    DiskCache writer(opts(tmp.path));
    for (auto& r : records) REQUIRE(writer.store(make_entry(r)).ok());
  }
  auto size_of = [&](const std::string& r) { return fs::file_size(entry_path(tmp.path, key_of(r))); };
  DiskCache cache(opts(tmp.path));
  // Use a and c (after all were stored): b and d are now the least recently used, b first.
  REQUIRE(cache.load(key_of("lru-a"), "lru-a").has_value());
  REQUIRE(cache.load(key_of("lru-c"), "lru-c").has_value());
  const std::string used_a =
      tmp.path + "/v1/entries/" + key_of("lru-a").substr(0, 2) + "/" + key_of("lru-a") + ".used";
  REQUIRE(fs::exists(used_a));

  uint64_t total = 0;
  for (auto& r : records) total += size_of(r);
  uint64_t bound = total - 1;  // exactly one entry must go
  auto rep = cache.prune(bound);
  CHECK(rep.removed == 1);
  CHECK(rep.bytes_before == total);
  CHECK(rep.bytes_after <= bound);
  CHECK(!fs::exists(entry_path(tmp.path, key_of("lru-b"))));
  CHECK(fs::exists(entry_path(tmp.path, key_of("lru-d"))));

  rep = cache.prune(size_of("lru-a") + size_of("lru-c"));
  CHECK(rep.removed == 1);
  CHECK(!fs::exists(entry_path(tmp.path, key_of("lru-d"))));
  CHECK(fs::exists(entry_path(tmp.path, key_of("lru-a"))));
  CHECK(fs::exists(entry_path(tmp.path, key_of("lru-c"))));
  CHECK(files_with_suffix(tmp.path, ".used").size() == 2);  // sidecars go with their entries
  auto j = nlohmann::json::parse(read_text(tmp / "index.json"));
  CHECK(j.size() == 2);

  rep = cache.prune(0);
  CHECK(rep.removed == 2);
  CHECK(rep.bytes_after == 0);
  CHECK(files_with_suffix(tmp.path, ".ssdk").empty());
  CHECK(warnings.count() == 0);
}

TEST_CASE("cache: store prunes to max_bytes") {
  TempDir tmp;
  Options o = opts(tmp.path);
  DiskCache probe(o);
  REQUIRE(probe.store(make_entry("bound-0")).ok());
  uint64_t one = fs::file_size(entry_path(tmp.path, key_of("bound-0")));
  REQUIRE(probe.clear().ok());

  o.max_bytes = one * 5 / 2;  // room for two entries
  DiskCache cache(o);
  for (const char* r : {"bound-1", "bound-2", "bound-3"}) REQUIRE(cache.store(make_entry(r)).ok());
  CHECK(!fs::exists(entry_path(tmp.path, key_of("bound-1"))));
  CHECK(fs::exists(entry_path(tmp.path, key_of("bound-2"))));
  CHECK(fs::exists(entry_path(tmp.path, key_of("bound-3"))));
  CHECK(cache.list().size() == 2);
  CHECK(nlohmann::json::parse(read_text(tmp / "index.json")).size() == 2);

  // The entry just stored is kept even when it alone exceeds the bound.
  Options tiny = opts(tmp.path);
  tiny.max_bytes = 10;
  DiskCache small(tiny);
  REQUIRE(small.store(make_entry("bound-4")).ok());
  CHECK(fs::exists(entry_path(tmp.path, key_of("bound-4"))));
  CHECK(small.list().size() == 1);
}

TEST_CASE("cache: unwritable cache never fails get_or_compile; one warning per instance") {
  TempDir tmp;
  FakeCompiler cc;

  SUBCASE("root cannot be created (its parent is a regular file)") {
    write_text(tmp / "file", "x");
    Warnings warnings;
    std::string root = tmp / "file/cache";
    DiskCache cache(opts(root));
    CHECK(!cache.disk_enabled());
    CHECK(warnings.count() == 1);
    CHECK(warnings.all().find(root) != std::string::npos);
    for (const char* r : {"ro-1", "ro-2", "ro-1"}) {
      auto res = cache.get_or_compile(key_of(r), r, cc.fn(r));
      REQUIRE(res.ok());
      CHECK(res->cubin == make_entry(r).cubin);
    }
    CHECK(cc.calls == 3);
    CHECK(warnings.count() == 1);
  }
  SUBCASE("writes start failing after the cache was opened") {
    Warnings warnings;
    DiskCache cache(opts(tmp.path));
    REQUIRE(cache.disk_enabled());
    // Robust also as root, where permission bits do not stop writes: no temp file can be made.
    write_text(tmp / "tmp", "not a directory");
    for (const char* r : {"ro-1", "ro-2"}) {
      auto res = cache.get_or_compile(key_of(r), r, cc.fn(r));
      REQUIRE(res.ok());
      CHECK(res->cubin == make_entry(r).cubin);
      CHECK(res->cubin_sha256 == ssd::sha256_hex(res->cubin.data(), res->cubin.size()));
    }
    CHECK(cc.calls == 2);
    CHECK(warnings.count() == 1);
    CHECK(warnings.all().find(tmp.path) != std::string::npos);
    CHECK(files_with_suffix(tmp.path, ".ssdk").empty());
    CHECK(cache.store(make_entry("ro-3")).code == SSD_ERROR_CACHE);
  }
  SUBCASE("a shard directory that is a file") {
    Warnings warnings;
    DiskCache cache(opts(tmp.path));
    write_text(tmp.path + "/v1/entries/" + key_of("ro-1").substr(0, 2), "x");
    auto res = cache.get_or_compile(key_of("ro-1"), "ro-1", cc.fn("ro-1"));
    REQUIRE(res.ok());
    CHECK(warnings.count() == 1);
  }
  SUBCASE("chmod 0500 root (only meaningful when not running as root)") {
    if (::geteuid() == 0) return;  // root ignores permission bits; the cases above cover it
    Warnings warnings;
    DiskCache cache(opts(tmp.path));
    REQUIRE(::chmod(tmp.path.c_str(), 0500) == 0);
    REQUIRE(::chmod((tmp.path + "/v1/entries").c_str(), 0500) == 0);
    for (const char* r : {"ro-1", "ro-2"}) REQUIRE(cache.get_or_compile(key_of(r), r, cc.fn(r)).ok());
    CHECK(cc.calls == 2);
    CHECK(warnings.count() == 1);
  }
}

TEST_CASE("cache: a full disk (file size limit) never fails get_or_compile") {
  TempDir tmp;
  // RLIMIT_FSIZE makes writes fail with EFBIG like a full disk; do it in a child process.
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim {
      200, 200
    };
    ::setrlimit(RLIMIT_FSIZE, &lim);
    int warnings = 0;
    ssd::set_log_sink([&](ssd::LogLevel l, std::string_view) { warnings += l == ssd::LogLevel::Warning; });
    int code = 0;
    {
      DiskCache cache(opts(tmp.path));
      if (!cache.disk_enabled()) code = 10;
      FakeCompiler cc;
      for (const char* r : {"full-1", "full-2"}) {
        auto res = cache.get_or_compile(key_of(r), r, cc.fn(r));
        if (!res.ok() || res->cubin != make_entry(r).cubin) code = 11;
      }
      if (cc.calls != 2) code = 12;
      if (warnings != 1) code = 13;
      if (!files_with_suffix(tmp.path, ".ssdk").empty()) code = 14;
      if (!files_with_suffix(tmp / "tmp", "").empty()) code = 15;  // partial temp files removed
    }
    ::_exit(code);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("cache: root permission policy") {
  TempDir tmp;
  FakeCompiler cc;
  const std::string root = tmp / "root";
  auto works_memory_only = [&](DiskCache& cache) {
    for (int i = 0; i < 2; ++i) REQUIRE(cache.get_or_compile(key_of("perm"), "perm", cc.fn("perm")).ok());
    CHECK(cc.calls == 2);
    CHECK(!fs::exists(root + "/v1"));
    CHECK(!fs::exists(root + "/locks"));
  };
  // A cache over `o.root` keeps off the disk with one warning naming each of `named`, and works
  // in memory without warning again.
  auto refused = [&](const Options& o, std::initializer_list<std::string> named) {
    Warnings warnings;
    DiskCache cache(o);
    CHECK(!cache.disk_enabled());
    REQUIRE(warnings.count() == 1);
    for (const std::string& part : named) CHECK(warnings.all().find(part) != std::string::npos);
    works_memory_only(cache);
    CHECK(warnings.count() == 1);
  };

  SUBCASE("foreign owner") {
    std::string foreign = root;
    if (::geteuid() == 0) {
      REQUIRE(::mkdir(root.c_str(), 0700) == 0);
      REQUIRE(::chown(root.c_str(), 12345, 12345) == 0);
    } else {
      foreign = "/usr";  // owned by root, not by us
    }
    Warnings warnings;
    DiskCache cache(opts(foreign));
    CHECK(!cache.disk_enabled());
    CHECK(cache.disabled_reason().find("owned by uid") != std::string::npos);
    REQUIRE(warnings.count() == 1);
    CHECK(warnings.all().find(foreign) != std::string::npos);
    CHECK(warnings.all().find("owned by uid") != std::string::npos);
    if (foreign == root) works_memory_only(cache);
    CHECK(warnings.count() == 1);
  }
  SUBCASE("world-writable") {
    REQUIRE(::mkdir(root.c_str(), 0700) == 0);
    REQUIRE(::chmod(root.c_str(), 0777) == 0);
    refused(opts(root), {root, "world-writable"});
    // group_shared does not make a world-writable root acceptable.
    Options o = opts(root);
    o.group_shared = true;
    DiskCache shared(o);
    CHECK(!shared.disk_enabled());
  }
  SUBCASE("symlink") {
    REQUIRE(::mkdir((tmp / "real").c_str(), 0700) == 0);
    REQUIRE(::symlink((tmp / "real").c_str(), root.c_str()) == 0);
    refused(opts(root), {"symbolic link"});
    CHECK(!fs::exists(tmp / "real/v1"));
  }
  SUBCASE("group-writable: refused by default, accepted with group_shared") {
    REQUIRE(::mkdir(root.c_str(), 0700) == 0);
    REQUIRE(::chmod(root.c_str(), 0770) == 0);
    refused(opts(root), {"group-writable"});
    Warnings warnings;
    Options o = opts(root);
    o.group_shared = true;
    DiskCache shared(o);
    CHECK(shared.disk_enabled());
    REQUIRE(shared.store(make_entry("shared")).ok());
    CHECK(shared.load(key_of("shared"), "shared").has_value());
    CHECK(warnings.count() == 0);
  }
  SUBCASE("entries directory checked too") {
    {
      DiskCache make(opts(root));
      REQUIRE(make.disk_enabled());
    }
    const std::string entries = root + "/v1/entries";
    if (::geteuid() == 0) REQUIRE(::chown(entries.c_str(), 12345, 12345) == 0);
    else REQUIRE(::chmod(entries.c_str(), 0777) == 0);
    Warnings warnings;
    DiskCache cache(opts(root));
    CHECK(!cache.disk_enabled());
    REQUIRE(warnings.count() == 1);
    CHECK(warnings.all().find(entries) != std::string::npos);
    DiskCache ro(opts(root, Mode::ReadOnly));
    CHECK(!ro.disk_enabled());
    CHECK(warnings.count() == 2);
  }
}

TEST_CASE("cache: verify_all and clear") {
  TempDir tmp;
  Warnings warnings;
  DiskCache cache(opts(tmp.path));
  for (const char* r : {"v-ok", "v-flip", "v-trunc"}) REQUIRE(cache.store(make_entry(r)).ok());
  auto flip = read_bytes(entry_path(tmp.path, key_of("v-flip")));
  flip[flip.size() - 3] ^= 0x40;
  write_bytes(entry_path(tmp.path, key_of("v-flip")), flip);
  auto trunc = read_bytes(entry_path(tmp.path, key_of("v-trunc")));
  trunc.resize(trunc.size() / 2);
  write_bytes(entry_path(tmp.path, key_of("v-trunc")), trunc);

  VerifyReport rep = cache.verify_all();
  CHECK(rep.ok == 1);
  CHECK(rep.quarantined == 2);
  REQUIRE(rep.problems.size() == 2);
  std::string all = rep.problems[0] + rep.problems[1];
  CHECK(all.find(key_of("v-flip")) != std::string::npos);
  CHECK(all.find(key_of("v-trunc")) != std::string::npos);
  CHECK(files_with_suffix(tmp / "quarantine", ".ssdk").size() == 2);
  CHECK(files_with_suffix(tmp.path + "/v1", ".ssdk").size() == 1);
  CHECK(cache.list().size() == 1);
  rep = cache.verify_all();
  CHECK(rep.ok == 1);
  CHECK(rep.quarantined == 0);
  CHECK(rep.problems.empty());

  FakeCompiler cc;
  REQUIRE(cache.get_or_compile(key_of("v-new"), "v-new", cc.fn("v-new")).ok());
  REQUIRE(fs::exists(tmp / "locks"));
  REQUIRE(fs::exists(tmp / "index.json"));
  REQUIRE(cache.clear().ok());
  CHECK(fs::is_directory(tmp.path));
  CHECK(files_with_suffix(tmp.path, ".ssdk").empty());
  CHECK(!fs::exists(tmp / "locks"));
  CHECK(!fs::exists(tmp / "quarantine"));
  CHECK(!fs::exists(tmp / "index.json"));
  CHECK(cache.list().empty());
  // Still usable afterwards.
  REQUIRE(cache.get_or_compile(key_of("v-new"), "v-new", cc.fn("v-new")).ok());
  CHECK(cc.calls == 2);
  CHECK(cache.load(key_of("v-new"), "v-new").has_value());
  CHECK(warnings.count() == 0);
}

TEST_CASE("cache: lock wait is bounded") {
  TempDir tmp;
  Warnings warnings;
  Options o = opts(tmp.path);
  o.lock_timeout_ms = 200;
  DiskCache cache(o);
  const std::string record = "record-locked";
  const std::string key = key_of(record);
  fs::create_directories(tmp / "locks");
  int fd = ::open((tmp.path + "/locks/" + key + ".lock").c_str(), O_RDWR | O_CREAT, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(::flock(fd, LOCK_EX | LOCK_NB) == 0);  // another "process" holds the compile lock
  FakeCompiler cc;
  auto start = std::chrono::steady_clock::now();
  auto r = cache.get_or_compile(key, record, cc.fn(record));
  auto waited = std::chrono::steady_clock::now() - start;
  ::close(fd);
  REQUIRE(r.ok());
  CHECK(cc.calls == 1);
  CHECK(waited >= std::chrono::milliseconds(190));
  CHECK(waited < std::chrono::seconds(3));
  CHECK(warnings.count() == 1);  // "compiling without it"
  CHECK(cache.load(key, record).has_value());
}

TEST_CASE("cache: threads asking for the same missing key compile it once") {
  TempDir tmp;
  const std::string record = "record-threads";
  FakeCompiler cc;
  DiskCache shared(opts(tmp.path));
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 6; ++i) {
    threads.emplace_back([&, i] {
      std::optional<DiskCache> own;
      if (i % 2) own.emplace(opts(tmp.path));
      DiskCache& c = own ? *own : shared;
      auto r = c.get_or_compile(key_of(record), record, cc.fn(record, 1, 150));
      if (r.ok() && r->cubin == make_entry(record).cubin) ++ok;
    });
  }
  for (auto& t : threads) t.join();
  CHECK(ok == 6);
  CHECK(cc.calls == 1);
}

TEST_CASE("cache: 8 processes asking for the same missing key compile it exactly once") {
  TempDir tmp;
  const std::string bin = SSD_TEST_SUPPORT_DIR "/cache_stress";
  REQUIRE_MESSAGE(::access(bin.c_str(), X_OK) == 0, "missing helper " << bin);
  const std::string root = tmp / "cache";
  const std::string count_file = tmp / "compiles.txt";
  const std::string key = key_of("cache_stress v1 key");
  constexpr int kProcs = 8;
  std::vector<pid_t> pids;
  for (int i = 0; i < kProcs; ++i) {
    std::string out = tmp / ("out" + std::to_string(i) + ".txt");
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0) ::_exit(126);
      ::dup2(fd, 1);
      ::execl(bin.c_str(), bin.c_str(), root.c_str(), key.c_str(), count_file.c_str(), (char*)nullptr);
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  std::string counts = read_text(count_file);
  CHECK(std::count(counts.begin(), counts.end(), '\n') == 1);
  std::set<std::string> shas;
  for (int i = 0; i < kProcs; ++i) {
    std::string s = read_text(tmp / ("out" + std::to_string(i) + ".txt"));
    while (!s.empty() && s.back() == '\n') s.pop_back();
    CHECK(s.size() == 64);
    shas.insert(s);
  }
  CHECK(shas.size() == 1);
  CHECK(files_with_suffix(root, ".ssdk").size() == 1);
  DiskCache cache(opts(root));
  auto loaded = cache.load(key, "cache_stress v1 " + key);
  REQUIRE(loaded.has_value());
  CHECK(shas.count(loaded->cubin_sha256) == 1);
}

// ---------------------------------------------------------------------------------------------
// Issue 12: shard directories, sizes before reading, temp files of dead writers.

TEST_CASE("cache: shard directories store() would refuse are refused on load and reported by verify") {
  TempDir tmp;
  const std::string root = tmp / "root";
  const std::string key = key_of("planted");
  const std::string shard = root + "/v1/entries/" + key.substr(0, 2);
  store_entries(root, {"planted"});
  // Another user's directory (world-writable, or owned by someone else) holding an entry whose
  // checksums are all right: it must not be loaded through the shard.
  const std::string elsewhere = tmp / "elsewhere";
  auto plant = [&](bool as_symlink) {
    if (as_symlink) {
      fs::rename(shard, elsewhere);
      REQUIRE(::chmod(elsewhere.c_str(), 0777) == 0);
      REQUIRE(::symlink(elsewhere.c_str(), shard.c_str()) == 0);
    } else {
      REQUIRE(::chmod(shard.c_str(), 0777) == 0);
    }
  };
  for (bool as_symlink : {true, false}) {
    CAPTURE(as_symlink);
    std::error_code ec;
    fs::remove_all(elsewhere, ec);
    fs::remove_all(root, ec);
    store_entries(root, {"planted"});
    plant(as_symlink);
    const std::string why = as_symlink ? "is a symbolic link" : "is world-writable";
    {
      Warnings warnings;
      DiskCache cache(opts(root));
      REQUIRE(cache.disk_enabled());
      CHECK_FALSE(cache.load(key, "planted").has_value());
      CHECK_FALSE(cache.load(key, "planted").has_value());
      REQUIRE(warnings.count() == 1);
      CHECK(warnings.all().find(shard + " " + why) != std::string::npos);
      CHECK(cache.list().empty());
      // get_or_compile compiles (and cannot store into that shard: no second warning).
      FakeCompiler cc;
      REQUIRE(cache.get_or_compile(key, "planted", cc.fn("planted")).ok());
      CHECK(cc.calls == 1);
      CHECK(warnings.count() == 1);
    }
    {  // readonly: reported, nothing moved
      DiskCache ro(opts(root, Mode::ReadOnly));
      Warnings warnings;
      CHECK_FALSE(ro.load(key, "planted").has_value());
      VerifyReport rep = ro.verify_all();
      CHECK(rep.ok == 0);
      CHECK(rep.quarantined == 0);
      REQUIRE(rep.problems.size() == 1);
      CHECK(rep.problems[0].find(shard + ": directory " + why) != std::string::npos);
      CHECK(fs::exists(fs::symlink_status(shard)));
    }
    {  // readwrite: verify reports it and moves it aside; the shard is then usable again
      Warnings warnings;
      DiskCache cache(opts(root));
      VerifyReport rep = cache.verify_all();
      CHECK(rep.ok == 0);
      CHECK(rep.quarantined == 1);
      REQUIRE(rep.problems.size() == 1);
      CHECK(rep.problems[0].find(shard + ": directory " + why) != std::string::npos);
      CHECK(rep.problems[0].find("moved to " + root + "/quarantine/") != std::string::npos);
      CHECK_FALSE(fs::exists(fs::symlink_status(shard)));
      CHECK(fs::exists(elsewhere) == as_symlink);  // a symlink is moved, its target left alone
      FakeCompiler cc;
      REQUIRE(cache.get_or_compile(key, "planted", cc.fn("planted")).ok());
      CHECK(cc.calls == 1);
      CHECK(cache.load(key, "planted").has_value());
      CHECK(mode_of(shard) == 0700);
      CHECK(cache.verify_all().ok == 1);
      CHECK(warnings.count() == 0);
    }
  }
  SUBCASE("a group-writable shard is accepted with group_shared only") {
    std::error_code ec;
    fs::remove_all(root, ec);
    store_entries(root, {"planted"});
    REQUIRE(::chmod(shard.c_str(), 0770) == 0);
    REQUIRE(::chmod(root.c_str(), 0770) == 0);
    REQUIRE(::chmod((root + "/v1").c_str(), 0770) == 0);
    REQUIRE(::chmod((root + "/v1/entries").c_str(), 0770) == 0);
    Options shared = opts(root);
    shared.group_shared = true;
    DiskCache cache(shared);
    CHECK(cache.load(key, "planted").has_value());
    CHECK(cache.verify_all().ok == 1);
  }
}

namespace {
// Virtual memory size of this process in bytes (/proc/self/statm, first field in pages).
uint64_t virtual_size() {
  std::ifstream f("/proc/self/statm");
  uint64_t pages = 0;
  f >> pages;
  return pages * uint64_t(::sysconf(_SC_PAGESIZE));
}
}  // namespace

TEST_CASE("cache: an entry's sizes are checked before its cubin is read (huge sparse files)") {
#if defined(__SANITIZE_ADDRESS__)
  MESSAGE("skipped under AddressSanitizer (it reserves terabytes of address space: no RLIMIT_AS)");
#else
  TempDir tmp;
  const std::string r_load = "sparse-load", r_verify = "sparse-verify";
  store_entries(tmp.path, {r_load, r_verify});
  // 1.5 GiB of holes after a 1000-byte cubin: the header's cubin_size disagrees with the file size.
  const off_t huge = off_t(3) << 29;
  for (const char* r : {r_load.c_str(), r_verify.c_str()})
    REQUIRE(::truncate(entry_path(tmp.path, key_of(r)).c_str(), huge) == 0);
  // In a child whose address space cannot hold the file: reading it whole fails with bad_alloc.
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int code = 0;
    try {
      struct rlimit lim {};
      lim.rlim_cur = lim.rlim_max = virtual_size() + (rlim_t(512) << 20);
      if (::setrlimit(RLIMIT_AS, &lim) != 0) ::_exit(20);
      std::string warned;
      ssd::set_log_sink([&](ssd::LogLevel l, std::string_view m) {
        if (l == ssd::LogLevel::Warning) warned += std::string(m);
      });
      DiskCache cache(opts(tmp.path));
      if (cache.load(key_of(r_load), r_load).has_value()) code = 11;
      if (warned.find("cubin size 1000 in the header") == std::string::npos) code = 12;
      VerifyReport rep = cache.verify_all();
      if (rep.quarantined != 1 || rep.problems.size() != 1) code = 13;
      else if (rep.problems[0].find("cubin size 1000 in the header") == std::string::npos) code = 14;
      ssd::set_log_sink(nullptr);
    } catch (const std::bad_alloc&) {
      code = 30;  // the whole file was allocated before its header was checked
    } catch (...) {
      code = 31;
    }
    ::_exit(code);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(files_with_suffix(tmp / "quarantine", ".ssdk").size() == 2);
#endif
}

TEST_CASE("cache: temp files of dead writers are removed by the next store and counted in the size bound") {
  TempDir tmp;
  Options o = opts(tmp.path);
  DiskCache cache(o);
  REQUIRE(cache.store(make_entry("t-first")).ok());
  const std::string tmpdir = tmp / "tmp";
  REQUIRE(fs::is_directory(tmpdir));
  auto make_temp = [&](const std::string& name, size_t bytes, int age_s) {
    const std::string p = tmpdir + "/" + name;
    write_text(p, std::string(bytes, 'x'));
    if (age_s) {
      struct timespec times[2];
      ::clock_gettime(CLOCK_REALTIME, &times[0]);
      times[0].tv_sec -= age_s;
      times[1] = times[0];
      REQUIRE(::utimensat(AT_FDCWD, p.c_str(), times, 0) == 0);
    }
    return p;
  };
  // A writer killed 10 minutes ago (unlocked), a live writer (holds the lock; its file is old),
  // and a file created a moment ago (within the grace period, not yet locked perhaps).
  const std::string dead = make_temp("0123456789abcdef.999999.0.1.tmp", 5000, 600);
  const std::string live = make_temp("fedcba9876543210.999998.0.1.tmp", 7000, 600);
  const std::string fresh = make_temp("w.999997.0.1.tmp", 100, 0);
  int live_fd = ::open(live.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(live_fd >= 0);
  REQUIRE(::flock(live_fd, LOCK_EX | LOCK_NB) == 0);

  REQUIRE(cache.store(make_entry("t-second")).ok());
  CHECK_FALSE(fs::exists(dead));
  CHECK(fs::exists(live));
  CHECK(fs::exists(fresh));

  // The size bound counts the live writer's 7000 bytes: with room for two entries and less than
  // that besides, storing a third entry removes the two older ones.
  const uint64_t entry_bytes = fs::file_size(entry_path(tmp.path, key_of("t-first")));
  o.max_bytes = 3 * entry_bytes + 1000;
  DiskCache bounded(o);
  REQUIRE(bounded.store(make_entry("t-third")).ok());
  CHECK(bounded.list().size() == 1);
  CHECK(bounded.load(key_of("t-third"), "t-third").has_value());

  // Once the writer is gone, prune removes its file too.
  ::close(live_fd);
  PruneReport rep = bounded.prune(o.max_bytes);
  CHECK_FALSE(fs::exists(live));
  CHECK(fs::exists(fresh));
  CHECK(rep.bytes_after == entry_bytes + 100);
  // Temp files the library itself creates are locked while written: a concurrent cleaner never
  // removes them (the 8-process test covers publishing under concurrency).
}
