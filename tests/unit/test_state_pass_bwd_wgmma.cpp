// chunk_state_passing_bwd on sm_90a (templates/ssd/chunk_state_passing_bwd_sm90a.cuh): which
// specializations take the wgmma kernel, its tiles (legal ones listed, bad ones refused by field), its
// unit (Spec, threads, dynamic shared memory), its grid, and NVRTC + ptxas on the presets' and
// all-options specializations: wgmma in the PTX with the A operand from registers (two per 16
// positions for dy's two-term operand, one more for dy_lo with z), the deterministic ρ stores, no
// spills at the default tile (64 x 64 x 64) nor at 128 x 64 x 64. The GPU test "ssd_backward on sm_90a" compares its outputs with the
// mma.sync kernel's (an sm_90 build) bit for bit.
#include <doctest/doctest.h>

#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "codegen/codegen.h"
#include "compile/nvrtc_compiler.h"
#include "config/config.h"
#include "presets.h"
#include "ptxas_report_support.h"
#include "ssd/backward_params.cuh"
#include "state_pass_test_support.h"
#include "wgmma_test_support.h"

using namespace ssd;

namespace {

using statepass_test::contains;
using statepass_test::count;

using statepass_test::tile_text;
using statepass_test::tile_texts;

const statepass_test::NemotronhStatePass fused{SSD_KERNEL_CHUNK_STATE_PASSING_BWD};

}  // namespace

TEST_CASE("chunk_state_passing_bwd on sm_90a: wgmma tiles listed, the default, other archs and shapes unchanged") {
  const ssd_kernel_config c = fused(SSD_ARCH_SM90A, 0);
  const std::set<std::string> one_warpgroup = {"64x64x32", "64x64x64", "64x128x32", "64x128x64"};
  std::set<std::string> all = one_warpgroup;
  for (const char* t : {"128x64x32", "128x64x64", "128x128x32", "128x128x64"}) all.insert(t);  // two heads a block
  CHECK(tile_texts(legal_tiles(c)) == all);
  CHECK(tile_text(normalize_config(c).value().tile) == "64x64x64");
  CHECK(tile_text(normalize_config(fused(SSD_ARCH_SM90A, SSD_FLAG_Z | SSD_FLAG_SEQ_IDX)).value().tile) == "64x64x64");
  // Two heads per block need an even number of heads per group: else one warpgroup only.
  ssd_kernel_config odd = c;
  odd.heads_per_group = 3;
  CHECK(tile_texts(legal_tiles(odd)) == one_warpgroup);
  CHECK(tile_text(normalize_config(odd).value().tile) == "64x64x64");
  // sm_80 and sm_90 keep the mma.sync kernel's tiles and default.
  for (ssd_arch arch : {SSD_ARCH_SM80, SSD_ARCH_SM90}) {
    const ssd_kernel_config m = fused(arch, 0);
    const std::set<std::string> tiles = tile_texts(legal_tiles(m));
    CHECK(tiles.count("32x32x16") == 1);
    CHECK(tiles.count("128x64x32") == 0);  // m = 128 > headdim: not an mma.sync tile
    CHECK(tile_text(normalize_config(m).value().tile) == "64x64x64");
  }
  // Chunks shorter than the walk's rule (passes · chunk_size < 128; the rule of its first form, whose
  // two P_c buffers were copied a ring's distance ahead) stay on mma.sync: chunk 64 without z; chunk 64
  // with z (two passes), 128 and 256 take wgmma (the legal chunk sizes are 64, 128, 256).
  CHECK_FALSE(ssd_kernels::bwd_geom::chunk_state_passing_bwd_wgmma_walk(32, 2));
  for (auto [chunk, flags, wgmma] : {std::tuple{64, 0u, false}, std::tuple{64, uint32_t(SSD_FLAG_SEQ_IDX), false},
                                     std::tuple{64, uint32_t(SSD_FLAG_Z), true},
                                     std::tuple{64, uint32_t(SSD_FLAG_Z | SSD_FLAG_SEQ_IDX), true},
                                     std::tuple{128, 0u, true}, std::tuple{256, uint32_t(SSD_FLAG_SEQ_IDX), true}}) {
    CAPTURE(chunk);
    CAPTURE(flags);
    ssd_kernel_config k = c;
    k.chunk_size = chunk;
    k.flags = flags;
    CHECK(ssd_kernels::bwd_geom::chunk_state_passing_bwd_wgmma_walk(chunk, (flags & SSD_FLAG_Z) ? 2 : 1) == wgmma);
    CHECK(tile_texts(legal_tiles(k)).count("128x64x64") == (wgmma ? 1u : 0u));  // two heads per block: wgmma only
    auto u = generate_unit(normalize_config(k).value());
    REQUIRE_MESSAGE(u.ok(), u.status().detail);
    CHECK(contains(u->source, "kWgmma") == wgmma);
  }
  // Shapes without whole 64 x 64 state tiles stay on mma.sync on sm_90a, with its tiles.
  ssd_kernel_config narrow = c;
  narrow.headdim = 32;
  CHECK(tile_texts(legal_tiles(narrow)).count("32x32x16") == 1);
  ssd_kernel_config small_n = c;
  small_n.dstate = 32;
  CHECK(tile_texts(legal_tiles(small_n)).count("64x32x64") == 1);
}

