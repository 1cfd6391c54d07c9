#include "reference/ssd_reference.h"

#include <algorithm>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

namespace ssd::ref {

namespace {

// Every vector in `vs` as `n` zeros.
void zeros(size_t n, std::initializer_list<std::vector<double>*> vs) {
  for (std::vector<double>* v : vs) v->assign(n, 0.0);
}

double sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }
double silu(double z) { return z * sigmoid(z); }

// Flat indices of every layout listed in the header, plus the seq_idx masks of §1.3.
struct Ctx {
  const SsdProblem& pr;
  int64_t b, L, H, P, G, N, Q, Nc, r;

  explicit Ctx(const SsdProblem& p)
      : pr(p),
        b(p.sz.batch),
        L(p.sz.seqlen),
        H(p.sz.nheads),
        P(p.sz.headdim),
        G(p.sz.ngroups),
        N(p.sz.dstate),
        Q(p.sz.chunk),
        Nc(p.sz.nchunks()),
        r(p.sz.nheads / p.sz.ngroups) {}

  size_t x(int64_t bb, int64_t t, int64_t i, int64_t pp) const {
    return static_cast<size_t>(((bb * L + t) * H + i) * P + pp);
  }
  size_t dt(int64_t bb, int64_t t, int64_t i) const {
    return static_cast<size_t>((bb * L + t) * H + i);
  }
  size_t bc(int64_t bb, int64_t t, int64_t g, int64_t nn) const {
    return static_cast<size_t>(((bb * L + t) * G + g) * N + nn);
  }
  // initial_states / final_states (b, h, p, n)
  size_t st(int64_t bb, int64_t i, int64_t pp, int64_t nn) const {
    return static_cast<size_t>(((bb * H + i) * P + pp) * N + nn);
  }
  // chunk states (b, Nc, h, p, n)
  size_t cs(int64_t bb, int64_t c, int64_t i, int64_t pp, int64_t nn) const {
    return static_cast<size_t>((((bb * Nc + c) * H + i) * P + pp) * N + nn);
  }
  // (b, h, Nc, Q)
  size_t hq(int64_t bb, int64_t i, int64_t c, int64_t l) const {
    return static_cast<size_t>(((bb * H + i) * Nc + c) * Q + l);
  }
  // (b, h, Nc)
  size_t hc(int64_t bb, int64_t i, int64_t c) const {
    return static_cast<size_t>((bb * H + i) * Nc + c);
  }
  // (b, Nc, g, Q, Q)
  size_t cb(int64_t bb, int64_t c, int64_t g, int64_t l, int64_t s) const {
    return static_cast<size_t>((((bb * Nc + c) * G + g) * Q + l) * Q + s);
  }
  size_t d(int64_t i, int64_t pp) const {
    return static_cast<size_t>(pr.D_per_headdim ? i * P + pp : i);
  }
  int64_t grp(int64_t i) const { return i / r; }

  size_t n_x() const { return static_cast<size_t>(b * L * H * P); }
  size_t n_dt() const { return static_cast<size_t>(b * L * H); }
  size_t n_bc() const { return static_cast<size_t>(b * L * G * N); }
  size_t n_st() const { return static_cast<size_t>(b * H * P * N); }
  size_t n_cs() const { return static_cast<size_t>(b * Nc * H * P * N); }
  size_t n_hq() const { return static_cast<size_t>(b * H * Nc * Q); }
  size_t n_cb() const { return static_cast<size_t>(b * Nc * G * Q * Q); }
  size_t n_d() const { return static_cast<size_t>(pr.D_per_headdim ? H * P : H); }

