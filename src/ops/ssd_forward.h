// Launcher of the SSD forward: chunk_cumsum -> bmm_chunk -> chunk_state -> state_passing -> chunk_scan.
#pragma once

#include <functional>
#include <vector>

#include "common/status.h"
#include "runtime/runtime.h"

namespace ssd {

ssd_forward_args default_forward_args();
Result<ssd_forward_layout> forward_layout(const ssd_forward_args* args);
// Per-stage tile overrides (zeros = the default tile). Not in the C API: for measuring tile
// candidates (`ssdgen bench fwd --tiles`) before one becomes a default.
struct ForwardTiles {
  ssd_tile bmm{}, state{}, passing{}, scan{};
};

// `after_stage(i)` runs on the host after stage i (0 cumsum, 1 bmm, 2 chunk_state, 3 state_passing,
// 4 chunk_scan) is enqueued: the benchmark records events there.
Status ssd_forward(ssd_runtime& runtime, const ssd_forward_args* args, const ssd_launch_options* options,
                   CUstream stream, const std::function<void(int)>& after_stage = {},
                   const ForwardTiles* tiles = nullptr);

// The five kernel specializations a call with these arguments uses, in launch order (for
// precompiling them in parallel).
Result<std::vector<ssd_kernel_config>> forward_kernel_configs(const ssd_forward_args* args, ssd_arch arch,
                                                             ssd_mode mode, const ForwardTiles* tiles = nullptr);

}  // namespace ssd
