// bmm_chunk_fwd (templates/ssd/bmm_chunk.cuh): CB = σ ∘ (C Bᵀ) per (batch, chunk, group), the
// lower triangle of each chunk (math F4).
#include "kernels/family.h"
#include "ssd/forward_params.cuh"

namespace ssd {
namespace {

constexpr SsdFieldUse kUses{false, true, false};  // per group: no headdim, no heads

void defaults(ssd_kernel_config& c) { tensor_core_defaults(c, kUses); }

const char* tile_problem(const ssd_kernel_config& c) {
  return ssd_kernels::fwd_geom::bmm_chunk_tile_problem(c.chunk_size, c.dstate, c.tile.m, c.tile.n, c.tile.k);
}
Status validate(const ssd_kernel_config& c) { return validate_tensor_core(c, kUses, tile_problem); }
ssd_tile default_tile(const ssd_kernel_config&) { return ssd_tile{64, 64, 0, 0, 0}; }
std::vector<ssd_tile> legal_tiles(const ssd_kernel_config& c) { return tiles_accepted(c, true, false, tile_problem); }

KernelSpec spec(const ssd_kernel_config& c) {
  SpecWriter s = shape_spec(c, kUses);
  s.integer("kBlockM", c.tile.m, "positions l")
      .integer("kBlockN", c.tile.n, "positions s")
      .boolean("kSeqIdx", c.flags & SSD_FLAG_SEQ_IDX);
  return {s.members(), ssd_kernels::fwd_geom::bmm_chunk_threads(c.tile.m, c.tile.n), 0};
}

}  // namespace

extern const KernelFamily kBmmChunkFwdFamily = {
    SSD_KERNEL_BMM_CHUNK_FWD, "bmm_chunk_fwd", "ssd/bmm_chunk.cuh", "BmmChunkFwdParams", "bmm_chunk_fwd",
    SSD_FLAG_SEQ_IDX, defaults, validate, default_tile, legal_tiles, spec};

}  // namespace ssd
