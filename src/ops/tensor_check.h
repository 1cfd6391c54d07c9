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

// Byte counts computed from caller extents. Shapes pass check_tensor up to 2^62 elements per
// tensor (stride-0 inputs allow more), so products of several extents can exceed size_t: every
// step is checked and the first overflow is remembered (the results are then meaningless).
class CheckedSize {
 public:
  size_t mul(std::initializer_list<int64_t> factors);  // negative factors count as overflow
  size_t add(size_t a, size_t b);
  size_t align_up(size_t v, size_t alignment);
  bool overflowed() const { return overflowed_; }
  // SSD_ERROR_INVALID_SHAPE: "<what> needs more than 2^64 bytes of workspace (shapes <shapes()>)".
  // shapes() (the text) is called only on overflow: every call sizes its workspace, and
  // formatting the shapes each time cost ~0.2 us of the host path.
  template <class Shapes>
  Status status(const char* what, const Shapes& shapes) const {
    return overflowed_ ? overflow_error(what, shapes()) : Status::Ok();
  }

 private:
  static Status overflow_error(const char* what, const std::string& shapes);
  bool overflowed_ = false;
};

// A tensor over `data` with row-major (contiguous) strides.
ssd_tensor contiguous_tensor(void* data, ssd_dtype dtype, std::initializer_list<int64_t> shape);

// Checks pointer, dtype, ndim, shape, strides (>= 0; 64-bit offsets), alignment, self-overlap.
Status check_tensor(const ssd_tensor& t, const TensorSpec& spec);

}  // namespace ssd
