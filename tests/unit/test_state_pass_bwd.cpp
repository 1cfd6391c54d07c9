// chunk_state_passing_bwd (templates/ssd/chunk_state_passing_bwd.cuh: chunk_scan_bwd_dstates and
// state_passing_bwd fused): its tiles (legal ones listed, bad ones refused naming the field and the
// rule), deterministic mode only, the plan's choice (fused by default, the staged pair with
// BackwardTuning::staged_state_pass or the fast kernels) and its workspace (no dP section), and
// NVRTC + ptxas on the presets' and all-options specializations: no spills (the mma.sync kernel, i.e.
// sm_80 and sm_90; test_state_pass_bwd_wgmma.cpp has sm_90a's). The GPU test
// (tests/gpu/test_ssd_backward_full.cpp) compares its outputs with the staged pair's bit for bit.
#include <doctest/doctest.h>

#include <set>
#include <string>
#include <vector>

#include "codegen/codegen.h"
#include "compile/nvrtc_compiler.h"
#include "config/config.h"
#include "call_args_support.h"
#include "ops/ssd_backward.h"
#include "ops/tensor_check.h"
#include "presets.h"
#include "ptxas_report_support.h"
#include "ssd/backward_params.cuh"
#include "state_pass_test_support.h"

using namespace ssd;

namespace {

using statepass_test::contains;

using statepass_test::tile_text;
using statepass_test::tile_texts;

const statepass_test::NemotronhStatePass fused{SSD_KERNEL_CHUNK_STATE_PASSING_BWD};

}  // namespace

TEST_CASE("chunk_state_passing_bwd: legal tiles cover whole 32-element rho blocks, the default") {
  // The mma.sync kernel's tiles (sm_80, sm_90; sm_90a's wgmma kernel: test_state_pass_bwd_wgmma.cpp).
  const ssd_kernel_config c = fused(SSD_ARCH_SM90, SSD_FLAG_Z);
  const std::vector<ssd_tile> tiles = legal_tiles(c);
  REQUIRE_FALSE(tiles.empty());
  for (const ssd_tile& t : tiles) {
    CAPTURE(tile_text(t));
    CHECK(t.n % 32 == 0);
    ssd_kernel_config k = c;
    k.tile = t;
    CHECK(validate_config(k).ok());
  }
  const std::set<std::string> texts = tile_texts(tiles);
  CHECK(texts.count("64x64x64") == 1);
  CHECK(texts.count("32x32x16") == 1);
  CHECK(texts.count("16x32x32") == 1);
  CHECK(texts.count("64x16x64") == 0);  // n = 16 splits a block of 32 consecutive p*n elements
  auto n = normalize_config(c);
  REQUIRE(n.ok());
  CHECK(tile_text(n->tile) == "64x64x64");
  // dstate 16: a block is two rows of one 16-wide warp tile, the only legal n.
  ssd_kernel_config small = c;
  small.dstate = 16;
  const std::vector<ssd_tile> small_tiles = legal_tiles(small);
  REQUIRE_FALSE(small_tiles.empty());
  for (const ssd_tile& t : small_tiles) CHECK(t.n == 16);
  CHECK(tile_text(normalize_config(small).value().tile) == "64x16x64");
  // dstate 32: n = 32 only.
  ssd_kernel_config n32 = c;
  n32.dstate = 32;
  for (const ssd_tile& t : legal_tiles(n32)) CHECK(t.n == 32);
}

TEST_CASE("chunk_state_passing_bwd: refusals name the field and the rule") {
  // n = 16 with dstate 256: the rho blocks would straddle warp tiles.
  Status s = validate_config(fused(SSD_ARCH_SM80, 0, ssd_tile{64, 16, 64, 0, 0}));
  CHECK(s.code == SSD_ERROR_INVALID_CONFIG);
  CHECK(contains(s.detail, "tile: 64x16x64"));
  CHECK(contains(s.detail, "chunk_state_passing_bwd"));
  CHECK(contains(s.detail, "n must be a multiple of 32, or 16 with dstate 16"));
  // The forward state pass's rules first (the same geometry).
  s = validate_config(fused(SSD_ARCH_SM80, 0, ssd_tile{64, 64, 128, 0, 0}));
  CHECK(s.code == SSD_ERROR_INVALID_CONFIG);
  CHECK(contains(s.detail, "m in 16, 32, 64, 128; n in 16, 32, 64, 128, 256; k in 16, 32, 64"));
  s = validate_config(fused(SSD_ARCH_SM80, 0, ssd_tile{128, 256, 64, 0, 0}));
  CHECK(s.code == SSD_ERROR_INVALID_CONFIG);
  CHECK(contains(s.detail, "tile: 128x256x64"));
  // Deterministic only: fast mode's rho is the staged pair's atomic sum.
  ssd_kernel_config fast = fused(SSD_ARCH_SM80, 0);
  fast.mode = SSD_MODE_FAST;
  s = validate_config(fast);
  CHECK(s.code == SSD_ERROR_INVALID_CONFIG);
  CHECK(contains(s.detail, "mode: "));
  CHECK(contains(s.detail, "legal: deterministic"));
  // Flags it does not read (initial states, dfinal and dinit are pointers of the call, not flags).
  for (uint32_t flag : {uint32_t(SSD_FLAG_INITIAL_STATES), uint32_t(SSD_FLAG_TWO_TERM_STATES), uint32_t(SSD_FLAG_D)}) {
    s = validate_config(fused(SSD_ARCH_SM80, flag));
    CHECK(s.code == SSD_ERROR_INVALID_CONFIG);
    CHECK(contains(s.detail, "flags"));
  }
}

