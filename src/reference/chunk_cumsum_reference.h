// Float64 CPU reference ("oracle") of the SSD chunk cumsum stage (math F1 and B12,
// docs: /work/shared/docs/ssd-math.md §1.3, §2.3, §3.1 (B-h), (B-i)).
//
// Straightforward loops, no optimization. Every array is contiguous (row-major) in the
// shape order given next to it.
#ifndef SSD_REFERENCE_CHUNK_CUMSUM_REFERENCE_H
#define SSD_REFERENCE_CHUNK_CUMSUM_REFERENCE_H

#include <cmath>
#include <cstdint>

namespace ssd::ref {

struct CumsumShape {
  int64_t batch, seqlen, nheads;
  int32_t chunk;
};

// dt preprocessing options (§1.3). The default (lo, hi) = (0, inf) is NOT a no-op: without
// softplus, negative dt (+ bias) becomes Δ = 0 with zero gradient.
struct DtOptions {
  bool softplus = false;
  bool has_bias = false;
  double lo = 0.0;
  double hi = INFINITY;
};

// Nc = ceil(L / Q).
int64_t num_chunks(const CumsumShape&);

// Scalar dt preprocessing (§1.3):
//   u = dt + bias (bias only if has_bias);  v = sp(u) if softplus else u, sp(u) = log1p(exp(u))
//   for u <= 20 and u otherwise;  Δ = min(max(v, lo), hi).
double dt_preprocess(const DtOptions&, double dt, double bias);

// Adjoint of dt_preprocess w.r.t. dt (equal to the adjoint w.r.t. bias), given dΔ (§3.1 B-i):
//   dv = dΔ · 1[lo <= v <= hi];  du = dv · σ(u) if softplus and u <= 20, else du = dv.
double dt_preprocess_bwd(const DtOptions&, double dt, double bias, double dDelta);

// F1 (§2.3), per (β, head i, chunk c, position l), t = cQ + l:
//   Δ_t = dt_preprocess(dt[β,t,i], dt_bias[i]) for t < L, 0 for padding t >= L;
//   dt_out[β,i,c,l] = Δ_t;   dA_cumsum[β,i,c,l] = Σ_{k<=l} Δ_{cQ+k} · A[i]
// (padding positions keep the running value since Δ = 0 there).
// dt (b, L, h); A (h); dt_bias (h) or nullptr (read only when has_bias);
// dt_out, dA_cumsum (b, h, Nc, Q).
void chunk_cumsum_fwd(const CumsumShape&, const DtOptions&, const double* dt, const double* A,
                      const double* dt_bias, double* dt_out, double* dA_cumsum);

// Adjoint of chunk_cumsum_fwd restricted to its VALID outputs (t < L): entries of ddA_cumsum
// and ddt_out at padding positions t >= L are ignored (upstream never reads them; they are
// not meaningful outputs). Per chunk, with a_k = Δ_k A_i:
//   g_k  = Σ_{l >= k, l valid} ddA_cumsum(l)         (gradient w.r.t. the increment a_k)
//   dΔ_k = ddt_out_k + A_i · g_k
//   dA_i = Σ_{β, c, k valid} Δ_k · g_k
//   ddt  = dt_preprocess_bwd(dΔ);   ddt_bias_i = Σ_{β,t} ddt[β,t,i]
// ddA_cumsum, ddt_out (b, h, Nc, Q); ddt (b, L, h); dA (h); ddt_bias (h) or nullptr
// (written as zeros when !has_bias and non-null). All outputs are overwritten.
void chunk_cumsum_bwd(const CumsumShape&, const DtOptions&, const double* dt, const double* A,
                      const double* dt_bias, const double* ddA_cumsum, const double* ddt_out,
                      double* ddt, double* dA, double* ddt_bias);

// Same adjoint as chunk_cumsum_bwd, but given g = ddA directly: the gradient w.r.t. the
// increments a_k = Δ_k A_i (this is what upstream's `_chunk_cumsum_bwd` receives, after the
// host-side reverse cumsum of §3.3 B9/B11):
//   dΔ_k = ddt_out_k + A_i · ddA_k;  dA_i = Σ_{β,c,k valid} Δ_k ddA_k;  ddt = dt_preprocess_bwd(dΔ);
//   ddt_bias_i = Σ_{β,t} ddt[β,t,i].   Padding entries of ddA and ddt_out are ignored.
void chunk_cumsum_bwd_from_increments(const CumsumShape&, const DtOptions&, const double* dt,
                                      const double* A, const double* dt_bias, const double* ddA,
                                      const double* ddt_out, double* ddt, double* dA,
                                      double* ddt_bias);

}  // namespace ssd::ref

#endif  // SSD_REFERENCE_CHUNK_CUMSUM_REFERENCE_H
