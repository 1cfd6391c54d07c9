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
// (offsets 16, 8, 4, 2, 1 over e: every element ends with the same bits, since each step adds the same
// two operands for both partners), and the block's first element's thread stores the fp64 block sum
// in slot (b, h, c, j). chunk_scan_bwd_ddA adds the slots in increasing j from +0.0 in fp64 and
// applies θ_c e^{𝒜_c(λ_c)}. A block of 32 lies in one warp for every BLOCK (a multiple of 32), so the
// bits do not depend on BLOCK or the grid. Fast mode: the warp's four block sums are added (a fixed
// tree) and lane 0 atomically adds that into rho[b, h, c] instead (one atomic per 128 elements).
//
// Work split: each thread owns kElems = 4 consecutive elements e (one float4 of P and dP per chunk, one
// 8-byte store per output), so a warp covers 128 consecutive elements = four butterfly blocks of 32,
// each on 8 lanes. The butterfly is the same tree: offsets 16, 8, 4 are shuffles with lane xor 4, 2,
// 1 (the same in-thread slot q), offset 2 adds slots q and q ^ 2, offset 1 slots 0 and 1 — each step
// adds the same two fp64 operands as the one-element-per-lane butterfly (fp64 adds are commutative),
// so every slot keeps its bits; lane 8k stores block k's sum. (One element per thread issued ~186
// instructions per element and ran instruction-bound: 81% of issue slots, ncu, session 12.)
//
// Launch: block = BLOCK threads (64, 128, 256, 512); grid = any (grid-stride over
// ceil(p*n / (4 BLOCK)) * batch * nheads work items, fwd_geom::state_passing_bwd_items). state_size
// must be a multiple of 128 (p*n is: headdim 32..128, dstate 16..256); the float4 / 8-byte accesses
// are used when the per-(b, c, h) rows of P, dP (16 bytes) and the outputs (8 bytes) are aligned (the
// backward's workspace sections are), element-wise otherwise: the same values.
#pragma once

#include "ssd/backward_params.cuh"
#include "ssd/primitives/dtype.cuh"
#include "ssd/primitives/spec.cuh"

