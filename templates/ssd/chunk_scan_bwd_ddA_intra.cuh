// chunk_scan_bwd_ddA_intra (the intra term of math B-g): per (batch b, chunk c, head h), group
// g = h / HEADS_PER_GROUP, positions l, s, k in [0, Q), λ = λ_c:
//
//   M(l, s) = Σ_p dy[b, cQ+l, h, p] · x[b, cQ+s, h, p]                  (mma chain over p, from 0)
//   d(l, s) = (M · exp(min(A(l) − A(s), 0))) · Δ_s                      (bitwise as chunk_scan_bwd_dcb)
//   W(l, s) = (s < l && l <= λ) ? CB[b, c, g, l, s] · d(l, s) : 0       (no σ: CB is 0 where σ = 0)
//   S(l, k) = Σ_{s < k} W(l, s)                                         (in 16-column blocks)
//   T_r(k)  = Σ_{l in [64r, 64r+64), k <= l <= λ} S(l, k)               (in 16-row blocks)
//
// and the intra-chunk part of dΔˣ (the gradient w.r.t. Δ through x's weight, math B-d):
//
//   u(l, s) = (s <= l && l <= λ) ? CB[b, c, g, l, s] · (M · exp(min(A(l) − A(s), 0))) : 0
//   U_r(s)  = Σ_{l in [64r, 64r+64), s <= l <= λ} u(l, s)               (in 16-row blocks)
//
// U is Σ_p x_sp · (Σ_m Wt(s, m) dy_mp) of chunk_scan_bwd_dx regrouped so that every term is an fp32
// product of the exact M (issue 11): dx's Wt operand is rounded to T for its mma, and that rounding
// dominated ddt_bias's error. chunk_scan_bwd_ddA adds Σ_r U_r to dx's state part.
//
// T and U are stored for every 64-row group r with 64r <= λ and every k < min(64r + 64, λ + 1),
// exactly those slots: DETERMINISTIC in intra and dtx_intra (b, h, nchunks, Q/64, Q)
// (chunk_scan_bwd_ddA sums r increasing); otherwise atomically added into intra and dtx_intra
// (b, h, nchunks, Q) (zeroed by the launcher).
//
// With z (kDyLo, SSD_FLAG_Z; params ChunkScanBwdDdaIntraZParams) dy is gate_bwd's fp32 dy stored
// as two T terms, dy and dy_lo = rn_T(dy_fp32 − float(dy)), and M takes both:
//   M(l, s) = Σ_p dy_lp · x_sp + Σ_p dy_lo_lp · x_sp                  (one chain: dy's p, then dy_lo's)
// so that dy's rounding to T does not enter W and u (issue 11).
//
// Canonical order (the same for every legal BLOCK_M / BLOCK_N / BLOCK_K and warp split):
//   * M: one fp32 chain of mma.m16n8k16 over p = 0, 16, ... (P in min(BLOCK_K, P) stages); with
//     kDyLo the chain continues on the same accumulator over p = 0, 16, ... again with dy_lo as the
//     A operand (the same x as B): p-steps 0 .. KP−1 on dy, KP .. 2KP−1 on dy_lo;
//   * d: detail::bwd_decay_product (__fsub_rn, fminf, __expf, __fmul_rn, __fmul_rn), W: __fmul_rn;
//   * S(l, ·), blocked at kIntraSumBlock = 16 chunk columns (a fixed blocking, not BLOCK_N): for
//     block j (columns 16j .. 16j + 15), L_j(k) = Σ_{16j <= s < k} W(l, s), s increasing from +0.0;
//     the block carries C_0 = +0.0, C_{j+1} = C_j + L_j(16j + 16), j increasing; S(l, k) =
//     C_j + L_j(k), j = ⌊k/16⌋ — all __fadd_rn. One thread owns row l: C_j stays in its register
//     across the column tiles s0 = 0, BN, 2BN, ... (increasing), and a tile's BN/16 block chains run
//     side by side;
//   * T_r(k): one thread per (r, k): σ_q = Σ S(l, k) over l in [64r + 16q, 64r + 16q + 16) with
//     k <= l <= λ, l increasing from +0.0 (q = 0 .. 3, the four chains side by side), then T_r(k) =
//     ((σ_0 + σ_1) + σ_2) + σ_3 from +0.0, __fadd_rn. Row groups are 64 rows (kIntraRowGroup) and
//     row blocks 16 whatever BLOCK_M is.
//   * u: detail::bwd_decay (__fsub_rn, fminf, __expf, __fmul_rn), then __fmul_rn by CB; U_r(k) as
//     T_r(k), over u(l, k) instead of S(l, k). bwd_decay is the first half of bwd_decay_product, so
//     one fill forms both from the same expression (the compiler evaluates the exp once).
// Each (r, k) slot is written by exactly one block (the row block holding group r) in exactly one
// column tile (the one holding k): the column tiles cover [0, roundup(min(m0 + BM, λ + 1), BN)),
// which contains [0, min(64r + 64, λ + 1)) for every group r of the block.
//
// CB is read straight into registers in the accumulator fragment layout (pairs (l, s..s+1), s
// even), only when s <= l <= λ, i.e. inside a 4-float group (l, s0..s0+3) with s0 <= l, which
// lies in a tile bmm_chunk_fwd wrote; other entries are never read (taken as 0).
//
// Pipeline: one flat cp.async loop over step = tile·KPS + kp (KPS = KP, or 2KP with kDyLo: dy (then
// dy_lo) tile rows m0.. and x tile rows s0.. per p-step), prefetching across column tiles. At the
// last p-step of a tile the epilogue runs (u and W computed together, in registers):
//   * when the step's stage buffer holds a [BM][BN+8] fp32 tile (bwd_geom::intra_u_in_stage, e.g.
//     64 x 32 x 64): W -> s_w [BM][BN+4]; barrier (every warp's mma is done with the stage);
//     u -> the stage buffer, row prefix; barrier; U and T column sums + stores, in parallel;
//   * otherwise (one fp32 tile): u -> s_w; barrier; U column sums + stores; barrier; W -> s_w;
//     barrier; row prefix; barrier; T column sums + stores.
// The next tile's writes (s_w; the stage buffer's next cp.async) come after the next step's
// pipeline barrier, which orders them after these reads.
//
// Launch: block = bwd_geom::intra_threads(BLOCK_M, BLOCK_N) threads (warp grid of bmm_chunk_fwd);
//         grid  = (bwd_geom::intra_tiles(Q, BLOCK_M), batch * nchunks, nheads), each axis
//         grid-stride (x walked with the longest row blocks first); block >= BLOCK_M threads (one
//         row owner each); static shared memory
//         bwd_geom::intra_smem_bytes(Q, P, BLOCK_M, BLOCK_N, BLOCK_K) <= 48 KiB.
// Legal tiles: BLOCK_M in {64, 128} dividing Q; BLOCK_N in {16, 32, 64}; BLOCK_K in {16, 32, 64}
//   with min(BLOCK_K, P) dividing P; shared memory within 48 KiB.
#pragma once

