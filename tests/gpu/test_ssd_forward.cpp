// ssd_forward on the GPU against the float64 oracle (forward_chunked): every stage's intermediate,
// out / out_x / final_states, poisoned outputs all written, and bitwise repeats.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "gpu_support.h"
#include "reference/metrics.h"
#include "reference/ssd_reference.h"

using namespace gputest;

namespace {

struct FwdCase {
  int64_t b, L, h, p, g, n;
  int32_t Q;
  ssd_dtype dtype;
  bool D, D_per_headdim, z, bias, softplus, init, seq_idx;
};

std::string describe(const FwdCase& c) { return describe_ssd_case(c); }

struct FwdProblem {
  FwdCase c;
  int64_t nc;
  HostArray x, dt, A, B, C, D, z, bias, init;
  std::vector<int32_t> seq;
  DeviceBuffer d_x, d_dt, d_A, d_B, d_C, d_D, d_z, d_bias, d_init, d_seq, d_out, d_out_x, d_final, d_ws;
  ssd_forward_layout layout{};

  explicit FwdProblem(const FwdCase& cc) : c(cc), nc((cc.L + cc.Q - 1) / cc.Q) {
    const size_t nx = size_t(c.b * c.L * c.h * c.p);
    x = make_array(c.dtype, normal(nx));
    z = make_array(c.dtype, normal(nx));
    draw_ssd_inputs(*this);
    d_x = upload_array(x); d_dt = upload_array(dt); d_A = upload_array(A); d_B = upload_array(B); d_C = upload_array(C);
    d_D = upload_array(D); d_z = upload_array(z); d_bias = upload_array(bias); d_init = upload_array(init);
    d_seq = DeviceBuffer(seq.size() * 4);
    d_seq.upload(seq.data(), seq.size() * 4);
    d_out = DeviceBuffer(x.bytes.size());
    d_out_x = DeviceBuffer(x.bytes.size());
    d_final = DeviceBuffer(init.bytes.size());
    layout.struct_size = sizeof(layout);
    ssd_forward_args a = args();
    GPU_CHECK_SSD(ssd_forward_workspace_layout(&a, &layout));
    d_ws = DeviceBuffer(layout.total_bytes);
  }

  ssd_forward_args args() const {
    ssd_forward_args a;
    ssd_forward_args_init(&a);
    a.chunk_size = c.Q;
    a.dt_softplus = c.softplus;
    a.x = tensor(d_x, c.dtype, {c.b, c.L, c.h, c.p});
    a.dt = tensor(d_dt, c.dtype, {c.b, c.L, c.h});
    a.A = tensor(d_A, SSD_DTYPE_FP32, {c.h});
    a.B = tensor(d_B, c.dtype, {c.b, c.L, c.g, c.n});
    a.C = tensor(d_C, c.dtype, {c.b, c.L, c.g, c.n});
    if (c.D) a.D = c.D_per_headdim ? tensor(d_D, SSD_DTYPE_FP32, {c.h, c.p}) : tensor(d_D, SSD_DTYPE_FP32, {c.h});
    if (c.z) {
      a.z = tensor(d_z, c.dtype, {c.b, c.L, c.h, c.p});
      a.out_x = tensor(d_out_x, c.dtype, {c.b, c.L, c.h, c.p});
    }
    if (c.bias) a.dt_bias = tensor(d_bias, SSD_DTYPE_FP32, {c.h});
    if (c.init) a.initial_states = tensor(d_init, SSD_DTYPE_FP32, {c.b, c.h, c.p, c.n});
    if (c.seq_idx) a.seq_idx = tensor(d_seq, SSD_DTYPE_INT32, {c.b, c.L});
    a.out = tensor(d_out, c.dtype, {c.b, c.L, c.h, c.p});
    a.final_states = tensor(d_final, SSD_DTYPE_FP32, {c.b, c.h, c.p, c.n});
    a.workspace = d_ws.get();
    a.workspace_bytes = layout.total_bytes;
    return a;
  }

  ssd::ref::SsdProblem oracle_problem() const { return oracle_problem_of(*this); }

  // Poisons outputs and workspace, runs, returns out ++ out_x ++ final_states bytes.
  std::vector<uint8_t> run(ssd_runtime* rt) {
    poison_all({&d_out, &d_out_x, &d_final, &d_ws});
    ssd_forward_args a = args();
    GPU_CHECK_SSD(ssd_forward(rt, &a, nullptr, nullptr));
    return c.z ? download_all({&d_out, &d_out_x, &d_final}) : download_all({&d_out, &d_final});
  }
};


const FwdCase kFwdCases[] = {
    {2, 600, 8, 64, 2, 64, 256, SSD_DTYPE_BF16, true, false, true, true, true, true, false},
    {2, 300, 4, 32, 1, 16, 64, SSD_DTYPE_FP16, false, false, false, false, false, false, false},
    {2, 513, 16, 128, 8, 128, 128, SSD_DTYPE_BF16, true, true, false, false, false, true, true},
    {2, 512, 8, 64, 2, 256, 256, SSD_DTYPE_BF16, true, false, false, true, true, false, false},
    {2, 400, 6, 64, 3, 32, 128, SSD_DTYPE_FP16, true, false, true, true, true, true, true},
    // fp16 on sm_90a's wgmma chunk_scan_fwd (chunk 64, every option, partial last chunk).
    {2, 230, 4, 64, 2, 64, 64, SSD_DTYPE_FP16, true, true, true, true, true, true, true},
};

}  // namespace

