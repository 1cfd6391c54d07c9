// chunk_scan_bwd_dcb_ddA_intra (templates/ssd/chunk_scan_bwd_dcb_ddA_intra.cuh): chunk_scan_bwd_dcb
// and chunk_scan_bwd_ddA_intra in one pass per (batch, chunk, group), each head's dy·xᵀ formed once;
// bitwise the two kernels' outputs. With z (SSD_FLAG_Z) ddA_intra's chain continues over dy_lo.
#include "kernels/family.h"
#include "ssd/backward_params.cuh"

namespace ssd {
namespace {

constexpr SsdFieldUse kUses{true, false, true};  // no dstate: the contraction runs over headdim

const char* tile_problem(const ssd_kernel_config& c) {
  return ssd_kernels::bwd_geom::dcb_intra_tile_problem(c.chunk_size, c.headdim, c.heads_per_group, c.tile.m,
                                                       c.tile.n, c.tile.k, c.flags & SSD_FLAG_SEQ_IDX);
}
ssd_tile default_tile(const ssd_kernel_config& c) {
  return best_legal_tile(c, {64, 32, 64, 0, 0}, {64, 32, 32, 0, 0}, tile_problem);
}
using Rules = TensorCoreRules<kUses, tile_problem, true, true>;

// __launch_bounds__'s minimum of blocks per SM. 4-warp tiles with n, k <= 32 get 4 (128 registers,
// no local memory at 64x32x32, 64x32x16, 64x16x32 with NVRTC 13.0 on sm_90a; their <= 43 KiB of
// shared memory also allow 4); other 4-warp tiles get 3 (~168 registers: at 4 they spill, 48 bytes
// at 64x32x64, 288 at 64x64x32); larger blocks 1. The default 64x32x64 (3 blocks) measured fastest
// (H200, session 14 run 3: 1.38 ms against 2.17 for 64x32x32 at 4 blocks, which takes two barriers
// per head).
int min_blocks(const ssd_kernel_config& c) {
  if (ssd_kernels::bwd_geom::dcb_intra_threads(c.tile.m, c.tile.n) != 128) return 1;
  return c.tile.n <= 32 && c.tile.k <= 32 ? 4 : 3;
}

KernelSpec spec(const ssd_kernel_config& c) {
  SpecWriter s = tile_spec(c, kUses, "rows l", "columns s", "headdim step");
  s.boolean("kDeterministic", c.mode == SSD_MODE_DETERMINISTIC)
      .boolean("kDyLo", c.flags & SSD_FLAG_Z)
      .boolean("kSeqIdx", c.flags & SSD_FLAG_SEQ_IDX);
  return {s.members(), ssd_kernels::bwd_geom::dcb_intra_threads(c.tile.m, c.tile.n), min_blocks(c)};
}

}  // namespace

extern const KernelFamily kChunkScanBwdDcbDdaIntraFamily = {
    SSD_KERNEL_CHUNK_SCAN_BWD_DCB_DDA_INTRA, "chunk_scan_bwd_dcb_ddA_intra", "ssd/chunk_scan_bwd_dcb_ddA_intra.cuh",
    "ChunkScanBwdDcbIntraParams", "chunk_scan_bwd_dcb_ddA_intra", SSD_FLAG_Z | SSD_FLAG_SEQ_IDX, Rules::defaults,
    Rules::validate, default_tile, Rules::legal_tiles, spec};

}  // namespace ssd