#include "ssd/backward_params.cuh"
#include "ssd/chunk_scan_bwd_dcb.cuh"  // detail::bwd_decay_product: the one definition of d
#include "ssd/primitives/dtype.cuh"
#include "ssd/primitives/mma.cuh"
#include "ssd/primitives/spec.cuh"

namespace ssd_kernels {

namespace detail {

// out = T_r(k) / U_r(k) of one column of a 64-row group: rows base .. base + 63 of col (stride LD),
// as four 16-row blocks σ_q = Σ_{i < 16} col[(base + 16q + i)·LD] (i increasing from +0.0, the four
// chains side by side), then ((σ_0 + σ_1) + σ_2) + σ_3 from +0.0, all __fadd_rn. The callers' tiles hold
// exact +0.0 outside the summed range (u and W are selected to 0 there, and the row prefix stores 0
// for S(l, k) with k > l), and a chain from +0.0 is never −0.0, so adding those zeros gives the bits
// of the sum over the range alone (docs/determinism.md): the loads need no predicate.
template <int LD>
__device__ __forceinline__ float intra_column_sum(const float* col, int base) {
  constexpr int B = kIntraSumBlock, NB = kIntraRowGroup / kIntraSumBlock;
  float part[NB];
#pragma unroll
  for (int q = 0; q < NB; ++q) part[q] = 0.f;
#pragma unroll
  for (int i = 0; i < B; i += 4) {
    float v[NB][4];
#pragma unroll
    for (int q = 0; q < NB; ++q)
#pragma unroll
      for (int e = 0; e < 4; ++e) v[q][e] = col[(base + B * q + i + e) * LD];
#pragma unroll
    for (int e = 0; e < 4; ++e)
#pragma unroll
      for (int q = 0; q < NB; ++q) part[q] = __fadd_rn(part[q], v[q][e]);
  }
  float t = 0.f;
#pragma unroll
  for (int q = 0; q < NB; ++q) t = __fadd_rn(t, part[q]);
  return t;
}


// CB(l, s..s+1) of this thread's accumulator-fragment positions of a BLOCK_M x BLOCK_N tile (rows
// m0.., columns s0..) straight from global memory into registers, read only where s <= l <= λ (0
// elsewhere); the vector test is outside the unrolled loops (straight-line predicated loads).
template <int MI, int NJ>
__device__ __forceinline__ void intra_read_cb(float2 (&cbv)[MI][2][NJ], const float* cb_base, long long row_stride, int m0,
                                              int s0, int valid, bool vec_cb, int wm0, int wn0, int lg, int lt) {
  auto read_cb = [&](bool vec) {
#pragma unroll
    for (int i = 0; i < MI; ++i) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int l = m0 + wm0 + 16 * i + lg + 8 * half;
        const float* cbr = cb_base + (long long)l * row_stride;
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
          const int s = s0 + wn0 + 8 * j + 2 * lt;
          float2 v = make_float2(0.f, 0.f);
          if (s <= l && l < valid) v = vec ? *reinterpret_cast<const float2*>(cbr + s) : make_float2(cbr[s], cbr[s + 1]);
          cbv[i][half][j] = v;
        }
      }
    }
  };
  if (vec_cb) {
    read_cb(true);
  } else {
    read_cb(false);
  }
}