  // q(t) = seq_idx[β, t]; q(-1) := 0; q ≡ 0 without seq_idx.
  int32_t q(int64_t bb, int64_t t) const {
    if (t < 0 || pr.seq_idx == nullptr) return 0;
    return pr.seq_idx[bb * L + t];
  }
  // λ_c: last valid position of chunk c.
  int64_t lam(int64_t c) const { return std::min<int64_t>(Q, L - c * Q) - 1; }
  bool valid(int64_t c, int64_t l) const { return c * Q + l < L; }
  // σ_c(l, s) = [q(cQ+l) = q(cQ+s)] (both valid)
  bool sigma(int64_t bb, int64_t c, int64_t l, int64_t s) const {
    return valid(c, l) && valid(c, s) && q(bb, c * Q + l) == q(bb, c * Q + s);
  }
  // ξ_c(l) = [q(cQ+l) = q(cQ+λ_c)]
  bool xi(int64_t bb, int64_t c, int64_t l) const {
    return valid(c, l) && q(bb, c * Q + l) == q(bb, c * Q + lam(c));
  }
  // η_c(l) = [q(cQ+l) = q(cQ-1)]
  bool eta(int64_t bb, int64_t c, int64_t l) const {
    return valid(c, l) && q(bb, c * Q + l) == q(bb, c * Q - 1);
  }
  // θ_c = [q(cQ+λ_c) = q(cQ-1)]
  bool theta(int64_t bb, int64_t c) const { return q(bb, c * Q + lam(c)) == q(bb, c * Q - 1); }
};

}  // namespace

CumsumShape cumsum_shape(const SsdProblem& p) {
  return {p.sz.batch, p.sz.seqlen, p.sz.nheads, p.sz.chunk};
}

DtOptions dt_options(const SsdProblem& p) {
  DtOptions o;
  o.softplus = p.dt_softplus;
  o.has_bias = p.dt_bias != nullptr;
  o.lo = p.dt_limit_lo;
  o.hi = p.dt_limit_hi;
  return o;
}

void validate(const SsdProblem& p) {
  const SsdSizes& s = p.sz;
  if (s.batch <= 0 || s.seqlen <= 0 || s.nheads <= 0 || s.headdim <= 0 || s.ngroups <= 0 ||
      s.dstate <= 0 || s.chunk <= 0)
    throw std::invalid_argument("ssd::ref: sizes must be positive");
  if (s.nheads % s.ngroups != 0)
    throw std::invalid_argument("ssd::ref: nheads must be a multiple of ngroups");
  if (!p.x || !p.dt || !p.A || !p.B || !p.C)
    throw std::invalid_argument("ssd::ref: x, dt, A, B, C are required");
  if (p.seq_idx) {
    for (int64_t bb = 0; bb < s.batch; ++bb)
      for (int64_t t = 0; t < s.seqlen; ++t) {
        const int32_t v = p.seq_idx[bb * s.seqlen + t];
        if (v < 0) throw std::invalid_argument("ssd::ref: seq_idx ids must be >= 0");
        if (t > 0 && v < p.seq_idx[bb * s.seqlen + t - 1])
          throw std::invalid_argument("ssd::ref: seq_idx must be non-decreasing along L (row " +
                                      std::to_string(bb) + ")");
      }
  }
}

// ---------------------------------------------------------------------------------------------
// Forward, naive recurrence (§2.1)
// ---------------------------------------------------------------------------------------------

