// chunk_state_bwd_db and chunk_scan_bwd_dc on sm_90a (templates/ssd/bc_bwd_sm90a.cuh): which
// specializations take the wgmma kernel, its tiles (legal ones listed, bad ones refused by field), its
// unit (Spec, threads, dynamic shared memory), and NVRTC + ptxas on the presets' and all-options
// specializations: four wgmma per 64-step in the PTX (a head's p block, a dCB block), both operands
// from shared memory, the dB kernel's dCB operand transposed, no mma.sync, no
// serialization, no spills at the default tile. The GPU test "ssd_backward on sm_90a" compares dB and dC
// (with every other gradient) with the mma.sync kernels' (an sm_90 build) bit for bit.
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
#include "state_pass_test_support.h"  // the nemotronh-56b config of a kernel, tile text, substring checks
#include "wgmma_test_support.h"

using namespace ssd;

namespace {

using statepass_test::contains;
using statepass_test::count;
using statepass_test::tile_text;
using statepass_test::tile_texts;

const statepass_test::NemotronhStatePass db{SSD_KERNEL_CHUNK_STATE_BWD_DB};
const statepass_test::NemotronhStatePass dc{SSD_KERNEL_CHUNK_SCAN_BWD_DC};

}  // namespace

TEST_CASE("db / dc on sm_90a: wgmma tiles listed, the default, other archs and shapes unchanged") {
  const std::set<std::string> wgmma_tiles = {"64x64x64", "64x128x64", "128x64x64", "128x128x64"};
  for (const auto* family : {&db, &dc}) {
    const ssd_kernel_config c = (*family)(SSD_ARCH_SM90A, 0);
    CHECK(tile_texts(legal_tiles(c)) == wgmma_tiles);
    CHECK(tile_text(normalize_config(c).value().tile) == "64x128x64");
    CHECK(tile_text(normalize_config((*family)(SSD_ARCH_SM90A, SSD_FLAG_SEQ_IDX)).value().tile) == "64x128x64");
    // dstate 64: one 64-column tile.
    ssd_kernel_config n64 = c;
    n64.dstate = 64;
    CHECK(tile_text(normalize_config(n64).value().tile) == "64x64x64");
    // sm_80 and sm_90 keep the mma.sync kernel's tiles and default (k = 32).
    for (ssd_arch arch : {SSD_ARCH_SM80, SSD_ARCH_SM90}) {
      const ssd_kernel_config m = (*family)(arch, 0);
      const std::set<std::string> tiles = tile_texts(legal_tiles(m));
      CHECK(tiles.count("16x16x16") == 1);
      CHECK(normalize_config(m).value().tile.k == 32);
      auto u = generate_unit(normalize_config(m).value());
      REQUIRE_MESSAGE(u.ok(), u.status().detail);
      CHECK_FALSE(contains(u->source, "kWgmma"));
      CHECK(u->dynamic_shared_bytes == 0);
    }
    // Shapes not in whole 64s stay on mma.sync on sm_90a, with its tiles.
    // (Every legal chunk size, 64, 128 and 256, is one.)
    for (int which = 0; which < 2; ++which) {
      ssd_kernel_config k = c;
      if (which == 0) k.headdim = 32;
      if (which == 1) k.dstate = 32;
      CAPTURE(which);
      CHECK_FALSE(ssd_kernels::bwd_geom::bc_wgmma_shape(k.chunk_size, k.headdim, k.dstate));
      CHECK(tile_texts(legal_tiles(k)).count("16x16x16") == 1);
      auto u = generate_unit(normalize_config(k).value());
      REQUIRE_MESSAGE(u.ok(), u.status().detail);
      CHECK_FALSE(contains(u->source, "kWgmma"));
    }
    // Any number of heads per group: the row scales take four buffers.
    ssd_kernel_config many = c;
    many.heads_per_group = 256;
    CHECK(tile_texts(legal_tiles(many)) == wgmma_tiles);
  }
}

TEST_CASE("db / dc on sm_90a: tiles outside the wgmma set are refused naming the tile and the rule") {
  for (const auto* family : {&db, &dc}) {
    for (const ssd_tile& t : {ssd_tile{32, 64, 64, 0, 0}, ssd_tile{64, 256, 64, 0, 0}, ssd_tile{64, 128, 32, 0, 0},
                              ssd_tile{256, 64, 64, 0, 0}}) {
      CAPTURE(tile_text(t));
      const Status s = validate_config((*family)(SSD_ARCH_SM90A, SSD_FLAG_SEQ_IDX, t));
      CHECK(s.code == SSD_ERROR_INVALID_CONFIG);
      CHECK(contains(s.detail, "tile: " + tile_text(t)));
      CHECK(contains(s.detail, "m in 64, 128; n in 64, 128; k = 64 (wgmma on sm_90a)"));
    }
  }
}

