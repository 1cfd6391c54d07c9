#include "runtime/runtime.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/log.h"
#include "common/struct_io.h"
#include "config/config.h"

ssd_runtime::~ssd_runtime() {
  graphs.reset();  // their nodes name this runtime's functions: before the modules go
  // A runtime that never loaded a module (e.g. one that only prepared kernels) must not load or
  // initialize the driver now: a host process may fork workers after it and before using CUDA.
  if (kernels.empty()) return;
  auto d = ssd::cuda::driver();
  if (!d.ok()) return;
  for (auto& [where, kernel] : kernels)
    if (kernel->module) d.value()->cuModuleUnload(kernel->module);  // fails harmlessly if the context is gone
}

namespace ssd {

Result<std::unique_ptr<ssd_runtime>> create_runtime(const ssd_runtime_options& options) {
  // Checked as integers: a C caller may have stored any int in the enum field.
  const int64_t mode = enum_value(options.mode);
  if (mode != SSD_MODE_DETERMINISTIC && mode != SSD_MODE_FAST)
    return make_error(SSD_ERROR_INVALID_ARGUMENT,
                      fmt::format("options.mode: {} (legal: 0 deterministic, 1 fast)", mode));
  if (options.arch != 0 && options.arch != SSD_ARCH_SM80 && options.arch != SSD_ARCH_SM90 &&
      options.arch != SSD_ARCH_SM90A)
    return make_error(SSD_ERROR_INVALID_ARGUMENT,
                      fmt::format("options.arch: {} (legal: 0 from the device, 80, 90, 901)", options.arch));
  cache::Options co;
  SSD_ASSIGN_OR_RETURN(co, cache::options_from_env());
  if (options.cache_dir && *options.cache_dir) co.root = options.cache_dir;
  if (options.cache_mode >= 0) {
    constexpr cache::Mode modes[] = {cache::Mode::ReadWrite, cache::Mode::ReadOnly, cache::Mode::RequireCached,
                                     cache::Mode::Off};
    if (options.cache_mode > 3)
      return make_error(SSD_ERROR_INVALID_ARGUMENT,
                        fmt::format("options.cache_mode: {} (legal: -1 from $SSD_CACHE_MODE, 0 readwrite, 1 readonly, "
                                    "2 require-cached, 3 off)", options.cache_mode));
    co.mode = modes[options.cache_mode];
  }
  if (options.launch_graphs < 0 || options.launch_graphs > 2)
    return make_error(SSD_ERROR_INVALID_ARGUMENT,
                      fmt::format("options.launch_graphs: {} (legal: 0 on unless $SSD_LAUNCH_GRAPHS is 0, 1 on, 2 off)",
                                  options.launch_graphs));
  auto rt = std::make_unique<ssd_runtime>();
  rt->graphs = std::make_unique<LaunchGraphs>(options.launch_graphs == 0 ? launch_graphs_from_env()
                                                                         : options.launch_graphs == 1);
  rt->mode = options.mode;
  rt->arch = options.arch;
  rt->cache = std::make_unique<cache::DiskCache>(co);
  rt->builder = std::make_unique<KernelBuilder>(rt->cache.get());
  return rt;
}

Result<ssd_arch> runtime_arch(ssd_runtime& runtime) {
  if (runtime.arch != 0) return ssd_arch(runtime.arch);
  SSD_RETURN_IF_ERROR(cuda::current_context().status());
  const cuda::Driver& d = *cuda::driver().value();
  CUdevice dev;
  SSD_RETURN_IF_ERROR(cuda::check(d.cuCtxGetDevice(&dev), "cuCtxGetDevice"));
  int major = 0, minor = 0;
  SSD_RETURN_IF_ERROR(cuda::check(d.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
                                  "cuDeviceGetAttribute"));
  SSD_RETURN_IF_ERROR(cuda::check(d.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev),
                                  "cuDeviceGetAttribute"));
  if (major == 8) return SSD_ARCH_SM80;
  if (major == 9 && minor == 0) return SSD_ARCH_SM90A;
  return make_error(SSD_ERROR_UNSUPPORTED,
                    fmt::format("device compute capability {}.{}: ssdgen targets sm_80 (8.x) and sm_90a (9.0)", major, minor));
}

ConfigKey config_key(const ssd_kernel_config& c) {
  return ConfigKey{int64_t(c.kernel), c.headdim, c.dstate, c.chunk_size, c.heads_per_group, int64_t(c.dtype),
                   int64_t(c.flags), c.tile.m, c.tile.n, c.tile.k, c.tile.warps, c.tile.stages, int64_t(c.mode),
                   int64_t(c.arch), c.partials};
}

