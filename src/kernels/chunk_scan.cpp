// chunk_scan_fwd (templates/ssd/chunk_scan.cuh): the output per chunk, intra-chunk (CB ∘ L) X
// plus the entering state's contribution, with D and the z gate (math F5).
#include <algorithm>

#include "kernels/family.h"
#include "ssd/forward_params.cuh"

namespace ssd {
namespace {

constexpr SsdFieldUse kUses{true, true, true};

constexpr auto tile_problem = shape_tile_problem<ssd_kernels::fwd_geom::chunk_scan_tile_problem>;
ssd_tile default_tile(const ssd_kernel_config& c) { return ssd_tile{64, std::min(64, c.headdim), 32, 0, 0}; }
using Rules = TensorCoreRules<kUses, tile_problem, true, true>;

KernelSpec spec(const ssd_kernel_config& c) {
  SpecWriter s = tile_spec(c, kUses, "positions", "headdim", nullptr);
  s.element("State", c.flags & SSD_FLAG_STATES_IN_DTYPE ? c.dtype : SSD_DTYPE_FP32)
      .boolean("kD", c.flags & SSD_FLAG_D)
      .boolean("kDPerHeaddim", c.flags & SSD_FLAG_D_PER_HEADDIM)
      .boolean("kZ", c.flags & SSD_FLAG_Z)
      .boolean("kSeqIdx", c.flags & SSD_FLAG_SEQ_IDX);
  // With P in the element type (no fp32 register staging) the kernel needs 158 registers; capping
  // it at 128 (4 blocks of 128 threads per SM instead of 3) spills nothing on sm_90a (docs/perf.md).
  const bool p_in_dtype = c.flags & SSD_FLAG_STATES_IN_DTYPE;
  return {s.members(), ssd_kernels::fwd_geom::chunk_scan_threads(), p_in_dtype ? 4 : 0};
}

}  // namespace

extern const KernelFamily kChunkScanFwdFamily = {
    SSD_KERNEL_CHUNK_SCAN_FWD, "chunk_scan_fwd", "ssd/chunk_scan.cuh", "ChunkScanFwdParams", "chunk_scan_fwd",
    SSD_FLAG_SEQ_IDX | SSD_FLAG_D | SSD_FLAG_D_PER_HEADDIM | SSD_FLAG_Z | SSD_FLAG_STATES_IN_DTYPE, Rules::defaults,
    Rules::validate, default_tile, Rules::legal_tiles, spec};

}  // namespace ssd
