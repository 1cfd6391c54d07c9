// Reading caller structs that start with struct_size (ABI growth): fields past the caller's size
// keep the library's defaults.
#pragma once

#include <cstring>

#include <fmt/format.h>

#include "common/status.h"

namespace ssd {

template <class T>
Result<T> read_sized_struct(const T* user, const T& defaults, const char* name, size_t minimum_size) {
  if (!user) return make_error(SSD_ERROR_INVALID_ARGUMENT, fmt::format("{}: NULL pointer", name));
  const size_t size = user->struct_size;
  if (size < minimum_size || size > (size_t(1) << 16))
    return make_error(SSD_ERROR_INVALID_ARGUMENT, fmt::format("{}.struct_size: {} (set it to sizeof = {})", name,
                                                              user->struct_size, sizeof(T)));
  T out = defaults;
  std::memcpy(&out, user, std::min(user->struct_size, sizeof(T)));
  out.struct_size = sizeof(T);
  return out;
}

}  // namespace ssd