Result<const ssd_kernel*> get_kernel(ssd_runtime& runtime, const ssd_kernel_config& config) {
  CUcontext ctx = nullptr;
  SSD_ASSIGN_OR_RETURN(ctx, cuda::current_context());
  // Hot path: a config this context has loaded before, as the caller spelled it. Skips codegen and
  // key hashing, which cost far more than the kernels they launch.
  const ConfigKey spelled = config_key(config);
  {
    std::lock_guard<std::mutex> lock(runtime.mutex);
    auto hit = runtime.loaded_by_config.find(std::make_pair(ctx, spelled));
    if (hit != runtime.loaded_by_config.end()) return hit->second;
  }
  std::shared_ptr<const BuiltKernel> built;
  SSD_ASSIGN_OR_RETURN(built, runtime.builder->build(config));
  const BuiltKernel& b = *built;
  std::lock_guard<std::mutex> lock(runtime.mutex);
  auto where = std::make_pair(ctx, b.key.hex);
  auto it = runtime.kernels.find(where);
  if (it != runtime.kernels.end()) {
    runtime.loaded_by_config[std::make_pair(ctx, spelled)] = it->second.get();
    return static_cast<const ssd_kernel*>(it->second.get());
  }

  const cuda::Driver& d = *cuda::driver().value();
  auto kernel = std::make_unique<ssd_kernel>();
  kernel->context = ctx;
  kernel->built = built;
  SSD_RETURN_IF_ERROR(cuda::check(d.cuModuleLoadData(&kernel->module, b.entry.cubin.data()),
                                  "cuModuleLoadData"));
  Status s = cuda::check(d.cuModuleGetFunction(&kernel->function, kernel->module, b.unit.symbol.c_str()),
                         "cuModuleGetFunction");
  if (s.ok() && b.unit.dynamic_shared_bytes > 48 * 1024)
    s = cuda::check(d.cuFuncSetAttribute(kernel->function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                         b.unit.dynamic_shared_bytes),
                    "cuFuncSetAttribute");
  if (!s.ok()) {
    d.cuModuleUnload(kernel->module);
    return s;
  }
  query_param_layout(d, *kernel);
  const ssd_kernel* raw = kernel.get();
  runtime.kernels.emplace(where, std::move(kernel));
  runtime.loaded_by_config[std::make_pair(ctx, spelled)] = raw;
  return raw;
}

void query_param_layout(const cuda::Driver& d, ssd_kernel& kernel) {
  kernel.param_layout_known = false;
  kernel.param_offsets.clear();
  kernel.param_sizes.clear();
  kernel.param_bytes = 0;
  if (!d.cuFuncGetParamInfo || !kernel.built) return;
  // The unit's parameters by index (codegen knows how many: probing past the last one would be
  // refused with CUDA_ERROR_INVALID_VALUE, an error compute-sanitizer reports); any error leaves
  // the layout unknown (eager launches).
  size_t end = 0;
  for (int32_t i = 0; i < kernel.built->unit.param_count; ++i) {
    size_t offset = 0, size = 0;
    if (d.cuFuncGetParamInfo(kernel.function, size_t(i), &offset, &size) != CUDA_SUCCESS || size == 0) {
      kernel.param_offsets.clear();
      kernel.param_sizes.clear();
      return;
    }
    kernel.param_offsets.push_back(offset);
    kernel.param_sizes.push_back(size);
    end = std::max(end, offset + size);
  }
  kernel.param_bytes = end;
  kernel.param_layout_known = true;
}

Status memset_zero_d32(void* dst, size_t pitch_bytes, size_t width, size_t height, CUstream stream, const char* what) {
  const cuda::Driver* d = nullptr;
  SSD_ASSIGN_OR_RETURN(d, cuda::driver());
  SSD_RETURN_IF_ERROR(flush_recorded_launches());
  return cuda::check(d->cuMemsetD2D32Async(reinterpret_cast<CUdeviceptr>(dst), pitch_bytes, 0, width, height, stream),
                     what);
}

Status launch_kernel(const ssd_kernel& kernel, unsigned grid_x, unsigned grid_y, unsigned grid_z, void** params,
                     CUstream stream) {
  const cuda::Driver* d = nullptr;
  SSD_ASSIGN_OR_RETURN(d, cuda::driver());
  if (grid_x == 0 || grid_y == 0 || grid_z == 0) return Status::Ok();  // empty problem: nothing to do
  Status recorded;
  if (CallRecording::record(kernel, grid_x, grid_y, grid_z, params, stream, &recorded)) return recorded;
  const GeneratedUnit& u = kernel.built->unit;
  return cuda::check(d->cuLaunchKernel(kernel.function, grid_x, grid_y, grid_z, unsigned(u.block_threads), 1,
                                               1, unsigned(u.dynamic_shared_bytes), stream, params, nullptr),
                     "cuLaunchKernel");
}

}  // namespace ssd