// Row l's S(l, s0 + k), k < BN, in place over its W, by its row owner; carry = C_{s0/16} on entry,
// C_{(s0+BN)/16} on return. Per 16-column block j of the tile (chunk columns s0 + 16j .. s0 + 16j + 15;
// s0 is a multiple of BN and so of 16): L(k) = Σ W(l, s) over the block's columns before k, s increasing from
// +0.0 (the BN/16 chains side by side), then S = C + L(k) with C the block's carry, and the next
// carry C + L(16): S does not depend on BN. S(l, s) with s > l (never summed into T) is stored as 0
// so that the column chains need no mask (intra_column_sum); `diag` = l − s0.
template <int BN>
__device__ __forceinline__ float intra_row_prefix(float* row, float carry, int diag) {
  constexpr int B = kIntraSumBlock, NB = BN / kIntraSumBlock;
  static_assert(BN % kIntraSumBlock == 0, "the column tile is whole 16-column blocks");
#pragma unroll
  for (int j = 0; j < NB; ++j) {  // the blocks' L chains are independent: ptxas interleaves them
    float v[B];
#pragma unroll
    for (int i = 0; i < B; i += 4) {
      const float4 wv = *reinterpret_cast<const float4*>(row + B * j + i);
      v[i] = wv.x;
      v[i + 1] = wv.y;
      v[i + 2] = wv.z;
      v[i + 3] = wv.w;
    }
    float run = 0.f;  // L(k), exclusive: before W(l, k) joins
#pragma unroll
    for (int i = 0; i < B; ++i) {
      const float w = v[i];
      v[i] = run;
      run = __fadd_rn(run, w);
    }
#pragma unroll
    for (int i = 0; i < B; ++i) v[i] = B * j + i <= diag ? __fadd_rn(carry, v[i]) : 0.f;
    carry = __fadd_rn(carry, run);
#pragma unroll
    for (int i = 0; i < B; i += 4)
      *reinterpret_cast<float4*>(row + B * j + i) = make_float4(v[i], v[i + 1], v[i + 2], v[i + 3]);
  }
  return carry;
}

