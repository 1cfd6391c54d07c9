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
// One warp owns one (b, c, h) at a time (BLOCK / 32 warps per block, each grid-striding over
// b * nchunks * nheads on its own: no block barriers). The warp issues the loads of w, v, the first
// round of ρ slots and A(λ) together, stores w and v (reversed) as fp64 in its shared rows and
// finishes dΔˣ (one lane per position) while they land; then lanes 0, 1, 2 walk next, prev and
// the ρ sum in lockstep (one instruction stream: two adds per 16-byte shared read, the scans'
// values written in place over their inputs), the ρ slots streaming through a shared buffer that
// the whole warp refills, loading the next round before the current one is walked; last, one lane
// per position sums intra and combines. BLOCK (64, 128, 256) only sets how many items a block
// holds: every sum above is a fixed sequence, so the bits do not depend on it or on the grid.
#pragma once

#include "ssd/backward_params.cuh"
#include "ssd/primitives/spec.cuh"

namespace ssd_kernels {

template <class Spec>
__device__ void chunk_scan_bwd_ddA(const ChunkScanBwdDdaParams& p) {
  SSD_BLOCK_SPEC_NAMES(Spec, bwd_geom::ddA_tile_problem);  // Q, BLOCK
  constexpr int WARPS = bwd_geom::ddA_items_per_block(BLOCK);
  constexpr int WARP_DOUBLES = bwd_geom::ddA_warp_doubles(Q);
  constexpr int ROUND = bwd_geom::ddA_rho_round();
  constexpr int R = (Q + kIntraRowGroup - 1) / kIntraRowGroup;
  constexpr int PER_LANE = Q / 32;                    // positions k = lane + 32 m, m < PER_LANE
  constexpr int GROUP = PER_LANE < 4 ? PER_LANE : 4;  // positions per lane whose loads fly together
  static_assert(Q % 64 == 0 && PER_LANE % GROUP == 0, "Q must be a multiple of 64");
  static_assert(ROUND % 32 == 0 && WARP_DOUBLES % 2 == 0, "16-byte aligned rows, whole-warp refills");
  static_assert(bwd_geom::ddA_smem_bytes(Q, BLOCK) <= bwd_geom::kMaxStaticSmem, "shared rows must fit");
  __shared__ __align__(16) double s_rows[WARPS * WARP_DOUBLES];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  double* const s_w = s_rows + warp * WARP_DOUBLES;  // [Q] w_l as fp64, then next_l in place
  double* const s_v = s_w + (Q + 2);                 // [Q] v_{λ-i} as fp64, then prev_{λ-i} in place
  double* const s_rho = s_v + (Q + 2);               // [ROUND] the ρ slots of the current round
  const long long S = Spec::kDeterministic ? p.rho_slots_per_chunk : 0;  // ρ's sequential adds
  const long long work = p.batch * p.nchunks * p.nheads;
  for (long long item = (long long)blockIdx.x * WARPS + warp; item < work; item += (long long)gridDim.x * WARPS) {
    const long long h = item % p.nheads, bc = item / p.nheads;
    const long long c = bc % p.nchunks, b = bc / p.nchunks;
    const long long t0 = c * Q;
    const int valid = int(p.seqlen - t0 < Q ? p.seqlen - t0 : Q);  // λ_c = valid - 1
    const long long base = p.dA_cumsum.offset(b, h, c);
    const long long row = (b * p.nheads + h) * p.nchunks + c;  // (b, h, c) in the workspace layouts

    // The loads the scans wait for, all issued before any is used.
    float w[PER_LANE], v[PER_LANE];
#pragma unroll
    for (int m = 0; m < PER_LANE; ++m) {
      const int l = lane + 32 * m;
      w[m] = l < valid ? p.w[base + l] : 0.f;
      v[m] = l < valid ? p.v[base + l] : 0.f;
    }
    double rho_next[ROUND / 32];  // the next round of ρ slots, in flight while a round is walked
    const double* slots = Spec::kDeterministic ? p.rho_slots + row * S : nullptr;
    auto load_rho_round = [&](long long j0) {
#pragma unroll
      for (int t = 0; t < ROUND / 32; ++t) {
        const long long j = j0 + lane + 32 * t;
        rho_next[t] = j < S ? slots[j] : 0.0;
      }
    };
    if (Spec::kDeterministic) load_rho_round(0);
    float carry = expf(p.dA_cumsum.data[base + valid - 1]);  // ρ's factor θ_c · exp(𝒜_c(λ_c))
    if (Spec::kSeqIdx) {
      const int id_last = p.seq_idx(b, t0 + valid - 1);
      const int id_prev = c > 0 ? p.seq_idx(b, t0 - 1) : 0;
      if (id_last != id_prev) carry = 0.f;
    }
    const float rho_fast = Spec::kDeterministic ? 0.f : p.rho[row];
#pragma unroll
    for (int m = 0; m < PER_LANE; ++m) {
      const int l = lane + 32 * m;
      if (l < valid) {
        s_w[l] = double(w[m]);
        s_v[valid - 1 - l] = double(v[m]);
      }
    }

    // dΔˣ (independent of the scans): one lane per position, GROUP positions' loads at a time.
#pragma unroll
    for (int m0 = 0; m0 < PER_LANE; m0 += GROUP) {
      float u[GROUP][R], st[GROUP];
#pragma unroll
      for (int g = 0; g < GROUP; ++g) {
        const int k = lane + 32 * (m0 + g);
        st[g] = 0.f;
#pragma unroll
        for (int r = 0; r < R; ++r) u[g][r] = 0.f;
        if (k < valid) {
          st[g] = p.ddt_x[base + k];
          if (Spec::kDeterministic) {
            const long long at = row * (long long)(R * Q) + k;
#pragma unroll
            for (int r = 0; r < R; ++r)
              if (r >= k / kIntraRowGroup && r * kIntraRowGroup < valid) u[g][r] = p.dtx_intra[at + r * Q];
          } else {
            u[g][0] = p.dtx_intra[row * Q + k];
          }
        }
      }
#pragma unroll
      for (int g = 0; g < GROUP; ++g) {
        const int k = lane + 32 * (m0 + g);
        if (k < valid) {
          double dtx;
          if (Spec::kDeterministic) {
            dtx = 0.0;  // r increasing from +0.0
#pragma unroll
            for (int r = 0; r < R; ++r)
              if (r >= k / kIntraRowGroup && r * kIntraRowGroup < valid) dtx = __dadd_rn(dtx, double(u[g][r]));
          } else {
            dtx = double(u[g][0]);
          }
          p.ddt_x[base + k] = __double2float_rn(__dadd_rn(dtx, double(st[g])));
        }
      }
    }

    // The three sequential sums, lane 0: next (exclusive prefix of w, stored before each add),
    // lane 1: prev without ρ (inclusive suffix of v: v is stored reversed, so it walks forward),
    // lane 2: the ρ slots. Rounds of ROUND steps; each lane stops at its own length.
    const long long steps = S > valid ? S : valid;
    double acc = 0.0;
    for (long long j0 = 0; j0 < steps; j0 += ROUND) {
      if (Spec::kDeterministic) {
#pragma unroll
        for (int t = 0; t < ROUND / 32; ++t) s_rho[lane + 32 * t] = rho_next[t];
        if (j0 + ROUND < S) load_rho_round(j0 + ROUND);
      }
      __syncwarp();
      if (lane < 3) {
        const long long left = (lane == 2 ? S : valid) - j0;
        const int count = left < ROUND ? int(left) : ROUND;  // <= 0: this lane's sum is done
        double* const seq = lane == 2 ? s_rho : (lane == 0 ? s_w : s_v) + (count > 0 ? j0 : 0);
#pragma unroll 4
        for (int i = 0; i < count; i += 2) {
          const double2 x = *reinterpret_cast<const double2*>(seq + i);
          const double a1 = __dadd_rn(acc, x.x);
          const double a2 = i + 1 < count ? __dadd_rn(a1, x.y) : a1;
          if (lane < 2) *reinterpret_cast<double2*>(seq + i) = lane == 0 ? make_double2(acc, a1) : make_double2(a1, a2);
          acc = a2;
        }
      }
      __syncwarp();
    }
    const double rho_sum = Spec::kDeterministic ? __shfl_sync(0xffffffffu, acc, 2) : double(rho_fast);
    const double rho = __dmul_rn(double(carry), rho_sum);

    // intra and the combination: one lane per position.
#pragma unroll
    for (int m0 = 0; m0 < PER_LANE; m0 += GROUP) {
      float t[GROUP][R];
#pragma unroll
      for (int g = 0; g < GROUP; ++g) {
        const int k = lane + 32 * (m0 + g);
#pragma unroll
        for (int r = 0; r < R; ++r) t[g][r] = 0.f;
        if (k < valid) {
          if (Spec::kDeterministic) {
            const long long at = row * (long long)(R * Q) + k;
#pragma unroll
            for (int r = 0; r < R; ++r)
              if (r >= k / kIntraRowGroup && r * kIntraRowGroup < valid) t[g][r] = p.intra[at + r * Q];
          } else {
            t[g][0] = p.intra[row * Q + k];
          }
        }
      }
#pragma unroll
      for (int g = 0; g < GROUP; ++g) {
        const int k = lane + 32 * (m0 + g);
        float out = 0.f;
        if (k < valid) {
          double intra;
          if (Spec::kDeterministic) {
            intra = 0.0;  // r increasing from +0.0
#pragma unroll
            for (int r = 0; r < R; ++r)
              if (r >= k / kIntraRowGroup && r * kIntraRowGroup < valid) intra = __dadd_rn(intra, double(t[g][r]));
          } else {
            intra = double(t[g][0]);
          }
          out = __double2float_rn(__dadd_rn(__dadd_rn(intra, s_w[k]), __dadd_rn(s_v[valid - 1 - k], rho)));
        }
        p.ddA[base + k] = out;
      }
    }
    __syncwarp();  // the shared rows are refilled by this warp's next item
  }
}

}  // namespace ssd_kernels
