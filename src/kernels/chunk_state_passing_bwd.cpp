// chunk_state_passing_bwd (templates/ssd/chunk_state_passing_bwd.cuh): chunk_scan_bwd_dstates and
// state_passing_bwd fused (math B-b + B-c), dP on chip; the deterministic backward's default path.
#include <algorithm>

#include "kernels/family.h"
#include "ssd/backward_params.cuh"

namespace ssd {
namespace {

constexpr SsdFieldUse kUses{true, true, true};

// sm_90a runs the wgmma kernel (chunk_state_passing_bwd_sm90a.cuh) on the shapes made of whole 64 x 64
// tiles (headdim and dstate multiples of 64) whose chunks are long enough for its walk
// (chunk_size 128 and up, or 64 with z: bwd_geom::chunk_state_passing_bwd_wgmma_walk); every other
// specialization the mma.sync one. A pure function of the specialization, so each has one kernel, tile
// set and key.
bool uses_wgmma(const ssd_kernel_config& c) {
  return c.arch == SSD_ARCH_SM90A && ssd_kernels::fwd_geom::chunk_state_passing_wgmma_shape(c.headdim, c.dstate) &&
         ssd_kernels::bwd_geom::chunk_state_passing_bwd_wgmma_walk(c.chunk_size, (c.flags & SSD_FLAG_Z) ? 2 : 1);
}
constexpr auto mma_tile_problem = shape_tile_problem<ssd_kernels::bwd_geom::chunk_state_passing_bwd_tile_problem>;
const char* tile_problem(const ssd_kernel_config& c) {
  if (!uses_wgmma(c)) return mma_tile_problem(c);
  return ssd_kernels::bwd_geom::chunk_state_passing_bwd_wgmma_tile_problem(c.chunk_size, c.headdim, c.dstate,
                                                                           c.heads_per_group, c.tile.m, c.tile.n,
                                                                           c.tile.k);
}

// SSD_FLAG_TMA: the wgmma kernel's dy and C stages by the tensor copy engine (Spec::kTma,
// ChunkStatePassingBwdTmaParams).
bool uses_tma(const ssd_kernel_config& c) { return uses_wgmma(c) && (c.flags & SSD_FLAG_TMA); }

// Fast mode's ρ is an atomic sum (state_passing_bwd's fast variant); this kernel writes only the
// deterministic fp64 slots, so fast mode keeps the staged pair.
Status validate(const ssd_kernel_config& c) {
  SSD_RETURN_IF_ERROR(validate_tensor_core(c, kUses, tile_problem));
  if (c.mode != SSD_MODE_DETERMINISTIC)
    return field_error(c, "mode", std::to_string(int(c.mode)),
                       "deterministic (fast mode runs chunk_scan_bwd_dstates + state_passing_bwd)");
  if ((c.flags & SSD_FLAG_TMA) && !uses_wgmma(c))
    return field_error(c, "flags", "tma",
                       "tma only with arch sm_90a, headdim and dstate multiples of 64 and chunks the wgmma walk "
                       "takes (chunk_size 128 and up, or 64 with z)");
  return Status::Ok();
}

// mma.sync (predicted, not yet measured; docs/perf.md, backward log): chunk_state_passing_fwd's
// measured best (64 x 64 x 64), 32-wide k where it does not fit; n = 16 with dstate 16 (the only legal
// n there). wgmma: 64 x 64 x 64, one warpgroup per block (248-255 registers, no spill in bf16 or fp16 with
// or without z and seq_idx; two blocks per SM). Measured best of the six legal tiles (docs/perf.md's
// backward log, session 15: 0.864 ms against 0.895 for 128 x 64 x 64, whose two heads share each C
// stage, and 0.98-1.07 for the k = 32 and n = 128 tiles; n = 128 with two warpgroups, legal since P_c
// takes one buffer, spills 20-40 bytes at 255 registers).
ssd_tile default_tile(const ssd_kernel_config& c) {
  if (uses_wgmma(c)) return best_legal_tile(c, ssd_tile{64, 64, 64, 0, 0}, ssd_tile{64, 64, 32, 0, 0}, tile_problem);
  return best_legal_tile(c, ssd_tile{std::min(64, c.headdim), std::min(64, c.dstate), 64, 0, 0},
                         ssd_tile{std::min(64, c.headdim), std::min(64, c.dstate), 32, 0, 0}, tile_problem);
}
std::vector<ssd_tile> legal_tiles(const ssd_kernel_config& c) { return tiles_accepted(c, true, true, tile_problem); }

KernelSpec spec(const ssd_kernel_config& c) {
  SpecWriter s = tile_spec(c, kUses, "headdim", "dstate", "positions");
  s.boolean("kSeqIdx", c.flags & SSD_FLAG_SEQ_IDX).boolean("kXLo", c.flags & SSD_FLAG_Z);
  // One block per SM as the launch bound: ptxas may use every register (with no bound its
  // heuristic capped the small preset's 64 x 64 x 64 unit at 168 registers on sm_80 and spilled).
  if (!uses_wgmma(c)) return {s.members(), ssd_kernels::fwd_geom::chunk_state_passing_threads(c.tile.m, c.tile.n), 1};
  s.boolean("kWgmma", true);  // written only here: the mma.sync specializations keep their Spec
  const bool tma = uses_tma(c);
  if (tma) s.boolean("kTma", true);  // likewise: the cp.async specializations keep theirs
  KernelSpec k{s.members(), ssd_kernels::fwd_geom::chunk_state_passing_wgmma_threads(c.tile.m), 1};
  k.dynamic_shared_bytes =
      ssd_kernels::bwd_geom::chunk_state_passing_bwd_wgmma_smem_bytes(c.chunk_size, c.tile.m, c.tile.n, c.tile.k, tma);
  if (tma) k.params = "ChunkStatePassingBwdTmaParams";
  return k;
}

}  // namespace

extern const KernelFamily kChunkStatePassingBwdFamily = {
    SSD_KERNEL_CHUNK_STATE_PASSING_BWD, "chunk_state_passing_bwd", "ssd/chunk_state_passing_bwd.cuh",
    "ChunkStatePassingBwdParams", "chunk_state_passing_bwd", SSD_FLAG_SEQ_IDX | SSD_FLAG_Z | SSD_FLAG_TMA,
    [](ssd_kernel_config& c) { tensor_core_defaults(c, kUses); }, validate, default_tile, legal_tiles, spec};

}  // namespace ssd
