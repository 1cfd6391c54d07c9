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

KernelSpec spec(const ssd_kernel_config& c) {
  SpecWriter s = tile_spec(c, kUses, "positions l", "positions s", "headdim step");
  s.boolean("kSeqIdx", c.flags & SSD_FLAG_SEQ_IDX);
  return {s.members(), ssd_kernels::bwd_geom::dcb_threads(c.tile.m, c.tile.n), 0};
}

}  // namespace

extern const KernelFamily kChunkScanBwdDcbFamily = {
    SSD_KERNEL_CHUNK_SCAN_BWD_DCB, "chunk_scan_bwd_dcb", "ssd/chunk_scan_bwd_dcb.cuh", "ChunkScanBwdDcbParams",
    "chunk_scan_bwd_dcb", SSD_FLAG_SEQ_IDX, Rules::defaults, Rules::validate, default_tile, Rules::legal_tiles, spec};

}  // namespace ssd