namespace ssd_kernels {

namespace detail {
// Four consecutive floats: one 16-byte load when vec (src 16-byte aligned), else four.
__device__ __forceinline__ float4 load4(const float* src, bool vec) {
  if (vec) return *reinterpret_cast<const float4*>(src);
  return make_float4(src[0], src[1], src[2], src[3]);
}
// Four consecutive T values: one 8-byte store when vec (dst 8-byte aligned), else four.
template <class T>
__device__ __forceinline__ void store4(T* dst, T a, T b, T c, T d, bool vec) {
  static_assert(sizeof(T) == 2, "16-bit T");
  if (vec) {
    *reinterpret_cast<uint2*>(dst) = make_uint2(unsigned(a.bits) | (unsigned(b.bits) << 16),
                                                unsigned(c.bits) | (unsigned(d.bits) << 16));
  } else {
    dst[0] = a; dst[1] = b; dst[2] = c; dst[3] = d;
  }
}
// Whether a row of `elem_bytes` elements at `base` with chunk stride `stride` (elements) starts
// `align`-aligned at every chunk (e is a multiple of 4, so 4 e elements keep the alignment).
__device__ __forceinline__ bool rows_aligned(const void* base, long long stride, int elem_bytes, int align) {
  return (reinterpret_cast<unsigned long long>(base) % align) == 0 && (stride * elem_bytes) % align == 0;
}
}  // namespace detail

template <class Spec>
__device__ void state_passing_bwd(const StatePassingBwdParams& p) {
  SSD_BLOCK_SPEC_NAMES(Spec, fwd_geom::state_passing_tile_problem);  // Q, BLOCK
  using T = typename Spec::Element;
  static_assert(BLOCK % 32 == 0, "BLOCK must be a multiple of the warp");
  constexpr int kElems = fwd_geom::kStatePassingBwdElems;  // consecutive elements per thread
  const long long blocks_e = (p.state_size + kElems * BLOCK - 1) / (kElems * BLOCK);
  const long long work = blocks_e * p.batch * p.nheads;
  const long long slots = p.state_size / 32;
  const int lane = threadIdx.x & 31;
  for (long long w = blockIdx.x; w < work; w += gridDim.x) {
    const long long eb = w % blocks_e;
    const long long bh = w / blocks_e;
    const long long h = bh % p.nheads, b = bh / p.nheads;
    const long long e = (eb * BLOCK + threadIdx.x) * kElems;
    if (e >= p.state_size) continue;  // whole warps (state_size % 128 == 0): the butterfly stays full
    float dS[kElems];
#pragma unroll
    for (int q = 0; q < kElems; ++q)
      dS[q] = p.dfinal_states.data ? p.dfinal_states.data[p.dfinal_states.offset(b, h) + e + q] : 0.f;
    const float* Pb = p.states.ptr(b, 0, h) + e;
    const float* dPb = p.dstates.ptr(b, 0, h) + e;
    T* dsb = p.ds.ptr_as<T>(b, 0, h) + e;
    T* ptb = static_cast<T*>(p.states_t) + p.ds.offset(b, 0, h) + e;
    T* dslb = static_cast<T*>(p.ds_lo) + p.ds.offset(b, 0, h) + e;
    T* ptlb = static_cast<T*>(p.states_t_lo) + p.ds.offset(b, 0, h) + e;
    // The vector accesses when the rows allow them (the backward's workspace sections always do; a
    // raw launch may pass any pointers): uniform per work item, the same values either way.
    const bool vec_in = detail::rows_aligned(Pb, p.states.stride[1], 4, 16) &&
                        detail::rows_aligned(dPb, p.dstates.stride[1], 4, 16);
    const bool vec_out = detail::rows_aligned(dsb, p.ds.stride[1], 2, 8) && detail::rows_aligned(ptb, 0, 2, 8) &&
                         detail::rows_aligned(dslb, 0, 2, 8) && detail::rows_aligned(ptlb, 0, 2, 8);
    const float* cs = p.dA_cumsum.ptr(b, h);
    const long long rho_row = (b * p.nheads + h) * p.nchunks;
    // kGroup chunks per step, loads issued before the dependent chain (as state_passing_fwd).
    constexpr int kGroup = 4;
    for (long long c0 = p.nchunks - 1; c0 >= 0; c0 -= kGroup) {
      float4 P_in[kGroup], dP_in[kGroup];
      float carry[kGroup];
#pragma unroll
      for (int j = 0; j < kGroup; ++j) {
        const long long c = c0 - j;
        if (c >= 0) {
          const long long last = (c * Q + Q <= p.seqlen ? Q : p.seqlen - c * Q) - 1;  // λ_c
          P_in[j] = detail::load4(Pb + c * p.states.stride[1], vec_in);
          dP_in[j] = detail::load4(dPb + c * p.dstates.stride[1], vec_in);
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
          const float P4[kElems] = {P_in[j].x, P_in[j].y, P_in[j].z, P_in[j].w};
          const float dP4[kElems] = {dP_in[j].x, dP_in[j].y, dP_in[j].z, dP_in[j].w};
          T ds_hi[kElems], p_hi[kElems], ds_lo[kElems], p_lo[kElems];
#pragma unroll
          for (int q = 0; q < kElems; ++q) {
            ds_hi[q] = from_float<T>(dS[q]);
            p_hi[q] = from_float<T>(P4[q]);
            ds_lo[q] = lo_term<T>(dS[q], ds_hi[q]);
            p_lo[q] = lo_term<T>(P4[q], p_hi[q]);
          }
          const long long at = c * p.ds.stride[1];
          detail::store4(dsb + at, ds_hi[0], ds_hi[1], ds_hi[2], ds_hi[3], vec_out);
          detail::store4(ptb + at, p_hi[0], p_hi[1], p_hi[2], p_hi[3], vec_out);
          detail::store4(dslb + at, ds_lo[0], ds_lo[1], ds_lo[2], ds_lo[3], vec_out);
          detail::store4(ptlb + at, p_lo[0], p_lo[1], p_lo[2], p_lo[3], vec_out);
          if (Spec::kDeterministic) {
            double part[kElems];
#pragma unroll
            for (int q = 0; q < kElems; ++q) part[q] = __dmul_rn(double(P4[q]), double(dS[q]));  // exact
            // Offsets 16, 8, 4 of the element butterfly: lanes xor 4, 2, 1 (the same slot q).
#pragma unroll
            for (int off = 4; off >= 1; off >>= 1)
#pragma unroll
              for (int q = 0; q < kElems; ++q) part[q] = __dadd_rn(part[q], __shfl_xor_sync(0xffffffffu, part[q], off));
            // Offsets 2 and 1: slots q ^ 2, then q ^ 1, inside the thread.
            const double s0 = __dadd_rn(__dadd_rn(part[0], part[2]), __dadd_rn(part[1], part[3]));
            if ((lane & 7) == 0) p.rho_slots[(rho_row + c) * slots + e / 32] = s0;
          } else {
            float part[kElems];
#pragma unroll
            for (int q = 0; q < kElems; ++q) part[q] = __fmul_rn(P4[q], dS[q]);
#pragma unroll
            for (int off = 4; off >= 1; off >>= 1)
#pragma unroll
              for (int q = 0; q < kElems; ++q) part[q] = __fadd_rn(part[q], __shfl_xor_sync(0xffffffffu, part[q], off));
            float s0 = __fadd_rn(__fadd_rn(part[0], part[2]), __fadd_rn(part[1], part[3]));
            // One atomic per warp (the four blocks of 32 summed in a fixed order): fast mode only.
            s0 = __fadd_rn(s0, __shfl_xor_sync(0xffffffffu, s0, 8));
            s0 = __fadd_rn(s0, __shfl_xor_sync(0xffffffffu, s0, 16));
            if (lane == 0) atomicAdd(p.rho + rho_row + c, s0);
          }
#pragma unroll
          for (int q = 0; q < kElems; ++q) dS[q] = __fmaf_rn(carry[j], dS[q], dP4[q]);
        }
      }
    }
    if (p.dinit.data) {
#pragma unroll
      for (int q = 0; q < kElems; ++q) p.dinit.data[p.dinit.offset(b, h) + e + q] = dS[q];
    }
  }
}

}  // namespace ssd_kernels
