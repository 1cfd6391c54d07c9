#include "gpu_support.h"

#include <cmath>
#include <stdexcept>

#include <doctest/doctest.h>

namespace gputest {
namespace {
struct Probe {
  bool ok = false;
  std::string reason;
};
const Probe& probe() {
  static const Probe p = [] {
    Probe r;
    auto ctx = ssd::cuda::current_context();
    if (!ctx.ok()) {
      r.reason = ctx.status().detail;
      return r;
    }
    r.ok = true;
    return r;
  }();
  return p;
}
}  // namespace

bool gpu_available() { return probe().ok; }
const std::string& gpu_unavailable_reason() { return probe().reason; }
const ssd::cuda::Driver& drv() { return *ssd::cuda::driver().value(); }

RuntimeHolder::RuntimeHolder(int arch) {
  ssd_runtime_options o;
  ssd_runtime_options_init(&o);
  o.arch = arch;
  ssd_status s = ssd_runtime_create(&o, &rt);
  if (s != SSD_OK) FAIL("ssd_runtime_create: " << ssd_last_error_detail());
}

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (ssd::cuda::driver().value()->cuMemAlloc(&ptr_, bytes ? bytes : 1) != CUDA_SUCCESS)
    throw std::runtime_error("cuMemAlloc failed");
}
DeviceBuffer::~DeviceBuffer() {
  if (ptr_) drv().cuMemFree(ptr_);
}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) drv().cuMemFree(ptr_);
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = 0;
    o.bytes_ = 0;
  }
  return *this;
}
void DeviceBuffer::upload(const void* host, size_t bytes) {
  if (drv().cuMemcpyHtoD(ptr_, host, bytes) != CUDA_SUCCESS) throw std::runtime_error("cuMemcpyHtoD failed");
}
void DeviceBuffer::download(void* host, size_t bytes) const {
  if (drv().cuCtxSynchronize() != CUDA_SUCCESS) throw std::runtime_error("cuCtxSynchronize failed (kernel fault?)");
  if (drv().cuMemcpyDtoH(host, ptr_, bytes) != CUDA_SUCCESS) throw std::runtime_error("cuMemcpyDtoH failed");
}
void DeviceBuffer::poison() {
  if (drv().cuMemsetD8(ptr_, 0xFF, bytes_) != CUDA_SUCCESS) throw std::runtime_error("cuMemsetD8 failed");
}

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
size_t dtype_bytes(ssd_dtype d) { return d == SSD_DTYPE_BF16 || d == SSD_DTYPE_FP16 ? 2 : 4; }

HostArray make_array(ssd_dtype dtype, const std::vector<double>& values) {
  HostArray a{dtype, std::vector<uint8_t>(values.size() * dtype_bytes(dtype)), std::vector<double>(values.size())};
  for (size_t i = 0; i < values.size(); ++i) {
    const float f = float(values[i]);
    if (dtype == SSD_DTYPE_BF16) {
      uint16_t h = float_to_bf16(f);
      std::memcpy(&a.bytes[2 * i], &h, 2);
      a.values[i] = bf16_to_float(h);
    } else if (dtype == SSD_DTYPE_FP16) {
      uint16_t h = float_to_fp16(f);
      std::memcpy(&a.bytes[2 * i], &h, 2);
      a.values[i] = fp16_to_float(h);
    } else {
      std::memcpy(&a.bytes[4 * i], &f, 4);
      a.values[i] = f;
    }
  }
  return a;
}

std::vector<double> download_values(const DeviceBuffer& buf, ssd_dtype dtype, size_t count) {
  std::vector<uint8_t> bytes(count * dtype_bytes(dtype));
  buf.download(bytes.data(), bytes.size());
  std::vector<double> v(count);
  for (size_t i = 0; i < count; ++i) {
    if (dtype == SSD_DTYPE_FP32) {
      float f;
      std::memcpy(&f, &bytes[4 * i], 4);
      v[i] = f;
    } else {
      uint16_t h;
      std::memcpy(&h, &bytes[2 * i], 2);
      v[i] = dtype == SSD_DTYPE_BF16 ? bf16_to_float(h) : fp16_to_float(h);
    }
  }
  return v;
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int i = int(shape.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * shape[i + 1];
  return s;
}

ssd_tensor tensor(const DeviceBuffer& buf, ssd_dtype dtype, std::vector<int64_t> shape, std::vector<int64_t> strides) {
  if (strides.empty()) strides = contiguous_strides(shape);
  ssd_tensor t{};
  t.data = buf.get();
  t.dtype = dtype;
  t.ndim = int32_t(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    t.shape[i] = shape[i];
    t.strides[i] = strides[i];
  }
  return t;
}

std::mt19937_64& rng() {
  static std::mt19937_64 g(std::random_device{}());
  return g;
}
std::vector<double> uniform(size_t n, double lo, double hi) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = d(rng());
  return v;
}
std::vector<double> normal(size_t n) {
  std::normal_distribution<double> d(0.0, 1.0);
  std::vector<double> v(n);
  for (double& x : v) x = d(rng());
  return v;
}

bool all_finite(const std::vector<double>& v) {
  for (double x : v)
    if (!std::isfinite(x)) return false;
  return true;
}
bool same_bytes(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size()) == 0;
}
std::vector<uint8_t> download_bytes(const DeviceBuffer& buf) {
  std::vector<uint8_t> v(buf.bytes());
  buf.download(v.data(), v.size());
  return v;
}

}  // namespace gputest