TEST_CASE("chunk_state_passing_bwd: the plan fuses by default, the staged pair on request or with fast kernels") {
  // b=2, L=1000, h=8, p=64, g=2, n=64, chunk 64 (a partial last chunk), with z.
  const int64_t b = 2, L = 1000, h = 8, p = 64, g = 2, n = 64;
  const calltest::CallShape shape{b, L, h, p, g, n, 64};
  void* some = reinterpret_cast<void*>(uintptr_t(1) << 20);
  auto dense = [&](ssd_dtype dt, calltest::Dims dims) { return contiguous_tensor(some, dt, dims); };
  ssd_backward_args a = calltest::with_inputs(default_backward_args(), shape, dense);
  calltest::set_gradients(a, shape, dense);
  a.z = dense(SSD_DTYPE_BF16, {b, L, h, p});
  a.out_x = dense(SSD_DTYPE_BF16, {b, L, h, p});
  a.dz = dense(SSD_DTYPE_BF16, {b, L, h, p});
  BackwardTuning staged;
  staged.staged_state_pass = true;
  BackwardTuning fast_kernels;
  fast_kernels.fast_kernels = true;
  auto kernels_of = [&](ssd_mode mode, const BackwardTuning* tn) {
    std::multiset<int> out;
    auto r = backward_kernel_configs(&a, SSD_ARCH_SM80, mode, tn);
    REQUIRE_MESSAGE(r.ok(), r.status().detail);
    for (const ssd_kernel_config& c : r.value()) out.insert(c.kernel);
    return out;
  };
  const std::multiset<int> det = kernels_of(SSD_MODE_DETERMINISTIC, nullptr);
  CHECK(det.count(SSD_KERNEL_CHUNK_STATE_PASSING_BWD) == 1);
  CHECK(det.count(SSD_KERNEL_CHUNK_SCAN_BWD_DSTATES) == 0);
  CHECK(det.count(SSD_KERNEL_STATE_PASSING_BWD) == 0);
  CHECK(kernels_of(SSD_MODE_FAST, nullptr) == det);  // fast mode runs the deterministic kernels
  for (auto [mode, tn] : {std::pair{SSD_MODE_DETERMINISTIC, &staged}, std::pair{SSD_MODE_FAST, &fast_kernels}}) {
    const std::multiset<int> pair = kernels_of(mode, tn);
    CHECK(pair.count(SSD_KERNEL_CHUNK_STATE_PASSING_BWD) == 0);
    CHECK(pair.count(SSD_KERNEL_CHUNK_SCAN_BWD_DSTATES) == 1);
    CHECK(pair.count(SSD_KERNEL_STATE_PASSING_BWD) == 1);
  }
  // The fused kernel's config: z's second pass, the call's tile override.
  auto cfgs = backward_kernel_configs(&a, SSD_ARCH_SM80, SSD_MODE_DETERMINISTIC);
  REQUIRE(cfgs.ok());
  BackwardTuning tiled;
  tiled.state_pass = ssd_tile{32, 32, 32, 0, 0};
  auto tiled_cfgs = backward_kernel_configs(&a, SSD_ARCH_SM80, SSD_MODE_DETERMINISTIC, &tiled);
  REQUIRE(tiled_cfgs.ok());
  for (const ssd_kernel_config& c : tiled_cfgs.value())
    if (c.kernel == SSD_KERNEL_CHUNK_STATE_PASSING_BWD) {
      CHECK((c.flags & SSD_FLAG_Z) != 0);
      CHECK(tile_text(c.tile) == "32x32x32");
    }

  // Workspace: the fused layout has no dP section; the staged one the fp32 dP of (b, nc, h, p, n).
  auto fused_layout = backward_layout(&a, SSD_MODE_DETERMINISTIC);
  auto staged_layout = backward_layout(&a, SSD_MODE_DETERMINISTIC, &staged);
  REQUIRE(fused_layout.ok());
  REQUIRE(staged_layout.ok());
  const size_t nc = (L + 63) / 64;
  const size_t dP_bytes = size_t(b) * nc * h * p * n * 4;  // a multiple of 256
  CHECK(fused_layout->ds == fused_layout->dP);
  CHECK(staged_layout->ds - staged_layout->dP == dP_bytes);
  CHECK(staged_layout->total - fused_layout->total == dP_bytes);
}

