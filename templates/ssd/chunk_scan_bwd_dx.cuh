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
// Launch: block = bwd_geom::dx_threads() = 256 threads = 8 warps as a 4 (rows) x 2 (P halves)
//         grid: warp w owns rows [(w/2)·BLOCK_M/4, (w/2+1)·BLOCK_M/4) of the tile and columns
//         p in [(w%2)·P/2, (w%2+1)·P/2). Both column warps of a row band load (C | B) and form Wt
//         for the same rows (the A operands); each reads only its half of the B operands (P, ds,
//         dy) and stages only its half of acc;
//         grid = (bwd_geom::dx_tiles(Q, BLOCK_M), batch * nchunks, nheads), each axis grid-stride
//         (x is walked with the longest m-ranges, i.e. the smallest m0, first); static shared memory
//         bwd_geom::dx_smem_bytes(Q, P, N, BLOCK_M, BLOCK_K, HAS_SEQ_IDX) <= 48 KiB, no dynamic.
// Tiles: BLOCK_M in {64, 128} dividing Q, BLOCK_M · P <= 8192 (the 128-thread bound of the
//        accumulators, kept: now at most 32 fp32 per thread), BLOCK_K in
//        {16, 32, 64} dividing Q, min(BLOCK_K, N) dividing N, and the shared memory bound (the
//        host checks bwd_geom::dx_smem_bytes; e.g. BLOCK_K = 64 fits only for small P).
#pragma once

#include "ssd/backward_params.cuh"
#include "ssd/chunk_scan.cuh"  // detail::load8 / store8 / vec16_bhlp
#include "ssd/primitives/dtype.cuh"
#include "ssd/primitives/mma.cuh"
#include "ssd/primitives/spec.cuh"

