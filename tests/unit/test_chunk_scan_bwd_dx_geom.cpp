// chunk_scan_bwd_dx's shared-memory layouts (templates/ssd/backward_params.cuh): the 48 KiB static
// layout's two cp.async rings (bwd_geom::dx_stages_a / dx_stages_b: phase A's ring takes 3 buffers
// wherever they fit beside phase B's 2, the legal tiles stay those where 2 and 2 fit); the resident-rows
// layout of sm_90 / sm_90a (bwd_geom::dx_res_*: a superset of those tiles, 2 blocks per SM); and what
// NVRTC compiles for the default tile on sm_80 and sm_90a (static / dynamic shared memory, wgmma).
#include <doctest/doctest.h>

#include "codegen/codegen.h"
#include "compile/nvrtc_compiler.h"
#include "config/config.h"
#include "kernels/family.h"
#include "ssd/backward_params.cuh"
#include "state_pass_test_support.h"  // NemotronhStatePass: the nemotronh-56b shape of any kernel

using namespace ssd;
namespace geom = ssd_kernels::bwd_geom;

namespace {
// Every (chunk, headdim, dstate, BLOCK_M, BLOCK_K, seq_idx) the dx geometry tests walk, captured.
template <class F>
void for_each_dx_shape(const F& f) {
  for (int q : {64, 128, 256, 512})
    for (int p : {32, 64, 96, 128})
      for (int n : {16, 32, 64, 128, 256})
        for (int bm : {64, 128})
          for (int bk : {16, 32, 64})
            for (bool seq : {false, true}) {
              CAPTURE(q);
              CAPTURE(p);
              CAPTURE(n);
              CAPTURE(bm);
              CAPTURE(bk);
              CAPTURE(seq);
              f(q, p, n, bm, bk, seq);
            }
}
}  // namespace

TEST_CASE("chunk_scan_bwd_dx: phase A's ring deepens to 3 buffers where they fit; the legal tiles are unchanged") {
  // nemotronh-56b's default tile (p = 64, n = 256, Q = 256, 128 x . x 32): 3 phase-A stages of
  // 15 KiB, 2 phase-B stages of 21 KiB; with seq_idx exactly 48 KiB.
  const geom::TwoPhaseBytes nemo = geom::dx_bytes(64, 256, 128, 32);
  CHECK(geom::dx_stages_a(nemo, 256, false) == 3);
  CHECK(geom::dx_stages_b(nemo, 256, false) == 2);
  CHECK(geom::dx_smem_bytes(256, 64, 256, 128, 32, false) == 3 * 15360 + 2 * 256 * 4);
  CHECK(geom::dx_smem_bytes(256, 64, 256, 128, 32, true) == geom::kMaxStaticSmem);
  // Small stages: both rings get 3 buffers, as two_phase_stages gave before.
  const geom::TwoPhaseBytes small = geom::dx_bytes(32, 32, 64, 16);
  CHECK(geom::dx_stages_a(small, 64, false) == 3);
  CHECK(geom::dx_stages_b(small, 64, false) == 3);

  int deeper = 0;
  for_each_dx_shape([&](int q, int p, int n, int bm, int bk, bool seq) {
    const geom::TwoPhaseBytes b = geom::dx_bytes(p, n, bm, bk);
    const int two_and_two = geom::dx_body_bytes(2, 2, b) + geom::two_phase_fixed_bytes(q, seq);
    const int bytes = geom::dx_smem_bytes(q, p, n, bm, bk, seq);
    // Legal exactly where the 2-buffer rings fit (the tiles of before), and then within
    // the static limit whatever the depths.
    CHECK((bytes <= geom::kMaxStaticSmem) == (two_and_two <= geom::kMaxStaticSmem));
    CHECK(bytes >= two_and_two);
    const int sa = geom::dx_stages_a(b, q, seq), sb = geom::dx_stages_b(b, q, seq);
    CHECK((sa == 2 || sa == 3));
    CHECK((sb == 2 || sb == 3));
    CHECK(bytes == geom::dx_body_bytes(sa, sb, b) + geom::two_phase_fixed_bytes(q, seq));
    // Never shallower than the shared two_phase_stages depth of before.
    CHECK(sa >= geom::two_phase_stages(b, q, seq));
    CHECK(sb >= geom::two_phase_stages(b, q, seq));
    if (two_and_two <= geom::kMaxStaticSmem) deeper += sa > geom::two_phase_stages(b, q, seq);
  });
  CHECK(deeper > 0);
}

