// chunk_state_passing_fwd on sm_90a (templates/ssd/chunk_state_passing_sm90a.cuh): which
// specializations take the wgmma kernel, its tiles (legal ones listed, bad ones refused by field),
// its unit (Spec, threads, dynamic shared memory), and NVRTC + ptxas on the preset's specializations
// and an all-options one: wgmma in the PTX with the A operand from registers, no spills, no
// serialized wgmma. The GPU test (tests/gpu/test_ssd_forward.cpp) compares its bits with the
// mma.sync kernel's.
#include <doctest/doctest.h>

#include <set>
#include <string>
#include <vector>

#include "codegen/codegen.h"
#include "compile/nvrtc_compiler.h"
#include "config/config.h"
#include "presets.h"
#include "ptxas_report_support.h"
#include "ssd/backward_params.cuh"
#include "ssd/forward_params.cuh"
#include "state_pass_test_support.h"
#include "wgmma_test_support.h"

using namespace ssd;

namespace {

using statepass_test::contains;
using statepass_test::count;

using statepass_test::tile_text;
using statepass_test::tile_texts;

const statepass_test::NemotronhStatePass state_pass{SSD_KERNEL_CHUNK_STATE_PASSING_FWD};

}  // namespace

TEST_CASE("state pass on sm_90a: wgmma tiles listed, the default, other archs unchanged") {
  const ssd_kernel_config c = state_pass(SSD_ARCH_SM90A, SSD_FLAG_STATES_IN_DTYPE);
  const std::set<std::string> one_warpgroup = {"64x64x32", "64x64x64", "64x128x32", "64x128x64"};
  std::set<std::string> all = one_warpgroup;
  for (const char* t : {"128x64x32", "128x64x64", "128x128x32", "128x128x64"}) all.insert(t);
  CHECK(tile_texts(legal_tiles(c)) == all);
  auto n = normalize_config(c);
  REQUIRE(n.ok());
  CHECK(tile_text(n->tile) == "128x128x32");
  // m = 128 stacks two heads of one group (headdim 64): not with an odd number of heads per group.
  ssd_kernel_config odd = c;
  odd.heads_per_group = 3;
  CHECK(tile_texts(legal_tiles(odd)) == one_warpgroup);
  CHECK(tile_text(normalize_config(odd).value().tile) == "64x128x32");
  ssd_kernel_config n64 = c;
  n64.dstate = 64;
  CHECK(tile_text(normalize_config(n64).value().tile) == "64x64x64");
  // sm_80 and sm_90 keep the mma.sync kernel's tiles (warp tiles of 32 x 32: 16-wide tiles among them).
  for (ssd_arch arch : {SSD_ARCH_SM80, SSD_ARCH_SM90}) {
    const std::set<std::string> tiles = tile_texts(legal_tiles(state_pass(arch, SSD_FLAG_STATES_IN_DTYPE)));
    CHECK(tiles.count("32x64x64") == 1);
    CHECK(tiles.count("16x16x16") == 1);
    CHECK(tiles.count("64x128x32") == 1);
  }
  // Shapes without whole 64 x 64 state tiles stay on mma.sync on sm_90a, with its tiles.
  ssd_kernel_config narrow = c;
  narrow.headdim = 32;
  CHECK(tile_texts(legal_tiles(narrow)).count("32x64x64") == 1);
  ssd_kernel_config small_n = c;
  small_n.dstate = 32;
  CHECK(tile_texts(legal_tiles(small_n)).count("64x32x64") == 1);
  // headdim 128: two p tiles of 64 (m = 64), or both halves of one head in one block (m = 128), any
  // number of heads per group.
  ssd_kernel_config wide = c;
  wide.headdim = 128;
  wide.dstate = 128;
  wide.heads_per_group = 1;
  CHECK(tile_texts(legal_tiles(wide)) == all);
}

