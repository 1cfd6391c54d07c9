// chunk_scan_fwd's sm_90a implementation (templates/ssd/chunk_scan_sm90a.cuh, wgmma) on the CPU: which
// configs take it (sm_90a, shapes in 64-wide steps) and which keep the mma.sync kernel, its tiles and
// their refusals, its launch figures, and NVRTC compiles of the preset's and the all-options
// specializations for sm_90a: wgmma in the PTX, no spills, no wgmma serialization.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "codegen/codegen.h"
#include "compile/nvrtc_compiler.h"
#include "config/config.h"
#include "kernels/family.h"
#include "ops/prepare.h"
#include "ops/ssd_forward.h"
#include "ops/tensor_check.h"
#include "ssd/forward_params.cuh"

using namespace ssd;

namespace {

// nemotronh-56b's chunk_scan_fwd as ssd_forward asks for it (P in x's dtype, D per head).
ssd_kernel_config preset(ssd_arch arch) {
  ssd_kernel_config c = default_config(SSD_KERNEL_CHUNK_SCAN_FWD);
  c.headdim = 64;
  c.dstate = 256;
  c.heads_per_group = 32;
  c.flags = SSD_FLAG_D | SSD_FLAG_STATES_IN_DTYPE;
  c.arch = arch;
  return c;
}

bool contains(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

GeneratedUnit unit_of(const ssd_kernel_config& c) {
  auto n = normalize_config(c);
  REQUIRE_MESSAGE(n.ok(), n.status().detail);
  auto u = generate_unit(*n);
  REQUIRE_MESSAGE(u.ok(), u.status().detail);
  return *u;
}

// One NVRTC case of the wgmma kernel: the preset's config with these fields.
struct WgmmaCase {
  const char* label;
  ssd_dtype dtype;
  int headdim, dstate, chunk;
  uint32_t flags;
  ssd_tile tile;
};
ssd_kernel_config config_of(const WgmmaCase& k) {
  ssd_kernel_config c = preset(SSD_ARCH_SM90A);
  c.dtype = k.dtype;
  c.headdim = k.headdim;
  c.dstate = k.dstate;
  c.chunk_size = k.chunk;
  c.flags = k.flags;
  c.tile = k.tile;
  return c;
}

bool same_tiles(const std::vector<ssd_tile>& a, const std::vector<ssd_tile>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].m != b[i].m || a[i].n != b[i].n || a[i].k != b[i].k) return false;
  return true;
}

}  // namespace

TEST_CASE("chunk_scan_fwd sm_90a: the preset takes the wgmma kernel, 64x64x64, dynamic shared memory") {
  const ssd_kernel_config c = preset(SSD_ARCH_SM90A);
  REQUIRE(validate_config(c).ok());
  const ssd_tile d = default_tile(c);
  CHECK((d.m == 64 && d.n == 64 && d.k == 64));
  CHECK(same_tiles(legal_tiles(c), {ssd_tile{64, 64, 64, 0, 0}, ssd_tile{128, 64, 64, 0, 0}}));
  const GeneratedUnit u = unit_of(c);
  CHECK(contains(u.source, "static constexpr bool kWgmma = true;"));
  CHECK(contains(u.source, "__launch_bounds__(128, 4)"));  // 128 registers: 4 blocks per SM
  CHECK(u.block_threads == 128);
  namespace g = ssd_kernels::fwd_geom;
  CHECK(u.dynamic_shared_bytes == g::chunk_scan_wg_smem_bytes(256, 64, 64, false));
  // Two stages of (C or x 8 KiB | P 8 KiB or CB 18 KiB), A and Δ rows, 1 KiB slack: 4 blocks per SM
  // by shared memory and by registers (128 each, with z too); with headdim 128 3 (168 each).
  CHECK(u.dynamic_shared_bytes == 2 * 26 * 1024 + 2 * 1024 + 1024);
  CHECK(g::chunk_scan_wg_blocks_per_sm(256, 64, 64, false, 128) == 4);
  CHECK(g::chunk_scan_wg_blocks_per_sm(256, 64, 64, true, 128) == 4);
  CHECK(g::chunk_scan_wg_blocks_per_sm(256, 64, 64, false, 168) == 3);
  ssd_kernel_config with_z = c;
  with_z.flags |= SSD_FLAG_Z;
  CHECK(contains(unit_of(with_z).source, "__launch_bounds__(128, 4)"));
  // Phase A's ring (C and P only) holds more, smaller stages in the same body.
  CHECK(g::chunk_scan_wg_stages_a(64, 64) == 3);
  CHECK(g::chunk_scan_wg_stages_a(128, 64) == 4);
  CHECK(g::chunk_scan_wg_stages_a(64, 128) == 2);
  CHECK(std::find(u.headers.begin(), u.headers.end(), "ssd/chunk_scan_sm90a.cuh") != u.headers.end());
  // 128 rows: two warpgroups (256 threads), 2 blocks per SM (registers and shared memory).
  ssd_kernel_config m128 = c;
  m128.tile = ssd_tile{128, 64, 64, 0, 0};
  const GeneratedUnit u128 = unit_of(m128);
  CHECK(u128.block_threads == 256);
  CHECK(contains(u128.source, "__launch_bounds__(256, 2)"));
  // ... and a row of the factored W's u_r per warpgroup (with 64 rows u_r takes Δ's row).
  CHECK(u128.dynamic_shared_bytes == 2 * 52 * 1024 + 2 * 1024 + 2 * 1024 + 1024);
}

