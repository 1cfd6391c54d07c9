// Tests of the float64 SSD oracle (src/reference/ssd_reference.h), following ssd-math.md §9:
//  - naive recurrence (§2.1) vs chunked algorithm (§2.3): out, out_x, final states <= 1e-12;
//  - analytic backward (§3) vs central finite differences (step 1e-6) of the chunked forward
//    (and of the naive one on some cases), loss = Σ dout ⊙ out + Σ dfinal ⊙ final_states;
//  - stable ddA (B-g) vs the naive reverse-cumsum form (§3.2).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "reference/metrics.h"
#include "reference/ssd_reference.h"

namespace {

using ssd::ref::SsdForwardResult;
using ssd::ref::SsdGradients;
using ssd::ref::SsdProblem;

enum class DMode { None, PerHead, PerHeadDim };
enum class Seq {
  None,        // no seq_idx
  Main,        // §9: row 0 boundary inside a chunk (t=6), row 1 at a chunk edge (t=Q) and t=L-1
  NonZero,     // same boundaries, ids start at 3 (row 0) and 1 (row 1): init unused
  Dense,       // many boundaries, incl. length-1 sequences and a boundary at t=1
};

struct Cfg {
  int64_t b = 2, L = 10, h = 4, p = 3, g = 2, n = 5;
  int32_t Q = 4;
  DMode D = DMode::PerHead;
  bool z = true, bias = true, softplus = true, init = true, dfinal = true;
  Seq seq = Seq::Main;
  double lo = 0.0, hi = INFINITY;
  unsigned seed = 1;
  std::string name() const {
    return "b" + std::to_string(b) + " L" + std::to_string(L) + " h" + std::to_string(h) + " p" +
           std::to_string(p) + " g" + std::to_string(g) + " n" + std::to_string(n) + " Q" +
           std::to_string(Q) + " D" + std::to_string(static_cast<int>(D)) + " z" +
           std::to_string(z) + " bias" + std::to_string(bias) + " sp" + std::to_string(softplus) +
           " init" + std::to_string(init) + " df" + std::to_string(dfinal) + " seq" +
           std::to_string(static_cast<int>(seq)) + " lim(" + std::to_string(lo) + "," +
           std::to_string(hi) + ") seed" + std::to_string(seed);
  }
};

// Owns the inputs of one problem; view() returns an SsdProblem pointing into them.
struct Data {
  Cfg cfg;
  std::vector<double> x, dt, A, B, C, D, z, bias, init, dout, dfinal;
  std::vector<int32_t> seq_idx;

