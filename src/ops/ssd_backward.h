// Launchers of the SSD backward's kernels (issue 4 in progress; the public ssd_backward comes with
// the rest of the stages). Internal API, used by the GPU tests.
#pragma once

#include "common/status.h"
#include "runtime/runtime.h"

namespace ssd {

// Backward B-a. z, out_x, dy, dz are given together (data != NULL) or not at all; D and dD likewise.
// dD is (h) or (h, p) fp32, contiguous.
struct GateBwdTensors {
  int32_t chunk_size = 256;
  ssd_tensor dout{}, x{}, z{}, out_x{}, dy{}, dz{}, D{}, dD{};
};

// Workspace bytes in `mode` (0 in fast mode or without D).
Result<size_t> gate_backward_workspace(const GateBwdTensors& t, ssd_mode mode);
// `workspace` may be null (allocated stream-ordered). `max_blocks` > 0 caps the grids (D4 tests).
Status gate_backward(ssd_runtime& rt, const GateBwdTensors& t, ssd_mode mode, void* workspace, int32_t max_blocks,
                     CUstream stream);

}  // namespace ssd
