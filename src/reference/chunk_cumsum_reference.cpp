#include "reference/chunk_cumsum_reference.h"

#include <vector>

namespace ssd::ref {

int64_t num_chunks(const CumsumShape& s) { return (s.seqlen + s.chunk - 1) / s.chunk; }

namespace {

// v = sp(u) if softplus else u.
double pre_clamp(const DtOptions& o, double u) {
  if (!o.softplus) return u;
  return u <= 20.0 ? std::log1p(std::exp(u)) : u;
}

}  // namespace

double dt_preprocess(const DtOptions& o, double dt, double bias) {
  const double u = dt + (o.has_bias ? bias : 0.0);
  const double v = pre_clamp(o, u);
  return std::fmin(std::fmax(v, o.lo), o.hi);
}

double dt_preprocess_bwd(const DtOptions& o, double dt, double bias, double dDelta) {
  const double u = dt + (o.has_bias ? bias : 0.0);
  const double v = pre_clamp(o, u);
  const double dv = (v >= o.lo && v <= o.hi) ? dDelta : 0.0;
  if (o.softplus && u <= 20.0) return dv / (1.0 + std::exp(-u));
  return dv;
}

void chunk_cumsum_fwd(const CumsumShape& s, const DtOptions& o, const double* dt, const double* A,
                      const double* dt_bias, double* dt_out, double* dA_cumsum) {
  const int64_t nc = num_chunks(s), Q = s.chunk, L = s.seqlen, H = s.nheads;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t i = 0; i < H; ++i)
      for (int64_t c = 0; c < nc; ++c) {
        double run = 0.0;
        for (int64_t l = 0; l < Q; ++l) {
          const int64_t t = c * Q + l;
          const int64_t o_idx = ((b * H + i) * nc + c) * Q + l;
          double delta = 0.0;
          if (t < L)
            delta = dt_preprocess(o, dt[(b * L + t) * H + i], o.has_bias ? dt_bias[i] : 0.0);
          run += delta * A[i];
          dt_out[o_idx] = delta;
          dA_cumsum[o_idx] = run;
        }
      }
}

void chunk_cumsum_bwd_from_increments(const CumsumShape& s, const DtOptions& o, const double* dt,
                                      const double* A, const double* dt_bias, const double* ddA,
                                      const double* ddt_out, double* ddt, double* dA,
                                      double* ddt_bias) {
  const int64_t nc = num_chunks(s), Q = s.chunk, L = s.seqlen, H = s.nheads;
  for (int64_t i = 0; i < H; ++i) {
    dA[i] = 0.0;
    if (ddt_bias) ddt_bias[i] = 0.0;
  }
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t i = 0; i < H; ++i) {
      const double bias = o.has_bias ? dt_bias[i] : 0.0;
      for (int64_t t = 0; t < L; ++t) {
        const int64_t c = t / Q, l = t % Q;
        const int64_t o_idx = ((b * H + i) * nc + c) * Q + l;
        const double x = dt[(b * L + t) * H + i];
        const double delta = dt_preprocess(o, x, bias);
        const double g = ddA[o_idx];
        dA[i] += delta * g;
        const double du = dt_preprocess_bwd(o, x, bias, ddt_out[o_idx] + A[i] * g);
        ddt[(b * L + t) * H + i] = du;
        if (ddt_bias && o.has_bias) ddt_bias[i] += du;
      }
    }
}

void chunk_cumsum_bwd(const CumsumShape& s, const DtOptions& o, const double* dt, const double* A,
                      const double* dt_bias, const double* ddA_cumsum, const double* ddt_out,
                      double* ddt, double* dA, double* ddt_bias) {
  const int64_t nc = num_chunks(s), Q = s.chunk, L = s.seqlen, H = s.nheads;
  // g_k = Σ_{l >= k, l valid} ddA_cumsum(l): reverse cumsum over the valid positions; g = 0 at
  // padding (never read).
  std::vector<double> g(static_cast<size_t>(s.batch * H * nc * Q), 0.0);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t i = 0; i < H; ++i)
      for (int64_t c = 0; c < nc; ++c) {
        double run = 0.0;
        for (int64_t l = Q - 1; l >= 0; --l) {
          const int64_t o_idx = ((b * H + i) * nc + c) * Q + l;
          if (c * Q + l < L) run += ddA_cumsum[o_idx];
          g[o_idx] = (c * Q + l < L) ? run : 0.0;
        }
      }
  chunk_cumsum_bwd_from_increments(s, o, dt, A, dt_bias, g.data(), ddt_out, ddt, dA, ddt_bias);
}

}  // namespace ssd::ref
