// chunk_state_bwd_db and chunk_scan_bwd_dc (templates/ssd/bc_bwd.cuh, one template): dB and dC,
// each from its head chain and the group's dCB term, summed over the group's heads in head order.
#include <algorithm>

#include "kernels/family.h"
#include "ssd/backward_params.cuh"

namespace ssd {
namespace {

constexpr SsdFieldUse kUses{true, true, true};

// sm_90a runs the wgmma kernel (bc_bwd_sm90a.cuh) on shapes of whole 64s (chunk_size, headdim,
// dstate: bwd_geom::bc_wgmma_shape); every other specialization the mma.sync one. A pure function of
// the specialization, so each has one kernel, tile set and key.
bool uses_wgmma(const ssd_kernel_config& c) {
  return c.arch == SSD_ARCH_SM90A && ssd_kernels::bwd_geom::bc_wgmma_shape(c.chunk_size, c.headdim, c.dstate);
}
constexpr auto mma_tile_problem = shape_tile_problem<ssd_kernels::bwd_geom::bc_tile_problem>;
const char* tile_problem(const ssd_kernel_config& c) {
  if (!uses_wgmma(c)) return mma_tile_problem(c);
  return ssd_kernels::bwd_geom::bc_wgmma_tile_problem(c.chunk_size, c.headdim, c.dstate, c.tile.m, c.tile.n, c.tile.k);
}
// wgmma: 64 x 128 x 64, one warpgroup, two blocks per SM (measured best, docs/perf.md's backward log:
// db / dc 0.324 / 0.305 ms against 0.352 / 0.329 for 128 x 128 x 64 and 0.447 / 0.389 for 64 x 64 x 64),
// 64 x 64 x 64 where it does not divide. mma.sync: each kernel's measured best, 64 x min(64, dstate) x 32
// where it does not fit.
ssd_tile default_tile_of(const ssd_kernel_config& c, ssd_tile mma_best) {
  if (uses_wgmma(c)) return best_legal_tile(c, {64, 128, 64, 0, 0}, {64, 64, 64, 0, 0}, tile_problem);
  return best_legal_tile(c, mma_best, {64, std::min(64, c.dstate), 32, 0, 0}, tile_problem);
}
ssd_tile db_default_tile(const ssd_kernel_config& c) {
  return default_tile_of(c, {64, std::min(128, c.dstate), 32, 0, 0});
}
ssd_tile dc_default_tile(const ssd_kernel_config& c) {
  return default_tile_of(c, {std::min(128, c.chunk_size), std::min(64, c.dstate), 32, 0, 0});
}
using Rules = TensorCoreRules<kUses, tile_problem, true, true>;

// __launch_bounds__'s minimum of blocks per SM is 1: without it ptxas trades registers for
// occupancy on some tiles and spills inside the K loop (64x64x64: 128 registers and 32 bytes of
// local memory; with the bound 174 registers, none). The default tiles take the same registers
// either way (two 64-register accumulator tiles: 2 blocks per SM).
KernelSpec spec_of(const ssd_kernel_config& c, bool is_dc) {
  SpecWriter s = tile_spec(c, kUses, "positions", "dstate", "K step");
  s.boolean("kIsDC", is_dc)
      .boolean("kSeqIdx", c.flags & SSD_FLAG_SEQ_IDX);
  if (!uses_wgmma(c)) return {s.members(), ssd_kernels::bwd_geom::bc_threads(c.tile.m, c.tile.n), 1};
  s.boolean("kWgmma", true);  // written only here: the mma.sync specializations keep their Spec
  KernelSpec k{s.members(), ssd_kernels::bwd_geom::bc_wgmma_threads(c.tile.m), 1};
  k.dynamic_shared_bytes = ssd_kernels::bwd_geom::bc_wgmma_smem_bytes(c.tile.m, c.tile.n);
  return k;
}
KernelSpec db_spec(const ssd_kernel_config& c) { return spec_of(c, false); }
KernelSpec dc_spec(const ssd_kernel_config& c) { return spec_of(c, true); }

}  // namespace

extern const KernelFamily kChunkStateBwdDbFamily = {
    SSD_KERNEL_CHUNK_STATE_BWD_DB, "chunk_state_bwd_db", "ssd/bc_bwd.cuh", "BcBwdParams", "bc_bwd",
    SSD_FLAG_SEQ_IDX, Rules::defaults, Rules::validate, db_default_tile, Rules::legal_tiles, db_spec};

extern const KernelFamily kChunkScanBwdDcFamily = {
    SSD_KERNEL_CHUNK_SCAN_BWD_DC, "chunk_scan_bwd_dc", "ssd/bc_bwd.cuh", "BcBwdParams", "bc_bwd",
    SSD_FLAG_SEQ_IDX, Rules::defaults, Rules::validate, dc_default_tile, Rules::legal_tiles, dc_spec};

}  // namespace ssd
