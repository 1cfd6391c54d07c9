// The sm_90a kernels' TMA operand maps (SSD_FLAG_TMA) of the caller's (b, L, heads, inner) tensors and
// of workspace tensors laid out as them: whether a tensor fits one, and its encoded map in a kernel's
// parameter block. The forward's state pass and chunk_scan_fwd, and the backward's fused state pass.
#pragma once

#include <cstdint>

#include <cuda.h>

#include "common/status.h"
#include "ssd/primitives/tensor_map.cuh"
#include "ssd/ssd.h"

namespace ssd {

// A (b, L, heads, 16-bit elements) tensor as a 4-D tensor map (x, B, C, dy): a 16-byte aligned base,
// unit innermost stride, the other strides positive multiples of 16 bytes below 2^39 (the driver's
// limit is 2^40; an axis of extent 1 may have any stride: its coordinate is always 0), every extent and
// TMA's 32-bit coordinates below 2^31.
bool fits_tma_map(const ssd_tensor& t);
// Such a tensor's map: dims {inner, heads, L, b}, box {64, 1, rows, 1}, 128-byte swizzle.
Result<CUtensorMap> blhp_map(const ssd_tensor& v, uint32_t rows);
// A contiguous workspace tensor of `eb`-byte elements, dims {d0, d1, d2, d3} innermost first: its map
// with box {b0, b1, 1, 1}, 128-byte swizzle (chunk_scan_fwd's P and CB, chunk_scan_bwd_dx's P and ds terms).
Result<CUtensorMap> dense_map(const void* base, ssd_dtype dtype, uint64_t eb, const uint64_t (&dims)[4], uint32_t b0,
                              uint32_t b1);
// An encoded map (or its encoding's status) into a parameter block's TensorMap.
Status put_map(const Result<CUtensorMap>& m, ssd_kernels::TensorMap& out);

}  // namespace ssd