  SsdProblem view() const {
    SsdProblem pr;
    pr.sz = {cfg.b, cfg.L, cfg.h, cfg.p, cfg.g, cfg.n, cfg.Q};
    pr.x = x.data();
    pr.dt = dt.data();
    pr.A = A.data();
    pr.B = B.data();
    pr.C = C.data();
    pr.D = cfg.D == DMode::None ? nullptr : D.data();
    pr.D_per_headdim = cfg.D == DMode::PerHeadDim;
    pr.z = cfg.z ? z.data() : nullptr;
    pr.dt_bias = cfg.bias ? bias.data() : nullptr;
    pr.initial_states = cfg.init ? init.data() : nullptr;
    pr.seq_idx = cfg.seq == Seq::None ? nullptr : seq_idx.data();
    pr.dt_softplus = cfg.softplus;
    pr.dt_limit_lo = cfg.lo;
    pr.dt_limit_hi = cfg.hi;
    return pr;
  }
};

std::vector<int32_t> make_seq_idx(const Cfg& c) {
  std::vector<int32_t> s(static_cast<size_t>(c.b * c.L), 0);
  for (int64_t bb = 0; bb < c.b; ++bb) {
    std::vector<int64_t> cuts;  // positions t where a new id starts
    if (c.seq == Seq::Dense) {
      cuts = {1, 2, c.Q + 3, 2 * c.Q, 2 * c.Q + 1, c.L - 2};
      if (bb % 2 == 1) cuts = {c.Q - 1, c.Q, 3 * c.Q - 2, c.L - 1};
    } else if (bb % 2 == 0) {
      cuts = {6, 3 * c.Q + 1};
    } else {
      cuts = {c.Q, c.L - 1};
    }
    int32_t base = 0;
    if (c.seq == Seq::NonZero) base = (bb % 2 == 0) ? 3 : 1;
    int32_t id = base;
    for (int64_t t = 0; t < c.L; ++t) {
      if (t > 0 && std::find(cuts.begin(), cuts.end(), t) != cuts.end()) ++id;
      s[static_cast<size_t>(bb * c.L + t)] = id;
    }
  }
  return s;
}

Data make_data(const Cfg& c) {
  Data d;
  d.cfg = c;
  std::mt19937_64 rng(c.seed * 7919u + 17u);
  std::uniform_real_distribution<double> U(-1.0, 1.0);
  auto fill = [&](std::vector<double>& v, size_t n, double scale) {
    v.resize(n);
    for (auto& e : v) e = scale * U(rng);
  };
  const size_t nx = static_cast<size_t>(c.b * c.L * c.h * c.p);
  const size_t nbc = static_cast<size_t>(c.b * c.L * c.g * c.n);
  const size_t nst = static_cast<size_t>(c.b * c.h * c.p * c.n);
  fill(d.x, nx, 1.0);
  fill(d.z, nx, 1.5);
  fill(d.B, nbc, 1.0);
  fill(d.C, nbc, 1.0);
  fill(d.init, nst, 1.0);
  fill(d.dout, nx, 1.0);
  fill(d.dfinal, nst, 1.0);
  if (!c.dfinal) std::fill(d.dfinal.begin(), d.dfinal.end(), 0.0);
  fill(d.D, static_cast<size_t>(c.D == DMode::PerHeadDim ? c.h * c.p : c.h), 1.0);
  fill(d.bias, static_cast<size_t>(c.h), 0.5);
  d.A.resize(static_cast<size_t>(c.h));
  for (auto& a : d.A) a = -std::exp(0.8 * U(rng) - 0.4);  // A in [-1.5, -0.45]
  // dt: keep v = sp(dt + bias) (or dt + bias) at least 1e-3 away from lo, hi (FD kinks).
  const ssd::ref::DtOptions o{c.softplus, c.bias, c.lo, c.hi};
  d.dt.resize(static_cast<size_t>(c.b * c.L * c.h));
  for (int64_t e = 0; e < c.b * c.L * c.h; ++e) {
    const int64_t i = e % c.h;
    const double bi = c.bias ? d.bias[static_cast<size_t>(i)] : 0.0;
    double& v = d.dt[static_cast<size_t>(e)];
    for (;;) {
      v = c.softplus ? 1.5 * U(rng) - 0.5 : 0.75 * U(rng) + 0.35;  // no softplus: ~1/3 < 0
      const double u = v + bi;
      const double pre = c.softplus ? std::log1p(std::exp(u)) : u;
      if (std::fabs(pre - o.lo) > 1e-3 && std::fabs(pre - o.hi) > 1e-3) break;
    }
  }
  d.seq_idx = make_seq_idx(c);
  return d;
}

double loss_of(const Data& d, const SsdForwardResult& f) {
  double acc = 0.0;
  for (size_t e = 0; e < f.out.size(); ++e) acc += d.dout[e] * f.out[e];
  for (size_t e = 0; e < f.final_states.size(); ++e) acc += d.dfinal[e] * f.final_states[e];
  return acc;
}

void check_forward_agreement(const Data& d) {
  const SsdProblem pr = d.view();
  const SsdForwardResult a = ssd::ref::forward_naive(pr);
  const SsdForwardResult c = ssd::ref::forward_chunked(pr);
  REQUIRE(a.out.size() == c.out.size());
  REQUIRE(a.final_states.size() == c.final_states.size());
  REQUIRE(a.out_x.size() == c.out_x.size());
  CHECK(ssd::ref::rel_l2(c.out.data(), a.out.data(), a.out.size()) <= 1e-12);
  CHECK(ssd::ref::max_rel(c.out.data(), a.out.data(), a.out.size()) <= 1e-12);
  CHECK(ssd::ref::rel_l2(c.final_states.data(), a.final_states.data(), a.final_states.size()) <=
        1e-12);
  CHECK(ssd::ref::max_rel(c.final_states.data(), a.final_states.data(),
                          a.final_states.size()) <= 1e-12);
  if (d.cfg.z) CHECK(ssd::ref::rel_l2(c.out_x.data(), a.out_x.data(), a.out_x.size()) <= 1e-12);
}

// Central FD (step 1e-6) of the loss w.r.t. every (or every `stride`-th) entry of `in`,
// compared with `analytic` by max_rel (§9's metric) on those entries.
void check_grad(const char* what, Data& d, std::vector<double>& in,
                const std::vector<double>& analytic, size_t stride, bool use_naive,
                double tol) {
  const std::string name = what;
  CAPTURE(name);
  REQUIRE(analytic.size() == in.size());
  const double h = 1e-6;
  std::vector<double> fd, an;
  for (size_t e = 0; e < in.size(); e += stride) {
    const double keep = in[e];
    in[e] = keep + h;
    const SsdProblem pr = d.view();
    const double lp =
        loss_of(d, use_naive ? ssd::ref::forward_naive(pr) : ssd::ref::forward_chunked(pr));
    in[e] = keep - h;
    const double lm =
        loss_of(d, use_naive ? ssd::ref::forward_naive(pr) : ssd::ref::forward_chunked(pr));
    in[e] = keep;
    fd.push_back((lp - lm) / (2 * h));
    an.push_back(analytic[e]);
  }
  const double err = ssd::ref::max_rel(an.data(), fd.data(), fd.size());
  CAPTURE(err);
  CHECK(err <= tol);
}

void check_backward(const Cfg& cfg, size_t stride = 1, bool use_naive = false,
                    double tol = 1e-6) {
  CAPTURE(cfg.name());
  Data d = make_data(cfg);
  const SsdGradients g = ssd::ref::backward(d.view(), d.dout.data(),
                                            cfg.dfinal ? d.dfinal.data() : nullptr);
  CHECK(g.dD.size() == (cfg.D == DMode::None ? 0u : d.D.size()));
  CHECK(g.dz.size() == (cfg.z ? d.z.size() : 0u));
  CHECK(g.ddt_bias.size() == (cfg.bias ? d.bias.size() : 0u));
  CHECK(g.dinitial_states.size() == (cfg.init ? d.init.size() : 0u));

  check_grad("dx", d, d.x, g.dx, stride, use_naive, tol);
  check_grad("ddt", d, d.dt, g.ddt, std::max<size_t>(1, stride / 2), use_naive, tol);
  check_grad("dA", d, d.A, g.dA, 1, use_naive, tol);
  check_grad("dB", d, d.B, g.dB, stride, use_naive, tol);
  check_grad("dC", d, d.C, g.dC, stride, use_naive, tol);
  if (cfg.D != DMode::None) check_grad("dD", d, d.D, g.dD, 1, use_naive, tol);
  if (cfg.z) check_grad("dz", d, d.z, g.dz, stride, use_naive, tol);
  if (cfg.bias) check_grad("ddt_bias", d, d.bias, g.ddt_bias, 1, use_naive, tol);
  if (cfg.init) check_grad("dinitial_states", d, d.init, g.dinitial_states, stride, use_naive, tol);

  // Stable ddA (B-g) vs the naive reverse-cumsum form (§3.2): equal in exact arithmetic.
  const auto& it = g.inter;
  CHECK(ssd::ref::max_rel(it.ddA.data(), it.ddA_unstable.data(), it.ddA.size()) <= 1e-12);
}

}  // namespace

