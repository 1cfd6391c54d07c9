// chunk_scan_bwd_dx (math B-d, and the per-position w_l, v_l of B-g): per (batch b, chunk c, head h),
// group g = h / HEADS_PER_GROUP, chunk rows l (t = cQ + l), λ = λ_c = valid - 1, A = dA_cumsum, Δ = dt:
//
//   v_l     = e_l · Σ_p dy_lp · (C_l P_cᵀ)_p                 e_l    = η_c(l) ? exp(A(l)) : 0
//   Rst_l   = eend_l · (B_l ds_cᵀ)                           eend_l = ξ_c(l) ? exp(min(A(Q-1) − A(l), 0)) : 0
//   w_l     = Δ_l · Σ_p x_lp · Rst_lp
//   R_l     = Rst_l + Σ_m Wt(l, m) · dy_m
//             Wt(l, m) = (l <= m && m <= λ) ? CB(m, l) · exp(min(A(m) − A(l), 0)) : 0
//   dx_l    = fma(dy_l, D, Δ_l · R_l)   (Δ_l · R_l without D)   stored in T, rows l <= λ only
//   dΔˣst_l = Σ_p x_lp · Rst_lp   (dΔˣ's state part; the intra part Σ_p x_lp (R − Rst)_lp is formed from
//             exact products by chunk_scan_bwd_ddA_intra, and chunk_scan_bwd_ddA adds the two)
// with η_c(l) = [seq_idx(t) == seq_idx(cQ-1)] (seq_idx(-1) := 0) and ξ_c(l) = [seq_idx(t) == seq_idx(cQ+λ)]
// (both 1 without seq_idx, both 0 for l > λ). D is per head (D[h]) or per (head, p). ddt_x (dΔˣ), w
// and v are (b, h, nchunks, Q) fp32; every one of their Q slots is written exactly once (0 past λ),
// by the block owning the row; dx rows past λ are never written.
//
// Operand precision: P_c and ds_c enter as two T terms each, hi = rn_T(v) and lo = rn_T(v − hi),
// written by state_passing_bwd from the fp32 values (issue 11: a single rn_T of P and ds was the
// largest error of dA, v and w being whole-sequence sums' terms); Wt is formed in fp32, selected
// (masked entries are exact zeros, never multiplied by a mask), then rounded to T (it feeds dx
// only); the dy tile is the T input. All contractions accumulate in fp32 on
// the tensor cores; the row scales and the epilogue are fp32 with __fmul_rn / __fmaf_rn, exp is
// __expf. CB (fp32, row m, unit stride along l) is read transposed, as 16-byte groups (m, l0..l0+3)
// only when l0 <= m and m <= λ: such a group always lies in a tile bmm_chunk_fwd wrote.
//
// Canonical order, per row l (one fp32 accumulator per (l, p), one thread owns it):
//   1. acc = 0; K loop over n in min(BLOCK_K, N) steps, increasing n, each a chain of mma K=16 in
//      increasing n (C_l · P_c,hi), then the same loop again on the same acc (C_l · P_c,lo);  dot_l = Σ_p over p = 0..P-1 increasing, from +0.0, of
//      fma(float(dy_lp), acc_lp, dot) (one thread walks the row);  v_l = __fmul_rn(e_l, dot_l).
//      With z (kDyLo, SSD_FLAG_Z; params ChunkScanBwdDxZParams) dy is gate_bwd's fp32 dy as two T
//      terms, dy and dy_lo = rn_T(dy_fp32 − float(dy)), and each p adds both, lo first:
//      dot = fma(float(dy_lp), acc_lp, fma(float(dy_lo_lp), acc_lp, dot)) (issue 11: dy's rounding
//      to T no longer enters v). dy_lo enters v only; dx itself (steps 3, 4) keeps the T dy.
//   2. acc = 0; same two n loops (B_l · ds_c,hi, then B_l · ds_c,lo);  acc = __fmul_rn(acc, eend_l)
//      (this is Rst); dΔˣst_l = Σ_p (p increasing, from +0.0, fma) float(x_lp) · Rst_lp;
//      w_l = __fmul_rn(Δ_l, dΔˣst_l).
//   3. acc += K loop over m from the BLOCK_K step containing the tile's first row m0 to the step
//      containing λ, increasing m, each a chain of BLOCK_K/16 mma K=16 in increasing m (Wt · dy).
//   4. R = acc;  dx_lp as above (one thread per element).
// Why it does not depend on the tile: BLOCK_K only groups the same K=16 mma steps into fewer
// shared-memory stages; the n chains always start at n = 0; in step 3 a row l's nonzero terms are
// m in [l, λ], and BLOCK_M / BLOCK_K only change how many all-zero K=16 steps (m < l, or m > λ) are
// added around them (adding exact zeros changes nothing but the sign of a zero result). The warp
// split and the grid only move whole rows or whole (row, p) outputs. The p sums are sequential
// loops of one thread over the staged tile, whichever warp produced each column.
//
// Launch: block = bwd_geom::dx_threads() = 256 threads = 8 warps, one 16-row band each: a
//         (BLOCK_M/16) (rows) x (128/BLOCK_M) (P blocks) grid, i.e. 8 x 1 for BLOCK_M = 128 and
//         4 x 2 for 64. Warp w owns rows [(w / WARPS_N)·16, +16) of the tile and columns
//         [(w % WARPS_N)·P/WARPS_N, +P/WARPS_N). Each warp forms Wt (the A operand, an exp per
//         element) only for its own rows, so with 128 rows no element is formed twice; with 64
//         the two column warps of a band form the same rows (their B operands are disjoint).
//         Every mma chain, fragment and fp32 operation is the same whichever warp runs it.
//         grid = (bwd_geom::dx_tiles(Q, BLOCK_M), batch * nchunks, nheads), each axis grid-stride
//         (x is walked with the longest m-ranges, i.e. the smallest m0, first). Shared memory, two
//         layouts of the same stages: on sm_80, static bwd_geom::dx_smem_bytes(Q, P, N, BLOCK_M,
//         BLOCK_K, HAS_SEQ_IDX) <= 48 KiB, the n loops' row tile copied with each step; on sm_90 and
//         sm_90a (Spec::kResidentRows) the body is dynamic, bwd_geom::dx_res_dynamic_bytes (the fixed
//         arrays static), and the row tile (C | B, all N columns) is copied once per phase, in the hi
//         chain's steps, and read again by the lo chain (2 blocks per SM, bwd_geom::dx_res_budget).
//         Only where operands wait in shared memory changes: the same chains, the same bits.
// Tiles: BLOCK_M in {64, 128} dividing Q, BLOCK_M · P <= 8192 (at most 32 fp32 accumulators per
//        thread), BLOCK_K in
//        {16, 32, 64} dividing Q, min(BLOCK_K, N) dividing N, and the shared memory bound (the
//        host checks bwd_geom::dx_smem_bytes; e.g. BLOCK_K = 64 fits only for small P).
#pragma once

#include "ssd/backward_params.cuh"
#include "ssd/chunk_scan.cuh"  // detail::load8 / store8 / vec16_bhlp
#include "ssd/primitives/dtype.cuh"
#include "ssd/primitives/mma.cuh"
#include "ssd/primitives/spec.cuh"
#include "ssd/primitives/tile_stream.cuh"  // warp::load_a_at / load_b2_at / load_b2_trans_at

