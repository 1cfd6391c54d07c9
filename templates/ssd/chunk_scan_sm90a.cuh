// chunk_scan_fwd on sm_90a: the formula, the operand precision and the reduction order of
// chunk_scan.cuh's header, on the warpgroup tensor-core instruction (wgmma, HGMMA) instead of
// mma.sync (HMMA). Included by chunk_scan.cuh only when compiling for sm_90a; the descriptor
// (src/kernels/chunk_scan.cpp) sets Spec::kWgmma for sm_90a configs whose shape fits
// (fwd_geom::chunk_scan_wg_shape), and every other config keeps the mma.sync kernel.
//
// Per output (l, p), one fp32 accumulator from 0 (the same chain as the mma.sync kernel; r = 64 ⌊l/64⌋):
//   1. n = 0, 16, 32, ... N-16: acc += C[l, n..n+15] · rn_T(P_c)[p, n..n+15] (one HGMMA k16 step
//      each, in increasing n);  2. acc *= e_l (exp(A(r)) in place of exp(A(l)) where r > 0);
//   3. s = 0, 16, ... r-16: acc += rn_T(CB(l, s..s+15) · u_r(s..s+15)) · x[s..s+15, p]; then, where
//      r > 0, acc *= f(l);  4. s = r, r+16, ... up to min(m0 + BLOCK_M, λ_c + 1) rounded up to 64 (the
//      steps past it are all-zero and skipped; the ones before it past l contribute exact zeros):
//      acc += rn_T(W(l, s..s+15)) · x[s..s+15, p], W the direct form; every fp32 factor formed by the
//      same expression as the mma.sync kernel;
//   5. the same epilogue (D, z gate, one rounding) through the same shared fp32 tile.
// If an HGMMA k16 step gives the bits of an HMMA m16n8k16 step (its products and its sum onto the
// accumulator), the outputs equal the mma.sync kernel's bitwise; tests/gpu/test_ssd_forward.cpp
// compares the two on the device ("chunk_scan_fwd: sm_90a (wgmma) against sm_80 (mma.sync)").
//
// Work split: BLOCK_M / 64 warpgroups (128 threads each) per (b, c, h) and BLOCK_M x BLOCK_N output
// tile (grid as the mma.sync kernel's: fwd_geom::chunk_scan_tiles); warpgroup wg owns tile rows
// 64 wg .. 64 wg + 63, its warp w rows 16 w .. 16 w + 15 of those (the wgmma m64 accumulator layout,
// which is the m16n8 layout of the mma.sync kernel's warp w with BLOCK_M = 64). The warpgroups share
// the P and x tiles.
//   phase A (N / 64 steps): wgmma m64nBLOCK_Nk16, A = C tile [l][n], B = P tile [p][n], both K-major
//     in 128-byte swizzled shared tiles (mma_ss<T, 0, 0>);
//   phase B (ceil(kend / 64) steps): A = W from registers (each thread forms its FragA from the fp32
//     CB tile and, below the warpgroup's 64-block, its u_r row in shared memory (formed once per tile,
//     one multiply per element), from it on the chunk's A, Δ rows; one k16 step's while the previous
//     step's wgmma runs), B = x tile [s][p] MN-major, swizzled (mma_rs<T, 1>). W is formed without a
//     branch per element (the value, then the select), in three loops of one variant each: the steps
//     below the block (factored, no mask), the others with the mask, and there, where a bound on the
//     exponents cannot exclude subnormal exps, the guarded __expf (sm90a_detail::decay).
// Each phase runs a cp.async ring over the same shared body: phase B of fwd_geom::chunk_scan_wg_stages()
// stages, phase A of chunk_scan_wg_stages_a() smaller ones (3 at 64 x 64). cp.async writes
// through the generic proxy: each thread waits for its copies, fences (fence.proxy.async) and the
// block barrier hands the stage to wgmma. Each step waits for its wgmma groups before the next
// barrier, so the stage a barrier frees is never read by wgmma again; phase B's first tiles are
// copied from phase A's last barrier on where a stage is clear of phase A's last one (kEarlyB), and
// the chunk's A and Δ rows come by cp.async with phase A's first tiles. Dynamic shared memory:
// fwd_geom::chunk_scan_wg_smem_bytes. Loaders: unrolled, with the copies at immediate offsets from one
// base address per call (the row step of the swizzled tiles made opaque, so its multiples are not
// K-loop invariants held in registers: over 250 registers); ptxas then pads each group of cp.async
// once instead of each copy.
// With Spec::kTma (SSD_FLAG_TMA, ChunkScanFwdTmaParams) the same rings are filled by the tensor copy
// engine instead: thread 0 issues one cp.async.bulk.tensor.4d per tile (C, P; x per 64 columns, CB
// as two boxes of 32 floats, 128-byte swizzled: CbSwizzle gives W's reads their offsets) and the
// chunk's A and Δ rows as two bulk copies, each stage completing on its mbarrier (expect_tx of the
// stage's bytes); the threads wait on it where they waited for their cp.async groups (no proxy
// fence: the copy engine writes through the async proxy) and keep the block barrier that frees a
// stage for the next copy. The copy engine writes the cp.async loaders' layout and zero-fills the
// positions past seqlen, as their predicates do: the same operands, the same bits (GPU test "the TMA
// operand tiles give the cp.async loaders' bits"). Stores of the epilogue tile are fenced for the
// async proxy before the next tile's copies overwrite it.
#pragma once

#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "ssd/chunk_scan_sm90a.cuh needs the sm_90a target (wgmma)"
#endif

#include "ssd/forward_params.cuh"
#include "ssd/primitives/dtype.cuh"
#include "ssd/primitives/hopper.cuh"
#include "ssd/primitives/mma.cuh"
#include "ssd/primitives/spec.cuh"

