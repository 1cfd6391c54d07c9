// Helper for the multi-process cache test (tests/unit/test_cache.cpp):
//   cache_stress <cache root> <key> <compile-count file>
// Asks DiskCache::get_or_compile for <key>. The fake compile sleeps ~300 ms, appends one line to
// <compile-count file> and returns bytes derived from the key. Prints the cubin sha256 on stdout.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "cache/disk_cache.h"
#include "common/sha256.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s <cache root> <key> <compile-count file>\n", argv[0]);
    return 2;
  }
  const std::string root = argv[1], key = argv[2], count_file = argv[3];
  const std::string key_record = "cache_stress v1 " + key;

  ssd::cache::Options options;
  options.root = root;
  options.mode = ssd::cache::Mode::ReadWrite;
  options.lock_timeout_ms = 60000;
  ssd::cache::DiskCache cache(options);

  auto compile = [&]() -> ssd::Result<ssd::cache::Entry> {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    int fd = ::open(count_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
      std::string line = std::to_string(::getpid()) + "\n";
      ssize_t n = ::write(fd, line.data(), line.size());  // O_APPEND: one atomic line per compile
      (void)n;
      ::close(fd);
    }
    ssd::cache::Entry e;
    e.info.key = key;
    e.info.key_record = key_record;
    e.info.kernel = "stress_kernel";
    e.info.spec_json = "{\"stress\":true}";
    e.info.symbol = "stress_kernel_entry";
    e.info.arch = "sm_90a";
    e.info.toolchain = "fake 1.0";
    e.info.registers = 32;
    e.info.shared_bytes = 0;
    for (int i = 0; i < 4096; ++i) e.cubin.push_back(uint8_t(key[size_t(i) % key.size()] ^ (i * 7)));
    return e;
  };

  auto r = cache.get_or_compile(key, key_record, compile);
  if (!r.ok()) {
    std::fprintf(stderr, "cache_stress: %s\n", r.status().detail.c_str());
    return 1;
  }
  std::printf("%s\n", r.value().cubin_sha256.c_str());
  return 0;
}
