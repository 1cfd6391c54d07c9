#include "ops/operand_maps.h"

#include <cstring>

#include "runtime/tensor_map.h"

namespace ssd {

bool fits_tma_map(const ssd_tensor& t) {
  if (reinterpret_cast<uintptr_t>(t.data) % 16 || t.strides[3] != 1) return false;
  for (int i = 0; i < 4; ++i) {
    if (t.shape[i] < 1 || t.shape[i] >= (int64_t(1) << 31)) return false;
    if (i < 3 && t.shape[i] > 1 && (t.strides[i] <= 0 || (t.strides[i] * 2) % 16 || t.strides[i] >= (int64_t(1) << 38)))
      return false;
  }
  return true;
}

Result<CUtensorMap> blhp_map(const ssd_tensor& v, uint32_t rows) {
  ssd::cuda::TensorMapDesc d;
  d.dtype = v.dtype;
  d.base = v.data;
  d.rank = 4;
  for (int i = 0; i < 4; ++i) d.dims[i] = uint64_t(v.shape[3 - i]);
  for (int i = 1; i < 4; ++i) d.strides[i] = v.shape[3 - i] > 1 ? uint64_t(v.strides[3 - i]) * 2 : 16;
  d.box[0] = 64, d.box[1] = 1, d.box[2] = rows, d.box[3] = 1;
  d.swizzle = ssd::cuda::TmaSwizzle::k128B;
  return ssd::cuda::encode_tensor_map(d);
}

Result<CUtensorMap> dense_map(const void* base, ssd_dtype dtype, uint64_t eb, const uint64_t (&dims)[4], uint32_t b0,
                              uint32_t b1) {
  ssd::cuda::TensorMapDesc d;
  d.dtype = dtype;
  d.base = base;
  d.rank = 4;
  uint64_t stride = eb;
  for (int i = 0; i < 4; ++i) {
    d.dims[i] = dims[i];
    if (i > 0) d.strides[i] = stride;
    stride *= dims[i];
  }
  d.box[0] = b0, d.box[1] = b1, d.box[2] = 1, d.box[3] = 1;
  d.swizzle = ssd::cuda::TmaSwizzle::k128B;
  return ssd::cuda::encode_tensor_map(d);
}

Status put_map(const Result<CUtensorMap>& m, ssd_kernels::TensorMap& out) {
  if (!m.ok()) return m.status();
  static_assert(sizeof(CUtensorMap) == sizeof(ssd_kernels::TensorMap), "TensorMap mirrors CUtensorMap");
  std::memcpy(&out, &m.value(), sizeof(out));
  return Status::Ok();
}

}  // namespace ssd
