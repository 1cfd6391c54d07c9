// bmm_chunk_fwd (templates/ssd/bmm_chunk.cuh): CB = σ ∘ (C Bᵀ) per (batch, chunk, group), the
// lower triangle of each chunk (math F4).
#include "kernels/family.h"
#include "ssd/forward_params.cuh"

namespace ssd {
namespace {

constexpr SsdFieldUse kUses{false, true, false};  // per group: no headdim, no heads

const char* tile_problem(const ssd_kernel_config& c) {
  return ssd_kernels::fwd_geom::bmm_chunk_tile_problem(c.chunk_size, c.dstate, c.tile.m, c.tile.n, c.tile.k);
}
ssd_tile default_tile(const ssd_kernel_config&) { return ssd_tile{64, 64, 0, 0, 0}; }
using Rules = TensorCoreRules<kUses, tile_problem, true, false>;

KernelSpec spec(const ssd_kernel_config& c) {
  SpecWriter s = tile_spec(c, kUses, "positions l", "positions s", nullptr);
  s.boolean("kSeqIdx", c.flags & SSD_FLAG_SEQ_IDX);
  return {s.members(), ssd_kernels::fwd_geom::bmm_chunk_threads(c.tile.m, c.tile.n), 0};
}

}  // namespace

extern const KernelFamily kBmmChunkFwdFamily = {
    SSD_KERNEL_BMM_CHUNK_FWD, "bmm_chunk_fwd", "ssd/bmm_chunk.cuh", "BmmChunkFwdParams", "bmm_chunk_fwd",
    SSD_FLAG_SEQ_IDX, Rules::defaults, Rules::validate, default_tile, Rules::legal_tiles, spec};

}  // namespace ssd