TEST_CASE("chunk_scan_fwd sm_90a: headdim 128 has three tiles; 128 columns run 2 blocks per SM") {
  ssd_kernel_config c = preset(SSD_ARCH_SM90A);
  c.headdim = 128;
  CHECK(same_tiles(legal_tiles(c),
                   {ssd_tile{64, 64, 64, 0, 0}, ssd_tile{64, 128, 64, 0, 0}, ssd_tile{128, 64, 64, 0, 0}}));
  const ssd_tile d = default_tile(c);
  CHECK((d.m == 64 && d.n == 64 && d.k == 64));
  CHECK(contains(unit_of(c).source, "__launch_bounds__(128, 3)"));
  c.tile = ssd_tile{64, 128, 64, 0, 0};
  const GeneratedUnit u = unit_of(c);
  CHECK(contains(u.source, "__launch_bounds__(128, 2)"));
  CHECK(u.dynamic_shared_bytes == ssd_kernels::fwd_geom::chunk_scan_wg_smem_bytes(256, 64, 128, false));
}

TEST_CASE("chunk_scan_fwd sm_90a: a tile of the mma.sync kernel is refused naming the field and the rule") {
  for (ssd_tile t : {ssd_tile{64, 64, 32, 0, 0}, ssd_tile{32, 64, 64, 0, 0}, ssd_tile{64, 32, 64, 0, 0}}) {
    ssd_kernel_config c = preset(SSD_ARCH_SM90A);
    c.tile = t;
    CAPTURE(config_label(c));
    const Status s = validate_config(c);
    REQUIRE_FALSE(s.ok());
    CHECK(s.code == SSD_ERROR_INVALID_CONFIG);
    CHECK(contains(s.detail, "tile: "));
    CHECK(contains(s.detail, "m in 64, 128, n in 64, 128, k = 64 (sm_90a wgmma path)"));
  }
  struct Bad {
    int headdim, chunk;
    ssd_tile tile;
    const char* value;
    const char* rule;
  };
  for (const Bad& b : {Bad{64, 256, ssd_tile{64, 128, 64, 0, 0}, "tile: 64x128x64", "m | chunk_size, n | headdim"},
                       Bad{64, 64, ssd_tile{128, 64, 64, 0, 0}, "tile: 128x64x64", "m | chunk_size, n | headdim"},
                       Bad{128, 256, ssd_tile{128, 128, 64, 0, 0}, "tile: 128x128x64", "m * n <= 8192"}}) {
    ssd_kernel_config c = preset(SSD_ARCH_SM90A);
    c.headdim = b.headdim;
    c.chunk_size = b.chunk;
    c.tile = b.tile;
    CAPTURE(config_label(c));
    const Status s = validate_config(c);
    REQUIRE_FALSE(s.ok());
    CHECK(contains(s.detail, b.value));
    CHECK(contains(s.detail, b.rule));
  }
}