TEST_CASE("state pass on sm_90a: tiles outside the wgmma set are refused naming the tile and the rule") {
  for (const ssd_tile& t : {ssd_tile{32, 64, 64, 0, 0}, ssd_tile{16, 64, 64, 0, 0}, ssd_tile{64, 256, 64, 0, 0},
                            ssd_tile{64, 32, 64, 0, 0}, ssd_tile{64, 64, 16, 0, 0}, ssd_tile{128, 128, 16, 0, 0}}) {
    CAPTURE(tile_text(t));
    const Status s = validate_config(state_pass(SSD_ARCH_SM90A, SSD_FLAG_STATES_IN_DTYPE, t));
    CHECK(s.code == SSD_ERROR_INVALID_CONFIG);
    CHECK(contains(s.detail, "tile: " + tile_text(t)));
    CHECK(contains(s.detail, "chunk_state_passing_fwd"));
    CHECK(contains(s.detail, "on sm_90a (wgmma): m in 64, 128; n in 64, 128; k in 32, 64"));
    // The same tile is fine for the mma.sync kernel where it fits its rules.
    if (t.m == 32) CHECK(validate_config(state_pass(SSD_ARCH_SM80, SSD_FLAG_STATES_IN_DTYPE, t)).ok());
  }
  // n must divide dstate.
  ssd_kernel_config c = state_pass(SSD_ARCH_SM90A, 0, ssd_tile{64, 128, 64, 0, 0});
  c.dstate = 64;
  const Status s = validate_config(c);
  CHECK(s.code == SSD_ERROR_INVALID_CONFIG);
  CHECK(contains(s.detail, "tile: 64x128x64"));
  CHECK(contains(s.detail, "n | dstate, k | chunk_size"));
  // Two heads per block need an even number of heads per group.
  ssd_kernel_config odd = state_pass(SSD_ARCH_SM90A, 0, ssd_tile{128, 64, 64, 0, 0});
  odd.heads_per_group = 5;
  const Status so = validate_config(odd);
  CHECK(so.code == SSD_ERROR_INVALID_CONFIG);
  CHECK(contains(so.detail, "tile: 128x64x64"));
  CHECK(contains(so.detail, "m | headdim, or m a multiple of headdim whose heads are in one group"));
}

TEST_CASE("state pass on sm_90a: the unit selects the wgmma kernel, 128 threads, dynamic shared memory") {
  for (const ssd_tile& t : {ssd_tile{64, 64, 64, 0, 0}, ssd_tile{64, 128, 32, 0, 0}, ssd_tile{128, 128, 32, 0, 0}}) {
    auto u = generate_unit(state_pass(SSD_ARCH_SM90A, SSD_FLAG_STATES_IN_DTYPE, t));
    REQUIRE(u.ok());
    CHECK(contains(u->source, "static constexpr bool kWgmma = true;"));
    CHECK(u->block_threads == 2 * t.m);  // one warpgroup per 64 rows
    CHECK(u->dynamic_shared_bytes ==
          ssd_kernels::fwd_geom::chunk_state_passing_wgmma_smem_bytes(256, t.m, t.n, t.k, 2));
    // Stages of k positions (128 positions ahead), x per warpgroup and B, the weights, with two
    // warpgroups and P in bf16 P_c's staging tile (m rows of n + 4 fp32 words), the alignment.
    const int stages = 2 + 128 / t.k;
    const int staging = t.m == 128 ? t.m * (t.n + 4) * 4 : 0;
    CHECK(u->dynamic_shared_bytes == stages * t.k * (t.m + t.n) * 2 + (t.m / 64) * 8 * 256 + staging + 1024);
    CHECK(u->dynamic_shared_bytes <= 227 * 1024);
  }
  ssd_kernel_config narrow = state_pass(SSD_ARCH_SM90A, SSD_FLAG_STATES_IN_DTYPE);
  narrow.headdim = 32;
  auto un = generate_unit(normalize_config(narrow).value());
  REQUIRE_MESSAGE(un.ok(), un.status().detail);
  CHECK_FALSE(contains(un->source, "kWgmma"));  // no member: the mma.sync kernel, its Spec as on the other archs
  CHECK(un->dynamic_shared_bytes == 0);
  for (ssd_arch arch : {SSD_ARCH_SM80, SSD_ARCH_SM90}) {  // their units as before: no kWgmma member
    auto u = generate_unit(normalize_config(state_pass(arch, SSD_FLAG_STATES_IN_DTYPE)).value());
    REQUIRE_MESSAGE(u.ok(), u.status().detail);
    CHECK_FALSE(contains(u->source, "kWgmma"));
    CHECK(u->dynamic_shared_bytes == 0);
  }
}

