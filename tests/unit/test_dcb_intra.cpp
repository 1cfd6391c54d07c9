// chunk_scan_bwd_dcb_ddA_intra (templates/ssd/chunk_scan_bwd_dcb_ddA_intra.cuh): its shared memory
// (ddA_intra's tiles plus a side buffer per stage, a row carry per head of the group and, with
// seq_idx, the chunk's sequence ids), the shapes where no tile fits (the backward then cannot run
// it: BackwardTuning::fused_dcb_intra falls back to the pair), and what NVRTC compiles for its
// default tile on sm_80 and sm_90a.
#include <doctest/doctest.h>

#include "codegen/codegen.h"
#include "compile/nvrtc_compiler.h"
#include "config/config.h"
#include "ssd/backward_params.cuh"
#include "state_pass_test_support.h"  // NemotronhStatePass: the nemotronh-56b shape of any kernel

using namespace ssd;
namespace geom = ssd_kernels::bwd_geom;

TEST_CASE("chunk_scan_bwd_dcb_ddA_intra: shared memory, and the group sizes its row carries allow") {
  // nemotronh-56b (Q 256, p 64, 32 heads per group) at the default 64 x 32 x 64: 2 stages of
  // (64 + 32) x 72 bf16 + 128 fp32 side values, the W tile 64 x 36 fp32, 32 x 64 fp32 carries.
  CHECK(geom::dcb_intra_stages(256, 64, 32, 64, 32, 64, false) == 2);
  CHECK(geom::dcb_intra_smem_bytes(256, 64, 32, 64, 32, 64, false) ==
        2 * (96 * 72 * 2 + 128 * 4) + 64 * 36 * 4 + 32 * 64 * 4);
  CHECK(geom::dcb_intra_smem_bytes(256, 64, 32, 64, 32, 64, true) ==
        geom::dcb_intra_smem_bytes(256, 64, 32, 64, 32, 64, false) + 256 * 4);
  CHECK(geom::dcb_intra_tile_problem(256, 64, 32, 64, 32, 64, true) == nullptr);
  // Every tile legal for it is legal for ddA_intra; the carries grow with
  // the group: 256 heads per group leave no tile at Q = 256 (64 KiB of carries alone).
  for (int q : {64, 128, 256})
    for (int p : {32, 64, 128})
      for (int r : {1, 8, 32, 64, 256})
        for (int bm : {64, 128})
          for (int bn : {16, 32, 64})
            for (int bk : {16, 32, 64})
              for (bool seq : {false, true}) {
                CAPTURE(q);
                CAPTURE(p);
                CAPTURE(r);
                CAPTURE(bm);
                CAPTURE(bn);
                CAPTURE(bk);
                CAPTURE(seq);
                if (geom::dcb_intra_tile_problem(q, p, r, bm, bn, bk, seq) != nullptr) continue;
                CHECK(geom::intra_tile_problem(q, p, bm, bn, bk) == nullptr);
                CHECK(geom::dcb_intra_smem_bytes(q, p, r, bm, bn, bk, seq) <= geom::kMaxStaticSmem);
                // The smallest tile has the least shared memory (the backward's fit test uses it).
                CHECK(geom::dcb_intra_tile_problem(q, p, r, 64, 16, 16, seq) == nullptr);
              }
  CHECK(geom::dcb_intra_tile_problem(256, 64, 256, 64, 16, 16, false) != nullptr);
}

TEST_CASE("chunk_scan_bwd_dcb_ddA_intra: NVRTC compiles the default tile (no local memory on sm_90a)") {
  for (ssd_arch arch : {SSD_ARCH_SM80, SSD_ARCH_SM90A})
    for (unsigned flags : {0u, unsigned(SSD_FLAG_Z | SSD_FLAG_SEQ_IDX)}) {
      CAPTURE(arch);
      CAPTURE(flags);
      const bool seq = (flags & SSD_FLAG_SEQ_IDX) != 0;
      ssd_kernel_config c = statepass_test::NemotronhStatePass{SSD_KERNEL_CHUNK_SCAN_BWD_DCB_DDA_INTRA}(arch, flags);
      c.dstate = 0;  // the family has no dstate
      c.mode = SSD_MODE_DETERMINISTIC;
      auto n = normalize_config(c);
      REQUIRE_MESSAGE(n.ok(), n.status().detail);
      CHECK(n->tile.m == 64);
      CHECK(n->tile.n == 32);
      CHECK(n->tile.k == 64);
      auto u = generate_unit(*n);
      REQUIRE_MESSAGE(u.ok(), u.status().detail);
      CHECK(u->source.find("kSeqIdx = " + std::string(seq ? "true" : "false")) != std::string::npos);
      auto cubin = compile_cubin(*u, arch, /*with_ptx=*/false);
      REQUIRE_MESSAGE(cubin.ok(), cubin.status().detail);
      INFO(cubin->log);
      if (cubin->report.registers > 0) {
        CHECK(cubin->report.shared_bytes == geom::dcb_intra_smem_bytes(256, 64, 32, 64, 32, 64, seq));
        CHECK(cubin->report.registers <= 168);  // 3 blocks of 128 threads per SM (min_blocks)
        // sm_90a (the measured build) fits without a spill; sm_80 with z and seq_idx keeps a few
        // values on the stack (48 bytes with NVRTC 13.0).
        if (arch == SSD_ARCH_SM90A || flags == 0) CHECK(cubin->report.spill_bytes == 0);
        CHECK(cubin->report.spill_bytes <= 64);
      }
    }
}
