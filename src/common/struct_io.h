// Reading caller structs that start with struct_size (ABI growth): fields past the caller's size
// keep the library's defaults.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include <fmt/format.h>

#include "common/status.h"

namespace ssd {

// The integer an enum field of a caller's struct holds. C callers may store any int there; loading
// a value outside the enumerators' range as the enum type is undefined behaviour in C++, so such
// fields are read through memcpy and range-checked as integers before they are used as enums.
template <class E>
int64_t enum_value(const E& field) {
  static_assert(std::is_enum<E>::value, "enum fields only");
  std::make_signed_t<std::underlying_type_t<E>> raw;  // C stores int values: -1, not 4294967295
  std::memcpy(&raw, &field, sizeof raw);
  return int64_t(raw);
}

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
