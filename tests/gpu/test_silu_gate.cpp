// The forward's z gate (templates/ssd/primitives/silu_gate.cuh) against the expression it replaces,
// y · (z · (1 / (1 + __expf(−z)))) with the IEEE division, for every one of the 2^32 fp32 bit patterns
// of z (NaNs, infinities, subnormals and both signs included), each y a different value in [1, 2):
// the bits must be equal everywhere. Both sides are compiled by NVRTC with the library's options in
// one kernel, for the device's target. Run: ssd_gpu_tests -tc="silu_gate*".
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

constexpr const char* kKernel = "silu_gate_exhaustive";

// Each thread takes groups of 8 consecutive bit patterns z = first + i .. + 7 (the gate's batch, so a
// group can mix the fast path with the IEEE fallback where d crosses 2^126); y is a pattern of i in
// [1, 2). Mismatches are counted; the smallest mismatching z pattern is kept.
const char* const kSource = R"(#include "ssd/primitives/silu_gate.cuh"
extern "C" __global__ void silu_gate_exhaustive(unsigned first, unsigned long long count,
                                                unsigned long long* mismatches, unsigned* first_bad) {
  const unsigned long long step = 8ull * gridDim.x * blockDim.x;
  for (unsigned long long i = 8ull * (blockIdx.x * blockDim.x + threadIdx.x); i < count; i += step) {
    float z[8], y[8], want[8];
#pragma unroll
    for (int v = 0; v < 8; ++v) {
      const unsigned bits = first + unsigned(i) + unsigned(v);
      z[v] = __uint_as_float(bits);
      y[v] = __uint_as_float(0x3f800000u | ((bits * 2654435761u) >> 9));
      want[v] = y[v] * (z[v] * (1.f / (1.f + __expf(-z[v]))));
    }
    ssd_kernels::silu_gate<8>(y, z);
#pragma unroll
    for (int v = 0; v < 8; ++v)
      if (__float_as_uint(y[v]) != __float_as_uint(want[v])) {
        atomicAdd(mismatches, 1ull);
        atomicMin(first_bad, __float_as_uint(z[v]));
      }
  }
}
)";

}  // namespace

TEST_CASE("silu_gate: the z gate gives the IEEE-division expression's bits for all 2^32 values of z" *
          doctest::skip(!gpu_available())) {
  CUdevice dev;
  GPU_CHECK_CU(drv().cuCtxGetDevice(&dev));
  int major = 0;
  GPU_CHECK_CU(drv().cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
  if (major < 8) {
    MESSAGE("compute capability below 8.0: skipped");
    return;
  }
  // The target the forward's kernels take on this device (sm_90a on 9.x, else sm_80).
  const ssd_arch arch = device_is_sm90a() ? SSD_ARCH_SM90A : SSD_ARCH_SM80;
  ssd::GeneratedUnit u;
  u.file_name = "silu_gate_test.cu";
  u.source = kSource;
  u.symbol = kKernel;
  auto headers = ssd::template_closure(u.source);
  REQUIRE(headers.ok());
  u.headers = *headers;
  auto cubin = ssd::compile_cubin(u, arch, /*with_ptx=*/true);
  REQUIRE_MESSAGE(cubin.ok(), cubin.status().detail);
  // The gate's fast path is there (one approximate reciprocal per element), and so is the expression's
  // IEEE reciprocal (the reference, and the gate's fallback).
  CHECK(cubin->ptx.find("rcp.approx.ftz.f32") != std::string::npos);
  CHECK(cubin->ptx.find("rcp.rn.f32") != std::string::npos);
  CUmodule module = nullptr;
  GPU_CHECK_CU(drv().cuModuleLoadData(&module, cubin->cubin.data()));
  CUfunction f = nullptr;
  GPU_CHECK_CU(drv().cuModuleGetFunction(&f, module, kKernel));

  DeviceBuffer counters(16);
  unsigned long long total_mismatches = 0;
  unsigned first_bad = 0xffffffffu;
  // Four launches of 2^30 patterns each (first = 0, 2^30, 2^31, 3 · 2^30).
  for (unsigned long long part = 0; part < 4; ++part) {
    const uint32_t init[4] = {0u, 0u, 0xffffffffu, 0u};  // mismatches (u64), first_bad, padding
    counters.upload(init, sizeof(init));
    unsigned first = unsigned(part << 30);
    unsigned long long count = 1ull << 30;
    CUdeviceptr base = reinterpret_cast<CUdeviceptr>(counters.get());
    CUdeviceptr mism = base, bad = base + 8;
    void* args[] = {&first, &count, &mism, &bad};
    GPU_CHECK_CU(drv().cuLaunchKernel(f, 1056, 1, 1, 256, 1, 1, 0, nullptr, args, nullptr));
    GPU_CHECK_CU(drv().cuCtxSynchronize());
    uint32_t got[4];
    counters.download(got, sizeof(got));
    unsigned long long m = 0;
    std::memcpy(&m, got, 8);
    total_mismatches += m;
    if (got[2] < first_bad) first_bad = got[2];
  }
  GPU_CHECK_CU(drv().cuModuleUnload(module));
  char first_text[32] = "";
  if (total_mismatches) std::snprintf(first_text, sizeof(first_text), ", first at z = 0x%08x", first_bad);
  MESSAGE("silu_gate on " << std::string(arch == SSD_ARCH_SM90A ? "sm_90a" : "sm_80") << ": " << total_mismatches
                          << " of 4294967296 z patterns differ from the expression" << std::string(first_text));
  CHECK(total_mismatches == 0);
}
