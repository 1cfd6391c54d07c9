// chunk_scan_bwd_ddA (templates/ssd/chunk_scan_bwd_ddA.cuh): the gradient w.r.t. the increments
// A·Δ, combining the intra-chunk rows with the state terms in fp64.
#include "kernels/family.h"
#include "ssd/backward_params.cuh"

namespace ssd {
namespace {

void defaults(ssd_kernel_config& c) { block_kernel_defaults(c, SSD_DTYPE_FP32); }

const char* tile_problem(const ssd_kernel_config& c) {
  return ssd_kernels::bwd_geom::ddA_tile_problem(c.tile.m, c.tile.n, c.tile.k);
}

Status validate(const ssd_kernel_config& c) {
  return validate_ssd_kernel(c, {false, false, false}, {SSD_DTYPE_FP32}, "fp32", tile_problem);
}

ssd_tile default_tile(const ssd_kernel_config&) { return ssd_tile{128, 0, 0, 0, 0}; }
std::vector<ssd_tile> legal_tiles(const ssd_kernel_config&) { return tiles_m({64, 128, 256}); }

KernelSpec spec(const ssd_kernel_config& c) {
  SpecWriter s = block_spec(c, "threads per block: one warp per (b, c, h)");
  s.boolean("kSeqIdx", c.flags & SSD_FLAG_SEQ_IDX)
      .boolean("kDeterministic", c.mode == SSD_MODE_DETERMINISTIC);
  return {s.members(), c.tile.m, 0};
}

}  // namespace

extern const KernelFamily kChunkScanBwdDdaFamily = {
    SSD_KERNEL_CHUNK_SCAN_BWD_DDA, "chunk_scan_bwd_ddA", "ssd/chunk_scan_bwd_ddA.cuh", "ChunkScanBwdDdaParams",
    "chunk_scan_bwd_ddA", SSD_FLAG_SEQ_IDX, defaults, validate, default_tile, legal_tiles, spec};

}  // namespace ssd
