// chunk_scan_bwd_dcb (templates/ssd/chunk_scan_bwd_dcb.cuh): dCB, the gradient of the masked
// C·Bᵀ, summed over the group's heads in head order.
#include "kernels/family.h"
#include "ssd/backward_params.cuh"

namespace ssd {
namespace {

constexpr SsdFieldUse kUses{true, false, true};  // no dstate: the contraction runs over headdim

const char* tile_problem(const ssd_kernel_config& c) {
  return ssd_kernels::bwd_geom::dcb_tile_problem(c.chunk_size, c.headdim, c.tile.m, c.tile.n, c.tile.k,
                                                 c.flags & SSD_FLAG_SEQ_IDX);
}
ssd_tile default_tile(const ssd_kernel_config& c) {
  return best_legal_tile(c, {32, 64, 64, 0, 0}, {64, 64, 32, 0, 0}, tile_problem);
}
using Rules = TensorCoreRules<kUses, tile_problem, true, true>;

// __launch_bounds__'s minimum of blocks per SM. The 32x64 and 64x32 tiles (4 warps of 32 x 16 warp
// tiles: two 16-register fp32 tiles per thread) get 5: 96 registers, no local memory at k = 16, 32
// and 64 (NVRTC 13.0, sm_90a), and their <= 43.4 KiB of shared memory also allow 5 blocks on sm_90;
// without the bound ptxas takes ~117 registers (4 blocks). Other tiles get 1: without a bound
// ptxas trades registers for occupancy on some of them and puts values in local memory.
int min_blocks(const ssd_kernel_config& c) {
  namespace g = ssd_kernels::fwd_geom;
  const bool small_warp_tiles = g::warp_tile_m(c.tile.m, c.tile.n) == 32 && g::warp_tile_n(c.tile.m, c.tile.n) == 16;
  return small_warp_tiles && c.tile.m <= 64 && c.tile.n <= 64 && ssd_kernels::bwd_geom::dcb_threads(c.tile.m, c.tile.n) == 128
             ? 5
             : 1;
}

KernelSpec spec(const ssd_kernel_config& c) {
  SpecWriter s = tile_spec(c, kUses, "positions l", "positions s", "headdim step");
  s.boolean("kSeqIdx", c.flags & SSD_FLAG_SEQ_IDX);
  return {s.members(), ssd_kernels::bwd_geom::dcb_threads(c.tile.m, c.tile.n), min_blocks(c)};
}

}  // namespace

extern const KernelFamily kChunkScanBwdDcbFamily = {
    SSD_KERNEL_CHUNK_SCAN_BWD_DCB, "chunk_scan_bwd_dcb", "ssd/chunk_scan_bwd_dcb.cuh", "ChunkScanBwdDcbParams",
    "chunk_scan_bwd_dcb", SSD_FLAG_SEQ_IDX, Rules::defaults, Rules::validate, default_tile, Rules::legal_tiles, spec};

}  // namespace ssd