TEST_CASE("reference metrics: rel_l2 and max_rel") {
  const double ref[3] = {3.0, 0.0, 4.0}, a[3] = {3.0, 0.0, 4.5}, zero[3] = {0, 0, 0};
  CHECK(ssd::ref::rel_l2(ref, ref, 3) == 0.0);
  CHECK(ssd::ref::rel_l2(a, ref, 3) == doctest::Approx(0.1));
  CHECK(ssd::ref::max_rel(a, ref, 3) == doctest::Approx(0.125));
  CHECK(ssd::ref::rel_l2(a, zero, 3) == doctest::Approx(std::sqrt(9 + 20.25)));
  CHECK(ssd::ref::rel_l2(zero, zero, 3) == 0.0);
  const double bad[3] = {NAN, 0.0, 4.0};
  CHECK(std::isnan(ssd::ref::rel_l2(bad, ref, 3)));
  CHECK(std::isnan(ssd::ref::max_rel(bad, ref, 3)));
}

TEST_CASE("reference ssd: validate rejects bad problems") {
  Cfg c;
  Data d = make_data(c);
  SsdProblem pr = d.view();
  CHECK_NOTHROW(ssd::ref::validate(pr));
  SsdProblem bad = pr;
  bad.sz.ngroups = 3;
  CHECK_THROWS_AS(ssd::ref::validate(bad), std::invalid_argument);
  bad = pr;
  bad.B = nullptr;
  CHECK_THROWS_AS(ssd::ref::validate(bad), std::invalid_argument);
  std::vector<int32_t> s = d.seq_idx;
  s[3] = 5;  // 0,0,0,5,0,... decreasing afterwards
  bad = pr;
  bad.seq_idx = s.data();
  CHECK_THROWS_AS(ssd::ref::validate(bad), std::invalid_argument);
  s = d.seq_idx;
  s[0] = -1;
  bad.seq_idx = s.data();
  CHECK_THROWS_AS(ssd::ref::validate(bad), std::invalid_argument);
}