TEST_CASE("chunk_state_passing_bwd on sm_90a: tiles outside the wgmma set are refused naming the tile and the rule") {
  for (const ssd_tile& t : {ssd_tile{32, 64, 64, 0, 0}, ssd_tile{64, 32, 64, 0, 0}, ssd_tile{64, 256, 32, 0, 0},
                            ssd_tile{64, 64, 16, 0, 0}}) {
    CAPTURE(tile_text(t));
    const Status s = validate_config(fused(SSD_ARCH_SM90A, SSD_FLAG_Z, t));
    CHECK(s.code == SSD_ERROR_INVALID_CONFIG);
    CHECK(contains(s.detail, "tile: " + tile_text(t)));
    CHECK(contains(s.detail, "chunk_state_passing_bwd"));
    CHECK(contains(s.detail, "on sm_90a (wgmma): m in 64, 128; n in 64, 128; k in 32, 64"));
  }
  // Two heads of 128 columns fit with one P_c buffer (with two they took 237 and 269 KiB, refused).
  for (const ssd_tile& t : {ssd_tile{128, 128, 32, 0, 0}, ssd_tile{128, 128, 64, 0, 0}}) {
    CAPTURE(tile_text(t));
    CHECK(ssd_kernels::bwd_geom::chunk_state_passing_bwd_wgmma_smem_bytes(256, t.m, t.n, t.k, true) <= 227 * 1024);
    CHECK(validate_config(fused(SSD_ARCH_SM90A, 0, t)).ok());
  }
  ssd_kernel_config odd = fused(SSD_ARCH_SM90A, 0, ssd_tile{128, 64, 32, 0, 0});
  odd.heads_per_group = 5;
  const Status s = validate_config(odd);
  CHECK(s.code == SSD_ERROR_INVALID_CONFIG);
  CHECK(contains(s.detail, "m | headdim, or m a multiple of headdim whose heads are in one group"));
  // Fast mode stays refused (the fused pass writes only the deterministic ρ slots).
  ssd_kernel_config fast = fused(SSD_ARCH_SM90A, 0);
  fast.mode = SSD_MODE_FAST;
  CHECK(validate_config(fast).code == SSD_ERROR_INVALID_CONFIG);
}

