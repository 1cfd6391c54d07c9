// state_passing_fwd (templates/ssd/state_passing.cuh) and state_passing_bwd
// (templates/ssd/state_passing_bwd.cuh): the sequential pass over chunks of the entering states
// (math F3) and of their gradients, one block per `m` state elements.
#include "kernels/family.h"
#include "ssd/forward_params.cuh"

namespace ssd {
namespace {

void fwd_defaults(ssd_kernel_config& c) { block_kernel_defaults(c, SSD_DTYPE_FP32); }
void bwd_defaults(ssd_kernel_config& c) { block_kernel_defaults(c, SSD_DTYPE_BF16); }

const char* tile_problem(const ssd_kernel_config& c) {
  return ssd_kernels::fwd_geom::state_passing_tile_problem(c.tile.m, c.tile.n, c.tile.k);
}

Status fwd_validate(const ssd_kernel_config& c) {
  return validate_ssd_kernel(c, {false, false, false}, {SSD_DTYPE_FP32}, "fp32", tile_problem);
}
Status bwd_validate(const ssd_kernel_config& c) {
  return validate_ssd_kernel(c, {false, false, false}, {SSD_DTYPE_BF16, SSD_DTYPE_FP16},
                             "bf16, fp16 (the dtype ds is stored in)", tile_problem);
}

ssd_tile fwd_default_tile(const ssd_kernel_config&) { return ssd_tile{256, 0, 0, 0, 0}; }
ssd_tile bwd_default_tile(const ssd_kernel_config&) {
  return ssd_tile{128, 0, 0, 0, 0};  // 0.72 vs 0.77 ms for 256 at the preset (docs/perf.md)
}
std::vector<ssd_tile> legal_tiles(const ssd_kernel_config&) { return tiles_m({64, 128, 256, 512}); }

KernelSpec fwd_spec(const ssd_kernel_config& c) {
  SpecWriter s = block_spec(c, "state elements per block");
  s.boolean("kInitialStates", c.flags & SSD_FLAG_INITIAL_STATES)
      .boolean("kSeqIdx", c.flags & SSD_FLAG_SEQ_IDX);
  return {s.members(), c.tile.m, 0};
}

KernelSpec bwd_spec(const ssd_kernel_config& c) {
  SpecWriter s = block_spec(c, "state elements per block");
  s.element("Element", c.dtype)
      .boolean("kSeqIdx", c.flags & SSD_FLAG_SEQ_IDX)
      .boolean("kDeterministic", c.mode == SSD_MODE_DETERMINISTIC);
  return {s.members(), c.tile.m, 0};
}

}  // namespace

extern const KernelFamily kStatePassingFwdFamily = {
    SSD_KERNEL_STATE_PASSING_FWD, "state_passing_fwd", "ssd/state_passing.cuh", "StatePassingFwdParams",
    "state_passing_fwd", SSD_FLAG_SEQ_IDX | SSD_FLAG_INITIAL_STATES, fwd_defaults, fwd_validate, fwd_default_tile,
    legal_tiles, fwd_spec};

extern const KernelFamily kStatePassingBwdFamily = {
    SSD_KERNEL_STATE_PASSING_BWD, "state_passing_bwd", "ssd/state_passing_bwd.cuh", "StatePassingBwdParams",
    "state_passing_bwd", SSD_FLAG_SEQ_IDX, bwd_defaults, bwd_validate, bwd_default_tile, legal_tiles, bwd_spec};

}  // namespace ssd