SsdForwardResult forward_naive(const SsdProblem& pr) {
  validate(pr);
  const Ctx k(pr);
  const DtOptions o = dt_options(pr);
  SsdForwardResult res;
  res.out.assign(k.n_x(), 0.0);
  if (pr.z) res.out_x.assign(k.n_x(), 0.0);
  res.final_states.assign(k.n_st(), 0.0);

  std::vector<double> Hs(static_cast<size_t>(k.P * k.N));
  for (int64_t bb = 0; bb < k.b; ++bb)
    for (int64_t i = 0; i < k.H; ++i) {
      const int64_t g = k.grp(i);
      // H_{-1} = init (0 if absent)
      for (int64_t pp = 0; pp < k.P; ++pp)
        for (int64_t nn = 0; nn < k.N; ++nn)
          Hs[pp * k.N + nn] = pr.initial_states ? pr.initial_states[k.st(bb, i, pp, nn)] : 0.0;
      for (int64_t t = 0; t < k.L; ++t) {
        const double delta =
            dt_preprocess(o, pr.dt[k.dt(bb, t, i)], pr.dt_bias ? pr.dt_bias[i] : 0.0);
        const double eps = (k.q(bb, t) == k.q(bb, t - 1)) ? 1.0 : 0.0;
        const double decay = eps * std::exp(delta * pr.A[i]);
        // H_t = ε_t e^{a_t} H_{t-1} + Δ_t x_t B_tᵀ
        for (int64_t pp = 0; pp < k.P; ++pp)
          for (int64_t nn = 0; nn < k.N; ++nn)
            Hs[pp * k.N + nn] = decay * Hs[pp * k.N + nn] +
                                delta * pr.x[k.x(bb, t, i, pp)] * pr.B[k.bc(bb, t, g, nn)];
        // y_t = H_t C_t + D ⊙ x_t;  out_t = y_t ⊙ silu(z_t)
        for (int64_t pp = 0; pp < k.P; ++pp) {
          double y = 0.0;
          for (int64_t nn = 0; nn < k.N; ++nn) y += Hs[pp * k.N + nn] * pr.C[k.bc(bb, t, g, nn)];
          if (pr.D) y += pr.D[k.d(i, pp)] * pr.x[k.x(bb, t, i, pp)];
          const size_t ix = k.x(bb, t, i, pp);
          if (pr.z) {
            res.out_x[ix] = y;
            res.out[ix] = y * silu(pr.z[ix]);
          } else {
            res.out[ix] = y;
          }
        }
      }
      for (int64_t pp = 0; pp < k.P; ++pp)
        for (int64_t nn = 0; nn < k.N; ++nn)
          res.final_states[k.st(bb, i, pp, nn)] = Hs[pp * k.N + nn];
    }
  return res;
}

// ---------------------------------------------------------------------------------------------
// Forward, chunked (§2.3)
// ---------------------------------------------------------------------------------------------

void chunk_state_fwd(const SsdProblem& pr, const double* dt_out, const double* dA_cumsum,
                     double* states) {
  const Ctx k(pr);
  for (int64_t bb = 0; bb < k.b; ++bb)
    for (int64_t c = 0; c < k.Nc; ++c)
      for (int64_t i = 0; i < k.H; ++i) {
        const int64_t g = k.grp(i);
        const double a_end = dA_cumsum[k.hq(bb, i, c, k.Q - 1)];
        for (int64_t pp = 0; pp < k.P; ++pp)
          for (int64_t nn = 0; nn < k.N; ++nn) states[k.cs(bb, c, i, pp, nn)] = 0.0;
        for (int64_t l = 0; l <= k.lam(c); ++l) {
          if (!k.xi(bb, c, l)) continue;
          const int64_t t = c * k.Q + l;
          // ξ_c(l) E^end_c(l) Δ_l
          const double coef =
              std::exp(a_end - dA_cumsum[k.hq(bb, i, c, l)]) * dt_out[k.hq(bb, i, c, l)];
          for (int64_t pp = 0; pp < k.P; ++pp)
            for (int64_t nn = 0; nn < k.N; ++nn)
              states[k.cs(bb, c, i, pp, nn)] +=
                  coef * pr.x[k.x(bb, t, i, pp)] * pr.B[k.bc(bb, t, g, nn)];
        }
      }
}

void state_passing_fwd(const SsdProblem& pr, const double* states, const double* dA_cumsum,
                       double* prev_states, double* final_states) {
  const Ctx k(pr);
  std::vector<double> S(static_cast<size_t>(k.P * k.N));
  for (int64_t bb = 0; bb < k.b; ++bb)
    for (int64_t i = 0; i < k.H; ++i) {
      for (int64_t pp = 0; pp < k.P; ++pp)
        for (int64_t nn = 0; nn < k.N; ++nn)
          S[pp * k.N + nn] = pr.initial_states ? pr.initial_states[k.st(bb, i, pp, nn)] : 0.0;
      for (int64_t c = 0; c < k.Nc; ++c) {
        const double carry =
            k.theta(bb, c) ? std::exp(dA_cumsum[k.hq(bb, i, c, k.Q - 1)]) : 0.0;
        for (int64_t pp = 0; pp < k.P; ++pp)
          for (int64_t nn = 0; nn < k.N; ++nn) {
            double& s = S[pp * k.N + nn];
            prev_states[k.cs(bb, c, i, pp, nn)] = s;  // P_c = S_{c-1}
            s = carry * s + states[k.cs(bb, c, i, pp, nn)];
          }
      }
      for (int64_t pp = 0; pp < k.P; ++pp)
        for (int64_t nn = 0; nn < k.N; ++nn) final_states[k.st(bb, i, pp, nn)] = S[pp * k.N + nn];
    }
}

