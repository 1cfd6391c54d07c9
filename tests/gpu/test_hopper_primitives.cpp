// The Hopper primitive layer (templates/ssd/primitives/hopper.cuh) on an sm_90 device: TMA tile copies
// through the mbarrier Pipeline (bitwise), a 1-D bulk copy, and wgmma GEMMs fed by TMA (128-byte
// swizzle, K-major and MN-major B), by producer stores (interleaved core matrices), and with A from
// registers, in producer/consumer warpgroup kernels with setmaxnreg; compared with a float64 GEMM of the
// same 16-bit values. Kernels: hopper_test_kernels.h. Run: ssd_gpu_tests -tc="hopper*".
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "codegen/codegen.h"
#include "compile/nvrtc_compiler.h"
#include "gpu_support.h"
#include "hopper_test_kernels.h"
#include "runtime/tensor_map.h"

using namespace gputest;
using ssd::cuda::TmaSwizzle;

namespace {

// True on a compute capability 9.x device (the sm_90a cubin runs only there).
bool is_hopper() {
  CUdevice dev;
  if (drv().cuCtxGetDevice(&dev) != CUDA_SUCCESS) return false;
  int major = 0;
  drv().cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  return major == 9;
}

// The test kernels, compiled once for sm_90a with a bounded mbarrier wait (a protocol error traps
// instead of hanging), loaded into the current context.
CUmodule hopper_module() {
  static CUmodule module = [] {
    ssd::GeneratedUnit u;
    u.file_name = "hopper_primitives_test.cu";
    u.source = "#define SSD_MBARRIER_SPIN_LIMIT (1ll << 22)\n" + hopper_test::kernel_source();
    u.symbol = hopper_test::kCopySw128;
    auto headers = ssd::template_closure(u.source);
    REQUIRE(headers.ok());
    u.headers = *headers;
    auto cubin = ssd::compile_cubin(u, SSD_ARCH_SM90A);
    REQUIRE_MESSAGE(cubin.ok(), cubin.status().detail);
    CUmodule m = nullptr;
    GPU_CHECK_CU(drv().cuModuleLoadData(&m, cubin->cubin.data()));
    return m;
  }();
  return module;
}

void launch(const std::string& name, int grid, int threads, int shared_bytes, std::vector<void*> args) {
  CUfunction f = nullptr;
  GPU_CHECK_CU(drv().cuModuleGetFunction(&f, hopper_module(), name.c_str()));
  if (shared_bytes > 48 * 1024)
    GPU_CHECK_CU(drv().cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_bytes));
  GPU_CHECK_CU(drv().cuLaunchKernel(f, unsigned(grid), 1, 1, unsigned(threads), 1, 1, unsigned(shared_bytes), nullptr,
                                    args.data(), nullptr));
  GPU_CHECK_CU(drv().cuCtxSynchronize());
}

CUtensorMap encode(const ssd::cuda::TensorMapDesc& d) {
  auto map = ssd::cuda::encode_tensor_map(d);
  REQUIRE_MESSAGE(map.ok(), map.status().detail);
  return *map;
}

// "equal", or where two arrays of 16-bit values first differ (row, column of a matrix `cols` wide).
std::string first_difference(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want, int cols) {
  for (size_t i = 0; i < want.size(); ++i)
    if (got[i] != want[i])
      return "first difference at row " + std::to_string(i / cols) + ", column " + std::to_string(i % cols) +
             ": got " + std::to_string(got[i]) + ", want " + std::to_string(want[i]);
  return "equal";
}

std::vector<uint16_t> random_bits(size_t n) {
  std::vector<uint16_t> v(n);
  for (uint16_t& x : v) x = uint16_t(rng()());
  return v;
}

}  // namespace

TEST_CASE("hopper: TMA tiles through the Pipeline copy a bf16 matrix bitwise (no swizzle, 128B swizzle, 3-D)" *
          doctest::skip(!gpu_available())) {
  if (!is_hopper()) {
    MESSAGE("not a compute capability 9.x device: skipped");
    return;
  }
  // Not multiples of the 64 x 64 tile: the edge tiles are zero-filled on load and clipped on store.
  const int rows = 300, cols = 200;
  const size_t bytes = size_t(rows) * cols * 2;
  const std::vector<uint16_t> host = random_bits(size_t(rows) * cols);
  DeviceBuffer in(bytes);
  in.upload(host.data(), bytes);
  for (const char* kernel : {hopper_test::kCopyNone, hopper_test::kCopySw128, hopper_test::kCopy3d})
    for (int grid : {1, 2, 3}) {  // 20 tiles: 20, 10 and 6-7 per CTA, all more than the 3 stages
      CAPTURE(kernel);
      CAPTURE(grid);
      DeviceBuffer out_ld(bytes), out_tma(bytes);
      out_ld.poison();
      out_tma.poison();
      const TmaSwizzle sw = kernel == hopper_test::kCopySw128 ? TmaSwizzle::k128B : TmaSwizzle::kNone;
      ssd::cuda::TensorMapDesc in_desc = ssd::cuda::matrix_map_desc(SSD_DTYPE_BF16, in.get(), rows, cols, cols, 64, 64, sw);
      if (kernel == hopper_test::kCopy3d) {
        in_desc.rank = 3;
        in_desc.dims[2] = 1;
        in_desc.strides[2] = bytes;
        in_desc.box[2] = 1;
      }
      CUtensorMap in_map = encode(in_desc);
      CUtensorMap out_map = encode(ssd::cuda::matrix_map_desc(SSD_DTYPE_BF16, out_tma.get(), rows, cols, cols, 64, 64, sw));
      CUdeviceptr out_ptr = reinterpret_cast<CUdeviceptr>(out_ld.get());
      int r = rows, c = cols;
      launch(kernel, grid, hopper_test::kCopyThreads, hopper_test::kCopySharedBytes, {&in_map, &out_map, &out_ptr, &r, &c});
      std::vector<uint16_t> got_ld = out_ld.to_host<uint16_t>(host.size());
      std::vector<uint16_t> got_tma = out_tma.to_host<uint16_t>(host.size());
      CHECK(first_difference(got_ld, host, cols) == "equal");
      CHECK(first_difference(got_tma, host, cols) == "equal");
    }
}

