// Float64 CPU reference ("oracle") of mamba_chunk_scan_combined: forward and backward
// (docs: /work/shared/docs/ssd-math.md, §1 shapes/options, §2 forward, §3 backward).
//
// This is the exact math in float64: no exponent clamps, no reduced-precision intermediates.
// Readable loops over (β, c, i, l, ...), not optimized. Two independent forwards:
//   forward_naive   : the per-step recurrence of §2.1;
//   forward_chunked : the upstream stages F1..F5 of §2.3 (also returns the intermediates).
// backward implements §3.1 (B-a)..(B-i) in chunked form with the stable ddA of §3.2.
//
// Layouts (all contiguous, row-major, mamba_ssm's shapes):
//   x, z, out, out_x, dx, dz, dy    (b, L, h, p)      dt, ddt         (b, L, h)
//   B, C, dB, dC                    (b, L, g, n)      A, dA           (h)
//   D, dD                           (h) or (h, p)     dt_bias         (h)
//   initial_states, final_states    (b, h, p, n)      seq_idx         (b, L) int32
//   dt_out, dA_cumsum, ddt_x, ddA*  (b, h, Nc, Q)     rho             (b, h, Nc)
//   states s, P, dP, ds             (b, Nc, h, p, n)  CB, dCB         (b, Nc, g, Q, Q)
// Head i uses group κ(i) = i / (h/g).
#ifndef SSD_REFERENCE_SSD_REFERENCE_H
#define SSD_REFERENCE_SSD_REFERENCE_H

#include <cmath>
#include <cstdint>
#include <vector>

#include "reference/chunk_cumsum_reference.h"