TEST_CASE("chunk_scan_fwd: sm_80, sm_90 and sm_90a shapes off the 64 grid keep the mma.sync kernel and tiles") {
  const std::vector<ssd_tile> mma_tiles = legal_tiles(preset(SSD_ARCH_SM80));
  CHECK(mma_tiles.size() > 1);
  for (ssd_arch arch : {SSD_ARCH_SM80, SSD_ARCH_SM90}) {
    const ssd_kernel_config c = preset(arch);
    CHECK(same_tiles(legal_tiles(c), mma_tiles));
    const ssd_tile d = default_tile(c);
    CHECK((d.m == 64 && d.n == 64 && d.k == 32));
    const GeneratedUnit u = unit_of(c);
    CHECK_FALSE(contains(u.source, "kWgmma"));
    CHECK(u.dynamic_shared_bytes == 0);
  }
  // headdim 32 or dstate 16 on sm_90a: the mma.sync kernel (and its tile rules).
  for (int which = 0; which < 2; ++which) {
    ssd_kernel_config c = preset(SSD_ARCH_SM90A);
    if (which == 0) c.headdim = 32;
    else c.dstate = 16;
    CAPTURE(config_label(c));
    REQUIRE(validate_config(c).ok());
    const GeneratedUnit u = unit_of(c);
    CHECK_FALSE(contains(u.source, "kWgmma"));
    CHECK(u.dynamic_shared_bytes == 0);
    CHECK(default_tile(c).k == 32);
  }
}

TEST_CASE("chunk_scan_fwd sm_90a: NVRTC compiles the wgmma kernel (preset, all options): wgmma, no spills") {
  const uint32_t all = SSD_FLAG_D | SSD_FLAG_D_PER_HEADDIM | SSD_FLAG_Z | SSD_FLAG_SEQ_IDX;
  const uint32_t p16 = SSD_FLAG_STATES_IN_DTYPE;
  const ssd_tile t64{64, 64, 64, 0, 0}, t128n{64, 128, 64, 0, 0}, t128m{128, 64, 64, 0, 0};
  for (const WgmmaCase& k : {WgmmaCase{"preset", SSD_DTYPE_BF16, 64, 256, 256, SSD_FLAG_D | p16, t64},
                             WgmmaCase{"all options, fp16", SSD_DTYPE_FP16, 64, 256, 256, all | p16, t64},
                             WgmmaCase{"headdim 128, chunk 128, n 64", SSD_DTYPE_BF16, 128, 128, 128, all | p16, t64},
                             WgmmaCase{"headdim 128, chunk 128, n 128", SSD_DTYPE_BF16, 128, 128, 128, all | p16, t128n},
                             WgmmaCase{"fp32 states", SSD_DTYPE_BF16, 64, 128, 256, SSD_FLAG_D | SSD_FLAG_Z, t64},
                             WgmmaCase{"fp32 states, all options", SSD_DTYPE_FP16, 64, 256, 256, all, t64},
                             WgmmaCase{"128 rows, preset", SSD_DTYPE_BF16, 64, 256, 256, SSD_FLAG_D | p16, t128m},
                             WgmmaCase{"128 rows, all options", SSD_DTYPE_FP16, 64, 256, 256, all | p16, t128m}}) {
    CAPTURE(k.label);
    const ssd_kernel_config c = config_of(k);
    const int rows = c.tile.m;
    const GeneratedUnit u = unit_of(c);
    REQUIRE(contains(u.source, "kWgmma = true"));
    auto cubin = compile_cubin(u, SSD_ARCH_SM90A, /*with_ptx=*/true);
    REQUIRE_MESSAGE(cubin.ok(), cubin.status().detail);
    INFO(cubin->log);
    const std::string ty = k.dtype == SSD_DTYPE_BF16 ? ".bf16.bf16" : ".f16.f16";
    const std::string n = std::to_string(k.tile.n);
    // Phase A (both operands from shared memory) and phase B (W from registers) in its three loops
    // (the factored W below the rows' 64-block, the direct W with the mask, with the guarded exp):
    // 4 + 3 x 4 k16 steps.
    CHECK(count(cubin->ptx, "wgmma.mma_async.sync.aligned.m64n" + n + "k16.f32" + ty) == 16);
    CHECK(count(cubin->ptx, "wgmma.mma_async") == 16);
    // The direct W's exp: unguarded (ex2.approx.ftz) in the second loop, __expf (ex2.approx.f32,
    // which ptxas guards against subnormal results) in the third; 8 elements per k16 step each. The
    // factored loop forms none (its u_r and f(l) are __expf's, once per position and row).
    CHECK(count(cubin->ptx, "ex2.approx.ftz.f32") == 4 * 8);
    // With z, the gate's eight reciprocals on its branch-free fast path (primitives/sigmoid.cuh).
    CHECK(count(cubin->ptx, "rcp.approx.ftz.f32") == ((k.flags & SSD_FLAG_Z) ? 8u : 0u));
    CHECK(contains(cubin->ptx, "cp.async.cg.shared.global"));
    CHECK(contains(cubin->ptx, "fence.proxy.async.shared::cta"));
    CHECK_FALSE(contains(cubin->ptx, "mma.sync"));
    // ptxas warns when it serializes wgmma (a fragment or accumulator touched while in flight).
    CHECK_FALSE(contains(cubin->log, "wgmma"));
    // 128 rows at 2 blocks per SM (128 registers) spill a few bytes, and so do 64 rows with z and
    // headdim 64 at 4 blocks (128 registers: 4-28 bytes, loaded outside the K loops; measured faster
    // than 3 blocks without the spill, docs/perf.md); everything else none.
    const bool z_at_128 = rows == 64 && k.headdim == 64 && (k.flags & SSD_FLAG_Z) && (k.flags & SSD_FLAG_STATES_IN_DTYPE);
    if (cubin->report.registers > 0) CHECK(cubin->report.spill_bytes <= (rows == 128 ? 64 : z_at_128 ? 32 : 0));
  }
}