TEST_CASE("ssd_forward matches the float64 oracle, stage by stage" * doctest::skip(!gpu_available())) {
  for_each_case(kFwdCases, [&](ssd_runtime* rt, const FwdCase& c) {
    FwdProblem prob(c);
    prob.run(rt);
    const ssd::ref::SsdForwardResult ref = ssd::ref::forward_chunked(prob.oracle_problem());
    const size_t nx = size_t(c.b * c.L * c.h * c.p), nch = size_t(c.b * c.h * prob.nc * c.Q);
    const size_t nst = size_t(c.b * prob.nc * c.h * c.p * c.n), ncb = size_t(c.b * prob.nc * c.g * c.Q * c.Q);
    std::vector<uint8_t> ws = download_bytes(prob.d_ws);
    auto region = [&](size_t offset, size_t count) {
      std::vector<double> v(count);
      for (size_t i = 0; i < count; ++i) {
        float f;
        std::memcpy(&f, ws.data() + offset + 4 * i, 4);
        v[i] = f;
      }
      return v;
    };
    std::vector<double> dt_out = region(prob.layout.dt_out_offset, nch), cs = region(prob.layout.dA_cumsum_offset, nch);
    std::vector<double> CB = region(prob.layout.CB_offset, ncb);
    std::vector<double> P(nst);  // in x's dtype (docs/api.md)
    for (size_t i = 0; i < nst; ++i) {
      uint16_t u;
      std::memcpy(&u, ws.data() + prob.layout.states_offset + 2 * i, 2);
      P[i] = c.dtype == SSD_DTYPE_BF16 ? ssd::bf16_to_float(u) : ssd::fp16_to_float(u);
    }
    // CB: only the causal lower triangle is produced and read.
    std::vector<double> CB_ref = ref.CB;
    for (size_t blk = 0; blk < size_t(c.b * prob.nc * c.g); ++blk)
      for (int l = 0; l < c.Q; ++l)
        for (int s = l + 1; s < c.Q; ++s) CB[blk * c.Q * c.Q + l * c.Q + s] = CB_ref[blk * c.Q * c.Q + l * c.Q + s] = 0;
    std::vector<double> out = download_values(prob.d_out, c.dtype, nx);
    std::vector<double> fin = download_values(prob.d_final, SSD_DTYPE_FP32, size_t(c.b * c.h * c.p * c.n));
    REQUIRE(all_finite(out));
    REQUIRE(all_finite(fin));
    const double e_dt = ssd::ref::rel_l2(dt_out.data(), ref.dt_out.data(), nch);
    const double e_cs = ssd::ref::rel_l2(cs.data(), ref.dA_cumsum.data(), nch);
    const double e_cb = ssd::ref::rel_l2(CB.data(), CB_ref.data(), ncb);
    const double e_P = ssd::ref::rel_l2(P.data(), ref.prev_states.data(), nst);
    const double e_out = ssd::ref::rel_l2(out.data(), ref.out.data(), nx);
    const double e_fin = ssd::ref::rel_l2(fin.data(), ref.final_states.data(), fin.size());
    double e_ox = 0;
    if (c.z) {
      std::vector<double> ox = download_values(prob.d_out_x, c.dtype, nx);
      REQUIRE(all_finite(ox));
      e_ox = ssd::ref::rel_l2(ox.data(), ref.out_x.data(), nx);
    }
    MESSAGE("fwd " << describe(c) << ": rel_l2 out " << e_out << " out_x " << e_ox << " final " << e_fin
                   << " | dt " << e_dt << " cumsum " << e_cs << " CB " << e_cb << " P " << e_P);
    const double tol = c.dtype == SSD_DTYPE_BF16 ? 3e-3 : 1e-3;
    CHECK(e_dt < 1e-5);
    CHECK(e_cs < 1e-5);
    CHECK(e_cb < 1e-5);
    CHECK(e_P < tol);
    CHECK(e_out < tol);
    CHECK(e_ox < tol);
    CHECK(e_fin < tol);
  });
}

// A sequence that starts with Δ = -100 (dt_limit_lo = -inf, no softplus): 𝒜 jumps by +100 to its
// first position r = 192, so the factored W's u_r(s) = exp(𝒜(r) − 𝒜(s)) · Δ_s for the previous
// sequence's s < r exceeds fp32 unless capped; CB is 0 there (seq_idx), and 0 · inf would make the
// new sequence's rows NaN. With the cap (chunk_scan.cuh, detail::factored_u) they match the oracle.
TEST_CASE("ssd_forward: a sequence whose 𝒜 rises by 100 at its start keeps every row finite" *
          doctest::skip(!gpu_available())) {
  const FwdCase cases[] = {
      {1, 512, 4, 64, 2, 64, 256, SSD_DTYPE_BF16, true, false, false, false, false, false, true},
      {1, 512, 4, 64, 1, 128, 256, SSD_DTYPE_FP16, true, false, true, false, false, false, true},
  };
  for_each_case(cases, [&](ssd_runtime* rt, const FwdCase& c) {
    FwdProblem prob(c);
    constexpr int64_t kStart = 192;  // the new sequence's first position: a 64-block start, r > 0
    std::vector<double> dt = uniform(size_t(c.b * c.L * c.h), 0.01, 0.2);
    for (int64_t hh = 0; hh < c.h; ++hh) dt[size_t(kStart * c.h + hh)] = -100.0;
    prob.dt = make_array(c.dtype, dt);
    prob.d_dt = upload_array(prob.dt);
    for (int64_t t = 0; t < c.L; ++t) prob.seq[size_t(t)] = t < kStart ? 0 : 1;
    prob.d_seq.upload(prob.seq.data(), prob.seq.size() * 4);
    ssd_forward_args a = prob.args();
    a.dt_limit_lo = -INFINITY;
    poison_all({&prob.d_out, &prob.d_out_x, &prob.d_final, &prob.d_ws});
    GPU_CHECK_SSD(ssd_forward(rt, &a, nullptr, nullptr));
    ssd::ref::SsdProblem q = prob.oracle_problem();
    q.dt_limit_lo = -INFINITY;
    const ssd::ref::SsdForwardResult ref = ssd::ref::forward_chunked(q);
    const size_t nx = size_t(c.b * c.L * c.h * c.p);
    std::vector<double> out = download_values(prob.d_out, c.dtype, nx);
    size_t nonfinite = 0;
    for (double v : out) nonfinite += !std::isfinite(v);
    const double e_out = ssd::ref::rel_l2(out.data(), ref.out.data(), nx);
    MESSAGE("rising A " << describe(c) << ": " << nonfinite << " non-finite outputs, rel_l2 out " << e_out);
    CHECK(nonfinite == 0);
    CHECK(e_out < (c.dtype == SSD_DTYPE_BF16 ? 3e-3 : 1e-3));
  });
}

TEST_CASE("ssd_forward: ten repeats give identical bits" * doctest::skip(!gpu_available())) {
  RuntimeHolder rt;
  FwdProblem prob(kFwdCases[4]);
  const std::vector<uint8_t> first = prob.run(rt.rt);
  for (int i = 0; i < 10; ++i) CHECK(same_bytes(prob.run(rt.rt), first));
}

