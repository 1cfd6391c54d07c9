#include "gpu_support.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <doctest/doctest.h>

#include "runtime/runtime.h"  // runtime_arch

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

RuntimeHolder::RuntimeHolder(int arch, int launch_graphs) {
  ssd_runtime_options o;
  ssd_runtime_options_init(&o);
  o.arch = arch;
  o.launch_graphs = launch_graphs;
  ssd_status s = ssd_runtime_create(&o, &rt);
  if (s != SSD_OK) FAIL("ssd_runtime_create: " << ssd_last_error_detail());
}

bool device_is_sm90a() {
  RuntimeHolder probe;
  auto arch = ssd::runtime_arch(*probe.rt);
  REQUIRE_MESSAGE(arch.ok(), arch.status().detail);
  return arch.value() == SSD_ARCH_SM90A;
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

DeviceBuffer upload_array(const HostArray& a) {
  DeviceBuffer d(std::max<size_t>(a.bytes.size(), 4));
  d.upload(a.bytes.data(), a.bytes.size());
  return d;
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