TEST_CASE("chunk_scan_fwd sm_90a: SSD_FLAG_TMA takes the TMA loaders, its parameter block and shared memory") {
  ssd_kernel_config c = preset(SSD_ARCH_SM90A);
  c.flags |= SSD_FLAG_TMA;
  REQUIRE(validate_config(c).ok());
  CHECK(same_tiles(legal_tiles(c), legal_tiles(preset(SSD_ARCH_SM90A))));  // the same tiles as without
  const GeneratedUnit u = unit_of(c);
  CHECK(contains(u.source, "static constexpr bool kTma = true;"));
  CHECK(contains(u.source, "ssd_kernels::ChunkScanFwdTmaParams params"));
  CHECK(contains(u.source, "__launch_bounds__(128, 4)"));
  namespace g = ssd_kernels::fwd_geom;
  // CB's tile unpadded (two boxes of 64 rows x 32 fp32): stages of 8 + 16 KiB, and the rings' 8 mbarriers.
  CHECK(u.dynamic_shared_bytes == g::chunk_scan_wg_smem_bytes(256, 64, 64, false, true));
  CHECK(u.dynamic_shared_bytes == 2 * 24 * 1024 + 2 * 1024 + 64 + 1024);
  CHECK(g::chunk_scan_wg_stages_a(64, 64, true) == 3);
  // Without the flag the kernel keeps its Spec and parameter block.
  const GeneratedUnit plain = unit_of(preset(SSD_ARCH_SM90A));
  CHECK_FALSE(contains(plain.source, "kTma"));
  CHECK(contains(plain.source, "ssd_kernels::ChunkScanFwdParams params"));
  // Refused where the TMA kernel does not exist: other archs, shapes off the wgmma grid, fp32 P.
  for (int which = 0; which < 4; ++which) {
    ssd_kernel_config bad = c;
    if (which == 0) bad.arch = SSD_ARCH_SM80;
    if (which == 1) bad.arch = SSD_ARCH_SM90;
    if (which == 2) bad.headdim = 32;
    if (which == 3) bad.flags &= ~uint32_t(SSD_FLAG_STATES_IN_DTYPE);
    CAPTURE(config_label(bad));
    const Status s = validate_config(bad);
    REQUIRE_FALSE(s.ok());
    CHECK(s.code == SSD_ERROR_INVALID_CONFIG);
    CHECK(contains(s.detail, "flags: tma"));
    CHECK(contains(s.detail, "states_in_dtype"));
  }
}

