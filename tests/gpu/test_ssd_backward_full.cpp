// ssd_backward on the GPU: every gradient against the float64 oracle (ssd::ref::backward), the
// determinism contract D1-D4 (docs/determinism.md), the upstream ddA bug class (poisoned
// workspace, guard bytes around every output, every legal tile), validation and fast mode.
#include <doctest/doctest.h>

#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>

#include "config/config.h"
#include "gpu_support.h"
#include "ops/ssd_backward.h"
#include "reference/metrics.h"
#include "reference/ssd_reference.h"
#include "runtime/runtime.h"

using namespace gputest;

namespace {

struct BwdCase {
  int64_t b, L, h, p, g, n;
  int32_t Q;
  ssd_dtype dtype;
  bool D, D_per_headdim, z, bias, softplus, init, seq_idx, dfinal;
};

std::string describe(const BwdCase& c) { return describe_ssd_case(c) + (c.dfinal ? " dfinal" : ""); }

// An output buffer with kGuard poisoned bytes on both sides: a kernel writing outside its tensor
// changes them.
constexpr size_t kGuard = 256;
struct Guarded {
  DeviceBuffer buf;
  size_t bytes = 0;
  Guarded() = default;
  explicit Guarded(size_t n) : buf(n + 2 * kGuard), bytes(n) {}
  void* data() const { return static_cast<char*>(buf.get()) + kGuard; }
  ssd_tensor tensor(ssd_dtype dt, std::vector<int64_t> shape) const {
    ssd_tensor t = gputest::tensor(buf, dt, shape);
    t.data = data();
    return t;
  }
  std::vector<uint8_t> body() const {
    std::vector<uint8_t> all = download_bytes(buf);
    return std::vector<uint8_t>(all.begin() + kGuard, all.begin() + kGuard + bytes);
  }
  bool guards_intact() const {
    std::vector<uint8_t> all = download_bytes(buf);
    for (size_t i = 0; i < kGuard; ++i)
      if (all[i] != 0xFF || all[all.size() - 1 - i] != 0xFF) return false;
    return true;
  }
  std::vector<double> values(ssd_dtype dt) const {
    std::vector<uint8_t> b = body();
    std::vector<double> v(bytes / dtype_bytes(dt));
    for (size_t i = 0; i < v.size(); ++i) {
      if (dt == SSD_DTYPE_FP32) {
        float f;
        std::memcpy(&f, b.data() + 4 * i, 4);
        v[i] = f;
      } else {
        uint16_t u;
        std::memcpy(&u, b.data() + 2 * i, 2);
        v[i] = dt == SSD_DTYPE_BF16 ? bf16_to_float(u) : fp16_to_float(u);
      }
    }
    return v;
  }
};

struct BwdProblem {
  BwdCase c;
  int64_t nc;
  HostArray x, dt, A, B, C, D, z, bias, init, dout, dfinal, out_x;
  std::vector<int32_t> seq;
  DeviceBuffer d_x, d_dt, d_A, d_B, d_C, d_D, d_z, d_bias, d_init, d_seq, d_dout, d_dfinal, d_out_x, d_ws;
  Guarded g_dx, g_ddt, g_dA, g_dB, g_dC, g_dD, g_dz, g_dbias, g_dinit;
  size_t ws_bytes = 0;

  // Fresh random inputs; `from` (optional) gives sample `sample` of a larger problem instead.
  explicit BwdProblem(const BwdCase& cc, const BwdProblem* from = nullptr, int64_t sample = 0)
      : c(cc), nc((cc.L + cc.Q - 1) / cc.Q) {
    const size_t nx = size_t(c.b * c.L * c.h * c.p), nbc = size_t(c.b * c.L * c.g * c.n);
    const size_t nst = size_t(c.b * c.h * c.p * c.n);
    if (from) {
      auto slice = [&](const HostArray& big, size_t per) {
        std::vector<double> v(big.values.begin() + sample * per, big.values.begin() + (sample + 1) * per);
        return make_array(big.dtype, v);
      };
      x = slice(from->x, nx); z = slice(from->z, nx); dout = slice(from->dout, nx); out_x = slice(from->out_x, nx);
      B = slice(from->B, nbc); C = slice(from->C, nbc); dt = slice(from->dt, size_t(c.L * c.h));
      init = slice(from->init, nst); dfinal = slice(from->dfinal, nst);
      A = from->A; D = from->D; bias = from->bias;
      seq.assign(from->seq.begin() + sample * c.L, from->seq.begin() + (sample + 1) * c.L);
    } else {
      x = make_array(c.dtype, normal(nx));
      z = make_array(c.dtype, normal(nx));
      dout = make_array(c.dtype, normal(nx));
      draw_ssd_inputs(*this);
      dfinal = make_array(SSD_DTYPE_FP32, normal(nst));
      // out_x: the forward's y (float64 oracle, rounded like the forward would store it).
      out_x = make_array(c.dtype, c.z ? ssd::ref::forward_chunked(oracle_problem()).out_x : std::vector<double>(nx, 0.0));
    }
    d_x = upload_array(x); d_dt = upload_array(dt); d_A = upload_array(A); d_B = upload_array(B); d_C = upload_array(C);
    d_D = upload_array(D); d_z = upload_array(z); d_bias = upload_array(bias); d_init = upload_array(init);
    d_dout = upload_array(dout); d_dfinal = upload_array(dfinal); d_out_x = upload_array(out_x);
    d_seq = DeviceBuffer(seq.size() * 4);
    d_seq.upload(seq.data(), seq.size() * 4);
    const size_t T = dtype_bytes(c.dtype);
    g_dx = Guarded(nx * T); g_dz = Guarded(nx * T);
    g_ddt = Guarded(size_t(c.b * c.L * c.h) * T);
    g_dA = Guarded(size_t(c.h) * 4); g_dbias = Guarded(size_t(c.h) * 4);
    g_dB = Guarded(nbc * T); g_dC = Guarded(nbc * T);
    g_dD = Guarded(D.values.size() * 4);
    g_dinit = Guarded(nst * 4);
    ssd_backward_args a = args(-1);
    GPU_CHECK_SSD(ssd_backward_workspace_size(&a, &ws_bytes));
    // The staged state pass and the fast kernels need a dP section the default (fused) layout lacks.
    ssd::BackwardTuning staged, fast_kernels;
    staged.staged_state_pass = true;
    fast_kernels.fast_kernels = true;
    for (auto [mode, tn] : {std::pair{SSD_MODE_DETERMINISTIC, &staged}, std::pair{SSD_MODE_FAST, &fast_kernels}}) {
      auto l = ssd::backward_layout(&a, mode, tn);
      REQUIRE_MESSAGE(l.ok(), l.status().detail);
      ws_bytes = std::max(ws_bytes, l->total);
    }
    d_ws = DeviceBuffer(ws_bytes);
  }

  ssd::ref::SsdProblem oracle_problem() const { return oracle_problem_of(*this); }

  ssd_backward_args args(int32_t mode) const {
    ssd_backward_args a;
    ssd_backward_args_init(&a);
    a.chunk_size = c.Q;
    a.dt_softplus = c.softplus;
    a.mode = mode;
    const std::vector<int64_t> bthp = {c.b, c.L, c.h, c.p}, btgn = {c.b, c.L, c.g, c.n}, bhpn = {c.b, c.h, c.p, c.n};
    a.x = tensor(d_x, c.dtype, bthp);
    a.dt = tensor(d_dt, c.dtype, {c.b, c.L, c.h});
    a.A = tensor(d_A, SSD_DTYPE_FP32, {c.h});
    a.B = tensor(d_B, c.dtype, btgn);
    a.C = tensor(d_C, c.dtype, btgn);
    a.dout = tensor(d_dout, c.dtype, bthp);
    a.dx = g_dx.tensor(c.dtype, bthp);
    a.ddt = g_ddt.tensor(c.dtype, {c.b, c.L, c.h});
    a.dA = g_dA.tensor(SSD_DTYPE_FP32, {c.h});
    a.dB = g_dB.tensor(c.dtype, btgn);
    a.dC = g_dC.tensor(c.dtype, btgn);
    if (c.D) {
      const std::vector<int64_t> shape = c.D_per_headdim ? std::vector<int64_t>{c.h, c.p} : std::vector<int64_t>{c.h};
      a.D = tensor(d_D, SSD_DTYPE_FP32, shape);
      a.dD = g_dD.tensor(SSD_DTYPE_FP32, shape);
    }
    if (c.z) {
      a.z = tensor(d_z, c.dtype, bthp);
      a.out_x = tensor(d_out_x, c.dtype, bthp);
      a.dz = g_dz.tensor(c.dtype, bthp);
    }
    if (c.bias) {
      a.dt_bias = tensor(d_bias, SSD_DTYPE_FP32, {c.h});
      a.ddt_bias = g_dbias.tensor(SSD_DTYPE_FP32, {c.h});
    }
    if (c.init) {
      a.initial_states = tensor(d_init, SSD_DTYPE_FP32, bhpn);
      a.dinitial_states = g_dinit.tensor(SSD_DTYPE_FP32, bhpn);
    }
    if (c.seq_idx) a.seq_idx = tensor(d_seq, SSD_DTYPE_INT32, {c.b, c.L});
    if (c.dfinal) a.dfinal_states = tensor(d_dfinal, SSD_DTYPE_FP32, bhpn);
    return a;
  }

