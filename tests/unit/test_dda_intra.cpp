// chunk_scan_bwd_ddA_intra (templates/ssd/chunk_scan_bwd_ddA_intra.cuh): the blocks per SM its
// family asks for (src/kernels/chunk_scan_bwd_ddA_intra.cpp) and what NVRTC compiles for the
// default tile of the nemotronh-56b shape on sm_80 and sm_90a: within the bound, no local memory
// where the bound is given.
#include <doctest/doctest.h>

#include "codegen/codegen.h"
#include "compile/nvrtc_compiler.h"
#include "config/config.h"
#include "state_pass_test_support.h"  // NemotronhStatePass: the nemotronh-56b shape of any kernel

using namespace ssd;

TEST_CASE("chunk_scan_bwd_ddA_intra: five blocks per SM at the 64x32 tile without z, no local memory") {
  for (ssd_arch arch : {SSD_ARCH_SM80, SSD_ARCH_SM90A})
    for (unsigned flags : {0u, unsigned(SSD_FLAG_Z)})
      for (int headdim : {32, 64, 128}) {
        CAPTURE(arch);
        CAPTURE(flags);
        CAPTURE(headdim);
        ssd_kernel_config c = statepass_test::NemotronhStatePass{SSD_KERNEL_CHUNK_SCAN_BWD_DDA_INTRA}(arch, flags);
        c.dstate = 0;  // the family has no dstate
        c.headdim = headdim;
        c.mode = SSD_MODE_DETERMINISTIC;
        auto n = normalize_config(c);
        REQUIRE_MESSAGE(n.ok(), n.status().detail);
        const bool bounded = n->tile.m == 64 && n->tile.n == 32 && headdim <= 64 && flags == 0;
        if (headdim <= 64) CHECK(bounded == (flags == 0));  // the default tile is 64x32 there
        auto u = generate_unit(*n);
        REQUIRE_MESSAGE(u.ok(), u.status().detail);
        CHECK(statepass_test::contains(u->source, bounded ? "__launch_bounds__(128, 5)" : "__launch_bounds__(128)\n"));
        if (!bounded) continue;
        auto cubin = compile_cubin(*u, arch, /*with_ptx=*/false);
        REQUIRE_MESSAGE(cubin.ok(), cubin.status().detail);
        INFO(cubin->log);
        if (cubin->report.registers > 0) {
          CHECK(cubin->report.registers <= 96);  // 65536 / (5 · 128) rounded down to 8
          CHECK(cubin->report.spill_bytes == 0);
        }
      }
}
