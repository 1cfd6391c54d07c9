// chunk_scan_bwd_ddA (math B-g, the stable form of §3.2): the gradient w.r.t. the log-decay
// increments a_k = Δ_k A_h, per (batch b, chunk c, head h), valid positions k <= λ_c:
//
//   ddA_k = rn_fp32((intra_k + next_k) + prev_k)        (0 at padding positions k > λ_c)
//   intra_k = Σ_{r = ⌊k/64⌋}^{⌊λ/64⌋} T_r(k)              r increasing from +0.0 (T_r: chunk_scan_bwd_ddA_intra)
//   next_k  = Σ_{l < k} w_l                              l increasing from +0.0 (w: chunk_scan_bwd_dx)
//   prev_k  = (Σ_{l = λ}^{k} v_l) + ρ_c                  l decreasing from +0.0, then + ρ (v: chunk_scan_bwd_dx)
//   ρ_c     = θ_c · exp(𝒜_c(λ_c)) · Σ_j rho[b, h, c, j]  j increasing from +0.0 (fp64 32-element block sums
//                                                        of state_passing_bwd; θ as there)
// It also finishes dΔˣ (the gradient w.r.t. Δ through x's weight) from its two parts:
//
//   dΔˣ_k = rn_fp32(Σ_{r = ⌊k/64⌋}^{⌊λ/64⌋} U_r(k) + dΔˣst_k)   r increasing from +0.0, in fp64
//
// (U_r: chunk_scan_bwd_ddA_intra's exact-product intra part; dΔˣst: chunk_scan_bwd_dx's state part,
// read from ddt_x and overwritten there by the same thread).
// Every sum, ρ's product and the combination run in fp64 (the fp32 inputs convert exactly), and
// ddA_k is rounded to fp32 once: the scans span up to Q terms and ρ's up to p*n/32 slots, whose fp32
// rounding dominated dA's error (issue 11). No term is a difference, so there is no cancellation
// (unlike the naive reverse cumsum of §3.2).
// Fast mode reads the atomically accumulated intra, dtx_intra (b, h, c, Q) and rho (b, h, c) instead.
//
// One block owns one (b, c, h) at a time (grid-stride over b * nchunks * nheads); the three
// sequential scans (next, prev, ρ) run on lanes of different warps; the per-position intra sums and
// the combination run one thread per position. BLOCK (64, 128, 256) only moves work between
// threads: every sum above is a fixed sequence, so the bits do not depend on it or on the grid.
#pragma once

#include "ssd/backward_params.cuh"
#include "ssd/primitives/spec.cuh"

namespace ssd_kernels {

template <class Spec>
__device__ void chunk_scan_bwd_ddA(const ChunkScanBwdDdaParams& p) {
  SSD_BLOCK_SPEC_NAMES(Spec, bwd_geom::ddA_tile_problem);  // Q, BLOCK
  static_assert(BLOCK % 64 == 0, "BLOCK must hold at least two warps");
  constexpr int R = (Q + kIntraRowGroup - 1) / kIntraRowGroup;
  __shared__ float s_w[Q], s_v[Q];
  __shared__ double s_next[Q], s_prev[Q];
  __shared__ double s_rho;
  const int tid = threadIdx.x;
  const long long work = p.batch * p.nchunks * p.nheads;
  for (long long item = blockIdx.x; item < work; item += gridDim.x) {
    const long long h = item % p.nheads, bc = item / p.nheads;
    const long long c = bc % p.nchunks, b = bc / p.nchunks;
    const long long t0 = c * Q;
    const int valid = int(p.seqlen - t0 < Q ? p.seqlen - t0 : Q);  // λ_c = valid - 1
    const long long base = p.dA_cumsum.offset(b, h, c);
    const long long row = (b * p.nheads + h) * p.nchunks + c;  // (b, h, c) in the workspace layouts
    for (int l = tid; l < Q; l += BLOCK) {
      s_w[l] = l < valid ? p.w[base + l] : 0.f;
      s_v[l] = l < valid ? p.v[base + l] : 0.f;
    }
    __syncthreads();
    if (tid == 0) {  // next: exclusive prefix of w
      double acc = 0.0;
      for (int l = 0; l < valid; ++l) {
        s_next[l] = acc;
        acc = __dadd_rn(acc, double(s_w[l]));
      }
    } else if (tid == 32) {  // prev without ρ: inclusive suffix of v
      double acc = 0.0;
      for (int l = valid - 1; l >= 0; --l) {
        acc = __dadd_rn(acc, double(s_v[l]));
        s_prev[l] = acc;
      }
    } else if (tid == BLOCK - 1) {  // ρ_c
      double acc;
      if (Spec::kDeterministic) {
        acc = 0.0;
        const double* slots = p.rho_slots + row * p.rho_slots_per_chunk;
        for (long long j = 0; j < p.rho_slots_per_chunk; ++j) acc = __dadd_rn(acc, slots[j]);
      } else {
        acc = double(p.rho[row]);
      }
      float carry = expf(p.dA_cumsum.data[base + valid - 1]);
      if (Spec::kSeqIdx) {
        const int id_last = p.seq_idx(b, t0 + valid - 1);
        const int id_prev = c > 0 ? p.seq_idx(b, t0 - 1) : 0;
        if (id_last != id_prev) carry = 0.f;
      }
      s_rho = __dmul_rn(double(carry), acc);
    }
    __syncthreads();
    const double rho = s_rho;
    for (int k = tid; k < Q; k += BLOCK) {
      float out = 0.f;
      if (k < valid) {
        double intra, dtx;
        if (Spec::kDeterministic) {
          intra = 0.0;
          dtx = 0.0;
          const long long at = row * (long long)(R * Q) + k;
          for (int r = k / kIntraRowGroup; r * kIntraRowGroup < valid; ++r) {
            intra = __dadd_rn(intra, double(p.intra[at + r * Q]));
            dtx = __dadd_rn(dtx, double(p.dtx_intra[at + r * Q]));
          }
        } else {
          intra = double(p.intra[row * Q + k]);
          dtx = double(p.dtx_intra[row * Q + k]);
        }
        out = __double2float_rn(__dadd_rn(__dadd_rn(intra, s_next[k]), __dadd_rn(s_prev[k], rho)));
        p.ddt_x[base + k] = __double2float_rn(__dadd_rn(dtx, double(p.ddt_x[base + k])));
      }
      p.ddA[base + k] = out;
    }
    __syncthreads();  // the shared arrays are reused by the next item
  }
}

}  // namespace ssd_kernels