TEST_CASE("reference ssd: forward by hand (b=h=p=n=g=1)") {
  // L=3, Q=2, no options except the default clamp; dt = {1, -1, 0.5}: Δ = {1, 0, 0.5}.
  const double x[3] = {1.0, 2.0, 3.0}, dt[3] = {1.0, -1.0, 0.5}, A[1] = {-1.0};
  const double B[3] = {1.0, 1.0, 2.0}, C[3] = {1.0, 2.0, 1.0};
  SsdProblem pr;
  pr.sz = {1, 3, 1, 1, 1, 1, 2};
  pr.x = x;
  pr.dt = dt;
  pr.A = A;
  pr.B = B;
  pr.C = C;
  // H0 = 1*1*1 = 1; H1 = e^0 H0 + 0 = 1; H2 = e^{-0.5} + 0.5*3*2 = e^{-0.5} + 3.
  const double H2 = std::exp(-0.5) + 3.0;
  for (const auto& f : {ssd::ref::forward_naive(pr), ssd::ref::forward_chunked(pr)}) {
    CHECK(f.out[0] == doctest::Approx(1.0));
    CHECK(f.out[1] == doctest::Approx(2.0));
    CHECK(f.out[2] == doctest::Approx(H2));
    CHECK(f.final_states[0] == doctest::Approx(H2));
  }
}

TEST_CASE("reference ssd: naive vs chunked forward, all option combinations") {
  unsigned seed = 100;
  int count = 0;
  for (int32_t Q : {4, 8})
    for (DMode D : {DMode::None, DMode::PerHead, DMode::PerHeadDim})
      for (bool z : {false, true})
        for (bool bias : {false, true})
          for (bool sp : {false, true})
            for (bool init : {false, true})
              for (Seq seq : {Seq::None, Seq::Main, Seq::NonZero, Seq::Dense})
                for (int lim = 0; lim < 2; ++lim) {
                  Cfg c;
                  c.L = (Q == 4) ? 10 : 21;
                  c.Q = Q;
                  c.D = D;
                  c.z = z;
                  c.bias = bias;
                  c.softplus = sp;
                  c.init = init;
                  c.seq = seq;
                  if (lim) {
                    c.lo = 0.3;
                    c.hi = 1.2;
                  }
                  c.seed = ++seed;
                  CAPTURE(c.name());
                  check_forward_agreement(make_data(c));
                  ++count;
                }
  CHECK(count == 768);
}

TEST_CASE("reference ssd: naive vs chunked forward, other shapes") {
  const Cfg base;
  std::vector<Cfg> cs;
  auto add = [&](int64_t b, int64_t L, int64_t h, int64_t p, int64_t g, int64_t n, int32_t Q,
                 Seq seq) {
    Cfg c = base;
    c.b = b, c.L = L, c.h = h, c.p = p, c.g = g, c.n = n, c.Q = Q, c.seq = seq;
    c.seed = static_cast<unsigned>(cs.size() + 500);
    cs.push_back(c);
  };
  add(2, 40, 4, 8, 2, 8, 8, Seq::Dense);
  add(2, 40, 4, 8, 1, 6, 8, Seq::Main);   // one group
  add(2, 37, 4, 5, 4, 7, 6, Seq::Main);   // g = h, Q not a power of two
  add(1, 1, 2, 3, 1, 4, 4, Seq::None);    // single token
  add(3, 3, 2, 3, 2, 4, 8, Seq::None);    // L < Q
  add(2, 16, 4, 4, 2, 5, 16, Seq::Dense); // one full chunk
  add(2, 13, 4, 4, 2, 5, 1, Seq::Main);   // Q = 1
  for (const Cfg& c : cs) {
    CAPTURE(c.name());
    check_forward_agreement(make_data(c));
  }
}

