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

#include "ssd/forward_params.cuh"  // fwd_geom::state_passing_tile_problem
#include "ssd/kernel_params.cuh"
#include "ssd/primitives/spec.cuh"

namespace ssd_kernels {

template <class Spec>
__device__ void state_passing_fwd(const StatePassingFwdParams& p) {
  SSD_BLOCK_SPEC_NAMES(Spec, fwd_geom::state_passing_tile_problem);  // Q, BLOCK
  const long long blocks_e = (p.state_size + BLOCK - 1) / BLOCK;
  const long long work = blocks_e * p.batch * p.nheads;
  for (long long w = blockIdx.x; w < work; w += gridDim.x) {
    const long long eb = w % blocks_e;
    const long long bh = w / blocks_e;
    const long long h = bh % p.nheads, b = bh / p.nheads;
    const long long e = eb * BLOCK + threadIdx.x;
    if (e >= p.state_size) continue;
    float S = Spec::kInitialStates ? p.initial_states.data[p.initial_states.offset(b, h) + e] : 0.f;
    int prev_id = 0;  // seq_idx(cQ - 1), with seq_idx(-1) := 0
    // Sum spelled out: through ptr() the compiler orders the adds differently (same address, other cubin).
    float* base = p.states.data + b * p.states.stride[0] + h * p.states.stride[2] + e;
    const float* cs = p.dA_cumsum.ptr(b, h);
    // kGroup chunks per step: their loads are issued before the first store, so they overlap
    // (the compiler cannot move loads above stores into the same buffer by itself).
    constexpr int kGroup = 4;
    for (long long c0 = 0; c0 < p.nchunks; c0 += kGroup) {
      float s_in[kGroup], log_carry[kGroup];
      int last_id[kGroup];
#pragma unroll
      for (int j = 0; j < kGroup; ++j) {
        const long long c = c0 + j;
        if (c < p.nchunks) {
          const long long last = (c * Q + Q <= p.seqlen ? Q : p.seqlen - c * Q) - 1;  // λ_c
          s_in[j] = base[c * p.states.stride[1]];
          log_carry[j] = cs[c * p.dA_cumsum.stride[2] + last];
          last_id[j] = Spec::kSeqIdx ? p.seq_idx(b, c * Q + last) : 0;
        }
      }
#pragma unroll
      for (int j = 0; j < kGroup; ++j) {
        const long long c = c0 + j;
        if (c < p.nchunks) {
          float carry = expf(log_carry[j]);
          if (Spec::kSeqIdx) {
            if (last_id[j] != prev_id) carry = 0.f;
            prev_id = last_id[j];
          }
          base[c * p.states.stride[1]] = S;
          S = __fmaf_rn(carry, S, s_in[j]);
        }
      }
    }
    if (p.final_states.data) p.final_states.data[p.final_states.offset(b, h) + e] = S;
  }
}

}  // namespace ssd_kernels