// After a column tile's u and W are formed (one in the fp32 tile s_w, the other in registers: see
// chunk_scan_bwd_ddA_intra's epilogue), the tile's sums in the kernel's fixed orders:
//   * row l's exclusive prefix S(l, s0 + k) in 16-column blocks (intra_row_prefix), in place, by its
//     row owner (thread l − m0 < BLOCK_M); the caller's RowCarry keeps the block carry between column
//     tiles (ddA_intra: a register; the fused dcb + ddA_intra: one per head in shared memory);
//   * the column chains U_r(k) (from u) and T_r(k) (from S) of every 64-row group r in 16-row blocks
//     (intra_column_sum);
// with the barriers of the two layouts: U_IN_STAGE (u goes to the stage buffer s_u the last p-step
// read) or one fp32 tile (u first, then W through it). acc holds W (not U_IN_STAGE) or is free, and is
// zeroed for the next tile's M; uf holds u when U_IN_STAGE.
template <int NT, int Q, int BLOCK_M, int BLOCK_N, int LDW, int LDU, bool U_IN_STAGE, bool kDeterministic, int MI,
          int NJ, class RowCarry>
__device__ __forceinline__ void intra_tile_sums(FragC (&acc)[MI][NJ], const FragC (&uf)[MI][NJ], float* s_w, float* s_u,
                                                RowCarry&& row_carry, int s0, int m0, int valid, long long row_bhc,
                                                float* intra, float* dtx_intra, int wm0, int wn0, int lane, int tid) {
  // A fragment tile into a shared [BM][ld] fp32 tile (column pairs, 8 bytes).
  auto store_fragments = [&](float* tile, int ld, const FragC(&f)[MI][NJ]) {
#pragma unroll
    for (int i = 0; i < MI; ++i) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = wm0 + 16 * i + FragC::row(lane, half);
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
          const int k = wn0 + 8 * j + FragC::col(lane);
          *reinterpret_cast<float2*>(tile + r * ld + k) = make_float2(f[i][j].x[2 * half], f[i][j].x[2 * half + 1]);
        }
      }
    }
  };
  auto row_prefix = [&] {
    if (tid < BLOCK_M) {
      float& carry = row_carry();
      carry = intra_row_prefix<BLOCK_N>(s_w + tid * LDW, carry, m0 + tid - s0);
    }
  };
  // Column k of group rg (item idx = rg·BN + k): out_rg(k) = the sum of tile(l, k) over the group's
  // rows l in [max(64rg', k), min(64rg' + 63, λ)] in intra_column_sum's blocks (rg' the chunk's group
  // index; the tile is 0 at the group's other rows).
  auto column_item = [&](bool from_stage, int idx, float* out) {
    const int rg = idx / BLOCK_N, k = idx % BLOCK_N;
    const int kg = s0 + k;
    const int lo = m0 + rg * kIntraRowGroup;          // first row of the group (chunk position)
    const int hi = bwd_geom::imin(lo + kIntraRowGroup, valid);  // rows l < hi
    if (lo >= valid || kg >= hi) return;              // slot not in the stored set
    const int base = rg * kIntraRowGroup;
    const float t = from_stage ? intra_column_sum<LDU>(s_u + k, base) : intra_column_sum<LDW>(s_w + k, base);
    const int rglob = lo / kIntraRowGroup;
    if (kDeterministic) {
      out[(row_bhc * (Q / kIntraRowGroup) + rglob) * Q + kg] = t;
    } else {
      atomicAdd(out + row_bhc * Q + kg, t);
    }
  };
  constexpr int ITEMS = (BLOCK_M / kIntraRowGroup) * BLOCK_N;  // column chains of one kind per tile
  // Column chains start at the first thread past the row owners: with BLOCK_M = 64 the chains
  // run on warps 2, 3 and the row walks on warps 0, 1, i.e. on different SM sub-partitions.
  const int item0 = (tid + NT - BLOCK_M) % NT;
  if constexpr (U_IN_STAGE) {
    __syncthreads();  // W visible; every warp's mma is done with this step's stage buffer
    store_fragments(s_u, LDU, uf);
    warp::zero_tile(acc);  // M restarts from 0 for the next tile
    row_prefix();
    __syncthreads();
    // U's and T's column chains side by side (U's items first).
    for (int idx = item0; idx < 2 * ITEMS; idx += NT) {
      if (idx < ITEMS) {
        column_item(true, idx, dtx_intra);
      } else {
        column_item(false, idx - ITEMS, intra);
      }
    }
  } else {
    // One fp32 tile: u, then W through it.
    __syncthreads();
    for (int idx = item0; idx < ITEMS; idx += NT) column_item(false, idx, dtx_intra);
    __syncthreads();
    store_fragments(s_w, LDW, acc);
    warp::zero_tile(acc);
    __syncthreads();
    row_prefix();
    __syncthreads();
    for (int idx = item0; idx < ITEMS; idx += NT) column_item(false, idx, intra);
  }
  // (the next writes of s_w and of this stage buffer follow the next step's barrier)
}
}  // namespace detail