namespace ssd_kernels {

namespace detail {

// This lane's element offsets of the ldmatrix fragments of warp::load_a / load_b2 / load_b2_trans
// in a tile of row stride ld: the kernel forms each warp's lane address once (32-bit shared window)
// and adds the fragment's offset as a constant (an immediate of the LDSM), through
// warp::load_a_at / load_b2_at / load_b2_trans_at (primitives/tile_stream.cuh). Kept as the int
// sums the kernel's offsets were written with: warp::*_lane_offset give the same values, but NVVM
// then schedules the kernel's prologue differently (other machine code for the same results).
__device__ __forceinline__ int dx_lane_a(int lane, int ld) { return (lane & 15) * ld + (lane >> 4) * 8; }
__device__ __forceinline__ int dx_lane_b2(int lane, int ld) {
  return ((lane & 7) + ((lane >> 4) << 3)) * ld + ((lane >> 3) & 1) * 8;
}
__device__ __forceinline__ int dx_lane_b2_trans(int lane, int ld) {
  return ((lane & 7) + (((lane >> 3) & 1) << 3)) * ld + (lane >> 4) * 8;
}

// v through an empty asm statement: the compiler cannot move what is computed from the copy
// away from where the copy is made (out of a loop, or to a common earlier point).
__device__ __forceinline__ int dx_opaque(int v) {
  asm volatile("" : "+r"(v));
  return v;
}

// Pulls the lines of row[0 .. P-1] (one 16-byte aligned row of a (b, L, h, p) tensor in global
// memory, unit stride) into L1 (ptx::prefetch_global_l1), so the row sums' later loads of the row hit
// L1 (or L2) instead of waiting for DRAM. Only addresses those loads read; a hint only.
template <int P, class T>
__device__ __forceinline__ void dx_prefetch_row(const T* row) {
  constexpr int kLine = 128 / int(sizeof(T));  // elements per 128-byte line
#pragma unroll
  for (int cc = 0; cc < P; cc += kLine) ptx::prefetch_global_l1(row + cc);
  ptx::prefetch_global_l1(row + P - 1);  // the line a row straddling a line boundary ends in
}

// One thread's share of a cp.async copy of a ROWS x COLS tile of E (16-byte chunks of V elements,
// shared rows of LD elements), as block::load_tile's vec path when NT is a multiple of the chunks
// per row (kRowWalk): the thread copies chunks (row0() + it·RSTEP, col()) for it < ITERS (those
// with has(it)). The kernel forms the thread's source pointers once per tile (64-bit there only) and
// adds the step's offset; its destination is the stage's byte address + dst() + it·kIterBytes.
template <int NT, int ROWS, int COLS, int LD, class E>
struct DxChunks {
  static constexpr int V = 16 / int(sizeof(E));
  static_assert(COLS % V == 0 && LD % V == 0, "16-byte chunks");
  static constexpr int CPR = COLS / V;
  static constexpr bool kRowWalk = NT % CPR == 0;
  static constexpr int RSTEP = kRowWalk ? NT / CPR : 1;
  static constexpr int ITERS = (ROWS * CPR + NT - 1) / NT;
  static constexpr unsigned kIterBytes = unsigned(RSTEP * LD * int(sizeof(E)));
  __device__ __forceinline__ static int row0() { return int(threadIdx.x) / CPR; }
  __device__ __forceinline__ static int col() { return (int(threadIdx.x) % CPR) * V; }
  __device__ __forceinline__ static unsigned dst() { return unsigned((row0() * LD + col()) * int(sizeof(E))); }
  __device__ __forceinline__ static bool has(int it) { return (ROWS * CPR) % NT == 0 || row0() + it * RSTEP < ROWS; }
};

// K loop over n shared by phases A2 and A1 of chunk_scan_bwd_dx: acc += RowTile(l, n) · KTile(p, n)ᵀ,
// min(BLOCK_K, N) = BKN per step in increasing n, each step a chain of BKN/16 mma K=16 in increasing
// n. KA steps: the hi term's chain over n (steps 0 .. KA/2-1), then the lo term's on the same acc.
// Without LDR (0): stage buf (shared byte address s_body + buf·STAGE_A) holds the row tile
// [BLOCK_M][LDA] then the K tile [P][LDA] (type T), both copied every step. With LDR (resident
// rows, bwd_geom::dx_res_*): the row tile [BLOCK_M][LDR] (all N columns) sits at s_body for the whole
// loop, its columns of step ks copied with step ks's K tile in the hi chain's steps only; the
// stages (K tile only) start at s_body + RES_BYTES. a_lane / b_lane: this lane's byte offsets of its
// warp's first A fragment (rows wm0 ..) in the row tile and first B pair (K-tile rows wn0 ..) in a
// stage. load_stage(buf, ks) issues the cp.async copies of step ks into buffer buf. STAGES buffers:
// STAGES - 1 steps' copies in flight behind the step being multiplied. while_copying() runs after
// the first STAGES - 1 steps' copies are issued, before the first wait (work that overlaps them).
template <int NT, int STAGES, int KA, int BKN, int LDA, int STAGE_A, int MI, int NJ, class T, class LoadStage,
          class WhileCopying, int LDR = 0, int RES_BYTES = 0>
__device__ __forceinline__ void dx_n_loop(FragC (&acc)[MI][NJ], unsigned s_body, unsigned a_lane, unsigned b_lane,
                                          LoadStage& load_stage, const WhileCopying& while_copying) {
  const block::CpAsyncPipeline<STAGES> ring{KA};
  ring.prologue(load_stage);
  while_copying();
  // ring.begin(ks, load_stage) written out with the buffers by rotation instead of ks % STAGES
  // (with 3 buffers the division cost ptxas registers, and a spill): step ks reads buffer `rd`;
  // the copy of step ks + STAGES - 1 goes to `wr`, the buffer step ks - 1 freed. The same copies,
  // waits and barrier, in the same order.
  int rd = 0, wr = STAGES - 1;
  unsigned row_col = 0;  // resident rows: the byte offset of step ks's first column in the row tile
  for (int ks = 0; ks < KA; ++ks) {
    ptx::cp_async_wait<STAGES - 2>();
    __syncthreads();
    if (ks + STAGES - 1 < KA) load_stage(wr, ks + STAGES - 1);
    ptx::cp_async_commit();
    const unsigned stage = s_body + unsigned(RES_BYTES + rd * STAGE_A);
    rd = rd == STAGES - 1 ? 0 : rd + 1;
    wr = wr == STAGES - 1 ? 0 : wr + 1;
    unsigned sa;
    if constexpr (LDR != 0) {
      sa = s_body + a_lane + row_col;
      row_col = ks == KA / 2 - 1 ? 0u : row_col + unsigned(BKN * 2);
    } else {
      sa = stage + a_lane;
    }
    const unsigned sk = stage + b_lane;
    constexpr int LD_ROWS = LDR != 0 ? LDR : LDA;
#pragma unroll
    for (int kk = 0; kk < BKN; kk += 16) {
      SSD_WARP_MMA_K16_PAIRS(T, acc, warp::load_a_at(a[i], sa + unsigned((16 * i * LD_ROWS + kk) * 2)),
                             warp::load_b2_at(b0, b1, sk + unsigned((8 * j * LDA + kk) * 2)));
    }
  }
  ring.drain();
  __syncthreads();  // the stage buffers are reused by the staging tile
}

// The TMA specialization's fence between this thread's ordinary shared-memory accesses and the copy
// engine's later writes of the same bytes (fence.proxy.async; sm_90a), before the block barrier that
// precedes those copies; nothing without TMA.
template <bool TMA>
__device__ __forceinline__ void dx_fence_for_copy_engine() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (TMA) ptx::fence_proxy_async_shared();
#endif
}

// The TMA specialization's per-barrier phase bits (MbarrierParities, sm_90a); a stand-in elsewhere.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
using DxParities = MbarrierParities;
#else
struct DxParities {};
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// dx_n_loop on sm_90a with wgmma (Spec::kWgmma; resident rows, bwd_geom::dx_wg_shape): the same
// chains — per 64-wide K step four k16 steps in increasing n, the hi term's steps then the lo
// term's on the same accumulator, from +0 — as HGMMA m64nPk16 of each warpgroup (rows 64·wg ..
// 64·wg + 63, all P columns: the row bands of warps 4·wg .. 4·wg + 3 in the mma.sync layout). The row
// tile (s_body, 1 KiB aligned) is BLOCK_M-row swizzled atoms of 64 n, one per 64 columns of N; the
// K tile of a stage (s_body + RES_BYTES + buf·STAGE_A) one P-row atom. Each step: this thread's
// copies done, fence.proxy.async (the copies are generic-proxy writes that wgmma reads), barrier,
// the next copies, four wgmma, commit, wait for them (the stage read is then free; leaving them in
// flight across the next barrier, with copies one step less ahead, measured slower: docs/perf.md).
// The descriptors are formed as 32-bit low words (smem::desc_lo_sw128), the same values as
// smem::desc_k_major_sw128's with ~5 instead of ~22 instructions per wgmma. out: the chain's
// result in the mma.sync fragments (the same (row, column) per thread: WgAcc's register 4j + q is
// out[0][j].x[q]); its value on entry is not read (the chain starts from +0 here).
// With TMA (Spec::kTma) load_stage issues the copy engine's copies of a step (thread 0) on
// bars[buf], and each step waits on its buffer's barrier instead of its cp.async groups.
template <int STAGES, int KA, int P, int BLOCK_M, int STAGE_A, int RES_BYTES, bool TMA, class T, class LoadStage,
          class WhileCopying, class Parities>
__device__ __forceinline__ void dx_n_loop_wg(FragC (&out)[1][P / 8], unsigned char* s_body, LoadStage& load_stage,
                                             const WhileCopying& while_copying, unsigned long long* bars,
                                             Parities& parity) {
  WgAcc<P> acc;
  acc.zero();
  const block::CpAsyncPipeline<STAGES> ring{KA};
  if constexpr (TMA) {
#pragma unroll
    for (int st = 0; st < STAGES - 1; ++st)
      if (st < KA) load_stage(st, st);
  } else {
    ring.prologue(load_stage);
  }
  while_copying();
  const int wg_rows = (int(threadIdx.x) >> 7) * 64 * 128;  // this warpgroup's rows in the row tile
  int rd = 0, wr = STAGES - 1;
  int n0 = 0;  // the step's first column of the row tile
  for (int ks = 0; ks < KA; ++ks) {
    if constexpr (TMA) {
      parity.wait(bars, rd);  // the copy engine's bytes of step ks landed
    } else {
      ptx::cp_async_wait<STAGES - 2>();
      ptx::fence_proxy_async_shared();
    }
    __syncthreads();
    if (ks + STAGES - 1 < KA) load_stage(wr, ks + STAGES - 1);
    if constexpr (!TMA) ptx::cp_async_commit();
    // The descriptors' low words (start address >> 4, LBO): this warpgroup's rows (the row tile's
    // atom of 64 n at n0) and the stage's K tile; a k16 slice is 32 bytes further. Formed here each
    // step: hoisted out of the loop, the words made ptxas spill more (164 against 140 bytes).
    const unsigned base = ptx::smem_addr(s_body);
    const unsigned a_lo = smem::desc_lo_sw128(base + unsigned(wg_rows + (n0 >> 6) * BLOCK_M * 128), 16);
    const unsigned b_lo = smem::desc_lo_sw128(base + unsigned(RES_BYTES + rd * STAGE_A), 16);
    rd = rd == STAGES - 1 ? 0 : rd + 1;
    wr = wr == STAGES - 1 ? 0 : wr + 1;
    warpgroup::fence();
#pragma unroll
    for (int kk = 0; kk < 64; kk += 16)
      warpgroup::mma_ss<T, 0, 0>(acc, smem::desc_sw128(a_lo + kk * 2 / 16),
                                 smem::desc_sw128(b_lo + kk * 2 / 16), true);
    warpgroup::commit_group();
    warpgroup::wait_group<0>();
    warpgroup::fence_operand(acc);
    n0 = ks == KA / 2 - 1 ? 0 : n0 + 64;
  }
  if constexpr (!TMA) ring.drain();
  __syncthreads();  // the stage buffers are reused by the staging tile
#pragma unroll
  for (int j = 0; j < P / 8; ++j)
#pragma unroll
    for (int q = 0; q < 4; ++q) out[0][j].x[q] = acc.x[4 * j + q];
}
#endif

// The n loop of a phase: dx_n_loop_wg with WG (sm_90a, Spec::kWgmma), else dx_n_loop (LDR, RES_BYTES:
// resident rows or the 48 KiB layout). The same chains either way.
template <bool WG, bool TMA, int NT, int STAGES, int KA, int BKN, int LDA, int STAGE_A, int MI, int NJ, class T,
          int LDR, int RES_BYTES, int P, int BLOCK_M, class LoadStage, class WhileCopying, class Parities>
__device__ __forceinline__ void dx_phase_n_loop(FragC (&acc)[MI][NJ], unsigned char* s_body, unsigned s_body_addr,
                                                unsigned a_lane, unsigned b_lane, LoadStage& load_stage,
                                                const WhileCopying& while_copying, unsigned long long* bars,
                                                Parities& parity) {
  static_assert(!TMA || WG, "the TMA stages are the wgmma layout's");
  if constexpr (WG) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    dx_n_loop_wg<STAGES, KA, P, BLOCK_M, STAGE_A, RES_BYTES, TMA, T>(acc, s_body, load_stage, while_copying, bars,
                                                                     parity);
#endif
  } else {
    dx_n_loop<NT, STAGES, KA, BKN, LDA, STAGE_A, MI, NJ, T, LoadStage, WhileCopying, LDR, RES_BYTES>(
        acc, s_body_addr, a_lane, b_lane, load_stage, while_copying);
  }
}

