#include "common/float16.h"

#include <cstring>

namespace ssd {

uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffff) > 0x7f800000) return 0x7fc0;
  u += 0x7fff + ((u >> 16) & 1);
  return uint16_t(u >> 16);
}
float bf16_to_float(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t float_to_fp16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000, absx = x & 0x7fffffff;
  if (absx >= 0x7f800000) return uint16_t(sign | (absx > 0x7f800000 ? 0x7e00 : 0x7c00));
  if (absx >= 0x477ff000) return uint16_t(sign | 0x7c00);
  if (absx < 0x38800000) {  // half subnormal or zero
    if (absx < 0x33000000) return uint16_t(sign);
    const uint32_t e = absx >> 23, m = (absx & 0x7fffff) | 0x800000;
    const int shift = int(126 - e);
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;
    return uint16_t(sign | r);
  }
  const uint32_t rebased = absx - 0x38000000;
  uint32_t h = rebased >> 13;
  const uint32_t rem = rebased & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;
  return uint16_t(sign | h);
}
float fp16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e == 0) {
    float f = float(m) * 5.9604644775390625e-8f;
    return sign ? -f : f;
  }
  uint32_t u = e == 31 ? (sign | 0x7f800000 | (m << 13)) : (sign | ((e + 112) << 23) | (m << 13));
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace ssd