TEST_CASE("chunk_scan_fwd sm_90a: NVRTC compiles the TMA kernel (preset, all options, every tile): no cp.async, no spills") {
  const uint32_t all = SSD_FLAG_D | SSD_FLAG_D_PER_HEADDIM | SSD_FLAG_Z | SSD_FLAG_SEQ_IDX;
  const uint32_t tma = SSD_FLAG_STATES_IN_DTYPE | SSD_FLAG_TMA;
  // (headdim 128 with dstate 64 at 64 x 128: one phase-A step, so phase B's first copies go out at
  // its only barrier into the second stage: kEarlyB with B0 = 1.)
  for (const WgmmaCase& k :
       {WgmmaCase{"preset", SSD_DTYPE_BF16, 64, 256, 256, SSD_FLAG_D | tma, {64, 64, 64, 0, 0}},
        WgmmaCase{"all options, fp16", SSD_DTYPE_FP16, 64, 256, 256, all | tma, {64, 64, 64, 0, 0}},
        WgmmaCase{"headdim 128, n 128", SSD_DTYPE_BF16, 128, 128, 128, all | tma, {64, 128, 64, 0, 0}},
        WgmmaCase{"headdim 128, dstate 64, n 128", SSD_DTYPE_BF16, 128, 64, 256, SSD_FLAG_D | tma, {64, 128, 64, 0, 0}},
        WgmmaCase{"128 rows, preset", SSD_DTYPE_BF16, 64, 256, 256, SSD_FLAG_D | tma, {128, 64, 64, 0, 0}},
        WgmmaCase{"chunk 64, all options", SSD_DTYPE_FP16, 64, 64, 64, all | tma, {64, 64, 64, 0, 0}}}) {
    CAPTURE(k.label);
    const ssd_kernel_config c = config_of(k);
    const GeneratedUnit u = unit_of(c);
    REQUIRE(contains(u.source, "kTma = true"));
    auto cubin = compile_cubin(u, SSD_ARCH_SM90A, /*with_ptx=*/true);
    REQUIRE_MESSAGE(cubin.ok(), cubin.status().detail);
    INFO(cubin->log);
    // Phase A: C and P, one 4-D copy each per stage; phase B: x (BLOCK_N / 64 copies) and CB (two)
    // per stage (each at the ring's prologue and in the loop, phase B's also at phase A's last step);
    // the chunk's A and Δ rows by two bulk copies; no cp.async left.
    const size_t tensor_copies =
        count(cubin->ptx, "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes");
    CHECK(tensor_copies >= 2 * 2 + 2 * (k.tile.n / 64 + 2));
    CHECK(tensor_copies % 2 == 0);
    CHECK(count(cubin->ptx, "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes") == 2);
    CHECK_FALSE(contains(cubin->ptx, "cp.async.cg.shared.global"));
    CHECK(count(cubin->ptx, "wgmma.mma_async") == 16);
    CHECK_FALSE(contains(cubin->log, "wgmma"));
    if (cubin->report.registers > 0) {
      CHECK(cubin->report.spill_bytes == 0);
      MESSAGE(std::string(k.label) << ": " << cubin->report.registers << " registers");
    }
  }
}

