#include "runtime/tensor_map.h"

#include <algorithm>
#include <iterator>

#include <fmt/format.h>

#include "runtime/driver.h"

namespace ssd::cuda {
namespace {

static_assert(sizeof(CUtensorMap) == 128 && alignof(CUtensorMap) == 128,
              "tensor_map.cuh's TensorMap mirrors CUtensorMap: 128 bytes, 128-byte aligned");

uint64_t element_bytes(ssd_dtype dtype) { return dtype == SSD_DTYPE_BF16 || dtype == SSD_DTYPE_FP16 ? 2 : 4; }

uint32_t swizzle_span(TmaSwizzle s) {
  switch (s) {
    case TmaSwizzle::k32B: return 32;
    case TmaSwizzle::k64B: return 64;
    case TmaSwizzle::k128B: return 128;
    default: return 0;
  }
}

Status invalid(ssd_status code, const std::string& what) { return make_error(code, "tensor map: " + what); }

}  // namespace

Status validate_tensor_map(const TensorMapDesc& d) {
  if (d.dtype != SSD_DTYPE_BF16 && d.dtype != SSD_DTYPE_FP16 && d.dtype != SSD_DTYPE_FP32 && d.dtype != SSD_DTYPE_INT32)
    return invalid(SSD_ERROR_INVALID_DTYPE, fmt::format("dtype {} is not bf16, fp16, fp32 or int32", int(d.dtype)));
  if (d.rank < 1 || d.rank > 5) return invalid(SSD_ERROR_INVALID_ARGUMENT, fmt::format("rank {} is not 1..5", d.rank));
  if (!d.base) return invalid(SSD_ERROR_NULL_POINTER, "base is null");
  if (reinterpret_cast<uintptr_t>(d.base) % 16)
    return invalid(SSD_ERROR_INVALID_ALIGNMENT, "base is not 16-byte aligned");
  const uint64_t eb = element_bytes(d.dtype);
  for (int i = 0; i < d.rank; ++i) {
    if (d.dims[i] < 1 || d.dims[i] > (uint64_t(1) << 32))
      return invalid(SSD_ERROR_INVALID_SHAPE, fmt::format("dims[{}] = {} is not 1..2^32", i, d.dims[i]));
    if (d.box[i] < 1 || d.box[i] > 256)
      return invalid(SSD_ERROR_INVALID_SHAPE, fmt::format("box[{}] = {} is not 1..256", i, d.box[i]));
    if (i > 0 && (d.strides[i] % 16 || d.strides[i] == 0 || d.strides[i] >= (uint64_t(1) << 40)))
      return invalid(SSD_ERROR_INVALID_STRIDE,
                     fmt::format("strides[{}] = {} bytes is not a positive multiple of 16 below 2^40", i, d.strides[i]));
  }
  const uint64_t inner_bytes = d.box[0] * eb;
  if (inner_bytes % 16)
    return invalid(SSD_ERROR_INVALID_SHAPE, fmt::format("box[0] = {} elements is {} bytes, not a multiple of 16", d.box[0],
                                                        inner_bytes));
  const uint32_t span = swizzle_span(d.swizzle);
  if (span && inner_bytes > span)
    return invalid(SSD_ERROR_INVALID_SHAPE, fmt::format("box[0] = {} elements is {} bytes, more than the {}-byte swizzle span",
                                                        d.box[0], inner_bytes, span));
  return Status::Ok();
}

namespace {

bool same_desc(const TensorMapDesc& a, const TensorMapDesc& b) {
  if (a.dtype != b.dtype || a.base != b.base || a.rank != b.rank || a.swizzle != b.swizzle) return false;
  for (int i = 0; i < a.rank; ++i)
    if (a.dims[i] != b.dims[i] || a.box[i] != b.box[i] || (i > 0 && a.strides[i] != b.strides[i])) return false;
  return true;
}

// The maps this thread encoded last: cuTensorMapEncodeTiled is a pure function of its arguments,
// and a call repeated on the same tensors (the sliced backward encodes 16 maps per call) finds its
// maps here instead of asking the driver again. Least recently used out.
struct EncodedMaps {
  static constexpr int kSize = 64;
  struct Slot {
    TensorMapDesc desc;
    CUtensorMap map;
    uint64_t last_use = 0;  // 0: empty
  };
  Slot slots[kSize];
  uint64_t clock = 0;

  const CUtensorMap* find(const TensorMapDesc& d) {
    for (Slot& s : slots)
      if (s.last_use && same_desc(s.desc, d)) {
        s.last_use = ++clock;
        return &s.map;
      }
    return nullptr;
  }
  void add(const TensorMapDesc& d, const CUtensorMap& map) {
    Slot* victim = std::min_element(std::begin(slots), std::end(slots),
                                    [](const Slot& a, const Slot& b) { return a.last_use < b.last_use; });
    victim->desc = d;
    victim->map = map;
    victim->last_use = ++clock;
  }
};

}  // namespace

Result<CUtensorMap> encode_tensor_map(const TensorMapDesc& d) {
  SSD_RETURN_IF_ERROR(validate_tensor_map(d));
  thread_local EncodedMaps encoded;
  if (const CUtensorMap* m = encoded.find(d)) return *m;
  const Driver* drv = nullptr;
  SSD_ASSIGN_OR_RETURN(drv, driver());
  CUtensorMapDataType type = d.dtype == SSD_DTYPE_BF16   ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                             : d.dtype == SSD_DTYPE_FP16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                             : d.dtype == SSD_DTYPE_FP32 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                                         : CU_TENSOR_MAP_DATA_TYPE_INT32;
  CUtensorMapSwizzle swizzle = d.swizzle == TmaSwizzle::k32B    ? CU_TENSOR_MAP_SWIZZLE_32B
                               : d.swizzle == TmaSwizzle::k64B  ? CU_TENSOR_MAP_SWIZZLE_64B
                               : d.swizzle == TmaSwizzle::k128B ? CU_TENSOR_MAP_SWIZZLE_128B
                                                                : CU_TENSOR_MAP_SWIZZLE_NONE;
  cuuint64_t dims[5], strides[4];
  cuuint32_t box[5], element_strides[5];
  for (int i = 0; i < d.rank; ++i) {
    dims[i] = d.dims[i];
    box[i] = d.box[i];
    element_strides[i] = 1;
    if (i > 0) strides[i - 1] = d.strides[i];
  }
  CUtensorMap map;
  SSD_RETURN_IF_ERROR(check(drv->cuTensorMapEncodeTiled(
                                &map, type, cuuint32_t(d.rank), const_cast<void*>(d.base), dims, strides, box,
                                element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
                            "cuTensorMapEncodeTiled"));
  encoded.add(d, map);
  return map;
}

TensorMapDesc matrix_map_desc(ssd_dtype dtype, const void* base, uint64_t rows, uint64_t cols, uint64_t row_stride,
                              uint32_t box_rows, uint32_t box_cols, TmaSwizzle swizzle) {
  TensorMapDesc d;
  d.dtype = dtype;
  d.base = base;
  d.rank = 2;
  d.dims[0] = cols;
  d.dims[1] = rows;
  d.strides[1] = row_stride * element_bytes(dtype);
  d.box[0] = box_cols;
  d.box[1] = box_rows;
  d.swizzle = swizzle;
  return d;
}

}  // namespace ssd::cuda
