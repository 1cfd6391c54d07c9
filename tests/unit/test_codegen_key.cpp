// Codegen, the cache key (stability and sensitivity to every field), and NVRTC compiles.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cache/disk_cache.h"
#include "codegen/codegen.h"
#include "compile/kernel_builder.h"
#include "compile/kernel_key.h"
#include "compile/nvrtc_compiler.h"
#include "config/config.h"
#include "presets.h"

using namespace ssd;

namespace {
KernelKey key_of(const ssd_kernel_config& c) {
  KernelBuilder builder(nullptr);
  auto plan = builder.plan(c);
  REQUIRE(plan.ok());
  return plan->key;
}
}  // namespace

TEST_CASE("generated unit includes the template and instantiates the tile constants") {
  ssd_kernel_config c = *normalize_config(default_config(SSD_KERNEL_CHUNK_CUMSUM_FWD));
  auto u = generate_unit(c);
  REQUIRE(u.ok());
  CHECK(u->source.find("#include \"ssd/chunk_cumsum.cuh\"") != std::string::npos);
  CHECK(u->source.find("constexpr int kBlockH = 16;") != std::string::npos);
  CHECK(u->source.find("extern \"C\" __global__") != std::string::npos);
  CHECK(u->block_threads == 256);
  std::set<std::string> headers(u->headers.begin(), u->headers.end());
  CHECK(headers.count("ssd/chunk_cumsum.cuh") == 1);
  CHECK(headers.count("ssd/primitives/dtype.cuh") == 1);  // transitive
  ssd_kernel_config raw = default_config(SSD_KERNEL_CHUNK_CUMSUM_FWD);
  CHECK(generate_unit(raw).status().code == SSD_ERROR_INTERNAL);  // not normalized
}

TEST_CASE("key is stable and its record carries every field") {
  ssd_kernel_config c = default_config(SSD_KERNEL_CHUNK_CUMSUM_BWD);
  KernelKey a = key_of(c), b = key_of(c);
  CHECK(a.hex == b.hex);
  CHECK(a.hex.size() == 64);
  for (const char* field : {"schema=", "generator=", "unit_sha256=", "nvrtc=", "options=", "target_arch=", "kernel=",
                            "chunk_size=", "dtype=", "flags=", "tile=", "mode=", "arch=", "partials=", "headdim=",
                            "dstate=", "heads_per_group="})
    CHECK_MESSAGE(a.record.find(field) != std::string::npos, field);
  CHECK(a.record.find("/") == std::string::npos);  // no paths
  // A default tile and the same tile spelled out are one kernel.
  ssd_kernel_config spelled = c;
  spelled.tile = default_tile(c);
  CHECK(key_of(spelled).hex == a.hex);
}

TEST_CASE("every specialization field changes the key") {
  const ssd_kernel_config base = default_config(SSD_KERNEL_CHUNK_CUMSUM_BWD);
  std::set<std::string> keys{key_of(base).hex};
  auto variant = [&](const char* what, auto mutate) {
    ssd_kernel_config c = base;
    mutate(c);
    CAPTURE(what);
    CHECK(keys.insert(key_of(c).hex).second);
  };
  variant("kernel", [](ssd_kernel_config& c) { c.kernel = SSD_KERNEL_CHUNK_CUMSUM_FWD; });
  variant("chunk_size", [](ssd_kernel_config& c) { c.chunk_size = 128; });
  variant("dtype", [](ssd_kernel_config& c) { c.dtype = SSD_DTYPE_FP16; });
  variant("flags bias", [](ssd_kernel_config& c) { c.flags = SSD_FLAG_DT_BIAS; });
  variant("flags softplus", [](ssd_kernel_config& c) { c.flags = SSD_FLAG_DT_SOFTPLUS; });
  variant("tile.m", [](ssd_kernel_config& c) { c.tile.m = 64; });
  variant("tile.n", [](ssd_kernel_config& c) { c.tile.n = 16; });
  variant("mode", [](ssd_kernel_config& c) { c.mode = SSD_MODE_FAST; });
  variant("arch sm_80", [](ssd_kernel_config& c) { c.arch = SSD_ARCH_SM80; });
  variant("arch sm_90a", [](ssd_kernel_config& c) { c.arch = SSD_ARCH_SM90A; });
  ssd_kernel_config r = default_config(SSD_KERNEL_REDUCE_HEAD_PARTIALS);
  CHECK(keys.insert(key_of(r).hex).second);
  r.partials = 2;
  CHECK(keys.insert(key_of(r).hex).second);
  r.tile.m = 64;
  CHECK(keys.insert(key_of(r).hex).second);
}

