// Host-side conversions between float and the 16-bit float formats, round to nearest even (the
// same results as the device's cvt.rn). For tests, benchmarks and tools that fill device buffers.
#pragma once

#include <cstdint>

namespace ssd {

uint16_t float_to_bf16(float f);
float bf16_to_float(uint16_t h);
uint16_t float_to_fp16(float f);
float fp16_to_float(uint16_t h);

}  // namespace ssd
