// TMA tensor maps (CUtensorMap) for the Hopper kernels: the host describes a strided tensor and the
// box that one cp.async.bulk.tensor copies; cuTensorMapEncodeTiled (driver, loaded at run time) encodes
// it. The kernel receives the 128-byte map by value as a `const __grid_constant__ TensorMap` parameter
// (templates/ssd/primitives/hopper.cuh). The checks are the driver's documented requirements, made
// here first so a bad map is a status naming the field, not CUDA_ERROR_INVALID_VALUE.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "common/status.h"
#include "ssd/ssd.h"

namespace ssd::cuda {

enum class TmaSwizzle { kNone, k32B, k64B, k128B };

struct TensorMapDesc {
  ssd_dtype dtype = SSD_DTYPE_BF16;  // bf16, fp16, fp32 or int32
  const void* base = nullptr;        // global address, 16-byte aligned
  int rank = 2;                      // 1..5
  uint64_t dims[5] = {};             // extent of each dimension in elements, innermost first
  uint64_t strides[5] = {};          // byte stride of dimensions 1..rank-1 (strides[0] unused: dense)
  uint32_t box[5] = {};              // elements per copy in each dimension, 1..256
  TmaSwizzle swizzle = TmaSwizzle::kNone;
};

// The driver's requirements: rank 1..5; base non-null, 16-byte aligned; dims 1..2^32; strides multiples
// of 16 below 2^40; box 1..256 per dimension (a box may reach past the tensor's end); the inner box a multiple of 16
// bytes and, with a swizzle, at most its span (32, 64 or 128 bytes). Needs no driver.
Status validate_tensor_map(const TensorMapDesc& desc);

// Validates, then encodes with cuTensorMapEncodeTiled (no interleave, L2 promotion 128 B, out-of-bounds
// elements read as zero). The encoding is a pure function of the description: each thread keeps the
// last 64 maps it encoded and returns a kept one for an equal description without a driver call.
Result<CUtensorMap> encode_tensor_map(const TensorMapDesc& desc);

// A row-major rows x cols matrix with `row_stride` elements between rows, copied in boxes of
// box_rows x box_cols.
TensorMapDesc matrix_map_desc(ssd_dtype dtype, const void* base, uint64_t rows, uint64_t cols, uint64_t row_stride,
                              uint32_t box_rows, uint32_t box_cols, TmaSwizzle swizzle);

}  // namespace ssd::cuda