TEST_CASE("reference ssd: seq_idx semantics") {
  Cfg c;
  c.seq = Seq::NonZero;
  Data d = make_data(c);
  SsdProblem with = d.view(), without = d.view();
  without.initial_states = nullptr;
  // ids not starting at 0: initial_states is ignored (§8.3), dinit = 0.
  const SsdForwardResult a = ssd::ref::forward_chunked(with), b = ssd::ref::forward_chunked(without);
  CHECK(ssd::ref::max_rel(a.out.data(), b.out.data(), a.out.size()) == 0.0);
  const SsdGradients g = ssd::ref::backward(with, d.dout.data(), d.dfinal.data());
  for (double v : g.dinitial_states) CHECK(v == 0.0);

  // A reset makes the tokens after the boundary independent of those before it.
  c.seq = Seq::Main;
  Data e = make_data(c);
  const SsdForwardResult f0 = ssd::ref::forward_naive(e.view());
  for (int64_t k = 0; k < c.h * c.p; ++k) e.x[static_cast<size_t>(k)] += 1.0;  // t = 0, row 0
  const SsdForwardResult f1 = ssd::ref::forward_naive(e.view());
  const size_t row_tok = static_cast<size_t>(c.h * c.p);
  for (size_t t = 6; t < static_cast<size_t>(c.L); ++t)  // row 0 resets at t = 6
    for (size_t k = 0; k < row_tok; ++k) CHECK(f0.out[t * row_tok + k] == f1.out[t * row_tok + k]);
  CHECK(f0.out[0] != f1.out[0]);
}

TEST_CASE("reference ssd: chunked intermediates") {
  Cfg c;
  c.seq = Seq::None;
  c.L = 12;
  Data d = make_data(c);
  const SsdProblem pr = d.view();
  const SsdForwardResult f = ssd::ref::forward_chunked(pr);
  const int64_t Nc = pr.sz.nchunks(), Q = c.Q, P = c.p, N = c.n, H = c.h;
  // Without seq_idx, P_c equals the naive state H_{cQ-1}: run the naive forward on the
  // prefix [0, cQ) and compare its final state with prev_states[:, c].
  for (int64_t cc = 1; cc < Nc; ++cc) {
    SsdProblem pre = pr;
    Cfg pc = c;
    pc.L = cc * Q;
    Data dp = make_data(pc);  // same shapes, only to own truncated copies
    for (int64_t bb = 0; bb < c.b; ++bb) {
      std::copy_n(d.x.begin() + bb * c.L * H * P, pc.L * H * P, dp.x.begin() + bb * pc.L * H * P);
      std::copy_n(d.dt.begin() + bb * c.L * H, pc.L * H, dp.dt.begin() + bb * pc.L * H);
      std::copy_n(d.B.begin() + bb * c.L * c.g * N, pc.L * c.g * N,
                  dp.B.begin() + bb * pc.L * c.g * N);
      std::copy_n(d.C.begin() + bb * c.L * c.g * N, pc.L * c.g * N,
                  dp.C.begin() + bb * pc.L * c.g * N);
      std::copy_n(d.z.begin() + bb * c.L * H * P, pc.L * H * P, dp.z.begin() + bb * pc.L * H * P);
    }
    dp.A = d.A, dp.D = d.D, dp.bias = d.bias, dp.init = d.init;
    pre = dp.view();
    const SsdForwardResult fp = ssd::ref::forward_naive(pre);
    for (int64_t bb = 0; bb < c.b; ++bb)
      for (int64_t i = 0; i < H; ++i)
        for (int64_t k = 0; k < P * N; ++k) {
          const double ref = fp.final_states[static_cast<size_t>((bb * H + i) * P * N + k)];
          const double got =
              f.prev_states[static_cast<size_t>(((bb * Nc + cc) * H + i) * P * N + k)];
          CHECK(got == doctest::Approx(ref).epsilon(1e-12));
        }
  }
  // CB is the full square C·Bᵀ (no causal mask) without seq_idx.
  const int64_t G = c.g;
  for (int64_t l = 0; l < Q; ++l)
    for (int64_t s = 0; s < Q; ++s) {
      double ref = 0.0;
      for (int64_t nn = 0; nn < N; ++nn)
        ref += d.C[static_cast<size_t>(((0 * c.L + Q + l) * G + 1) * N + nn)] *
               d.B[static_cast<size_t>(((0 * c.L + Q + s) * G + 1) * N + nn)];
      CHECK(f.CB[static_cast<size_t>((((0 * Nc + 1) * G + 1) * Q + l) * Q + s)] ==
            doctest::Approx(ref).epsilon(1e-14));
    }
}