namespace ssd::ref {

struct SsdSizes {
  int64_t batch = 1;    // b
  int64_t seqlen = 1;   // L
  int64_t nheads = 1;   // h
  int64_t headdim = 1;  // p
  int64_t ngroups = 1;  // g, h % g == 0
  int64_t dstate = 1;   // n
  int32_t chunk = 1;    // Q
  int64_t nchunks() const { return (seqlen + chunk - 1) / chunk; }  // Nc = ceil(L / Q)
};

// Inputs of one mamba_chunk_scan_combined call. Pointers are borrowed (not owned). Optional
// inputs are nullptr when absent. `dt_bias != nullptr` means "has bias".
struct SsdProblem {
  SsdSizes sz;
  const double* x = nullptr;   // (b, L, h, p), required
  const double* dt = nullptr;  // (b, L, h), required
  const double* A = nullptr;   // (h), required
  const double* B = nullptr;   // (b, L, g, n), required
  const double* C = nullptr;   // (b, L, g, n), required
  const double* D = nullptr;   // (h), or (h, p) when D_per_headdim
  bool D_per_headdim = false;
  const double* z = nullptr;               // (b, L, h, p)
  const double* dt_bias = nullptr;         // (h)
  const double* initial_states = nullptr;  // (b, h, p, n)
  const int32_t* seq_idx = nullptr;        // (b, L): ids >= 0, non-decreasing along L
  bool dt_softplus = false;
  double dt_limit_lo = 0.0;  // default (0, inf) clamps negative Δ to 0 (§1.3, §8.1)
  double dt_limit_hi = INFINITY;
};

CumsumShape cumsum_shape(const SsdProblem&);  // {b, L, h, Q}
DtOptions dt_options(const SsdProblem&);      // {dt_softplus, dt_bias != nullptr, lo, hi}

// Throws std::invalid_argument on: non-positive sizes, h % g != 0, a missing required
// pointer, seq_idx ids < 0 or decreasing along L (§1.3 requirements, §8.4).
void validate(const SsdProblem&);

struct SsdForwardResult {
  std::vector<double> out;           // (b, L, h, p)
  std::vector<double> out_x;         // y = out before the z gate (b, L, h, p); empty without z
  std::vector<double> final_states;  // S_fin = H_{L-1} (b, h, p, n), always written
  // Intermediates of the chunked algorithm (empty from forward_naive):
  std::vector<double> dt_out;     // Δ (b, h, Nc, Q), 0 at padding
  std::vector<double> dA_cumsum;  // 𝒜 (b, h, Nc, Q)
  std::vector<double> states;     // s, chunk-local end states (b, Nc, h, p, n)
  std::vector<double> prev_states;  // P_c = S_{c-1}, state entering chunk c (b, Nc, h, p, n)
  std::vector<double> CB;         // σ-masked C·Bᵀ, full square (b, Nc, g, Q, Q)
};

// §2.1, per (β, i), a_t = Δ_t A_i, ε_t = [q(t) = q(t-1)] (q(-1) := 0, q ≡ 0 without seq_idx),
// H_{-1} = init (0 if absent):
//   H_t = ε_t e^{a_t} H_{t-1} + Δ_t x_t B_tᵀ;  y_t = H_t C_t + D ⊙ x_t;
//   out_t = y_t ⊙ silu(z_t) (out = y without z);  S_fin = H_{L-1}.
SsdForwardResult forward_naive(const SsdProblem&);

// §2.3, stages F1..F5 (formulas at the stage functions below). Returns every field.
SsdForwardResult forward_chunked(const SsdProblem&);

// --- Forward stages (§2.3). Masks σ, ξ, η, θ of §1.3; λ_c = last valid position of chunk c. ---

// F2: s_c = Σ_{l=0}^{λ_c} ξ_c(l) exp(𝒜_c(Q-1) − 𝒜_c(l)) Δ_l x_l B_lᵀ   (per β, c, i).
void chunk_state_fwd(const SsdProblem&, const double* dt_out, const double* dA_cumsum,
                     double* states);

// F3: S_{-1} = init (0 if absent); S_c = θ_c e^{𝒜_c(Q-1)} S_{c-1} + s_c; P_c = S_{c-1};
//     final_states = S_{Nc-1}.
void state_passing_fwd(const SsdProblem&, const double* states, const double* dA_cumsum,
                       double* prev_states, double* final_states);

// F4: CB_c(l, s) = σ_c(l, s) C_{cQ+l} · B_{cQ+s}  per group, full Q×Q square (0 where l or s
//     is padding).
void bmm_chunk_fwd(const SsdProblem&, double* CB);

// F5: ŷ_l = Σ_{s≤l} CB_c(l,s) exp(𝒜_c(l) − 𝒜_c(s)) Δ_s x_s + η_c(l) e^{𝒜_c(l)} P_c C_l;
//     y_l = ŷ_l + D ⊙ x_l;  out_l = y_l ⊙ silu(z_l).  out_x (may be nullptr) receives y.
void chunk_scan_fwd(const SsdProblem&, const double* CB, const double* dt_out,
                    const double* dA_cumsum, const double* prev_states, double* out,
                    double* out_x);

// --- Backward (§3) ---

// Backward intermediates (the upstream stage outputs of §3.3), all float64.
struct SsdBackwardIntermediates {
  std::vector<double> dy;         // dout ⊙ silu(z) (b, L, h, p)                          (B-a)
  std::vector<double> dP;         // dP_c = Σ_l η E^start dy_l C_lᵀ (b, Nc, h, p, n)      (B-b)
  std::vector<double> ds;         // ds_c = dS_c (b, Nc, h, p, n)                          (B-c)
  std::vector<double> rho;        // ρ_c = θ_c e^{𝒜_c(Q-1)} ⟨P_c, dS_c⟩_F (b, h, Nc)      (B-c)
  std::vector<double> ddt_x;      // dΔ^x_l = ⟨x_l, R_l⟩ (b, h, Nc, Q)                    (B-d)
  std::vector<double> dCB;        // (b, Nc, g, Q, Q), lower triangle incl. diagonal      (B-e)
  std::vector<double> ddA_intra;  // Σ_{l≥k} Σ_{s<k} W(l,s) (b, h, Nc, Q)                 (B-g)
  std::vector<double> ddA_next;   // Σ_{l<k} w_l
  std::vector<double> ddA_prev;   // Σ_{l≥k} v_l + ρ_c
  std::vector<double> ddA;        // intra + next + prev: gradient w.r.t. a_k = Δ_k A_i
  std::vector<double> ddA_unstable;  // §3.2 naive form (reverse cumsum of g_l), cross-check
  std::vector<double> dt_delta;   // dΔ_k = dΔ^x_k + A_i ddA_k (b, h, Nc, Q)             (B-h)
};

struct SsdGradients {
  std::vector<double> dx;               // (b, L, h, p)
  std::vector<double> ddt;              // (b, L, h)
  std::vector<double> dA;               // (h)
  std::vector<double> dB;               // (b, L, g, n)
  std::vector<double> dC;               // (b, L, g, n)
  std::vector<double> dD;               // (h) or (h, p); empty without D
  std::vector<double> dz;               // (b, L, h, p); empty without z
  std::vector<double> ddt_bias;         // (h); empty without dt_bias
  std::vector<double> dinitial_states;  // (b, h, p, n); empty without initial_states
  // The scale of each whole-sequence sum: Σ |term| over the terms the gradient adds (dA: Δ_k ddA_k;
  // dD: dy ⊙ x; ddt_bias: the per-position ddt). The error of any order of summation of terms with
  // relative error ε is at most about ε times this, however much the terms cancel; tests judge
  // these sums relative to it (relative L2 of the sum alone is unbounded when the sum cancels).
  std::vector<double> dA_abs, dD_abs, ddt_bias_abs;
  SsdBackwardIntermediates inter;
};

// Gradients of ℓ with ∂ℓ/∂out = dout (b, L, h, p, required) and ∂ℓ/∂final_states =
// dfinal_states (b, h, p, n, nullptr = 0), by §3.1 (chunked, stable ddA):
//   (B-a) dy = dout ⊙ silu(z); dz = dout ⊙ y ⊙ σ(z)(1 + z(1 − σ(z))); dD = Σ_{β,t} dy ⊙ x
//         (summed over p too for D of shape (h));
//   (B-b) dP_c = Σ_l η_c(l) e^{𝒜_c(l)} dy_l C_lᵀ;
//   (B-c) dS_{Nc-1} = dfinal; ds_c = dS_c; ρ_c = θ_c e^{𝒜_c(Q-1)} ⟨P_c, dS_c⟩;
//         dS_{c-1} = θ_c e^{𝒜_c(Q-1)} dS_c + dP_c; dinit = dS_{-1};
//   (B-d) R_l = ξ E^end(l) ds_c B_l + Σ_{m=l}^{λ} CB(m,l) 𝓛(m,l) dy_m; dx_l = Δ_l R_l + D ⊙ dy_l;
//         dΔ^x_l = ⟨x_l, R_l⟩;
//   (B-e) dCB(l,s) = Σ_{i∈group} 1[s≤l] σ(l,s) 𝓛(l,s) Δ_s ⟨dy_l, x_s⟩;
//   (B-f) dB_s = Σ_i ξ E^end(s) Δ_s ds_cᵀ x_s + Σ_l dCB(l,s) C_l;
//         dC_l = Σ_i η E^start(l) P_cᵀ dy_l + Σ_s dCB(l,s) B_s;
//   (B-g) ddA_k = Σ_{l≥k} Σ_{s<k} W(l,s) + Σ_{l<k} w_l + Σ_{l≥k} v_l + ρ_c;
//   (B-h) dΔ = dΔ^x + A ddA; dA = Σ Δ ddA;  (B-i) dt preprocessing adjoint (chunk_cumsum_bwd).
SsdGradients backward(const SsdProblem&, const double* dout, const double* dfinal_states);

}  // namespace ssd::ref

#endif  // SSD_REFERENCE_SSD_REFERENCE_H
