#include "ops/workspace.h"

#include <fmt/format.h>

#include "common/log.h"

namespace ssd {

Status CallWorkspace::acquire(ssd_runtime& rt, void* given, size_t bytes, CUstream stream, const char* warning) {
  stream_ = stream;
  base_ = static_cast<char*>(given);
  if (given || bytes == 0) return Status::Ok();
  if (warning && *warning && !rt.warned_workspace.exchange(true)) log_warning(warning);
  const cuda::Driver* drv = nullptr;
  SSD_ASSIGN_OR_RETURN(drv, cuda::driver());
  CUdeviceptr p = 0;
  SSD_RETURN_IF_ERROR(cuda::check(drv->cuMemAllocAsync(&p, bytes, stream), "cuMemAllocAsync(workspace)"));
  base_ = reinterpret_cast<char*>(p);
  owned_ = true;
  return Status::Ok();
}

Status CallWorkspace::release(Status s) {
  if (!owned_) return s;
  owned_ = false;
  const cuda::Driver& drv = *cuda::driver().value();
  Status f = cuda::check(drv.cuMemFreeAsync(reinterpret_cast<CUdeviceptr>(base_), stream_), "cuMemFreeAsync(workspace)");
  return s.ok() ? f : s;
}

}  // namespace ssd