TEST_CASE("db / dc on sm_90a: the unit selects the wgmma kernel, a warpgroup per 64 rows, dynamic shared memory") {
  for (const auto* family : {&db, &dc})
    for (const ssd_tile& t : {ssd_tile{64, 128, 64, 0, 0}, ssd_tile{128, 128, 64, 0, 0}, ssd_tile{64, 64, 64, 0, 0}}) {
      CAPTURE(tile_text(t));
      auto u = generate_unit((*family)(SSD_ARCH_SM90A, SSD_FLAG_SEQ_IDX, t));
      REQUIRE_MESSAGE(u.ok(), u.status().detail);
      CHECK(contains(u->source, "static constexpr bool kWgmma = true;"));
      CHECK(u->block_threads == 2 * t.m);
      // Stages of (m + n) rows of 128 bytes (6 with 128 x 128, else 4), four buffers of row scales,
      // alignment.
      const int stages = t.m * t.n >= 128 * 128 ? 6 : 4;
      CHECK(u->dynamic_shared_bytes == stages * (t.m + t.n) * 128 + 4 * t.m * 4 + 1024);
      CHECK(u->dynamic_shared_bytes == ssd_kernels::bwd_geom::bc_wgmma_smem_bytes(t.m, t.n));
      CHECK(u->dynamic_shared_bytes <= 227 * 1024);
    }
}

TEST_CASE("db / dc on sm_90a: the presets' and all-options specializations compile to wgmma, no spills") {
  std::vector<ssd_kernel_config> configs;
  std::set<std::string> seen;
  for (const ssdgen::ModelPreset& p : ssdgen::model_presets())
    for (const ssd_kernel_config& k : ssdgen::preset_configs(p, SSD_ARCH_SM90A, SSD_MODE_DETERMINISTIC))
      if ((k.kernel == SSD_KERNEL_CHUNK_STATE_BWD_DB || k.kernel == SSD_KERNEL_CHUNK_SCAN_BWD_DC) &&
          ssd_kernels::bwd_geom::bc_wgmma_shape(k.chunk_size, k.headdim, k.dstate) &&
          seen.insert(config_label(k) + tile_text(k.tile)).second)
        configs.push_back(k);
  CHECK(configs.size() >= 2);
  for (const auto* family : {&db, &dc})
    for (ssd_dtype dtype : {SSD_DTYPE_BF16, SSD_DTYPE_FP16}) {
      ssd_kernel_config c = (*family)(SSD_ARCH_SM90A, SSD_FLAG_SEQ_IDX, ssd_tile{64, 128, 64, 0, 0});
      c.dtype = dtype;
      configs.push_back(c);
      ssd_kernel_config wide = c;  // headdim 128: two p blocks per head
      wide.headdim = 128;
      wide.heads_per_group = 2;
      wide.chunk_size = 128;
      configs.push_back(wide);
    }
  int with_report = 0;
  for (const ssd_kernel_config& c : configs) {
    CAPTURE(config_label(c));
    CAPTURE(tile_text(c.tile));
    REQUIRE(validate_config(c).ok());
    const CompiledCubin r = wgmma_test::compile_sm90a(c);
    INFO(r.log);
    const std::string& ptx = r.ptx;
    const std::string shape = wgmma_test::wgmma_shape(c, c.tile.n);
    // The head phase's 64-steps (headdim / 64 of them, unrolled) and the dCB phase's, 4 k16 each; twice:
    // the cp.async and the element-wise copy paths are two instantiations of the tile loop.
    const size_t wgmmas = 2 * (4 * size_t(c.headdim / 64) + 4);
    CHECK(count(ptx, shape) == wgmmas);
    CHECK(count(ptx, "wgmma.mma_async") == wgmmas);
    // Both operands from shared memory (descriptors); the transpose flags: B MN-major everywhere, the
    // dCB operand of dB MN-major too (dCBᵀ), of dC K-major.
    const bool is_dc = c.kernel == SSD_KERNEL_CHUNK_SCAN_BWD_DC;
    size_t trans_a = 0;
    for (size_t at = ptx.find("wgmma.mma_async"); at != std::string::npos; at = ptx.find("wgmma.mma_async", at + 1)) {
      const std::string line = ptx.substr(at, ptx.find('\n', at) - at);
      CHECK_FALSE(contains(line, "}, {%r"));  // not A from registers
      CHECK(contains(line, ", 1;"));          // B transposed
      if (contains(line, ", 1, 1;")) ++trans_a;
    }
    CHECK(trans_a == (is_dc ? 0u : 8u));  // the dCB phase's
    CHECK(contains(ptx, "wgmma.wait_group.sync.aligned 0;"));
    CHECK_FALSE(contains(ptx, "mma.sync"));
    CHECK_FALSE(contains(ptx, "atom."));
    CHECK(contains(ptx, "fence.proxy.async.shared::cta"));
    with_report += wgmma_test::check_ptxas(r, /*no_added_fence=*/false);  // C7519: the chain's zeroing
  }
  require_some_ptxas_report(with_report);
}