TEST_CASE("state pass on sm_90a: the preset's and an all-options specialization compile to wgmma, no spills") {
  // The preset's own state-pass specializations (the forward's, P in bf16; the backward's recompute,
  // two-term, fp32 P), every tile, then all options together and fp16.
  std::vector<ssd_kernel_config> configs;
  std::set<std::string> seen;
  for (const ssdgen::ModelPreset& p : ssdgen::model_presets())
    for (const ssd_kernel_config& k : ssdgen::preset_configs(p, SSD_ARCH_SM90A, SSD_MODE_DETERMINISTIC))
      if (k.kernel == SSD_KERNEL_CHUNK_STATE_PASSING_FWD && p.name == "nemotronh-56b")
        for (const ssd_tile& t : legal_tiles(k)) {
          ssd_kernel_config c = k;
          c.tile = t;
          if (seen.insert(config_label(c) + " " + tile_text(t)).second) configs.push_back(c);
        }
  bool forward = false, recompute = false;
  for (const ssd_kernel_config& c : configs) {
    forward |= (c.flags & SSD_FLAG_STATES_IN_DTYPE) != 0;
    recompute |= (c.flags & SSD_FLAG_TWO_TERM_STATES) != 0;
  }
  CHECK(forward);
  CHECK(recompute);
  CHECK(configs.size() >= 16);  // two specializations x eight tiles
  const uint32_t all = SSD_FLAG_SEQ_IDX | SSD_FLAG_INITIAL_STATES | SSD_FLAG_STATES_IN_DTYPE | SSD_FLAG_TWO_TERM_STATES;
  // Every option the forward or the recompute passes: fp32 P with two terms, P in bf16 with one.
  const uint32_t recompute_all = SSD_FLAG_SEQ_IDX | SSD_FLAG_INITIAL_STATES | SSD_FLAG_TWO_TERM_STATES;
  const uint32_t forward_all = SSD_FLAG_SEQ_IDX | SSD_FLAG_INITIAL_STATES | SSD_FLAG_STATES_IN_DTYPE;
  for (const ssd_tile& t : {ssd_tile{128, 128, 32, 0, 0}, ssd_tile{64, 128, 32, 0, 0}, ssd_tile{64, 64, 64, 0, 0},
                            ssd_tile{128, 128, 64, 0, 0}, ssd_tile{64, 128, 64, 0, 0}})
    for (uint32_t flags : {recompute_all, forward_all, recompute_all | SSD_FLAG_TMA, forward_all | SSD_FLAG_TMA})
      configs.push_back(state_pass(SSD_ARCH_SM90A, flags, t));
  configs.push_back(state_pass(SSD_ARCH_SM90A, all, ssd_tile{64, 64, 64, 0, 0}));
  ssd_kernel_config half = state_pass(SSD_ARCH_SM90A, all, ssd_tile{64, 64, 32, 0, 0});
  half.dtype = SSD_DTYPE_FP16;
  configs.push_back(half);

  int with_report = 0;
  for (const ssd_kernel_config& c : configs) {
    CAPTURE(config_label(c));
    CAPTURE(tile_text(c.tile));
    const CompiledCubin r = wgmma_test::compile_sm90a(c, /*wgmma_spec=*/false);
    INFO(r.log);
    const std::string& ptx = r.ptx;
    const std::string shape = wgmma_test::wgmma_shape(c, c.tile.n);
    // One wgmma per 16 positions of a stage (two with the two-term operand), A from registers, one commit
    // group per 16 positions.
    const size_t per_stage = size_t(c.tile.k / 16) * ((c.flags & SSD_FLAG_TWO_TERM_STATES) ? 2 : 1);
    CHECK(count(ptx, shape) == per_stage);
    CHECK(count(ptx, "wgmma.mma_async") == per_stage);
    CHECK(count(ptx, "wgmma.commit_group.sync.aligned") == size_t(c.tile.k / 16));
    // The waits: 0 at a chunk's end; before each A fragment, the groups left in flight.
    CHECK(contains(ptx, "wgmma.wait_group.sync.aligned 0;"));
    const bool one_in_flight = ssd_kernels::fwd_geom::chunk_state_passing_wgmma_in_flight(c.tile.m, c.tile.n, c.tile.k);
    CHECK(contains(ptx, "wgmma.wait_group.sync.aligned 1;") == one_in_flight);
    for (size_t at = ptx.find("wgmma.mma_async"); at != std::string::npos; at = ptx.find("wgmma.mma_async", at + 1)) {
      const std::string line = ptx.substr(at, ptx.find('\n', at) - at);
      CHECK(contains(line, "}, {%r"));
    }
    CHECK_FALSE(contains(ptx, "mma.sync"));
    CHECK(contains(ptx, "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"));
    // The stages: cp.async copies, fenced for wgmma's async proxy; or with SSD_FLAG_TMA (the preset's
    // on sm_90a) the copy engine's 4-D tensor copies (x per warpgroup, B's column blocks), no fence.
    if (c.flags & SSD_FLAG_TMA) {
      CHECK(contains(ptx, "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"));
      CHECK(contains(ptx, "mbarrier.try_wait.parity.shared::cta.b64"));
      CHECK_FALSE(contains(ptx, "cp.async.cg.shared.global"));
    } else {
      CHECK(contains(ptx, "cp.async.cg.shared.global"));
      CHECK(contains(ptx, "fence.proxy.async.shared::cta"));
    }
    // ptxas: no spills, no serialized wgmma, no fence it had to add itself (C7519); the report checks
    // need a report (NVRTC may skip ptxas for PTX it compiled before in this process: the H200's
    // toolkit does for the preset's units, which other tests compile first).
    with_report += wgmma_test::check_ptxas(r, /*no_added_fence=*/true);
  }
  require_some_ptxas_report(with_report);
}

