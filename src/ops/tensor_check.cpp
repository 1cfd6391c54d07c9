#include "ops/tensor_check.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include <fmt/format.h>

#include "common/struct_io.h"
#include "config/config.h"

namespace ssd {

size_t dtype_size(ssd_dtype dtype) {
  switch (dtype) {
    case SSD_DTYPE_BF16:
    case SSD_DTYPE_FP16: return 2;
    case SSD_DTYPE_FP32:
    case SSD_DTYPE_INT32: return 4;
  }
  return 0;
}

namespace {
std::string shape_text(const ssd_tensor& t) {
  std::string s = "(";
  for (int i = 0; i < t.ndim && i < SSD_MAX_DIMS; ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
  return s + ")";
}
std::string expected_text(std::initializer_list<int64_t> shape) {
  std::string s = "(";
  int i = 0;
  for (int64_t v : shape) s += (i++ ? ", " : "") + (v < 0 ? std::string("*") : std::to_string(v));
  return s + ")";
}
}  // namespace

ssd_tensor contiguous_tensor(void* data, ssd_dtype dtype, std::initializer_list<int64_t> shape) {
  ssd_tensor t{};
  t.data = data;
  t.dtype = dtype;
  t.ndim = int32_t(shape.size());
  int i = 0;
  for (int64_t s : shape) t.shape[i++] = s;
  int64_t stride = 1;
  for (int k = t.ndim - 1; k >= 0; --k) {
    t.strides[k] = stride;
    stride *= t.shape[k];
  }
  return t;
}

size_t CheckedSize::mul(std::initializer_list<int64_t> factors) {
  size_t r = 1;
  for (int64_t f : factors)
    if (f < 0 || __builtin_mul_overflow(r, uint64_t(f), &r)) overflowed_ = true;
  return overflowed_ ? 0 : r;
}

size_t CheckedSize::add(size_t a, size_t b) {
  size_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) overflowed_ = true;
  return overflowed_ ? 0 : r;
}

size_t CheckedSize::align_up(size_t v, size_t alignment) {
  const size_t r = add(v, alignment - 1);
  return overflowed_ ? 0 : r / alignment * alignment;
}

Status CheckedSize::overflow_error(const char* what, const std::string& shapes) {
  return make_error(SSD_ERROR_INVALID_SHAPE,
                    fmt::format("{} needs more than 2^64 bytes of workspace (shapes {})", what, shapes));
}

Status check_tensor(const ssd_tensor& t, const TensorSpec& spec) {
  if (!t.data) return make_error(SSD_ERROR_NULL_POINTER, fmt::format("{}: data is NULL", spec.name));
  // The caller's dtype is compared as an integer: it may hold any int (reading an out-of-range
  // value as ssd_dtype is undefined behaviour). Past this check t.dtype is a valid enumerator.
  const int64_t dtype = enum_value(t.dtype);
  bool dtype_ok = false;
  std::string legal;
  for (ssd_dtype d : spec.dtypes) {
    dtype_ok |= dtype == d;
    legal += (legal.empty() ? "" : ", ") + std::string(dtype_name(d));
  }
  if (!dtype_ok)
    return make_error(SSD_ERROR_INVALID_DTYPE,
                      fmt::format("{}: dtype {} (legal: {})", spec.name,
                                  is_dtype_value(dtype) ? std::string(dtype_name(static_cast<ssd_dtype>(dtype)))
                                                        : fmt::format("{} (not an ssd_dtype)", dtype),
                                  legal));
  if (t.ndim != int(spec.shape.size()))
    return make_error(SSD_ERROR_INVALID_SHAPE, fmt::format("{}: {} dimensions, expected {} {}", spec.name, t.ndim,
                                                           spec.shape.size(), expected_text(spec.shape)));
  int i = 0;
  for (int64_t want : spec.shape) {
    if (t.shape[i] < 1 || (want >= 0 && t.shape[i] != want))
      return make_error(SSD_ERROR_INVALID_SHAPE, fmt::format("{}: shape {} does not match {} (dimension {})", spec.name,
                                                             shape_text(t), expected_text(spec.shape), i));
    ++i;
  }
  __int128 extent = 0;
  for (int d = 0; d < t.ndim; ++d) {
    if (t.strides[d] < 0)
      return make_error(SSD_ERROR_INVALID_STRIDE,
                        fmt::format("{}: stride {} of dimension {} is negative", spec.name, t.strides[d], d));
    extent += __int128(t.shape[d] - 1) * t.strides[d];
  }
  if (extent >= (__int128(1) << 62))
    return make_error(SSD_ERROR_INVALID_STRIDE, fmt::format("{}: element offsets exceed 2^62", spec.name));
  if (spec.unit_last_stride && t.shape[t.ndim - 1] > 1 && t.strides[t.ndim - 1] != 1)
    return make_error(SSD_ERROR_INVALID_STRIDE, fmt::format("{}: innermost stride is {}, must be 1", spec.name,
                                                            t.strides[t.ndim - 1]));
  if (spec.output) {
    // Non-overlapping: with axes sorted by stride, each stride must exceed the span of the smaller ones.
    std::vector<int> axes;
    for (int d = 0; d < t.ndim; ++d)
      if (t.shape[d] > 1) axes.push_back(d);
    std::sort(axes.begin(), axes.end(), [&](int a, int b) { return t.strides[a] < t.strides[b]; });
    __int128 span = 0;
    for (int d : axes) {
      if (t.strides[d] <= span)
        return make_error(SSD_ERROR_INVALID_STRIDE,
                          fmt::format("{}: strides make elements overlap (output tensors must not alias themselves)",
                                      spec.name));
      span += __int128(t.shape[d] - 1) * t.strides[d];
    }
  }
  // Last: docs/api.md lists the checks in this order (every stride problem before alignment).
  if (reinterpret_cast<uintptr_t>(t.data) % dtype_size(t.dtype) != 0)
    return make_error(SSD_ERROR_INVALID_ALIGNMENT, fmt::format("{}: pointer {} is not aligned to its {}-byte elements",
                                                               spec.name, t.data, dtype_size(t.dtype)));
  return Status::Ok();
}

}  // namespace ssd