TEST_CASE("ssd_forward: bad arguments are refused by name, nothing written" * doctest::skip(!gpu_available())) {
  RuntimeHolder rt;
  FwdProblem prob(kFwdCases[1]);
  prob.d_out.poison();
  ssd_forward_args a = prob.args();
  a.C.shape[3] = 32;
  CHECK(ssd_forward(rt.rt, &a, nullptr, nullptr) == SSD_ERROR_INVALID_SHAPE);
  CHECK(std::string(ssd_last_error_detail()).find("C:") != std::string::npos);
  a = prob.args();
  a.B.dtype = SSD_DTYPE_BF16;  // x is fp16
  CHECK(ssd_forward(rt.rt, &a, nullptr, nullptr) == SSD_ERROR_INVALID_DTYPE);
  a = prob.args();
  a.workspace_bytes = 100;
  CHECK(ssd_forward(rt.rt, &a, nullptr, nullptr) == SSD_ERROR_WORKSPACE_TOO_SMALL);
  a = prob.args();
  a.out_x = a.out;  // no z given
  CHECK(ssd_forward(rt.rt, &a, nullptr, nullptr) == SSD_ERROR_INVALID_ARGUMENT);
  for (double v : download_values(prob.d_out, SSD_DTYPE_FP16, prob.x.values.size())) REQUIRE(std::isnan(v));
}

#include "codegen/codegen.h"
#include "ops/ssd_forward.h"
#include "runtime/runtime.h"

TEST_CASE("ssd_forward over the shape matrix (headdim x dstate x chunk x dtype, options on and off)" *
          doctest::skip(!gpu_available())) {
  RuntimeHolder rt;
  // Every (p, n, Q, dtype); ngroups and the options rotate so each is seen on and off.
  const std::vector<FwdCase> cases = shape_matrix<FwdCase>();
  // Compile everything the sweep needs in parallel first (the kernels are the point, not NVRTC time).
  auto arch = ssd::runtime_arch(*rt.rt);
  REQUIRE(arch.ok());
  std::vector<ssd_kernel_config> configs;
  for (const FwdCase& c : cases) {
    FwdProblem probe_shape(FwdCase{c.b, 1, c.h, c.p, c.g, c.n, c.Q, c.dtype, c.D, c.D_per_headdim, c.z, c.bias,
                                   c.softplus, c.init, c.seq_idx});
    ssd_forward_args a = probe_shape.args();
    auto k = ssd::forward_kernel_configs(&a, arch.value(), SSD_MODE_DETERMINISTIC);
    REQUIRE(k.ok());
    configs.insert(configs.end(), k->begin(), k->end());
  }
  for (auto& r : rt.rt->builder->build_many(configs, 16)) REQUIRE_MESSAGE(r.ok(), r.status().detail);

  double worst_bf16 = 0, worst_fp16 = 0;
  for (const FwdCase& c : cases) {
    CAPTURE(describe(c));
    FwdProblem prob(c);
    prob.run(rt.rt);
    const ssd::ref::SsdForwardResult ref = ssd::ref::forward_chunked(prob.oracle_problem());
    const size_t nx = size_t(c.b * c.L * c.h * c.p);
    std::vector<double> out = download_values(prob.d_out, c.dtype, nx);
    std::vector<double> fin = download_values(prob.d_final, SSD_DTYPE_FP32, size_t(c.b * c.h * c.p * c.n));
    REQUIRE(all_finite(out));
    REQUIRE(all_finite(fin));
    double e = std::max(ssd::ref::rel_l2(out.data(), ref.out.data(), nx),
                        ssd::ref::rel_l2(fin.data(), ref.final_states.data(), fin.size()));
    if (c.z) {
      std::vector<double> ox = download_values(prob.d_out_x, c.dtype, nx);
      REQUIRE(all_finite(ox));
      e = std::max(e, ssd::ref::rel_l2(ox.data(), ref.out_x.data(), nx));
    }
    CHECK(e < (c.dtype == SSD_DTYPE_BF16 ? 3e-3 : 1e-3));
    (c.dtype == SSD_DTYPE_BF16 ? worst_bf16 : worst_fp16) = std::max(c.dtype == SSD_DTYPE_BF16 ? worst_bf16 : worst_fp16, e);
  }
  MESSAGE("fwd matrix: " << cases.size() << " cases, worst rel_l2 (out, out_x, final) bf16 " << worst_bf16
                         << ", fp16 " << worst_fp16);
}

