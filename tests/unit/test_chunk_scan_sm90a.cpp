// chunk_scan_fwd's sm_90a implementation (templates/ssd/chunk_scan_sm90a.cuh, wgmma) on the CPU: which
// configs take it (sm_90a, shapes in 64-wide steps) and which keep the mma.sync kernel, its tiles and
// their refusals, its launch figures, and NVRTC compiles of the preset's and the all-options
// specializations for sm_90a: wgmma in the PTX, no spills, no wgmma serialization.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "codegen/codegen.h"
#include "compile/nvrtc_compiler.h"
#include "config/config.h"
#include "kernels/family.h"
#include "ssd/forward_params.cuh"

using namespace ssd;

namespace {

// nemotronh-56b's chunk_scan_fwd as ssd_forward asks for it (P in x's dtype, D per head).
ssd_kernel_config preset(ssd_arch arch) {
  ssd_kernel_config c = default_config(SSD_KERNEL_CHUNK_SCAN_FWD);
  c.headdim = 64;
  c.dstate = 256;
  c.heads_per_group = 32;
  c.flags = SSD_FLAG_D | SSD_FLAG_STATES_IN_DTYPE;
  c.arch = arch;
  return c;
}

bool contains(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

GeneratedUnit unit_of(const ssd_kernel_config& c) {
  auto n = normalize_config(c);
  REQUIRE_MESSAGE(n.ok(), n.status().detail);
  auto u = generate_unit(*n);
  REQUIRE_MESSAGE(u.ok(), u.status().detail);
  return *u;
}

bool same_tiles(const std::vector<ssd_tile>& a, const std::vector<ssd_tile>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].m != b[i].m || a[i].n != b[i].n || a[i].k != b[i].k) return false;
  return true;
}

}  // namespace

TEST_CASE("chunk_scan_fwd sm_90a: the preset takes the wgmma kernel, 64x64x64, dynamic shared memory") {
  const ssd_kernel_config c = preset(SSD_ARCH_SM90A);
  REQUIRE(validate_config(c).ok());
  const ssd_tile d = default_tile(c);
  CHECK((d.m == 64 && d.n == 64 && d.k == 64));
  CHECK(same_tiles(legal_tiles(c), {ssd_tile{64, 64, 64, 0, 0}, ssd_tile{128, 64, 64, 0, 0}}));
  const GeneratedUnit u = unit_of(c);
  CHECK(contains(u.source, "static constexpr bool kWgmma = true;"));
  CHECK(contains(u.source, "__launch_bounds__(128, 4)"));  // 128 registers: 4 blocks per SM
  CHECK(u.block_threads == 128);
  namespace g = ssd_kernels::fwd_geom;
  CHECK(u.dynamic_shared_bytes == g::chunk_scan_wg_smem_bytes(256, 64, 64, false));
  // Two stages of (C or x 8 KiB | P 8 KiB or CB 18 KiB), A and Δ rows, 1 KiB slack: 4 blocks per SM
  // by shared memory and by registers (128 each, with z too); with headdim 128 3 (168 each).
  CHECK(u.dynamic_shared_bytes == 2 * 26 * 1024 + 2 * 1024 + 1024);
  CHECK(g::chunk_scan_wg_blocks_per_sm(256, 64, 64, false, 128) == 4);
  CHECK(g::chunk_scan_wg_blocks_per_sm(256, 64, 64, true, 128) == 4);
  CHECK(g::chunk_scan_wg_blocks_per_sm(256, 64, 64, false, 168) == 3);
  ssd_kernel_config with_z = c;
  with_z.flags |= SSD_FLAG_Z;
  CHECK(contains(unit_of(with_z).source, "__launch_bounds__(128, 4)"));
  // Phase A's ring (C and P only) holds more, smaller stages in the same body.
  CHECK(g::chunk_scan_wg_stages_a(64, 64) == 3);
  CHECK(g::chunk_scan_wg_stages_a(128, 64) == 4);
  CHECK(g::chunk_scan_wg_stages_a(64, 128) == 2);
  CHECK(std::find(u.headers.begin(), u.headers.end(), "ssd/chunk_scan_sm90a.cuh") != u.headers.end());
  // 128 rows: two warpgroups (256 threads), 2 blocks per SM (registers and shared memory).
  ssd_kernel_config m128 = c;
  m128.tile = ssd_tile{128, 64, 64, 0, 0};
  const GeneratedUnit u128 = unit_of(m128);
  CHECK(u128.block_threads == 256);
  CHECK(contains(u128.source, "__launch_bounds__(256, 2)"));
  CHECK(u128.dynamic_shared_bytes == 2 * 52 * 1024 + 2 * 1024 + 1024);
}