void bmm_chunk_fwd(const SsdProblem& pr, double* CB) {
  const Ctx k(pr);
  for (int64_t bb = 0; bb < k.b; ++bb)
    for (int64_t c = 0; c < k.Nc; ++c)
      for (int64_t g = 0; g < k.G; ++g)
        for (int64_t l = 0; l < k.Q; ++l)
          for (int64_t s = 0; s < k.Q; ++s) {
            double acc = 0.0;
            if (k.sigma(bb, c, l, s))
              for (int64_t nn = 0; nn < k.N; ++nn)
                acc += pr.C[k.bc(bb, c * k.Q + l, g, nn)] * pr.B[k.bc(bb, c * k.Q + s, g, nn)];
            CB[k.cb(bb, c, g, l, s)] = acc;
          }
}

void chunk_scan_fwd(const SsdProblem& pr, const double* CB, const double* dt_out,
                    const double* dA_cumsum, const double* prev_states, double* out,
                    double* out_x) {
  const Ctx k(pr);
  std::vector<double> coef(static_cast<size_t>(k.Q));
  for (int64_t bb = 0; bb < k.b; ++bb)
    for (int64_t c = 0; c < k.Nc; ++c)
      for (int64_t i = 0; i < k.H; ++i) {
        const int64_t g = k.grp(i);
        for (int64_t l = 0; l <= k.lam(c); ++l) {
          const int64_t t = c * k.Q + l;
          const double a_l = dA_cumsum[k.hq(bb, i, c, l)];
          const bool eta = k.eta(bb, c, l);
          const double e_start = std::exp(a_l);
          // coef[s] = CB_c(l,s) 𝓛_c(l,s) Δ_s
          for (int64_t s = 0; s <= l; ++s)
            coef[static_cast<size_t>(s)] = CB[k.cb(bb, c, g, l, s)] *
                                           std::exp(a_l - dA_cumsum[k.hq(bb, i, c, s)]) *
                                           dt_out[k.hq(bb, i, c, s)];
          for (int64_t pp = 0; pp < k.P; ++pp) {
            double y = 0.0;
            for (int64_t s = 0; s <= l; ++s)
              y += coef[static_cast<size_t>(s)] * pr.x[k.x(bb, c * k.Q + s, i, pp)];
            if (eta) {
              double pc = 0.0;
              for (int64_t nn = 0; nn < k.N; ++nn)
                pc += prev_states[k.cs(bb, c, i, pp, nn)] * pr.C[k.bc(bb, t, g, nn)];
              y += e_start * pc;
            }
            const size_t ix = k.x(bb, t, i, pp);
            if (pr.D) y += pr.D[k.d(i, pp)] * pr.x[ix];
            if (out_x) out_x[ix] = y;
            out[ix] = pr.z ? y * silu(pr.z[ix]) : y;
          }
        }
      }
}

SsdForwardResult forward_chunked(const SsdProblem& pr) {
  validate(pr);
  const Ctx k(pr);
  SsdForwardResult res;
  zeros(k.n_hq(), {&res.dt_out, &res.dA_cumsum});
  zeros(k.n_cs(), {&res.states, &res.prev_states});
  zeros(k.n_st(), {&res.final_states});
  zeros(k.n_cb(), {&res.CB});
  zeros(k.n_x(), {&res.out});
  if (pr.z) res.out_x.assign(k.n_x(), 0.0);

  chunk_cumsum_fwd(cumsum_shape(pr), dt_options(pr), pr.dt, pr.A, pr.dt_bias, res.dt_out.data(),
                   res.dA_cumsum.data());                                             // F1
  chunk_state_fwd(pr, res.dt_out.data(), res.dA_cumsum.data(), res.states.data());   // F2
  state_passing_fwd(pr, res.states.data(), res.dA_cumsum.data(), res.prev_states.data(),
                    res.final_states.data());                                        // F3
  bmm_chunk_fwd(pr, res.CB.data());                                                  // F4
  chunk_scan_fwd(pr, res.CB.data(), res.dt_out.data(), res.dA_cumsum.data(),
                 res.prev_states.data(), res.out.data(),
                 pr.z ? res.out_x.data() : nullptr);                                 // F5
  return res;
}

