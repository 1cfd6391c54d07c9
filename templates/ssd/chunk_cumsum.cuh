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
// block), BLOCK_L / THREADS (positions staged per step / threads of the forward's block) or the grid
// size: the tiles only move data.
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

// Forward, one block per (b, c, BLOCK_H heads), THREADS threads in three phases: (1) every
// thread computes Δ_l for some (head, l) pairs (the dt loads and the softplus are independent, so
// they run in parallel: the sequential scan used to carry them and was latency-bound); (2) one
// thread per head runs the scan over l = 0..Q-1 in order from the staged Δ; (3) all threads store
// dt_out and dA_cumsum along the chunk axis (coalesced). Same operations per element and the same
// left-to-right sum as before, so the same bits for every tile.
template <class Spec>
__device__ void chunk_cumsum_fwd(const ChunkCumsumFwdParams& p) {
  constexpr int Q = Spec::kChunk;
  constexpr int BLOCK_H = Spec::kBlockH;
  constexpr int THREADS = Spec::kThreads;
  using T = typename Spec::Element;
  constexpr bool kHasBias = Spec::kHasBias;
  constexpr bool kSoftplus = Spec::kSoftplus;
  static_assert(cumsum_geom::fwd_tile_problem(Q, BLOCK_H, THREADS) == nullptr,
                "illegal tile: the host's check (src/kernels) refuses it");
  // Δ and its cumulative sum for the block's heads (+1 column: conflict-free per-head rows).
  __shared__ float s_dt[BLOCK_H][Q + 1];
  __shared__ float s_cs[BLOCK_H][Q + 1];
  const int tid = threadIdx.x;
  const long long head_blocks = (p.nheads + BLOCK_H - 1) / BLOCK_H;
  const long long work = p.batch * p.nchunks * head_blocks;
  for (long long w = blockIdx.x; w < work; w += gridDim.x) {
    const CumsumWork item = cumsum_work(w, head_blocks, p.nchunks, BLOCK_H);
    const long long t0 = item.c * Q;
    // (1) Δ_l, heads fastest: neighbouring threads read neighbouring dt elements.
    for (int i = tid; i < BLOCK_H * Q; i += THREADS) {
      const int hh = i % BLOCK_H, l = i / BLOCK_H;
      const long long h = item.h0 + hh;
      float delta = 0.f;  // 0 at padding positions and for heads past nheads
      if (h < p.nheads && t0 + l < p.seqlen) {
        const float bias = kHasBias ? p.dt_bias.data[h * p.dt_bias.stride[0]] : 0.f;
        const float u = dt_preact(load_as_float<T>(p.dt.data, p.dt.offset(item.b, t0 + l, h)), bias);
        delta = dt_clamp(dt_activation<kSoftplus>(u), p.dt_limit_lo, p.dt_limit_hi);
      }
      s_dt[hh][l] = delta;
    }
    __syncthreads();
    // (2) dA_cumsum(l) = ((0 + a_0) + a_1) + ... + a_l, a_l = Δ_l · A, one thread per head.
    if (tid < BLOCK_H && item.h0 + tid < p.nheads) {
      const float A = p.A.data[(item.h0 + tid) * p.A.stride[0]];
      float acc = 0.f;
#pragma unroll 16
      for (int l = 0; l < Q; ++l) {
        acc = __fadd_rn(acc, __fmul_rn(s_dt[tid][l], A));
        s_cs[tid][l] = acc;
      }
    }
    __syncthreads();
    // (3) Coalesced stores along the chunk axis.
    for (int i = tid; i < BLOCK_H * Q; i += THREADS) {
      const int hh = i / Q, l = i % Q;
      const long long h = item.h0 + hh;
      if (h < p.nheads) {
        p.dt_out.data[p.dt_out.offset(item.b, h, item.c) + l] = s_dt[hh][l];
        p.dA_cumsum.data[p.dA_cumsum.offset(item.b, h, item.c) + l] = s_cs[hh][l];
      }
    }
    __syncthreads();  // the staging tiles are reused by the next work item
  }
}