template <class Spec, class Params>  // Params: ChunkScanBwdDdaIntraZParams with kDyLo, else ChunkScanBwdDdaIntraParams
__device__ void chunk_scan_bwd_ddA_intra(const Params& p) {
  SSD_TILE_SPEC_NAMES(Spec);  // Q, P, N, HEADS_PER_GROUP, BLOCK_M, BLOCK_N, BLOCK_K; T: bf16 or fp16
  static_assert(bwd_geom::intra_tile_problem(Q, P, BLOCK_M, BLOCK_N, BLOCK_K) == nullptr,
                "illegal tile: the host's check (src/kernels) refuses it");
  using namespace bwd_geom;
  static_assert(HEADS_PER_GROUP >= 1, "HEADS_PER_GROUP >= 1");
  static_assert(BLOCK_M % kIntraRowGroup == 0 && BLOCK_M <= 128 && Q % BLOCK_M == 0,
                "BLOCK_M must be 64 or 128 and divide the chunk");
  static_assert(BLOCK_N % 16 == 0 && BLOCK_N <= 64 && Q % BLOCK_N == 0, "BLOCK_N in 16, 32, 64");
  static_assert(BLOCK_K % 16 == 0 && P % 16 == 0, "BLOCK_K and headdim must be multiples of 16");
  constexpr int WM = fwd_geom::warp_tile_m(BLOCK_M, BLOCK_N);
  constexpr int WN = fwd_geom::warp_tile_n(BLOCK_M, BLOCK_N);
  constexpr int WARPS_N = BLOCK_N / WN;
  constexpr int NT = intra_threads(BLOCK_M, BLOCK_N);
  constexpr int BKP = dcb_block_kp(P, BLOCK_K);  // p-step
  constexpr int KP = P / BKP;                     // p-steps per pass over headdim
  constexpr int KPS = Spec::kDyLo ? 2 * KP : KP;  // p-steps per column tile (dy's pass, then dy_lo's)
  constexpr int STAGES = intra_stages(Q, P, BLOCK_M, BLOCK_N, BLOCK_K);
  constexpr int LD = BKP + kPad;       // dy tile [l][p] and x tile [s][p], type T
  constexpr int LDW = intra_w_ld(BLOCK_N);  // W / S tile [l][k], fp32: 16-byte rows, 8 rows' float4 conflict-free
  constexpr int LDU = intra_u_ld(BLOCK_N);  // u tile [l][k] in the stage buffer: fragment stores conflict-free
  constexpr bool U_IN_STAGE = intra_u_in_stage(P, BLOCK_M, BLOCK_N, BLOCK_K);
  constexpr int MI = WM / 16, NJ = WN / 8;
  constexpr int TILES = intra_tiles(Q, BLOCK_M);
  static_assert(P % BKP == 0, "min(BLOCK_K, headdim) must divide headdim");
  static_assert(WM % 16 == 0 && WN % 16 == 0, "warp tile must be a multiple of 16 x 16");
  static_assert(MI * NJ * 4 <= 64, "accumulator over 64 registers per thread");
  static_assert(NT >= BLOCK_M, "one row owner per thread (the row carry lives in its register)");
  static_assert(BLOCK_N % 4 == 0 && LDW % 4 == 0 && LDU % 2 == 0, "float4 row walks, float2 fragment stores");
  static_assert(intra_smem_bytes(Q, P, BLOCK_M, BLOCK_N, BLOCK_K) <= kMaxStaticSmem,
                "shared memory over 48 KiB: lower BLOCK_K or BLOCK_N");
  static_assert(sizeof(T) * STAGES * (BLOCK_M + BLOCK_N) * LD + 4 * BLOCK_M * LDW + 4 * 2 * Q ==
                    intra_smem_bytes(Q, P, BLOCK_M, BLOCK_N, BLOCK_K),
                "shared layout out of sync with bwd_geom::intra_smem_bytes");

  __shared__ __align__(16) T s_tiles[STAGES][(BLOCK_M + BLOCK_N) * LD];
  __shared__ __align__(16) float s_w[BLOCK_M * LDW];  // W, then S, of the current column tile (or u first)
  __shared__ __align__(16) float s_A[Q];
  __shared__ __align__(16) float s_dt[Q];

  SSD_WARP_TILE_COORDS(WM, WN, WARPS_N);  // tid, warp, lane, wm0, wn0, lg, lt

  const T* xg = static_cast<const T*>(p.x.data);
  const T* dyg = static_cast<const T*>(p.dy.data);
  const bool vec_x = vec16_rows(xg, p.x);
  bool vec_dy = vec16_rows(dyg, p.dy);
  if constexpr (Spec::kDyLo) vec_dy = vec_dy && aligned16(p.dy_lo);  // dy_lo: dy's strides
  const bool vec_cb = vec8_floats(p.CB);
  // Work indices are 32-bit (batch * nchunks and nheads < 2^31); offsets are 64-bit.
  const int batch = int(p.batch), nheads = int(p.nheads), nchunks = int(p.nchunks);
  const int nbc = int(p.batch * p.nchunks);

  for (int h = blockIdx.z; h < nheads; h += gridDim.z) {
    const int g = h / HEADS_PER_GROUP;
    for (int bc = blockIdx.y; bc < nbc; bc += gridDim.y) {
      SSD_CHUNK_COORDS(bc, batch, Q, p.seqlen);  // b, c, t0, valid: λ_c = valid - 1
      const long long chunk_off = p.dA_cumsum.offset(b, h, c);
      const T* safe_x = xg + p.x.offset(b, 0, h);
      const T* safe_dy = dyg + p.dy.offset(b, 0, h);
      const float* cb_base = p.CB.ptr(b, c, g);
      const long long row_bhc = ((long long)b * nheads + h) * nchunks + c;  // (b, h, c) in the intra layouts

      for (int tile = blockIdx.x; tile < TILES; tile += gridDim.x) {
        const int m0 = (TILES - 1 - tile) * BLOCK_M;  // longest row blocks (most column tiles) first
        if (m0 >= valid) continue;  // no group r with 64r <= λ (uniform over the block; no shared memory touched)
        const int kend = imin(m0 + BLOCK_M, valid);         // columns s < kend can be nonzero
        const int steps = ((kend + BLOCK_N - 1) / BLOCK_N) * KPS;

        // Per-position data of the chunk (visible after the loop's first barrier; the previous item's
        // readers finished before its closing barrier).
        for (int l = tid; l < Q; l += NT) {
          s_A[l] = p.dA_cumsum.data[chunk_off + l];
          s_dt[l] = p.dt[chunk_off + l];
        }
        float row_carry = 0.f;  // thread tid < BLOCK_M owns row tid: Σ_{s < s0} W(m0 + tid, s)

        const T* dyt = safe_dy + (t0 + m0) * p.dy.stride[1];
        const T* xt = safe_x + t0 * p.x.stride[1];
        // Stage `step` = (column tile step / KPS, p-step step % KPS) into buffer buf.
        auto load_stage = [&](int buf, int step) {
          const int s0 = (step / KPS) * BLOCK_N;
          int kq = step % KPS;  // the p-step inside its pass
          const T* dys = dyt;
          const T* safe_dys = safe_dy;
          if constexpr (Spec::kDyLo) {
            if (kq >= KP) {  // dy_lo's pass, laid out as dy
              kq -= KP;
              safe_dys = static_cast<const T*>(p.dy_lo) + p.dy.offset(b, 0, h);
              dys = safe_dys + (t0 + m0) * p.dy.stride[1];
            }
          }
          const long long k0 = (long long)kq * BKP;
          T* sa = s_tiles[buf];
          T* sb = sa + BLOCK_M * LD;
          block::load_tile<NT, BLOCK_M, BKP, LD>(sa, dys + k0 * p.dy.stride[3], p.dy.stride[1], p.dy.stride[3], vec_dy,
                                                 safe_dys, [&](int r, int) { return m0 + r < valid; });
          block::load_tile<NT, BLOCK_N, BKP, LD>(sb, xt + s0 * p.x.stride[1] + k0 * p.x.stride[3], p.x.stride[1],
                                                 p.x.stride[3], vec_x, safe_x,
                                                 [&](int r, int) { return s0 + r < valid; });
        };

        FragC acc[MI][NJ];  // M of the current column tile, from 0
        warp::zero_tile(acc);
        float2 cbv[MI][2][NJ];  // CB(l, s..s+1) of this thread's fragment positions (0 where not read)

        // cp.async pipeline, STAGES buffers: step s lives in buffer s % STAGES.
        const block::CpAsyncPipeline<STAGES> ring{steps};
        ring.prologue(load_stage);
#pragma unroll 1
        for (int step = 0; step < steps; ++step) {
          ring.begin(step, load_stage);  // step visible to all; everyone is done with step - 1 (and the last epilogue)
          const int kp = step % KPS;
          const int s0 = (step / KPS) * BLOCK_N;
          if (kp == 0) {
            // This tile's CB entries, read early so the loads overlap the p-steps.
            detail::intra_read_cb(cbv, cb_base, p.CB.stride[3], m0, s0, valid, vec_cb, wm0, wn0, lg, lt);
          }
          const int buf = step % STAGES;
          const T* sa = s_tiles[buf];
          const T* sb = sa + BLOCK_M * LD;
#pragma unroll
          for (int kk = 0; kk < BKP; kk += 16) {
            SSD_WARP_MMA_K16_PAIRS(T, acc, warp::load_a(a[i], sa + (wm0 + 16 * i) * LD + kk, LD),
                                   warp::load_b2(b0, b1, sb + (wn0 + 8 * j) * LD + kk, LD));
          }
          if (kp != KPS - 1) continue;

          // ---- Epilogue of column tile s0 ----
          // u and W of this thread's fragment entries, the exp evaluated once (bwd_decay is
          // bwd_decay_product's first factor); 0 unless l <= λ and s <= l (u) / s < l (W), selected, not
          // multiplied by a mask: A past λ may be NaN-poisoned. One of them goes straight to s_w (8-byte
          // column pairs), the other stays in registers for after the next barrier: U_IN_STAGE: W to
          // s_w, u in uf; otherwise u to s_w, W in place of M in acc.
          FragC uf[MI][NJ];
#pragma unroll
          for (int i = 0; i < MI; ++i) {
#pragma unroll
            for (int half = 0; half < 2; ++half) {
              const int r = wm0 + 16 * i + FragC::row(lane, half);  // row inside the block
              const int l = m0 + r;
              const float al = s_A[l];
              const bool row_ok = l < valid;
#pragma unroll
              for (int j = 0; j < NJ; ++j) {
                const int k = wn0 + 8 * j + FragC::col(lane);  // column inside the tile (even)
                const int s = s0 + k;
                const float2 as = *reinterpret_cast<const float2*>(s_A + s);
                const float2 ds = *reinterpret_cast<const float2*>(s_dt + s);
                float2 to_tile;
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                  const float m = acc[i][j].x[2 * half + e];
                  const float cb = e ? cbv[i][half][j].y : cbv[i][half][j].x;
                  const float a_s = e ? as.y : as.x;
                  const float u = __fmul_rn(cb, detail::bwd_decay(m, al, a_s));
                  const float w = __fmul_rn(cb, detail::bwd_decay_product(m, al, a_s, e ? ds.y : ds.x));
                  const float u_sel = (row_ok && s + e <= l) ? u : 0.f;
                  const float w_sel = (row_ok && s + e < l) ? w : 0.f;
                  (e ? to_tile.y : to_tile.x) = U_IN_STAGE ? w_sel : u_sel;
                  (U_IN_STAGE ? uf : acc)[i][j].x[2 * half + e] = U_IN_STAGE ? u_sel : w_sel;
                }
                *reinterpret_cast<float2*>(s_w + r * LDW + k) = to_tile;
              }
            }
          }
          detail::intra_tile_sums<NT, Q, BLOCK_M, BLOCK_N, LDW, LDU, U_IN_STAGE, Spec::kDeterministic>(
              acc, uf, s_w, reinterpret_cast<float*>(s_tiles[buf]), [&]() -> float& { return row_carry; }, s0, m0, valid,
              row_bhc, p.intra, p.dtx_intra, wm0, wn0, lane, tid);
        }
        ring.drain();
        __syncthreads();  // shared tiles, W and the per-position arrays are reused by the next item
      }
    }
  }
}

}  // namespace ssd_kernels