// ---------------------------------------------------------------------------------------------
// Backward (§3)
// ---------------------------------------------------------------------------------------------

SsdGradients backward(const SsdProblem& pr, const double* dout, const double* dfinal_states) {
  validate(pr);
  if (!dout) throw std::invalid_argument("ssd::ref::backward: dout is required");
  const Ctx k(pr);

  // B0: recompute the forward intermediates, with y = out before the gate always kept.
  SsdForwardResult f = forward_chunked(pr);
  std::vector<double> y(k.n_x(), 0.0), out_tmp(k.n_x(), 0.0);
  chunk_scan_fwd(pr, f.CB.data(), f.dt_out.data(), f.dA_cumsum.data(), f.prev_states.data(),
                 out_tmp.data(), y.data());
  const std::vector<double>& Dl = f.dt_out;     // Δ (b, h, Nc, Q)
  const std::vector<double>& Acs = f.dA_cumsum;  // 𝒜 (b, h, Nc, Q)
  const std::vector<double>& Pst = f.prev_states;

  SsdGradients gr;
  SsdBackwardIntermediates& it = gr.inter;
  zeros(k.n_x(), {&gr.dx});
  zeros(k.n_dt(), {&gr.ddt});
  zeros(static_cast<size_t>(k.H), {&gr.dA});
  zeros(k.n_bc(), {&gr.dB, &gr.dC});
  if (pr.D) gr.dD.assign(k.n_d(), 0.0);
  if (pr.D) gr.dD_abs.assign(k.n_d(), 0.0);
  if (pr.z) gr.dz.assign(k.n_x(), 0.0);
  if (pr.dt_bias) gr.ddt_bias.assign(static_cast<size_t>(k.H), 0.0);
  if (pr.initial_states) gr.dinitial_states.assign(k.n_st(), 0.0);
  zeros(k.n_x(), {&it.dy});
  zeros(k.n_cs(), {&it.dP, &it.ds});
  zeros(static_cast<size_t>(k.b * k.H * k.Nc), {&it.rho});
  zeros(k.n_cb(), {&it.dCB});
  zeros(k.n_hq(), {&it.ddt_x, &it.ddA_intra, &it.ddA_next, &it.ddA_prev, &it.ddA, &it.ddA_unstable, &it.dt_delta});

  // (B-a) gate and skip: dy = G ⊙ silu(z); dz = G ⊙ y ⊙ σ(z)(1 + z(1 − σ(z))); dD = Σ dy ⊙ x.
  for (size_t e = 0; e < k.n_x(); ++e) {
    if (pr.z) {
      const double zz = pr.z[e], sg = sigmoid(zz);
      it.dy[e] = dout[e] * silu(zz);
      gr.dz[e] = dout[e] * y[e] * sg * (1.0 + zz * (1.0 - sg));
    } else {
      it.dy[e] = dout[e];
    }
  }
  if (pr.D)
    for (int64_t bb = 0; bb < k.b; ++bb)
      for (int64_t t = 0; t < k.L; ++t)
        for (int64_t i = 0; i < k.H; ++i)
          for (int64_t pp = 0; pp < k.P; ++pp) {
            const double term = it.dy[k.x(bb, t, i, pp)] * pr.x[k.x(bb, t, i, pp)];
            gr.dD[k.d(i, pp)] += term;
            gr.dD_abs[k.d(i, pp)] += std::fabs(term);
          }

  // (B-b) dP_c = Σ_l η_c(l) e^{𝒜_c(l)} dy_l C_lᵀ.
  for (int64_t bb = 0; bb < k.b; ++bb)
    for (int64_t c = 0; c < k.Nc; ++c)
      for (int64_t i = 0; i < k.H; ++i) {
        const int64_t g = k.grp(i);
        for (int64_t l = 0; l <= k.lam(c); ++l) {
          if (!k.eta(bb, c, l)) continue;
          const int64_t t = c * k.Q + l;
          const double e_start = std::exp(Acs[k.hq(bb, i, c, l)]);
          for (int64_t pp = 0; pp < k.P; ++pp)
            for (int64_t nn = 0; nn < k.N; ++nn)
              it.dP[k.cs(bb, c, i, pp, nn)] +=
                  e_start * it.dy[k.x(bb, t, i, pp)] * pr.C[k.bc(bb, t, g, nn)];
        }
      }

  // (B-c) reverse state passing: dS_{Nc-1} = G_f; ds_c = dS_c;
  //       ρ_c = θ_c e^{𝒜_c(Q-1)} ⟨P_c, dS_c⟩; dS_{c-1} = θ_c e^{𝒜_c(Q-1)} dS_c + dP_c.
  std::vector<double> dS(static_cast<size_t>(k.P * k.N));
  for (int64_t bb = 0; bb < k.b; ++bb)
    for (int64_t i = 0; i < k.H; ++i) {
      for (int64_t pp = 0; pp < k.P; ++pp)
        for (int64_t nn = 0; nn < k.N; ++nn)
          dS[pp * k.N + nn] = dfinal_states ? dfinal_states[k.st(bb, i, pp, nn)] : 0.0;
      for (int64_t c = k.Nc - 1; c >= 0; --c) {
        const double carry = k.theta(bb, c) ? std::exp(Acs[k.hq(bb, i, c, k.Q - 1)]) : 0.0;
        double rho = 0.0;
        for (int64_t pp = 0; pp < k.P; ++pp)
          for (int64_t nn = 0; nn < k.N; ++nn) {
            const size_t e = k.cs(bb, c, i, pp, nn);
            double& d = dS[pp * k.N + nn];
            it.ds[e] = d;
            rho += Pst[e] * d;
            d = carry * d + it.dP[e];
          }
        it.rho[k.hc(bb, i, c)] = carry * rho;
      }
      if (pr.initial_states)
        for (int64_t pp = 0; pp < k.P; ++pp)
          for (int64_t nn = 0; nn < k.N; ++nn)
            gr.dinitial_states[k.st(bb, i, pp, nn)] = dS[pp * k.N + nn];
    }

  // Per (β, c, i): (B-d) dx, dΔ^x; (B-e) dCB; (B-f) dB, dC; (B-g) ddA.
  const size_t QQ = static_cast<size_t>(k.Q * k.Q);
  std::vector<double> W(QQ), w(static_cast<size_t>(k.Q)), v(static_cast<size_t>(k.Q));
  for (int64_t bb = 0; bb < k.b; ++bb)
    for (int64_t c = 0; c < k.Nc; ++c)
      for (int64_t i = 0; i < k.H; ++i) {
        const int64_t g = k.grp(i), lam = k.lam(c), c0 = c * k.Q;
        auto A_ = [&](int64_t l) { return Acs[k.hq(bb, i, c, l)]; };
        auto D_ = [&](int64_t l) { return Dl[k.hq(bb, i, c, l)]; };
        const double a_end = A_(k.Q - 1);
        // 𝓛(l, s) = exp(𝒜(l) − 𝒜(s))
        auto Lc = [&](int64_t l, int64_t s) { return std::exp(A_(l) - A_(s)); };
        // ⟨dy_l, x_s⟩ over headdim
        auto dyx = [&](int64_t l, int64_t s) {
          double acc = 0.0;
          for (int64_t pp = 0; pp < k.P; ++pp)
            acc += it.dy[k.x(bb, c0 + l, i, pp)] * pr.x[k.x(bb, c0 + s, i, pp)];
          return acc;
        };

        // (B-d) R_l = ξ E^end(l) ds_c B_l + Σ_{m=l}^{λ} CB(m,l) 𝓛(m,l) dy_m;
        //       dx_l = Δ_l R_l + D ⊙ dy_l; dΔ^x_l = ⟨x_l, R_l⟩.
        for (int64_t l = 0; l <= lam; ++l) {
          const int64_t t = c0 + l;
          const bool xi = k.xi(bb, c, l);
          const double e_end = std::exp(a_end - A_(l));
          double ddx = 0.0;
          for (int64_t pp = 0; pp < k.P; ++pp) {
            double R = 0.0;
            if (xi) {
              double sb = 0.0;
              for (int64_t nn = 0; nn < k.N; ++nn)
                sb += it.ds[k.cs(bb, c, i, pp, nn)] * pr.B[k.bc(bb, t, g, nn)];
              R += e_end * sb;
            }
            for (int64_t m = l; m <= lam; ++m)
              R += f.CB[k.cb(bb, c, g, m, l)] * Lc(m, l) * it.dy[k.x(bb, c0 + m, i, pp)];
            const size_t ix = k.x(bb, t, i, pp);
            gr.dx[ix] = D_(l) * R + (pr.D ? pr.D[k.d(i, pp)] * it.dy[ix] : 0.0);
            ddx += pr.x[ix] * R;
          }
          it.ddt_x[k.hq(bb, i, c, l)] = ddx;
        }

        // (B-e) dCB(l,s) += 1[s≤l] σ(l,s) 𝓛(l,s) Δ_s ⟨dy_l, x_s⟩ (summed over the group's heads);
        // (B-g) W(l,s) = 1[s<l] CB(l,s) 𝓛(l,s) Δ_s ⟨dy_l, x_s⟩.
        std::fill(W.begin(), W.end(), 0.0);
        for (int64_t l = 0; l <= lam; ++l)
          for (int64_t s = 0; s <= l; ++s) {
            if (!k.sigma(bb, c, l, s)) continue;
            const double term = Lc(l, s) * D_(s) * dyx(l, s);
            it.dCB[k.cb(bb, c, g, l, s)] += term;
            if (s < l) W[static_cast<size_t>(l * k.Q + s)] = f.CB[k.cb(bb, c, g, l, s)] * term;
          }

        // (B-f) state parts of dB and dC (head i's share), and w_l, v_l of (B-g):
        //   dB^st_l = ξ E^end(l) Δ_l ds_cᵀ x_l,  w_l = ⟨dB^st_l, B_l⟩;
        //   dC^in_l = η E^start(l) P_cᵀ dy_l,    v_l = ⟨dC^in_l, C_l⟩.
        for (int64_t l = 0; l < k.Q; ++l) {
          w[static_cast<size_t>(l)] = 0.0;
          v[static_cast<size_t>(l)] = 0.0;
        }
        for (int64_t l = 0; l <= lam; ++l) {
          const int64_t t = c0 + l;
          const bool xi = k.xi(bb, c, l), eta = k.eta(bb, c, l);
          const double e_end = std::exp(a_end - A_(l)), e_start = std::exp(A_(l));
          for (int64_t nn = 0; nn < k.N; ++nn) {
            double dbst = 0.0, dcin = 0.0;
            for (int64_t pp = 0; pp < k.P; ++pp) {
              if (xi) dbst += it.ds[k.cs(bb, c, i, pp, nn)] * pr.x[k.x(bb, t, i, pp)];
              if (eta) dcin += Pst[k.cs(bb, c, i, pp, nn)] * it.dy[k.x(bb, t, i, pp)];
            }
            dbst *= e_end * D_(l);
            dcin *= e_start;
            gr.dB[k.bc(bb, t, g, nn)] += dbst;
            gr.dC[k.bc(bb, t, g, nn)] += dcin;
            w[static_cast<size_t>(l)] += dbst * pr.B[k.bc(bb, t, g, nn)];
            v[static_cast<size_t>(l)] += dcin * pr.C[k.bc(bb, t, g, nn)];
          }
        }

        // (B-g) ddA_k = Σ_{l≥k} Σ_{s<k} W(l,s) + Σ_{l<k} w_l + Σ_{l≥k} v_l + ρ_c
        // (k over valid positions; padding entries stay 0).
        const double rho = it.rho[k.hc(bb, i, c)];
        for (int64_t kk = 0; kk <= lam; ++kk) {
          double intra = 0.0, next = 0.0, prev = rho;
          for (int64_t l = kk; l <= lam; ++l)
            for (int64_t s = 0; s < kk; ++s) intra += W[static_cast<size_t>(l * k.Q + s)];
          for (int64_t l = 0; l < kk; ++l) next += w[static_cast<size_t>(l)];
          for (int64_t l = kk; l <= lam; ++l) prev += v[static_cast<size_t>(l)];
          const size_t e = k.hq(bb, i, c, kk);
          it.ddA_intra[e] = intra;
          it.ddA_next[e] = next;
          it.ddA_prev[e] = prev;
          it.ddA[e] = intra + next + prev;
        }

        // §3.2 naive form, kept as a cross-check: g_l = ⟨dy_l, ŷ_l⟩ − Δ_l dΔ^x_l with
        // ŷ = y − D ⊙ x, plus (Σ_l w_l + ρ_c) at l = λ_c; ddA = reverse cumsum of g.
        double wsum = 0.0;
        for (int64_t l = 0; l <= lam; ++l) wsum += w[static_cast<size_t>(l)];
        double run = 0.0;
        for (int64_t l = lam; l >= 0; --l) {
          const int64_t t = c0 + l;
          double gl = -D_(l) * it.ddt_x[k.hq(bb, i, c, l)];
          for (int64_t pp = 0; pp < k.P; ++pp) {
            const size_t ix = k.x(bb, t, i, pp);
            const double yhat = y[ix] - (pr.D ? pr.D[k.d(i, pp)] * pr.x[ix] : 0.0);
            gl += it.dy[ix] * yhat;
          }
          if (l == lam) gl += wsum + rho;
          run += gl;
          it.ddA_unstable[k.hq(bb, i, c, l)] = run;
        }
      }

  // (B-f) pair parts, per group: dB_s += Σ_l dCB(l,s) C_l; dC_l += Σ_s dCB(l,s) B_s.
  for (int64_t bb = 0; bb < k.b; ++bb)
    for (int64_t c = 0; c < k.Nc; ++c)
      for (int64_t g = 0; g < k.G; ++g) {
        const int64_t lam = k.lam(c), c0 = c * k.Q;
        for (int64_t l = 0; l <= lam; ++l)
          for (int64_t s = 0; s <= l; ++s) {
            const double d = it.dCB[k.cb(bb, c, g, l, s)];
            if (d == 0.0) continue;
            for (int64_t nn = 0; nn < k.N; ++nn) {
              gr.dB[k.bc(bb, c0 + s, g, nn)] += d * pr.C[k.bc(bb, c0 + l, g, nn)];
              gr.dC[k.bc(bb, c0 + l, g, nn)] += d * pr.B[k.bc(bb, c0 + s, g, nn)];
            }
          }
      }

  // (B-h) dΔ = dΔ^x + A ddA (kept for inspection); (B-h)+(B-i) through the cumsum adjoint.
  for (int64_t bb = 0; bb < k.b; ++bb)
    for (int64_t i = 0; i < k.H; ++i)
      for (int64_t c = 0; c < k.Nc; ++c)
        for (int64_t l = 0; l <= k.lam(c); ++l) {
          const size_t e = k.hq(bb, i, c, l);
          it.dt_delta[e] = it.ddt_x[e] + pr.A[i] * it.ddA[e];
        }
  std::vector<double> ddt_bias(static_cast<size_t>(k.H), 0.0);
  chunk_cumsum_bwd_from_increments(cumsum_shape(pr), dt_options(pr), pr.dt, pr.A, pr.dt_bias,
                                   it.ddA.data(), it.ddt_x.data(), gr.ddt.data(), gr.dA.data(),
                                   ddt_bias.data());
  if (pr.dt_bias) gr.ddt_bias = ddt_bias;
  gr.dA_abs.assign(static_cast<size_t>(k.H), 0.0);
  if (pr.dt_bias) gr.ddt_bias_abs.assign(static_cast<size_t>(k.H), 0.0);
  for (int64_t bb = 0; bb < k.b; ++bb)
    for (int64_t i = 0; i < k.H; ++i)
      for (int64_t c = 0; c < k.Nc; ++c)
        for (int64_t l = 0; l <= k.lam(c); ++l) {
          gr.dA_abs[i] += std::fabs(Dl[k.hq(bb, i, c, l)] * it.ddA[k.hq(bb, i, c, l)]);
          if (pr.dt_bias) gr.ddt_bias_abs[i] += std::fabs(gr.ddt[k.dt(bb, c * k.Q + l, i)]);
        }
  return gr;
}

}  // namespace ssd::ref