TEST_CASE("ssd_forward: tile shapes of every stage, and the staged states, give identical bits" *
          doctest::skip(!gpu_available())) {
  // Every output element is one thread's fp32 accumulator over mma K=16 chains in increasing K
  // order, whatever the tile: the bits must not move with m, n or the K step. The fused state pass
  // (chunk_state_passing_fwd) and the staged one (chunk_state_fwd + state_passing_fwd) follow the
  // same order, so every tile of either path gives the same bits too (P in the workspace included).
  RuntimeHolder rt;
  auto arch = ssd::runtime_arch(*rt.rt);
  REQUIRE(arch.ok());
  const FwdCase cases[] = {kFwdCases[0], kFwdCases[2], kFwdCases[3], kFwdCases[4]};
  ssd::ForwardTuning staged;
  staged.staged_states = true;
  auto configs_of = [&](const ssd_forward_args& a, const ssd::ForwardTuning& t) {
    auto configs = ssd::forward_kernel_configs(&a, arch.value(), SSD_MODE_DETERMINISTIC, &t);
    REQUIRE(configs.ok());
    return configs.value();
  };
  {  // compile every variant in parallel first
    std::vector<ssd_kernel_config> all;
    for (const FwdCase& c : cases) {
      FwdProblem probe(FwdCase{c.b, 1, c.h, c.p, c.g, c.n, c.Q, c.dtype, c.D, c.D_per_headdim, c.z, c.bias, c.softplus,
                               c.init, c.seq_idx});
      ssd_forward_args a = probe.args();
      for (const ssd::ForwardTuning& t : {ssd::ForwardTuning{}, staged})
        for (ssd_kernel_config k : configs_of(a, t))
          for (const ssd_tile& tile : ssd::legal_tiles(k)) {
            k.tile = tile;
            all.push_back(k);
          }
    }
    for (auto& r : rt.rt->builder->build_many(all, 16)) REQUIRE_MESSAGE(r.ok(), r.status().detail);
  }
  for (const FwdCase& c : cases) {
    CAPTURE(describe(c));
    FwdProblem prob(c);
    ssd_forward_args a = prob.args();
    // The staged path keeps P in fp32 (a larger states section); compared rounded to x's dtype,
    // as chunk_scan_fwd and the fused path round it.
    auto staged_layout = ssd::forward_layout(&a, &staged);
    REQUIRE(staged_layout.ok());
    DeviceBuffer staged_ws(staged_layout->total_bytes);
    const size_t nst = size_t(c.b * prob.nc * c.h * c.p * c.n);
    auto run = [&](const ssd::ForwardTuning& t) {
      DeviceBuffer& ws_buf = t.staged_states ? staged_ws : prob.d_ws;
      ssd_forward_args call = a;
      call.workspace = ws_buf.get();
      call.workspace_bytes = t.staged_states ? staged_layout->total_bytes : prob.layout.total_bytes;
      prob.d_out.poison(); prob.d_out_x.poison(); prob.d_final.poison(); ws_buf.poison();
      REQUIRE(ssd::ssd_forward(*rt.rt, &call, nullptr, nullptr, {}, &t).ok());
      std::vector<uint8_t> r = download_bytes(prob.d_out), ox = download_bytes(prob.d_out_x),
                           f = download_bytes(prob.d_final), ws = download_bytes(ws_buf);
      if (c.z) r.insert(r.end(), ox.begin(), ox.end());
      r.insert(r.end(), f.begin(), f.end());
      const uint8_t* P = ws.data() + prob.layout.states_offset;  // the same offset on both paths
      for (size_t i = 0; i < nst; ++i) {
        uint16_t u;
        if (t.staged_states) {
          float v;
          std::memcpy(&v, P + 4 * i, 4);
          u = c.dtype == SSD_DTYPE_BF16 ? ssd::float_to_bf16(v) : ssd::float_to_fp16(v);
        } else {
          std::memcpy(&u, P + 2 * i, 2);
        }
        r.push_back(uint8_t(u & 0xff));
        r.push_back(uint8_t(u >> 8));
      }
      return r;
    };
    const std::vector<uint8_t> base = run(ssd::ForwardTuning{});
    int variants = 0;
    for (const ssd::ForwardTuning& path : {ssd::ForwardTuning{}, staged})
      for (const ssd_kernel_config& k : configs_of(a, path)) {
        for (const ssd_tile& tile : ssd::legal_tiles(k)) {
          ssd::ForwardTuning t = path;
          switch (k.kernel) {
            case SSD_KERNEL_BMM_CHUNK_FWD: t.bmm = tile; break;
            case SSD_KERNEL_CHUNK_STATE_FWD: t.state = tile; break;
            case SSD_KERNEL_STATE_PASSING_FWD: t.passing = tile; break;
            case SSD_KERNEL_CHUNK_STATE_PASSING_FWD: t.state_pass = tile; break;
            case SSD_KERNEL_CHUNK_SCAN_FWD: t.scan = tile; break;
            default: continue;  // chunk_cumsum_fwd has one tile
          }
          CAPTURE(ssd::kernel_name(k.kernel));
          CAPTURE(path.staged_states);
          CAPTURE(tile.m);
          CAPTURE(tile.n);
          CAPTURE(tile.k);
          CHECK(same_bytes(run(t), base));
          ++variants;
        }
      }
    MESSAGE("fwd tiles " << describe(c) << ": " << variants << " tile variants (fused and staged states) checked bitwise");
  }
}

TEST_CASE("chunk_scan_fwd: sm_90a (wgmma) against sm_90 (mma.sync) on the same inputs" *
          doctest::skip(!gpu_available())) {
  // The same forward on two runtimes: the device's (sm_90a: chunk_scan_fwd on wgmma where the shape
  // allows) and one built for sm_90 (every stage on mma.sync; sm_80 cubins do not load on Hopper, sm_90 ones do). The stages
  // before chunk_scan_fwd are the same kernels on both: when their workspace sections (Δ, A, CB, P)
  // agree bitwise, out / out_x differ only by chunk_scan_fwd. Same canonical order on both paths
  // (chunk_scan.cuh); whether an HGMMA k16 step gives an HMMA m16n8k16 step's bits is what this
  // measures: equal-element counts, max abs and relative L2 of the difference are reported, and
  // both must stay within the oracle bound of each other.
  if (!device_is_sm90a()) {
    MESSAGE("the device is not sm_90a: no wgmma path to compare");
    return;
  }
  RuntimeHolder rt;
  RuntimeHolder rt80(SSD_ARCH_SM90);  // the mma.sync kernels (sm_90 keeps them)
  const FwdCase cases[] = {
      kFwdCases[0], kFwdCases[2], kFwdCases[3], kFwdCases[5], kFwdCases[1],
      // nemotronh-56b's head shape (p 64, n 256, chunk 256, 32 heads per group), D per head.
      {1, 1024, 64, 64, 2, 256, 256, SSD_DTYPE_BF16, true, false, false, true, true, false, false},
  };
  int wgmma_cases = 0;
  for (const FwdCase& c : cases) {
    CAPTURE(describe(c));
    FwdProblem prob(c);
    ssd_forward_args a = prob.args();
    // Does the plan pick the wgmma kernel on sm_90a for this shape?
    auto configs = ssd::forward_kernel_configs(&a, SSD_ARCH_SM90A, SSD_MODE_DETERMINISTIC);
    REQUIRE(configs.ok());
    bool wgmma = false;
    for (const ssd_kernel_config& k : configs.value()) {
      if (k.kernel != SSD_KERNEL_CHUNK_SCAN_FWD) continue;
      auto n = ssd::normalize_config(k);
      REQUIRE(n.ok());
      auto u = ssd::generate_unit(n.value());
      REQUIRE(u.ok());
      wgmma = u->source.find("kWgmma = true") != std::string::npos;
    }
    wgmma_cases += wgmma;
    const std::vector<uint8_t> r90 = prob.run(rt.rt), ws90 = download_bytes(prob.d_ws);
    const std::vector<uint8_t> r80 = prob.run(rt80.rt), ws80 = download_bytes(prob.d_ws);
    REQUIRE(r90.size() == r80.size());
    const size_t nch = size_t(c.b * c.h * prob.nc * c.Q), ncb = size_t(c.b * prob.nc * c.g * c.Q * c.Q);
    const size_t nst = size_t(c.b * prob.nc * c.h * c.p * c.n);
    auto same_section = [&](size_t offset, size_t bytes) {
      return std::equal(ws90.begin() + offset, ws90.begin() + offset + bytes, ws80.begin() + offset);
    };
    const bool upstream_equal = same_section(prob.layout.dt_out_offset, 4 * nch) &&
                                same_section(prob.layout.dA_cumsum_offset, 4 * nch) &&
                                same_section(prob.layout.CB_offset, 4 * ncb) &&
                                same_section(prob.layout.states_offset, 2 * nst);
    // out (and out_x) in x's dtype: the first (1 or 2) * nx elements of the run's bytes.
    const size_t nx = size_t(c.b * c.L * c.h * c.p), nout = (c.z ? 2 : 1) * nx;
    size_t equal = 0;
    double max_abs = 0, d2 = 0, r2 = 0;
    for (size_t i = 0; i < nout; ++i) {
      uint16_t u90, u80;
      std::memcpy(&u90, r90.data() + 2 * i, 2);
      std::memcpy(&u80, r80.data() + 2 * i, 2);
      equal += u90 == u80;
      const double v90 = c.dtype == SSD_DTYPE_BF16 ? ssd::bf16_to_float(u90) : ssd::fp16_to_float(u90);
      const double v80 = c.dtype == SSD_DTYPE_BF16 ? ssd::bf16_to_float(u80) : ssd::fp16_to_float(u80);
      REQUIRE(std::isfinite(v90));
      REQUIRE(std::isfinite(v80));
      max_abs = std::max(max_abs, std::fabs(v90 - v80));
      d2 += (v90 - v80) * (v90 - v80);
      r2 += v80 * v80;
    }
    const double rel = r2 > 0 ? std::sqrt(d2 / r2) : std::sqrt(d2);
    MESSAGE("chunk_scan_fwd " << std::string(wgmma ? "wgmma" : "mma.sync (shape off the wgmma grid)") << " vs sm_90 mma.sync "
                              << describe(c) << ": upstream workspace " << std::string(upstream_equal ? "equal" : "DIFFERENT")
                              << "; out" << std::string(c.z ? "+out_x" : "") << " bitwise equal " << equal << " / " << nout
                              << ", max abs diff " << max_abs << ", rel L2 diff " << rel);
    CHECK(rel < (c.dtype == SSD_DTYPE_BF16 ? 3e-3 : 1e-3));
    // The final states come from the state pass alone: the same on both runtimes when upstream is.
    if (upstream_equal)
      CHECK(std::equal(r90.begin() + 2 * nout, r90.end(), r80.begin() + 2 * nout));
  }
  CHECK(wgmma_cases >= 5);  // the plan picks the wgmma kernel on sm_90a where the shape allows
}