// dot = Σ_p float(src_p) · so_p over p = 0 .. P-1 in increasing order from `dot`, with fma; with
// LO each p adds both terms, the lo term first: dot = fma(src_p, so_p, fma(src_lo_p, so_p, dot)).
// Eight consecutive p per group: e / f their src / src_lo values, r0 / r1 their so values.
template <bool LO>
__device__ __forceinline__ float dx_dot8(float dot, const float (&e)[8], const float (&f)[8], float4 r0, float4 r1) {
  if constexpr (LO) {
    const float rv[8] = {r0.x, r0.y, r0.z, r0.w, r1.x, r1.y, r1.z, r1.w};
#pragma unroll
    for (int q = 0; q < 8; ++q) dot = __fmaf_rn(e[q], rv[q], __fmaf_rn(f[q], rv[q], dot));
  } else {
    dot = __fmaf_rn(e[0], r0.x, dot);
    dot = __fmaf_rn(e[1], r0.y, dot);
    dot = __fmaf_rn(e[2], r0.z, dot);
    dot = __fmaf_rn(e[3], r0.w, dot);
    dot = __fmaf_rn(e[4], r1.x, dot);
    dot = __fmaf_rn(e[5], r1.y, dot);
    dot = __fmaf_rn(e[6], r1.z, dot);
    dot = __fmaf_rn(e[7], r1.w, dot);
  }
  return dot;
}

template <class T>
__device__ __forceinline__ void dx_unpack8(const uint4& u, float (&v)[8]) {
  ptx::unpack2<T>(u.x, v[0], v[1]);
  ptx::unpack2<T>(u.y, v[2], v[3]);
  ptx::unpack2<T>(u.z, v[4], v[5]);
  ptx::unpack2<T>(u.w, v[6], v[7]);
}

// out[l] = finish(l, Σ_p float(src_lp) · so_lp) for every row l = m0 + r of the tile, 0 past λ
// (valid rows only read). One thread per row walks p = 0 .. P-1 in increasing order from +0.0 with
// fma. so: the staged fp32 tile [BLOCK_M][LDO]; src points at (b, t = t0, h, p = 0) of a
// (b, L, h, p) tensor. With LO, src_lo (laid out as src) is src's second term and each p adds
// both, the lo term first: dot = fma(float(src_lp), so_lp, fma(float(src_lo_lp), so_lp, dot)).
template <int P, int LDO, int BLOCK_M, int NT, bool LO = false, class T, class Finish>
__device__ __forceinline__ void dx_row_dots(const float* so, int m0, int valid, const T* src, long long stride_l,
                                            long long stride_p, bool vec, float* out, const Finish& finish,
                                            const T* src_lo = nullptr) {
  for (int r = threadIdx.x; r < BLOCK_M; r += NT) {
    const int l = m0 + r;
    float res = 0.f;
    if (l < valid) {
      const float* sr = so + r * LDO;
      const long long off = l * stride_l;
      const T* row = src + off;
      const T* row_lo = LO ? src_lo + off : nullptr;
      float dot = 0.f;
      if (vec) {  // no branch in the loop: the loads can be issued ahead of the fma chain
#pragma unroll
        for (int cc = 0; cc < P; cc += 8) {
          float e[8], f[8];
          dx_unpack8<T>(*reinterpret_cast<const uint4*>(row + cc), e);
          if (LO) dx_unpack8<T>(*reinterpret_cast<const uint4*>(row_lo + cc), f);
          dot = dx_dot8<LO>(dot, e, f, *reinterpret_cast<const float4*>(sr + cc),
                            *reinterpret_cast<const float4*>(sr + cc + 4));
        }
      } else {
#pragma unroll 4
        for (int cc = 0; cc < P; cc += 8) {
          float e[8], f[8];
          load8<T>(row + cc * stride_p, 0, stride_p, false, e);
          if (LO) load8<T>(row_lo + cc * stride_p, 0, stride_p, false, f);
          dot = dx_dot8<LO>(dot, e, f, *reinterpret_cast<const float4*>(sr + cc),
                            *reinterpret_cast<const float4*>(sr + cc + 4));
        }
      }
      res = finish(l, dot);
    }
    out[l] = res;
  }
}

}  // namespace detail

