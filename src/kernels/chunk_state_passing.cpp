// chunk_state_passing_fwd (templates/ssd/chunk_state_passing.cuh): the chunk states and the pass
// over chunks fused (math F2 + F3), the running state on chip; the forward's default path.
#include <algorithm>

#include "kernels/family.h"
#include "ssd/forward_params.cuh"

namespace ssd {
namespace {

constexpr SsdFieldUse kUses{true, true, true};

void defaults(ssd_kernel_config& c) { tensor_core_defaults(c, kUses); }

// sm_90a runs the wgmma kernel (chunk_state_passing_sm90a.cuh) on the shapes made of whole 64 x 64
// tiles; every other specialization (sm_80, sm_90, sm_90a with headdim 32 or dstate below 64) the
// mma.sync one. A pure function of the specialization, so each has one kernel, tile set and key.
bool uses_wgmma(const ssd_kernel_config& c) {
  return c.arch == SSD_ARCH_SM90A && ssd_kernels::fwd_geom::chunk_state_passing_wgmma_shape(c.headdim, c.dstate);
}

constexpr auto mma_tile_problem = shape_tile_problem<ssd_kernels::fwd_geom::chunk_state_passing_tile_problem>;
const char* wgmma_tile_problem(const ssd_kernel_config& c) {
  return ssd_kernels::fwd_geom::chunk_state_passing_wgmma_tile_problem(c.chunk_size, c.headdim, c.dstate,
                                                                       c.heads_per_group, c.tile.m, c.tile.n, c.tile.k);
}
const char* tile_problem(const ssd_kernel_config& c) {
  return uses_wgmma(c) ? wgmma_tile_problem(c) : mma_tile_problem(c);
}
// SSD_FLAG_TMA: the wgmma kernel's x and B stages by the tensor copy engine (Spec::kTma,
// ChunkStatePassingFwdTmaParams).
bool uses_tma(const ssd_kernel_config& c) { return uses_wgmma(c) && (c.flags & SSD_FLAG_TMA); }
Status validate(const ssd_kernel_config& c) {
  SSD_RETURN_IF_ERROR(validate_tensor_core(c, kUses, tile_problem));
  if ((c.flags & SSD_FLAG_TMA) && !uses_wgmma(c))
    return field_error(c, "flags", "tma", "tma only with arch sm_90a and headdim, dstate multiples of 64");
  return Status::Ok();
}
// mma.sync: 64 x 64 x 64 measured best of seven at the nemotronh-56b shape (0.567 ms against 0.602 for
// 64 x 128 x 32, docs/perf.md); 64 x 128 x 32 where it does not fit. wgmma (predicted, not yet
// measured; docs/perf.md, forward speed log entry 7): 128 x 128 x 32, two warpgroups on two heads of a
// group sharing each B stage — the least L2 traffic (x re-read once per n tile, B once per head pair),
// and no spills with any option (k = 64 with n = 128 is at ptxas's limit); where it does not fit (an
// odd number of heads per group with headdim 64) 64 x 128 x 32, and 64 x 64 x 64 where dstate is 64.
// With TMA stages and P in x's dtype (the forward's) 128 x 128 x 64: half the stage tops per chunk
// (no cp.async issue left to spread), measured 0.336 -> 0.320 ms at b=4 L=2048 and 0.602 -> 0.570 at
// b=1 L=16384 (docs/perf.md, forward log entry 16); the recompute's two-term TMA specialization keeps
// 128 x 128 x 32 (not measured at k = 64).
ssd_tile default_tile(const ssd_kernel_config& c) {
  if (uses_wgmma(c)) {
    const ssd_tile fallback =
        best_legal_tile(c, ssd_tile{64, 128, 32, 0, 0}, ssd_tile{64, 64, 64, 0, 0}, tile_problem);
    const ssd_tile wide = best_legal_tile(c, ssd_tile{128, 128, 32, 0, 0}, fallback, tile_problem);
    if ((c.flags & SSD_FLAG_TMA) && (c.flags & SSD_FLAG_STATES_IN_DTYPE))
      return best_legal_tile(c, ssd_tile{128, 128, 64, 0, 0}, wide, tile_problem);
    return wide;
  }
  return best_legal_tile(c, ssd_tile{std::min(64, c.headdim), std::min(64, c.dstate), 64, 0, 0},
                         ssd_tile{std::min(64, c.headdim), std::min(128, c.dstate), 32, 0, 0}, tile_problem);
}
std::vector<ssd_tile> legal_tiles(const ssd_kernel_config& c) { return tiles_accepted(c, true, true, tile_problem); }

KernelSpec spec(const ssd_kernel_config& c) {
  SpecWriter s = shape_spec(c, kUses);
  s.integer("kBlockM", c.tile.m, "headdim")
      .integer("kBlockN", c.tile.n, "dstate")
      .integer("kBlockK", c.tile.k, "positions")
      .boolean("kSeqIdx", c.flags & SSD_FLAG_SEQ_IDX)
      .boolean("kInitialStates", c.flags & SSD_FLAG_INITIAL_STATES)
      .element("State", c.flags & SSD_FLAG_STATES_IN_DTYPE ? c.dtype : SSD_DTYPE_FP32)
      .boolean("kTwoTerm", c.flags & SSD_FLAG_TWO_TERM_STATES);
  if (!uses_wgmma(c)) return {s.members(), ssd_kernels::fwd_geom::chunk_state_passing_threads(c.tile.m, c.tile.n), 0};
  s.boolean("kWgmma", true);  // written only here: the mma.sync specializations keep their Spec
  const bool tma = uses_tma(c);
  if (tma) s.boolean("kTma", true);  // likewise: the cp.async specializations keep theirs
  KernelSpec k{s.members(), ssd_kernels::fwd_geom::chunk_state_passing_wgmma_threads(c.tile.m), 0};
  k.dynamic_shared_bytes =
      ssd_kernels::fwd_geom::chunk_state_passing_wgmma_smem_bytes(c.chunk_size, c.tile.m, c.tile.n, c.tile.k,
                                                                  c.flags & SSD_FLAG_STATES_IN_DTYPE ? 2 : 4, tma);
  if (tma) k.params = "ChunkStatePassingFwdTmaParams";
  return k;
}

}  // namespace

extern const KernelFamily kChunkStatePassingFwdFamily = {
    SSD_KERNEL_CHUNK_STATE_PASSING_FWD, "chunk_state_passing_fwd", "ssd/chunk_state_passing.cuh",
    "ChunkStatePassingFwdParams", "chunk_state_passing_fwd",
    SSD_FLAG_SEQ_IDX | SSD_FLAG_INITIAL_STATES | SSD_FLAG_STATES_IN_DTYPE | SSD_FLAG_TWO_TERM_STATES | SSD_FLAG_TMA,
    defaults,
    validate, default_tile, legal_tiles, spec};

}  // namespace ssd