namespace ssd_kernels {
namespace sm90a_detail {

// A ROWS x 64 tile of 16-bit T into a 128-byte swizzled shared tile `s` (1024-byte aligned):
// element (r, c) from g[r * row_stride + c * col_stride] to s + swizzle128_offset(r, c). pred(r, c0)
// per 16-byte chunk (columns c0..c0+7): chunks not read are zero-filled. vec (16-byte aligned rows,
// col_stride 1): cp.async; otherwise synchronous element copies. Threads 0..NT-1, NT / 8 rows a pass.
template <int NT, int ROWS, class T, class Pred>
__device__ __forceinline__ void load_tile_sw128(unsigned char* s, const T* g, long long row_stride,
                                                long long col_stride, bool vec, const T* safe, Pred pred) {
  constexpr int RS = NT / 8;
  static_assert(sizeof(T) == 2 && ROWS % RS == 0 && RS % 8 == 0, "16-bit elements, whole passes of rows");
  const int c0 = (int(threadIdx.x) & 7) * 8, r0 = int(threadIdx.x) >> 3;
  if (vec) {
    // Unrolled, the destinations at immediate offsets (rows r0 + RS it: + 128 RS it bytes). The row
    // step is made opaque here (the empty asm), so the sources are formed by additions at each call
    // instead of as K-loop invariants held in registers (over a hundred with every tile: spills).
    const T* src = g + (long long)r0 * row_stride + c0;
    long long step = RS * row_stride;
    asm volatile("" : "+l"(step));
    const unsigned dst = ptx::smem_addr(s + smem::swizzle128_offset(r0, c0));
#pragma unroll
    for (int it = 0; it < ROWS / RS; ++it) {
      const bool ok = pred(r0 + RS * it, c0);
      ptx::cp_async_16(dst + RS * 128 * it, ok ? src : safe, ok);
      src += step;
    }
  } else {
#pragma unroll 1
    for (int it = 0; it < ROWS / RS; ++it) {
      const int r = r0 + RS * it;
      const bool ok = pred(r, c0);
#pragma unroll
      for (int v = 0; v < 8; ++v) {
        T val;
        if (ok) {
          val = g[(long long)r * row_stride + (long long)(c0 + v) * col_stride];
        } else {
          val = from_float<T>(0.f);
        }
        *reinterpret_cast<T*>(s + smem::swizzle128_offset(r, c0 + v)) = val;
      }
    }
  }
}

// The same for fp32 P (unit n-stride) rounded to T on the way (pack2, as the mma.sync kernel's
// register staging): synchronous loads, ordinary stores.
template <int NT, int ROWS, class T>
__device__ __forceinline__ void load_tile_sw128_f32(unsigned char* s, const float* g, long long row_stride, bool vec) {
  constexpr int RS = NT / 8;
  static_assert(ROWS % RS == 0 && RS % 8 == 0, "whole passes of rows");
  const int c0 = (int(threadIdx.x) & 7) * 8, r0 = int(threadIdx.x) >> 3;
#pragma unroll 1
  for (int it = 0; it < ROWS / RS; ++it) {
    const float* q = g + (long long)(r0 + RS * it) * row_stride + c0;
    float4 v0, v1;
    if (vec) {
      v0 = *reinterpret_cast<const float4*>(q);
      v1 = *reinterpret_cast<const float4*>(q + 4);
    } else {
      v0 = make_float4(q[0], q[1], q[2], q[3]);
      v1 = make_float4(q[4], q[5], q[6], q[7]);
    }
    uint4 u;
    u.x = ptx::pack2<T>(v0.x, v0.y);
    u.y = ptx::pack2<T>(v0.z, v0.w);
    u.z = ptx::pack2<T>(v1.x, v1.y);
    u.w = ptx::pack2<T>(v1.z, v1.w);
    *reinterpret_cast<uint4*>(s + smem::swizzle128_offset(r0 + RS * it, c0)) = u;
  }
}

// The ROWS x 64 fp32 CB tile into shared rows of LD floats: element (r, c) from g[r * row_stride + c]
// to s[r * LD + c]; pred(r, c0) per 16-byte chunk (c0..c0+3) as load_tile_sw128 (block::load_tile's
// contract). Two threads per row (NT = 2 ROWS), thread t row t / 2 and the chunks t % 2, t % 2 + 2, ...
// 32 bytes apart on both sides: one base address each, the 8 copies at immediate offsets (a chunk not
// read keeps the row's address, inside the tensor; cp.async reads nothing for it). A quarter-warp's
// 8 chunks (4 rows of LD = 72 floats, 2 chunks each) fall in 8 different 16-byte bank groups.
template <int NT, int ROWS, int LD, class Pred>
__device__ __forceinline__ void load_cb_tile(float* s, const float* g, long long row_stride, bool vec, Pred pred) {
  static_assert(NT == 2 * ROWS && LD % 32 == 8, "two threads per row; rows 32 bytes apart modulo 128");
  const int r = int(threadIdx.x) >> 1, h = int(threadIdx.x) & 1;
  if (vec) {
    const float* src = g + (long long)r * row_stride + 4 * h;
    const unsigned dst = ptx::smem_addr(s + r * LD + 4 * h);
#pragma unroll
    for (int i = 0; i < 8; ++i) ptx::cp_async_16(dst + 32 * i, src + 8 * i, pred(r, 4 * h + 8 * i));
  } else {
#pragma unroll 1
    for (int i = 0; i < 8; ++i) {
      const int c0 = 4 * h + 8 * i;
      const bool ok = pred(r, c0);
#pragma unroll
      for (int v = 0; v < 4; ++v) s[r * LD + c0 + v] = ok ? g[(long long)r * row_stride + c0 + v] : 0.f;
    }
  }
}

// exp(min(al - as, 0)) as __expf computes it: ex2.approx.f32 of the product with log2(e) rounded to
// fp32. With kPlain the caller guarantees that product is >= -126 (or NaN): there ex2.approx.f32 is the
// plain ex2 instruction (the non-ftz form only adds, below -126, a halving of the input and a squaring
// of the result, so the result can be subnormal), so ex2.approx.ftz.f32 gives the same bits without
// that guard.
constexpr float kLog2e = 1.4426950216293334961f;  // the fp32 constant of __expf: 0x3FB8AA3B
template <bool kPlain>
__device__ __forceinline__ float decay(float al, float as) {
  if constexpr (kPlain) {
    return ptx::ex2_approx_ftz(fminf(al - as, 0.f) * kLog2e);
  } else {
    return __expf(fminf(al - as, 0.f));
  }
}

// w, or +0 where `keep` is false: the value is computed first (the empty asm), so the select is one
// instruction rather than a branch around the exp.
__device__ __forceinline__ float keep_if(float w, bool keep) {
  asm volatile("" : "+f"(w));
  return keep ? w : 0.f;
}

// This thread's byte offsets, inside a CB row of a TMA-written tile (two 128-byte swizzled boxes of 32
// floats, BLOCK_M rows of 128 bytes each), of its column pairs 2t, 2t+1 (j = 0) and 2t+8, 2t+9 (j = 1)
// of a k16 slice starting at column 16a of its box: 16-byte chunk (4a + t/2 + 2j) XOR the row's r % 8
// (= lane / 4 for every row a thread holds), then 8 bytes for odd t.
struct CbSwizzle {
  int off[2][2];
  __device__ __forceinline__ void init(int lg, int lt) {
#pragma unroll
    for (int a = 0; a < 2; ++a)
#pragma unroll
      for (int j = 0; j < 2; ++j) off[a][j] = (((4 * a + (lt >> 1) + 2 * j) ^ lg) << 4) | ((lt & 1) << 3);
  }
};

// This thread's CB(r, kk + 2t, +1) and CB(r, kk + 2t + 8, +9) from the stage's CB tile: rows LDCB
// floats apart, or with kSwCB the TMA layout of CbSwizzle (BLOCK_M rows per box of 32 floats).
template <bool kSwCB, int LDCB, int BLOCK_M>
__device__ __forceinline__ void cb_pairs(const float* scb, int kk, int r, int lt, const CbSwizzle& sw, float2& c01,
                                         float2& c89) {
  if constexpr (kSwCB) {
    const unsigned char* cbr = reinterpret_cast<const unsigned char*>(scb) + (kk >> 5) * (BLOCK_M * 128) + r * 128;
    c01 = *reinterpret_cast<const float2*>(cbr + sw.off[(kk >> 4) & 1][0]);
    c89 = *reinterpret_cast<const float2*>(cbr + sw.off[(kk >> 4) & 1][1]);
  } else {
    const float* cbr = scb + r * LDCB + kk + 2 * lt;
    c01 = *reinterpret_cast<const float2*>(cbr);
    c89 = *reinterpret_cast<const float2*>(cbr + 8);
  }
}

// One phase-B step (64 positions from ks * 64) of this thread: per k16 slice its A fragment of W, formed
// in fp32 (the mma.sync kernel's expression (CB · decay) · Δ, masked to s <= l) and rounded to T, then
// the wgmma with the x slice (MN-major at descriptor low word x_lo). One slice at a time: its fragment
// is formed while the previous slice's wgmma runs (forming more at once needs more registers).
// The steps from the warpgroup's 64-block r on (below it: w_step_below). kPlain: decay<true> is exact
// for every element (the caller's bound). CB's tile: rows LDCB floats apart, or with kSwCB the TMA
// layout of CbSwizzle (BLOCK_M rows per box).
template <class T, bool kPlain, int LDCB, bool kSwCB, int BLOCK_M, int N>
__device__ __forceinline__ void w_step(WgAcc<N>& acc, const float* s_dA, const float* s_dt, const float* scb,
                                       const float (&a_row)[2], int ks, int m0, int r_lo, int lt, unsigned x_lo,
                                       const CbSwizzle& sw) {
#pragma unroll
  for (int kq = 0; kq < 4; ++kq) {
    FragA a;
    const int kk = 16 * kq;
    const int s01 = ks * 64 + kk + 2 * lt;  // chunk positions of columns 2t, 2t+1 (+8, +9)
    const float2 as01 = *reinterpret_cast<const float2*>(s_dA + s01);
    const float2 as89 = *reinterpret_cast<const float2*>(s_dA + s01 + 8);
    const float2 dt01 = *reinterpret_cast<const float2*>(s_dt + s01);
    const float2 dt89 = *reinterpret_cast<const float2*>(s_dt + s01 + 8);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = r_lo + 8 * half;  // row inside the tile
      const int l = m0 + r;
      const float al = a_row[half];
      float2 c01, c89;
      cb_pairs<kSwCB, LDCB, BLOCK_M>(scb, kk, r, lt, sw, c01, c89);
      float w0 = c01.x * decay<kPlain>(al, as01.x) * dt01.x;
      float w1 = c01.y * decay<kPlain>(al, as01.y) * dt01.y;
      float w8 = c89.x * decay<kPlain>(al, as89.x) * dt89.x;
      float w9 = c89.y * decay<kPlain>(al, as89.y) * dt89.y;
      w0 = keep_if(w0, s01 <= l);
      w1 = keep_if(w1, s01 + 1 <= l);
      w8 = keep_if(w8, s01 + 8 <= l);
      w9 = keep_if(w9, s01 + 9 <= l);
      a.x[half] = ptx::pack2<T>(w0, w1);      // a[0] (row g) / a[1] (row g+8), k = 2t, 2t+1
      a.x[2 + half] = ptx::pack2<T>(w8, w9);  // a[2] / a[3], k = 2t+8, 2t+9
    }
    warpgroup::fence_operand(acc);
    warpgroup::fence();
    warpgroup::mma_rs<T, 1>(acc, a, smem::desc_sw128(x_lo + kk * 128 / 16), true);  // k16 slices 16 rows apart
    warpgroup::commit_group();
    warpgroup::fence_operand(acc);
  }
}

// One phase-B step wholly below this warpgroup's 64-block r (every position s < r <= l of its rows):
// the factored W's first factor, rn_T(CB(l, s) · u_r(s)), u_r(s) = __expf(A(r) - A(s)) · Δ_s from the
// warpgroup's shared row s_u (formed once per tile), one multiply per element and no mask; otherwise
// as w_step. The row factor f(l) multiplies the accumulator after the last such step.
template <class T, int LDCB, bool kSwCB, int BLOCK_M, int N>
__device__ __forceinline__ void w_step_below(WgAcc<N>& acc, const float* s_u, const float* scb, int ks, int r_lo,
                                             int lt, unsigned x_lo, const CbSwizzle& sw) {
#pragma unroll
  for (int kq = 0; kq < 4; ++kq) {
    FragA a;
    const int kk = 16 * kq;
    const int s01 = ks * 64 + kk + 2 * lt;
    const float2 u01 = *reinterpret_cast<const float2*>(s_u + s01);
    const float2 u89 = *reinterpret_cast<const float2*>(s_u + s01 + 8);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = r_lo + 8 * half;
      float2 c01, c89;
      cb_pairs<kSwCB, LDCB, BLOCK_M>(scb, kk, r, lt, sw, c01, c89);
      a.x[half] = ptx::pack2<T>(c01.x * u01.x, c01.y * u01.y);
      a.x[2 + half] = ptx::pack2<T>(c89.x * u89.x, c89.y * u89.y);
    }
    warpgroup::fence_operand(acc);
    warpgroup::fence();
    warpgroup::mma_rs<T, 1>(acc, a, smem::desc_sw128(x_lo + kk * 128 / 16), true);
    warpgroup::commit_group();
    warpgroup::fence_operand(acc);
  }
}