template <class Spec, class Params>  // Params: ChunkScanBwdDxZParams with kDyLo, else ChunkScanBwdDxParams
__device__ void chunk_scan_bwd_dx(const Params& p) {
  SSD_TILE_SPEC_NAMES(Spec);  // Q, P, N, HEADS_PER_GROUP, BLOCK_M, BLOCK_N, BLOCK_K; T: bf16 or fp16
  // Resident rows (sm_90, sm_90a; bwd_geom::dx_res_*): phase A's row tile stays in (dynamic) shared
  // memory for both terms' chains. The same chains, so the same bits, as the 48 KiB layout.
  constexpr bool kRes = spec_detail::optional_kResidentRows<Spec>(0) != 0;
  // wgmma for the n loops (sm_90a, resident rows, bwd_geom::dx_wg_shape): the same chains as HGMMA.
  constexpr bool kWg = kRes && spec_detail::optional_kWgmma<Spec>(0) != 0;
  static_assert(!kWg || bwd_geom::dx_wg_shape(P, N, BLOCK_M, BLOCK_K), "the wgmma n loops need dx_wg_shape");
  // Phase B on wgmma too where dy's rows are one 128-byte swizzle atom (headdim 64).
  constexpr bool kWgB = kWg && P == 64;
  // The wgmma tiles' operand stages by the copy engine (SSD_FLAG_TMA, ChunkScanBwdDxTmaParams): phase
  // A's row tile (C, then B) and K tiles (P's, then ds's terms), and phase B's CB and dy tiles. The
  // same bytes (CB: the same selected entries, in swizzled boxes: form_a) with positions past seqlen
  // zero-filled as the predicates do, so the same bits. Headdim 64 only (the family's rule: the shape
  // the GPU tests proved), so phase B is on wgmma too (kWgB: dy's swizzled atom); phase A's TMA
  // loaders are written for any wgmma tile.
  constexpr bool kTma = spec_detail::optional_kTma<Spec>(0) != 0;
  static_assert(!kTma || kWgB, "the TMA specialization is the headdim-64 wgmma tiles' (bwd_geom::dx_wg_shape)");
  static_assert(!kWgB || (bwd_geom::dx_stage_b_bytes(P, BLOCK_M, BLOCK_K) % 1024 == 0 && (BLOCK_K * (BLOCK_M + 4) * 4) % 1024 == 0),
                "phase B's dy tiles must start on 1 KiB (the swizzle atom)");
  static_assert((kRes ? bwd_geom::dx_res_tile_problem(Q, P, N, BLOCK_M, 0, BLOCK_K, Spec::kSeqIdx)
                      : bwd_geom::dx_tile_problem(Q, P, N, BLOCK_M, 0, BLOCK_K, Spec::kSeqIdx)) == nullptr,
                "illegal tile: the host's check (src/kernels) refuses it");
  using namespace bwd_geom;
  static_assert(HEADS_PER_GROUP >= 1, "HEADS_PER_GROUP >= 1");
  static_assert(BLOCK_M == 64 || BLOCK_M == 128, "BLOCK_M must be 64 or 128 (4 row warps of 16 or 32 rows)");
  static_assert(BLOCK_K == 16 || BLOCK_K == 32 || BLOCK_K == 64, "BLOCK_K must be 16, 32 or 64");
  static_assert(Q % BLOCK_M == 0 && Q % BLOCK_K == 0, "BLOCK_M and BLOCK_K must divide the chunk");
  static_assert(P % 32 == 0 && N % 16 == 0, "headdim must be a multiple of 32 (up to 2 column warps of "
                                          "whole load_b2 pairs), dstate of 16");
  static_assert(BLOCK_M * P <= 8192, "accumulator over 64 registers per thread: lower BLOCK_M");
  constexpr int NT = dx_threads();
  static_assert(NT == 256, "8 warps");
  // Warp grid: one 16-row band per warp, WARPS_M = BLOCK_M / 16 bands (8 or 4) by WARPS_N = 8 /
  // WARPS_M column blocks (1 or 2). One row band per warp keeps Wt's formation (the exp per
  // element) to the warp that uses it.
  constexpr int WARPS_M = BLOCK_M / 16, WARPS_N = 8 / WARPS_M;
  static_assert(WARPS_M * WARPS_N == 8, "8 warps");
  constexpr int WM = BLOCK_M / WARPS_M;  // rows per warp (16)
  constexpr int WN = P / WARPS_N;        // columns per warp
  constexpr int MI = WM / 16, NJ = WN / 8;
  static_assert(NJ % 2 == 0, "B fragments are loaded in pairs (load_b2)");
  static_assert(MI * NJ * 4 <= 64, "accumulator over 64 registers per thread");
  constexpr int BKN = dx_block_kn(N, BLOCK_K);
  static_assert(N % BKN == 0, "BLOCK_K must divide dstate (or exceed it)");
  constexpr TwoPhaseBytes BYTES = dx_bytes(P, N, BLOCK_M, BLOCK_K);
  constexpr bool SEQ = Spec::kSeqIdx;
  constexpr int STAGES_A = kRes ? dx_res_stages_a(Q, P, N, BLOCK_M, BLOCK_K, SEQ, kWg)
                                : dx_stages_a(BYTES, Q, SEQ);  // phase A's ring (n loops)
  constexpr int STAGES_B = kRes ? dx_res_stages_b(Q, P, N, BLOCK_M, BLOCK_K, SEQ, kWg)
                                : dx_stages_b(BYTES, Q, SEQ);  // phase B's ring (m loop)
  constexpr int LDA = BKN + kPad;     // row tile (C | B) [l][n] and K tile (P | ds) [p][n], type T
  constexpr int LDR = kRes ? N + kPad : 0;  // resident row tile [l][n] (all N columns), type T
  constexpr int RES_BYTES = kRes ? dx_res_rows_bytes(N, BLOCK_M, kWg) : 0;
  constexpr int LDCB = BLOCK_M + 4;   // CB tile [m][l], fp32 (row stride = 4 mod 32 words: the
                                      // (m = 2t.., l = g) reads of a warp hit 32 distinct banks)
  constexpr int LDY = P + kPad;       // dy tile [m][p], type T
  constexpr int LDO = P + 4;          // staging tile [l][p], fp32 (row-per-thread float4 reads are
                                      // conflict free)
  constexpr int STAGE_A = kRes ? dx_res_kstage_bytes(P, N, BLOCK_K, kWg) : BYTES.stage_a;
  constexpr int STAGE_B = BYTES.stage_b;
  constexpr int BODY = kRes ? dx_res_dynamic_bytes(Q, P, N, BLOCK_M, BLOCK_K, SEQ, kWg)
                            : dx_body_bytes(STAGES_A, STAGES_B, BYTES);
  constexpr int TILES = dx_tiles(Q, BLOCK_M);
  constexpr int KA = N / BKN;
  static_assert((kWg ? STAGE_A == P * 128 && RES_BYTES == BLOCK_M * N * 2
                     : STAGE_A == (kRes ? P : BLOCK_M + P) * LDA * 2 && RES_BYTES == BLOCK_M * LDR * 2) &&
                    STAGE_B == BLOCK_K * LDCB * 4 + BLOCK_K * LDY * 2 && BYTES.epilogue == BLOCK_M * LDO * 4,
                "bwd_geom::dx_* must describe this layout");
  static_assert(kRes || dx_smem_bytes(Q, P, N, BLOCK_M, BLOCK_K, SEQ) <= kMaxStaticSmem,
                "shared memory over 48 KiB: lower BLOCK_K or BLOCK_M");
  static_assert(!kRes || BODY + two_phase_fixed_bytes(Q, SEQ) <= dx_res_budget(),
                "shared memory over the resident layout's budget: lower BLOCK_K or BLOCK_M");
  static_assert(STAGE_A % 16 == 0 && STAGE_B % 16 == 0 && (BLOCK_K * LDCB * 4) % 16 == 0, "stage alignment");

  // The body: static (48 KiB layout) or the block's dynamic shared memory (resident rows).
  __shared__ __align__(16) unsigned char s_body_static[kRes ? 16 : BODY];
  extern __shared__ __align__(16) unsigned char s_body_dynamic[];
  // wgmma's swizzled atoms: the dynamic base aligned up to 1 KiB (the slack is in BODY).
  unsigned char* const s_body =
      !kRes ? s_body_static
            : kWg ? smem::align1024(s_body_dynamic) : s_body_dynamic;
  __shared__ __align__(16) float s_dA[Q];
  __shared__ __align__(16) float s_dt[Q];
  __shared__ int s_seq[Spec::kSeqIdx ? Q : 1];
  // With kTma: phase A's ring barriers 0 .. STAGES_A - 1, phase B's 4 .. 4 + STAGES_B - 1 (one arrival:
  // thread 0's arrive.expect_tx; the copies' bytes complete them); every thread waits each phase once.
  __shared__ __align__(8) unsigned long long s_bars[kTma ? 8 : 1];
  static_assert(!kTma || (STAGES_A <= 4 && STAGES_B <= 4), "four barriers per ring");
  detail::DxParities parity;
  if constexpr (kTma) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    if (threadIdx.x == 0) {
#pragma unroll
      for (int i = 0; i < 8; ++i) ptx::mbarrier_init(s_bars + i, 1);
      ptx::fence_mbarrier_init();
      ptx::tma_prefetch_map(&p.map_c);
      ptx::tma_prefetch_map(&p.map_b);
      ptx::tma_prefetch_map(&p.map_states);
      ptx::tma_prefetch_map(&p.map_states_lo);
      ptx::tma_prefetch_map(&p.map_ds);
      ptx::tma_prefetch_map(&p.map_ds_lo);
      ptx::tma_prefetch_map(&p.map_dy);
      ptx::tma_prefetch_map(&p.map_cb);
    }
    __syncthreads();
#endif
  }

  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int wm0 = (warp / WARPS_N) * WM;  // row band
  const int wn0 = (warp % WARPS_N) * WN;  // column block
  const int lg = lane >> 2, lt = lane & 3;

  // Shared-window byte addresses (32-bit): the stage buffers, and this lane's ldmatrix offsets
  // inside a stage (the fragment's own offset is a constant added per load).
  const unsigned s_body_addr = ptx::smem_addr(s_body);
  // Row tile, rows wm0 ..; K tile, rows wn0 .. (behind the row tile in a stage of the 48 KiB layout).
  const unsigned a_lane_n = kRes ? unsigned((wm0 * LDR + detail::dx_lane_a(lane, LDR)) * 2)
                                 : unsigned((wm0 * LDA + detail::dx_lane_a(lane, LDA)) * 2);
  const unsigned b_lane_n = unsigned(((kRes ? wn0 : BLOCK_M + wn0) * LDA + detail::dx_lane_b2(lane, LDA)) * 2);
  const unsigned dy_lane = unsigned(BLOCK_K * LDCB * 4 + (wn0 + detail::dx_lane_b2_trans(lane, LDY)) * 2);

  const T* xg = static_cast<const T*>(p.x.data);
  const T* dyg = static_cast<const T*>(p.dy.data);
  const T* Bg = static_cast<const T*>(p.B.data);
  const T* Cg = static_cast<const T*>(p.C.data);
  const T* dsg = static_cast<const T*>(p.ds.data);
  const bool vec_x = detail::vec16_bhlp(xg, p.x.stride[0], p.x.stride[1], p.x.stride[2], p.x.stride[3]);
  const bool vec_dy = detail::vec16_bhlp(dyg, p.dy.stride[0], p.dy.stride[1], p.dy.stride[2], p.dy.stride[3]);
  const bool vec_b = detail::vec16_bhlp(Bg, p.B.stride[0], p.B.stride[1], p.B.stride[2], p.B.stride[3]);
  const bool vec_c = detail::vec16_bhlp(Cg, p.C.stride[0], p.C.stride[1], p.C.stride[2], p.C.stride[3]);
  const bool vec_ds = aligned16(dsg) && ((p.ds.stride[0] | p.ds.stride[1] | p.ds.stride[2] | p.ds.stride[3]) & 7) == 0;
  const bool vec_p = aligned16(p.states.data) &&
                     ((p.states.stride[0] | p.states.stride[1] | p.states.stride[2] | p.states.stride[3]) & 7) == 0;
  const bool vec_cb = aligned16(p.CB.data) && ((p.CB.stride[0] | p.CB.stride[1] | p.CB.stride[2] | p.CB.stride[3]) & 3) == 0;
  const bool vec_dx = detail::vec16_bhlp(p.dx.data, p.dx.stride[0], p.dx.stride[1], p.dx.stride[2], p.dx.stride[3]);
  // Work indices are 32-bit (batch * nchunks and nheads < 2^31); offsets are 64-bit.
  const int batch = int(p.batch), nheads = int(p.nheads);
  const int nbc = int(p.batch * p.nchunks);

  // This thread's chunks of the cp.async copies (detail::DxChunks): the n loops' row tile (C | B)
  // and K tile (P | ds), phase B's CB and dy tiles.
  using RowChunks = detail::DxChunks<NT, BLOCK_M, BKN, kRes ? LDR : LDA, T>;
  using KChunks = detail::DxChunks<NT, P, BKN, LDA, T>;
  using CbChunks = detail::DxChunks<NT, BLOCK_K, BLOCK_M, LDCB, float>;
  using DyChunks = detail::DxChunks<NT, BLOCK_K, P, LDY, T>;
  static_assert(RowChunks::kRowWalk && KChunks::kRowWalk && CbChunks::kRowWalk,
                "the n loops' tiles and the CB tile are copied row-walk (NT a multiple of their chunks per row)");

  for (int h = blockIdx.z; h < nheads; h += gridDim.z) {
    const int g = h / HEADS_PER_GROUP;
    float d_head = 0.f;
    if (Spec::kD && !Spec::kDPerHeaddim) d_head = p.D.data[h * p.D.stride[0]];
    for (int bc = blockIdx.y; bc < nbc; bc += gridDim.y) {
      SSD_CHUNK_COORDS(bc, batch, Q, p.seqlen);  // b, c, t0, valid: λ_c = valid - 1
      // The (b, c, h) pointers, formed afresh by each phase of a tile from opaque copies of b, c, h,
      // g (detail::dx_opaque): left to itself the compiler forms them once, outside the tile loop,
      // and keeps ~20 registers of them live through every K loop (spills at 128 registers).
      // P_c's and ds_c's terms: hi (states, ds) and lo (states_lo, ds_lo, laid out alike).
      struct ChunkPtrs {
        long long t0, chunk_off, ds_off, p_off, dy_off, dx_off;  // dy_off: (b, 0, h); dx_off: (b, t0, h)
        const T *safe_x, *safe_dy, *safe_b, *safe_c;
        const float* cb_base;
      };
      auto chunk_ptrs = [&]() {
        const int bo = detail::dx_opaque(b), co = detail::dx_opaque(c), ho = detail::dx_opaque(h),
                  go = detail::dx_opaque(g);
        ChunkPtrs k;
        k.t0 = (long long)co * Q;
        k.chunk_off = p.dA_cumsum.offset(bo, ho, co);
        k.ds_off = p.ds.offset(bo, co, ho);
        k.p_off = p.states.offset(bo, co, ho);
        k.safe_x = xg + p.x.offset(bo, 0, ho);
        k.dy_off = p.dy.offset(bo, 0, ho);
        k.dx_off = p.dx.offset(bo, k.t0, ho);
        k.safe_dy = dyg + k.dy_off;
        k.safe_b = Bg + p.B.offset(bo, 0, go);
        k.safe_c = Cg + p.C.offset(bo, 0, go);
        k.cb_base = p.CB.ptr(bo, co, go);
        return k;
      };
      int q_prev = 0;
      if (Spec::kSeqIdx && c > 0) q_prev = p.seq_idx(b, t0 - 1);

      for (int tile = blockIdx.x; tile < TILES; tile += gridDim.x) {
        const int m0 = tile * BLOCK_M;  // smallest m0 first: its m-range (m0 .. λ) is the longest
        if (m0 >= valid) {
          // Rows all padding (uniform over the block; no shared memory touched): only the zeros
          // of this tile's slots of the (b, h, c, Q) vectors.
          const long long chunk_off = chunk_ptrs().chunk_off;
          for (int r = tid; r < BLOCK_M; r += NT) {
            p.ddt_x[chunk_off + m0 + r] = 0.f;
            p.w[chunk_off + m0 + r] = 0.f;
            p.v[chunk_off + m0 + r] = 0.f;
          }
          continue;
        }

        // Per-position fp32 data of the whole chunk, filled while phase A2's first copies are in
        // flight (s_body only; the previous tile's last barrier freed these arrays), visible after
        // the first barrier of phase A2's ring. Thread r < BLOCK_M also pulls row r of dy (and
        // dy_lo), which v's row sum reads after phase A2, into L1 (detail::dx_prefetch_row).
        auto fill_per_position = [&]() {
          const ChunkPtrs at = chunk_ptrs();
          for (int l = tid; l < Q; l += NT) {
            s_dA[l] = p.dA_cumsum.data[at.chunk_off + l];
            s_dt[l] = p.dt[at.chunk_off + l];
            if (Spec::kSeqIdx)
              s_seq[l] = l < valid ? p.seq_idx(b, t0 + l) : -1;
          }
          if (tid < BLOCK_M) {
            if (vec_dy && m0 + tid < valid) {
              const long long off = at.dy_off + (at.t0 + m0 + tid) * p.dy.stride[1];
              detail::dx_prefetch_row<P>(dyg + off);
              if constexpr (Spec::kDyLo)
                if (aligned16(p.dy_lo)) detail::dx_prefetch_row<P>(static_cast<const T*>(p.dy_lo) + off);
            }
          }
        };

        FragC acc[MI][NJ];
        auto zero_acc = [&]() {
          warp::zero_tile(acc);
        };

        // Stage buffers of the n loops (detail::dx_n_loop): row tile [l][n], then K tile [p][n];
        // resident rows: the stage holds the K tile only (the row tile is at s_body).
        auto sRow = [&](int buf) { return reinterpret_cast<T*>(s_body + buf * STAGE_A); };
        auto sK = [&](int buf) {
          return kRes ? reinterpret_cast<T*>(s_body + RES_BYTES + buf * STAGE_A)
                      : reinterpret_cast<T*>(s_body + buf * STAGE_A) + BLOCK_M * LDA;
        };

        // With kTma the n loops' copies of step ks into buffer buf by the copy engine (thread 0), on
        // barrier buf: in the hi chain's steps (ks < KA) the row tile's 64 columns k0 .. (BLOCK_M rows
        // of C (phase 0: A2) or B (phase 1: A1) from position t0 + m0; rows past seqlen zero-filled)
        // into its resident atom, and every step the K tile (P rows of the (b, c, h) block of the
        // term's map: P's terms in A2, ds's in A1; hi in steps 0 .. KA-1, lo in KA .. 2KA-1).
        auto tma_n_loads = [&](int phase) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
          const int row0 = int(t0 + m0), kb = b * int(p.nchunks) + c, hh = h, gg = g, bb = b;
#endif
          return [=, &p](int buf, int ks) {
            if constexpr (kTma) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
              if (threadIdx.x != 0) return;
              const bool hi = ks < KA;
              const int k0 = (hi ? ks : ks - KA) * 64;
              unsigned long long* bar = s_bars + buf;
              ptx::mbarrier_arrive_expect_tx(bar, unsigned(STAGE_A + (hi ? BLOCK_M * 128 : 0)));
              if (hi)
                ptx::tma_load_4d(s_body + (k0 / 64) * BLOCK_M * 128, phase == 0 ? &p.map_c : &p.map_b, bar, k0, gg,
                                 row0, bb);
              const TensorMap* km = phase == 0 ? (hi ? &p.map_states : &p.map_states_lo)
                                               : (hi ? &p.map_ds : &p.map_ds_lo);
              ptx::tma_load_4d(s_body + RES_BYTES + buf * STAGE_A, km, bar, k0, 0, hh, kb);
#endif
            }
          };
        };

        // The n loops' copies of step ks into buffer buf: the row tile's rows m0 + r of `rows`
        // (C or B: (b, L, g, n), rows of the chunk from t0), columns k0 .. k0 + BKN of n, rows
        // past λ zero-filled; the K tile's rows p of `kt_hi` / `kt_lo` (P or ds terms, (b, c, h)
        // rows of n from k_off), the hi term in steps 0 .. KA-1, the lo term in KA .. 2KA-1. On
        // the 16-byte path the thread's source pointers are formed once (row_src; rows past λ read
        // nothing, their pointer is the valid `safe`) and each step adds its k0.
        // With kTma they are tma_n_loads(phase)'s (phase 0: A2, 1: A1).
        auto n_loads = [&](long long t_first, const T* rows, const TensorRef<const void, 4>& view, bool vec_rows,
                           const T* safe, const void* kt_hi, const void* kt_lo, long long k_off, long long k_stride,
                           bool vec_k, int phase) {
          if constexpr (kTma) {
            return tma_n_loads(phase);
          } else {
          const T* row_src[RowChunks::ITERS];
          bool row_ok[RowChunks::ITERS];
#pragma unroll
          for (int it = 0; it < RowChunks::ITERS; ++it) {
            const int r = RowChunks::row0() + it * RowChunks::RSTEP;
            row_ok[it] = RowChunks::has(it) && m0 + r < valid;
            row_src[it] = row_ok[it] ? rows + (t_first + m0 + r) * view.stride[1] + RowChunks::col() : safe;
          }
          const long long k_src = k_off + KChunks::row0() * k_stride + KChunks::col();
          return [=](int buf, int ks) {
            const int k0 = (ks < KA ? ks : ks - KA) * BKN;
            const T* kt = static_cast<const T*>(ks < KA ? kt_hi : kt_lo);
            // wgmma: the chunks' places in the swizzled atoms (row0 + it·RSTEP keeps row0's swizzle,
            // RSTEP being a multiple of 8), a row 128 bytes.
            const unsigned row_dst =
                kWg    ? s_body_addr + unsigned((k0 / 64) * BLOCK_M * 128) +
                          smem::swizzle128_offset(RowChunks::row0(), RowChunks::col())
                : kRes ? s_body_addr + RowChunks::dst() + unsigned(k0 * 2)
                       : s_body_addr + unsigned(buf * STAGE_A) + RowChunks::dst();
            const unsigned k_dst =
                kWg    ? s_body_addr + unsigned(RES_BYTES + buf * STAGE_A) +
                          smem::swizzle128_offset(KChunks::row0(), KChunks::col())
                : kRes ? s_body_addr + unsigned(RES_BYTES + buf * STAGE_A) + KChunks::dst()
                       : s_body_addr + unsigned(buf * STAGE_A + BLOCK_M * LDA * 2) + KChunks::dst();
            constexpr unsigned kRowIter = kWg ? unsigned(RowChunks::RSTEP * 128) : RowChunks::kIterBytes;
            constexpr unsigned kKIter = kWg ? unsigned(KChunks::RSTEP * 128) : KChunks::kIterBytes;
            const bool copy_rows = !kRes || ks < KA;  // resident rows: once, with the hi chain
            auto rows_vec = [&]() {
#pragma unroll
              for (int it = 0; it < RowChunks::ITERS; ++it)
                if (RowChunks::has(it))
                  ptx::cp_async_16(row_dst + it * kRowIter, row_src[it] + k0, row_ok[it]);
            };
            auto k_vec = [&]() {
              const T* src = kt + k_src + k0;
#pragma unroll
              for (int it = 0; it < KChunks::ITERS; ++it)
                if (KChunks::has(it))
                  ptx::cp_async_16(k_dst + it * kKIter, src + it * KChunks::RSTEP * k_stride, true);
            };
            if (vec_rows && vec_k) {  // the common case: both 16-byte paths, no branch between them
              if (copy_rows) rows_vec();
              k_vec();
              return;
            }
            if (!copy_rows) {
            } else if (vec_rows) {
              rows_vec();
            } else if constexpr (kWg) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
              sm90a_detail::load_tile_sw128<NT, BLOCK_M>(
                  s_body + (k0 / 64) * BLOCK_M * 128, rows + (t_first + m0) * view.stride[1] + k0 * view.stride[3],
                  view.stride[1], view.stride[3], false, safe, [&](int r, int) { return m0 + r < valid; });
#endif
            } else if constexpr (kRes) {
              block::load_tile<NT, BLOCK_M, BKN, LDR>(reinterpret_cast<T*>(s_body) + k0,
                                                      rows + (t_first + m0) * view.stride[1] + k0 * view.stride[3],
                                                      view.stride[1], view.stride[3], false, safe,
                                                      [&](int r, int) { return m0 + r < valid; });
            } else {
              block::load_tile<NT, BLOCK_M, BKN, LDA>(sRow(buf), rows + (t_first + m0) * view.stride[1] + k0 * view.stride[3],
                                                      view.stride[1], view.stride[3], false, safe,
                                                      [&](int r, int) { return m0 + r < valid; });
            }
            if (vec_k) {
              k_vec();
            } else if constexpr (kWg) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
              const T* src = kt + k_off + k0;
              sm90a_detail::load_tile_sw128<NT, P>(reinterpret_cast<unsigned char*>(sK(buf)), src, k_stride, 1, false,
                                                   src, [&](int, int) { return true; });
#endif
            } else {
              const T* src = kt + k_off + k0;
              block::load_tile<NT, P, BKN, LDA>(sK(buf), src, k_stride, 1, false, src, [&](int, int) { return true; });
            }
          };
          }
        };

        // ---- Staging of acc through the shared fp32 tile [l][p], and the per-row p sums ----
        float* so = reinterpret_cast<float*>(s_body);
        auto stage_acc = [&]() {
#pragma unroll
          for (int i = 0; i < MI; ++i) {
#pragma unroll
            for (int half = 0; half < 2; ++half) {
              const int r = wm0 + 16 * i + FragC::row(lane, half);
#pragma unroll
              for (int j = 0; j < NJ; ++j)
                *reinterpret_cast<float2*>(so + r * LDO + wn0 + 8 * j + FragC::col(lane)) =
                    make_float2(acc[i][j].x[2 * half], acc[i][j].x[2 * half + 1]);
            }
          }
          __syncthreads();
        };
        // ---------------- Phase A2: acc = C_tile · P_cᵀ (contraction over n), then v ----------------
        zero_acc();
        {  // steps 0 .. KA-1: the hi term's chain over n; KA .. 2KA-1: the lo term's
          const ChunkPtrs at = chunk_ptrs();
          auto load_stage = n_loads(at.t0, at.safe_c, p.C, vec_c, at.safe_c, p.states.data, p.states_lo.data, at.p_off,
                                    p.states.stride[3], vec_p, 0);
          detail::dx_phase_n_loop<kWg, kTma, NT, STAGES_A, 2 * KA, BKN, LDA, STAGE_A, MI, NJ, T, LDR, RES_BYTES, P,
                                  BLOCK_M>(acc, s_body, s_body_addr, a_lane_n, b_lane_n, load_stage, fill_per_position,
                                           s_bars, parity);
        }
        stage_acc();
        auto finish_v = [&](int l, float dot) {  // v_l = e_l · dot_l (l <= λ)
          bool keep = true;
          if (Spec::kSeqIdx) keep = s_seq[l] == q_prev;
          const float e = keep ? __expf(s_dA[l]) : 0.f;
          return __fmul_rn(e, dot);
        };
        {
          const ChunkPtrs at = chunk_ptrs();
          const T* dy_rows = at.safe_dy + at.t0 * p.dy.stride[1];
          float* v_out = p.v + at.chunk_off;
          if constexpr (Spec::kDyLo) {  // dy's two terms (dy_lo laid out as dy)
            const T* dy_lo_rows = static_cast<const T*>(p.dy_lo) + at.dy_off + at.t0 * p.dy.stride[1];
            detail::dx_row_dots<P, LDO, BLOCK_M, NT, true>(so, m0, valid, dy_rows, p.dy.stride[1], p.dy.stride[3],
                                                           vec_dy && aligned16(p.dy_lo), v_out, finish_v, dy_lo_rows);
          } else {
            detail::dx_row_dots<P, LDO, BLOCK_M, NT>(so, m0, valid, dy_rows, p.dy.stride[1], p.dy.stride[3], vec_dy,
                                                    v_out, finish_v);
          }
        }
        // The staging tile's ordinary accesses, before the copy engine writes the same bytes.
        detail::dx_fence_for_copy_engine<kTma>();
        __syncthreads();  // the staging tile is reused by phase A1's stages

        // ---------------- Phase A1: acc = B_tile · ds_cᵀ (over n), row scale eend, then w ----------------
        zero_acc();
        {  // steps 0 .. KA-1: the hi term's chain over n; KA .. 2KA-1: the lo term's
          const ChunkPtrs at = chunk_ptrs();
          auto prefetch_x = [&] {
            // Row r of x, which w's row sum reads after phase A1, into L1 (thread r < BLOCK_M).
            if (vec_x && tid < BLOCK_M && m0 + tid < valid)
              detail::dx_prefetch_row<P>(at.safe_x + (at.t0 + m0 + tid) * p.x.stride[1]);
          };
          auto load_stage = n_loads(at.t0, at.safe_b, p.B, vec_b, at.safe_b, p.ds.data, p.ds_lo.data, at.ds_off,
                                    p.ds.stride[3], vec_ds, 1);
          detail::dx_phase_n_loop<kWg, kTma, NT, STAGES_A, 2 * KA, BKN, LDA, STAGE_A, MI, NJ, T, LDR, RES_BYTES, P,
                                  BLOCK_M>(acc, s_body, s_body_addr, a_lane_n, b_lane_n, load_stage, prefetch_x, s_bars,
                                           parity);
        }
        // Row scale eend_l (Rst), and the rows' A(l) for phase B.
        float a_row[MI][2];
        {
          const float a_last = s_dA[Q - 1];
          const int q_last = Spec::kSeqIdx ? s_seq[valid - 1] : 0;
#pragma unroll
          for (int i = 0; i < MI; ++i) {
#pragma unroll
            for (int half = 0; half < 2; ++half) {
              const int l = m0 + wm0 + 16 * i + FragC::row(lane, half);
              const float al = s_dA[l];
              a_row[i][half] = al;
              bool keep = l < valid;
              if (Spec::kSeqIdx) keep = keep && s_seq[l] == q_last;
              const float eend = keep ? __expf(fminf(a_last - al, 0.f)) : 0.f;
#pragma unroll
              for (int j = 0; j < NJ; ++j) {
                acc[i][j].x[2 * half] = __fmul_rn(acc[i][j].x[2 * half], eend);
                acc[i][j].x[2 * half + 1] = __fmul_rn(acc[i][j].x[2 * half + 1], eend);
              }
            }
          }
        }
        stage_acc();
        {
          const ChunkPtrs at = chunk_ptrs();
          float* ddt_x_out = p.ddt_x + at.chunk_off;
          auto finish_w = [&](int l, float dot) {  // dΔˣst_l = dot, w_l = Δ_l · dot
            ddt_x_out[l] = dot;
            return __fmul_rn(s_dt[l], dot);
          };
          detail::dx_row_dots<P, LDO, BLOCK_M, NT>(so, m0, valid, at.safe_x + at.t0 * p.x.stride[1], p.x.stride[1],
                                                  p.x.stride[3], vec_x, p.w + at.chunk_off, finish_w);
          for (int r = tid; r < BLOCK_M; r += NT)
            if (m0 + r >= valid) ddt_x_out[m0 + r] = 0.f;  // dx_row_dots wrote w's zeros past λ
        }
        detail::dx_fence_for_copy_engine<kTma>();  // as before phase A1
        __syncthreads();  // the staging tile is reused by phase B's stages

        // ---------------- Phase B: acc += Wt · dY (contraction over m) ----------------
        {
          const int kb0 = m0 / BLOCK_K;                     // the step containing m0 (m < m0 <= l: zeros)
          const int kb1 = (valid + BLOCK_K - 1) / BLOCK_K;  // steps past λ hold zeros only
          const int nk = kb1 - kb0;
          const ChunkPtrs at = chunk_ptrs();
          const T* safe_dy = at.safe_dy;
          const float* cb_base = at.cb_base;
          const T* dyt = safe_dy + at.t0 * p.dy.stride[1];
          const long long cb_stride = p.CB.stride[3], dy_stride = p.dy.stride[1];
          auto sCB = [&](int buf) { return reinterpret_cast<float*>(s_body + buf * STAGE_B); };
          auto sDY = [&](int buf) { return reinterpret_cast<T*>(s_body + buf * STAGE_B + BLOCK_K * LDCB * 4); };
          // The thread's CB chunks: rows m = k0 + r, columns l = m0 + c0 .. +3, read only when
          // l0 <= m <= λ (every such address lies in the chunk's Q x Q block of CB, so the
          // pointer itself is always valid); its dy chunks: rows m = k0 + r <= λ (others read
          // nothing, from `safe_dy`). The ring asks for the steps in increasing order, once each,
          // so the 16-byte paths walk their source pointers one step (BLOCK_K rows) per call.
          const int cb_r0 = CbChunks::row0(), cb_c0 = m0 + CbChunks::col();
          const long long cb_row_step = CbChunks::RSTEP * cb_stride;  // between a thread's chunks
          const float* cb_next = cb_base + (kb0 * BLOCK_K + cb_r0) * cb_stride + cb_c0;
          const int dy_r0 = DyChunks::row0();
          const long long dy_row_step = DyChunks::RSTEP * dy_stride;
          const T* dy_next = dyt + (kb0 * BLOCK_K + dy_r0) * dy_stride + DyChunks::col();
          constexpr bool kDyRowWalk = DyChunks::kRowWalk;
          const bool vec_b_phase = vec_cb && vec_dy && kDyRowWalk;
          auto load_stage = [&](int buf, int ks) {  // ks: absolute step index
            const int k0 = ks * BLOCK_K;
            const unsigned cb_dst = s_body_addr + unsigned(buf * STAGE_B) + CbChunks::dst();
            // With kWgB the dy tile is a 128-byte swizzled atom (row0 + it·RSTEP keeps row0's swizzle).
            const unsigned dy_dst = s_body_addr + unsigned(buf * STAGE_B + BLOCK_K * LDCB * 4) +
                                    (kWgB ? smem::swizzle128_offset(DyChunks::row0(), DyChunks::col()) : DyChunks::dst());
            constexpr unsigned kDyIter = kWgB ? unsigned(DyChunks::RSTEP * 128) : DyChunks::kIterBytes;
            auto cb_vec = [&]() {
#pragma unroll
              for (int it = 0; it < CbChunks::ITERS; ++it) {
                const int m = k0 + cb_r0 + it * CbChunks::RSTEP;
                if (CbChunks::has(it))
                  ptx::cp_async_16(cb_dst + it * CbChunks::kIterBytes, cb_next + it * cb_row_step, cb_c0 <= m && m < valid);
              }
            };
            auto dy_vec = [&]() {
#pragma unroll
              for (int it = 0; it < DyChunks::ITERS; ++it) {
                const bool ok = k0 + dy_r0 + it * DyChunks::RSTEP < valid;
                if (DyChunks::has(it))
                  ptx::cp_async_16(dy_dst + it * kDyIter, ok ? dy_next + it * dy_row_step : safe_dy, ok);
              }
            };
            // CB's tile: the 16-byte path, else element copies (groups with l0 <= m <= λ only).
            auto cb_tile = [&]() {
              if (vec_cb) {
                cb_vec();
              } else {
                block::load_tile<NT, BLOCK_K, BLOCK_M, LDCB>(sCB(buf), cb_base + k0 * cb_stride + m0, cb_stride, 1,
                                                             false, cb_base, [&](int r, int c0) {
                                                               return m0 + c0 <= k0 + r && k0 + r < valid;
                                                             });
              }
            };
            if constexpr (kTma) {
              // CB and dy by the copy engine (thread 0, on phase B's barrier 4 + buf): CB as BLOCK_M / 32
              // swizzled boxes of (BLOCK_K rows m) x (32 columns l), box j at sCB(buf) + j·BLOCK_K·32
              // (form_a's kTma index), whole boxes (entries off the lower triangle or past λ are
              // copied too and never selected: form_a's masks), then dy's tile.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
              if (threadIdx.x == 0) {
                unsigned long long* bar = s_bars + 4 + buf;
                ptx::mbarrier_arrive_expect_tx(bar, unsigned(BLOCK_K * 128 + BLOCK_M * BLOCK_K * 4));
                const int bc_mem = b * int(p.nchunks) + c;  // CB's (b, nchunks) axes as one
#pragma unroll
                for (int j = 0; j < BLOCK_M / 32; ++j)
                  ptx::tma_load_4d(sCB(buf) + j * BLOCK_K * 32, &p.map_cb, bar, m0 + 32 * j, k0, g, bc_mem);
                ptx::tma_load_4d(sDY(buf), &p.map_dy, bar, 0, h, int(t0 + k0), b);
              }
#endif
            } else if (vec_b_phase) {  // the common case: both 16-byte paths, no branch between them
              cb_vec();
              dy_vec();
            } else {
              cb_tile();
              if (vec_dy && kDyRowWalk) {
                dy_vec();
              } else if constexpr (kWgB) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
                sm90a_detail::load_tile_sw128<NT, BLOCK_K>(reinterpret_cast<unsigned char*>(sDY(buf)), dyt + k0 * dy_stride,
                                                           dy_stride, p.dy.stride[3], vec_dy, safe_dy,
                                                           [&](int r, int) { return k0 + r < valid; });
#endif
              } else {
                block::load_tile<NT, BLOCK_K, P, LDY>(sDY(buf), dyt + k0 * dy_stride, dy_stride, p.dy.stride[3],
                                                      vec_dy, safe_dy, [&](int r, int) { return k0 + r < valid; });
              }
            }
            cb_next += BLOCK_K * cb_stride;
            dy_next += BLOCK_K * dy_stride;
          };

          // Steps are the column blocks kb0 .. kb0 + nk - 1.
          const block::CpAsyncPipeline<STAGES_B> ring{nk};
          auto load_block = [&](int buf, int step) { load_stage(buf, kb0 + step); };
          ring.prologue(load_block);
          const int l_first = m0 + wm0;  // the warp's first row
          // The warp's A fragments of Wt(l, m) for its rows l in [l_first, l_first + WM) and the
          // 16-column block m in [mb, mb + 16), mb = (kb0 + ks)·BLOCK_K + kk (scb: step ks's CB tile):
          // formed with the mask (l <= m <= λ) in general; without it where every element passes; all
          // +0 where none does (what the masked formation gives there).
          auto form_a = [&](int ks, int kk, const float* scb, FragA (&a)[MI]) {
            const int mk = kk + 2 * lt;                 // step-local m of columns 2t, 2t+1 (+8, +9)
            const int mb = (kb0 + ks) * BLOCK_K + kk;   // the 16-column block's first position
            const int m01 = mb + 2 * lt;                // chunk positions
            auto form = [&](const bool masked) {  // called with a constant (inlined, folded)
              const float2 am01 = *reinterpret_cast<const float2*>(s_dA + m01);
              const float2 am89 = *reinterpret_cast<const float2*>(s_dA + m01 + 8);
              const bool v0 = m01 < valid, v1 = m01 + 1 < valid, v8 = m01 + 8 < valid, v9 = m01 + 9 < valid;
#pragma unroll
              for (int i = 0; i < MI; ++i) {
#pragma unroll
                for (int half = 0; half < 2; ++half) {
                  const int r = wm0 + 16 * i + lg + 8 * half;  // row inside the tile
                  const int l = m0 + r;
                  const float al = a_row[i][half];
                  // CB(m01, l): Wt(l, m01) before the decay; rows m01 + 1, + 8, + 9 beside it.
                  float c0, c1, c8, c9;
                  if constexpr (kTma) {
                    // The copy engine's boxes (load_stage): CB(m, r) at (r >> 5)·BLOCK_K·32 + m·32 +
                    // ((((r & 31) >> 2) ^ (m & 7)) << 2) + (r & 3); rows m and m + 8 share a swizzle
                    // (mk is even: m + 1's is mk's + 1), so two addresses serve the four reads.
                    const int box = (r >> 5) * BLOCK_K * 32 + (r & 3), q4 = (r & 31) >> 2;
                    const float* e0 = scb + box + mk * 32 + ((q4 ^ (mk & 7)) << 2);
                    const float* e1 = scb + box + (mk + 1) * 32 + ((q4 ^ ((mk + 1) & 7)) << 2);
                    c0 = e0[0], c1 = e1[0], c8 = e0[8 * 32], c9 = e1[8 * 32];
                  } else {
                    const float* cbc = scb + mk * LDCB + r;
                    c0 = cbc[0], c1 = cbc[LDCB], c8 = cbc[8 * LDCB], c9 = cbc[9 * LDCB];
                  }
                  // Each product is formed, then selected (no branch per element); a selected
                  // element is that product.
                  float w0 = __fmul_rn(c0, __expf(fminf(am01.x - al, 0.f)));
                  float w1 = __fmul_rn(c1, __expf(fminf(am01.y - al, 0.f)));
                  float w8 = __fmul_rn(c8, __expf(fminf(am89.x - al, 0.f)));
                  float w9 = __fmul_rn(c9, __expf(fminf(am89.y - al, 0.f)));
                  if (masked) {
                    w0 = (l <= m01 && v0) ? w0 : 0.f;
                    w1 = (l <= m01 + 1 && v1) ? w1 : 0.f;
                    w8 = (l <= m01 + 8 && v8) ? w8 : 0.f;
                    w9 = (l <= m01 + 9 && v9) ? w9 : 0.f;
                  }
                  a[i].x[half] = ptx::pack2<T>(w0, w1);      // a[0] (row g) / a[1] (row g+8), k = 2t, 2t+1
                  a[i].x[2 + half] = ptx::pack2<T>(w8, w9);  // a[2] / a[3], k = 2t+8, 2t+9
                }
              }
            };
            if (l_first > mb + 15 || mb >= valid) {
#pragma unroll
              for (int i = 0; i < MI; ++i) a[i].x[0] = a[i].x[1] = a[i].x[2] = a[i].x[3] = 0u;
            } else if (l_first + WM - 1 <= mb && mb + 15 < valid) {
              form(false);
            } else {
              form(true);
            }
          };
          if constexpr (kWgB) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
            // wgmma (sm_90a, headdim 64): each K=16 step one HGMMA m64n64k16 per warpgroup with A =
            // the warps' Wt fragments (registers) and B = the dy tile, MN-major in a 128-byte swizzled
            // atom (trans-b) — the same chain as the mma.sync steps below. acc's registers continue as
            // the warpgroup accumulator (WgAcc's register 4j + q is acc[0][j].x[q]).
            static_assert(MI == 1 && NJ * 8 == P, "one 16-row band per warp over all P columns");
            WgAcc<P> wacc;
