#include "runtime/driver.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

#include <fmt/format.h>

namespace ssd::cuda {
namespace {

using GetProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
// Ask for the entry points as of CUDA 12.0: their signatures are the ones cuda.h declares under the
// plain names. (With 13000, cuCtxSynchronize and cuCtxGetDevice resolve to the _v2 forms that take a
// context argument, which the declared types do not match.)
constexpr int kDriverApiVersion = 12000;

struct Loaded {
  Driver driver;
  Status status;
};

Loaded load() {
  Loaded out;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) lib = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    out.status = make_error(SSD_ERROR_NO_DRIVER,
                            fmt::format("no CUDA driver: cannot load libcuda.so.1 ({})", why ? why : "not found"));
    return out;
  }
  auto get_proc = reinterpret_cast<GetProcAddress>(dlsym(lib, "cuGetProcAddress_v2"));
  if (!get_proc) {
    out.status = make_error(SSD_ERROR_NO_DRIVER, "no CUDA driver: libcuda has no cuGetProcAddress_v2 (driver older than CUDA 12)");
    return out;
  }
  Driver& d = out.driver;
#define SSD_DRIVER_FN(name)                                                                             \
  {                                                                                                     \
    CUdriverProcAddressQueryResult q;                                                                   \
    if (get_proc(#name, reinterpret_cast<void**>(&d.name), kDriverApiVersion, CU_GET_PROC_ADDRESS_DEFAULT, \
                 &q) != CUDA_SUCCESS || !d.name) {                                                      \
      out.status = make_error(SSD_ERROR_NO_DRIVER, "no CUDA driver: entry point " #name " not found");  \
      return out;                                                                                       \
    }                                                                                                   \
  }
#include "runtime/driver_functions.inc"
#undef SSD_DRIVER_FN
  {
    CUdriverProcAddressQueryResult q;
    if (get_proc("cuFuncGetParamInfo", reinterpret_cast<void**>(&d.cuFuncGetParamInfo), 12040,
                 CU_GET_PROC_ADDRESS_DEFAULT, &q) != CUDA_SUCCESS)
      d.cuFuncGetParamInfo = nullptr;
  }
  CUresult r = d.cuInit(0);
  if (r != CUDA_SUCCESS) {
    const char* name = nullptr;
    d.cuGetErrorName(r, &name);
    out.status = make_error(SSD_ERROR_NO_DEVICE, fmt::format("cuInit failed: {} (no usable GPU?)", name ? name : "?"));
  }
  return out;
}

}  // namespace

Result<const Driver*> driver() {
  static const Loaded loaded = load();
  if (!loaded.status.ok()) return loaded.status;
  return &loaded.driver;
}

Status check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return Status::Ok();
  const char* name = "?";
  const char* text = "";
  auto d = driver();
  if (d.ok()) {
    d.value()->cuGetErrorName(r, &name);
    d.value()->cuGetErrorString(r, &text);
  }
  ssd_status code = r == CUDA_ERROR_OUT_OF_MEMORY ? SSD_ERROR_OUT_OF_MEMORY : SSD_ERROR_CUDA;
  return make_error(code, fmt::format("{}: {} ({})", what, name ? name : "?", text ? text : ""));
}

Result<CUcontext> current_context() {
  const Driver* d = nullptr;
  SSD_ASSIGN_OR_RETURN(d, driver());
  const Driver& drv = *d;
  CUcontext ctx = nullptr;
  SSD_RETURN_IF_ERROR(check(drv.cuCtxGetCurrent(&ctx), "cuCtxGetCurrent"));
  if (ctx) return ctx;
  int count = 0;
  SSD_RETURN_IF_ERROR(check(drv.cuDeviceGetCount(&count), "cuDeviceGetCount"));
  if (count == 0) return make_error(SSD_ERROR_NO_DEVICE, "no CUDA device");
  CUdevice dev;
  SSD_RETURN_IF_ERROR(check(drv.cuDeviceGet(&dev, 0), "cuDeviceGet"));
  SSD_RETURN_IF_ERROR(check(drv.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain"));
  SSD_RETURN_IF_ERROR(check(drv.cuCtxSetCurrent(ctx), "cuCtxSetCurrent"));
  return ctx;
}

}  // namespace ssd::cuda
