// chunk_scan_bwd_ddA_intra (templates/ssd/chunk_scan_bwd_ddA_intra.cuh): the intra-chunk part of
// the gradient w.r.t. the increments A·Δ, by row prefix and column sums in fixed 16-wide blocks. With z
// (SSD_FLAG_Z) dy comes as two T terms from gate_bwd and M's chain over p takes both (kDyLo).
#include "kernels/family.h"
#include "ssd/backward_params.cuh"

namespace ssd {
namespace {

constexpr SsdFieldUse kUses{true, false, true};  // no dstate: the contraction runs over headdim

const char* tile_problem(const ssd_kernel_config& c) {
  return ssd_kernels::bwd_geom::intra_tile_problem(c.chunk_size, c.headdim, c.tile.m, c.tile.n, c.tile.k);
}
ssd_tile default_tile(const ssd_kernel_config& c) {
  return best_legal_tile(c, {64, 32, 64, 0, 0}, {64, 32, 32, 0, 0}, tile_problem);
}
using Rules = TensorCoreRules<kUses, tile_problem, true, true>;

// __launch_bounds__'s minimum of blocks per SM. The 64x32 tile without z at headdim <= 64 gets 5:
// 96 registers and no local memory (NVRTC 13.0, sm_90a and sm_80), and its <= 39 KiB of shared
// memory allow 5 blocks; without the bound ptxas takes 128 registers (4 blocks) for the row
// prefix's side-by-side 16-column chains. Elsewhere ptxas chooses (a bound of 5 spills there: z at
// headdim 64 28 bytes, headdim 128 40 bytes).
int min_blocks(const ssd_kernel_config& c) {
  // (64x32 is always 4 warps of 128 threads: bwd_geom::intra_threads)
  const bool bounded = c.tile.m == 64 && c.tile.n == 32 && c.headdim <= 64 && !(c.flags & SSD_FLAG_Z);
  return bounded ? 5 : 0;
}

KernelSpec spec(const ssd_kernel_config& c) {
  SpecWriter s = tile_spec(c, kUses, "rows l", "columns s", "headdim step");
  s.boolean("kDeterministic", c.mode == SSD_MODE_DETERMINISTIC).boolean("kDyLo", c.flags & SSD_FLAG_Z);
  KernelSpec k{s.members(), ssd_kernels::bwd_geom::intra_threads(c.tile.m, c.tile.n), min_blocks(c)};
  if (c.flags & SSD_FLAG_Z) k.params = "ChunkScanBwdDdaIntraZParams";
  return k;
}

}  // namespace

extern const KernelFamily kChunkScanBwdDdaIntraFamily = {
    SSD_KERNEL_CHUNK_SCAN_BWD_DDA_INTRA, "chunk_scan_bwd_ddA_intra", "ssd/chunk_scan_bwd_ddA_intra.cuh",
    "ChunkScanBwdDdaIntraParams", "chunk_scan_bwd_ddA_intra", SSD_FLAG_Z, Rules::defaults, Rules::validate, default_tile, Rules::legal_tiles, spec};

}  // namespace ssd
