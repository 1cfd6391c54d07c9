// What the wgmma kernels' unit tests (test_state_pass_wgmma.cpp, test_state_pass_bwd_wgmma.cpp,
// test_bc_bwd_wgmma.cpp) share: NVRTC + ptxas of an sm_90a specialization with its PTX, the PTX
// spelling of a wgmma shape, and the ptxas checks (no serialized wgmma, no spills). doctest macros:
// include from test files only.
#pragma once

#include <doctest/doctest.h>

#include <string>

#include "codegen/codegen.h"
#include "compile/nvrtc_compiler.h"
#include "config/config.h"
#include "state_pass_test_support.h"

namespace wgmma_test {

// The compiled unit of `c` for sm_90a with its PTX; REQUIREs that it generates (and, with
// `wgmma_spec`, that its Spec selects the wgmma kernel) and compiles.
inline ssd::CompiledCubin compile_sm90a(const ssd_kernel_config& c, bool wgmma_spec = true) {
  auto u = ssd::generate_unit(c);
  REQUIRE_MESSAGE(u.ok(), u.status().detail);
  if (wgmma_spec) REQUIRE(statepass_test::contains(u->source, "kWgmma"));
  auto r = ssd::compile_cubin(*u, SSD_ARCH_SM90A, /*with_ptx=*/true);
  REQUIRE_MESSAGE(r.ok(), r.status().detail);
  return *r;
}

// "wgmma.mma_async.sync.aligned.m64n<n>k16.f32.<T>.<T>" for c's element type.
inline std::string wgmma_shape(const ssd_kernel_config& c, int n) {
  return std::string("wgmma.mma_async.sync.aligned.m64n") + std::to_string(n) + "k16.f32." +
         (c.dtype == SSD_DTYPE_BF16 ? "bf16.bf16" : "f16.f16");
}

// ptxas: no serialized wgmma (nor, with `no_added_fence`, a wgmma fence it had to add itself: C7519)
// and, where the log has ptxas's report, no spills. NVRTC may skip ptxas, and its report, for PTX it
// compiled before in this process: returns whether there was a report (require_some_ptxas_report).
inline bool check_ptxas(const ssd::CompiledCubin& r, bool no_added_fence) {
  using statepass_test::contains;
  CHECK_FALSE(contains(r.log, "serialized"));
  if (no_added_fence) CHECK_FALSE(contains(r.log, "C7519"));
  if (r.report.registers <= 0) return false;
  CHECK(statepass_test::count(r.log, "bytes spill stores") == 1);
  CHECK(contains(r.log, " 0 bytes spill stores"));
  CHECK(r.report.spill_bytes == 0);
  return true;
}

}  // namespace wgmma_test
