// state_passing_fwd (math F3): the recurrence across chunks, per (batch b, head h, state element e).
//
//   S_{-1} = init (0 without initial states);  for c = 0 .. Nc-1:
//     P_c = S_{c-1}                                        (entering state, written over s_c)
//     S_c = fma(θ_c · exp(dA_cumsum_c(λ_c)), S_{c-1}, s_c)  (one rounding, __fmaf_rn)
//   final = S_{Nc-1}
//   θ_c = [seq_idx(cQ + λ_c) == seq_idx(cQ - 1)], seq_idx(-1) := 0; θ_c = 1 without seq_idx.
//
// One thread owns one (b, h, e) and walks the chunks in order: no cross-thread reduction, so the
// bits depend on nothing but the inputs. BLOCK elements of the flattened p*n axis per block.
#pragma once

#include "ssd/kernel_params.cuh"

namespace ssd_kernels {

template <int Q, int BLOCK, bool kHasInit, bool kHasSeqIdx>
__device__ void state_passing_fwd(const StatePassingFwdParams& p) {
  const long long blocks_e = (p.state_size + BLOCK - 1) / BLOCK;
  const long long work = blocks_e * p.batch * p.nheads;
  for (long long w = blockIdx.x; w < work; w += gridDim.x) {
    const long long eb = w % blocks_e;
    const long long bh = w / blocks_e;
    const long long h = bh % p.nheads, b = bh / p.nheads;
    const long long e = eb * BLOCK + threadIdx.x;
    if (e >= p.state_size) continue;
    float S = kHasInit ? p.initial_states[b * p.init_stride_b + h * p.init_stride_h + e] : 0.f;
    int prev_id = 0;  // seq_idx(cQ - 1), with seq_idx(-1) := 0
    for (long long c = 0; c < p.nchunks; ++c) {
      const long long last = (c * Q + Q <= p.seqlen ? Q : p.seqlen - c * Q) - 1;  // λ_c
      float carry = expf(p.dA_cumsum[b * p.dA_cumsum_stride_b + h * p.dA_cumsum_stride_h + c * p.dA_cumsum_stride_c + last]);
      if (kHasSeqIdx) {
        const int last_id = p.seq_idx[b * p.seq_idx_stride_b + (c * Q + last) * p.seq_idx_stride_l];
        if (last_id != prev_id) carry = 0.f;
        prev_id = last_id;
      }
      float* slot = p.states + b * p.states_stride_b + c * p.states_stride_c + h * p.states_stride_h + e;
      const float s = *slot;
      *slot = S;
      S = __fmaf_rn(carry, S, s);
    }
    if (p.final_states) p.final_states[b * p.final_stride_b + h * p.final_stride_h + e] = S;
  }
}

}  // namespace ssd_kernels
