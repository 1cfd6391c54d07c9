// Small pieces every operation (chunk_cumsum, ssd_forward, ssd_backward) shares: the C API
// argument defaults and the grid sizes of the grid-stride kernels.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "common/status.h"
#include "common/struct_io.h"

namespace ssd {

// An args struct as its *_init function gives it (include/ssd/ssd.h): zeros, struct_size, chunk
// 256, dt_limit = (0, +inf). Args: any of the ssd_*_args structs with those fields.
template <class Args>
Args default_dt_args() {
  Args a{};
  a.struct_size = sizeof(a);
  a.chunk_size = 256;
  a.dt_limit_lo = 0.f;
  a.dt_limit_hi = INFINITY;
  return a;
}

// The dt transform's options (softplus, dt_limit) of `from` into `to`, for the ops that call
// another op's launcher with the caller's arguments.
template <class To, class From>
void copy_dt_options(To& to, const From& from) {
  to.dt_softplus = from.dt_softplus;
  to.dt_limit_lo = from.dt_limit_lo;
  to.dt_limit_hi = from.dt_limit_hi;
}

// The caller's args read up to its struct_size over `defaults` (common/struct_io.h), then
// checked: check(args, dims) fills the call's dimensions.
template <class Args, class Dims, class Check>
Status read_checked_args(const Args* user_args, const Args& defaults, Check check, Args& args, Dims& dims) {
  SSD_ASSIGN_OR_RETURN(args, read_sized_struct(user_args, defaults, "args", sizeof(Args)));
  return check(args, dims);
}

// Grid sizes: every kernel walks its work items grid-stride, so a launch axis is min(work,
// max_blocks (the launch option; <= 0: no cap), the axis limit), at least 1. grid_x for the x
// axis (limit 2^31 - 1), grid_yz for y and z (limit 65535).
inline unsigned grid_axis(int64_t work, int32_t max_blocks, int64_t limit) {
  const int64_t cap = max_blocks > 0 ? std::min<int64_t>(max_blocks, limit) : limit;
  return unsigned(std::max<int64_t>(1, std::min<int64_t>(work, cap)));
}
inline unsigned grid_x(int64_t work, int32_t max_blocks) { return grid_axis(work, max_blocks, 0x7fffffff); }
inline unsigned grid_yz(int64_t work, int32_t max_blocks) { return grid_axis(work, max_blocks, 65535); }

}  // namespace ssd
