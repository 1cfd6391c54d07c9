// Host bf16 / fp16 conversions: exact values, round-to-nearest-even ties, specials, subnormals.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>

#include "common/float16.h"

using namespace ssd;

namespace {
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace

TEST_CASE("bf16: exact values round-trip, ties go to even, NaN stays NaN") {
  for (float v : {0.f, 1.f, -2.5f, 65536.f, 1.0078125f}) CHECK(bf16_to_float(float_to_bf16(v)) == v);
  CHECK(float_to_bf16(from_bits(0x3f808000)) == 0x3f80);  // tie below: even mantissa kept
  CHECK(float_to_bf16(from_bits(0x3f818000)) == 0x3f82);  // tie above odd: rounds up to even
  CHECK(float_to_bf16(from_bits(0x3f808001)) == 0x3f81);  // just over the tie
  CHECK(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isinf(bf16_to_float(float_to_bf16(std::numeric_limits<float>::infinity()))));
}

TEST_CASE("fp16: exact values, ties, overflow, subnormals") {
  for (float v : {0.f, 1.f, -2.5f, 65504.f, 0.000061035156f, 5.9604645e-8f}) CHECK(fp16_to_float(float_to_fp16(v)) == v);
  CHECK(float_to_fp16(1.f + 1.f / 2048) == 0x3c00);          // tie: even (1.0)
  CHECK(float_to_fp16(1.f + 3.f / 2048) == 0x3c02);          // tie: up to even
  CHECK(float_to_fp16(65520.f) == 0x7c00);                   // rounds past the largest finite
  CHECK(float_to_fp16(65519.f) == 0x7bff);
  CHECK(float_to_fp16(2.9802322e-8f) == 0x0000);             // 2^-25: tie between 0 and 2^-24 -> 0
  CHECK(float_to_fp16(4.4703484e-8f) == 0x0001);             // 1.5 * 2^-25 rounds to 2^-24
  CHECK(std::isnan(fp16_to_float(float_to_fp16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(fp16_to_float(0x8001) == -5.9604645e-8f);
  for (uint32_t h = 0; h < 0x7c00; ++h) CHECK(float_to_fp16(fp16_to_float(uint16_t(h))) == h);  // every finite half
}
