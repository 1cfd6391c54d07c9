// The weights of a chunk's state (chunk_state_fwd's w_l, math F2), for the state passes that
// overlap them with their mma (chunk_state_passing.cuh and its sm_90a kernel):
//
//   w_l = [seq_idx(cQ + l) == seq_idx(cQ + λ_c)] · exp(min(𝒜_c(Q−1) − 𝒜_c(l), 0)) · Δ_l   for l ≤ λ_c,
//   w_l = 0                                                                        for λ_c < l < Q
//
// (__expf, the fp32 product rounded once: the expressions of chunk_state_fwd, so the bits are its.)
// In two halves: fetch, the global loads into registers (issued a chunk ahead), then put, w into
// shared memory. Thread t of NT handles the positions l = t, t + NT, ...
#pragma once

#include "ssd/primitives/dtype.cuh"

namespace ssd_kernels {
namespace detail {

template <int Q, int NT, bool HAS_SEQ_IDX>
struct ChunkStateWeights {
  static constexpr int WPT = (Q + NT - 1) / NT;  // positions per thread
  float a_last, dA[WPT], dt[WPT];
  int q_last, seq[WPT];

  // The inputs of chunk c of (b, h); valid = λ_c + 1.
  template <class Params>
  __device__ __forceinline__ void fetch(const Params& p, int b, int h, int c, int valid, int t) {
    const long long t0 = (long long)c * Q;
    const float* dA_c = p.dA_cumsum.ptr(b, h, c);
    const float* dt_c = p.dt.ptr(b, h, c);
    a_last = dA_c[Q - 1];
    q_last = HAS_SEQ_IDX ? p.seq_idx(b, t0 + valid - 1) : 0;
#pragma unroll
    for (int k = 0; k < WPT; ++k) {
      const int l = t + k * NT;
      if (l < valid) {
        dA[k] = dA_c[l];
        dt[k] = dt_c[l];
        if (HAS_SEQ_IDX) seq[k] = p.seq_idx(b, t0 + l);
      }
    }
  }

  // w_l into w_out[l] for this thread's positions l < Q (0 past λ_c).
  __device__ __forceinline__ void put(int valid, int t, float* w_out) const {
#pragma unroll
    for (int k = 0; k < WPT; ++k) {
      const int l = t + k * NT;
      if (l < Q) {
        float w = 0.f;
        if (l < valid) {
          const float e = __expf(fminf(a_last - dA[k], 0.f)) * dt[k];
          bool keep = true;
          if (HAS_SEQ_IDX) keep = seq[k] == q_last;
          w = keep ? e : 0.f;
        }
        w_out[l] = w;
      }
    }
  }
};

}  // namespace detail
}  // namespace ssd_kernels
