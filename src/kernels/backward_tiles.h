// The backward's tensor-core families share their default-tile rule.
#pragma once

#include "kernels/family.h"

namespace ssd {

// The fastest of the candidates measured at the nemotronh-56b shape (scripts/tile_sweep.sh,
// docs/perf.md) when it is legal for this specialization, else the fallback that is legal for
// every shape. Every legal tile gives the same bits (D2), so this is only about speed.
inline ssd_tile best_legal_tile(const ssd_kernel_config& c, ssd_tile best, ssd_tile fallback,
                                const char* (*tile_problem)(const ssd_kernel_config&)) {
  ssd_kernel_config probe = c;
  probe.tile = best;
  return tile_problem(probe) ? fallback : best;
}

// dtype, chunk 256, headdim 64, dstate 64 (when the family reads it), one head per group.
inline void backward_defaults(ssd_kernel_config& c, bool dstate) {
  c.dtype = SSD_DTYPE_BF16;
  c.chunk_size = 256;
  c.headdim = 64;
  c.dstate = dstate ? 64 : 0;
  c.heads_per_group = 1;
}

}  // namespace ssd
