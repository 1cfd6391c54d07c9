// The weights of a chunk's positions, for the fused state passes that overlap them with their mma:
//
//   kStates (chunk_state_fwd's w_l, math F2; chunk_state_passing.cuh and its sm_90a kernel):
//     w_l = [seq_idx(cQ + l) == seq_idx(cQ + λ_c)] · exp(min(𝒜_c(Q−1) − 𝒜_c(l), 0)) · Δ_l   for l ≤ λ_c
//   kDstates (chunk_state_fwd with kDstates, math B-b; chunk_state_passing_bwd.cuh):
//     w_l = [seq_idx(cQ + l) == seq_idx(cQ − 1)] · exp(𝒜_c(l))   for l ≤ λ_c,  seq_idx(−1) := 0
//   w_l = 0 for λ_c < l < Q
//
// (__expf, the fp32 product rounded once: the expressions of chunk_state_fwd, so the bits are its.)
// In two halves: fetch, the global loads into registers (issued a chunk ahead), then put, w into
// shared memory. Thread t of NT handles the positions l = t, t + NT, ...
#pragma once

#include "ssd/primitives/dtype.cuh"

namespace ssd_kernels {
namespace detail {

// Which of the two weights above.
enum class ChunkWeights { kStates, kDstates };

// The registers a thread carries from fetch to put: only those its kind uses (an unused member
// changed the backward kernel's machine code).
template <ChunkWeights KIND, int WPT>
struct ChunkWeightInputs {  // kStates
  float a_last, dA[WPT], dt[WPT];
  int q_ref, seq[WPT];  // q_ref = seq_idx(cQ + λ_c)
};
template <int WPT>
struct ChunkWeightInputs<ChunkWeights::kDstates, WPT> {
  float dA[WPT];
  int q_ref, seq[WPT];  // q_ref = seq_idx(cQ − 1), seq_idx(−1) := 0
};

template <int Q, int NT, bool HAS_SEQ_IDX, ChunkWeights KIND = ChunkWeights::kStates>
struct ChunkStateWeights : ChunkWeightInputs<KIND, (Q + NT - 1) / NT> {
  static constexpr int WPT = (Q + NT - 1) / NT;  // positions per thread

  // The inputs of chunk c of (b, h); valid = λ_c + 1.
  template <class Params>
  __device__ __forceinline__ void fetch(const Params& p, int b, int h, int c, int valid, int t) {
    const long long t0 = (long long)c * Q;
    const float* dA_c = p.dA_cumsum.ptr(b, h, c);
    [[maybe_unused]] const float* dt_c = nullptr;  // Δ's row (kStates), formed where the forward formed it
    if constexpr (KIND == ChunkWeights::kStates) {
      dt_c = p.dt.ptr(b, h, c);
      this->a_last = dA_c[Q - 1];
      this->q_ref = HAS_SEQ_IDX ? p.seq_idx(b, t0 + valid - 1) : 0;
    } else {
      this->q_ref = HAS_SEQ_IDX && c > 0 ? p.seq_idx(b, t0 - 1) : 0;
    }
#pragma unroll
    for (int k = 0; k < WPT; ++k) {
      const int l = t + k * NT;
      if (l < valid) {
        this->dA[k] = dA_c[l];
        if constexpr (KIND == ChunkWeights::kStates) this->dt[k] = dt_c[l];
        if (HAS_SEQ_IDX) this->seq[k] = p.seq_idx(b, t0 + l);
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
          float e;
          if constexpr (KIND == ChunkWeights::kStates)
            e = __expf(fminf(this->a_last - this->dA[k], 0.f)) * this->dt[k];
          else
            e = __expf(this->dA[k]);
          bool keep = true;
          if (HAS_SEQ_IDX) keep = this->seq[k] == this->q_ref;
          w = keep ? e : 0.f;
        }
        w_out[l] = w;
      }
    }
  }
};

}  // namespace detail
}  // namespace ssd_kernels