TEST_CASE("chunk_scan_bwd_dx: the resident-rows layout (sm_90, sm_90a) takes every tile the 48 KiB layout takes, "
          "within 2 blocks per SM") {
  // nemotronh-56b's default tile: the row tile 128 x (256 + 8) in T, 4 K stages of 64 x (32 + 8),
  // phase B's 3 stages of 21 KiB beside it.
  CHECK(geom::dx_res_stages_a(256, 64, 256, 128, 32, false) == 4);
  CHECK(geom::dx_res_stages_b(256, 64, 256, 128, 32, false) == 3);
  CHECK(geom::dx_res_dynamic_bytes(256, 64, 256, 128, 32, false) == 128 * 264 * 2 + 4 * 64 * 40 * 2);
  int more = 0;
  for_each_dx_shape([&](int q, int p, int n, int bm, int bk, bool seq) {
    const char* old_problem = geom::dx_tile_problem(q, p, n, bm, 0, bk, seq);
    const char* res_problem = geom::dx_res_tile_problem(q, p, n, bm, 0, bk, seq);
    if (!old_problem) CHECK(res_problem == nullptr);
    if (res_problem) return;
    more += old_problem != nullptr;
    const int sa = geom::dx_res_stages_a(q, p, n, bm, bk, seq);
    const int sb = geom::dx_res_stages_b(q, p, n, bm, bk, seq);
    CHECK((sa >= 2 && sa <= 4));
    CHECK((sb == 2 || sb == 3));
    const int bytes = geom::dx_res_dynamic_bytes(q, p, n, bm, bk, seq);
    CHECK(bytes == geom::dx_res_body_bytes(p, n, bm, bk, sa, sb));
    CHECK(bytes >= geom::dx_res_rows_bytes(n, bm) + 2 * geom::dx_res_kstage_bytes(p, n, bk));
    // Two blocks per SM: 228 KiB, 1 KiB reserved per block.
    CHECK(2 * (bytes + geom::two_phase_fixed_bytes(q, seq) + 1024) <= 228 * 1024);
  });
  CHECK(more > 0);  // e.g. k = 64 at headdim 64
}

TEST_CASE("chunk_scan_bwd_dx: NVRTC compiles the default tile with the geometry's shared memory") {
  // sm_80: the 48 KiB static layout (exactly 48 KiB with seq_idx), 128 x . x 32; sm_90a: resident
  // rows with the wgmma n loops at 128 x . x 64, the fixed arrays static and the body dynamic.
  for (ssd_arch arch : {SSD_ARCH_SM80, SSD_ARCH_SM90A})
    for (unsigned flags : {unsigned(SSD_FLAG_D), unsigned(SSD_FLAG_D | SSD_FLAG_SEQ_IDX)}) {
      CAPTURE(arch);
      CAPTURE(flags);
      const bool seq = (flags & SSD_FLAG_SEQ_IDX) != 0;
      ssd_kernel_config c = statepass_test::NemotronhStatePass{SSD_KERNEL_CHUNK_SCAN_BWD_DX}(arch, flags);
      c.mode = SSD_MODE_DETERMINISTIC;
      auto n = normalize_config(c);
      REQUIRE_MESSAGE(n.ok(), n.status().detail);
      const bool res = arch == SSD_ARCH_SM90A;
      CHECK(n->tile.m == 128);
      CHECK(n->tile.k == (res ? 64 : 32));
      auto u = generate_unit(*n);
      REQUIRE_MESSAGE(u.ok(), u.status().detail);
      CHECK((u->source.find("kResidentRows") != std::string::npos) == res);
      CHECK((u->source.find("kWgmma") != std::string::npos) == res);
      CHECK(u->dynamic_shared_bytes == (res ? geom::dx_res_dynamic_bytes(256, 64, 256, 128, 64, seq, true) : 0));
      auto cubin = compile_cubin(*u, arch, /*with_ptx=*/false);
      REQUIRE_MESSAGE(cubin.ok(), cubin.status().detail);
      INFO(cubin->log);
      if (cubin->report.registers > 0) {
        CHECK(cubin->report.shared_bytes ==
              (res ? geom::two_phase_fixed_bytes(256, seq) : geom::dx_smem_bytes(256, 64, 256, 128, 32, seq)));
        CHECK(cubin->report.registers <= 128);
        // The sm_80 preset's specialization fits without a spill; with seq_idx on the 48 KiB layout
        // (its s_seq row fills the 48 KiB) ptxas keeps a few bytes of the work loop's counters on
        // the stack (32 before the 3-buffer ring, 4 after, outside the K loops). The sm_90a wgmma
        // specialization keeps some values on the stack: 36 + 104 bytes of spill stores and loads
        // (48 + 132 with seq_idx) since its wgmma descriptors are 32-bit words (session 17; 16 + 16
        // before), one reload per n step and per phase-B step and the rest per tile — the kernel is
        // 7 % faster for it (docs/perf.md). Before phase B's dy address was made one register it was
        // 200 bytes, reloaded in every k16 step.
        if (!res && !seq) CHECK(cubin->report.spill_bytes == 0);
        if (res) CHECK(cubin->report.spill_bytes <= 192);
      }
    }
}