namespace ssd_kernels {

namespace detail {

// K loop over n shared by phases A2 and A1 of chunk_scan_bwd_dx: acc += RowTile(l, n) · KTile(p, n)ᵀ,
// min(BLOCK_K, N) = BKN per step in increasing n, each step a chain of BKN/16 mma K=16 in increasing
// n. Stage buf holds the row tile [BLOCK_M][LDA] then the K tile [P][LDA] (type T); the warp reads
// rows [wm0, wm0 + 16·MI) of the row tile and rows [wn0, wn0 + 8·NJ) of the K tile. load_stage(buf,
// ks) issues the cp.async copies of step ks (row tile and K tile, both T) into buffer buf.
template <int NT, int STAGES, int KA, int BKN, int LDA, int STAGE_A, int BLOCK_M, int MI, int NJ, class T,
          class LoadStage>
__device__ __forceinline__ void dx_n_loop(FragC (&acc)[MI][NJ], unsigned char* s_body, int wm0, int wn0,
                                          LoadStage& load_stage) {
  const block::CpAsyncPipeline<STAGES> ring{KA};
  ring.prologue(load_stage);
  for (int ks = 0; ks < KA; ++ks) {
    ring.begin(ks, load_stage);
    const T* sr = reinterpret_cast<const T*>(s_body + (ks % STAGES) * STAGE_A);
    const T* sk = sr + BLOCK_M * LDA;
#pragma unroll
    for (int kk = 0; kk < BKN; kk += 16) {
      SSD_WARP_MMA_K16_PAIRS(T, acc, warp::load_a(a[i], sr + (wm0 + 16 * i) * LDA + kk, LDA),
                             warp::load_b2(b0, b1, sk + (wn0 + 8 * j) * LDA + kk, LDA));
    }
  }
  ring.drain();
  __syncthreads();  // the stage buffers are reused by the staging tile
}

// out[l] = finish(l, Σ_p float(src_lp) · so_lp) for every row l = m0 + r of the tile, 0 past λ
// (valid rows only read). One thread per row walks p = 0 .. P-1 in increasing order from +0.0 with
// fma. so: the staged fp32 tile [BLOCK_M][LDO]; src points at (b, t = 0, h, p = 0) of a
// (b, L, h, p) tensor. With LO, src_lo (laid out as src) is src's second term and each p adds
// both, the lo term first: dot = fma(float(src_lp), so_lp, fma(float(src_lo_lp), so_lp, dot)).
template <int P, int LDO, int BLOCK_M, int NT, bool LO = false, class T, class Finish>
__device__ __forceinline__ void dx_row_dots(const float* so, int m0, int valid, long long t0, const T* src,
                                            long long stride_l, long long stride_p, bool vec, float* out,
                                            const Finish& finish, const T* src_lo = nullptr) {
  for (int r = threadIdx.x; r < BLOCK_M; r += NT) {
    const int l = m0 + r;
    float res = 0.f;
    if (l < valid) {
      const float* sr = so + r * LDO;
      const long long off = (t0 + l) * stride_l;
      float dot = 0.f;
#pragma unroll 4
      for (int cc = 0; cc < P; cc += 8) {
        float e[8];
        load8<T>(src, off + cc * stride_p, stride_p, vec, e);
        const float4 r0 = *reinterpret_cast<const float4*>(sr + cc);
        const float4 r1 = *reinterpret_cast<const float4*>(sr + cc + 4);
        if constexpr (LO) {
          float f[8];
          load8<T>(src_lo, off + cc * stride_p, stride_p, vec, f);
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
  static_assert(bwd_geom::dx_tile_problem(Q, P, N, BLOCK_M, 0, BLOCK_K, Spec::kSeqIdx) == nullptr,
                "illegal tile: the host's check (src/kernels) refuses it");
  using namespace bwd_geom;
  static_assert(HEADS_PER_GROUP >= 1, "HEADS_PER_GROUP >= 1");
  static_assert(BLOCK_M == 64 || BLOCK_M == 128, "BLOCK_M must be 64 or 128 (4 row warps of 16 or 32 rows)");
  static_assert(BLOCK_K == 16 || BLOCK_K == 32 || BLOCK_K == 64, "BLOCK_K must be 16, 32 or 64");
  static_assert(Q % BLOCK_M == 0 && Q % BLOCK_K == 0, "BLOCK_M and BLOCK_K must divide the chunk");
  static_assert(P % 32 == 0 && N % 16 == 0, "headdim must be a multiple of 32 (2 column warps of whole "
                                          "load_b2 pairs), dstate of 16");
  static_assert(BLOCK_M * P <= 8192, "accumulator over 64 registers per thread: lower BLOCK_M");
  constexpr int NT = dx_threads();
  static_assert(NT == 256, "warp grid is 4 (rows) x 2 (P halves)");
  constexpr int WM = BLOCK_M / 4;  // rows per warp
  constexpr int WN = P / 2;        // columns per warp
  constexpr int MI = WM / 16, NJ = WN / 8;
  static_assert(NJ % 2 == 0, "B fragments are loaded in pairs (load_b2)");
  static_assert(MI * NJ * 4 <= 64, "accumulator over 64 registers per thread");
  constexpr int BKN = dx_block_kn(N, BLOCK_K);
  static_assert(N % BKN == 0, "BLOCK_K must divide dstate (or exceed it)");
  constexpr TwoPhaseBytes BYTES = dx_bytes(P, N, BLOCK_M, BLOCK_K);
  constexpr int STAGES = two_phase_stages(BYTES, Q, Spec::kSeqIdx);
  constexpr int LDA = BKN + kPad;     // row tile (C | B) [l][n] and K tile (P | ds) [p][n], type T
  constexpr int LDCB = BLOCK_M + 4;   // CB tile [m][l], fp32 (row stride = 4 mod 32 words: the
                                      // (m = 2t.., l = g) reads of a warp hit 32 distinct banks)
  constexpr int LDY = P + kPad;       // dy tile [m][p], type T
  constexpr int LDO = P + 4;          // staging tile [l][p], fp32 (row-per-thread float4 reads are
                                      // conflict free)
  constexpr int STAGE_A = BYTES.stage_a;
  constexpr int STAGE_B = BYTES.stage_b;
  constexpr int BODY = two_phase_body_bytes(STAGES, BYTES);
  constexpr int TILES = dx_tiles(Q, BLOCK_M);
  constexpr int KA = N / BKN;
  static_assert(STAGE_A == (BLOCK_M + P) * LDA * 2 && STAGE_B == BLOCK_K * LDCB * 4 + BLOCK_K * LDY * 2 &&
                    BYTES.epilogue == BLOCK_M * LDO * 4,
                "bwd_geom::dx_* must describe this layout");
  static_assert(dx_smem_bytes(Q, P, N, BLOCK_M, BLOCK_K, Spec::kSeqIdx) <= kMaxStaticSmem,
                "shared memory over 48 KiB: lower BLOCK_K or BLOCK_M");
  static_assert(STAGE_A % 16 == 0 && STAGE_B % 16 == 0 && (BLOCK_K * LDCB * 4) % 16 == 0, "stage alignment");

  __shared__ __align__(16) unsigned char s_body[BODY];
  __shared__ __align__(16) float s_dA[Q];
  __shared__ __align__(16) float s_dt[Q];
  __shared__ int s_seq[Spec::kSeqIdx ? Q : 1];

  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int wm0 = (warp >> 1) * WM;  // row band
  const int wn0 = (warp & 1) * WN;   // column half
  const int lg = lane >> 2, lt = lane & 3;

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

  for (int h = blockIdx.z; h < nheads; h += gridDim.z) {
    const int g = h / HEADS_PER_GROUP;
    float d_head = 0.f;
    if (Spec::kD && !Spec::kDPerHeaddim) d_head = p.D.data[h * p.D.stride[0]];
    for (int bc = blockIdx.y; bc < nbc; bc += gridDim.y) {
      SSD_CHUNK_COORDS(bc, batch, Q, p.seqlen);  // b, c, t0, valid: λ_c = valid - 1
      const long long chunk_off = p.dA_cumsum.offset(b, h, c);
      const float* dA = p.dA_cumsum.data + chunk_off;
      const float* dt = p.dt + chunk_off;
      float* ddt_x_out = p.ddt_x + chunk_off;
      float* w_out = p.w + chunk_off;
      float* v_out = p.v + chunk_off;
      const T* safe_x = xg + p.x.offset(b, 0, h);
      const T* safe_dy = dyg + p.dy.offset(b, 0, h);
      const T* safe_b = Bg + p.B.offset(b, 0, g);
      const T* safe_c = Cg + p.C.offset(b, 0, g);
      // P_c's and ds_c's terms: hi (states, ds) and lo (states_lo, ds_lo, laid out alike), formed in
      // the phases' loops (fewer live registers).
      const long long ds_off = p.ds.offset(b, c, h), p_off = p.states.offset(b, c, h);
      const float* cb_base = p.CB.ptr(b, c, g);
      int q_prev = 0;
      if (Spec::kSeqIdx && c > 0) q_prev = p.seq_idx(b, t0 - 1);

      for (int tile = blockIdx.x; tile < TILES; tile += gridDim.x) {
        const int m0 = tile * BLOCK_M;  // smallest m0 first: its m-range (m0 .. λ) is the longest
        if (m0 >= valid) {
          // Rows all padding (uniform over the block; no shared memory touched): only the zeros
          // of this tile's slots of the (b, h, c, Q) vectors.
          for (int r = tid; r < BLOCK_M; r += NT) {
            ddt_x_out[m0 + r] = 0.f;
            w_out[m0 + r] = 0.f;
            v_out[m0 + r] = 0.f;
          }
          continue;
        }

        // Per-position fp32 data of the whole chunk (visible after the first barrier of phase A2).
        for (int l = tid; l < Q; l += NT) {
          s_dA[l] = dA[l];
          s_dt[l] = dt[l];
          if (Spec::kSeqIdx)
            s_seq[l] = l < valid ? p.seq_idx(b, t0 + l) : -1;
        }

        FragC acc[MI][NJ];
        auto zero_acc = [&]() {
          warp::zero_tile(acc);
        };

        // Stage buffers of the n loops (detail::dx_n_loop): row tile [l][n], then K tile [p][n].
        auto sRow = [&](int buf) { return reinterpret_cast<T*>(s_body + buf * STAGE_A); };
        auto sK = [&](int buf) { return reinterpret_cast<T*>(s_body + buf * STAGE_A) + BLOCK_M * LDA; };

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
          const T* ct = safe_c + (t0 + m0) * p.C.stride[1];
          auto load_stage = [&](int buf, int ks) {
            const int k0 = (ks < KA ? ks : ks - KA) * BKN;
            const T* Pt = static_cast<const T*>(ks < KA ? p.states.data : p.states_lo.data) + p_off;
            block::load_tile<NT, BLOCK_M, BKN, LDA>(sRow(buf), ct + k0 * p.C.stride[3], p.C.stride[1], p.C.stride[3],
                                                    vec_c, safe_c, [&](int r, int) { return m0 + r < valid; });
            block::load_tile<NT, P, BKN, LDA>(sK(buf), Pt + k0, p.states.stride[3], 1, vec_p, Pt,
                                              [&](int, int) { return true; });
          };
          detail::dx_n_loop<NT, STAGES, 2 * KA, BKN, LDA, STAGE_A, BLOCK_M, MI, NJ, T>(acc, s_body, wm0, wn0,
                                                                                      load_stage);
        }
        stage_acc();
        auto finish_v = [&](int l, float dot) {  // v_l = e_l · dot_l (l <= λ)
          bool keep = true;
          if (Spec::kSeqIdx) keep = s_seq[l] == q_prev;
          const float e = keep ? __expf(s_dA[l]) : 0.f;
          return __fmul_rn(e, dot);
        };
        if constexpr (Spec::kDyLo) {  // dy's two terms (dy_lo laid out as dy)
          const T* safe_dy_lo = static_cast<const T*>(p.dy_lo) + p.dy.offset(b, 0, h);
          detail::dx_row_dots<P, LDO, BLOCK_M, NT, true>(so, m0, valid, t0, safe_dy, p.dy.stride[1], p.dy.stride[3],
                                                         vec_dy && aligned16(p.dy_lo), v_out, finish_v, safe_dy_lo);
        } else {
          detail::dx_row_dots<P, LDO, BLOCK_M, NT>(so, m0, valid, t0, safe_dy, p.dy.stride[1], p.dy.stride[3], vec_dy,
                                                  v_out, finish_v);
        }
        __syncthreads();  // the staging tile is reused by phase A1's stages

        // ---------------- Phase A1: acc = B_tile · ds_cᵀ (over n), row scale eend, then w ----------------
        zero_acc();
        {  // steps 0 .. KA-1: the hi term's chain over n; KA .. 2KA-1: the lo term's
          const T* bt = safe_b + (t0 + m0) * p.B.stride[1];
          auto load_stage = [&](int buf, int ks) {
            const int k0 = (ks < KA ? ks : ks - KA) * BKN;
            const T* dst = static_cast<const T*>(ks < KA ? p.ds.data : p.ds_lo.data) + ds_off;
            block::load_tile<NT, BLOCK_M, BKN, LDA>(sRow(buf), bt + k0 * p.B.stride[3], p.B.stride[1], p.B.stride[3],
                                                    vec_b, safe_b, [&](int r, int) { return m0 + r < valid; });
            block::load_tile<NT, P, BKN, LDA>(sK(buf), dst + k0, p.ds.stride[3], 1, vec_ds, dst,
                                              [&](int, int) { return true; });
          };
          detail::dx_n_loop<NT, STAGES, 2 * KA, BKN, LDA, STAGE_A, BLOCK_M, MI, NJ, T>(acc, s_body, wm0, wn0,
                                                                                      load_stage);
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
        auto finish_w = [&](int l, float dot) {  // dΔˣst_l = dot, w_l = Δ_l · dot
          ddt_x_out[l] = dot;
          return __fmul_rn(s_dt[l], dot);
        };
        detail::dx_row_dots<P, LDO, BLOCK_M, NT>(so, m0, valid, t0, safe_x, p.x.stride[1], p.x.stride[3], vec_x, w_out,
                                                finish_w);
        for (int r = tid; r < BLOCK_M; r += NT)
          if (m0 + r >= valid) ddt_x_out[m0 + r] = 0.f;  // dx_row_dots wrote w's zeros past λ
        __syncthreads();  // the staging tile is reused by phase B's stages

        // ---------------- Phase B: acc += Wt · dY (contraction over m) ----------------
        {
          const int kb0 = m0 / BLOCK_K;                     // the step containing m0 (m < m0 <= l: zeros)
          const int kb1 = (valid + BLOCK_K - 1) / BLOCK_K;  // steps past λ hold zeros only
          const int nk = kb1 - kb0;
          const T* dyt = safe_dy + t0 * p.dy.stride[1];
          auto sCB = [&](int buf) { return reinterpret_cast<float*>(s_body + buf * STAGE_B); };
          auto sDY = [&](int buf) { return reinterpret_cast<T*>(s_body + buf * STAGE_B + BLOCK_K * LDCB * 4); };
          auto load_stage = [&](int buf, int ks) {  // ks: absolute step index
            const int k0 = ks * BLOCK_K;
            // CB rows m = k0 + r, columns l = m0 + c0 .. +3: only groups with l0 <= m <= λ.
            block::load_tile<NT, BLOCK_K, BLOCK_M, LDCB>(sCB(buf), cb_base + (long long)k0 * p.CB.stride[3] + m0,
                                                         p.CB.stride[3], 1, vec_cb, cb_base, [&](int r, int c0) {
                                                           return m0 + c0 <= k0 + r && k0 + r < valid;
                                                         });
            block::load_tile<NT, BLOCK_K, P, LDY>(sDY(buf), dyt + k0 * p.dy.stride[1], p.dy.stride[1], p.dy.stride[3],
                                                  vec_dy, safe_dy, [&](int r, int) { return k0 + r < valid; });
          };

          // Steps are the column blocks kb0 .. kb0 + nk - 1.
          const block::CpAsyncPipeline<STAGES> ring{nk};
          auto load_block = [&](int buf, int step) { load_stage(buf, kb0 + step); };
          ring.prologue(load_block);
          for (int ks = 0; ks < nk; ++ks) {
            ring.begin(ks, load_block);
            const float* scb = sCB(ks % STAGES);
            const T* sdy = sDY(ks % STAGES);
#pragma unroll
            for (int kk = 0; kk < BLOCK_K; kk += 16) {
              const int mk = kk + 2 * lt;                 // step-local m of columns 2t, 2t+1 (+8, +9)
              const int m01 = (kb0 + ks) * BLOCK_K + mk;  // chunk positions
              const float2 am01 = *reinterpret_cast<const float2*>(s_dA + m01);
              const float2 am89 = *reinterpret_cast<const float2*>(s_dA + m01 + 8);
              FragA a[MI];
#pragma unroll
              for (int i = 0; i < MI; ++i) {
#pragma unroll
                for (int half = 0; half < 2; ++half) {
                  const int r = wm0 + 16 * i + lg + 8 * half;  // row inside the tile
                  const int l = m0 + r;
                  const float al = a_row[i][half];
                  const float* cbc = scb + mk * LDCB + r;  // CB(m01, l): Wt(l, m01) before the decay
                  const float c0 = cbc[0], c1 = cbc[LDCB], c8 = cbc[8 * LDCB], c9 = cbc[9 * LDCB];
                  const float w0 =
                      (l <= m01 && m01 < valid) ? __fmul_rn(c0, __expf(fminf(am01.x - al, 0.f))) : 0.f;
                  const float w1 =
                      (l <= m01 + 1 && m01 + 1 < valid) ? __fmul_rn(c1, __expf(fminf(am01.y - al, 0.f))) : 0.f;
                  const float w8 =
                      (l <= m01 + 8 && m01 + 8 < valid) ? __fmul_rn(c8, __expf(fminf(am89.x - al, 0.f))) : 0.f;
                  const float w9 =
                      (l <= m01 + 9 && m01 + 9 < valid) ? __fmul_rn(c9, __expf(fminf(am89.y - al, 0.f))) : 0.f;
                  a[i].x[half] = ptx::pack2<T>(w0, w1);      // a[0] (row g) / a[1] (row g+8), k = 2t, 2t+1
                  a[i].x[2 + half] = ptx::pack2<T>(w8, w9);  // a[2] / a[3], k = 2t+8, 2t+9
                }
              }
#pragma unroll
              for (int j = 0; j < NJ; j += 2) {
                FragB b0, b1;
                warp::load_b2_trans(b0, b1, sdy + kk * LDY + wn0 + 8 * j, LDY);
#pragma unroll
                for (int i = 0; i < MI; ++i) {
                  warp::mma<T>(acc[i][j], a[i], b0);
                  warp::mma<T>(acc[i][j + 1], a[i], b1);
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
          T* dxg = static_cast<T*>(p.dx.data);
          for (int i = tid; i < TOTAL; i += NT) {
            const int r = i / CPR, cc = (i % CPR) * 8;
            const int l = m0 + r;
            if (l >= valid) continue;
            const long long t = t0 + l;
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
              detail::load8<T>(safe_dy, p.dy.offset(0, t, 0, cc), p.dy.stride[3], vec_dy, dyv);
#pragma unroll
              for (int v = 0; v < 8; ++v) {
                const float d = Spec::kDPerHeaddim ? p.D(h, cc + v) : d_head;
                y[v] = __fmaf_rn(dyv[v], d, y[v]);
              }
            }
            detail::store8<T>(dxg, p.dx.offset(b, t, h, cc),
                              p.dx.stride[3], vec_dx, y);
          }
        }
        __syncthreads();  // the staging tile and the per-position arrays are reused by the next tile
      }
    }
  }
}

}  // namespace ssd_kernels