TEST_CASE("state pass grid: heads per block and rows per head follow the tile, the mma.sync grid unchanged") {
  using namespace ssd_kernels::fwd_geom;
  // Two warpgroups on two heads of a group (headdim 64), or on both halves of one head (headdim 128).
  CHECK(chunk_state_passing_heads_per_block(64, 128) == 2);
  CHECK(chunk_state_passing_head_rows(64, 128) == 64);
  CHECK(chunk_state_tiles(64, 256, chunk_state_passing_head_rows(64, 128), 128) == 2);
  CHECK(chunk_state_passing_heads_per_block(128, 128) == 1);
  CHECK(chunk_state_passing_head_rows(128, 128) == 128);
  CHECK(chunk_state_tiles(128, 256, chunk_state_passing_head_rows(128, 128), 128) == 2);
  // Every tile with m <= headdim (all mma.sync tiles): one head per block, the old grid.
  for (int p : {32, 64, 128})
    for (int m : {16, 32, 64, 128}) {
      if (m > p) continue;
      CHECK(chunk_state_passing_heads_per_block(p, m) == 1);
      CHECK(chunk_state_passing_head_rows(p, m) == m);
    }
  CHECK(chunk_state_passing_wgmma_threads(64) == 128);
  CHECK(chunk_state_passing_wgmma_threads(128) == 256);
  CHECK(chunk_state_passing_wgmma_stages(64) == 4);
  CHECK(chunk_state_passing_wgmma_stages(32) == 6);
  // One wgmma group left running while the next A fragment is built only where registers allow it: every
  // two-warpgroup tile (the backward's 128 x 128 x 64 keeps 0: its own rule, test_state_pass_bwd_wgmma).
  CHECK(chunk_state_passing_wgmma_in_flight(128, 128, 32) == 1);
  CHECK(chunk_state_passing_wgmma_in_flight(128, 64, 64) == 1);
  CHECK(chunk_state_passing_wgmma_in_flight(128, 128, 64) == 1);
  CHECK(ssd_kernels::bwd_geom::chunk_state_passing_bwd_wgmma_in_flight(128, 128, 64) == 0);
  CHECK(chunk_state_passing_wgmma_in_flight(64, 64, 64) == 0);
  CHECK(chunk_state_passing_wgmma_in_flight(64, 128, 32) == 0);
}

TEST_CASE("state pass on sm_90a: SSD_FLAG_TMA takes the TMA stages, its parameter block and mbarriers") {
  const ssd_kernel_config c = state_pass(SSD_ARCH_SM90A, SSD_FLAG_STATES_IN_DTYPE | SSD_FLAG_TMA);
  REQUIRE(validate_config(c).ok());
  CHECK(tile_texts(legal_tiles(c)) == tile_texts(legal_tiles(state_pass(SSD_ARCH_SM90A, SSD_FLAG_STATES_IN_DTYPE))));
  auto n = normalize_config(c);
  REQUIRE(n.ok());
  auto u = generate_unit(n.value());
  REQUIRE(u.ok());
  CHECK(contains(u->source, "static constexpr bool kTma = true;"));
  CHECK(contains(u->source, "ssd_kernels::ChunkStatePassingFwdTmaParams params"));
  namespace g = ssd_kernels::fwd_geom;
  CHECK(u->dynamic_shared_bytes == g::chunk_state_passing_wgmma_smem_bytes(256, 128, 128, 64, 2, true));
  CHECK(u->dynamic_shared_bytes == g::chunk_state_passing_wgmma_smem_bytes(256, 128, 128, 64, 2) + 64);
  // Without the flag: the family's block, no kTma.
  auto plain = generate_unit(normalize_config(state_pass(SSD_ARCH_SM90A, SSD_FLAG_STATES_IN_DTYPE)).value());
  REQUIRE(plain.ok());
  CHECK_FALSE(contains(plain->source, "kTma"));
  CHECK(contains(plain->source, "ssd_kernels::ChunkStatePassingFwdParams params"));
  // The forward's TMA specialization defaults to 64-position stages (measured, docs/perf.md entry 16);
  // the recompute's (two-term, fp32 P) keeps 32.
  CHECK(tile_text(n->tile) == "128x128x64");
  CHECK(tile_text(normalize_config(state_pass(SSD_ARCH_SM90A, SSD_FLAG_TWO_TERM_STATES | SSD_FLAG_TMA)).value().tile) ==
        "128x128x32");
  // Refused where only the mma.sync kernel runs.
  for (ssd_arch arch : {SSD_ARCH_SM80, SSD_ARCH_SM90}) {
    const Status s = validate_config(state_pass(arch, SSD_FLAG_STATES_IN_DTYPE | SSD_FLAG_TMA));
    REQUIRE_FALSE(s.ok());
    CHECK(s.code == SSD_ERROR_INVALID_CONFIG);
    CHECK(contains(s.detail, "flags: tma"));
  }
}
