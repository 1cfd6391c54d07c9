// gate_bwd (templates/ssd/gate_bwd.cuh): the gradient through out = (y + D x) · silu(z): dz, the
// gate-free dy (with z as two T terms, dy and dy_lo), and the chunk partials of dD.
#include "config/config.h"
#include "kernels/family.h"
#include "ssd/kernel_params.cuh"

namespace ssd {
namespace {

void defaults(ssd_kernel_config& c) {
  c.dtype = SSD_DTYPE_BF16;
  c.chunk_size = 256;
  c.headdim = 64;
  c.flags = SSD_FLAG_D;
}

Status validate(const ssd_kernel_config& c) {
  SSD_RETURN_IF_ERROR(require_zeros(c, {{"dstate", c.dstate}, {"heads_per_group", c.heads_per_group},
                                        {"partials", c.partials}, {"tile.m", c.tile.m}, {"tile.n", c.tile.n},
                                        {"tile.k", c.tile.k}}));
  if (!in_list(c.chunk_size, {64, 128, 256}))
    return field_error(c, "chunk_size", std::to_string(c.chunk_size), "64, 128, 256");
  if (!in_list(c.headdim, {32, 64, 128})) return field_error(c, "headdim", std::to_string(c.headdim), "32, 64, 128");
  if (!in_list(c.dtype, {SSD_DTYPE_BF16, SSD_DTYPE_FP16}))
    return field_error(c, "dtype", dtype_text(c.dtype), "bf16, fp16");
  if (!(c.flags & (SSD_FLAG_Z | SSD_FLAG_D)))
    return field_error(c, "flags", flags_text(c.flags), "z and/or D (without both there is nothing to compute)");
  if ((c.flags & SSD_FLAG_D_PER_HEADDIM) && !(c.flags & SSD_FLAG_D))
    return field_error(c, "flags", flags_text(c.flags), "D_per_headdim only together with D");
  return Status::Ok();
}

// No tile: a thread owns 8 consecutive headdim elements (16-byte loads), a block of
// gate_geom::kBlockThreads threads heads_per_block(headdim) adjacent heads of one (batch, chunk).
ssd_tile gate_default_tile(const ssd_kernel_config&) { return ssd_tile{}; }
std::vector<ssd_tile> gate_legal_tiles(const ssd_kernel_config&) { return {ssd_tile{}}; }

KernelSpec spec(const ssd_kernel_config& c) {
  SpecWriter s;
  s.integer("kChunk", c.chunk_size)
      .integer("kHeaddim", c.headdim, "headdim / 8 threads per head, 8 consecutive p each")
      .element("Element", c.dtype)
      .boolean("kZ", c.flags & SSD_FLAG_Z)
      .boolean("kD", c.flags & SSD_FLAG_D)
      .boolean("kDPerHeaddim", c.flags & SSD_FLAG_D_PER_HEADDIM)
      .boolean("kDeterministic", c.mode == SSD_MODE_DETERMINISTIC);
  KernelSpec k{s.members(), ssd_kernels::gate_geom::kBlockThreads, 0};
  if (c.flags & SSD_FLAG_Z) k.params = "GateBwdZParams";  // also writes dy's second term
  return k;
}

}  // namespace

extern const KernelFamily kGateBwdFamily = {
    SSD_KERNEL_GATE_BWD, "gate_bwd", "ssd/gate_bwd.cuh", "GateBwdParams", "gate_bwd",
    SSD_FLAG_D | SSD_FLAG_D_PER_HEADDIM | SSD_FLAG_Z, defaults, validate, gate_default_tile, gate_legal_tiles, spec};

}  // namespace ssd