TEST_CASE("chunk_scan_fwd sm_90a: headdim 128 has three tiles; 128 columns run 2 blocks per SM") {
  ssd_kernel_config c = preset(SSD_ARCH_SM90A);
  c.headdim = 128;
  CHECK(same_tiles(legal_tiles(c),
                   {ssd_tile{64, 64, 64, 0, 0}, ssd_tile{64, 128, 64, 0, 0}, ssd_tile{128, 64, 64, 0, 0}}));
  const ssd_tile d = default_tile(c);
  CHECK((d.m == 64 && d.n == 64 && d.k == 64));
  CHECK(contains(unit_of(c).source, "__launch_bounds__(128, 3)"));
  c.tile = ssd_tile{64, 128, 64, 0, 0};
  const GeneratedUnit u = unit_of(c);
  CHECK(contains(u.source, "__launch_bounds__(128, 2)"));
  CHECK(u.dynamic_shared_bytes == ssd_kernels::fwd_geom::chunk_scan_wg_smem_bytes(256, 64, 128, false));
}

TEST_CASE("chunk_scan_fwd sm_90a: a tile of the mma.sync kernel is refused naming the field and the rule") {
  for (ssd_tile t : {ssd_tile{64, 64, 32, 0, 0}, ssd_tile{32, 64, 64, 0, 0}, ssd_tile{64, 32, 64, 0, 0}}) {
    ssd_kernel_config c = preset(SSD_ARCH_SM90A);
    c.tile = t;
    CAPTURE(config_label(c));
    const Status s = validate_config(c);
    REQUIRE_FALSE(s.ok());
    CHECK(s.code == SSD_ERROR_INVALID_CONFIG);
    CHECK(contains(s.detail, "tile: "));
    CHECK(contains(s.detail, "m in 64, 128, n in 64, 128, k = 64 (sm_90a wgmma path)"));
  }
  struct Bad {
    int headdim, chunk;
    ssd_tile tile;
    const char* value;
    const char* rule;
  };
  for (const Bad& b : {Bad{64, 256, ssd_tile{64, 128, 64, 0, 0}, "tile: 64x128x64", "m | chunk_size, n | headdim"},
                       Bad{64, 64, ssd_tile{128, 64, 64, 0, 0}, "tile: 128x64x64", "m | chunk_size, n | headdim"},
                       Bad{128, 256, ssd_tile{128, 128, 64, 0, 0}, "tile: 128x128x64", "m * n <= 8192"}}) {
    ssd_kernel_config c = preset(SSD_ARCH_SM90A);
    c.headdim = b.headdim;
    c.chunk_size = b.chunk;
    c.tile = b.tile;
    CAPTURE(config_label(c));
    const Status s = validate_config(c);
    REQUIRE_FALSE(s.ok());
    CHECK(contains(s.detail, b.value));
    CHECK(contains(s.detail, b.rule));
  }
}

TEST_CASE("chunk_scan_fwd: sm_80, sm_90 and sm_90a shapes off the 64 grid keep the mma.sync kernel and tiles") {
  const std::vector<ssd_tile> mma_tiles = legal_tiles(preset(SSD_ARCH_SM80));
  CHECK(mma_tiles.size() > 1);
  for (ssd_arch arch : {SSD_ARCH_SM80, SSD_ARCH_SM90}) {
    const ssd_kernel_config c = preset(arch);
    CHECK(same_tiles(legal_tiles(c), mma_tiles));
    const ssd_tile d = default_tile(c);
    CHECK((d.m == 64 && d.n == 64 && d.k == 32));
    const GeneratedUnit u = unit_of(c);
    CHECK_FALSE(contains(u.source, "kWgmma"));
    CHECK(u.dynamic_shared_bytes == 0);
  }
  // headdim 32 or dstate 16 on sm_90a: the mma.sync kernel (and its tile rules).
  for (int which = 0; which < 2; ++which) {
    ssd_kernel_config c = preset(SSD_ARCH_SM90A);
    if (which == 0) c.headdim = 32;
    else c.dstate = 16;
    CAPTURE(config_label(c));
    REQUIRE(validate_config(c).ok());
    const GeneratedUnit u = unit_of(c);
    CHECK_FALSE(contains(u.source, "kWgmma"));
    CHECK(u.dynamic_shared_bytes == 0);
    CHECK(default_tile(c).k == 32);
  }
}