TEST_CASE("chunk_state_passing_bwd: the presets' and all-options specializations compile, no spills") {
  std::vector<ssd_kernel_config> configs;
  std::set<std::string> seen;
  for (ssd_arch arch : {SSD_ARCH_SM80, SSD_ARCH_SM90})
    for (const ssdgen::ModelPreset& p : ssdgen::model_presets())
      for (const ssd_kernel_config& k : ssdgen::preset_configs(p, arch, SSD_MODE_DETERMINISTIC))
        if (k.kernel == SSD_KERNEL_CHUNK_STATE_PASSING_BWD && seen.insert(config_label(k) + tile_text(k.tile)).second)
          configs.push_back(k);
  CHECK(configs.size() >= 2);  // every preset's backward runs the fused kernel
  // All options (z: the dy_lo pass; seq_idx; dfinal / dinit / initial states are pointers), fp16,
  // the smallest and largest tiles, dstate 16.
  for (ssd_arch arch : {SSD_ARCH_SM80, SSD_ARCH_SM90}) {
    // The swept tiles of 128 to 256 threads too: their epilogue holds all of P_c's fragments at
    // once (at most 255 registers, no spills).
    for (const ssd_tile& t : {ssd_tile{64, 64, 64, 0, 0}, ssd_tile{64, 128, 32, 0, 0}, ssd_tile{16, 32, 16, 0, 0},
                              ssd_tile{32, 64, 64, 0, 0}, ssd_tile{64, 64, 32, 0, 0}})
      configs.push_back(fused(arch, SSD_FLAG_Z | SSD_FLAG_SEQ_IDX, t));
    ssd_kernel_config half = fused(arch, SSD_FLAG_Z | SSD_FLAG_SEQ_IDX, ssd_tile{64, 64, 32, 0, 0});
    half.dtype = SSD_DTYPE_FP16;
    configs.push_back(half);
    ssd_kernel_config small = fused(arch, SSD_FLAG_Z | SSD_FLAG_SEQ_IDX, ssd_tile{64, 16, 64, 0, 0});
    small.dstate = 16;
    small.chunk_size = 64;
    configs.push_back(small);
  }
  // 512 threads (a 128-register bound): the per-element epilogue, as the bench runs it (no z, no
  // seq_idx; with both it spills a little on either arch, as it did before the batched epilogue).
  configs.push_back(fused(SSD_ARCH_SM90, 0, ssd_tile{64, 256, 32, 0, 0}));
  int with_report = 0;
  for (const ssd_kernel_config& c : configs) {
    CAPTURE(config_label(c));
    CAPTURE(tile_text(c.tile));
    REQUIRE(validate_config(c).ok());
    auto u = generate_unit(c);
    REQUIRE_MESSAGE(u.ok(), u.status().detail);
    CHECK(u->block_threads == ssd_kernels::fwd_geom::chunk_state_passing_threads(c.tile.m, c.tile.n));
    auto r = compile_cubin(*u, c.arch, /*with_ptx=*/true);
    REQUIRE_MESSAGE(r.ok(), r.status().detail);
    INFO(r->log);
    CHECK(contains(r->ptx, "mma.sync.aligned.m16n8k16"));
    CHECK_FALSE(contains(r->ptx, "atom."));  // deterministic: the rho slots are plain stores
    CHECK(contains(r->ptx, "shfl.sync.bfly.b32"));
    if (r->report.registers <= 0) continue;  // NVRTC may skip ptxas for PTX it compiled before
    ++with_report;
    CHECK(r->report.spill_bytes == 0);
    CHECK(contains(r->log, " 0 bytes spill stores"));
  }
  require_some_ptxas_report(with_report);
}