TEST_CASE("the key covers the toolchain, the options and the generated text") {
  ssd_kernel_config c = *normalize_config(default_config(SSD_KERNEL_CHUNK_CUMSUM_FWD));
  GeneratedUnit u = *generate_unit(c);
  const std::vector<std::string> opts = compile_options(c.arch);
  const std::string base = make_key(c, u, opts, "13.0").hex;
  CHECK(make_key(c, u, opts, "13.1").hex != base);
  std::vector<std::string> other = opts;
  other.push_back("-lineinfo");
  CHECK(make_key(c, u, other, "13.0").hex != base);
  std::vector<std::string> reordered(opts.rbegin(), opts.rend());
  CHECK(make_key(c, u, reordered, "13.0").hex != base);  // options are ordered
  GeneratedUnit edited = u;
  edited.source += "\n// changed\n";
  CHECK(make_key(c, edited, opts, "13.0").hex != base);
  CHECK(unit_hash(edited) != unit_hash(u));
}

namespace {
// Every preset kernel of one arch, both modes: one compile per key, on every core, by the library's
// parallel builder. Under ctest, SSD_TEST_WARM_CACHE names a directory emptied once per test run:
// the cubins are stored there too, and CI's cache-warming step reuses them read-only.
void check_preset_kernels(ssd_arch arch) {
  std::vector<ssd_kernel_config> configs;
  std::set<std::string> keys;
  KernelBuilder planner(nullptr);
  for (const ssdgen::ModelPreset& p : ssdgen::model_presets())
    for (ssd_mode m : {SSD_MODE_DETERMINISTIC, SSD_MODE_FAST})
      for (const ssd_kernel_config& raw : ssdgen::preset_configs(p, arch, m)) {
        auto plan = planner.plan(raw);
        REQUIRE_MESSAGE(plan.ok(), plan.status().detail);
        if (keys.insert(plan->key.hex).second) configs.push_back(plan->config);
      }
  REQUIRE(configs.size() > 10);

  std::unique_ptr<cache::DiskCache> cache;
  if (const char* dir = std::getenv("SSD_TEST_WARM_CACHE"); dir && *dir) {
    cache::Options options;
    options.root = dir;
    cache = std::make_unique<cache::DiskCache>(options);
    REQUIRE_MESSAGE(cache->disk_enabled(), "SSD_TEST_WARM_CACHE: ", cache->disabled_reason());
  }
  // keep_ptx: every compile also gives its PTX, so the audit below needs no second compile.
  KernelBuilder builder(cache.get(), /*keep_ptx=*/true);
  const unsigned jobs = std::max(1u, std::thread::hardware_concurrency());
  auto built = builder.build_many(configs, int(jobs));
  // The PTX audit: no atomics in deterministic mode; fast chunk_cumsum_bwd sums with them. Other
  // fast-mode kernels make no PTX claim.
  auto audited = [](const ssd_kernel_config& c) {
    return c.mode == SSD_MODE_DETERMINISTIC || c.kernel == SSD_KERNEL_CHUNK_CUMSUM_BWD;
  };

  int with_report = 0, logs_with_report = 0;
  for (size_t i = 0; i < configs.size(); ++i) {
    const ssd_kernel_config& c = configs[i];
    CAPTURE(config_label(c));
    REQUIRE_MESSAGE(built[i].ok(), built[i].status().detail);
    const BuiltKernel& k = *built[i].value();
    // The resource checks below need this compile's ptxas report: a stale warm cache would hide it.
    REQUIRE_MESSAGE(k.source == BuiltKernel::Source::Compiled,
                    "loaded from SSD_TEST_WARM_CACHE: it must name a directory emptied for this test run");
    CHECK(k.entry.cubin.size() > 1000);
    // NVRTC may skip ptxas (and its report) for PTX it has compiled before in this process:
    // the resource figures are then unknown (-1), never made up.
    const int registers = k.entry.info.registers;
    CHECK((registers > 0 || registers == -1));
    with_report += registers > 0;
    logs_with_report += k.compile_log.find("registers") != std::string::npos;
    // sm_80 chunk_scan spills a little. The backward's measured-fastest default tiles (dcb, dc)
    // spill a few bytes on sm_90a outside their inner loops; more would be a regression.
    if (arch == SSD_ARCH_SM90A && c.kernel != SSD_KERNEL_CHUNK_SCAN_BWD_DX)
      CHECK(k.spill_bytes <= (c.kernel >= SSD_KERNEL_CHUNK_SCAN_BWD_DSTATES ? 64 : 0));
    // chunk_scan_bwd_dx fits its 128 registers (2 blocks of 256 threads per SM) without a spill
    // on sm_80 (it spilled 40 bytes on sm_90a before its 32-bit shared addresses and per-phase
    // pointers); on sm_90a, since its wgmma descriptors are 32-bit words (session 17, 7 % faster),
    // it keeps some values on the stack: 36 + 104 bytes of spill stores and loads, one reload per
    // n step and per phase-B step, the rest per tile (32 bytes before; docs/perf.md, Backward
    // speed log).
    if (c.kernel == SSD_KERNEL_CHUNK_SCAN_BWD_DX && k.spill_bytes >= 0)
      CHECK(k.spill_bytes <= (arch == SSD_ARCH_SM90A ? 160 : 0));
    if (cache) CHECK_MESSAGE(cache->load(k.key.hex, k.key.record).has_value(), "not stored in SSD_TEST_WARM_CACHE");
    if (!audited(c)) continue;
    const std::string& text = k.ptx;
    REQUIRE_MESSAGE(text.find(".entry") != std::string::npos, "no PTX kept from the compile");
    const bool atomics = text.find("atom.") != std::string::npos || text.find("\tred.") != std::string::npos;
    if (c.mode == SSD_MODE_DETERMINISTIC) CHECK_FALSE(atomics);
    if (c.mode == SSD_MODE_FAST && c.kernel == SSD_KERNEL_CHUNK_CUMSUM_BWD) CHECK(atomics);
  }
  // Every ptxas report NVRTC gave is parsed (some NVRTC builds give none: the device machine's).
  CHECK(with_report == logs_with_report);
}
}  // namespace

