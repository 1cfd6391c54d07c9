// chunk_state_passing_fwd (templates/ssd/chunk_state_passing.cuh): the chunk states and the pass
// over chunks fused (math F2 + F3), the running state on chip; the forward's default path.
#include <algorithm>

#include "kernels/family.h"
#include "ssd/forward_params.cuh"

namespace ssd {
namespace {

constexpr SsdFieldUse kUses{true, true, true};

void defaults(ssd_kernel_config& c) { tensor_core_defaults(c, kUses); }

constexpr auto tile_problem = shape_tile_problem<ssd_kernels::fwd_geom::chunk_state_passing_tile_problem>;
Status validate(const ssd_kernel_config& c) { return validate_tensor_core(c, kUses, tile_problem); }
// 64 x 64 x 64 measured best of seven at the nemotronh-56b shape (0.567 ms against 0.602 for
// 64 x 128 x 32, docs/perf.md); 64 x 128 x 32 where it does not fit.
ssd_tile default_tile(const ssd_kernel_config& c) {
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
  return {s.members(), ssd_kernels::fwd_geom::chunk_state_passing_threads(c.tile.m, c.tile.n), 0};
}

}  // namespace

extern const KernelFamily kChunkStatePassingFwdFamily = {
    SSD_KERNEL_CHUNK_STATE_PASSING_FWD, "chunk_state_passing_fwd", "ssd/chunk_state_passing.cuh",
    "ChunkStatePassingFwdParams", "chunk_state_passing_fwd",
    SSD_FLAG_SEQ_IDX | SSD_FLAG_INITIAL_STATES | SSD_FLAG_STATES_IN_DTYPE | SSD_FLAG_TWO_TERM_STATES, defaults,
    validate, default_tile, legal_tiles, spec};

}  // namespace ssd