  std::vector<const Guarded*> outputs() const {
    std::vector<const Guarded*> o = {&g_dx, &g_ddt, &g_dA, &g_dB, &g_dC};
    if (c.D) o.push_back(&g_dD);
    if (c.z) o.push_back(&g_dz);
    if (c.bias) o.push_back(&g_dbias);
    if (c.init) o.push_back(&g_dinit);
    return o;
  }

  // Poisons every output (with its guards) and the workspace, runs, checks the guards, returns
  // the concatenated output bytes.
  std::vector<uint8_t> run(ssd_runtime* rt, ssd_mode mode = SSD_MODE_DETERMINISTIC,
                           const ssd::BackwardTuning* tuning = nullptr, bool caller_workspace = true) {
    for (const Guarded* g : outputs()) const_cast<Guarded*>(g)->buf.poison();
    d_ws.poison();
    ssd_backward_args a = args(mode);
    ssd::Status s = ssd::ssd_backward(*rt, &a, caller_workspace ? d_ws.get() : nullptr,
                                      caller_workspace ? ws_bytes : 0, nullptr, tuning);
    REQUIRE_MESSAGE(s.ok(), s.detail);
    std::vector<uint8_t> r;
    for (const Guarded* g : outputs()) {
      REQUIRE(g->guards_intact());
      std::vector<uint8_t> b = g->body();
      r.insert(r.end(), b.begin(), b.end());
    }
    return r;
  }
};

// Errors of every gradient against the oracle. Per-element gradients: relative L2. The
// whole-sequence sums dA, dD and ddt_bias: ‖v − ref‖ / ‖Σ|terms|‖ (the oracle's *_abs), the error
// measure that does not blow up when the terms cancel (a short, cancelling sum can have a plain
// relative error above any fixed bound with every term accurate: issue 11); their plain relative
// L2 is reported beside it ("plain").
struct GradErrors {
  struct Entry {
    std::string name;
    double value;  // what the tolerance applies to
    double plain;  // relative L2 (equal to value for per-element gradients)
  };
  std::vector<Entry> e;
  std::string text() const {
    std::string t;
    for (auto& x : e) {
      t += " " + x.name + " " + std::to_string(x.value).substr(0, 9);
      if (x.plain != x.value) t += " (plain " + std::to_string(x.plain).substr(0, 9) + ")";
    }
    return t;
  }
};

double scaled_l2(const std::vector<double>& v, const std::vector<double>& ref, const std::vector<double>& scale) {
  double num = 0, den = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    num += (v[i] - ref[i]) * (v[i] - ref[i]);
    den += scale[i] * scale[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

GradErrors compare_with_oracle(const BwdProblem& prob) {
  const BwdCase& c = prob.c;
  const ssd::ref::SsdGradients ref = ssd::ref::backward(prob.oracle_problem(), prob.dout.values.data(),
                                                        c.dfinal ? prob.dfinal.values.data() : nullptr);
  GradErrors out;
  auto cmp = [&](const char* name, const Guarded& g, ssd_dtype dt, const std::vector<double>& r,
                 const std::vector<double>* scale = nullptr) {
    std::vector<double> v = g.values(dt);
    REQUIRE_MESSAGE(all_finite(v), name);
    REQUIRE(v.size() == r.size());
    const double plain = ssd::ref::rel_l2(v.data(), r.data(), v.size());
    out.e.push_back({name, scale ? scaled_l2(v, r, *scale) : plain, plain});
  };
  cmp("dx", prob.g_dx, c.dtype, ref.dx);
  cmp("ddt", prob.g_ddt, c.dtype, ref.ddt);
  cmp("dA", prob.g_dA, SSD_DTYPE_FP32, ref.dA, &ref.dA_abs);
  cmp("dB", prob.g_dB, c.dtype, ref.dB);
  cmp("dC", prob.g_dC, c.dtype, ref.dC);
  if (c.D) cmp("dD", prob.g_dD, SSD_DTYPE_FP32, ref.dD, &ref.dD_abs);
  if (c.z) cmp("dz", prob.g_dz, c.dtype, ref.dz);
  if (c.bias) cmp("ddt_bias", prob.g_dbias, SSD_DTYPE_FP32, ref.ddt_bias, &ref.ddt_bias_abs);
  if (c.init) cmp("dinit", prob.g_dinit, SSD_DTYPE_FP32, ref.dinitial_states);
  return out;
}

// Tolerances: a few times mamba_ssm's own errors on the same kind of inputs (issue 4 lists them);
// the measured values are printed and recorded in docs/perf.md.
double tolerance(ssd_dtype dt) { return dt == SSD_DTYPE_BF16 ? 1e-2 : 2e-3; }

// Runs prob (deterministic) and checks every gradient's error against the oracle within the tolerance.
GradErrors run_within_tolerance(ssd_runtime* rt, BwdProblem& prob) {
  prob.run(rt);
  const GradErrors e = compare_with_oracle(prob);
  for (auto& [name, v, plain] : e.e) {
    CAPTURE(name);
    CHECK(v < tolerance(prob.c.dtype));
  }
  return e;
}

const BwdCase kBwdCases[] = {
    // b, L, h, p, g, n, Q, dtype, D, D(h,p), z, bias, softplus, init, seq, dfinal
    {2, 600, 8, 64, 2, 64, 256, SSD_DTYPE_BF16, true, false, true, true, true, true, false, true},
    {2, 300, 4, 32, 1, 16, 64, SSD_DTYPE_FP16, false, false, false, false, false, false, false, false},
    {2, 513, 16, 128, 8, 128, 128, SSD_DTYPE_BF16, true, true, false, false, false, true, true, true},
    {2, 512, 8, 64, 2, 256, 256, SSD_DTYPE_BF16, true, false, false, true, true, false, false, false},
    {2, 400, 6, 64, 3, 32, 128, SSD_DTYPE_FP16, true, false, true, true, true, true, true, true},
    {3, 200, 4, 64, 4, 64, 64, SSD_DTYPE_BF16, true, true, true, false, false, true, true, false},
    // dstate 256: the fused state pass's shared-A tile (64 x 256 x 32) with every option, a partial last
    // chunk and dy_lo's pass (z); then chunks of 128 without z, whose every chunk reads P_c after the
    // epilogue's wait (4 K steps a chunk) and a last chunk of 2.
    {1, 700, 4, 64, 1, 256, 256, SSD_DTYPE_FP16, true, true, true, true, false, true, true, true},
    {1, 300, 2, 64, 1, 256, 128, SSD_DTYPE_BF16, true, false, false, true, true, false, true, true},
};

void precompile(ssd_runtime* rt, const std::vector<ssd_kernel_config>& configs) {
  for (auto& r : rt->builder->build_many(configs, 16)) REQUIRE_MESSAGE(r.ok(), r.status().detail);
}

std::vector<ssd_kernel_config> configs_of(ssd_runtime* rt, const BwdProblem& prob, ssd_mode mode,
                                          const ssd::BackwardTuning* tuning = nullptr) {
  auto arch = ssd::runtime_arch(*rt);
  REQUIRE(arch.ok());
  ssd_backward_args a = prob.args(mode);
  auto k = ssd::backward_kernel_configs(&a, arch.value(), mode, tuning);
  REQUIRE_MESSAGE(k.ok(), k.status().detail);
  return k.value();
}

}  // namespace

TEST_CASE("ssd_backward: every gradient against the float64 oracle; fast mode close; guards intact" *
          doctest::skip(!gpu_available())) {
  for_each_case(kBwdCases, [&](ssd_runtime* rt, const BwdCase& c) {
    BwdProblem prob(c);
    precompile(rt, configs_of(rt, prob, SSD_MODE_DETERMINISTIC));
    const std::vector<uint8_t> det = prob.run(rt);
    const GradErrors e = compare_with_oracle(prob);
    MESSAGE("bwd " << describe(c) << ": rel_l2" << e.text());
    for (auto& x : e.e) {
      CAPTURE(x.name);
      CHECK(x.value < tolerance(c.dtype));
    }
    // Fast mode runs the deterministic kernels (issue 10; backward_kernel_mode): the same bits.
    CHECK(same_bytes(prob.run(rt, SSD_MODE_FAST), det));
    // The fast kernels themselves (atomics in dD, dA, ddt_bias, rho, ddA intra; still compiled and
    // benchmarked): the same values to rounding.
    ssd::BackwardTuning fast_kernels;
    fast_kernels.fast_kernels = true;
    prob.run(rt, SSD_MODE_FAST, &fast_kernels);
    const GradErrors ef = compare_with_oracle(prob);
    for (size_t i = 0; i < e.e.size(); ++i) CHECK(std::fabs(ef.e[i].value - e.e[i].value) < 1e-3 * tolerance(c.dtype) + 1e-6);
  });
}

TEST_CASE("ssd_backward at the issue's reference shape (b=2 L=1024 h=32 p=64 n=64 g=4, chunk 256, bf16)" *
          doctest::skip(!gpu_available())) {
  // mamba_ssm on the same kind of inputs: dx 2.3e-3, ddt 1.6e-3, dA 3.1e-4, dB 2.4e-3, dC 2.4e-3,
  // dD 1e-7, ddt_bias 1.9e-3 (issue 4); scripts/peer_bench.py measures both on identical inputs.
  RuntimeHolder rt;
  BwdProblem prob(
      BwdCase{2, 1024, 32, 64, 4, 64, 256, SSD_DTYPE_BF16, true, false, false, true, true, false, false, false});
  const GradErrors e = run_within_tolerance(rt.rt, prob);
  MESSAGE("bwd reference shape " << describe(prob.c) << ": rel_l2" << e.text());
}

TEST_CASE("ssd_backward D1: twenty repeats give identical bits, caller or library workspace" *
          doctest::skip(!gpu_available())) {
  RuntimeHolder rt;
  BwdProblem prob(kBwdCases[4]);
  const std::vector<uint8_t> first = prob.run(rt.rt);
  int same = 0;
  for (int i = 0; i < 20; ++i) same += same_bytes(prob.run(rt.rt), first);
  CHECK(same == 20);
  CHECK(same_bytes(prob.run(rt.rt, SSD_MODE_DETERMINISTIC, nullptr, /*caller_workspace=*/false), first));
  MESSAGE("bwd D1: " << same << "/20 repeats bitwise identical (" << describe(prob.c) << ")");
}

TEST_CASE("ssd_backward on sm_90a: the recompute's wgmma state pass (two-term, fp32 P) keeps the mma.sync bits" *
          doctest::skip(!gpu_available())) {
  // The backward recomputes P with chunk_state_passing_fwd (SSD_FLAG_TWO_TERM_STATES, fp32 P), on
  // sm_90a the wgmma kernel for headdim and dstate multiples of 64, and chunk_scan_bwd_dx runs its n
  // loops (C·Pᵀ, B·dsᵀ) as wgmma at its default 128 x . x 64 tile where dstate is a multiple of 64
  // and headdim 32 or 64 (cases 0, 3 and p32 below; sm_90 runs the same tile's mma.sync loops), and the fused
  // state pass chunk_state_passing_bwd runs its wgmma kernel (chunk_state_passing_bwd_sm90a.cuh) where headdim
  // and dstate are multiples of 64 (cases 0, 2, 3, 5: z, seq_idx, dfinal and dinit, one and two heads per
  // block, headdim 128); every other backward kernel is the same code on both archs. Equal gradients on sm_90a
  // and sm_90 (whose units keep mma.sync; both run on the H200, sm_80 cubins would not load on a 9.x device)
  // mean the recomputed P, and every output of the state pass the gradients depend on, kept their bits.
  if (!device_is_sm90a()) {
    MESSAGE("not an sm_90a device: the wgmma state pass does not run here");
    return;
  }
  RuntimeHolder rt90a(SSD_ARCH_SM90A), rt90(SSD_ARCH_SM90);
  // Headdim 32 with dstate 128 and chunk 128: dx's wgmma n loops at N = 32 (m64n32k16), with z
  // (dy's two terms), seq_idx and a partial last chunk.
  const BwdCase p32 = {2, 300, 4, 32, 2, 128, 128, SSD_DTYPE_BF16, true, false, true, true, true, true, true, true};
  // Chunk 64 without z: shorter than the wgmma state pass's walk rule (bwd_geom::
  // chunk_state_passing_bwd_wgmma_walk), so both archs run the mma.sync kernel there (in session 15's
  // first wgmma version these two shapes raced: 565753 of 603776 and 93508 of 99080 bytes equal,
  // varying run to run).
  const BwdCase q64a = {2, 229, 4, 64, 2, 64, 64, SSD_DTYPE_BF16, true, false, false, true, true, true, false, true};
  const BwdCase q64b = {1, 192, 2, 64, 1, 64, 64, SSD_DTYPE_BF16, true, false, false, true, true, false, false, false};
  for (const BwdCase& c : {kBwdCases[0], kBwdCases[2], kBwdCases[3], kBwdCases[5], p32, q64a, q64b}) {
    CAPTURE(describe(c));
    BwdProblem prob(c);
    const std::vector<uint8_t> on90a = prob.run(rt90a.rt), on90 = prob.run(rt90.rt);
    size_t equal = 0;
    for (size_t i = 0; i < on90a.size() && i < on90.size(); ++i) equal += on90a[i] == on90[i];
    MESSAGE(describe(c) << ": " << equal << " of " << on90a.size() << " gradient bytes equal (sm_90a wgmma vs sm_90 mma.sync)");
    CHECK(same_bytes(on90a, on90));
  }
}

TEST_CASE("ssd_backward on sm_90a: dB and dC's wgmma kernels keep the mma.sync bits at every wgmma tile" *
          doctest::skip(!gpu_available())) {
  // chunk_state_bwd_db / chunk_scan_bwd_dc run bc_bwd_sm90a.cuh on sm_90a where chunk_size, headdim and
  // dstate are multiples of 64. Here with more than four heads per group (the row scales' four-buffer
  // ring wraps), headdim 64 and 128 (one and two K steps per head), dstate 128 (the 128-column tiles)
  // and chunk 128 (the 128-row tiles, two warpgroups), seq_idx, fp16 and bf16, partial last chunks:
  // every wgmma tile of both kernels on sm_90a against the sm_90 build's default (mma.sync).
  if (!device_is_sm90a()) {
    MESSAGE("not an sm_90a device: the wgmma dB / dC kernels do not run here");
    return;
  }
  RuntimeHolder rt90a(SSD_ARCH_SM90A), rt90(SSD_ARCH_SM90);
  // b, L, h, p, g, n, Q, dtype, D, D(h,p), z, bias, softplus, init, seq, dfinal
  const BwdCase r6 = {2, 333, 12, 64, 2, 128, 128, SSD_DTYPE_BF16, true, false, true, true, true, true, true, true};
  const BwdCase r5 = {1, 300, 5, 128, 1, 128, 128, SSD_DTYPE_FP16, true, true, false, true, true, false, true, false};
  for (const BwdCase& c : {r6, r5}) {
    CAPTURE(describe(c));
    BwdProblem prob(c);
    const std::vector<uint8_t> on90 = prob.run(rt90.rt);
    int tiles = 0;
    for (const ssd_tile& t : {ssd_tile{64, 64, 64, 0, 0}, ssd_tile{64, 128, 64, 0, 0}, ssd_tile{128, 64, 64, 0, 0},
                              ssd_tile{128, 128, 64, 0, 0}}) {
      CAPTURE(t.m);
      CAPTURE(t.n);
      ssd::BackwardTuning tn;
      tn.db = t;
      tn.dc = t;
      const std::vector<uint8_t> on90a = prob.run(rt90a.rt, SSD_MODE_DETERMINISTIC, &tn);
      CHECK(same_bytes(on90a, on90));
      ++tiles;
    }
    MESSAGE(describe(c) << ": " << tiles << " wgmma tiles of db and dc on sm_90a bitwise equal to sm_90's gradients");
  }
}

TEST_CASE("ssd_backward D2 + D4 and the ddA bug class: every legal tile of every backward kernel and grids "
          "of 1, 7, 64 blocks give identical bits; poisoned workspace; no write outside an output" *
          doctest::skip(!gpu_available())) {
  RuntimeHolder rt;
  // Partial last chunks everywhere; Q = 64 admits row tiles equal to the chunk, Q = 128 several.
  const BwdCase cases[] = {kBwdCases[5], kBwdCases[4]};
  for (const BwdCase& c : cases) {
    CAPTURE(describe(c));
    BwdProblem prob(c);
    std::vector<ssd_kernel_config> base_configs = configs_of(rt.rt, prob, SSD_MODE_DETERMINISTIC);
    // The staged state pass's pair too (the default runs chunk_state_passing_bwd: the same bits).
    ssd::BackwardTuning staged;
    staged.staged_state_pass = true;
    for (const ssd_kernel_config& k : configs_of(rt.rt, prob, SSD_MODE_DETERMINISTIC, &staged))
      if (k.kernel == SSD_KERNEL_CHUNK_SCAN_BWD_DSTATES || k.kernel == SSD_KERNEL_STATE_PASSING_BWD)
        base_configs.push_back(k);
    // dx's cp.async twin where the call takes its TMA stages: a TMA config's legal tiles are the
    // wgmma tiles only, the twin's are all of them (the call drops the flag for the others).
    for (const ssd_kernel_config& k : std::vector<ssd_kernel_config>(base_configs))
      if (k.kernel == SSD_KERNEL_CHUNK_SCAN_BWD_DX && (k.flags & SSD_FLAG_TMA)) {
        ssd_kernel_config twin = k;
        twin.flags &= ~uint32_t(SSD_FLAG_TMA);
        base_configs.push_back(twin);
      }
    // And the fused dcb + ddA_intra (opt-in: the same bits).
    ssd::BackwardTuning fused;
    fused.fused_dcb_intra = true;
    for (const ssd_kernel_config& k : configs_of(rt.rt, prob, SSD_MODE_DETERMINISTIC, &fused))
      if (k.kernel == SSD_KERNEL_CHUNK_SCAN_BWD_DCB_DDA_INTRA) base_configs.push_back(k);
    std::vector<ssd_kernel_config> all;
    for (ssd_kernel_config k : base_configs)
      for (const ssd_tile& t : ssd::legal_tiles(k)) {
        k.tile = t;
        all.push_back(k);
      }
    precompile(rt.rt, all);
    const std::vector<uint8_t> base = prob.run(rt.rt);
    int variants = 0;
    for (const ssd_kernel_config& k : base_configs) {
      ssd::BackwardTuning tn;
      tn.staged_state_pass =
          k.kernel == SSD_KERNEL_CHUNK_SCAN_BWD_DSTATES || k.kernel == SSD_KERNEL_STATE_PASSING_BWD;
      tn.fused_dcb_intra = k.kernel == SSD_KERNEL_CHUNK_SCAN_BWD_DCB_DDA_INTRA;
      ssd_tile* slot = nullptr;
      switch (k.kernel) {
        case SSD_KERNEL_CHUNK_SCAN_BWD_DSTATES: slot = &tn.dstates; break;
        case SSD_KERNEL_STATE_PASSING_BWD: slot = &tn.passing; break;
        case SSD_KERNEL_CHUNK_STATE_PASSING_BWD: slot = &tn.state_pass; break;
        case SSD_KERNEL_CHUNK_SCAN_BWD_DX: slot = &tn.dx; break;
        case SSD_KERNEL_CHUNK_SCAN_BWD_DCB: slot = &tn.dcb; break;
        case SSD_KERNEL_CHUNK_SCAN_BWD_DDA_INTRA: slot = &tn.intra; break;
        case SSD_KERNEL_CHUNK_SCAN_BWD_DCB_DDA_INTRA: slot = &tn.dcb_intra; break;
        case SSD_KERNEL_CHUNK_STATE_BWD_DB: slot = &tn.db; break;
        case SSD_KERNEL_CHUNK_SCAN_BWD_DC: slot = &tn.dc; break;
        case SSD_KERNEL_CHUNK_SCAN_BWD_DDA: slot = &tn.dda; break;
        case SSD_KERNEL_CHUNK_CUMSUM_BWD: slot = &tn.cumsum; break;
        case SSD_KERNEL_BMM_CHUNK_FWD: slot = &tn.forward.bmm; break;
        case SSD_KERNEL_CHUNK_STATE_PASSING_FWD: slot = &tn.forward.state_pass; break;
        default: break;
      }
      if (!slot) continue;
      for (const ssd_tile& t : ssd::legal_tiles(k)) {
        *slot = t;
        CAPTURE(ssd::kernel_name(k.kernel));
        CAPTURE(t.m);
        CAPTURE(t.n);
        CAPTURE(t.k);
        CHECK(same_bytes(prob.run(rt.rt, SSD_MODE_DETERMINISTIC, &tn), base));
        ++variants;
      }
    }
    int grids = 0;
    for (int32_t g : {1, 7, 64}) {
      ssd::BackwardTuning tn;
      tn.max_blocks = g;
      CAPTURE(g);
      CHECK(same_bytes(prob.run(rt.rt, SSD_MODE_DETERMINISTIC, &tn), base));
      ++grids;
    }
    MESSAGE("bwd D2/D4 " << describe(c) << ": " << variants << " tile variants and " << grids
                         << " grid caps bitwise identical; guards intact, workspace poisoned");
  }
}

TEST_CASE("ssd_backward: the fused state pass (chunk_state_passing_bwd) gives the staged pair's bits, every "
          "tile and grid cap, TMA and cp.async stages: all gradients and the workspace's ds, states_t, their second "
          "terms, the rho slots" *
          doctest::skip(!gpu_available())) {
  RuntimeHolder rt;
  ssd::BackwardTuning staged;
  staged.staged_state_pass = true;
  int tma_cases = 0;
  for (const BwdCase& c : kBwdCases) {
    CAPTURE(describe(c));
    BwdProblem prob(c);
    const ssd_backward_args a = prob.args(SSD_MODE_DETERMINISTIC);
    auto fused_layout = ssd::backward_layout(&a, SSD_MODE_DETERMINISTIC);
    auto staged_layout = ssd::backward_layout(&a, SSD_MODE_DETERMINISTIC, &staged);
    REQUIRE(fused_layout.ok());
    REQUIRE(staged_layout.ok());
    // [ds, dCB): ds, ds_lo, states_t, states_t_lo, the rho slots (the same sizes in both layouts).
    auto pass_bytes = [&](const ssd::BackwardLayout& L) {
      const std::vector<uint8_t> ws = download_bytes(prob.d_ws);
      return std::vector<uint8_t>(ws.begin() + long(L.ds), ws.begin() + long(L.dCB));
    };
    REQUIRE(fused_layout->dCB - fused_layout->ds == staged_layout->dCB - staged_layout->ds);
    std::vector<ssd_kernel_config> fused_configs;
    for (const ssd_kernel_config& k : configs_of(rt.rt, prob, SSD_MODE_DETERMINISTIC))
      if (k.kernel == SSD_KERNEL_CHUNK_STATE_PASSING_BWD) fused_configs.push_back(k);
    REQUIRE(fused_configs.size() == 1);
    // On sm_90a the wgmma kernel's dy and C stages come by TMA (SSD_FLAG_TMA) where the shape takes the
    // wgmma kernel (dense inputs here, so they fit the maps); its cp.async loaders run too, for every tile.
    const bool tma = (fused_configs[0].flags & SSD_FLAG_TMA) != 0;
    tma_cases += tma;
    if (device_is_sm90a() && c.p % 64 == 0 && c.n % 64 == 0 && c.Q * (c.z ? 2 : 1) >= 128) REQUIRE(tma);
    std::vector<ssd_kernel_config> all = configs_of(rt.rt, prob, SSD_MODE_DETERMINISTIC, &staged);
    for (const ssd_tile& t : ssd::legal_tiles(fused_configs[0]))
      for (uint32_t flags : {fused_configs[0].flags, fused_configs[0].flags & ~uint32_t(SSD_FLAG_TMA)}) {
        ssd_kernel_config k = fused_configs[0];
        k.tile = t;
        k.flags = flags;
        all.push_back(k);
      }
    precompile(rt.rt, all);

    const std::vector<uint8_t> want = prob.run(rt.rt, SSD_MODE_DETERMINISTIC, &staged);
    const std::vector<uint8_t> want_pass = pass_bytes(staged_layout.value());
    CHECK(same_bytes(prob.run(rt.rt), want));
    CHECK(same_bytes(pass_bytes(fused_layout.value()), want_pass));
    int variants = 0;
    for (const ssd_tile& t : ssd::legal_tiles(fused_configs[0]))
      for (bool cp_async : {false, true}) {
        if (cp_async && !tma) continue;
        ssd::BackwardTuning tn;
        tn.state_pass = t;
        tn.cp_async = cp_async;
        CAPTURE(t.m);
        CAPTURE(t.n);
        CAPTURE(t.k);
        CAPTURE(cp_async);
        CHECK(same_bytes(prob.run(rt.rt, SSD_MODE_DETERMINISTIC, &tn), want));
        CHECK(same_bytes(pass_bytes(fused_layout.value()), want_pass));
        ++variants;
      }
    for (int32_t g : {1, 7, 64}) {
      ssd::BackwardTuning tn;
      tn.max_blocks = g;
      CAPTURE(g);
      CHECK(same_bytes(prob.run(rt.rt, SSD_MODE_DETERMINISTIC, &tn), want));
      CHECK(same_bytes(pass_bytes(fused_layout.value()), want_pass));
    }
    MESSAGE("bwd fused state pass " << describe(c) << std::string(tma ? " (TMA and cp.async stages)" : "") << ": " << variants
                                    << " variants and 3 grid caps bitwise equal to the staged pair (gradients, ds, "
                                       "states_t, second terms, rho slots)");
  }
  MESSAGE("bwd fused state pass: " << tma_cases << " cases ran the TMA stages");
  if (device_is_sm90a()) CHECK(tma_cases > 0);
}

TEST_CASE("ssd_backward on sm_90a: the TMA stages (fused state pass, dx) give the cp.async loaders' bits, every "
          "case" *
          doctest::skip(!gpu_available())) {
  if (!device_is_sm90a()) {
    MESSAGE("not an sm_90a device: the TMA paths do not run here");
    return;
  }
  RuntimeHolder rt;
  ssd::BackwardTuning cp_async;
  cp_async.cp_async = true;
  int dx_tma = 0, pass_tma = 0;
  for (const BwdCase& c : kBwdCases) {
    CAPTURE(describe(c));
    BwdProblem prob(c);
    for (const ssd_kernel_config& k : configs_of(rt.rt, prob, SSD_MODE_DETERMINISTIC)) {
      dx_tma += k.kernel == SSD_KERNEL_CHUNK_SCAN_BWD_DX && (k.flags & SSD_FLAG_TMA);
      pass_tma += k.kernel == SSD_KERNEL_CHUNK_STATE_PASSING_BWD && (k.flags & SSD_FLAG_TMA);
    }
    const std::vector<uint8_t> tma = prob.run(rt.rt), cp = prob.run(rt.rt, SSD_MODE_DETERMINISTIC, &cp_async);
    size_t equal = 0;
    for (size_t i = 0; i < tma.size() && i < cp.size(); ++i) equal += tma[i] == cp[i];
    MESSAGE(describe(c) << ": " << equal << " of " << tma.size() << " gradient bytes equal (TMA vs cp.async stages)");
    CHECK(same_bytes(tma, cp));
  }
  MESSAGE("TMA stages ran in " << pass_tma << " fused state passes and " << dx_tma << " dx kernels of "
                                << std::size(kBwdCases) << " cases");
  CHECK(pass_tma > 0);
  CHECK(dx_tma > 0);
}

TEST_CASE("ssd_backward: the fused dcb + ddA_intra (chunk_scan_bwd_dcb_ddA_intra) gives the pair's bits, every "
          "tile and grid cap: all gradients, dCB (s <= l) and the intra / dtx_intra slots" *
          doctest::skip(!gpu_available())) {
  RuntimeHolder rt;
  ssd::BackwardTuning fused;
  fused.fused_dcb_intra = true;
  for (const BwdCase& c : kBwdCases) {
    CAPTURE(describe(c));
    BwdProblem prob(c);
    const ssd_backward_args a = prob.args(SSD_MODE_DETERMINISTIC);
    auto layout = ssd::backward_layout(&a, SSD_MODE_DETERMINISTIC);
    REQUIRE(layout.ok());
    const ssd::BackwardLayout L = layout.value();
    const int64_t nc = (c.L + c.Q - 1) / c.Q;
    // dCB (b, nc, g, Q, Q) in T: the entries s <= l (the ones its consumers read; the two kernels'
    // tiles cover different parts above the diagonal); then [intra, intra + 2 slot arrays).
    auto pass_bytes = [&] {
      const std::vector<uint8_t> ws = download_bytes(prob.d_ws);
      std::vector<uint8_t> r;
      const size_t T = dtype_bytes(c.dtype);
      for (int64_t row = 0; row < c.b * nc * c.g * c.Q; ++row) {
        const int64_t l = row % c.Q;
        const auto* at = ws.data() + L.dCB + size_t(row * c.Q) * T;
        r.insert(r.end(), at, at + size_t(l + 1) * T);
      }
      r.insert(r.end(), ws.begin() + long(L.intra), ws.begin() + long(L.gate));
      return r;
    };
    REQUIRE(L.dtx_intra > L.intra);
    REQUIRE(L.gate > L.dtx_intra);
    std::vector<ssd_kernel_config> fused_configs;
    for (const ssd_kernel_config& k : configs_of(rt.rt, prob, SSD_MODE_DETERMINISTIC, &fused))
      if (k.kernel == SSD_KERNEL_CHUNK_SCAN_BWD_DCB_DDA_INTRA) fused_configs.push_back(k);
    REQUIRE(fused_configs.size() == 1);
    std::vector<ssd_kernel_config> all = configs_of(rt.rt, prob, SSD_MODE_DETERMINISTIC);
    for (const ssd_tile& t : ssd::legal_tiles(fused_configs[0])) {
      ssd_kernel_config k = fused_configs[0];
      k.tile = t;
      all.push_back(k);
    }
    precompile(rt.rt, all);

    const std::vector<uint8_t> want = prob.run(rt.rt);
    const std::vector<uint8_t> want_pass = pass_bytes();
    CHECK(same_bytes(prob.run(rt.rt, SSD_MODE_DETERMINISTIC, &fused), want));
    CHECK(same_bytes(pass_bytes(), want_pass));
    int variants = 0;
    for (const ssd_tile& t : ssd::legal_tiles(fused_configs[0])) {
      ssd::BackwardTuning tn = fused;
      tn.dcb_intra = t;
      CAPTURE(t.m);
      CAPTURE(t.n);
      CAPTURE(t.k);
      CHECK(same_bytes(prob.run(rt.rt, SSD_MODE_DETERMINISTIC, &tn), want));
      CHECK(same_bytes(pass_bytes(), want_pass));
      ++variants;
    }
    for (int32_t g : {1, 7, 64}) {
      ssd::BackwardTuning tn = fused;
      tn.max_blocks = g;
      CAPTURE(g);
      CHECK(same_bytes(prob.run(rt.rt, SSD_MODE_DETERMINISTIC, &tn), want));
      CHECK(same_bytes(pass_bytes(), want_pass));
    }
    // The fast kernels through it (atomic T / U sums): the pair's values to rounding, per gradient.
    {
      ssd::BackwardTuning fast_pair, fast_fused = fused;
      fast_pair.fast_kernels = fast_fused.fast_kernels = true;
      prob.run(rt.rt, SSD_MODE_FAST, &fast_pair);
      const GradErrors ep = compare_with_oracle(prob);
      prob.run(rt.rt, SSD_MODE_FAST, &fast_fused);
      const GradErrors ef = compare_with_oracle(prob);
      for (size_t i = 0; i < ep.e.size(); ++i) {
        CAPTURE(ep.e[i].name);
        CHECK(std::fabs(ef.e[i].value - ep.e[i].value) < 1e-3 * tolerance(c.dtype) + 1e-6);
      }
    }
    MESSAGE("bwd fused dcb + ddA_intra " << describe(c) << ": " << variants
                                         << " tiles and 3 grid caps bitwise equal to the pair (gradients, dCB, "
                                            "intra and dtx_intra slots)");
  }
}

TEST_CASE("ssd_backward D3: a sample's gradients do not depend on the batch around it" *
          doctest::skip(!gpu_available())) {
  RuntimeHolder rt;
  BwdCase c8 = kBwdCases[4];
  c8.b = 8;
  BwdProblem big(c8);
  big.run(rt.rt);
  const BwdCase& c = big.c;
  BwdCase c1 = c8;
  c1.b = 1;
  std::vector<float> dA(size_t(c.h), 0.f), dD(big.D.values.size(), 0.f), dbias(size_t(c.h), 0.f);
  auto per_sample = [&](const Guarded& g, size_t per_bytes, int64_t i) {
    std::vector<uint8_t> all = g.body();
    return std::vector<uint8_t>(all.begin() + i * per_bytes, all.begin() + (i + 1) * per_bytes);
  };
  const size_t T = dtype_bytes(c.dtype);
  const size_t x_bytes = size_t(c.L * c.h * c.p) * T, dt_bytes = size_t(c.L * c.h) * T,
               bc_bytes = size_t(c.L * c.g * c.n) * T, st_bytes = size_t(c.h * c.p * c.n) * 4;
  int same = 0;
  for (int64_t i = 0; i < 8; ++i) {
    BwdProblem one(c1, &big, i);
    one.run(rt.rt);
    int ok = 0;
    ok += same_bytes(one.g_dx.body(), per_sample(big.g_dx, x_bytes, i));
    ok += same_bytes(one.g_ddt.body(), per_sample(big.g_ddt, dt_bytes, i));
    ok += same_bytes(one.g_dB.body(), per_sample(big.g_dB, bc_bytes, i));
    ok += same_bytes(one.g_dC.body(), per_sample(big.g_dC, bc_bytes, i));
    ok += same_bytes(one.g_dz.body(), per_sample(big.g_dz, x_bytes, i));
    ok += same_bytes(one.g_dinit.body(), per_sample(big.g_dinit, st_bytes, i));
    CHECK(ok == 6);
    same += ok == 6;
    // Batch sums: samples in increasing index, fp32, from +0.0.
    std::vector<double> a = one.g_dA.values(SSD_DTYPE_FP32), d = one.g_dD.values(SSD_DTYPE_FP32),
                        bb = one.g_dbias.values(SSD_DTYPE_FP32);
    for (size_t j = 0; j < dA.size(); ++j) dA[j] = dA[j] + float(a[j]);
    for (size_t j = 0; j < dD.size(); ++j) dD[j] = dD[j] + float(d[j]);
    for (size_t j = 0; j < dbias.size(); ++j) dbias[j] = dbias[j] + float(bb[j]);
  }
  auto bytes_of = [](const std::vector<float>& v) {
    std::vector<uint8_t> b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    return b;
  };
  CHECK(same_bytes(big.g_dA.body(), bytes_of(dA)));
  CHECK(same_bytes(big.g_dD.body(), bytes_of(dD)));
  CHECK(same_bytes(big.g_dbias.body(), bytes_of(dbias)));
  MESSAGE("bwd D3: " << same << "/8 samples bitwise identical alone and in a batch of 8 (dx, ddt, dB, dC, dz, "
                     "dinit); dA, dD, ddt_bias equal the ordered per-sample sums");
}

// Group slices (BackwardTuning::group_slices, the default above kSliceTargetBytes): the sub-problems
// of ngroups / slices groups give the whole problem's gradients bit for bit, through one buffer
// (slices in stream order) or two (in a launch graph, a slice beside the one of the other buffer).
// Each call twice: the first launches eagerly, the second replays the call's launch graph.
TEST_CASE("ssd_backward: group slices give the whole problem's bits, one or two buffers, eager and replayed" *
          doctest::skip(!gpu_available())) {
  RuntimeHolder rt;
  std::vector<BwdCase> cases;
  for (const BwdCase& c : kBwdCases)
    if (c.g >= 2) cases.push_back(c);
  // sm_90a's wgmma kernels (every extent a multiple of 64) with every option.
  cases.push_back(BwdCase{2, 1024, 32, 64, 4, 64, 256, SSD_DTYPE_BF16, true, false, true, true, true, true, true, true});
  int compared = 0;
  for (const BwdCase& c : cases) {
    CAPTURE(describe(c));
    BwdProblem prob(c);
    ssd::BackwardTuning whole;
    whole.group_slices = 1;
    const std::vector<uint8_t> ref = prob.run(rt.rt, SSD_MODE_DETERMINISTIC, &whole);
    for (int32_t slices = 2; slices <= c.g; ++slices) {
      if (c.g % slices != 0) continue;
      for (const int32_t variant : {1, 2, -2}) {  // buffers; -2: two buffers, a P in each
        CAPTURE(slices);
        CAPTURE(variant);
        ssd::BackwardTuning tn;
        tn.group_slices = slices;
        tn.slice_buffers = variant < 0 ? -variant : variant;
        tn.p_per_buffer = variant < 0;
        const int32_t buffers = tn.slice_buffers;
        const ssd_backward_args a = prob.args(SSD_MODE_DETERMINISTIC);
        auto l = ssd::backward_layout(&a, SSD_MODE_DETERMINISTIC, &tn);
        REQUIRE_MESSAGE(l.ok(), l.status().detail);
        CHECK(l->slices == slices);
        CHECK(l->buffers == std::min(buffers, slices));
        if (l->total > prob.ws_bytes) {
          prob.d_ws = DeviceBuffer(l->total);
          prob.ws_bytes = l->total;
        }
        for (int round = 0; round < 2; ++round) {
          CHECK(same_bytes(prob.run(rt.rt, SSD_MODE_DETERMINISTIC, &tn), ref));
          ++compared;
        }
      }
    }
    // The library's own workspace, sliced.
    ssd::BackwardTuning all;
    all.group_slices = int32_t(c.g);
    CHECK(same_bytes(prob.run(rt.rt, SSD_MODE_DETERMINISTIC, &all, /*caller_workspace=*/false), ref));
  }
  // A problem the default slices (its whole workspace is over kSliceTargetBytes): the C API's size,
  // the default's bits against the whole problem's.
  BwdProblem big(BwdCase{1, 4096, 64, 64, 4, 256, 256, SSD_DTYPE_BF16, true, false, false, true, true, false, true, false});
  const ssd_backward_args a = big.args(SSD_MODE_DETERMINISTIC);
  auto dl = ssd::backward_layout(&a, SSD_MODE_DETERMINISTIC);
  REQUIRE(dl.ok());
  CHECK(dl->slices == 2);
  size_t api_bytes = 0;
  GPU_CHECK_SSD(ssd_backward_workspace_size(&a, &api_bytes));
  CHECK(api_bytes == dl->total);
  ssd::BackwardTuning whole;
  whole.group_slices = 1;
  auto wl = ssd::backward_layout(&a, SSD_MODE_DETERMINISTIC, &whole);
  REQUIRE(wl.ok());
  if (wl->total > big.ws_bytes) {
    big.d_ws = DeviceBuffer(wl->total);
    big.ws_bytes = wl->total;
  }
  const std::vector<uint8_t> ref = big.run(rt.rt, SSD_MODE_DETERMINISTIC, &whole);
  for (int round = 0; round < 2; ++round) CHECK(same_bytes(big.run(rt.rt), ref));
  MESSAGE("group slices: " << compared << " sliced calls on " << cases.size() << " problems bitwise the whole problem's; "
          << describe(big.c) << ": default " << dl->slices << " slices in " << dl->buffers << " buffers, workspace "
          << dl->total << " bytes (whole " << wl->total << "), bitwise the whole's");
}

TEST_CASE("ssd_backward: the fused state pass's 128 x 128 x 64 tile, taken where a slice gives it a block per SM, "
          "gives the family default's bits" *
          doctest::skip(!gpu_available())) {
  if (!device_is_sm90a()) {
    MESSAGE("not an sm_90a device: the wgmma state pass does not run here");
    return;
  }
  RuntimeHolder rt;
  // 8 x 32 heads of 16 per group: 2 x 8 x 16 = 256 blocks at 128 x 128 (128 in each of two slices); a
  // partial last chunk; plain, then every option.
  for (const BwdCase& c :
       {BwdCase{8, 600, 32, 64, 2, 256, 256, SSD_DTYPE_BF16, true, false, false, true, true, false, false, false},
        BwdCase{8, 600, 32, 64, 2, 256, 256, SSD_DTYPE_FP16, true, true, true, true, true, true, true, true}}) {
    CAPTURE(describe(c));
    BwdProblem prob(c);
    int listed = 0;
    for (const ssd_kernel_config& k : configs_of(rt.rt, prob, SSD_MODE_DETERMINISTIC))
      if (k.kernel == SSD_KERNEL_CHUNK_STATE_PASSING_BWD) {
        ++listed;
        CHECK(k.tile.m == 128);
        CHECK(k.tile.n == 128);
        CHECK(k.tile.k == 64);
      }
    REQUIRE(listed == 1);
    ssd::BackwardTuning narrow;
    narrow.state_pass = ssd_tile{64, 64, 64, 0, 0};
    const std::vector<uint8_t> want = prob.run(rt.rt, SSD_MODE_DETERMINISTIC, &narrow);
    for (int round = 0; round < 2; ++round) CHECK(same_bytes(prob.run(rt.rt), want));
    MESSAGE("bwd fused state pass " << describe(c) << ": the default call (128 x 128 x 64) bitwise the 64 x 64 x 64 "
                                       "tile's, twice");
  }
}

TEST_CASE("ssd_backward: bad arguments are refused by name, nothing written" * doctest::skip(!gpu_available())) {
  RuntimeHolder rt;
  BwdProblem prob(kBwdCases[0]);
  for (const Guarded* g : prob.outputs()) const_cast<Guarded*>(g)->buf.poison();
  auto expect = [&](ssd_backward_args a, ssd_status want, const char* field, void* ws, size_t bytes) {
    CAPTURE(field);
    CHECK(ssd_backward(rt.rt, &a, ws, bytes, nullptr) == want);
    CHECK(std::string(ssd_last_error_detail()).find(field) != std::string::npos);
  };
  ssd_backward_args a = prob.args(-1);
  a.dz.data = nullptr;
  expect(a, SSD_ERROR_NULL_POINTER, "dz", prob.d_ws.get(), prob.ws_bytes);
  a = prob.args(-1);
  a.ddt.dtype = SSD_DTYPE_FP32;
  expect(a, SSD_ERROR_INVALID_DTYPE, "ddt", prob.d_ws.get(), prob.ws_bytes);
  a = prob.args(-1);
  a.dB.shape[3] = 32;
  expect(a, SSD_ERROR_INVALID_SHAPE, "dB", prob.d_ws.get(), prob.ws_bytes);
  a = prob.args(-1);
  a.dinitial_states.data = nullptr;
  expect(a, SSD_ERROR_NULL_POINTER, "dinitial_states", prob.d_ws.get(), prob.ws_bytes);
  a = prob.args(-1);
  expect(a, SSD_ERROR_WORKSPACE_TOO_SMALL, "workspace_bytes", prob.d_ws.get(), 1000);
  expect(a, SSD_ERROR_INVALID_ALIGNMENT, "workspace", static_cast<char*>(prob.d_ws.get()) + 16, prob.ws_bytes);
  a.mode = 7;
  expect(a, SSD_ERROR_INVALID_ARGUMENT, "args.mode", prob.d_ws.get(), prob.ws_bytes);
  for (const Guarded* g : prob.outputs())
    for (uint8_t byte : download_bytes(g->buf)) REQUIRE(byte == 0xFF);
}

TEST_CASE("ssd_backward stage by stage: the workspace intermediates against the oracle's" *
          doctest::skip(!gpu_available())) {
  for_each_case({kBwdCases[0], kBwdCases[2], kBwdCases[5]}, [&](ssd_runtime* rt, const BwdCase& c) {
    BwdProblem prob(c);
    // The staged state pass: dP is a workspace section only there (the fused kernel keeps it on chip
    // and gives the same bits everywhere else).
    ssd::BackwardTuning staged;
    staged.staged_state_pass = true;
    prob.run(rt, SSD_MODE_DETERMINISTIC, &staged);
    ssd_backward_args a = prob.args(SSD_MODE_DETERMINISTIC);
    auto layout = ssd::backward_layout(&a, SSD_MODE_DETERMINISTIC, &staged);
    REQUIRE(layout.ok());
    const ssd::BackwardLayout& L = layout.value();
    const ssd::ref::SsdGradients ref = ssd::ref::backward(prob.oracle_problem(), prob.dout.values.data(),
                                                          c.dfinal ? prob.dfinal.values.data() : nullptr);
    const std::vector<uint8_t> ws = download_bytes(prob.d_ws);
    auto region = [&](size_t offset, size_t count, ssd_dtype dt) {
      std::vector<double> v(count);
      for (size_t i = 0; i < count; ++i) {
        if (dt == SSD_DTYPE_FP32) {
          float f;
          std::memcpy(&f, ws.data() + offset + 4 * i, 4);
          v[i] = f;
        } else {
          uint16_t u;
          std::memcpy(&u, ws.data() + offset + 2 * i, 2);
          v[i] = dt == SSD_DTYPE_BF16 ? bf16_to_float(u) : fp16_to_float(u);
        }
      }
      return v;
    };
    const size_t nc = size_t(prob.nc), nst = size_t(c.b) * nc * size_t(c.h * c.p * c.n);
    const size_t nch = size_t(c.b * c.h) * nc * size_t(c.Q), ncb = size_t(c.b) * nc * size_t(c.g * c.Q * c.Q);
    std::vector<double> dP = region(L.dP, nst, SSD_DTYPE_FP32), ds = region(L.ds, nst, c.dtype);
    std::vector<double> ddt_x = region(L.ddt_x, nch, SSD_DTYPE_FP32), ddA = region(L.ddA, nch, SSD_DTYPE_FP32);
    std::vector<double> w = region(L.w, nch, SSD_DTYPE_FP32), v = region(L.v, nch, SSD_DTYPE_FP32);
    std::vector<double> dCB = region(L.dCB, ncb, c.dtype), dCB_ref = ref.inter.dCB;
    std::vector<double> intra(nch, 0.0);
    const size_t R = size_t(c.Q / 64);
    std::vector<double> parts = region(L.intra, nch * R, SSD_DTYPE_FP32);
    // Host views that depend only on valid slots: padding positions are compared as 0.
    std::vector<double> next(nch, 0.0), prev(nch, 0.0), ref_next = ref.inter.ddA_next, ref_prev = ref.inter.ddA_prev;
    std::vector<double> ref_intra = ref.inter.ddA_intra, ref_dda = ref.inter.ddA, ref_ddtx = ref.inter.ddt_x;
    for (size_t bhc = 0; bhc < size_t(c.b * c.h) * nc; ++bhc) {
      const int64_t cc = int64_t(bhc % nc);
      const int valid = int(std::min<int64_t>(c.Q, c.L - cc * c.Q));
      double acc = 0;
      for (int l = 0; l < valid; ++l) {
        next[bhc * c.Q + l] = acc;
        acc += w[bhc * c.Q + l];
      }
      acc = 0;
      for (int l = valid - 1; l >= 0; --l) {
        acc += v[bhc * c.Q + l];
        prev[bhc * c.Q + l] = acc;  // without ρ
      }
      for (int k = 0; k < valid; ++k) {
        for (int r = k / 64; r * 64 < valid; ++r) intra[bhc * c.Q + k] += parts[(bhc * R + size_t(r)) * c.Q + k];
        ref_prev[bhc * c.Q + k] -= ref.inter.rho[bhc];
      }
      for (int k = valid; k < c.Q; ++k)
        ref_next[bhc * c.Q + k] = ref_prev[bhc * c.Q + k] = ref_intra[bhc * c.Q + k] = ref_dda[bhc * c.Q + k] =
            ref_ddtx[bhc * c.Q + k] = 0;
    }
    // ddA's bits: the canonical order (docs/determinism.md) replayed on the host from the
    // workspace's own inputs (the T_r slots, w and v summed above in that order, the ρ slots,
    // A(λ)). ρ's factor e^{A(λ)} is the device's expf, within 2 ulp of the host's, so a chunk
    // passes when one of those five carries reproduces all Q of its values.
    const size_t S = size_t(c.p * c.n / 32);
    const std::vector<double> dA_cs = region(L.dA_cumsum, nch, SSD_DTYPE_FP32);
    std::vector<double> rho_slots(size_t(c.b * c.h) * nc * S);
    std::memcpy(rho_slots.data(), ws.data() + L.rho, rho_slots.size() * sizeof(double));
    size_t exact_chunks = 0;
    for (size_t bhc = 0; bhc < size_t(c.b * c.h) * nc; ++bhc) {
      const int64_t cc = int64_t(bhc % nc), bb = int64_t(bhc / nc) / c.h;
      const int valid = int(std::min<int64_t>(c.Q, c.L - cc * c.Q));
      double rho_sum = 0;  // j increasing from +0.0
      for (size_t j = 0; j < S; ++j) rho_sum += rho_slots[bhc * S + j];
      const int64_t t_last = cc * c.Q + valid - 1;
      const bool cut = c.seq_idx && prob.seq[bb * c.L + t_last] != (cc > 0 ? prob.seq[bb * c.L + cc * c.Q - 1] : 0);
      std::vector<float> carries = {0.f};
      if (!cut) {
        const float e0 = std::exp(float(dA_cs[bhc * c.Q + valid - 1]));
        carries = {e0, std::nextafter(e0, 0.f), std::nextafter(e0, 1e30f),
                   std::nextafter(std::nextafter(e0, 0.f), 0.f), std::nextafter(std::nextafter(e0, 1e30f), 1e30f)};
      }
      bool exact = false;
      for (float carry : carries) {
        volatile double rho = double(carry) * rho_sum;  // rounded here, as the kernel's __dmul_rn (no fma)
        bool all = true;
        for (int k = 0; k < c.Q && all; ++k) {
          const size_t at = bhc * c.Q + size_t(k);
          const float want = k < valid ? float((intra[at] + next[at]) + (prev[at] + rho)) : 0.f;
          const float got = float(ddA[at]);
          all = std::memcmp(&want, &got, sizeof(float)) == 0;
        }
        exact = exact || all;
      }
      exact_chunks += exact;
    }
    MESSAGE("bwd stages " << describe(c) << ": ddA bitwise the canonical order in " << exact_chunks << " of "
                          << size_t(c.b * c.h) * nc << " chunks");
    CHECK(exact_chunks == size_t(c.b * c.h) * nc);
    for (size_t blk = 0; blk < size_t(c.b) * nc * size_t(c.g); ++blk)
      for (int l = 0; l < c.Q; ++l)
        for (int s = l + 1; s < c.Q; ++s) dCB[blk * c.Q * c.Q + l * c.Q + s] = dCB_ref[blk * c.Q * c.Q + l * c.Q + s] = 0;
    auto e = [](const std::vector<double>& a, const std::vector<double>& b) {
      return ssd::ref::rel_l2(a.data(), b.data(), std::min(a.size(), b.size()));
    };
    const double e_dP = e(dP, ref.inter.dP), e_ds = e(ds, ref.inter.ds), e_ddtx = e(ddt_x, ref_ddtx);
    const double e_dcb = e(dCB, dCB_ref), e_intra = e(intra, ref_intra), e_next = e(next, ref_next);
    const double e_prev = e(prev, ref_prev), e_dda = e(ddA, ref_dda);
    MESSAGE("bwd stages " << describe(c) << ": rel_l2 dP " << e_dP << " ds " << e_ds << " ddt_x " << e_ddtx << " dCB "
                          << e_dcb << " intra " << e_intra << " next " << e_next << " prev-rho " << e_prev << " ddA "
                          << e_dda);
    const double tol = tolerance(c.dtype);
    CHECK(e_dP < tol);
    CHECK(e_ds < tol);
    CHECK(e_ddtx < tol);
    CHECK(e_dcb < tol);
    CHECK(e_intra < tol);
    CHECK(e_next < tol);
    CHECK(e_prev < tol);
    CHECK(e_dda < tol);
  });
}

TEST_CASE("ssd_backward sanitizer shape: two small problems with every option, both modes" *
          doctest::skip(!gpu_available())) {
  // The case scripts/gpu-test.sh --sanitize runs under compute-sanitizer memcheck and racecheck.
  RuntimeHolder rt;
  // The second shape's headdim and dstate are multiples of 64: on sm_90a its state passes (the
  // recompute's and the backward's fused one) and dx's n loops run their wgmma kernels.
  for (const BwdCase& c : {BwdCase{2, 150, 4, 32, 2, 16, 64, SSD_DTYPE_BF16, true, false, true, true, true, true, true, true},
                           BwdCase{2, 150, 4, 64, 2, 64, 64, SSD_DTYPE_BF16, true, false, true, true, true, true, true, true}}) {
    BwdProblem prob(c);
    const GradErrors e = run_within_tolerance(rt.rt, prob);
    ssd::BackwardTuning fast_kernels;  // the fast (atomic) kernels, which fast mode no longer runs
    fast_kernels.fast_kernels = true;
    prob.run(rt.rt, SSD_MODE_FAST, &fast_kernels);
    // The group-sliced path (views at a slice's heads and groups, two buffers, the whole problem's
    // per-head scans around the slices): in bounds under memcheck, and the unsliced bits.
    ssd::BackwardTuning whole;
    whole.group_slices = 1;
    const std::vector<uint8_t> ref = prob.run(rt.rt, SSD_MODE_DETERMINISTIC, &whole);
    for (int32_t buffers : {1, 2, -2}) {  // -2: two buffers, a P in each
      ssd::BackwardTuning sliced;
      sliced.group_slices = int32_t(c.g);
      sliced.slice_buffers = buffers < 0 ? -buffers : buffers;
      sliced.p_per_buffer = buffers < 0;
      const ssd_backward_args a = prob.args(SSD_MODE_DETERMINISTIC);
      auto l = ssd::backward_layout(&a, SSD_MODE_DETERMINISTIC, &sliced);
      REQUIRE_MESSAGE(l.ok(), l.status().detail);
      REQUIRE(l->slices == int32_t(c.g));
      if (l->total > prob.ws_bytes) {
        prob.d_ws = DeviceBuffer(l->total);
        prob.ws_bytes = l->total;
      }
      CHECK(same_bytes(prob.run(rt.rt, SSD_MODE_DETERMINISTIC, &sliced), ref));
    }
    MESSAGE("bwd sanitizer shape " << describe(prob.c) << ": rel_l2" << e.text() << "; " << c.g
                                   << " group slices in 1 and 2 buffers (one P, a P per buffer) bitwise the whole's");
  }
}

TEST_CASE("ssd_backward over the shape matrix (headdim x dstate x chunk x dtype, options on and off)" *
          doctest::skip(!gpu_available())) {
  RuntimeHolder rt;
  // Every (p, n, Q, dtype), as the forward's matrix; ngroups and the options rotate so each is seen
  // on and off; lengths are not multiples of the chunk half of the time.
  const std::vector<BwdCase> cases = shape_matrix<BwdCase>([](int i, BwdCase& c) { c.dfinal = i % 3 == 1; });
  {  // compile everything the sweep needs in parallel first
    std::vector<ssd_kernel_config> configs;
    for (const BwdCase& c : cases) {
      BwdCase probe = c;
      probe.L = 1;  // the kernels depend on the options and sizes p, n, Q, r, not on L
      BwdProblem shape(probe);
      ssd_backward_args a = shape.args(SSD_MODE_DETERMINISTIC);
      auto arch = ssd::runtime_arch(*rt.rt);
      REQUIRE(arch.ok());
      auto k = ssd::backward_kernel_configs(&a, arch.value(), SSD_MODE_DETERMINISTIC);
      REQUIRE_MESSAGE(k.ok(), k.status().detail);
      configs.insert(configs.end(), k->begin(), k->end());
    }
    precompile(rt.rt, configs);
  }
  std::map<std::string, double> worst_bf16, worst_fp16;
  for (const BwdCase& c : cases) {
    CAPTURE(describe(c));
    BwdProblem prob(c);
    prob.run(rt.rt);
    const GradErrors e = compare_with_oracle(prob);
    for (auto& [name, v, plain] : e.e) {
      CAPTURE(name);
      CHECK(v < tolerance(c.dtype));
      double& w = (c.dtype == SSD_DTYPE_BF16 ? worst_bf16 : worst_fp16)[name];
      w = std::max(w, v);
      if (plain != v) {  // the sums' plain relative error, reported (short sums cancel: issue 11)
        double& wp = (c.dtype == SSD_DTYPE_BF16 ? worst_bf16 : worst_fp16)[name + "(plain)"];
        wp = std::max(wp, plain);
      }
    }
  }
  auto text = [](const std::map<std::string, double>& m) {
    std::string t;
    for (auto& [n, v] : m) t += " " + n + " " + std::to_string(v).substr(0, 8);
    return t;
  };
  MESSAGE("bwd matrix: " << cases.size() << " cases, worst rel_l2 per gradient | bf16" << text(worst_bf16)
                         << " | fp16" << text(worst_fp16));
}

TEST_CASE("ssd_forward_prepare / ssd_backward_prepare: the calls then find every kernel in the cache (require-cached)" *
          doctest::skip(!gpu_available())) {
  char tmpl[] = "/tmp/ssd_prepare_gpu.XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  auto runtime_on = [&](int32_t cache_mode) {
    ssd_runtime_options o;
    ssd_runtime_options_init(&o);
    o.cache_dir = dir.c_str();
    o.cache_mode = cache_mode;
    ssd_runtime* rt = nullptr;
    GPU_CHECK_SSD(ssd_runtime_create(&o, &rt));
    return rt;
  };
  // Every option on (D(h), z, bias, softplus, init, dfinal) and D(h,p) with seq_idx.
  for (const BwdCase& c : {kBwdCases[0], kBwdCases[2]})
    for (ssd_mode mode : {SSD_MODE_DETERMINISTIC, SSD_MODE_FAST}) {
      CAPTURE(describe(c));
      CAPTURE(ssd::mode_name(mode));
      BwdProblem prob(c);
      ssd_backward_args b = prob.args(mode);
      // The forward of the same problem (outputs in fresh buffers).
      ssd_forward_args f;
      ssd_forward_args_init(&f);
      f.chunk_size = b.chunk_size;
      f.dt_softplus = b.dt_softplus;
      f.x = b.x; f.dt = b.dt; f.A = b.A; f.B = b.B; f.C = b.C; f.D = b.D; f.z = b.z; f.dt_bias = b.dt_bias;
      f.initial_states = b.initial_states; f.seq_idx = b.seq_idx;
      const size_t nx = size_t(c.b * c.L * c.h * c.p);
      DeviceBuffer out(nx * dtype_bytes(c.dtype)), out_x(nx * dtype_bytes(c.dtype)),
          final_states(size_t(c.b * c.h * c.p * c.n) * 4);
      f.out = tensor(out, c.dtype, {c.b, c.L, c.h, c.p});
      if (c.z) f.out_x = tensor(out_x, c.dtype, {c.b, c.L, c.h, c.p});
      if (c.init) f.final_states = tensor(final_states, SSD_DTYPE_FP32, {c.b, c.h, c.p, c.n});
      ssd_launch_options lo;
      ssd_launch_options_init(&lo);
      lo.mode = mode;

      // Prepare (arch and mode: the ones the calls will use), then run the calls on a runtime that
      // may only read the cache: a kernel the prepare missed or keyed differently is a cache miss.
      ssd_runtime* warm = runtime_on(0);
      ssd_prepare_options po;
      ssd_prepare_options_init(&po);
      po.mode = mode;
      ssd_prepare_report fr{sizeof(fr)}, br{sizeof(br)};
      GPU_CHECK_SSD(ssd_forward_prepare(warm, &f, &po, &fr));
      po.mode = -1;  // the backward's own args.mode
      GPU_CHECK_SSD(ssd_backward_prepare(warm, &b, &po, &br));
      // cumsum, bmm, the fused state pass, chunk_scan_fwd; on sm_90a also the cp.async twins of the
      // two TMA kernels (a call picks by its tensors' alignment: src/ops/prepare.cpp) and, where the
      // shape has it (these do), bmm's wgmma kernel beside its mma.sync one (a call picks by its grid).
      CHECK(fr.kernels == (device_is_sm90a() ? 7 : 4));
      // The recompute's cumsum and bmm are the forward's (its state pass: fp32 P); in fast mode the
      // backward runs the deterministic kernels (backward_kernel_mode) and the forward's are keyed fast.
      CHECK(br.from_memory >= (mode == SSD_MODE_DETERMINISTIC ? 2 : 0));
      ssd_runtime_destroy(warm);

      ssd_runtime* cached_only = runtime_on(2);
      GPU_CHECK_SSD(ssd_forward(cached_only, &f, &lo, nullptr));
      GPU_CHECK_CU(drv().cuCtxSynchronize());
      prob.run(cached_only, mode);
      ssd_runtime_destroy(cached_only);
    }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

TEST_CASE("ssd_backward: inputs aligned only to their elements take the element-wise tile copies, same bits" *
          doctest::skip(!gpu_available())) {
  // x, dout, B, C (and z, out_x) one element past a 16-byte boundary: the cp.async tile copies of
  // the matmul kernels (dcb, db, dc among them) fall back to their element-wise copies, which only
  // move data, so every gradient keeps the bits of the aligned call.
  RuntimeHolder rt;
  for (const BwdCase& c : {kBwdCases[0], kBwdCases[4]}) {
    CAPTURE(describe(c));
    BwdProblem prob(c);
    const std::vector<uint8_t> aligned = prob.run(rt.rt);
    const size_t T = dtype_bytes(c.dtype);
    std::vector<DeviceBuffer> copies;
    auto shifted = [&](const DeviceBuffer& src) {
      std::vector<uint8_t> bytes(T, 0);
      const std::vector<uint8_t> body = download_bytes(src);
      bytes.insert(bytes.end(), body.begin(), body.end());
      copies.emplace_back(bytes.size());
      copies.back().upload(bytes.data(), bytes.size());
      return static_cast<void*>(static_cast<char*>(copies.back().get()) + T);
    };
    copies.reserve(6);
    ssd_backward_args a = prob.args(SSD_MODE_DETERMINISTIC);
    a.x.data = shifted(prob.d_x);
    a.dout.data = shifted(prob.d_dout);
    a.B.data = shifted(prob.d_B);
    a.C.data = shifted(prob.d_C);
    if (c.z) {
      a.z.data = shifted(prob.d_z);
      a.out_x.data = shifted(prob.d_out_x);
    }
    for (const Guarded* g : prob.outputs()) const_cast<Guarded*>(g)->buf.poison();
    prob.d_ws.poison();
    ssd::Status s = ssd::ssd_backward(*rt.rt, &a, prob.d_ws.get(), prob.ws_bytes, nullptr, nullptr);
    REQUIRE_MESSAGE(s.ok(), s.detail);
    std::vector<uint8_t> r;
    for (const Guarded* g : prob.outputs()) {
      REQUIRE(g->guards_intact());
      const std::vector<uint8_t> b = g->body();
      r.insert(r.end(), b.begin(), b.end());
    }
    CHECK(same_bytes(r, aligned));
  }
}
