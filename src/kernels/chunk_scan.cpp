// chunk_scan_fwd (templates/ssd/chunk_scan.cuh): the output per chunk, intra-chunk (CB ∘ L) X
// plus the entering state's contribution, with D and the z gate (math F5).
#include <algorithm>

#include "kernels/family.h"
#include "ssd/forward_params.cuh"

namespace ssd {
namespace {

constexpr SsdFieldUse kUses{true, true, true};

// Two implementations of one formula and one order (templates/ssd/chunk_scan.cuh): on sm_90a,
// for shapes in 64-wide steps, the wgmma kernel (chunk_scan_sm90a.cuh, Spec::kWgmma, its own tiles
// and dynamic shared memory); everywhere else the mma.sync kernel with its tiles.
bool uses_wgmma(const ssd_kernel_config& c) {
  return c.arch == SSD_ARCH_SM90A && ssd_kernels::fwd_geom::chunk_scan_wg_shape(c.chunk_size, c.headdim, c.dstate);
}
const char* tile_problem(const ssd_kernel_config& c) {
  if (uses_wgmma(c))
    return ssd_kernels::fwd_geom::chunk_scan_wg_tile_problem(c.chunk_size, c.headdim, c.dstate, c.tile.m, c.tile.n,
                                                             c.tile.k, c.flags & SSD_FLAG_SEQ_IDX);
  return shape_tile_problem<ssd_kernels::fwd_geom::chunk_scan_tile_problem>(c);
}
ssd_tile default_tile(const ssd_kernel_config& c) {
  // wgmma: 64 x 64 (3 blocks of one warpgroup per SM, no spill). 128 rows (two warpgroups sharing
  // the P and x tiles: a fifth less traffic per output) run 2 blocks per SM at 128 registers and
  // spill a few bytes; to be measured (docs/perf.md, entry 6).
  if (uses_wgmma(c)) return ssd_tile{64, 64, 64, 0, 0};
  return ssd_tile{64, std::min(64, c.headdim), 32, 0, 0};
}
using Rules = TensorCoreRules<kUses, tile_problem, true, true>;

// SSD_FLAG_TMA: the wgmma kernel's operand tiles by the tensor copy engine (chunk_scan_sm90a.cuh,
// Spec::kTma, ChunkScanFwdTmaParams), which reads P in x's dtype only.
bool uses_tma(const ssd_kernel_config& c) { return uses_wgmma(c) && (c.flags & SSD_FLAG_TMA); }
Status validate(const ssd_kernel_config& c) {
  SSD_RETURN_IF_ERROR(Rules::validate(c));
  if ((c.flags & SSD_FLAG_TMA) && !(uses_wgmma(c) && (c.flags & SSD_FLAG_STATES_IN_DTYPE)))
    return field_error(c, "flags", "tma",
                       "tma only with arch sm_90a, chunk_size, headdim and dstate multiples of 64, and "
                       "states_in_dtype");
  return Status::Ok();
}

KernelSpec spec(const ssd_kernel_config& c) {
  SpecWriter s = tile_spec(c, kUses, "positions", "headdim", nullptr);
  s.element("State", c.flags & SSD_FLAG_STATES_IN_DTYPE ? c.dtype : SSD_DTYPE_FP32)
      .boolean("kD", c.flags & SSD_FLAG_D)
      .boolean("kDPerHeaddim", c.flags & SSD_FLAG_D_PER_HEADDIM)
      .boolean("kZ", c.flags & SSD_FLAG_Z)
      .boolean("kSeqIdx", c.flags & SSD_FLAG_SEQ_IDX);
  const bool seq = c.flags & SSD_FLAG_SEQ_IDX;
  if (uses_wgmma(c)) {
    // Written only here: the mma.sync specializations keep their Spec (and machine code).
    s.boolean("kWgmma", true);
    const bool tma = uses_tma(c);
    if (tma) s.boolean("kTma", true);  // only here: the cp.async specializations keep their Spec
    namespace g = ssd_kernels::fwd_geom;
    // Registers per thread (the launch bounds' cap): 128 for 64 x 64 with P in x's dtype and headdim
    // 64 (4 blocks per SM: no spill without z, 4-16 bytes with z; at nemotronh-56b b=4 L=2048 0.73 ->
    // 0.65 ms without z, 1.16 -> 1.01 ms with z, against 3 blocks at 168, docs/perf.md); 168 for
    // headdim 128 (3 blocks: at 128 ptxas spills 4 bytes in some of them, not measured); 232 with 128
    // columns or fp32 P (2 blocks; 168 spills there); 128 for 128 rows (2 blocks of 256 threads; a
    // few bytes of spill, 8-52 by option: the tile is there to measure its traffic saving). Blocks per
    // SM follow from them and shared memory.
    const int regs = c.tile.n == 128 || !(c.flags & SSD_FLAG_STATES_IN_DTYPE) ? 232
                     : c.tile.m == 128                                        ? 128
                     : c.headdim == 64                                       ? 128
                                                                              : 168;
    KernelSpec k{s.members(), g::chunk_scan_wg_threads(c.tile.m),
                 g::chunk_scan_wg_blocks_per_sm(c.chunk_size, c.tile.m, c.tile.n, seq, regs, tma)};
    k.dynamic_shared_bytes = g::chunk_scan_wg_smem_bytes(c.chunk_size, c.tile.m, c.tile.n, seq, tma);
    if (tma) k.params = "ChunkScanFwdTmaParams";
    return k;
  }
  // With P in the element type (no fp32 register staging) the kernel needs 158 registers; capping
  // it at 128 (4 blocks of 128 threads per SM instead of 3) spills nothing on sm_90a (docs/perf.md).
  const bool p_in_dtype = c.flags & SSD_FLAG_STATES_IN_DTYPE;
  return {s.members(), ssd_kernels::fwd_geom::chunk_scan_threads(), p_in_dtype ? 4 : 0};
}

}  // namespace

extern const KernelFamily kChunkScanFwdFamily = {
    SSD_KERNEL_CHUNK_SCAN_FWD, "chunk_scan_fwd", "ssd/chunk_scan.cuh", "ChunkScanFwdParams", "chunk_scan_fwd",
    SSD_FLAG_SEQ_IDX | SSD_FLAG_D | SSD_FLAG_D_PER_HEADDIM | SSD_FLAG_Z | SSD_FLAG_STATES_IN_DTYPE | SSD_FLAG_TMA,
    Rules::defaults, validate, default_tile, Rules::legal_tiles, spec};

}  // namespace ssd
