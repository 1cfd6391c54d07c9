// The exported C API: argument checks, exceptions stopped at the boundary, thread-local details.
#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "common/struct_io.h"
#include "config/config.h"
#include "ops/chunk_cumsum.h"
#include "ops/prepare.h"
#include "ops/ssd_backward.h"
#include "ops/ssd_forward.h"
#include "runtime/runtime.h"

namespace {

thread_local std::string t_last_detail;

ssd_status finish(const ssd::Status& s) {
  t_last_detail = s.detail;
  return s.code;
}

template <class F>
ssd_status guarded(F&& f) {
  try {
    return finish(f());
  } catch (const std::bad_alloc&) {
    return finish(ssd::make_error(SSD_ERROR_OUT_OF_MEMORY, "host allocation failed"));
  } catch (const std::exception& e) {
    return finish(ssd::make_error(SSD_ERROR_INTERNAL, std::string("unexpected exception: ") + e.what()));
  } catch (...) {
    return finish(ssd::make_error(SSD_ERROR_INTERNAL, "unexpected exception"));
  }
}

ssd::Status null_arg(const char* name) {
  return ssd::make_error(SSD_ERROR_INVALID_ARGUMENT, std::string(name) + ": NULL pointer");
}

// An operation on a runtime: guarded, the null runtime refused by name, the stream as CUstream.
template <class F>
ssd_status on_runtime(ssd_runtime* runtime, ssd_cuda_stream stream, F&& f) {
  return guarded([&]() -> ssd::Status {
    if (!runtime) return null_arg("runtime");
    return f(*runtime, reinterpret_cast<CUstream>(stream));
  });
}

ssd_runtime_options default_runtime_options() {
  ssd_runtime_options o{};
  o.struct_size = sizeof(o);
  o.mode = SSD_MODE_DETERMINISTIC;
  o.arch = 0;
  o.cache_dir = nullptr;
  o.cache_mode = -1;
  o.launch_graphs = 0;  // on unless $SSD_LAUNCH_GRAPHS=0
  return o;
}

// Output structs: the caller's struct_size says how much may be written (at least the first version).
ssd::Status check_report_size(const ssd_prepare_report* report) {
  if (report->struct_size < offsetof(ssd_prepare_report, seconds) + sizeof(double) ||
      report->struct_size > (size_t(1) << 16))
    return ssd::make_error(SSD_ERROR_INVALID_ARGUMENT,
                           "report.struct_size: " + std::to_string(report->struct_size) +
                               " (set it to sizeof(ssd_prepare_report) = " + std::to_string(sizeof(ssd_prepare_report)) + ")");
  return ssd::Status::Ok();
}

void write_report(ssd_prepare_report* report, ssd_prepare_report full) {
  const size_t size = report->struct_size;
  full.struct_size = size;
  std::memcpy(report, &full, std::min(size, sizeof(full)));
}

// ssd_forward_prepare / ssd_backward_prepare: the report's size is checked before any work, and
// written (as far as the caller's struct_size reaches) only on success.
template <class Prepare>
ssd_status prepare_entry(ssd_prepare_report* report, Prepare prepare) {
  return guarded([&]() -> ssd::Status {
    if (report) SSD_RETURN_IF_ERROR(check_report_size(report));
    ssd_prepare_report r{};
    SSD_ASSIGN_OR_RETURN(r, prepare());
    if (report) write_report(report, r);
    return ssd::Status::Ok();
  });
}

}  // namespace

