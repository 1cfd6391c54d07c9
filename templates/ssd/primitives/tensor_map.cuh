// TensorMap: an opaque CUtensorMap (cuda.h: 128 bytes, 128-byte aligned; PTX needs 64), shared by the
// host launchers (g++) and the kernels (NVRTC). The host encodes it with cuTensorMapEncodeTiled
// (src/runtime/tensor_map.h) and passes it by value inside a `const __grid_constant__` parameter (a
// parameter block member or a parameter of its own), so the copy engine reads it from the parameter
// space; the TMA copies that take it are in hopper.cuh (sm_90a only). This header has no device code:
// a parameter block that holds maps stays host-compilable.
#pragma once

namespace ssd_kernels {

struct alignas(128) TensorMap {
  unsigned long long opaque[16];
};

}  // namespace ssd_kernels