#pragma unroll
            for (int j = 0; j < NJ; ++j)
#pragma unroll
              for (int q = 0; q < 4; ++q) wacc.x[4 * j + q] = acc[0][j].x[q];
            for (int ks = 0; ks < nk; ++ks) {
              // Step ks's copies (this thread's) to the async proxy, then every thread's; the buffer
              // refilled below was read by step ks − 1, whose wgmma every warpgroup waited for.
              ptx::cp_async_wait<STAGES_B - 2>();
              if constexpr (kTma) parity.wait(s_bars, 4 + ks % STAGES_B);  // dy's bytes
              ptx::fence_proxy_async_shared();
              __syncthreads();
              if (ks + STAGES_B - 1 < nk) load_block((ks + STAGES_B - 1) % STAGES_B, ks + STAGES_B - 1);
              ptx::cp_async_commit();
              const float* scb = sCB(ks % STAGES_B);
              // The dy tile's descriptor low word (smem::desc_mn_major_sw128's: LBO = the tile's
              // BLOCK_K rows of 128 bytes); a k16 slice is 16 rows further.
              const unsigned dy_lo = smem::desc_lo_sw128(ptx::smem_addr(sDY(ks % STAGES_B)), BLOCK_K * 128);
#pragma unroll
              for (int kk = 0; kk < BLOCK_K; kk += 16) {
                FragA a[MI];
                form_a(ks, kk, scb, a);
                warpgroup::fence_operand(wacc);
                warpgroup::fence();
                warpgroup::mma_rs<T, 1>(wacc, a[0], smem::desc_sw128(dy_lo + kk * 128 / 16), true);
                warpgroup::commit_group();
                warpgroup::fence_operand(wacc);
              }
              warpgroup::wait_group<0>();
              warpgroup::fence_operand(wacc);
            }
