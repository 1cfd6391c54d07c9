// chunk_scan_fwd (templates/ssd/chunk_scan.cuh): the output per chunk, intra-chunk (CB ∘ L) X
// plus the entering state's contribution, with D and the z gate (math F5).
#include <algorithm>

#include "kernels/family.h"
#include "ssd/forward_params.cuh"

namespace ssd {
namespace {

void defaults(ssd_kernel_config& c) {
  c.dtype = SSD_DTYPE_BF16;
  c.chunk_size = 256;
  c.headdim = 64;
  c.dstate = 64;
  c.heads_per_group = 1;
}

const char* tile_problem(const ssd_kernel_config& c) {
  return ssd_kernels::fwd_geom::chunk_scan_tile_problem(c.chunk_size, c.headdim, c.dstate, c.tile.m, c.tile.n,
                                                        c.tile.k, c.flags & SSD_FLAG_SEQ_IDX);
}

Status validate(const ssd_kernel_config& c) {
  return validate_ssd_kernel(c, {true, true, true}, {SSD_DTYPE_BF16, SSD_DTYPE_FP16}, "bf16, fp16 (tensor cores)",
                             tile_problem);
}

ssd_tile default_tile(const ssd_kernel_config& c) { return ssd_tile{64, std::min(64, c.headdim), 32, 0, 0}; }
std::vector<ssd_tile> legal_tiles(const ssd_kernel_config& c) { return tiles_accepted(c, true, true, tile_problem); }

KernelSpec spec(const ssd_kernel_config& c) {
  SpecWriter s;
  s.integer("kChunk", c.chunk_size)
      .integer("kHeaddim", c.headdim)
      .integer("kDstate", c.dstate)
      .integer("kHeadsPerGroup", c.heads_per_group)
      .integer("kBlockM", c.tile.m, "positions")
      .integer("kBlockN", c.tile.n, "headdim")
      .integer("kBlockK", c.tile.k)
      .element("Element", c.dtype)
      .type("State", "float")
      .boolean("kD", c.flags & SSD_FLAG_D)
      .boolean("kDPerHeaddim", c.flags & SSD_FLAG_D_PER_HEADDIM)
      .boolean("kZ", c.flags & SSD_FLAG_Z)
      .boolean("kSeqIdx", c.flags & SSD_FLAG_SEQ_IDX);
  return {s.members(), ssd_kernels::fwd_geom::chunk_scan_threads(), 0};
}

}  // namespace

extern const KernelFamily kChunkScanFwdFamily = {
    SSD_KERNEL_CHUNK_SCAN_FWD, "chunk_scan_fwd", "ssd/chunk_scan.cuh", "ChunkScanFwdParams", "chunk_scan_fwd",
    SSD_FLAG_SEQ_IDX | SSD_FLAG_D | SSD_FLAG_D_PER_HEADDIM | SSD_FLAG_Z, defaults, validate, default_tile,
    legal_tiles, spec};

}  // namespace ssd
