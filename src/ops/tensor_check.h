// Validation of caller tensors: every failure names the argument and says what was expected.
#pragma once

#include <initializer_list>
#include <string>

#include "common/status.h"

namespace ssd {

size_t dtype_size(ssd_dtype dtype);

struct TensorSpec {
  const char* name;                      // e.g. "dt"
  std::initializer_list<int64_t> shape;  // expected sizes; -1 = any (>= 1)
  std::initializer_list<ssd_dtype> dtypes;
  bool output = false;                   // outputs must not overlap themselves
  bool unit_last_stride = false;         // innermost axis must have stride 1
};

// A tensor over `data` with row-major (contiguous) strides.
ssd_tensor contiguous_tensor(void* data, ssd_dtype dtype, std::initializer_list<int64_t> shape);

// Checks pointer, dtype, ndim, shape, strides (>= 0; 64-bit offsets), alignment, self-overlap.
Status check_tensor(const ssd_tensor& t, const TensorSpec& spec);

}  // namespace ssd
