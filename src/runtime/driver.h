// The CUDA driver API, loaded at run time (dlopen("libcuda.so.1") + cuGetProcAddress), so the
// library, the CLI and the tests run on machines without a driver and say so with a status.
#pragma once

#include <cuda.h>

#include "common/status.h"

namespace ssd::cuda {

struct Driver {
#define SSD_DRIVER_FN(name) decltype(&::name) name = nullptr;
#include "runtime/driver_functions.inc"
#undef SSD_DRIVER_FN
  // Optional (CUDA 12.4+; null before): the parameter layout the launch graphs copy.
  decltype(&::cuFuncGetParamInfo) cuFuncGetParamInfo = nullptr;
};

// Loads and initializes (cuInit) once per process. SSD_ERROR_NO_DRIVER when libcuda is absent,
// SSD_ERROR_NO_DEVICE when cuInit fails (no GPU).
Result<const Driver*> driver();

// SSD_ERROR_CUDA with "<what>: CUDA_ERROR_X (message)" unless r == CUDA_SUCCESS.
Status check(CUresult r, const char* what);

// The calling thread's current context, or device 0's primary context made current.
Result<CUcontext> current_context();

}  // namespace ssd::cuda
