// The runtime behind ssd_runtime: the kernel builder and disk cache, plus loaded modules per CUDA
// context. Memory first, then disk, then NVRTC; one module per (context, key).
#pragma once

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "cache/disk_cache.h"
#include "compile/kernel_builder.h"
#include "runtime/driver.h"
#include "runtime/launch_graph.h"

namespace ssd {
// A config as the caller spelled it, packed: every field config_record writes (not struct_size), as
// integers. Equal keys mean equal records. The get_kernel hot path looks loaded kernels up by it:
// building and comparing it costs next to nothing, where the record is a formatted string (~0.4 us
// per kernel per call: 15 kernels per ssd_backward).
using ConfigKey = std::array<int64_t, 15>;
ConfigKey config_key(const ssd_kernel_config& config);
}  // namespace ssd

struct ssd_kernel {
  CUcontext context = nullptr;
  CUmodule module = nullptr;
  CUfunction function = nullptr;
  std::shared_ptr<const ssd::BuiltKernel> built;
  // The parameter layout (cuFuncGetParamInfo), for recording launches (runtime/launch_graph.h).
  bool param_layout_known = false;
  std::vector<size_t> param_offsets, param_sizes;
  size_t param_bytes = 0;
};

struct ssd_runtime {
  ssd_mode mode = SSD_MODE_DETERMINISTIC;
  int32_t arch = 0;  // 0: from the device
  std::unique_ptr<ssd::cache::DiskCache> cache;
  std::unique_ptr<ssd::KernelBuilder> builder;
  std::atomic<bool> warned_workspace{false};

  std::mutex mutex;
  std::map<std::pair<CUcontext, std::string>, std::unique_ptr<ssd_kernel>> kernels;  // by key
  std::map<std::pair<CUcontext, ssd::ConfigKey>, const ssd_kernel*> loaded_by_config;  // by config_key
  std::unique_ptr<ssd::LaunchGraphs> graphs;  // ssd_forward / ssd_backward's launches (runtime/launch_graph.h)

  ~ssd_runtime();
};

namespace ssd {

Result<std::unique_ptr<ssd_runtime>> create_runtime(const ssd_runtime_options& options);

// The arch to compile for: the runtime's option, else the current device's (sm_80 for 8.x,
// sm_90a for 9.0). Needs a context when the option is 0.
Result<ssd_arch> runtime_arch(ssd_runtime& runtime);

// Builds (memory / disk / NVRTC) and loads the kernel into the current context.
Result<const ssd_kernel*> get_kernel(ssd_runtime& runtime, const ssd_kernel_config& config);

// The kernel's parameter offsets and sizes (its unit's param_count of them) from cuFuncGetParamInfo
// (CUDA 12.4+), for recording its launches (runtime/launch_graph.h); param_layout_known stays false
// without it or on any error.
void query_param_layout(const cuda::Driver& d, ssd_kernel& kernel);

// Zeroes `height` rows of `width` 32-bit words, `pitch_bytes` apart, on `stream`
// (cuMemsetD2D32Async; errors name `what`). What this thread has recorded of the call so far is
// launched first (flush_recorded_launches), so a memset inside a recorded call keeps its order.
Status memset_zero_d32(void* dst, size_t pitch_bytes, size_t width, size_t height, CUstream stream, const char* what);

Status launch_kernel(const ssd_kernel& kernel, unsigned grid_x, unsigned grid_y, unsigned grid_z, void** params,
                     CUstream stream);

}  // namespace ssd