#pragma unroll
            for (int j = 0; j < NJ; ++j)
#pragma unroll
              for (int q = 0; q < 4; ++q) acc[0][j].x[q] = wacc.x[4 * j + q];
#endif
          } else {
            for (int ks = 0; ks < nk; ++ks) {
              ring.begin(ks, load_block);
              const float* scb = sCB(ks % STAGES_B);
              // One register (opaque): left to itself the compiler splits the address into the stage's
              // uniform base and per-(kk, j) lane offsets, 12 values held across the tile loop (spilled
              // at 128 registers, reloaded in every k16 step); this way the (kk, j) offsets are the
              // LDSM's immediates.
              const unsigned sdy = detail::dx_opaque(int(s_body_addr + unsigned((ks % STAGES_B) * STAGE_B) + dy_lane));
#pragma unroll
              for (int kk = 0; kk < BLOCK_K; kk += 16) {
                FragA a[MI];
                form_a(ks, kk, scb, a);
#pragma unroll
                for (int j = 0; j < NJ; j += 2) {
                  FragB b0, b1;
                  warp::load_b2_trans_at(b0, b1, sdy + unsigned((kk * LDY + 8 * j) * 2));
#pragma unroll
                  for (int i = 0; i < MI; ++i) {
                    warp::mma<T>(acc[i][j], a[i], b0);
                    warp::mma<T>(acc[i][j + 1], a[i], b1);
                  }
                }
              }
            }
          }
          ring.drain();
          __syncthreads();  // phase-B buffers are reused by the staging tile
        }

        // ---------------- Epilogue: R = acc; dx (rows <= λ), dΔˣ (every row) ----------------
        stage_acc();
        {
          constexpr int CPR = P / 8;
          constexpr int TOTAL = BLOCK_M * CPR;
          constexpr int ITERS = (TOTAL + NT - 1) / NT;  // (row, 8 columns) groups per thread
          // (b, t0, h) of dx and of dy: row l of the chunk is + l·stride[1].
          const ChunkPtrs at = chunk_ptrs();
          T* dx_chunk = static_cast<T*>(p.dx.data) + at.dx_off;
          const T* dy_chunk = at.safe_dy + at.t0 * p.dy.stride[1];
          // Group it of this thread: row r, columns cc .. cc+7 of i = tid + it·NT; rows past λ
          // are not written. VEC: dy and dx on their 16-byte paths (no branch inside the unrolled
          // loop, so the groups' loads can be issued ahead).
          auto groups = [&](const bool VEC) {  // called with a constant (inlined, folded)
#pragma unroll
            for (int it = 0; it < ITERS; ++it) {
              const int i = tid + it * NT;
              if (TOTAL % NT != 0 && i >= TOTAL) break;
              const int r = i / CPR, cc = (i % CPR) * 8;
              const int l = m0 + r;
              if (l >= valid) continue;
              const float dl = s_dt[l];
              float y[8];
              {
                const float4 y0 = *reinterpret_cast<const float4*>(so + r * LDO + cc);
                const float4 y1 = *reinterpret_cast<const float4*>(so + r * LDO + cc + 4);
                y[0] = __fmul_rn(dl, y0.x), y[1] = __fmul_rn(dl, y0.y), y[2] = __fmul_rn(dl, y0.z);
                y[3] = __fmul_rn(dl, y0.w), y[4] = __fmul_rn(dl, y1.x), y[5] = __fmul_rn(dl, y1.y);
                y[6] = __fmul_rn(dl, y1.z), y[7] = __fmul_rn(dl, y1.w);
              }
              if (Spec::kD) {
                float dyv[8];
                detail::load8<T>(dy_chunk + l * p.dy.stride[1] + (VEC ? cc : cc * p.dy.stride[3]), 0, p.dy.stride[3],
                                 VEC, dyv);
#pragma unroll
                for (int v = 0; v < 8; ++v) {
                  const float d = Spec::kDPerHeaddim ? p.D(h, cc + v) : d_head;
                  y[v] = __fmaf_rn(dyv[v], d, y[v]);
                }
              }
              detail::store8<T>(dx_chunk + l * p.dx.stride[1] + (VEC ? cc : cc * p.dx.stride[3]), 0, p.dx.stride[3], VEC, y);
            }
          };
          if ((vec_dy || !Spec::kD) && vec_dx) {
            groups(true);
          } else {
            groups(false);
          }
        }
        detail::dx_fence_for_copy_engine<kTma>();  // the next tile's copies write these bytes
        __syncthreads();  // the staging tile and the per-position arrays are reused by the next tile
      }
    }
  }
}

}  // namespace ssd_kernels