TEST_CASE("chunk_scan_fwd sm_90a: W's variants (no mask, mask, guarded exp) give the mma.sync kernel's bits" *
          doctest::skip(!gpu_available())) {
  // The wgmma kernel forms W per tile in one of three loops (chunk_scan_sm90a.cuh): without the mask
  // for steps below the diagonal, with it for the others, and with __expf's subnormal guard for every
  // step of a tile whose exponent bound (the least A(l) of the rows against the largest A(s) of the
  // positions) is below -126; elsewhere ex2 without the guard, the same bits. Heads with A from -0.5
  // to -64 make both kinds of tile (counted here from the workspace's dA_cumsum, as the kernel
  // decides), and every legal tile of chunk_scan_fwd must give the sm_90 mma.sync kernel's out and
  // out_x bit for bit (the wgmma kernel did before W was split: entry 6 of docs/perf.md).
  if (!device_is_sm90a()) {
    MESSAGE("the device is not sm_90a: no wgmma path to compare");
    return;
  }
  RuntimeHolder rt;
  RuntimeHolder rt90(SSD_ARCH_SM90);
  const FwdCase cases[] = {
      // nemotronh-56b's head shape, softplus Δ (small), D per head.
      {1, 1024, 8, 64, 2, 256, 256, SSD_DTYPE_BF16, true, false, false, true, true, false, false},
      // fp16, every option, a partial last chunk (padding rows), Δ up to 0.2 without softplus.
      {2, 700, 8, 64, 2, 64, 256, SSD_DTYPE_FP16, true, true, true, false, false, true, true},
      // headdim 128 (the 64 x 128 tile), chunk 128.
      {1, 500, 4, 128, 1, 128, 128, SSD_DTYPE_BF16, false, false, true, true, true, false, false},
  };
  const double decay_A[] = {-0.5, -6.0, -24.0, -64.0};
  for (const FwdCase& c : cases) {
    CAPTURE(describe(c));
    FwdProblem prob(c);
    std::vector<double> A(size_t(c.h));
    for (int64_t h = 0; h < c.h; ++h) A[size_t(h)] = decay_A[h % 4];
    prob.A = make_array(SSD_DTYPE_FP32, A);
    prob.d_A = upload_array(prob.A);
    ssd_forward_args a = prob.args();
    const std::vector<uint8_t> r90 = prob.run(rt90.rt), ws90 = download_bytes(prob.d_ws);
    const size_t nx = size_t(c.b * c.L * c.h * c.p), nout = 2 * ((c.z ? 2 : 1) * nx);
    // The kernel's choice per 64-row tile, from dA_cumsum (b, h, chunk, Q) fp32.
    const size_t nch = size_t(c.b * c.h * prob.nc * c.Q);
    std::vector<float> dA(nch);
    std::memcpy(dA.data(), ws90.data() + prob.layout.dA_cumsum_offset, 4 * nch);
    int plain = 0, guarded = 0;
    for (size_t row = 0; row < nch / size_t(c.Q); ++row) {
      const int64_t chunk = int64_t(row % size_t(prob.nc));
      const int valid = int(std::min<int64_t>(c.Q, c.L - chunk * c.Q));
      const float* r = dA.data() + row * size_t(c.Q);
      for (int m0 = 0; m0 < valid; m0 += 64) {
        const int kend = std::min(m0 + 64, valid), positions = (kend + 63) / 64 * 64;
        const float al_lo = *std::min_element(r + m0, r + m0 + 64);
        // The direct W's positions only (from the rows' 64-block on: the factored W below it
        // forms no exp per element).
        const float as_hi = *std::max_element(r + m0, r + positions);
        const float t = std::min(al_lo - as_hi, 0.f) * 1.4426950216293334961f;
        (t >= -126.f ? plain : guarded) += 1;
      }
    }
    MESSAGE("64-row tiles " << describe(c) << ": " << plain << " without the exp guard, " << guarded << " with it");
    CHECK(plain > 0);
    CHECK(guarded > 0);
    auto configs = ssd::forward_kernel_configs(&a, SSD_ARCH_SM90A, SSD_MODE_DETERMINISTIC);
    REQUIRE(configs.ok());
    for (const ssd_kernel_config& k : configs.value()) {
      if (k.kernel != SSD_KERNEL_CHUNK_SCAN_FWD) continue;
      for (const ssd_tile& tile : ssd::legal_tiles(k)) {
        CAPTURE(tile.m);
        CAPTURE(tile.n);
        ssd::ForwardTuning t;
        t.scan = tile;
        poison_all({&prob.d_out, &prob.d_out_x, &prob.d_final, &prob.d_ws});
        REQUIRE(ssd::ssd_forward(*rt.rt, &a, nullptr, nullptr, {}, &t).ok());
        const std::vector<uint8_t> r = c.z ? download_all({&prob.d_out, &prob.d_out_x, &prob.d_final})
                                           : download_all({&prob.d_out, &prob.d_final});
        const std::vector<uint8_t> ws = download_bytes(prob.d_ws);
        // The stages before chunk_scan_fwd give the same workspace on both runtimes (Δ, A, CB, P).
        const size_t ncb = size_t(c.b * prob.nc * c.g * c.Q * c.Q), nst = size_t(c.b * prob.nc * c.h * c.p * c.n);
        auto same_section = [&](size_t offset, size_t bytes) {
          return std::equal(ws.begin() + offset, ws.begin() + offset + bytes, ws90.begin() + offset);
        };
        REQUIRE(same_section(prob.layout.dt_out_offset, 4 * nch));
        REQUIRE(same_section(prob.layout.dA_cumsum_offset, 4 * nch));
        REQUIRE(same_section(prob.layout.CB_offset, 4 * ncb));
        REQUIRE(same_section(prob.layout.states_offset, 2 * nst));
        size_t equal = 0;
        for (size_t i = 0; i < nout; ++i) equal += r[i] == r90[i];
        MESSAGE("chunk_scan_fwd " << tile.m << "x" << tile.n << "x" << tile.k << " (wgmma) vs sm_90 mma.sync "
                                  << describe(c) << ": out" << std::string(c.z ? "+out_x" : "") << " bytes equal " << equal
                                  << " / " << nout);
        CHECK(equal == nout);
      }
    }
  }
}