// kIncrements (the SSD backward): ddA_cumsum holds the gradient w.r.t. the increments a_l = Δ_l A
// itself (chunk_scan_bwd_ddA's output), so g_l = ddA(l) and there is no reverse scan; everything
// after g_l is the same code and order.
//
// Backward, one block per (b, c, BLOCK_H heads) of cumsum_geom::bwd_threads(BLOCK_H) threads (16 per
// head, at most 512), BLOCK_L positions per step from the chunk's end: (1) all threads stage ddA_cumsum and ddt_out along the chunk axis and dt
// along the heads, and compute u, v, Δ and the clamp / sigmoid factors (independent per position),
// from registers loaded a step ahead (the next step's loads are issued once this one is staged, so
// they fly during its chain and stores);
// (2) one thread per head runs the right-to-left chain (g, dΔ, du, the fp64 partials) over the
// staged values; (3) all threads store ddt along the heads. The chain does what the one-thread
// version did, in the same order, so the bits are the same for every tile.
template <class Spec>
__device__ void chunk_cumsum_bwd(const ChunkCumsumBwdParams& p) {
  constexpr int Q = Spec::kChunk;
  constexpr int BLOCK_H = Spec::kBlockH;
  constexpr int BLOCK_L = Spec::kBlockL;
  constexpr int NT = cumsum_geom::bwd_threads(BLOCK_H);
  using T = typename Spec::Element;
  constexpr bool kHasBias = Spec::kHasBias;
  constexpr bool kSoftplus = Spec::kSoftplus;
  constexpr bool kDeterministic = Spec::kDeterministic;
  constexpr bool kIncrements = Spec::kIncrements;
  static_assert(Q % BLOCK_L == 0, "BLOCK_L must divide the chunk");
  static_assert(NT % BLOCK_H == 0, "each thread loads dt for one head");
  constexpr int PT = (BLOCK_H * BLOCK_L + NT - 1) / NT;  // staged elements per thread per step
  __shared__ float s_ddA[BLOCK_H][BLOCK_L + 1];
  __shared__ float s_ddt[BLOCK_H][BLOCK_L + 1];  // ddt_out in, du out
  __shared__ float s_delta[BLOCK_H][BLOCK_L + 1];
  __shared__ float s_sig[BLOCK_H][BLOCK_L + 1];  // sigmoid(u), where softplus applies (u <= 20)
  __shared__ unsigned char s_flags[BLOCK_H][BLOCK_L];  // kInRange: lo <= v <= hi; kSigmoid: s_sig applies
  constexpr unsigned char kInRange = 1, kSigmoid = 2;
  const int tid = threadIdx.x;
  const long long head_blocks = (p.nheads + BLOCK_H - 1) / BLOCK_H;
  const long long work = p.batch * p.nchunks * head_blocks;
  for (long long w = blockIdx.x; w < work; w += gridDim.x) {
    const CumsumWork item = cumsum_work(w, head_blocks, p.nchunks, BLOCK_H);
    const long long h = item.h0 + tid;  // the scanning thread's head (tid < BLOCK_H)
    const bool head_ok = tid < BLOCK_H && h < p.nheads;
    const float A = head_ok ? p.A.data[h * p.A.stride[0]] : 0.f;
    const long long valid = p.seqlen - item.c * Q;  // positions l < valid are real tokens
    float g = 0.f;
    double part_A = 0.0, part_bias = 0.0;  // fp64: the chunk partials of the whole-sequence sums
    // The head this thread loads dt for (NT is a multiple of BLOCK_H: the same in every step).
    const int hh_dt = tid % BLOCK_H;
    const long long hd = item.h0 + hh_dt;
    const bool hd_ok = hd < p.nheads;
    const float bias = kHasBias && hd_ok ? p.dt_bias.data[hd * p.dt_bias.stride[0]] : 0.f;
    // The loads of a step (its ddA_cumsum and ddt_out rows, its dt along the heads) are issued
    // into registers a step ahead, so they fly while the previous step's chain runs.
    float r_dda[PT], r_ddo[PT], r_dt[PT];
    auto issue_loads = [&](int l0) {
#pragma unroll
      for (int it = 0; it < PT; ++it) {
        const int i = tid + it * NT;
        r_dda[it] = r_ddo[it] = r_dt[it] = 0.f;
        if (i < BLOCK_H * BLOCK_L) {
          const int hh = i / BLOCK_L, j = i % BLOCK_L;  // along the chunk axis
          const long long ho = item.h0 + hh;
          if (ho < p.nheads && l0 + j < valid) {
            r_dda[it] = p.ddA_cumsum.data[p.ddA_cumsum.offset(item.b, ho, item.c) + l0 + j];
            r_ddo[it] = p.ddt_out.data[p.ddt_out.offset(item.b, ho, item.c) + l0 + j];
          }
          const int jh = i / BLOCK_H;  // along the heads: head hh_dt (the same for every it)
          if (hd_ok && l0 + jh < valid)
            r_dt[it] = load_as_float<T>(p.dt.data, p.dt.offset(item.b, item.c * Q + l0 + jh, hd));
        }
      }
    };
    issue_loads(Q - BLOCK_L);
    for (int l0 = Q - BLOCK_L; l0 >= 0; l0 -= BLOCK_L) {
      // (1) The step's rows into shared memory, and Δ and the factors of dΔ -> du from dt.
#pragma unroll
      for (int it = 0; it < PT; ++it) {
        const int i = tid + it * NT;
        if (i < BLOCK_H * BLOCK_L) {
          s_ddA[i / BLOCK_L][i % BLOCK_L] = r_dda[it];
          s_ddt[i / BLOCK_L][i % BLOCK_L] = r_ddo[it];
          const int jh = i / BLOCK_H;
          float delta = 0.f, sig = 0.f;
          unsigned char flags = 0;
          if (hd_ok && l0 + jh < valid) {
            const float u = dt_preact(r_dt[it], bias);
            const float v = dt_activation<kSoftplus>(u);
            delta = dt_clamp(v, p.dt_limit_lo, p.dt_limit_hi);
            if (!(v < p.dt_limit_lo || v > p.dt_limit_hi)) flags |= kInRange;
            if (kSoftplus && u <= 20.f) {
              flags |= kSigmoid;
              sig = dt_sigmoid(u);
            }
          }
          s_delta[hh_dt][jh] = delta;
          s_sig[hh_dt][jh] = sig;
          s_flags[hh_dt][jh] = flags;
        }
      }
      __syncthreads();
      if (l0 >= BLOCK_L) issue_loads(l0 - BLOCK_L);
      // (2) The chain, right to left (du as dt_transform.cuh defines it, from the staged factors).
      if (head_ok) {
#pragma unroll 8
        for (int j = BLOCK_L - 1; j >= 0; --j) {
          if (l0 + j < valid) {
            g = kIncrements ? s_ddA[tid][j] : __fadd_rn(g, s_ddA[tid][j]);
            const float d_delta = __fmaf_rn(A, g, s_ddt[tid][j]);
            const unsigned char flags = s_flags[tid][j];
            float du = (flags & kInRange) ? d_delta : 0.f;
            if (flags & kSigmoid) du = __fmul_rn(du, s_sig[tid][j]);
            part_A = __dadd_rn(part_A, __dmul_rn(double(s_delta[tid][j]), double(g)));  // exact product
            part_bias = __dadd_rn(part_bias, double(du));
            s_ddt[tid][j] = du;
          }
        }
      }
      __syncthreads();
      // (3) ddt along the heads.
      for (int i = tid; i < BLOCK_H * BLOCK_L; i += NT) {
        const int hh = i % BLOCK_H, j = i / BLOCK_H;
        const long long ho = item.h0 + hh;
        if (ho < p.nheads && l0 + j < valid)
          store_from_float<T>(p.ddt.data, p.ddt.offset(item.b, item.c * Q + l0 + j, ho), s_ddt[hh][j]);
      }
      __syncthreads();
    }
    if (head_ok) {
      if (kDeterministic) {
        constexpr int P = kHasBias ? 2 : 1;
        double* out = p.partials + ((item.b * p.nchunks + item.c) * p.nheads + h) * P;
        out[0] = part_A;
        if (kHasBias) out[1] = part_bias;
      } else {
        atomicAdd(p.dA.data + h * p.dA.stride[0], __double2float_rn(part_A));
        if (kHasBias) atomicAdd(p.ddt_bias.data + h * p.ddt_bias.stride[0], __double2float_rn(part_bias));
      }
    }
  }
}

}  // namespace ssd_kernels