TEST_CASE("chunk_state_passing_bwd on sm_90a: the unit selects the wgmma kernel, 128 threads a warpgroup, dynamic shared memory") {
  for (const ssd_tile& t : {ssd_tile{128, 64, 32, 0, 0}, ssd_tile{64, 64, 64, 0, 0}, ssd_tile{64, 128, 64, 0, 0}}) {
    CAPTURE(tile_text(t));
    auto u = generate_unit(fused(SSD_ARCH_SM90A, SSD_FLAG_Z | SSD_FLAG_TMA, t));
    REQUIRE_MESSAGE(u.ok(), u.status().detail);
    CHECK(contains(u->source, "static constexpr bool kWgmma = true;"));
    CHECK(u->block_threads == 2 * t.m);
    // Its cp.async twin (no TMA): the forward's stages (128 positions ahead), P_c's buffer, no mbarriers,
    // one block as the bound.
    auto twin = generate_unit(fused(SSD_ARCH_SM90A, SSD_FLAG_Z, t));
    REQUIRE_MESSAGE(twin.ok(), twin.status().detail);
    CHECK(twin->dynamic_shared_bytes == ssd_kernels::bwd_geom::chunk_state_passing_bwd_wgmma_smem_bytes(256, t.m, t.n, t.k));
    CHECK(twin->dynamic_shared_bytes ==
          (2 + 128 / t.k) * t.k * (t.m + t.n) * 2 + (t.m / 64) * 8 * 256 + 1024 + t.m * (t.n + 8) * 4);
    CHECK(contains(twin->source, "__launch_bounds__(" + std::to_string(2 * t.m) + ", 1)"));
    // Stages of k positions (128 positions ahead), dy per warpgroup and C, the
    // weights of two chunks per warpgroup, the alignment, P_c's buffer (rows of n + 8 fp32); no output
    // staging tile; with TMA (the default where the maps fit) 8 mbarriers.
    const int stages = 2 + 128 / t.k;
    CHECK(u->dynamic_shared_bytes ==
          stages * t.k * (t.m + t.n) * 2 + (t.m / 64) * 8 * 256 + 1024 + t.m * (t.n + 8) * 4 + 8 * 8);
    CHECK(u->dynamic_shared_bytes ==
          ssd_kernels::bwd_geom::chunk_state_passing_bwd_wgmma_smem_bytes(256, t.m, t.n, t.k, true));
    CHECK(u->dynamic_shared_bytes <= 227 * 1024);
    // One block as the launch bound; two such blocks fit an SM at 64 x 64 (85 KiB each at k = 64).
    CHECK(contains(u->source, "__launch_bounds__(" + std::to_string(2 * t.m) + ", 1)"));
    if (t.m == 64 && t.n == 64) CHECK(2 * (u->dynamic_shared_bytes + 1024) <= 228 * 1024);
  }
  for (ssd_arch arch : {SSD_ARCH_SM80, SSD_ARCH_SM90}) {  // their units as before: no kWgmma member
    auto u = generate_unit(normalize_config(fused(arch, SSD_FLAG_Z)).value());
    REQUIRE_MESSAGE(u.ok(), u.status().detail);
    CHECK_FALSE(contains(u->source, "kWgmma"));
    CHECK(u->dynamic_shared_bytes == 0);
  }
}

