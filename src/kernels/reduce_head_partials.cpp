// reduce_head_partials (templates/ssd/reduce_head_partials.cuh): the deterministic sums over
// (batch, chunk) of per-head fp64 partials (dA, ddt_bias, dD), in one fixed order.
#include "kernels/family.h"

namespace ssd {
namespace {

void defaults(ssd_kernel_config& c) {
  c.dtype = SSD_DTYPE_FP32;
  c.partials = 1;
}

Status validate(const ssd_kernel_config& c) {
  SSD_RETURN_IF_ERROR(require_zeros(c, {{"headdim", c.headdim}, {"dstate", c.dstate},
                                        {"heads_per_group", c.heads_per_group}, {"chunk_size", c.chunk_size},
                                        {"tile.k", c.tile.k}}));
  if (c.dtype != SSD_DTYPE_FP32) return field_error(c, "dtype", dtype_text(c.dtype), "fp32");
  if (!in_list(c.tile.m, {0, 32, 64, 128, 256}))
    return field_error(c, "tile.m", std::to_string(c.tile.m), "0 (default), 32, 64, 128, 256");
  SSD_RETURN_IF_ERROR(require_zeros(c, {{"tile.n", c.tile.n}}));
  if (c.partials < 1 || c.partials > 8) return field_error(c, "partials", std::to_string(c.partials), "1..8");
  return Status::Ok();
}

ssd_tile default_tile(const ssd_kernel_config&) { return ssd_tile{128, 0, 0, 0, 0}; }
std::vector<ssd_tile> legal_tiles(const ssd_kernel_config&) { return tiles_m({32, 64, 128, 256}); }

KernelSpec spec(const ssd_kernel_config& c) {
  SpecWriter s;
  s.integer("kBlock", c.tile.m, "heads per block, one thread each")
      .integer("kPartials", c.partials, "values per (batch, chunk, head) record");
  return {s.members(), c.tile.m, 0};
}

}  // namespace

extern const KernelFamily kReduceHeadPartialsFamily = {
    SSD_KERNEL_REDUCE_HEAD_PARTIALS, "reduce_head_partials", "ssd/reduce_head_partials.cuh", "ReduceHeadPartialsParams",
    "reduce_head_partials", 0, defaults, validate, default_tile, legal_tiles, spec};

}  // namespace ssd