TEST_CASE("ssd_forward on sm_90a: the wgmma state pass gives the mma.sync kernel's P and final states" *
          doctest::skip(!gpu_available())) {
  // chunk_state_passing_fwd on sm_90a (chunk_state_passing_sm90a.cuh) keeps the mma.sync kernel's order:
  // the same A operand bits, s_c from +0 in 16-wide K steps, the same fma per chunk. Its bits equal
  // the mma.sync kernel's exactly when one wgmma k16 step accumulates as one mma.m16n8k16 does; this
  // counts the equal elements of P (the workspace, x's dtype) and of the final states, and reports
  // the largest differences if any. The mma.sync kernel runs on the same device from a runtime with
  // arch sm_90 (its units keep mma.sync; sm_80 cubins would not load on a 9.x device).
  if (!device_is_sm90a()) {
    MESSAGE("not an sm_90a device: the wgmma state pass does not run here");
    return;
  }
  RuntimeHolder rt90a(SSD_ARCH_SM90A), rt90(SSD_ARCH_SM90);
  // The forward tests' shapes (those with headdim and dstate multiples of 64 take the wgmma kernel, by
  // default two warpgroups per block on two heads of a group or on both halves of a 128-wide head;
  // the others check that the fallback is the mma.sync kernel), plus fp16 with a partial last chunk,
  // seq_idx, initial states and 3 heads per group (one warpgroup per block), and headdim 128 with
  // chunk 64.
  std::vector<FwdCase> cases(std::begin(kFwdCases), std::end(kFwdCases));
  cases.push_back({1, 1000, 6, 64, 2, 128, 128, SSD_DTYPE_FP16, true, false, false, true, true, true, true});
  cases.push_back({2, 777, 8, 128, 2, 256, 64, SSD_DTYPE_BF16, false, false, true, false, false, true, true});
  size_t all_equal = 0, all_total = 0;
  for (const FwdCase& c : cases) {
    CAPTURE(describe(c));
    FwdProblem prob(c);
    const size_t nst = size_t(c.b * prob.nc * c.h * c.p * c.n), nfin = size_t(c.b * c.h * c.p * c.n);
    // P (x's dtype) and the final states (fp32) of one run, as values.
    auto run = [&](ssd_runtime* rt, std::vector<double>& P, std::vector<double>& fin) {
      prob.run(rt);
      const std::vector<uint8_t> ws = download_bytes(prob.d_ws);
      const uint8_t* Pb = ws.data() + prob.layout.states_offset;
      P.resize(nst);
      for (size_t i = 0; i < nst; ++i) {
        uint16_t u;
        std::memcpy(&u, Pb + 2 * i, 2);
        P[i] = c.dtype == SSD_DTYPE_BF16 ? bf16_to_float(u) : fp16_to_float(u);
      }
      fin = download_values(prob.d_final, SSD_DTYPE_FP32, nfin);
    };
    std::vector<double> P90a, fin90a, P90, fin90;
    run(rt90a.rt, P90a, fin90a);
    run(rt90.rt, P90, fin90);
    REQUIRE(all_finite(P90a));
    REQUIRE(all_finite(fin90a));
    auto compare = [&](const char* what, const std::vector<double>& a, const std::vector<double>& b) {
      size_t equal = 0;
      double max_abs = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        // Bitwise for these values: both sides are exact conversions of the stored bits (and -0 != +0
        // is caught by the sign test).
        if (a[i] == b[i] && std::signbit(a[i]) == std::signbit(b[i])) ++equal;
        max_abs = std::max(max_abs, std::fabs(a[i] - b[i]));
      }
      const double rel = ssd::ref::rel_l2(a.data(), b.data(), a.size());
      MESSAGE(describe(c) << " " << std::string(what) << ": " << equal << " of " << a.size() << " bitwise equal"
                          << (equal == a.size() ? "" : ", max abs diff " + std::to_string(max_abs) +
                                                           ", rel L2 " + std::to_string(rel)));
      all_equal += equal;
      all_total += a.size();
      CHECK(equal == a.size());
    };
    compare("P", P90a, P90);
    compare("final states", fin90a, fin90);
  }
  MESSAGE("sm_90a (wgmma) vs sm_90 (mma.sync) state pass: " << all_equal << " of " << all_total
                                                            << " elements bitwise equal");
}