TEST_CASE("ssd_forward takes chunk_scan_fwd's TMA path where x and C fit the tensor maps, else its cp.async one") {
  const int64_t b = 2, L = 1000, h = 8, p = 64, g = 2, n = 128;
  // Placeholder device pointers, 4 KiB apart (never dereferenced: the configs need no memory).
  auto at = [](uintptr_t i) { return reinterpret_cast<void*>(uintptr_t{1} << 20 | i << 12); };
  ssd_forward_args a;
  ssd_forward_args_init(&a);
  a.chunk_size = 256;
  a.x = contiguous_tensor(at(1), SSD_DTYPE_BF16, {b, L, h, p});
  a.dt = contiguous_tensor(at(2), SSD_DTYPE_BF16, {b, L, h});
  a.A = contiguous_tensor(at(3), SSD_DTYPE_FP32, {h});
  a.B = contiguous_tensor(at(4), SSD_DTYPE_BF16, {b, L, g, n});
  a.C = contiguous_tensor(at(5), SSD_DTYPE_BF16, {b, L, g, n});
  a.out = contiguous_tensor(at(6), SSD_DTYPE_BF16, {b, L, h, p});
  auto scan_flags = [](const ssd_forward_args& args, ssd_arch arch, const ForwardTuning* t = nullptr) {
    auto configs = forward_kernel_configs(&args, arch, SSD_MODE_DETERMINISTIC, t);
    REQUIRE_MESSAGE(configs.ok(), configs.status().detail);
    for (const ssd_kernel_config& c : configs.value())
      if (c.kernel == SSD_KERNEL_CHUNK_SCAN_FWD) {
        REQUIRE(validate_config(c).ok());
        return c.flags;
      }
    FAIL("no chunk_scan_fwd stage");
    return 0u;
  };
  CHECK((scan_flags(a, SSD_ARCH_SM90A) & SSD_FLAG_TMA) != 0);
  CHECK((scan_flags(a, SSD_ARCH_SM90) & SSD_FLAG_TMA) == 0);
  CHECK((scan_flags(a, SSD_ARCH_SM80) & SSD_FLAG_TMA) == 0);
  ForwardTuning cp_async;
  cp_async.cp_async = true;
  CHECK((scan_flags(a, SSD_ARCH_SM90A, &cp_async) & SSD_FLAG_TMA) == 0);
  ForwardTuning staged;  // fp32 P: the cp.async kernel
  staged.staged_states = true;
  CHECK((scan_flags(a, SSD_ARCH_SM90A, &staged) & SSD_FLAG_TMA) == 0);
  // A view of x inside a wider tensor (row of 72 heads' worth of p: strides still multiples of 16
  // bytes) keeps TMA; strides off the 16-byte grid, a misaligned base or a non-unit p stride do not.
  ssd_forward_args wide = a;
  wide.x.strides[2] = 72, wide.x.strides[1] = h * 72, wide.x.strides[0] = L * h * 72;
  CHECK((scan_flags(wide, SSD_ARCH_SM90A) & SSD_FLAG_TMA) != 0);
  ssd_forward_args odd = a;
  odd.x.strides[2] = 68, odd.x.strides[1] = h * 68, odd.x.strides[0] = L * h * 68;
  CHECK((scan_flags(odd, SSD_ARCH_SM90A) & SSD_FLAG_TMA) == 0);
  ssd_forward_args misaligned = a;
  misaligned.C.data = static_cast<char*>(misaligned.C.data) + 8;
  CHECK((scan_flags(misaligned, SSD_ARCH_SM90A) & SSD_FLAG_TMA) == 0);
  // Prepare cannot see the pointers: on sm_90a it builds both variants of both kernels, so a call
  // with a view off the maps' grid finds its cp.async kernels too.
  for (ssd_arch arch : {SSD_ARCH_SM90A, SSD_ARCH_SM90}) {
    auto prepared = forward_prepare_configs(&a, arch, SSD_MODE_DETERMINISTIC);
    REQUIRE_MESSAGE(prepared.ok(), prepared.status().detail);
    int tma = 0, cp = 0;
    for (const ssd_kernel_config& c : prepared.value())
      if (c.kernel == SSD_KERNEL_CHUNK_SCAN_FWD || c.kernel == SSD_KERNEL_CHUNK_STATE_PASSING_FWD)
        ((c.flags & SSD_FLAG_TMA) ? tma : cp) += 1;
    CAPTURE(arch_name(arch));
    CHECK(tma == (arch == SSD_ARCH_SM90A ? 2 : 0));
    CHECK(cp == 2);
  }
  // An axis of extent 1 may have any stride (its coordinate is always 0).
  ssd_forward_args one = a;
  one.x.shape[0] = one.B.shape[0] = one.C.shape[0] = one.dt.shape[0] = one.out.shape[0] = 1;
  one.x.strides[0] = 3;
  CHECK((scan_flags(one, SSD_ARCH_SM90A) & SSD_FLAG_TMA) != 0);
}
