// Pieces of a call's host path (issues 9 and 10: <= 20 us of CPU per call). config_key
// (src/runtime/runtime.h): the packed form of a config that the get_kernel hot path looks loaded
// kernels up by, in place of the formatted config_record; it must hold every field the record
// holds (else two different kernels would share a cache slot) and nothing else. CheckedSize's
// status formats its message only on overflow.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "config/config.h"
#include "ops/tensor_check.h"
#include "presets.h"
#include "runtime/runtime.h"

using namespace ssd;

TEST_CASE("config_key: one field changed changes the key exactly when it changes the record") {
  const ssd_kernel_config base = default_config(SSD_KERNEL_REDUCE_HEAD_PARTIALS);
  struct Change {
    const char* field;
    void (*apply)(ssd_kernel_config& c);
  };
  const Change changes[] = {
      {"kernel", [](ssd_kernel_config& c) { c.kernel = SSD_KERNEL_CHUNK_CUMSUM_FWD; }},
      {"headdim", [](ssd_kernel_config& c) { c.headdim = 64; }},
      {"dstate", [](ssd_kernel_config& c) { c.dstate = 128; }},
      {"chunk_size", [](ssd_kernel_config& c) { c.chunk_size = 128; }},
      {"heads_per_group", [](ssd_kernel_config& c) { c.heads_per_group = 4; }},
      {"dtype", [](ssd_kernel_config& c) { c.dtype = c.dtype == SSD_DTYPE_FP16 ? SSD_DTYPE_BF16 : SSD_DTYPE_FP16; }},
      {"flags", [](ssd_kernel_config& c) { c.flags ^= SSD_FLAG_Z; }},
      {"tile.m", [](ssd_kernel_config& c) { c.tile.m += 1; }},
      {"tile.n", [](ssd_kernel_config& c) { c.tile.n += 1; }},
      {"tile.k", [](ssd_kernel_config& c) { c.tile.k += 1; }},
      {"tile.warps", [](ssd_kernel_config& c) { c.tile.warps += 1; }},
      {"tile.stages", [](ssd_kernel_config& c) { c.tile.stages += 1; }},
      {"mode", [](ssd_kernel_config& c) { c.mode = c.mode == SSD_MODE_FAST ? SSD_MODE_DETERMINISTIC : SSD_MODE_FAST; }},
      {"arch", [](ssd_kernel_config& c) { c.arch = c.arch == SSD_ARCH_SM80 ? SSD_ARCH_SM90A : SSD_ARCH_SM80; }},
      {"partials", [](ssd_kernel_config& c) { c.partials += 1; }},
  };
  for (const Change& ch : changes) {
    const std::string field = ch.field;
    CAPTURE(field);
    ssd_kernel_config c = base;
    ch.apply(c);
    CHECK(config_record(c) != config_record(base));  // the field is in the record ...
    CHECK(config_key(c) != config_key(base));        // ... so it must be in the key
  }
  ssd_kernel_config sized = base;
  sized.struct_size = 8;  // how much of the struct a caller wrote: not part of the kernel
  CHECK(config_record(sized) == config_record(base));
  CHECK(config_key(sized) == config_key(base));
}

TEST_CASE("config_key: equal keys exactly for equal records over every preset kernel and legal tile") {
  std::vector<ssd_kernel_config> configs;
  for (const ssdgen::ModelPreset& p : ssdgen::model_presets())
    for (ssd_arch a : {SSD_ARCH_SM80, SSD_ARCH_SM90, SSD_ARCH_SM90A})
      for (ssd_mode m : {SSD_MODE_DETERMINISTIC, SSD_MODE_FAST})
        for (const ssd_kernel_config& c : ssdgen::preset_configs(p, a, m)) {
          configs.push_back(c);
          for (const ssd_tile& t : legal_tiles(c)) {
            ssd_kernel_config tiled = c;
            tiled.tile = t;
            configs.push_back(tiled);
          }
        }
  REQUIRE(configs.size() > 100);
  std::vector<std::string> records;
  std::vector<ConfigKey> keys;
  for (const ssd_kernel_config& c : configs) {
    records.push_back(config_record(c));
    keys.push_back(config_key(c));
  }
  size_t mismatches = 0, equal_pairs = 0;
  for (size_t i = 0; i < configs.size(); ++i)
    for (size_t j = i + 1; j < configs.size(); ++j) {
      const bool same_record = records[i] == records[j];
      equal_pairs += same_record;
      if (same_record != (keys[i] == keys[j])) ++mismatches;
    }
  CHECK(mismatches == 0);
  CHECK(equal_pairs > 0);  // the set has duplicates (a legal tile that is the default): both sides seen
}

TEST_CASE("CheckedSize::status formats the shapes only on overflow") {
  int formatted = 0;
  auto shapes = [&] {
    ++formatted;
    return std::string("b=1");
  };
  CheckedSize fits;
  fits.mul({1 << 20, 1 << 20});
  CHECK(fits.status("op", shapes).ok());
  CHECK(formatted == 0);  // the success path of every call sizes a workspace: no text built there
  CheckedSize wraps;
  wraps.mul({int64_t(1) << 40, int64_t(1) << 40});
  const Status s = wraps.status("op", shapes);
  CHECK(formatted == 1);
  CHECK(s.code == SSD_ERROR_INVALID_SHAPE);
  CHECK(s.detail == "op needs more than 2^64 bytes of workspace (shapes b=1)");
}
