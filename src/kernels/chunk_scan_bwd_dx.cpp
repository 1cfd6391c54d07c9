// chunk_scan_bwd_dx (templates/ssd/chunk_scan_bwd_dx.cuh): dx from the intra-chunk term and the
// state gradient, plus D's direct term. With z (SSD_FLAG_Z) dy comes as two T terms from gate_bwd
// and v's p sum takes both (kDyLo).
#include "kernels/family.h"
#include "ssd/backward_params.cuh"

namespace ssd {
namespace {

constexpr SsdFieldUse kUses{true, true, true};

// On sm_90 and sm_90a (228 KiB of shared memory per SM) the resident-rows layout
// (bwd_geom::dx_res_*, Spec::kResidentRows): phase A's row tile is copied once for both terms'
// chains; elsewhere the 48 KiB static layout. The same chains, so the same bits.
bool resident_rows(const ssd_kernel_config& c) { return c.arch == SSD_ARCH_SM90 || c.arch == SSD_ARCH_SM90A; }
const char* tile_problem(const ssd_kernel_config& c) {
  if (resident_rows(c))
    return shape_tile_problem<ssd_kernels::bwd_geom::dx_res_tile_problem>(c);
  return shape_tile_problem<ssd_kernels::bwd_geom::dx_tile_problem>(c);
}
// wgmma for the n loops on sm_90a where the tile allows it (bwd_geom::dx_wg_shape: 128 rows, 64-wide
// K steps, headdim 32 or 64); the resident mma.sync loops otherwise. The same chains.
bool uses_wgmma(const ssd_kernel_config& c) {
  return c.arch == SSD_ARCH_SM90A && ssd_kernels::bwd_geom::dx_wg_shape(c.headdim, c.dstate, c.tile.m, c.tile.k);
}
// SSD_FLAG_TMA: the wgmma tiles' operand stages by the copy engine (Spec::kTma,
// ChunkScanBwdDxTmaParams): phase A's row and K tiles and phase B's CB and dy tiles. Legal only with the
// wgmma tiles at headdim 64 (the shape the GPU tests proved bitwise; headdim 32's wgmma tiles keep
// cp.async), so a TMA config's tile set is theirs; the call drops the flag for the others (the same
// bits either way).
bool tma_shape(const ssd_kernel_config& c) { return uses_wgmma(c) && c.headdim == 64; }
const char* tma_tile_problem(const ssd_kernel_config& c) {
  if (const char* problem = tile_problem(c)) return problem;
  return (c.flags & SSD_FLAG_TMA) && !tma_shape(c)
             ? "with tma (SSD_FLAG_TMA) the wgmma tiles at headdim 64 only: arch sm_90a, m 128, k 64, dstate a "
               "multiple of 64"
             : nullptr;
}
ssd_tile default_tile(const ssd_kernel_config& c) {
  // The resident layout (sm_90, sm_90a): 128 x . x 64 (the wgmma tile on sm_90a) where legal.
  if (resident_rows(c)) {
    ssd_kernel_config w = c;
    w.tile = {128, 0, 64, 0, 0};
    if (!tile_problem(w)) return w.tile;
  }
  return best_legal_tile(c, {128, 0, 32, 0, 0}, {64, 0, 32, 0, 0}, tile_problem);
}
using Rules = TensorCoreRules<kUses, tma_tile_problem, false, true>;

KernelSpec spec(const ssd_kernel_config& c) {
  SpecWriter s = tile_spec(c, kUses, "positions", nullptr, nullptr);
  s.boolean("kD", c.flags & SSD_FLAG_D)
      .boolean("kDPerHeaddim", c.flags & SSD_FLAG_D_PER_HEADDIM)
      .boolean("kSeqIdx", c.flags & SSD_FLAG_SEQ_IDX)
      .boolean("kDyLo", c.flags & SSD_FLAG_Z);
  // Two blocks of 256 threads per SM cap registers at 128 (the preset's tiles fit without a spill;
  // left alone, ptxas takes ~190-220 and one block fits).
  // Written only here: the others keep their Spec.
  if (resident_rows(c)) s.boolean("kResidentRows", true);
  if (uses_wgmma(c)) s.boolean("kWgmma", true);
  const bool tma = tma_shape(c) && (c.flags & SSD_FLAG_TMA);
  if (tma) s.boolean("kTma", true);  // likewise
  KernelSpec k{s.members(), ssd_kernels::bwd_geom::dx_threads(), 2};
  if (resident_rows(c))
    k.dynamic_shared_bytes = ssd_kernels::bwd_geom::dx_res_dynamic_bytes(
        c.chunk_size, c.headdim, c.dstate, c.tile.m, c.tile.k, (c.flags & SSD_FLAG_SEQ_IDX) != 0, uses_wgmma(c));
  if (c.flags & SSD_FLAG_Z) k.params = "ChunkScanBwdDxZParams";
  if (tma) k.params = "ChunkScanBwdDxTmaParams";  // (it extends ChunkScanBwdDxZParams)
  return k;
}

}  // namespace

extern const KernelFamily kChunkScanBwdDxFamily = {
    SSD_KERNEL_CHUNK_SCAN_BWD_DX, "chunk_scan_bwd_dx", "ssd/chunk_scan_bwd_dx.cuh", "ChunkScanBwdDxParams",
    "chunk_scan_bwd_dx", SSD_FLAG_SEQ_IDX | SSD_FLAG_D | SSD_FLAG_D_PER_HEADDIM | SSD_FLAG_Z | SSD_FLAG_TMA,
    Rules::defaults, Rules::validate, default_tile,
    Rules::legal_tiles, spec};

}  // namespace ssd