TEST_CASE("chunk_state_passing_bwd on sm_90a: the presets' and all-options specializations compile to wgmma, no spills "
          "(at most 16 bytes of stores at 128 x 128 x 64)") {
  std::vector<ssd_kernel_config> configs;
  std::set<std::string> seen;
  for (const ssdgen::ModelPreset& p : ssdgen::model_presets())
    for (const ssd_kernel_config& k : ssdgen::preset_configs(p, SSD_ARCH_SM90A, SSD_MODE_DETERMINISTIC))
      if (k.kernel == SSD_KERNEL_CHUNK_STATE_PASSING_BWD && seen.insert(config_label(k) + tile_text(k.tile)).second)
        configs.push_back(k);
  CHECK(configs.size() >= 2);
  // Every option the backward passes (z: the dy_lo pass; seq_idx) at the default tile 64 x 64 x 64 and
  // at the two-warpgroup 128 x 64 x 64, in bf16 and fp16, and with an odd number of heads per group.
  for (const ssd_tile& t : {ssd_tile{64, 64, 64, 0, 0}, ssd_tile{128, 64, 64, 0, 0}})
    for (ssd_dtype dtype : {SSD_DTYPE_BF16, SSD_DTYPE_FP16}) {
      ssd_kernel_config c = fused(SSD_ARCH_SM90A, SSD_FLAG_Z | SSD_FLAG_SEQ_IDX, t);
      c.dtype = dtype;
      configs.push_back(c);
    }
  configs.push_back(fused(SSD_ARCH_SM90A, SSD_FLAG_Z, ssd_tile{64, 64, 64, 0, 0}));
  ssd_kernel_config odd = fused(SSD_ARCH_SM90A, SSD_FLAG_Z | SSD_FLAG_SEQ_IDX, ssd_tile{64, 64, 64, 0, 0});
  odd.heads_per_group = 3;
  configs.push_back(odd);
  int with_report = 0;
  for (const ssd_kernel_config& c : configs) {
    CAPTURE(config_label(c));
    CAPTURE(tile_text(c.tile));
    REQUIRE(validate_config(c).ok());
    const CompiledCubin r = wgmma_test::compile_sm90a(c);
    INFO(r.log);
    const std::string& ptx = r.ptx;
    const std::string shape = wgmma_test::wgmma_shape(c, c.tile.n);
    // Per 16 positions of a stage: dy's two terms; with z the dy_lo pass's one term (its own loop).
    const size_t k16 = size_t(c.tile.k / 16);
    const size_t wgmmas = 2 * k16 + ((c.flags & SSD_FLAG_Z) ? k16 : 0);
    CHECK(count(ptx, shape) == wgmmas);
    CHECK(count(ptx, "wgmma.mma_async") == wgmmas);
    for (size_t at = ptx.find("wgmma.mma_async"); at != std::string::npos; at = ptx.find("wgmma.mma_async", at + 1)) {
      const std::string line = ptx.substr(at, ptx.find('\n', at) - at);
      CHECK(contains(line, "}, {%r"));  // A from registers
    }
    CHECK(contains(ptx, "wgmma.wait_group.sync.aligned 0;"));
    // Before each of dy's A fragments, the groups left in flight: one at 64 x 64 x 64 and 128 x 64 x 64;
    // none at 128 x 128 x 64 (the presets' tile where a slice gives it a block per SM: ssd_backward's
    // with_state_pass_tile), which sits at the 255-register limit.
    const bool wide = c.tile.m == 128 && c.tile.n == 128;
    const int in_flight = ssd_kernels::bwd_geom::chunk_state_passing_bwd_wgmma_in_flight(c.tile.m, c.tile.n, c.tile.k);
    CHECK(in_flight == (wide ? 0 : 1));
    CHECK(contains(ptx, "wgmma.wait_group.sync.aligned 1;") == !wide);
    CHECK_FALSE(contains(ptx, "mma.sync"));
    CHECK_FALSE(contains(ptx, "atom."));  // deterministic: the ρ slots are plain stores
    CHECK(contains(ptx, "shfl.sync.bfly.b32"));
    CHECK(contains(ptx, "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"));
    CHECK(contains(ptx, "fence.proxy.async.shared::cta"));
    if (!wide) {
      with_report += wgmma_test::check_ptxas(r, /*no_added_fence=*/true);
    } else if (r.report.registers > 0) {
      // 128 x 128 x 64: no serialized wgmma; at most 16 bytes of spill stores (and as many loads: spill_bytes
      // counts both) at 252-255 registers (bf16 with TMA 12, fp16 none), measured faster with them than
      // the default tile without (docs/perf.md, session 31).
      ++with_report;
      CHECK_FALSE(contains(r.log, "serialized"));
      CHECK_FALSE(contains(r.log, "C7519"));
      CHECK(r.report.spill_bytes <= 32);
    }
  }
  require_some_ptxas_report(with_report);
}

TEST_CASE("chunk_state_passing_bwd on sm_90a: geometry helpers follow the forward's wgmma state pass") {
  using namespace ssd_kernels;
  for (int bk : {32, 64})
    for (int bn : {64, 128})
      for (int bm : {64, 128}) {
        for (bool tma : {false, true}) {
          const int stages = fwd_geom::chunk_state_passing_wgmma_stages(bk);
          CHECK(bwd_geom::chunk_state_passing_bwd_wgmma_smem_bytes(256, bm, bn, bk, tma) ==
                stages * fwd_geom::chunk_state_passing_wgmma_stage_bytes(bm, bn, bk) + (bm / 64) * 8 * 256 +
                    bm * (bn + 8) * 4 + (tma ? 64 : 0) + 1024);
        }
      }
  // One wgmma group in flight where the forward keeps one, and at 64 x 64 x 64; the other 64-row tiles none.
  CHECK(bwd_geom::chunk_state_passing_bwd_wgmma_in_flight(64, 64, 64) == 1);
  CHECK(bwd_geom::chunk_state_passing_bwd_wgmma_in_flight(128, 64, 64) == 1);
  CHECK(bwd_geom::chunk_state_passing_bwd_wgmma_in_flight(128, 128, 32) == 1);
  CHECK(bwd_geom::chunk_state_passing_bwd_wgmma_in_flight(64, 64, 32) == 0);
  CHECK(bwd_geom::chunk_state_passing_bwd_wgmma_in_flight(64, 128, 64) == 0);
  CHECK(bwd_geom::chunk_state_passing_bwd_wgmma_tile_problem(256, 64, 256, 32, 128, 64, 32) == nullptr);
  CHECK(bwd_geom::chunk_state_passing_bwd_wgmma_tile_problem(256, 64, 256, 3, 128, 64, 32) != nullptr);
}