// Byte ranges [a0, a1) and [b0, b1) do not meet.
__host__ __device__ constexpr bool disjoint(int a0, int a1, int b0, int b1) { return a1 <= b0 || b1 <= a0; }

}  // namespace sm90a_detail

template <class Spec, class Params>  // Params: ChunkScanFwdTmaParams with kTma, else ChunkScanFwdParams
__device__ void chunk_scan_fwd_wgmma(const Params& p) {
  SSD_TILE_SPEC_NAMES(Spec);  // Q, P, N, HEADS_PER_GROUP, BLOCK_M, BLOCK_N, BLOCK_K; T: bf16 or fp16
  using S = typename Spec::State;
  using namespace fwd_geom;
  static_assert(chunk_scan_wg_tile_problem(Q, P, N, BLOCK_M, BLOCK_N, BLOCK_K, Spec::kSeqIdx) == nullptr,
                "illegal tile: the host's check (src/kernels) refuses it");
  static_assert(same_type<S, float>::value || same_type<S, T>::value, "state type must be float or the element type");
  // The operand tiles by the tensor copy engine (SSD_FLAG_TMA; P in x's dtype) instead of cp.async.
  constexpr bool kTma = spec_detail::optional_kTma<Spec>(0) != 0;
  static_assert(!kTma || same_type<S, T>::value, "the TMA path reads P in the element type");
  constexpr int NT = chunk_scan_wg_threads(BLOCK_M);  // BLOCK_M / 64 warpgroups
  constexpr int STAGES = chunk_scan_wg_stages();
  constexpr int STAGE = chunk_scan_wg_stage_bytes(BLOCK_M, BLOCK_N, kTma);
  constexpr int STAGES_A = chunk_scan_wg_stages_a(BLOCK_M, BLOCK_N, kTma);  // phase A's ring: smaller stages
  constexpr int STAGE_A = chunk_scan_wg_stage_a_bytes(BLOCK_M, BLOCK_N);
  static_assert(STAGES_A >= 2 && STAGE_A % 1024 == 0, "phase A ring");
  constexpr int TILE0 = chunk_scan_wg_tile0_bytes(BLOCK_M, BLOCK_N);
  constexpr int LDCB = chunk_scan_wg_cb_ld(kTma);
  constexpr int LDO = BLOCK_N + kPad;  // epilogue tile [l][p], fp32
  constexpr int KA = N / 64;            // phase-A steps (64 n each)
  constexpr int TILES_N = P / BLOCK_N;
  constexpr int TILES_M = Q / BLOCK_M;
  constexpr int TILES = chunk_scan_tiles(Q, P, BLOCK_M, BLOCK_N);
  static_assert(TILE0 % 1024 == 0 && STAGE % 1024 == 0, "swizzled tiles start 1024-byte aligned");
  static_assert(chunk_scan_wg_epilogue_bytes(BLOCK_M, BLOCK_N) <= chunk_scan_wg_body_bytes(BLOCK_M, BLOCK_N, kTma),
                "epilogue tile");
  static_assert(STAGES_A + STAGES + 1 <= chunk_scan_wg_barriers() && STAGES_A <= 4, "the TMA rings' mbarriers");
  using Acc = WgAcc<BLOCK_N>;
  // Phase B's step 0 goes to a stage whose bytes phase A's last step (its stage (KA - 1) % STAGES_A)
  // does not read, when one exists (kEarlyB): its copies are then issued at that step's barrier, one
  // phase-A step ahead of phase B. Step ks uses stage (ks + B0) % STAGES.
  constexpr int LAST_A = (KA - 1) % STAGES_A;
  constexpr bool kB0Free = sm90a_detail::disjoint(0, STAGE, LAST_A * STAGE_A, (LAST_A + 1) * STAGE_A);
  constexpr bool kB1Free = sm90a_detail::disjoint(STAGE, 2 * STAGE, LAST_A * STAGE_A, (LAST_A + 1) * STAGE_A);
  constexpr bool kEarlyB = kB0Free || kB1Free;
  constexpr int B0 = kB0Free ? 0 : kB1Free ? 1 : 0;

  extern __shared__ unsigned char s_dyn[];
  float* s_dA = reinterpret_cast<float*>(s_dyn);
  float* s_dt = s_dA + Q;
  int* s_seq = reinterpret_cast<int*>(s_dt + Q);  // Q entries with seq_idx
  unsigned char* s_body = smem::align1024(s_dyn + chunk_scan_wg_fixed_bytes(Q, BLOCK_M, Spec::kSeqIdx, kTma));
  const unsigned body_addr = ptx::smem_addr(s_body);
  // With kTma: full barriers of phase A's slots (0..3), phase B's (4, 5) and the chunk's A, Δ rows (7),
  // one arrival each (thread 0's arrive.expect_tx) plus the copies' bytes. Every thread waits once for
  // every phase of the barriers it reads through, so each keeps the same parity bits (one per barrier).
  unsigned long long* const s_bar = reinterpret_cast<unsigned long long*>(s_dyn + two_phase_fixed_bytes(Q, Spec::kSeqIdx));
  constexpr int kBarB = 4, kBarRows = 7;
  // The factored W's u rows (chunk_scan_wg_u_bytes: Δ's row itself with 64 rows, else one of Q per
  // warpgroup), written and read by ordinary accesses.
  float* const s_u_rows = reinterpret_cast<float*>(s_dyn + chunk_scan_wg_u_offset(Q, Spec::kSeqIdx, kTma));
  MbarrierParities parity;
  auto wait_bar = [&](int i) { parity.wait(s_bar, i); };

  const int tid = threadIdx.x;
  const int wg = BLOCK_M == 64 ? 0 : tid >> 7;  // warpgroup: tile rows 64 wg .. 64 wg + 63
  const int lane = tid & 31;
  const int lg = lane >> 2, lt = lane & 3;
  const int r_lo = 64 * wg + 16 * ((tid >> 5) & 3) + lg;  // this thread's tile rows: r_lo and r_lo + 8
  float* const s_u = BLOCK_M == 64 ? s_dt : s_u_rows + wg * Q;  // this warpgroup's u_r row
  sm90a_detail::CbSwizzle cb_sw;
  if constexpr (kTma) {
    cb_sw.init(lg, lt);
    if (tid == 0) {
#pragma unroll
      for (int i = 0; i < chunk_scan_wg_barriers(); ++i) ptx::mbarrier_init(s_bar + i, 1);
      ptx::fence_mbarrier_init();
      ptx::tma_prefetch_map(&p.map_c);
      ptx::tma_prefetch_map(&p.map_states);
      ptx::tma_prefetch_map(&p.map_x);
      ptx::tma_prefetch_map(&p.map_cb);
    }
    __syncthreads();
  }

  const T* xg = static_cast<const T*>(p.x.data);
  const T* Cg = static_cast<const T*>(p.C.data);
  const S* Pg = static_cast<const S*>(p.states.data);
  const detail::ChunkScanVec vec = detail::chunk_scan_vec<S, Spec::kZ>(p);
  const int batch = int(p.batch), nheads = int(p.nheads);
  const int nbc = int(p.batch * p.nchunks);

  for (int h = blockIdx.z; h < nheads; h += gridDim.z) {
    const int g = h / HEADS_PER_GROUP;
    float d_head = 0.f;
    if (Spec::kD && !Spec::kDPerHeaddim) d_head = p.D.data[h * p.D.stride[0]];
    for (int bc = blockIdx.y; bc < nbc; bc += gridDim.y) {
      SSD_CHUNK_COORDS(bc, batch, Q, p.seqlen);  // b, c, t0, valid: λ_c = valid - 1
      const float* dA = p.dA_cumsum.ptr(b, h, c);
      const float* dt = p.dt.ptr(b, h, c);
      const T* safe_x = xg + p.x.offset(b, 0, h);
      const T* safe_c = Cg + p.C.offset(b, 0, g);
      const float* cb_base = p.CB.ptr(b, c, g);
      int q_prev = 0;
      if (Spec::kSeqIdx && c > 0) q_prev = p.seq_idx(b, t0 - 1);

      for (int tile = blockIdx.x; tile < TILES; tile += gridDim.x) {
        const int m0 = (TILES_M - 1 - tile / TILES_N) * BLOCK_M;  // longest rows first
        const int p0 = (tile % TILES_N) * BLOCK_N;
        if (m0 >= valid) continue;  // rows all padding (uniform over the block; no shared memory touched)
        const int kend = (m0 + BLOCK_M < valid) ? m0 + BLOCK_M : valid;  // positions s < kend are needed
        const int KB = (kend + 63) / 64;                                   // phase-B steps (64 s each)

        // Per-position fp32 data of the whole chunk (visible after phase A's first barrier). With
        // 16-byte aligned rows by cp.async in phase A's first copy group: a synchronous load here
        // would hold every thread for one memory latency before its first tile copy is issued.
        const bool rows_bulk = kTma && aligned16(dA) && aligned16(dt);  // one bulk copy each, on s_bar[kBarRows]
        if (rows_bulk) {
          if (tid == 0) {
            ptx::mbarrier_arrive_expect_tx(s_bar + kBarRows, 2 * Q * 4);
            ptx::bulk_load(s_dA, dA, Q * 4, s_bar + kBarRows);
            ptx::bulk_load(s_dt, dt, Q * 4, s_bar + kBarRows);
          }
        } else if (!kTma && aligned16(dA) && aligned16(dt)) {
          for (int i = tid; i < Q / 2; i += NT) {  // Q / 4 16-byte chunks per row
            const bool second = i >= Q / 4;
            const int j = (second ? i - Q / 4 : i) * 4;
            ptx::cp_async_16(ptx::smem_addr((second ? s_dt : s_dA) + j), (second ? dt : dA) + j, true);
          }
        } else {
          for (int l = tid; l < Q; l += NT) {
            s_dA[l] = dA[l];
            s_dt[l] = dt[l];
          }
        }
        if (Spec::kSeqIdx)
          for (int l = tid; l < Q; l += NT) s_seq[l] = l < valid ? p.seq_idx(b, t0 + l) : -1;

        // Phase B's copies of step st (the CB and x tiles) into stage buf.
        const float* cbt = cb_base + (long long)m0 * p.CB.stride[3];
        const T* xt = safe_x + t0 * p.x.stride[1] + p0 * p.x.stride[3];
        const int bc_mem = b * int(p.nchunks) + c;  // (b, c) in memory order: the maps' outer coordinate
        auto load_b = [&](int buf, int st) {
          unsigned char* sx = s_body + buf * STAGE;
          const int k0 = st * 64;
          if constexpr (kTma) {
            if (tid == 0) {
              unsigned long long* bar = s_bar + kBarB + buf;
              ptx::mbarrier_arrive_expect_tx(bar, BLOCK_M * 64 * 4 + 64 * BLOCK_N * 2);
#pragma unroll
              for (int j = 0; j < BLOCK_N / 64; ++j)
                ptx::tma_load_4d(sx + j * 64 * 128, &p.map_x, bar, p0 + 64 * j, h, int(t0) + k0, b);
#pragma unroll
              for (int i = 0; i < 2; ++i)
                ptx::tma_load_4d(sx + TILE0 + i * BLOCK_M * 128, &p.map_cb, bar, k0 + 32 * i, m0, g, bc_mem);
            }
          } else {
            sm90a_detail::load_cb_tile<NT, BLOCK_M, LDCB>(reinterpret_cast<float*>(sx + TILE0), cbt + k0,
                                                          p.CB.stride[3], vec.cb, [&](int r, int c0) {
                                                            return k0 + c0 <= m0 + r && m0 + r < valid;
                                                          });
#pragma unroll
            for (int j = 0; j < BLOCK_N / 64; ++j)
              sm90a_detail::load_tile_sw128<NT, 64>(sx + j * 64 * 128, xt + k0 * p.x.stride[1] + 64 * j * p.x.stride[3],
                                                    p.x.stride[1], p.x.stride[3], vec.x, safe_x,
                                                    [&](int r, int) { return k0 + r < valid; });
          }
        };

        Acc acc;
        acc.zero();

        // ---------------- Phase A: acc = C_tile · P_cᵀ (contraction over n, 64 per step) ----------------
        {
          const T* ct = safe_c + (t0 + m0) * p.C.stride[1];
          const S* pt = Pg + p.states.offset(b, c, h, p0);
          auto load_a = [&](int buf, int st) {
            unsigned char* sc = s_body + buf * STAGE_A;
            const int k0 = st * 64;
            if constexpr (kTma) {
              if (tid == 0) {
                unsigned long long* bar = s_bar + buf;
                ptx::mbarrier_arrive_expect_tx(bar, (BLOCK_M + BLOCK_N) * 128);
                ptx::tma_load_4d(sc, &p.map_c, bar, k0, g, int(t0) + m0, b);
                ptx::tma_load_4d(sc + BLOCK_M * 128, &p.map_states, bar, k0, p0, h, bc_mem);
              }
            } else {
              sm90a_detail::load_tile_sw128<NT, BLOCK_M>(sc, ct + k0 * p.C.stride[3], p.C.stride[1], p.C.stride[3],
                                                         vec.c, safe_c, [&](int r, int) { return m0 + r < valid; });
              if constexpr (same_type<S, float>::value) {
                sm90a_detail::load_tile_sw128_f32<NT, BLOCK_N, T>(sc + BLOCK_M * 128, pt + k0, p.states.stride[3],
                                                                  vec.p);
              } else {
                sm90a_detail::load_tile_sw128<NT, BLOCK_N>(sc + BLOCK_M * 128, pt + k0, p.states.stride[3], 1, vec.p,
                                                           pt, [&](int, int) { return true; });
              }
            }
          };
#pragma unroll
          for (int st = 0; st < STAGES_A - 1; ++st) {
            if (st < KA) load_a(st, st);
            if constexpr (!kTma) ptx::cp_async_commit();
          }
          int sa = 0;  // ks % STAGES_A
#pragma unroll 1
          for (int ks = 0; ks < KA; ++ks) {
            if constexpr (kTma) {
              wait_bar(sa);     // step ks's tiles landed (the copy engine writes through the async proxy)
              __syncthreads();  // every wgmma of step ks-1 is complete: its stage may be refilled
            } else {
              ptx::cp_async_wait<STAGES_A - 2>();
              ptx::fence_proxy_async_shared();  // this thread's copies / stores, before wgmma reads them
              __syncthreads();                  // step ks visible to all; every wgmma of step ks-1 is complete
            }
            if (ks + STAGES_A - 1 < KA) load_a(sa == 0 ? STAGES_A - 1 : sa - 1, ks + STAGES_A - 1);
            if (kEarlyB && ks == KA - 1) load_b(B0, 0);  // bytes no wgmma reads any more
            if constexpr (!kTma) ptx::cp_async_commit();
            {
              // This warpgroup's 64 rows of the C tile (64 rows x 128 bytes each further); the k16
              // slices 32 bytes apart.
              const unsigned a_lo = smem::desc_lo_sw128(body_addr + sa * STAGE_A + wg * 64 * 128, 16);
              const unsigned b_lo = smem::desc_lo_sw128(body_addr + sa * STAGE_A + BLOCK_M * 128, 16);
              warpgroup::fence_operand(acc);
              warpgroup::fence();
#pragma unroll
              for (int kk = 0; kk < 64; kk += 16)
                warpgroup::mma_ss<T, 0, 0>(acc, smem::desc_sw128(a_lo + kk * 2 / 16),
                                           smem::desc_sw128(b_lo + kk * 2 / 16), true);
              warpgroup::commit_group();
              warpgroup::wait_group<0>();
              warpgroup::fence_operand(acc);
            }
            sa = sa + 1 == STAGES_A ? 0 : sa + 1;
          }
          if constexpr (!kEarlyB) {
            if constexpr (!kTma) ptx::cp_async_wait<0>();
            __syncthreads();  // phase-A stages are reused by phase B
          }
          // With kEarlyB phase B's first barrier is the one that frees phase A's last stage.
        }

        if (rows_bulk) wait_bar(kBarRows);  // the chunk's A, Δ rows (long since landed)
        // The rows' 64-block r = row0 (the warpgroup's first row). Row scale: e_l = exp(A(l)) where
        // r = 0, else exp(A(r)), the row factor f(l) = exp(A(l) - A(r)) following the steps below r;
        // the rows' A(l) for the direct W of the steps from r on.
        const int row0 = m0 + 64 * wg;
        float a_row[2];
        {
          const float a_r = s_dA[row0];
          float e[2];
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int l = m0 + r_lo + 8 * half;
            const float al = s_dA[l];
            a_row[half] = al;
            bool keep = l < valid;
            if (Spec::kSeqIdx) keep = keep && s_seq[l] == q_prev;
            e[half] = keep ? __expf(row0 > 0 ? a_r : al) : 0.f;
          }
#pragma unroll
          for (int i = 0; i < Acc::kRegs; ++i) acc.x[i] *= e[(i >> 1) & 1];
        }
        // u_r(s) = exp(A(r) - A(s)) · Δ_s for s < r, this warpgroup's row (read after phase B's first
        // barrier; the previous tile's reads ended at its last barrier). With 64 rows in place over
        // Δ_s, each element read and rewritten by one thread: the steps from r on read Δ_s for s >= r
        // only. (The next tile's copies rewrite the row: the cp.async ones through the same proxy,
        // the bulk copy after the end-of-tile proxy fence.)
        for (int s = tid & 127; s < row0; s += 128) s_u[s] = detail::factored_u(s_dA[row0], s_dA[s], s_dt[s]);

        // ---------------- Phase B: acc += W · X (contraction over s, 64 per step) ----------------
        {
#pragma unroll
          for (int st = 0; st < STAGES - 1; ++st) {
            if (st < KB && !(kEarlyB && st == 0)) load_b((st + B0) % STAGES, st);
            if constexpr (!kTma) ptx::cp_async_commit();
          }
          // The direct W's exponents (the steps from the warpgroup's 64-block r on; the factored W
          // below it takes u_r, formed by the guarded __expf) are t = rn(min(A(l) - A(s), 0) · log2 e)
          // (decay). Over this thread's rows (A(l) >= al_lo) and the positions r <= s < KB · 64
          // (A(s) <= as_hi) rounding is monotonic, so every t >= rn(min(al_lo - as_hi, 0) · log2 e); an
          // A(l) or A(s) that is NaN gives min(NaN, 0) = 0 (fminf / fmaxf drop NaNs from the bounds; a
          // bound that is NaN fails the test). When that bound is >= -126 for every thread of the
          // block, the tile uses decay<true>: the same bits without the subnormal guard. One loop per
          // variant: a choice per step inside one loop makes ptxas spill.
          float as_hi = s_dA[row0 + lane];  // every warp of the warpgroup the same: the largest A(s) it needs
          for (int pos = row0 + lane + 32; pos < KB * 64; pos += 32) as_hi = fmaxf(as_hi, s_dA[pos]);
#pragma unroll
          for (int o = 16; o >= 1; o >>= 1) as_hi = fmaxf(as_hi, __shfl_xor_sync(0xffffffffu, as_hi, o));
          const float al_lo = fminf(a_row[0], a_row[1]);
          const bool plain_here = fminf(al_lo - as_hi, 0.f) * sm90a_detail::kLog2e >= -126.f;
          // Phase B's first barrier (step 0's tiles visible; with kEarlyB phase A's last stage free),
          // reducing the test over the block: the choice is the same for all its warpgroups.
          if constexpr (kTma) {
            wait_bar(kBarB + B0 % STAGES);
          } else {
            ptx::cp_async_wait<STAGES - 2>();
            ptx::fence_proxy_async_shared();
          }
          const bool plain = __syncthreads_and(plain_here) != 0;
          int sb = B0 % STAGES;  // (ks + B0) % STAGES
          // kBelow: the factored W (w_step_below); else the direct W with the mask.
          auto run = [&](const bool kPlain, const bool kBelow, int ks_begin, int ks_end) {
#pragma unroll 1
            for (int ks = ks_begin; ks < ks_end; ++ks) {
              if (ks > 0) {  // step 0's barrier is the one above
                if constexpr (kTma) {
                  wait_bar(kBarB + sb);
                } else {
                  ptx::cp_async_wait<STAGES - 2>();
                  ptx::fence_proxy_async_shared();
                }
                __syncthreads();
              }
              if (ks + STAGES - 1 < KB) load_b(sb == 0 ? STAGES - 1 : sb - 1, ks + STAGES - 1);
              if constexpr (!kTma) ptx::cp_async_commit();
              const float* scb = reinterpret_cast<const float*>(s_body + sb * STAGE + TILE0);
              // x [s][p], MN-major: the k16 slices 16 rows of 128 bytes apart.
              const unsigned x_lo = smem::desc_lo_sw128(body_addr + sb * STAGE, 64 * 128);
              if (kBelow)
                sm90a_detail::w_step_below<T, LDCB, kTma, BLOCK_M>(acc, s_u, scb, ks, r_lo, lt, x_lo, cb_sw);
              else if (kPlain)
                sm90a_detail::w_step<T, true, LDCB, kTma, BLOCK_M>(acc, s_dA, s_dt, scb, a_row, ks, m0, r_lo, lt,
                                                                         x_lo, cb_sw);
              else
                sm90a_detail::w_step<T, false, LDCB, kTma, BLOCK_M>(acc, s_dA, s_dt, scb, a_row, ks, m0, r_lo, lt,
                                                                          x_lo, cb_sw);
              warpgroup::wait_group<0>();
              warpgroup::fence_operand(acc);
              sb = sb + 1 == STAGES ? 0 : sb + 1;
            }
          };
          // Steps ks < kb_below lie wholly before the warpgroup's 64-block r: the factored W, then
          // the row factor f(l); the steps from r on: the direct W.
          const int kb_below = row0 / 64 < KB ? row0 / 64 : KB;
          if (kb_below > 0) {
            run(true, true, 0, kb_below);
            const float a_r = s_dA[row0];  // f(l) formed here: no registers held over the loop
            const float f_row[2] = {detail::row_factor(a_row[0], a_r), detail::row_factor(a_row[1], a_r)};
#pragma unroll
            for (int i = 0; i < Acc::kRegs; ++i) acc.x[i] *= f_row[(i >> 1) & 1];
          }
          if (plain) {
            run(true, false, kb_below, KB);
          } else {
            run(false, false, kb_below, KB);
          }
        }
        if constexpr (!kTma) ptx::cp_async_wait<0>();
        __syncthreads();  // every thread's wgmma is complete: the stages are reused by the epilogue tile

        // ---------------- Epilogue: D, z, 16-byte stores ----------------
        // With 64 rows the last phase-B step's x tile holds exactly this tile's rows (its s-block is
        // m0 / 64): D·x reads x there instead of from global memory, and the fp32 tile goes to the
        // other stage.
        constexpr bool kXFromTile = BLOCK_M == 64;
        static_assert(!kXFromTile || (STAGES == 2 && chunk_scan_wg_epilogue_bytes(BLOCK_M, BLOCK_N) <= STAGE),
                      "epilogue tile next to the last x tile");
        const int other = kXFromTile ? (KB + B0) & 1 : 0;  // the stage the last step (KB - 1) did not use
        float* so = reinterpret_cast<float*>(s_body + other * STAGE);
#pragma unroll
        for (int i = 0; i < Acc::kRegs; i += 2)
          *reinterpret_cast<float2*>(so + (64 * wg + Acc::row(i)) * LDO + Acc::col(i)) =
              make_float2(acc.x[i], acc.x[i + 1]);
        __syncthreads();
        {
          constexpr int CPR = BLOCK_N / 8;
          constexpr int TOTAL = BLOCK_M * CPR;
          for (int i = tid; i < TOTAL; i += NT) {
            const int r = i / CPR, cc = (i % CPR) * 8;
            const int l = m0 + r;
            if (l >= valid) continue;
            const long long t = t0 + l;
            const long long pp = p0 + cc;
            float y[8];
            {
              const float4 y0 = *reinterpret_cast<const float4*>(so + r * LDO + cc);
              const float4 y1 = *reinterpret_cast<const float4*>(so + r * LDO + cc + 4);
              y[0] = y0.x, y[1] = y0.y, y[2] = y0.z, y[3] = y0.w;
              y[4] = y1.x, y[5] = y1.y, y[6] = y1.z, y[7] = y1.w;
            }
            if (Spec::kD) {
              float xv[8];
              if constexpr (kXFromTile) {
                const uint4 u = *reinterpret_cast<const uint4*>(s_body + (other ^ 1) * STAGE + (cc >> 6) * 64 * 128 +
                                                                smem::swizzle128_offset(r, cc & 63));
                ptx::unpack2<T>(u.x, xv[0], xv[1]);
                ptx::unpack2<T>(u.y, xv[2], xv[3]);
                ptx::unpack2<T>(u.z, xv[4], xv[5]);
                ptx::unpack2<T>(u.w, xv[6], xv[7]);
              } else {
                detail::load8<T>(xg, p.x.offset(b, t, h, pp), p.x.stride[3], vec.x, xv);
              }
#pragma unroll
              for (int v = 0; v < 8; ++v) {
                const float d = Spec::kDPerHeaddim ? p.D(h, pp + v) : d_head;
                y[v] = __fmaf_rn(xv[v], d, y[v]);
              }
            }
            if (Spec::kZ) {
              detail::store8<T>(static_cast<T*>(p.out_x.data), p.out_x.offset(b, t, h, pp), p.out_x.stride[3], vec.ox,
                                y);
              float zv[8];
              detail::load8<T>(static_cast<const T*>(p.z.data), p.z.offset(b, t, h, pp), p.z.stride[3], vec.z, zv);
              silu_gate<8>(y, zv);  // y · (z · (1 / (1 + __expf(−z)))), the IEEE division's bits
            }
            detail::store8<T>(static_cast<T*>(p.out.data), p.out.offset(b, t, h, pp), p.out.stride[3], vec.out, y);
          }
        }
        // The epilogue tile's ordinary stores, before the copy engine writes the same bytes next tile.
        if constexpr (kTma) ptx::fence_proxy_async_shared();
        __syncthreads();  // the epilogue tile and the per-position arrays are reused by the next tile
      }
    }
  }
}

}  // namespace ssd_kernels
