// chunk_cumsum_fwd / chunk_cumsum_bwd (math F1, B-h, B-i).
//
// Forward, per (batch b, chunk c, head h), positions l = 0..Q-1, t = cQ + l:
//   u_l = dt[b,t,h] + dt_bias[h];  v_l = softplus(u_l) or u_l;  Δ_l = clamp(v_l, lo, hi)  (0 for t >= L)
//   a_l = Δ_l · A[h]                          (one fp32 multiply, __fmul_rn)
//   dA_cumsum(l) = ((0 + a_0) + a_1) + ... + a_l   (left to right, one fp32 add per step, __fadd_rn)
//
// Backward (adjoint), per (b, c, h), right to left, l = Q-1..0, valid positions only:
//   g_l   = ((0 + ddA_cumsum(Q-1)) + ...) + ddA_cumsum(l)      (reverse scan, __fadd_rn)
//   dΔ_l  = fma(A, g_l, ddt_out_l)                              (__fmaf_rn)
//   ddt   = dΔ_l · 1[lo <= v_l <= hi] · (sigmoid(u_l) with softplus and u_l <= 20)
//   chunk partials: pA = ((0 + Δ_{λ} g_{λ}) + ...) + Δ_0 g_0, pB = ((0 + ddt_{λ}) + ...) + ddt_0,
//   summed right to left (l = λ_c .. 0), products by __fmul_rn.
// Deterministic mode stores (pA, pB) per (b, c, h) and reduce_head_partials finishes dA / ddt_bias
// in the canonical order of docs/determinism.md; fast mode adds them with atomics.
//
// Every sum is sequential in l inside one thread, so the bits do not depend on BLOCK_H (heads per
// block), BLOCK_L (positions staged per step) or the grid size: the tiles only move data.
#pragma once

#include "ssd/kernel_params.cuh"
#include "ssd/primitives/dt_transform.cuh"
#include "ssd/primitives/dtype.cuh"