TEST_CASE("chunk_scan_fwd sm_90a: NVRTC compiles the wgmma kernel (preset, all options): wgmma, no spills") {
  struct Case {
    const char* label;
    ssd_dtype dtype;
    int headdim, dstate, chunk;
    uint32_t flags;
    int tile_n;
  };
  const uint32_t all = SSD_FLAG_D | SSD_FLAG_D_PER_HEADDIM | SSD_FLAG_Z | SSD_FLAG_SEQ_IDX;
  for (const Case& k : {Case{"preset", SSD_DTYPE_BF16, 64, 256, 256, SSD_FLAG_D | SSD_FLAG_STATES_IN_DTYPE, 64},
                        Case{"all options, fp16", SSD_DTYPE_FP16, 64, 256, 256, all | SSD_FLAG_STATES_IN_DTYPE, 64},
                        Case{"headdim 128, chunk 128, n 64", SSD_DTYPE_BF16, 128, 128, 128, all | SSD_FLAG_STATES_IN_DTYPE, 64},
                        Case{"headdim 128, chunk 128, n 128", SSD_DTYPE_BF16, 128, 128, 128, all | SSD_FLAG_STATES_IN_DTYPE, 128},
                        Case{"fp32 states", SSD_DTYPE_BF16, 64, 128, 256, SSD_FLAG_D | SSD_FLAG_Z, 64},
                        Case{"fp32 states, all options", SSD_DTYPE_FP16, 64, 256, 256, all, 64},
                        Case{"128 rows, preset", SSD_DTYPE_BF16, 64, 256, 256, SSD_FLAG_D | SSD_FLAG_STATES_IN_DTYPE, 64},
                        Case{"128 rows, all options", SSD_DTYPE_FP16, 64, 256, 256, all | SSD_FLAG_STATES_IN_DTYPE, 64}}) {
    CAPTURE(k.label);
    ssd_kernel_config c = preset(SSD_ARCH_SM90A);
    c.dtype = k.dtype;
    c.headdim = k.headdim;
    c.dstate = k.dstate;
    c.chunk_size = k.chunk;
    c.flags = k.flags;
    const int rows = std::string(k.label).rfind("128 rows", 0) == 0 ? 128 : 64;
    c.tile = ssd_tile{rows, k.tile_n, 64, 0, 0};
    const GeneratedUnit u = unit_of(c);
    REQUIRE(contains(u.source, "kWgmma = true"));
    auto cubin = compile_cubin(u, SSD_ARCH_SM90A, /*with_ptx=*/true);
    REQUIRE_MESSAGE(cubin.ok(), cubin.status().detail);
    INFO(cubin->log);
    const std::string ty = k.dtype == SSD_DTYPE_BF16 ? ".bf16.bf16" : ".f16.f16";
    const std::string n = std::to_string(k.tile_n);
    // Phase A (both operands from shared memory) and phase B (W from registers) in its three loops
    // (no mask, mask, guarded exp): 4 + 3 x 4 k16 steps.
    CHECK(count(cubin->ptx, "wgmma.mma_async.sync.aligned.m64n" + n + "k16.f32" + ty) == 16);
    CHECK(count(cubin->ptx, "wgmma.mma_async") == 16);
    // W's exp: unguarded (ex2.approx.ftz) in the first two loops, __expf (ex2.approx.f32, which ptxas
    // guards against subnormal results) in the third; 8 elements per k16 step each.
    CHECK(count(cubin->ptx, "ex2.approx.ftz.f32") == 2 * 4 * 8);
    // With z, the gate's eight reciprocals on its branch-free fast path (primitives/sigmoid.cuh).
    CHECK(count(cubin->ptx, "rcp.approx.ftz.f32") == ((k.flags & SSD_FLAG_Z) ? 8u : 0u));
    CHECK(contains(cubin->ptx, "cp.async.cg.shared.global"));
    CHECK(contains(cubin->ptx, "fence.proxy.async.shared::cta"));
    CHECK_FALSE(contains(cubin->ptx, "mma.sync"));
    // ptxas warns when it serializes wgmma (a fragment or accumulator touched while in flight).
    CHECK_FALSE(contains(cubin->log, "wgmma"));
    // 128 rows at 2 blocks per SM (128 registers) spill a few bytes, and so do 64 rows with z and
    // headdim 64 at 4 blocks (128 registers: 4-16 bytes, measured faster than 3 blocks without the
    // spill, docs/perf.md); everything else none.
    const bool z_at_128 = rows == 64 && k.headdim == 64 && (k.flags & SSD_FLAG_Z) && (k.flags & SSD_FLAG_STATES_IN_DTYPE);
    if (cubin->report.registers > 0) CHECK(cubin->report.spill_bytes <= (rows == 128 ? 64 : z_at_128 ? 16 : 0));
  }
}