namespace {
Cfg main_case() {  // per-head D, z, dt_bias, softplus, init, seq_idx (boundaries t=6 | t=4, 9)
  Cfg c;
  c.seed = 11;
  return c;
}
// The main case with one variation and a seed of its own.
template <class Change>
Cfg main_case_with(unsigned seed, Change change) {
  Cfg c = main_case();
  change(c);
  c.seed = seed;
  return c;
}

}  // namespace

TEST_CASE("reference ssd backward FD: main case (§9)") { check_backward(main_case()); }

TEST_CASE("reference ssd backward FD: main case, FD of the naive recurrence") {
  check_backward(main_case(), 1, true);
}

TEST_CASE("reference ssd backward FD: D of shape (h, p)") {
  check_backward(main_case_with(12, [](Cfg& c) { c.D = DMode::PerHeadDim; }));
}

TEST_CASE("reference ssd backward FD: no seq_idx") {
  const Cfg c = main_case_with(13, [](Cfg& v) { v.seq = Seq::None; });
  check_backward(c);
  check_backward(c, 1, true);
}

TEST_CASE("reference ssd backward FD: ids not starting at 0 (init unused)") {
  check_backward(main_case_with(14, [](Cfg& c) { c.seq = Seq::NonZero; }));
}

TEST_CASE("reference ssd backward FD: no options, default clamp zeroes negative dt, no dfinal") {
  Cfg c = main_case();
  c.D = DMode::None;
  c.z = c.bias = c.softplus = c.init = c.dfinal = false;
  c.seq = Seq::None;
  c.seed = 15;
  Data d = make_data(c);
  size_t clamped = 0;
  for (double v : d.dt) clamped += v < 0;
  CHECK(clamped > d.dt.size() / 5);
  check_backward(c);
  check_backward(c, 1, true);
}

TEST_CASE("reference ssd backward FD: finite dt_limit (0.3, 1.2)") {
  Cfg c = main_case();
  c.lo = 0.3;
  c.hi = 1.2;
  c.seed = 16;
  Data d = make_data(c);
  size_t clamped = 0;
  for (size_t e = 0; e < d.dt.size(); ++e) {
    const double v = std::log1p(std::exp(d.dt[e] + d.bias[e % static_cast<size_t>(c.h)]));
    clamped += (v < 0.3 || v > 1.2);
  }
  CHECK(clamped > d.dt.size() / 5);
  check_backward(c);
}

TEST_CASE("reference ssd backward FD: Q = 8") { check_backward(main_case_with(17, [](Cfg& c) { c.Q = 8; })); }

TEST_CASE("reference ssd backward FD: dense seq_idx, finite limit without softplus") {
  Cfg c = main_case();
  c.seq = Seq::Dense;
  c.L = 20;
  c.softplus = false;
  c.lo = 0.1;
  c.hi = 0.8;
  c.D = DMode::PerHeadDim;
  c.seed = 18;
  check_backward(c);
}

TEST_CASE("reference ssd backward FD: b2 L40 h4 g2 p8 n8 Q8, dense seq_idx") {
  Cfg c;
  c.L = 40, c.p = 8, c.n = 8, c.Q = 8, c.seq = Seq::Dense, c.seed = 21;
  check_backward(c, 11);
}

TEST_CASE("reference ssd backward FD: g = 1, Q = 6, L = 23, D (h, p)") {
  Cfg c;
  c.L = 23, c.g = 1, c.p = 4, c.n = 6, c.Q = 6, c.D = DMode::PerHeadDim, c.seed = 22;
  check_backward(c, 2);
}

TEST_CASE("reference ssd backward FD: g = h, Q = 5, L = 17, no seq_idx") {
  Cfg c;
  c.L = 17, c.g = 4, c.p = 3, c.n = 4, c.Q = 5, c.seq = Seq::None, c.seed = 23;
  check_backward(c);
}