TEST_CASE("ssd_forward on sm_90a: the wgmma bmm_chunk_fwd gives the mma.sync kernel's CB" *
          doctest::skip(!gpu_available())) {
  // bmm_chunk_fwd on sm_90a (bmm_chunk_sm90a.cuh, chunk 128 or 256, dstate a multiple of 64, tile 64 x
  // 64 x 64) keeps the mma.sync kernel's chain: from +0 in 16-wide n steps, increasing n, and writes
  // the same 64 x 64 tiles. This compares the workspace's CB section (fp32, the whole section: both
  // runs poison the workspace first, so entries neither kernel writes match too) of the device's
  // runtime at the wgmma tile (set by the tuning: the call takes it only for grids of a full wave,
  // bmm_config) with a runtime built for sm_90 (mma.sync at its default 64 x 64 tile), on the full
  // grid, on grids of 1 and 7 blocks, and with B and C off 16-byte alignment. Shapes without the
  // wgmma kernel run the default on both.
  if (!device_is_sm90a()) {
    MESSAGE("not an sm_90a device: the wgmma bmm does not run here");
    return;
  }
  RuntimeHolder rt90a(SSD_ARCH_SM90A), rt90(SSD_ARCH_SM90);
  std::vector<FwdCase> cases(std::begin(kFwdCases), std::end(kFwdCases));
  // fp16, seq_idx, a partial last chunk (1000 = 3 * 256 + 232), 2 groups.
  cases.push_back({1, 1000, 4, 64, 2, 256, 256, SSD_DTYPE_FP16, true, false, false, true, true, false, true});
  // dstate 128 (two n steps), one group, seq_idx.
  cases.push_back({3, 700, 8, 64, 1, 128, 256, SSD_DTYPE_BF16, true, false, false, true, true, true, true});
  // chunk 128 with dstate 64 (one n step), 4 groups, a short last chunk.
  cases.push_back({2, 300, 8, 32, 4, 64, 128, SSD_DTYPE_BF16, false, false, false, true, true, false, true});
  int wgmma_cases = 0;
  size_t all_equal = 0, all_total = 0;
  for (const FwdCase& c : cases) {
    CAPTURE(describe(c));
    FwdProblem prob(c);
    ssd_forward_args a = prob.args();
    const bool wgmma = (c.Q == 128 || c.Q == 256) && c.n % 64 == 0;
    ssd::ForwardTuning t;
    if (wgmma) t.bmm = ssd_tile{64, 64, 64, 0, 0};
    auto configs = ssd::forward_kernel_configs(&a, SSD_ARCH_SM90A, SSD_MODE_DETERMINISTIC, &t);
    REQUIRE(configs.ok());
    for (const ssd_kernel_config& k : configs.value()) {
      if (k.kernel != SSD_KERNEL_BMM_CHUNK_FWD) continue;
      auto n = ssd::normalize_config(k);
      REQUIRE(n.ok());
      auto u = ssd::generate_unit(n.value());
      REQUIRE(u.ok());
      CHECK(wgmma == (u->source.find("kWgmma = true") != std::string::npos));
    }
    wgmma_cases += wgmma;
    poison_all({&prob.d_out, &prob.d_out_x, &prob.d_final, &prob.d_ws});
    REQUIRE(ssd::ssd_forward(*rt90a.rt, &a, nullptr, nullptr, {}, &t).ok());
    const std::vector<uint8_t> ws90a = download_bytes(prob.d_ws);
    prob.run(rt90.rt);
    const std::vector<uint8_t> ws90 = download_bytes(prob.d_ws);
    const size_t ncb = size_t(c.b * prob.nc * c.g * c.Q * c.Q);
    const float* cb90a = reinterpret_cast<const float*>(ws90a.data() + prob.layout.CB_offset);
    const float* cb90 = reinterpret_cast<const float*>(ws90.data() + prob.layout.CB_offset);
    size_t equal = 0, finite = 0;
    for (size_t i = 0; i < ncb; ++i) {
      equal += std::memcmp(cb90a + i, cb90 + i, 4) == 0;
      finite += std::isfinite(cb90a[i]);
    }
    MESSAGE("bmm_chunk_fwd " << std::string(wgmma ? "wgmma" : "mma.sync (not a wgmma shape)") << " vs sm_90 mma.sync "
                             << describe(c) << ": CB " << equal << " of " << ncb << " elements bitwise equal ("
                             << finite << " written, finite)");
    CHECK(finite > 0);
    CHECK(equal == ncb);
    // B and C one element past a 16-byte boundary: the kernels' element-wise tile copies (the vector
    // test fails on the base), the same values, so the same CB bytes.
    if (wgmma) {
      auto shifted = [&](const HostArray& h, DeviceBuffer& buf, const ssd_tensor& like) {
        std::vector<uint8_t> bytes(h.bytes.size() + 16, 0xff);
        std::memcpy(bytes.data() + 2, h.bytes.data(), h.bytes.size());
        buf = DeviceBuffer(bytes.size());
        buf.upload(bytes.data(), bytes.size());
        ssd_tensor t = like;
        t.data = static_cast<uint8_t*>(buf.get()) + 2;
        return t;
      };
      DeviceBuffer d_b2, d_c2;
      ssd_forward_args off = a;
      off.B = shifted(prob.B, d_b2, a.B);
      off.C = shifted(prob.C, d_c2, a.C);
      poison_all({&prob.d_out, &prob.d_out_x, &prob.d_final, &prob.d_ws});
      REQUIRE(ssd::ssd_forward(*rt90a.rt, &off, nullptr, nullptr, {}, &t).ok());
      const std::vector<uint8_t> wso = download_bytes(prob.d_ws);
      CHECK(std::memcmp(wso.data() + prob.layout.CB_offset, ws90.data() + prob.layout.CB_offset, 4 * ncb) == 0);
    }
    // Persistent grids (D4): with 1 or 7 blocks a block walks both band pairs, several (b, c) items
    // and groups, reusing its stages and s_seq; the same CB bytes.
    for (int32_t cap : {1, 7}) {
      CAPTURE(cap);
      ssd::ForwardTuning capped = t;
      capped.max_blocks = cap;
      poison_all({&prob.d_out, &prob.d_out_x, &prob.d_final, &prob.d_ws});
      REQUIRE(ssd::ssd_forward(*rt90a.rt, &a, nullptr, nullptr, {}, &capped).ok());
      const std::vector<uint8_t> wsc = download_bytes(prob.d_ws);
      CHECK(std::memcmp(wsc.data() + prob.layout.CB_offset, ws90.data() + prob.layout.CB_offset, 4 * ncb) == 0);
    }
    all_equal += equal;
    all_total += ncb;
  }
  CHECK(wgmma_cases >= 6);
  MESSAGE("sm_90a (wgmma) vs sm_90 (mma.sync) bmm: " << all_equal << " of " << all_total
                                                     << " CB elements bitwise equal, " << wgmma_cases << " wgmma cases");
}

