// bmm_chunk_fwd (templates/ssd/bmm_chunk.cuh): CB = σ ∘ (C Bᵀ) per (batch, chunk, group), the
// lower triangle of each chunk (math F4).
#include "kernels/family.h"
#include "ssd/forward_params.cuh"

namespace ssd {
namespace {

constexpr SsdFieldUse kUses{false, true, false};  // per group: no headdim, no heads

// sm_90a at chunk 128 or 256 with dstate a multiple of 64 has two kernels: the mma.sync one at its
// tiles (k = 0, derived; the family's default 64 x 64 everywhere) and the wgmma one
// (bmm_chunk_sm90a.cuh) at its one tile 64 x 64 x 64 (k: its n step), which the forward takes where
// its grid fills the GPU (bmm_config in src/ops/ssd_forward.cpp). Every other specialization has the
// mma.sync kernel only. The kernel is a pure function of the specialization
// (fwd_geom::bmm_chunk_uses_wgmma, which the launcher's grid reads too); both give the same bits
// (docs/determinism.md).
bool wgmma_shape(const ssd_kernel_config& c) {
  return c.arch == SSD_ARCH_SM90A && ssd_kernels::fwd_geom::bmm_chunk_wgmma_shape(c.chunk_size, c.dstate);
}
bool uses_wgmma(const ssd_kernel_config& c) {
  return ssd_kernels::fwd_geom::bmm_chunk_uses_wgmma(c.arch == SSD_ARCH_SM90A, c.chunk_size, c.dstate, c.tile.k);
}
const char* mma_tile_problem(const ssd_kernel_config& c) {
  return ssd_kernels::fwd_geom::bmm_chunk_tile_problem(c.chunk_size, c.dstate, c.tile.m, c.tile.n, c.tile.k);
}
const char* tile_problem(const ssd_kernel_config& c) {
  if (wgmma_shape(c) && c.tile.k != 0)
    return ssd_kernels::fwd_geom::bmm_chunk_wgmma_tile_problem(c.chunk_size, c.dstate, c.tile.m, c.tile.n, c.tile.k);
  return mma_tile_problem(c);
}
constexpr ssd_tile kWgmmaTile{64, 64, 64, 0, 0};
ssd_tile default_tile(const ssd_kernel_config&) { return ssd_tile{64, 64, 0, 0, 0}; }
using Rules = TensorCoreRules<kUses, tile_problem, true, false>;
std::vector<ssd_tile> legal_tiles(const ssd_kernel_config& c) {
  std::vector<ssd_tile> tiles = tiles_accepted(c, true, false, mma_tile_problem);
  if (wgmma_shape(c)) tiles.push_back(kWgmmaTile);
  return tiles;
}

KernelSpec spec(const ssd_kernel_config& c) {
  SpecWriter s = tile_spec(c, kUses, "positions l", "positions s", "dstate n per stage (the wgmma kernel)");
  s.boolean("kSeqIdx", c.flags & SSD_FLAG_SEQ_IDX);
  if (!uses_wgmma(c)) return {s.members(), ssd_kernels::fwd_geom::bmm_chunk_threads(c.tile.m, c.tile.n), 0};
  s.boolean("kWgmma", true);  // written only here: the mma.sync specializations keep their Spec
  KernelSpec k{s.members(), ssd_kernels::fwd_geom::bmm_chunk_wgmma_threads(), 0};
  k.dynamic_shared_bytes = ssd_kernels::fwd_geom::bmm_chunk_wgmma_smem_bytes(c.chunk_size);
  return k;
}

}  // namespace

extern const KernelFamily kBmmChunkFwdFamily = {
    SSD_KERNEL_BMM_CHUNK_FWD, "bmm_chunk_fwd", "ssd/bmm_chunk.cuh", "BmmChunkFwdParams", "bmm_chunk_fwd",
    SSD_FLAG_SEQ_IDX, Rules::defaults, Rules::validate, default_tile, legal_tiles, spec};

}  // namespace ssd