TEST_CASE("hopper: a 1-D bulk copy through a two-slot Pipeline is bitwise and stays in bounds" *
          doctest::skip(!gpu_available())) {
  if (!is_hopper()) {
    MESSAGE("not a compute capability 9.x device: skipped");
    return;
  }
  const unsigned bytes = 4096 * 5 + 48;  // six chunks, the last partial
  std::vector<uint8_t> host(bytes);
  for (uint8_t& b : host) b = uint8_t(rng()());
  DeviceBuffer in(bytes), out(bytes + 256);
  in.upload(host.data(), bytes);
  out.poison();
  CUdeviceptr in_ptr = reinterpret_cast<CUdeviceptr>(in.get()), out_ptr = reinterpret_cast<CUdeviceptr>(out.get());
  unsigned n = bytes;
  launch(hopper_test::kBulkCopy, 1, 128, 0, {&in_ptr, &out_ptr, &n});
  std::vector<uint8_t> got = download_bytes(out);
  CHECK(std::memcmp(got.data(), host.data(), bytes) == 0);
  bool tail_untouched = true;
  for (size_t i = bytes; i < got.size(); ++i) tail_untouched &= got[i] == 0xFF;
  CHECK(tail_untouched);
}

TEST_CASE("hopper: wgmma GEMMs (TMA + Pipeline + setmaxnreg) match a float64 GEMM of the same 16-bit values" *
          doctest::skip(!gpu_available())) {
  if (!is_hopper()) {
    MESSAGE("not a compute capability 9.x device: skipped");
    return;
  }
  const int K = 512;  // 8 k tiles through 3 stages
  for (const hopper_test::GemmVariant& v : hopper_test::kGemmVariants) {
    const std::string name = hopper_test::gemm_name(v.dtype, v.n, v.consumers, v.layout);
    CAPTURE(name);
    const bool bf16 = std::string(v.dtype) == "bf16";
    const ssd_dtype dtype = bf16 ? SSD_DTYPE_BF16 : SSD_DTYPE_FP16;
    const int M = 64 * v.consumers, N = v.n;
    const bool b_mn_major = v.layout == hopper_test::kBMnMajorSw128;
    // A [M][K]; B [N][K] (K-major) or [K][N] (MN-major). Exact 16-bit values, kept as doubles.
    const HostArray a = make_array(dtype, normal(size_t(M) * K));
    const HostArray b = make_array(dtype, normal(size_t(N) * K));
    std::vector<double> ref(size_t(M) * N, 0.0);
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) {
        double s = 0;
        for (int k = 0; k < K; ++k)
          s += a.values[size_t(m) * K + k] * b.values[b_mn_major ? size_t(k) * N + n : size_t(n) * K + k];
        ref[size_t(m) * N + n] = s;
      }
    DeviceBuffer d_a = upload_array(a), d_b = upload_array(b), d_d(size_t(M) * N * 4);
    d_d.poison();
    CUtensorMap map_a = encode(ssd::cuda::matrix_map_desc(dtype, d_a.get(), M, K, K, M, 64, TmaSwizzle::k128B));
    CUtensorMap map_b = encode(b_mn_major ? ssd::cuda::matrix_map_desc(dtype, d_b.get(), K, N, N, 64, 64, TmaSwizzle::k128B)
                                          : ssd::cuda::matrix_map_desc(dtype, d_b.get(), N, K, K, N, 64, TmaSwizzle::k128B));
    CUdeviceptr pa = reinterpret_cast<CUdeviceptr>(d_a.get()), pb = reinterpret_cast<CUdeviceptr>(d_b.get()),
                pd = reinterpret_cast<CUdeviceptr>(d_d.get());
    int k = K;
    launch(name, 1, hopper_test::gemm_threads(v.consumers), hopper_test::gemm_shared_bytes(v.consumers, N),
           {&map_a, &map_b, &pa, &pb, &pd, &k});
    const std::vector<float> got = d_d.to_host<float>(size_t(M) * N);
    double err = 0, norm = 0, worst = -1;
    size_t worst_at = 0;
    bool finite = true;
    for (size_t i = 0; i < got.size(); ++i) {
      finite &= std::isfinite(got[i]);
      const double e = std::fabs(double(got[i]) - ref[i]);
      err += e * e;
      norm += ref[i] * ref[i];
      if (!(e <= worst)) {  // NaN counts as the worst
        worst = std::isnan(e) ? INFINITY : e;
        worst_at = i;
      }
    }
    const double rel_l2 = std::sqrt(err / norm);
    // Where it is worst (a layout or descriptor error shows as a pattern of rows or columns).
    INFO("rel_l2 " << rel_l2 << "; worst at row " << worst_at / N << ", column " << worst_at % N << ": got "
                   << got[worst_at] << ", want " << ref[worst_at]);
    CHECK(finite);
    CHECK(rel_l2 < 1e-5);
  }
}