extern "C" {

SSD_API void ssd_kernel_config_init(ssd_kernel_config* config, ssd_kernel_id kernel) {
  if (!config) return;
  const int64_t id = ssd::enum_value(kernel);  // a C caller may pass any int
  if (ssd::is_kernel_value(id)) {
    *config = ssd::default_config(static_cast<ssd_kernel_id>(id));
  } else {  // keep the caller's id: validation and ssd_get_kernel then name it
    *config = ssd::default_config(ssd_kernel_id{});  // names no kernel: the first kernel's defaults
    std::memcpy(&config->kernel, &kernel, sizeof kernel);
  }
}

SSD_API ssd_status ssd_kernel_config_validate(const ssd_kernel_config* config) {
  return guarded([&]() -> ssd::Status {
    ssd_kernel_config c{};
    SSD_ASSIGN_OR_RETURN(c, ssd::read_config(config));
    return ssd::validate_config(c);
  });
}

SSD_API const char* ssd_status_string(ssd_status status) {
  switch (status) {
    case SSD_OK: return "SSD_OK";
    case SSD_ERROR_INVALID_ARGUMENT: return "SSD_ERROR_INVALID_ARGUMENT";
    case SSD_ERROR_INVALID_CONFIG: return "SSD_ERROR_INVALID_CONFIG";
    case SSD_ERROR_INVALID_SHAPE: return "SSD_ERROR_INVALID_SHAPE";
    case SSD_ERROR_INVALID_STRIDE: return "SSD_ERROR_INVALID_STRIDE";
    case SSD_ERROR_INVALID_DTYPE: return "SSD_ERROR_INVALID_DTYPE";
    case SSD_ERROR_INVALID_ALIGNMENT: return "SSD_ERROR_INVALID_ALIGNMENT";
    case SSD_ERROR_NULL_POINTER: return "SSD_ERROR_NULL_POINTER";
    case SSD_ERROR_UNSUPPORTED: return "SSD_ERROR_UNSUPPORTED";
    case SSD_ERROR_NO_DRIVER: return "SSD_ERROR_NO_DRIVER";
    case SSD_ERROR_NO_DEVICE: return "SSD_ERROR_NO_DEVICE";
    case SSD_ERROR_CUDA: return "SSD_ERROR_CUDA";
    case SSD_ERROR_COMPILE: return "SSD_ERROR_COMPILE";
    case SSD_ERROR_CACHE_MISS: return "SSD_ERROR_CACHE_MISS";
    case SSD_ERROR_CACHE: return "SSD_ERROR_CACHE";
    case SSD_ERROR_OUT_OF_MEMORY: return "SSD_ERROR_OUT_OF_MEMORY";
    case SSD_ERROR_WORKSPACE_TOO_SMALL: return "SSD_ERROR_WORKSPACE_TOO_SMALL";
    case SSD_ERROR_INTERNAL: return "SSD_ERROR_INTERNAL";
  }
  return "SSD_ERROR_UNKNOWN_STATUS";
}

SSD_API const char* ssd_last_error_detail(void) { return t_last_detail.c_str(); }

SSD_API const char* ssd_version_string(void) { return SSD_VERSION_STRING; }

SSD_API void ssd_runtime_options_init(ssd_runtime_options* options) {
  if (options) *options = default_runtime_options();
}

SSD_API ssd_status ssd_runtime_create(const ssd_runtime_options* options, ssd_runtime** runtime) {
  return guarded([&]() -> ssd::Status {
    if (!runtime) return null_arg("runtime");
    *runtime = nullptr;
    ssd_runtime_options o = default_runtime_options();
    if (options) {
      SSD_ASSIGN_OR_RETURN(o, ssd::read_sized_struct(options, o, "options",
                                                     offsetof(ssd_runtime_options, cache_mode) + sizeof(int32_t)));
    }
    std::unique_ptr<ssd_runtime> rt;
    SSD_ASSIGN_OR_RETURN(rt, ssd::create_runtime(o));
    *runtime = rt.release();
    return ssd::Status::Ok();
  });
}

SSD_API void ssd_runtime_destroy(ssd_runtime* runtime) { delete runtime; }

SSD_API ssd_status ssd_get_kernel(ssd_runtime* runtime, const ssd_kernel_config* config, ssd_kernel** kernel) {
  return guarded([&]() -> ssd::Status {
    if (!runtime) return null_arg("runtime");
    if (!kernel) return null_arg("kernel");
    *kernel = nullptr;
    ssd_kernel_config c{};
    SSD_ASSIGN_OR_RETURN(c, ssd::read_config(config));
    const ssd_kernel* k = nullptr;
    SSD_ASSIGN_OR_RETURN(k, ssd::get_kernel(*runtime, c));
    *kernel = const_cast<ssd_kernel*>(k);
    return ssd::Status::Ok();
  });
}

SSD_API ssd_status ssd_kernel_get_info(const ssd_kernel* kernel, ssd_kernel_info* info) {
  return guarded([&]() -> ssd::Status {
    if (!kernel) return null_arg("kernel");
    if (!info) return null_arg("info");
    if (info->struct_size < offsetof(ssd_kernel_info, config))
      return ssd::make_error(SSD_ERROR_INVALID_ARGUMENT, "info.struct_size: too small (set it to sizeof(ssd_kernel_info))");
    const ssd::BuiltKernel& b = *kernel->built;
    ssd_kernel_info full{};
    full.struct_size = info->struct_size;
    full.function = reinterpret_cast<ssd_cuda_function>(kernel->function);
    full.symbol = b.unit.symbol.c_str();
    full.key = b.key.hex.c_str();
    full.cubin_sha256 = b.entry.cubin_sha256.c_str();
    full.block_threads = b.unit.block_threads;
    full.dynamic_shared_bytes = b.unit.dynamic_shared_bytes;
    full.registers = b.entry.info.registers;
    full.static_shared_bytes = b.entry.info.shared_bytes;
    full.config = b.config;
    std::memcpy(info, &full, std::min(info->struct_size, sizeof(full)));
    return ssd::Status::Ok();
  });
}

SSD_API ssd_status ssd_kernel_launch(const ssd_kernel* kernel, uint32_t grid_x, uint32_t grid_y, uint32_t grid_z,
                                     void** params, ssd_cuda_stream stream) {
  return guarded([&]() -> ssd::Status {
    if (!kernel) return null_arg("kernel");
    if (!params) return null_arg("params");
    return ssd::launch_kernel(*kernel, grid_x, grid_y, grid_z, params, reinterpret_cast<CUstream>(stream));
  });
}

SSD_API void ssd_launch_options_init(ssd_launch_options* options) {
  if (options) *options = ssd::default_launch_options();
}
SSD_API void ssd_chunk_cumsum_fwd_args_init(ssd_chunk_cumsum_fwd_args* args) {
  if (args) *args = ssd::default_cumsum_fwd_args();
}
SSD_API void ssd_chunk_cumsum_bwd_args_init(ssd_chunk_cumsum_bwd_args* args) {
  if (args) *args = ssd::default_cumsum_bwd_args();
}

SSD_API ssd_status ssd_chunk_cumsum_fwd(ssd_runtime* runtime, const ssd_chunk_cumsum_fwd_args* args,
                                        const ssd_launch_options* options, ssd_cuda_stream stream) {
  return on_runtime(runtime, stream,
                    [&](ssd_runtime& rt, CUstream st) { return ssd::chunk_cumsum_fwd(rt, args, options, st); });
}

SSD_API ssd_status ssd_chunk_cumsum_bwd_workspace_size(const ssd_chunk_cumsum_bwd_args* args, size_t* bytes) {
  return guarded([&]() -> ssd::Status {
    if (!bytes) return null_arg("bytes");
    *bytes = 0;
    // Sized for deterministic mode, which needs the most; fast mode needs none.
    SSD_ASSIGN_OR_RETURN(*bytes, ssd::chunk_cumsum_bwd_workspace_size(args, SSD_MODE_DETERMINISTIC));
    return ssd::Status::Ok();
  });
}

SSD_API ssd_status ssd_chunk_cumsum_bwd(ssd_runtime* runtime, const ssd_chunk_cumsum_bwd_args* args,
                                        const ssd_launch_options* options, ssd_cuda_stream stream) {
  return on_runtime(runtime, stream,
                    [&](ssd_runtime& rt, CUstream st) { return ssd::chunk_cumsum_bwd(rt, args, options, st); });
}

SSD_API void ssd_forward_args_init(ssd_forward_args* args) {
  if (args) *args = ssd::default_forward_args();
}

SSD_API ssd_status ssd_forward_workspace_layout(const ssd_forward_args* args, ssd_forward_layout* layout) {
  return guarded([&]() -> ssd::Status {
    if (!layout) return null_arg("layout");
    if (layout->struct_size < offsetof(ssd_forward_layout, states_offset) + sizeof(size_t))
      return ssd::make_error(SSD_ERROR_INVALID_ARGUMENT, "layout.struct_size: set it to sizeof(ssd_forward_layout)");
    ssd_forward_layout l{};
    SSD_ASSIGN_OR_RETURN(l, ssd::forward_layout(args));
    const size_t size = layout->struct_size;
    std::memcpy(layout, &l, std::min(size, sizeof(ssd_forward_layout)));
    layout->struct_size = size;
    return ssd::Status::Ok();
  });
}

SSD_API ssd_status ssd_forward(ssd_runtime* runtime, const ssd_forward_args* args, const ssd_launch_options* options,
                               ssd_cuda_stream stream) {
  return on_runtime(runtime, stream,
                    [&](ssd_runtime& rt, CUstream st) { return ssd::ssd_forward(rt, args, options, st); });
}

SSD_API void ssd_backward_args_init(ssd_backward_args* args) {
  if (args) *args = ssd::default_backward_args();
}

SSD_API ssd_status ssd_backward_workspace_size(const ssd_backward_args* args, size_t* bytes) {
  return guarded([&]() -> ssd::Status {
    if (!bytes) return null_arg("bytes");
    ssd::BackwardLayout l{};
    SSD_ASSIGN_OR_RETURN(l, ssd::backward_layout(args, -1));
    *bytes = l.total;
    return ssd::Status::Ok();
  });
}

SSD_API ssd_status ssd_backward(ssd_runtime* runtime, const ssd_backward_args* args, void* workspace,
                                size_t workspace_bytes, ssd_cuda_stream stream) {
  return on_runtime(runtime, stream,
                    [&](ssd_runtime& rt, CUstream st) {
                      return ssd::ssd_backward(rt, args, workspace, workspace_bytes, st);
                    });
}

SSD_API void ssd_prepare_options_init(ssd_prepare_options* options) {
  if (options) *options = ssd::default_prepare_options();
}

SSD_API ssd_status ssd_forward_prepare(ssd_runtime* runtime, const ssd_forward_args* args,
                                       const ssd_prepare_options* options, ssd_prepare_report* report) {
  return prepare_entry(report, [&] { return ssd::forward_prepare(runtime, args, options); });
}

SSD_API ssd_status ssd_backward_prepare(ssd_runtime* runtime, const ssd_backward_args* args,
                                        const ssd_prepare_options* options, ssd_prepare_report* report) {
  return prepare_entry(report, [&] { return ssd::backward_prepare(runtime, args, options); });
}

}  // extern "C"
