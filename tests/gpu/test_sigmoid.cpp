// The batched sigmoid of templates/ssd/primitives/sigmoid.cuh against the expressions it replaces,
// for every one of the 2^32 fp32 bit patterns of z (NaNs, infinities, subnormals and both signs):
//   the forward's z gate   silu_gate:       y · (z · (1 / (1 + __expf(−z)))),
//   the backward's σ(z)    recip_one_plus:  1 / (1 + expf(−z)),
// each with the IEEE division, y a different value in [1, 2) per z. The bits must be equal
// everywhere. Both sides are compiled by NVRTC with the library's options in one kernel, for the
// target the forward's kernels take on the device. Run: ssd_gpu_tests -tc="sigmoid*".
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "codegen/codegen.h"
#include "compile/nvrtc_compiler.h"
#include "gpu_support.h"

using namespace gputest;

namespace {

constexpr const char* kKernel = "sigmoid_exhaustive";

// Each thread takes groups of 8 consecutive bit patterns z = first + i .. + 7 (the helpers' batch, so
// a group can mix the fast path with the IEEE fallback where 1 + e crosses 2^126); y is a pattern of
// the bits in [1, 2). Mismatches of each form are counted; the smallest mismatching z pattern is kept.
const char* const kSource = R"(#include "ssd/primitives/sigmoid.cuh"
extern "C" __global__ void sigmoid_exhaustive(unsigned first, unsigned long long count,
                                              unsigned long long* mismatches, unsigned* first_bad) {
  const unsigned long long step = 8ull * gridDim.x * blockDim.x;
  for (unsigned long long i = 8ull * (blockIdx.x * blockDim.x + threadIdx.x); i < count; i += step) {
    float z[8], y[8], gate_want[8], e[8], sig[8], sig_want[8];
#pragma unroll
    for (int v = 0; v < 8; ++v) {
      const unsigned bits = first + unsigned(i) + unsigned(v);
      z[v] = __uint_as_float(bits);
      y[v] = __uint_as_float(0x3f800000u | ((bits * 2654435761u) >> 9));
      gate_want[v] = y[v] * (z[v] * (1.f / (1.f + __expf(-z[v]))));
      e[v] = expf(-z[v]);
      sig_want[v] = 1.f / (1.f + expf(-z[v]));
    }
    ssd_kernels::silu_gate<8>(y, z);
    ssd_kernels::recip_one_plus<8>(e, sig);
#pragma unroll
    for (int v = 0; v < 8; ++v) {
      if (__float_as_uint(y[v]) != __float_as_uint(gate_want[v])) {
        atomicAdd(&mismatches[0], 1ull);
        atomicMin(&first_bad[0], __float_as_uint(z[v]));
      }
      if (__float_as_uint(sig[v]) != __float_as_uint(sig_want[v])) {
        atomicAdd(&mismatches[1], 1ull);
        atomicMin(&first_bad[1], __float_as_uint(z[v]));
      }
    }
  }
}
)";

}  // namespace

TEST_CASE("sigmoid: the batched z gate and σ give the IEEE-division expressions' bits for all 2^32 values of z" *
          doctest::skip(!gpu_available())) {
  CUdevice dev;
  GPU_CHECK_CU(drv().cuCtxGetDevice(&dev));
  int major = 0;
  GPU_CHECK_CU(drv().cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
  if (major < 8) {
    MESSAGE("compute capability below 8.0: skipped");
    return;
  }
  const ssd_arch arch = device_is_sm90a() ? SSD_ARCH_SM90A : SSD_ARCH_SM80;
  ssd::GeneratedUnit u;
  u.file_name = "sigmoid_test.cu";
  u.source = kSource;
  u.symbol = kKernel;
  auto headers = ssd::template_closure(u.source);
  REQUIRE(headers.ok());
  u.headers = *headers;
  auto cubin = ssd::compile_cubin(u, arch, /*with_ptx=*/true);
  REQUIRE_MESSAGE(cubin.ok(), cubin.status().detail);
  // The helpers' fast path (one approximate reciprocal per element and form) and the expressions' IEEE
  // reciprocal (the references, and the helpers' fallback).
  CHECK(cubin->ptx.find("rcp.approx.ftz.f32") != std::string::npos);
  CHECK(cubin->ptx.find("rcp.rn.f32") != std::string::npos);
  CUmodule module = nullptr;
  GPU_CHECK_CU(drv().cuModuleLoadData(&module, cubin->cubin.data()));
  CUfunction f = nullptr;
  GPU_CHECK_CU(drv().cuModuleGetFunction(&f, module, kKernel));

  // Counters: two u64 mismatch counts, then two u32 first-bad patterns.
  DeviceBuffer counters(24);
  unsigned long long mismatches[2] = {0, 0};
  uint32_t first_bad[2] = {0xffffffffu, 0xffffffffu};
  for (unsigned long long part = 0; part < 4; ++part) {  // 2^30 patterns per launch
    unsigned char init[24];
    std::memset(init, 0, 16);
    std::memset(init + 16, 0xff, 8);
    counters.upload(init, sizeof(init));
    unsigned first = unsigned(part << 30);
    unsigned long long count = 1ull << 30;
    CUdeviceptr base = reinterpret_cast<CUdeviceptr>(counters.get());
    CUdeviceptr mism = base, bad = base + 16;
    void* args[] = {&first, &count, &mism, &bad};
    GPU_CHECK_CU(drv().cuLaunchKernel(f, 1056, 1, 1, 256, 1, 1, 0, nullptr, args, nullptr));
    GPU_CHECK_CU(drv().cuCtxSynchronize());
    unsigned char got[24];
    counters.download(got, sizeof(got));
    for (int k = 0; k < 2; ++k) {
      unsigned long long m = 0;
      uint32_t b = 0;
      std::memcpy(&m, got + 8 * k, 8);
      std::memcpy(&b, got + 16 + 4 * k, 4);
      mismatches[k] += m;
      if (b < first_bad[k]) first_bad[k] = b;
    }
  }
  GPU_CHECK_CU(drv().cuModuleUnload(module));
  const char* names[2] = {"silu_gate (y · z · σ, __expf)", "recip_one_plus (σ, expf)"};
  for (int k = 0; k < 2; ++k) {
    char first_text[40] = "";
    if (mismatches[k]) std::snprintf(first_text, sizeof(first_text), ", first at z = 0x%08x", first_bad[k]);
    MESSAGE(std::string(names[k]) << " on " << std::string(arch == SSD_ARCH_SM90A ? "sm_90a" : "sm_80") << ": "
                                  << mismatches[k] << " of 4294967296 z patterns differ from the expression"
                                  << std::string(first_text));
    CHECK(mismatches[k] == 0);
  }
}
