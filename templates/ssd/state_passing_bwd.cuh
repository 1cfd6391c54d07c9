// state_passing_bwd (math B-c): the reverse recurrence across chunks, per (batch b, head h, state
// element e of the flattened p*n axis):
//
//   dS = dfinal[e] (0 without dfinal_states);  for c = Nc-1 .. 0:
//     ds_c[e]        = dS                                   (stored rounded to T)
//     ρ-part(c, e)   = P_c[e] · dS                           (fp64 product: exact)
//     dS             = fma(θ_c · exp(dA_cumsum_c(λ_c)), dS, dP_c[e])   (one rounding, __fmaf_rn)
//   dinit[e] = dS                                           (= dS_{-1}, when dinit is given)
//   states_t[c][e] = rn_T(P_c[e])   (the mma operand copy chunk_scan_bwd_dx and _dc read)
//   ds_lo[c][e] = rn_T(dS − ds_c[e]), states_t_lo[c][e] = rn_T(P_c[e] − states_t[c][e])   (the second
//   terms of chunk_scan_bwd_dx's operands; the differences are exact in fp32)
//   θ_c = [seq_idx(cQ + λ_c) == seq_idx(cQ - 1)], seq_idx(-1) := 0; θ_c = 1 without seq_idx
//   (the same carry as state_passing_fwd, so the adjoint uses the forward's bits).
//
// ρ_c = θ_c e^{𝒜_c(λ_c)} Σ_e P_c[e] dS_c[e] is a sum across thread blocks (p*n terms, 16384 at
// the preset, of both signs). Canonical order, all in fp64 (issue 11: the fp32 sum's rounding was
// the largest error of dA): the p*n axis is cut into blocks of 32 consecutive elements
// (e = 32j .. 32j+31); inside a block the 32 exact fp64 products are summed by an xor butterfly
// (offsets 16, 8, 4, 2, 1: every lane of the warp ends with the same bits, since each step adds the
// same two operands on both lanes), and lane 0 stores the fp64 block sum in slot (b, h, c, j).
// chunk_scan_bwd_ddA adds the slots in increasing j from +0.0 in fp64 and applies θ_c e^{𝒜_c(λ_c)}. A block of 32 is one warp for every BLOCK (a multiple of 32), so the
// bits do not depend on BLOCK or the grid. Fast mode: lane 0 atomically adds the block sum into
// rho[b, h, c] instead.
//
// Launch: block = BLOCK threads (64, 128, 256, 512), one per state element; grid = any (grid-stride
// over ceil(p*n / BLOCK) * batch * nheads work items). state_size must be a multiple of 32 (p*n is).
#pragma once

#include "ssd/backward_params.cuh"
#include "ssd/primitives/dtype.cuh"
#include "ssd/primitives/spec.cuh"

namespace ssd_kernels {

template <class Spec>
__device__ void state_passing_bwd(const StatePassingBwdParams& p) {
  SSD_BLOCK_SPEC_NAMES(Spec, fwd_geom::state_passing_tile_problem);  // Q, BLOCK
  using T = typename Spec::Element;
  static_assert(BLOCK % 32 == 0, "BLOCK must be a multiple of the warp");
  const long long blocks_e = (p.state_size + BLOCK - 1) / BLOCK;
  const long long work = blocks_e * p.batch * p.nheads;
  const long long slots = p.state_size / 32;
  for (long long w = blockIdx.x; w < work; w += gridDim.x) {
    const long long eb = w % blocks_e;
    const long long bh = w / blocks_e;
    const long long h = bh % p.nheads, b = bh / p.nheads;
    const long long e = eb * BLOCK + threadIdx.x;
    if (e >= p.state_size) continue;  // whole warps (state_size % 32 == 0): the butterfly stays full
    float dS = p.dfinal_states.data ? p.dfinal_states.data[p.dfinal_states.offset(b, h) + e] : 0.f;
    const float* Pb = p.states.ptr(b, 0, h) + e;
    const float* dPb = p.dstates.ptr(b, 0, h) + e;
    T* dsb = p.ds.ptr_as<T>(b, 0, h) + e;
    T* ptb = static_cast<T*>(p.states_t) + p.ds.offset(b, 0, h) + e;
    T* dslb = static_cast<T*>(p.ds_lo) + p.ds.offset(b, 0, h) + e;
    T* ptlb = static_cast<T*>(p.states_t_lo) + p.ds.offset(b, 0, h) + e;
    const float* cs = p.dA_cumsum.ptr(b, h);
    const long long rho_row = (b * p.nheads + h) * p.nchunks;
    // kGroup chunks per step, loads issued before the dependent chain (as state_passing_fwd).
    constexpr int kGroup = 4;
    for (long long c0 = p.nchunks - 1; c0 >= 0; c0 -= kGroup) {
      float P_in[kGroup], dP_in[kGroup], carry[kGroup];
#pragma unroll
      for (int j = 0; j < kGroup; ++j) {
        const long long c = c0 - j;
        if (c >= 0) {
          const long long last = (c * Q + Q <= p.seqlen ? Q : p.seqlen - c * Q) - 1;  // λ_c
          P_in[j] = Pb[c * p.states.stride[1]];
          dP_in[j] = dPb[c * p.dstates.stride[1]];
          float k = expf(cs[c * p.dA_cumsum.stride[2] + last]);
          if (Spec::kSeqIdx) {
            const int id_last = p.seq_idx(b, c * Q + last);
            const int id_prev = c > 0 ? p.seq_idx(b, c * Q - 1) : 0;
            if (id_last != id_prev) k = 0.f;
          }
          carry[j] = k;
        }
      }
#pragma unroll
      for (int j = 0; j < kGroup; ++j) {
        const long long c = c0 - j;
        if (c >= 0) {
          const T ds_hi = from_float<T>(dS), p_hi = from_float<T>(P_in[j]);
          dsb[c * p.ds.stride[1]] = ds_hi;
          ptb[c * p.ds.stride[1]] = p_hi;
          dslb[c * p.ds.stride[1]] = lo_term<T>(dS, ds_hi);
          ptlb[c * p.ds.stride[1]] = lo_term<T>(P_in[j], p_hi);
          if (Spec::kDeterministic) {
            double part = __dmul_rn(double(P_in[j]), double(dS));  // exact: 24 + 24 mantissa bits
#pragma unroll
            for (int off = 16; off >= 1; off >>= 1) part = __dadd_rn(part, __shfl_xor_sync(0xffffffffu, part, off));
            if ((threadIdx.x & 31) == 0) p.rho_slots[(rho_row + c) * slots + e / 32] = part;
          } else {
            float part = __fmul_rn(P_in[j], dS);
#pragma unroll
            for (int off = 16; off >= 1; off >>= 1) part = __fadd_rn(part, __shfl_xor_sync(0xffffffffu, part, off));
            if ((threadIdx.x & 31) == 0) atomicAdd(p.rho + rho_row + c, part);
          }
          dS = __fmaf_rn(carry[j], dS, dP_in[j]);
        }
      }
    }
    if (p.dinit.data) p.dinit.data[p.dinit.offset(b, h) + e] = dS;
  }
}

}  // namespace ssd_kernels
