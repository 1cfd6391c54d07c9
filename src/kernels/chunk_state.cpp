// chunk_state_fwd and chunk_scan_bwd_dstates (templates/ssd/chunk_state.cuh, one template): the
// chunk states s_c = Xᵀ diag(ξ E_end Δ) B (math F2), and with kDstates the backward's
// ds contributions from dy (the same contraction on (dy, C)); with z (SSD_FLAG_Z, dstates only)
// dy comes as two T terms from gate_bwd and the second enters as a second pass (kXLo).
#include <algorithm>

#include "kernels/family.h"
#include "ssd/forward_params.cuh"

namespace ssd {
namespace {

constexpr SsdFieldUse kUses{true, true, true};

constexpr auto tile_problem = shape_tile_problem<ssd_kernels::fwd_geom::chunk_state_tile_problem>;
// 64 x 128 x 32 measured best of seven candidates at the nemotronh-56b shape (docs/perf.md).
ssd_tile default_tile(const ssd_kernel_config& c) {
  return ssd_tile{std::min(64, c.headdim), std::min(128, c.dstate), 32, 0, 0};
}
using Rules = TensorCoreRules<kUses, tile_problem, true, true>;

KernelSpec spec_of(const ssd_kernel_config& c, bool dstates) {
  SpecWriter s = tile_spec(c, kUses, "headdim", "dstate", "positions");
  s.boolean("kSeqIdx", c.flags & SSD_FLAG_SEQ_IDX)
      .boolean("kDstates", dstates)
      .boolean("kTwoTerm", c.flags & SSD_FLAG_TWO_TERM_STATES)
      .boolean("kXLo", dstates && (c.flags & SSD_FLAG_Z));
  KernelSpec k{s.members(), ssd_kernels::fwd_geom::chunk_state_threads(c.tile.m, c.tile.n), 0};
  if (dstates && (c.flags & SSD_FLAG_Z)) k.params = "ChunkStateXLoParams";
  return k;
}
KernelSpec fwd_spec(const ssd_kernel_config& c) { return spec_of(c, false); }
KernelSpec dstates_spec(const ssd_kernel_config& c) { return spec_of(c, true); }

}  // namespace

extern const KernelFamily kChunkStateFwdFamily = {
    SSD_KERNEL_CHUNK_STATE_FWD, "chunk_state_fwd", "ssd/chunk_state.cuh", "ChunkStateFwdParams", "chunk_state_fwd",
    SSD_FLAG_SEQ_IDX | SSD_FLAG_TWO_TERM_STATES, Rules::defaults, Rules::validate, default_tile, Rules::legal_tiles, fwd_spec};

extern const KernelFamily kChunkScanBwdDstatesFamily = {
    SSD_KERNEL_CHUNK_SCAN_BWD_DSTATES, "chunk_scan_bwd_dstates", "ssd/chunk_state.cuh", "ChunkStateFwdParams",
    "chunk_state_fwd", SSD_FLAG_SEQ_IDX | SSD_FLAG_TWO_TERM_STATES | SSD_FLAG_Z, Rules::defaults, Rules::validate, default_tile, Rules::legal_tiles, dstates_spec};

}  // namespace ssd
