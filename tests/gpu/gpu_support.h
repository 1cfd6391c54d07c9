// Shared helpers of the GPU tests: device detection (tests skip, counted, without one), device
// buffers through the run-time-loaded driver, host 16-bit float conversions, random inputs.
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "common/float16.h"
#include "config/config.h"  // dtype_name
#include "reference/ssd_reference.h"
#include "runtime/driver.h"
#include "ssd/ssd.h"

namespace gputest {

// True when a driver and a device exist; makes device 0's primary context current.
bool gpu_available();
const std::string& gpu_unavailable_reason();
const ssd::cuda::Driver& drv();

// Aborts the test case with the status detail on failure.
#define GPU_CHECK_CU(expr) REQUIRE(::ssd::cuda::check((expr), #expr).detail == std::string())
#define GPU_CHECK_SSD(expr)                                                      \
  do {                                                                           \
    ssd_status s_ = (expr);                                                      \
    INFO(#expr << " -> " << ssd_status_string(s_) << ": " << ssd_last_error_detail()); \
    REQUIRE(s_ == SSD_OK);                                                       \
  } while (0)

// An ssd_runtime for one test (arch 0 = from the device; launch_graphs as ssd_runtime_options'); fails
// the test if creation fails.
struct RuntimeHolder {
  ssd_runtime* rt = nullptr;
  explicit RuntimeHolder(int arch = 0, int launch_graphs = 0);
  ~RuntimeHolder() { ssd_runtime_destroy(rt); }
  RuntimeHolder(const RuntimeHolder&) = delete;
  RuntimeHolder& operator=(const RuntimeHolder&) = delete;
};

// Does the device run sm_90a units (the wgmma kernels)? The tests that compare them with the sm_90
// build's mma.sync kernels skip elsewhere (sm_80 cubins do not load on a 9.x device).
bool device_is_sm90a();

// The loop of the tests over a case table: check(rt, c) for each case on one runtime, with the
// case (its file's describe(c)) in every failure message.
template <class Cases, class Check>
void for_each_case(const Cases& cases, Check check) {
  RuntimeHolder rt;
  for (const auto& c : cases) {
    CAPTURE(describe(c));
    check(rt.rt, c);
  }
}
template <class Case, class Check>
void for_each_case(std::initializer_list<Case> cases, Check check) {
  for_each_case<std::initializer_list<Case>, Check>(cases, check);
}

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = 0; o.bytes_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  void* get() const { return reinterpret_cast<void*>(ptr_); }
  size_t bytes() const { return bytes_; }
  void upload(const void* host, size_t bytes);
  void download(void* host, size_t bytes) const;
  void poison();  // every byte 0xFF: NaN in fp32, bf16 and fp16
  template <class T> std::vector<T> to_host(size_t count) const {
    std::vector<T> v(count);
    download(v.data(), count * sizeof(T));
    return v;
  }

 private:
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

using ssd::bf16_to_float;
using ssd::float_to_bf16;
using ssd::float_to_fp16;
using ssd::fp16_to_float;
size_t dtype_bytes(ssd_dtype d);

// A host array of `dtype` elements, with its values also as doubles (the exact rounded values).
struct HostArray {
  ssd_dtype dtype;
  std::vector<uint8_t> bytes;
  std::vector<double> values;
};
HostArray make_array(ssd_dtype dtype, const std::vector<double>& values);
// A device copy of a host array (at least 4 bytes allocated, so empty arrays are valid too).
DeviceBuffer upload_array(const HostArray& a);
// Decodes `count` elements of device memory.
std::vector<double> download_values(const DeviceBuffer& buf, ssd_dtype dtype, size_t count);

ssd_tensor tensor(const DeviceBuffer& buf, ssd_dtype dtype, std::vector<int64_t> shape, std::vector<int64_t> strides = {});
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape);

std::mt19937_64& rng();
std::vector<double> uniform(size_t n, double lo, double hi);
std::vector<double> normal(size_t n);

// "b=.. L=.. h=.. p=.. g=.. n=.. Q=.. <dtype>" and the options that are on, for a forward or
// backward test case (fields b, L, h, p, g, n, Q, dtype, D, D_per_headdim, z, bias, softplus, init,
// seq_idx).
template <class Case>
std::string describe_ssd_case(const Case& c) {
  std::string s = "b=" + std::to_string(c.b) + " L=" + std::to_string(c.L) + " h=" + std::to_string(c.h) +
                  " p=" + std::to_string(c.p) + " g=" + std::to_string(c.g) + " n=" + std::to_string(c.n) +
                  " Q=" + std::to_string(c.Q) + " " + ssd::dtype_name(c.dtype);
  if (c.D) s += c.D_per_headdim ? " D(h,p)" : " D(h)";
  if (c.z) s += " z";
  if (c.bias) s += " bias";
  if (c.softplus) s += " softplus";
  if (c.init) s += " init";
  if (c.seq_idx) s += " seq_idx";
  return s;
}

// The float64 oracle's view of a forward or backward test problem: its case `c` and host inputs
// x, dt, A, B, C, D, z, bias, init (HostArray) and seq (int32 values).
template <class Problem>
ssd::ref::SsdProblem oracle_problem_of(const Problem& pr) {
  ssd::ref::SsdProblem q;
  q.sz = {pr.c.b, pr.c.L, pr.c.h, pr.c.p, pr.c.g, pr.c.n, pr.c.Q};
  q.x = pr.x.values.data(); q.dt = pr.dt.values.data(); q.A = pr.A.values.data();
  q.B = pr.B.values.data(); q.C = pr.C.values.data();
  if (pr.c.D) { q.D = pr.D.values.data(); q.D_per_headdim = pr.c.D_per_headdim; }
  if (pr.c.z) q.z = pr.z.values.data();
  if (pr.c.bias) q.dt_bias = pr.bias.values.data();
  if (pr.c.init) q.initial_states = pr.init.values.data();
  if (pr.c.seq_idx) q.seq_idx = pr.seq.data();
  q.dt_softplus = pr.c.softplus;
  return q;
}

// The random inputs a forward or backward test problem draws after x, z (and dout), in this order
// (the same draws give the same inputs): B, C, dt, A, D, dt_bias, the initial states; and the
// seq_idx pattern: boundaries inside chunks and at a chunk edge, odd rows start at id 1 (no init).
template <class Problem>
void draw_ssd_inputs(Problem& pr) {
  const auto& c = pr.c;
  const size_t nbc = size_t(c.b * c.L * c.g * c.n);
  pr.B = make_array(c.dtype, normal(nbc));
  pr.C = make_array(c.dtype, normal(nbc));
  pr.dt = make_array(c.dtype, c.softplus ? uniform(size_t(c.b * c.L * c.h), -3.0, 0.5)
                                         : uniform(size_t(c.b * c.L * c.h), -0.01, 0.2));
  pr.A = make_array(SSD_DTYPE_FP32, uniform(size_t(c.h), -4.0, -0.5));
  pr.D = make_array(SSD_DTYPE_FP32, uniform(size_t(c.D_per_headdim ? c.h * c.p : c.h), 0.5, 1.5));
  pr.bias = make_array(SSD_DTYPE_FP32, uniform(size_t(c.h), -3.0, -1.0));
  pr.init = make_array(SSD_DTYPE_FP32, normal(size_t(c.b * c.h * c.p * c.n)));
  pr.seq.assign(size_t(c.b * c.L), 0);
  if (!c.seq_idx) return;
  for (int64_t bi = 0; bi < c.b; ++bi) {
    int id = int(bi % 2);
    for (int64_t t = 0; t < c.L; ++t) {
      if (t == c.Q / 3 || t == c.Q || t == c.L - 5) ++id;
      pr.seq[size_t(bi * c.L + t)] = id;
    }
  }
}

// The shape matrix of the forward and backward sweeps: every (headdim, dstate, chunk, dtype) with
// 8 heads; ngroups (1, 2, 8), the length (1 to 3 chunks, + 37 every other case) and the options
// (D, D per headdim, z, dt_bias, softplus, initial states, seq_idx) rotate with the case index i so
// each is seen on and off. Case: FwdCase or BwdCase (its fields in that order); extra(i, case)
// sets the fields past seq_idx.
template <class Case>
std::vector<Case> shape_matrix(void (*extra)(int i, Case& c) = nullptr) {
  std::vector<Case> cases;
  int i = 0;
  for (int64_t p : {32, 64, 128})
    for (int64_t n : {16, 64, 128, 256})
      for (int32_t Q : {64, 128, 256})
        for (ssd_dtype dt : {SSD_DTYPE_BF16, SSD_DTYPE_FP16}) {
          const int64_t g = (i % 3 == 0) ? 1 : (i % 3 == 1) ? 2 : 8;
          Case c{1 + (i % 2), int64_t(Q) * (1 + i % 3) + 37 * (i % 2), 8, p, g, n, Q, dt,
                 i % 4 != 3, i % 4 == 1, i % 3 == 0, i % 2 == 0, i % 2 == 0, i % 5 == 0, i % 4 == 2};
          if (extra) extra(i, c);
          cases.push_back(c);
          ++i;
        }
  return cases;
}

bool all_finite(const std::vector<double>& v);
bool same_bytes(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b);
std::vector<uint8_t> download_bytes(const DeviceBuffer& buf);
// The bytes of every buffer in `bufs`, one after the other.
inline std::vector<uint8_t> download_all(std::initializer_list<const DeviceBuffer*> bufs) {
  std::vector<uint8_t> out;
  for (const DeviceBuffer* b : bufs) {
    const std::vector<uint8_t> part = download_bytes(*b);
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}
inline void poison_all(std::initializer_list<DeviceBuffer*> bufs) {
  for (DeviceBuffer* b : bufs) b->poison();
}

}  // namespace gputest