// Two cases, one per arch, so that ctest runs them as two tests (unit_nvrtc_sm_80, _sm_90a).
TEST_CASE("NVRTC compiles every preset kernel for sm_80 (both modes); deterministic PTX has no atomics") {
  check_preset_kernels(SSD_ARCH_SM80);
}

TEST_CASE("NVRTC compiles every preset kernel for sm_90a (both modes); deterministic PTX has no atomics") {
  check_preset_kernels(SSD_ARCH_SM90A);
}

TEST_CASE("a compile error comes back with the NVRTC log") {
  GeneratedUnit u;
  u.file_name = "broken.cu";
  u.source = "extern \"C\" __global__ void k() { this_does_not_exist(); }\n";
  u.symbol = "k";
  auto r = compile_cubin(u, SSD_ARCH_SM90);
  CHECK(r.status().code == SSD_ERROR_COMPILE);
  CHECK(r.status().detail.find("this_does_not_exist") != std::string::npos);
}

TEST_CASE("build_many compiles a batch once per key, in input order") {
  KernelBuilder builder(nullptr);
  ssd_kernel_config a = default_config(SSD_KERNEL_REDUCE_HEAD_PARTIALS);
  ssd_kernel_config b = a;
  b.partials = 3;
  size_t calls = 0;
  auto results = builder.build_many({a, b, a}, 2, [&](size_t done, size_t total) {
    ++calls;
    CHECK(done <= total);
  });
  REQUIRE(results.size() == 3);
  for (auto& r : results) REQUIRE(r.ok());
  CHECK(calls == 3);
  CHECK(results[0].value()->key.hex == results[2].value()->key.hex);
  CHECK(results[0].value()->key.hex != results[1].value()->key.hex);
  CHECK(results[1].value()->config.partials == 3);
  // The repeat of `a` is served without a second compile.
  const int compiled = int(results[0].value()->source == BuiltKernel::Source::Compiled) +
                       int(results[2].value()->source == BuiltKernel::Source::Compiled);
  CHECK(compiled == 1);
}