namespace ssd_kernels {

// Work item w -> (b, c, block of heads); heads fastest so neighbouring blocks share dt rows.
struct CumsumWork {
  long long b, c, h0;
};
__device__ __forceinline__ CumsumWork cumsum_work(long long w, long long head_blocks, long long nchunks,
                                                  int block_h) {
  CumsumWork r;
  r.h0 = (w % head_blocks) * block_h;
  long long rest = w / head_blocks;
  r.c = rest % nchunks;
  r.b = rest / nchunks;
  return r;
}

// Both kernels' walk over the work items: for each item of this block (grid-stride) and this
// thread's head h = h0 + threadIdx.x, body(item, h, head_ok, A[h], dt_bias[h]) with A and the bias
// 0 past nheads (the bias also 0 without dt_bias).
template <int BLOCK_H, bool kHasBias, class Params, class Body>
__device__ __forceinline__ void for_each_cumsum_head(const Params& p, Body&& body) {
  const long long head_blocks = (p.nheads + BLOCK_H - 1) / BLOCK_H;
  const long long work = p.batch * p.nchunks * head_blocks;
  for (long long w = blockIdx.x; w < work; w += gridDim.x) {
    const CumsumWork item = cumsum_work(w, head_blocks, p.nchunks, BLOCK_H);
    const long long h = item.h0 + int(threadIdx.x);
    const bool head_ok = h < p.nheads;
    const float A = head_ok ? p.A.data[h * p.A.stride[0]] : 0.f;
    const float bias = (kHasBias && head_ok) ? p.dt_bias.data[h * p.dt_bias.stride[0]] : 0.f;
    body(item, h, head_ok, A, bias);
  }
}

template <class Spec>
__device__ void chunk_cumsum_fwd(const ChunkCumsumFwdParams& p) {
  constexpr int Q = Spec::kChunk, BLOCK_H = Spec::kBlockH, BLOCK_L = Spec::kBlockL;
  using T = typename Spec::Element;
  static_assert(Q % BLOCK_L == 0, "BLOCK_L must divide the chunk");
  // Staging tiles (+1 column: conflict-free transposed reads).
  __shared__ float s_dt[BLOCK_H][BLOCK_L + 1];
  __shared__ float s_cs[BLOCK_H][BLOCK_L + 1];
  const int tid = threadIdx.x;
  for_each_cumsum_head<BLOCK_H, Spec::kHasBias>(p, [&](const CumsumWork& item, long long h, bool head_ok, float A,
                                                       float bias) {
    float acc = 0.f;
    for (int l0 = 0; l0 < Q; l0 += BLOCK_L) {
      float delta[BLOCK_L];
#pragma unroll
      for (int j = 0; j < BLOCK_L; ++j) {  // loads first: independent of the scan
        const long long t = item.c * Q + l0 + j;
        delta[j] = 0.f;
        if (head_ok && t < p.seqlen) {
          const float u = dt_preact(
              load_as_float<T>(p.dt.data, p.dt.offset(item.b, t, h)), bias);
          delta[j] = dt_clamp(dt_activation<Spec::kSoftplus>(u), p.dt_limit_lo, p.dt_limit_hi);
        }
      }
#pragma unroll
      for (int j = 0; j < BLOCK_L; ++j) {
        acc = __fadd_rn(acc, __fmul_rn(delta[j], A));
        s_dt[tid][j] = delta[j];
        s_cs[tid][j] = acc;
      }
      __syncthreads();
      // Coalesced stores along the chunk axis.
      for (int i = tid; i < BLOCK_H * BLOCK_L; i += BLOCK_H) {
        const int hh = i / BLOCK_L, j = i % BLOCK_L;
        const long long ho = item.h0 + hh;
        if (ho < p.nheads) {
          const long long l = l0 + j;
          p.dt_out.data[p.dt_out.offset(item.b, ho, item.c) + l] = s_dt[hh][j];
          p.dA_cumsum.data[p.dA_cumsum.offset(item.b, ho, item.c) + l] =
              s_cs[hh][j];
        }
      }
      __syncthreads();
    }
  });
}

// kIncrements (the SSD backward): ddA_cumsum holds the gradient w.r.t. the increments a_l = Δ_l A
// itself (chunk_scan_bwd_ddA's output), so g_l = ddA(l) and there is no reverse scan; everything
// after g_l is the same code and order.
template <class Spec>
__device__ void chunk_cumsum_bwd(const ChunkCumsumBwdParams& p) {
  constexpr int Q = Spec::kChunk, BLOCK_H = Spec::kBlockH, BLOCK_L = Spec::kBlockL;
  using T = typename Spec::Element;
  static_assert(Q % BLOCK_L == 0, "BLOCK_L must divide the chunk");
  const int tid = threadIdx.x;
  __shared__ float s_ddA[BLOCK_H][BLOCK_L + 1];
  __shared__ float s_ddt[BLOCK_H][BLOCK_L + 1];
  for_each_cumsum_head<BLOCK_H, Spec::kHasBias>(p, [&](const CumsumWork& item, long long h, bool head_ok, float A,
                                                       float bias) {
    const long long valid = p.seqlen - item.c * Q;  // positions l < valid are real tokens
    float g = 0.f;
    double part_A = 0.0, part_bias = 0.0;  // fp64: the chunk partials of the whole-sequence sums
    for (int l0 = Q - BLOCK_L; l0 >= 0; l0 -= BLOCK_L) {
      // Coalesced loads along the chunk axis into the transposed staging tiles.
      for (int i = tid; i < BLOCK_H * BLOCK_L; i += BLOCK_H) {
        const int hh = i / BLOCK_L, j = i % BLOCK_L;
        const long long ho = item.h0 + hh;
        const long long l = l0 + j;
        float dda = 0.f, ddo = 0.f;
        if (ho < p.nheads && l < valid) {
          dda = p.ddA_cumsum.data[p.ddA_cumsum.offset(item.b, ho, item.c) + l];
          ddo = p.ddt_out.data[p.ddt_out.offset(item.b, ho, item.c) + l];
        }
        s_ddA[hh][j] = dda;
        s_ddt[hh][j] = ddo;
      }
      __syncthreads();
      float dt_raw[BLOCK_L];
#pragma unroll
      for (int j = 0; j < BLOCK_L; ++j) {
        const long long t = item.c * Q + l0 + j;
        dt_raw[j] = (head_ok && l0 + j < valid)
                        ? load_as_float<T>(p.dt.data, p.dt.offset(item.b, t, h))
                        : 0.f;
      }
#pragma unroll
      for (int j = BLOCK_L - 1; j >= 0; --j) {
        if (head_ok && l0 + j < valid) {
          const long long t = item.c * Q + l0 + j;
          const float u = dt_preact(dt_raw[j], bias);
          const float v = dt_activation<Spec::kSoftplus>(u);
          const float delta = dt_clamp(v, p.dt_limit_lo, p.dt_limit_hi);
          g = Spec::kIncrements ? s_ddA[tid][j] : __fadd_rn(g, s_ddA[tid][j]);
          const float d_delta = __fmaf_rn(A, g, s_ddt[tid][j]);
          const float du = dt_backward<Spec::kSoftplus>(u, v, d_delta, p.dt_limit_lo, p.dt_limit_hi);
          part_A = __dadd_rn(part_A, __dmul_rn(double(delta), double(g)));  // exact product
          part_bias = __dadd_rn(part_bias, double(du));
          store_from_float<T>(p.ddt.data, p.ddt.offset(item.b, t, h), du);
        }
      }
      __syncthreads();
    }
    if (head_ok) {
      if (Spec::kDeterministic) {
        constexpr int P = Spec::kHasBias ? 2 : 1;
        double* out = p.partials + ((item.b * p.nchunks + item.c) * p.nheads + h) * P;
        out[0] = part_A;
        if (Spec::kHasBias) out[1] = part_bias;
      } else {
        atomicAdd(p.dA.data + h * p.dA.stride[0], __double2float_rn(part_A));
        if (Spec::kHasBias) atomicAdd(p.ddt_bias.data + h * p.ddt_bias.stride[0], __double2float_rn(part_bias));
      }
    }
  });
}

}  // namespace ssd_kernels