TEST_CASE("chunk_scan_fwd sm_90a: the TMA operand tiles give the cp.async loaders' bits, every tile" *
          doctest::skip(!gpu_available())) {
  // SSD_FLAG_TMA only changes how the operand tiles reach shared memory (chunk_scan_fwd's C, P, x
  // and CB, the state pass's x and B: the copy engine writes the layout the cp.async loaders write;
  // positions past seqlen are zero-filled by both), so out, out_x, the final states and P must be
  // the same bytes. Every legal tile of both kernels, on the shapes that take the wgmma kernels
  // (partial last chunks, seq_idx, z, D per headdim, fp16, chunk 64 and 128), and on x viewed inside
  // a wider tensor (strides that are not the contiguous ones: TMA still fits) against the same x
  // contiguous.
  if (!device_is_sm90a()) {
    MESSAGE("the device is not sm_90a: no TMA path to compare");
    return;
  }
  RuntimeHolder rt;
  const FwdCase cases[] = {
      kFwdCases[0], kFwdCases[2], kFwdCases[3], kFwdCases[5],
      {1, 1024, 64, 64, 2, 256, 256, SSD_DTYPE_BF16, true, false, false, true, true, false, false},
      {1, 40, 4, 64, 1, 64, 64, SSD_DTYPE_BF16, true, false, true, true, true, true, false},  // one short chunk
      // headdim 128, dstate 64: at 64 x 128 one phase-A step, phase B's first stage the second (kEarlyB).
      {2, 300, 4, 128, 2, 64, 256, SSD_DTYPE_BF16, true, true, true, true, true, false, true},
  };
  ssd::ForwardTuning cp_async;
  cp_async.cp_async = true;
  auto stage_config = [](const ssd_forward_args& args, const ssd::ForwardTuning& t, ssd_kernel_id kernel) {
    auto configs = ssd::forward_kernel_configs(&args, SSD_ARCH_SM90A, SSD_MODE_DETERMINISTIC, &t);
    REQUIRE(configs.ok());
    for (const ssd_kernel_config& k : configs.value())
      if (k.kernel == kernel) return k;
    FAIL("no such stage");
    return ssd_kernel_config{};
  };
  int tma_cases = 0;
  for (const FwdCase& c : cases) {
    CAPTURE(describe(c));
    FwdProblem prob(c);
    ssd_forward_args a = prob.args();
    const ssd_kernel_config k = stage_config(a, ssd::ForwardTuning{}, SSD_KERNEL_CHUNK_SCAN_FWD);
    const ssd_kernel_config ks = stage_config(a, ssd::ForwardTuning{}, SSD_KERNEL_CHUNK_STATE_PASSING_FWD);
    REQUIRE((k.flags & SSD_FLAG_TMA) != 0);
    REQUIRE((ks.flags & SSD_FLAG_TMA) != 0);
    REQUIRE((stage_config(a, cp_async, SSD_KERNEL_CHUNK_SCAN_FWD).flags & SSD_FLAG_TMA) == 0);
    REQUIRE((stage_config(a, cp_async, SSD_KERNEL_CHUNK_STATE_PASSING_FWD).flags & SSD_FLAG_TMA) == 0);
    ++tma_cases;
    // x inside a (b, L, h, p + 8) tensor of NaNs: the padding columns must never be read.
    const int64_t pw = c.p + 8;
    std::vector<uint8_t> wide(size_t(c.b * c.L * c.h * pw) * 2, 0xff);
    for (size_t row = 0; row < size_t(c.b * c.L * c.h); ++row)
      std::memcpy(wide.data() + row * size_t(pw) * 2, prob.x.bytes.data() + row * size_t(c.p) * 2, size_t(c.p) * 2);
    DeviceBuffer d_wide(wide.size());
    d_wide.upload(wide.data(), wide.size());
    ssd_forward_args wide_args = a;
    wide_args.x = tensor(d_wide, c.dtype, {c.b, c.L, c.h, c.p}, {c.L * c.h * pw, c.h * pw, pw, 1});
    REQUIRE((stage_config(wide_args, ssd::ForwardTuning{}, SSD_KERNEL_CHUNK_SCAN_FWD).flags & SSD_FLAG_TMA) != 0);
    const size_t nst = size_t(c.b * prob.nc * c.h * c.p * c.n);
    auto run = [&](const ssd_forward_args& args, const ssd::ForwardTuning& t) {
      poison_all({&prob.d_out, &prob.d_out_x, &prob.d_final, &prob.d_ws});
      REQUIRE(ssd::ssd_forward(*rt.rt, &args, nullptr, nullptr, {}, &t).ok());
      std::vector<uint8_t> r =
          c.z ? download_all({&prob.d_out, &prob.d_out_x, &prob.d_final}) : download_all({&prob.d_out, &prob.d_final});
      const std::vector<uint8_t> ws = download_bytes(prob.d_ws);  // P in x's dtype
      r.insert(r.end(), ws.begin() + long(prob.layout.states_offset), ws.begin() + long(prob.layout.states_offset + 2 * nst));
      return r;
    };
    // Every tile of both kernels, each in its own ForwardTuning slot.
    int variants = 0;
    const std::pair<const ssd_kernel_config*, ssd_tile ssd::ForwardTuning::*> kernels[] = {
        {&k, &ssd::ForwardTuning::scan}, {&ks, &ssd::ForwardTuning::state_pass}};
    for (const auto& [kernel, slot] : kernels) {
      CAPTURE(ssd::kernel_name(kernel->kernel));
      for (const ssd_tile& tile : ssd::legal_tiles(*kernel)) {
        CAPTURE(tile.m);
        CAPTURE(tile.n);
        CAPTURE(tile.k);
        ssd::ForwardTuning tma_t, cp_t = cp_async;
        tma_t.*slot = cp_t.*slot = tile;
        const std::vector<uint8_t> base = run(a, cp_t);
        CHECK(same_bytes(run(a, tma_t), base));
        CHECK(same_bytes(run(wide_args, tma_t), base));
        ++variants;
      }
    }
    // Persistent grids (D4): a block walks several tiles, (b, c) items and heads, so the rings'
    // mbarrier parities carry across work items; the default tiles against the full grid's bits.
    {
      const std::vector<uint8_t> full = run(a, ssd::ForwardTuning{});
      for (int32_t cap : {1, 7, 64}) {
        CAPTURE(cap);
        ssd::ForwardTuning capped, capped_cp = cp_async;
        capped.max_blocks = capped_cp.max_blocks = cap;
        CHECK(same_bytes(run(a, capped), full));
        CHECK(same_bytes(run(a, capped_cp), full));
      }
    }
    MESSAGE("TMA vs cp.async (chunk_scan_fwd and state pass tiles) " << describe(c) << ": " << variants
                                              << " tiles, contiguous and strided x, and grids of 1, 7, 64 blocks, bitwise equal");
  }
  CHECK(tma_cases == int(std::size(cases)));
}
