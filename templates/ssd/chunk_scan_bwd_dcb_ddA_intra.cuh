// chunk_scan_bwd_dcb_ddA_intra: chunk_scan_bwd_dcb (math B-e) and chunk_scan_bwd_ddA_intra (the
// intra term of B-g) in one pass, so that each head's M = dy·xᵀ is formed once (issue 10: "form each
// product once"). Per (batch b, chunk c, group g), heads i = gR .. gR+R-1 (R = HEADS_PER_GROUP),
// positions l, s, k in [0, Q), λ = λ_c; the formulas and orders are those of the two kernels' headers,
// so every output is bitwise theirs:
//
//   M^(i)(l, s) = Σ_p dy^(i)_lp · x^(i)_sp           (one fp32 mma chain over p from 0, as in both)
//   d^(i)(l, s) = (M^(i) · exp(min(A^(i)(l) − A^(i)(s), 0))) · Δ^(i)_s   (detail::bwd_decay_product)
//   dCB(l, s)   = ((+0 + [keep] d^(gR)) + [keep] d^(gR+1)) + ...         (heads increasing, __fadd_rn)
//                 keep = s <= l <= λ && σ(l, s); stored rounded to T, every tile s0 < m0 + BLOCK_M
//   with z (kDyLo) ddA_intra's M continues the same chain over dy_lo: M_z^(i) = M^(i) + Σ_p dy_lo·x
//   (p-steps KP .. 2KP−1); dCB takes M^(i) at the end of dy's pass (as chunk_scan_bwd_dcb, which
//   never sees dy_lo), W and u take M_z^(i) (as chunk_scan_bwd_ddA_intra);
//   W, S, T_r, u, U_r per head as chunk_scan_bwd_ddA_intra.cuh (S in 16-column blocks, the block
//   carry from +0.0 across the column tiles in increasing order; T_r / U_r four 16-row chains per
//   64-row group, added in block order: detail::intra_tile_sums, the same helpers).
//
// Loop order of a block (row block m0, all of the group's heads): column tile s0 = 0, BN, ... outer,
// head i = gR .. inner, p-steps innermost. The row carry of S is per (head, row): the row owner keeps
// it in shared memory (s_carry[R][BLOCK_M]) between its column tiles. The group accumulator of dCB is
// the block's fragments (registers), stored once per column tile after its last head. CB of a column
// tile is read into registers once for all R heads (chunk_scan_bwd_ddA_intra reads it per head).
//
// Pipeline: one flat cp.async loop over step = (tile·R + head)·KPS + kp; each stage carries its
// head's A(l) rows, A(s) and Δ(s) columns (fp32 side buffer), so they are resident exactly at that
// step. Epilogues: at kp = KP − 1 with kDyLo, dCB's update from the registers only; at kp = KPS − 1
// ddA_intra's epilogue (its barriers as in chunk_scan_bwd_ddA_intra, U_IN_STAGE or not) and, without
// kDyLo, dCB's update from the same d. Column tiles with s0 >= min(m0 + BM, λ + 1), and whole row
// blocks past λ, compute nothing and store dCB = +0 (chunk_scan_bwd_dcb's tiles past λ).
//
// Launch: block = bwd_geom::dcb_intra_threads(BLOCK_M, BLOCK_N); grid = (Q / BLOCK_M, batch * nchunks,
//         ngroups), each axis grid-stride (x walked longest row blocks first); static shared memory
//         bwd_geom::dcb_intra_smem_bytes(...) <= 48 KiB.
// Legal tiles: chunk_scan_bwd_ddA_intra's, with the row carries (R · BLOCK_M floats) in the budget.
#pragma once

#include "ssd/backward_params.cuh"
#include "ssd/chunk_scan_bwd_ddA_intra.cuh"  // detail::intra_column_sum, detail::bwd_decay*
#include "ssd/primitives/dtype.cuh"
#include "ssd/primitives/mma.cuh"
#include "ssd/primitives/spec.cuh"

namespace ssd_kernels {

template <class Spec>
__device__ void chunk_scan_bwd_dcb_ddA_intra(const ChunkScanBwdDcbIntraParams& p) {
  SSD_TILE_SPEC_NAMES(Spec);  // Q, P, N, HEADS_PER_GROUP, BLOCK_M, BLOCK_N, BLOCK_K; T: bf16 or fp16
  using namespace bwd_geom;
  constexpr int R = HEADS_PER_GROUP;
  static_assert(dcb_intra_tile_problem(Q, P, R, BLOCK_M, BLOCK_N, BLOCK_K, Spec::kSeqIdx) == nullptr,
                "illegal tile: the host's check (src/kernels) refuses it");
  constexpr int WM = fwd_geom::warp_tile_m(BLOCK_M, BLOCK_N);
  constexpr int WN = fwd_geom::warp_tile_n(BLOCK_M, BLOCK_N);
  constexpr int WARPS_N = BLOCK_N / WN;
  constexpr int NT = dcb_intra_threads(BLOCK_M, BLOCK_N);
  constexpr int BKP = dcb_block_kp(P, BLOCK_K);  // p-step
  constexpr int KP = P / BKP;                     // p-steps per pass over headdim
  constexpr int KPS = Spec::kDyLo ? 2 * KP : KP;  // p-steps per (column tile, head)
  constexpr int STAGES = dcb_intra_stages(Q, P, R, BLOCK_M, BLOCK_N, BLOCK_K, Spec::kSeqIdx);
  constexpr int LD = BKP + kPad;
  constexpr int LDW = intra_w_ld(BLOCK_N);
  constexpr int LDU = intra_u_ld(BLOCK_N);
  constexpr bool U_IN_STAGE = intra_u_in_stage(P, BLOCK_M, BLOCK_N, BLOCK_K);
  constexpr int SIDE = BLOCK_M + 2 * BLOCK_N;  // A rows | A columns | Δ columns of the stage's head
  constexpr int MI = WM / 16, NJ = WN / 8;
  static_assert(WM % 16 == 0 && WN % 16 == 0, "warp tile must be a multiple of 16 x 16");
  static_assert(NT >= BLOCK_M, "one row owner per thread");
  static_assert(sizeof(T) * STAGES * (BLOCK_M + BLOCK_N) * LD + 4 * STAGES * SIDE + 4 * BLOCK_M * LDW +
                        4 * R * BLOCK_M + (Spec::kSeqIdx ? 4 * Q : 0) ==
                    dcb_intra_smem_bytes(Q, P, R, BLOCK_M, BLOCK_N, BLOCK_K, Spec::kSeqIdx),
                "shared layout out of sync with bwd_geom::dcb_intra_smem_bytes");

  __shared__ __align__(16) T s_tiles[STAGES][(BLOCK_M + BLOCK_N) * LD];
  __shared__ __align__(16) float s_side[STAGES][SIDE];
  __shared__ __align__(16) float s_w[BLOCK_M * LDW];
  __shared__ __align__(16) float s_carry[R][BLOCK_M];  // Σ_{s < s0} W(m0 + r, s) of each head
  __shared__ int s_seq[Spec::kSeqIdx ? Q : 1];

  SSD_WARP_TILE_COORDS(WM, WN, WARPS_N);  // tid, warp, lane, wm0, wn0, lg, lt

  const T* xg = static_cast<const T*>(p.x.data);
  const T* dyg = static_cast<const T*>(p.dy.data);
  const bool vec_x = vec16_rows(xg, p.x);
  bool vec_dy = vec16_rows(dyg, p.dy);
  if constexpr (Spec::kDyLo) vec_dy = vec_dy && aligned16(p.dy_lo);
  const bool vec_cb = vec8_floats(p.CB);
  const bool vec_f = aligned16(p.dt) && aligned16(p.dA_cumsum.data) &&
                     ((p.dA_cumsum.stride[0] | p.dA_cumsum.stride[1] | p.dA_cumsum.stride[2]) & 3) == 0;
  const bool vec_out = (reinterpret_cast<unsigned long long>(p.dCB.data) & 3ull) == 0 &&
                       ((p.dCB.stride[0] | p.dCB.stride[1] | p.dCB.stride[2] | p.dCB.stride[3]) & 1) == 0;
  const int batch = int(p.batch), ngroups = int(p.ngroups), nchunks = int(p.nchunks);
  const int nheads = ngroups * R;
  const int nbc = int(p.batch * p.nchunks);

  for (int grp = blockIdx.z; grp < ngroups; grp += gridDim.z) {
    const int h0 = grp * R;
    for (int bc = blockIdx.y; bc < nbc; bc += gridDim.y) {
      SSD_CHUNK_COORDS(bc, batch, Q, p.seqlen);  // b, c, t0, valid: λ_c = valid - 1
      const float* cb_base = p.CB.ptr(b, c, grp);
      T* out = static_cast<T*>(p.dCB.data) + b * p.dCB.stride[0] + c * p.dCB.stride[1] + grp * p.dCB.stride[2];

      for (int tile = blockIdx.x; tile < Q / BLOCK_M; tile += gridDim.x) {
        const int m0 = (Q / BLOCK_M - 1 - tile) * BLOCK_M;  // longest row blocks first
        const int kend = imin(m0 + BLOCK_M, valid);         // columns s < kend can be nonzero (none if m0 >= valid)
        const int live_tiles = kend > 0 ? (kend + BLOCK_N - 1) / BLOCK_N : 0;
        const int all_tiles = imin(Q, m0 + BLOCK_M) / BLOCK_N;  // dCB tiles of this row block (s0 < m0 + BM)

        // dCB tile (columns s0..) of this thread's fragments, rounded to T.
        auto store_dcb = [&](int s0, const FragC(&f)[MI][NJ]) {
          detail::store_dcb_tile<T>(out, p.dCB.stride[3], m0, s0, f, vec_out, wm0, wn0, lg, lt);
        };
        FragC gacc[MI][NJ];  // Σ_i d^(i) of the current column tile, from +0.0
        warp::zero_tile(gacc);
        for (int t = live_tiles; t < all_tiles; ++t) store_dcb(t * BLOCK_N, gacc);  // tiles past λ: +0
        if (live_tiles == 0) continue;  // uniform over the block; no shared memory touched

        for (int i = tid; i < R * BLOCK_M; i += NT) (&s_carry[0][0])[i] = 0.f;
        if (Spec::kSeqIdx)
          for (int l = tid; l < Q; l += NT) s_seq[l] = l < valid ? p.seq_idx(b, t0 + l) : -1;
        // (visible after the loop's first barrier; the previous item's readers finished before its
        // closing barrier)

        constexpr int HEAD_STEPS = R * KPS;
        const int steps = live_tiles * HEAD_STEPS;
        auto load_stage = [&](int buf, int step) {
          const int s0 = (step / HEAD_STEPS) * BLOCK_N;
          const int h = h0 + (step / KPS) % R;
          int kq = step % KPS;
          const T* safe_dys = dyg + p.dy.offset(b, 0, h);
          if constexpr (Spec::kDyLo) {
            if (kq >= KP) {  // dy_lo's pass, laid out as dy
              kq -= KP;
              safe_dys = static_cast<const T*>(p.dy_lo) + p.dy.offset(b, 0, h);
            }
          }
          const T* safe_x = xg + p.x.offset(b, 0, h);
          const long long k0 = (long long)kq * BKP;
          T* sa = s_tiles[buf];
          T* sb = sa + BLOCK_M * LD;
          block::load_tile<NT, BLOCK_M, BKP, LD>(sa, safe_dys + (t0 + m0) * p.dy.stride[1] + k0 * p.dy.stride[3],
                                                 p.dy.stride[1], p.dy.stride[3], vec_dy, safe_dys,
                                                 [&](int r, int) { return m0 + r < valid; });
          block::load_tile<NT, BLOCK_N, BKP, LD>(sb, safe_x + (t0 + s0) * p.x.stride[1] + k0 * p.x.stride[3],
                                                 p.x.stride[1], p.x.stride[3], vec_x, safe_x,
                                                 [&](int r, int) { return s0 + r < valid; });
          // The head's A(l) rows m0.., A(s) and Δ(s) columns s0..: (b, h, nchunks, Q) rows, all Q
          // entries exist (padding values are masked out).
          const long long off = p.dA_cumsum.offset(b, h, c);
          float* sd = s_side[buf];
          auto all = [](int, int) { return true; };
          block::load_tile<NT, 1, BLOCK_M, BLOCK_M>(sd, p.dA_cumsum.data + off + m0, 0, 1, vec_f, p.dA_cumsum.data, all);
          block::load_tile<NT, 1, BLOCK_N, BLOCK_N>(sd + BLOCK_M, p.dA_cumsum.data + off + s0, 0, 1, vec_f,
                                                    p.dA_cumsum.data, all);
          block::load_tile<NT, 1, BLOCK_N, BLOCK_N>(sd + BLOCK_M + BLOCK_N, p.dt + off + s0, 0, 1, vec_f, p.dt, all);
        };

        FragC acc[MI][NJ];  // M of the current (tile, head), from 0
        warp::zero_tile(acc);
        float2 cbv[MI][2][NJ];  // CB(l, s..s+1) of this thread's fragment positions (0 where not read)

        // dCB's update from the current M (acc) at a step whose side buffer is sd.
        auto add_dcb = [&](const float* sd, int s0) {
#pragma unroll
          for (int i = 0; i < MI; ++i) {
#pragma unroll
            for (int half = 0; half < 2; ++half) {
              const int rl = wm0 + 16 * i + lg + 8 * half;
              const int l = m0 + rl;
              const float al = sd[rl];
              const bool row_ok = l < valid;
              const int q = Spec::kSeqIdx ? s_seq[l] : 0;
#pragma unroll
              for (int j = 0; j < NJ; ++j) {
                const int cl = wn0 + 8 * j + 2 * lt;
                const float2 as = *reinterpret_cast<const float2*>(sd + BLOCK_M + cl);
                const float2 ds = *reinterpret_cast<const float2*>(sd + BLOCK_M + BLOCK_N + cl);
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                  bool keep = row_ok && s0 + cl + e <= l;
                  if (Spec::kSeqIdx) keep = keep && q == s_seq[s0 + cl + e];
                  const float d = detail::bwd_decay_product(acc[i][j].x[2 * half + e], al, e ? as.y : as.x,
                                                            e ? ds.y : ds.x);
                  gacc[i][j].x[2 * half + e] = __fadd_rn(gacc[i][j].x[2 * half + e], keep ? d : 0.f);
                }
              }
            }
          }
        };

        const block::CpAsyncPipeline<STAGES> ring{steps};
        ring.prologue(load_stage);
#pragma unroll 1
        for (int step = 0; step < steps; ++step) {
          ring.begin(step, load_stage);  // step visible to all; everyone is done with step - 1
          const int kp = step % KPS;
          const int hr = (step / KPS) % R;  // head inside the group
          const int h = h0 + hr;
          const int s0 = (step / HEAD_STEPS) * BLOCK_N;
          if (hr == 0 && kp == 0) {
            // This column tile's CB entries, once for all heads.
            detail::intra_read_cb(cbv, cb_base, p.CB.stride[3], m0, s0, valid, vec_cb, wm0, wn0, lg, lt);
          }
          const int buf = step % STAGES;
          const T* sa = s_tiles[buf];
          const T* sb = sa + BLOCK_M * LD;
          const float* sd = s_side[buf];
#pragma unroll
          for (int kk = 0; kk < BKP; kk += 16) {
            SSD_WARP_MMA_K16_PAIRS(T, acc, warp::load_a(a[i], sa + (wm0 + 16 * i) * LD + kk, LD),
                                   warp::load_b2(b0, b1, sb + (wn0 + 8 * j) * LD + kk, LD));
          }
          if constexpr (Spec::kDyLo) {
            if (kp == KP - 1) add_dcb(sd, s0);  // dcb's M: dy's pass only
          }
          if (kp != KPS - 1) continue;

          // ---- Epilogue of (column tile s0, head h): chunk_scan_bwd_ddA_intra's, A and Δ from the side buffer ----
          FragC uf[MI][NJ];
#pragma unroll
          for (int i = 0; i < MI; ++i) {
#pragma unroll
            for (int half = 0; half < 2; ++half) {
              const int r = wm0 + 16 * i + FragC::row(lane, half);
              const int l = m0 + r;
              const float al = sd[r];
              const bool row_ok = l < valid;
              const int q = Spec::kSeqIdx ? s_seq[l] : 0;
#pragma unroll
              for (int j = 0; j < NJ; ++j) {
                const int k = wn0 + 8 * j + FragC::col(lane);
                const int s = s0 + k;
                const float2 as = *reinterpret_cast<const float2*>(sd + BLOCK_M + k);
                const float2 ds = *reinterpret_cast<const float2*>(sd + BLOCK_M + BLOCK_N + k);
                float2 to_tile;
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                  const float m = acc[i][j].x[2 * half + e];
                  const float cb = e ? cbv[i][half][j].y : cbv[i][half][j].x;
                  const float a_s = e ? as.y : as.x;
                  const float d = detail::bwd_decay_product(m, al, a_s, e ? ds.y : ds.x);
                  const float u = __fmul_rn(cb, detail::bwd_decay(m, al, a_s));
                  const float w = __fmul_rn(cb, d);
                  if constexpr (!Spec::kDyLo) {
                    bool keep = row_ok && s + e <= l;
                    if (Spec::kSeqIdx) keep = keep && q == s_seq[s + e];
                    gacc[i][j].x[2 * half + e] = __fadd_rn(gacc[i][j].x[2 * half + e], keep ? d : 0.f);
                  }
                  const float u_sel = (row_ok && s + e <= l) ? u : 0.f;
                  const float w_sel = (row_ok && s + e < l) ? w : 0.f;
                  (e ? to_tile.y : to_tile.x) = U_IN_STAGE ? w_sel : u_sel;
                  (U_IN_STAGE ? uf : acc)[i][j].x[2 * half + e] = U_IN_STAGE ? u_sel : w_sel;
                }
                *reinterpret_cast<float2*>(s_w + r * LDW + k) = to_tile;
              }
            }
          }
          // The row carry of (head, row) lives in s_carry between column tiles.
          const long long row_bhc = ((long long)b * nheads + h) * nchunks + c;  // (b, h, c) in the intra layouts
          detail::intra_tile_sums<NT, Q, BLOCK_M, BLOCK_N, LDW, LDU, U_IN_STAGE, Spec::kDeterministic>(
              acc, uf, s_w, reinterpret_cast<float*>(s_tiles[buf]), [&]() -> float& { return s_carry[hr][tid]; }, s0, m0,
              valid, row_bhc, p.intra, p.dtx_intra, wm0, wn0, lane, tid);
          if (hr == R - 1) {  // the column tile's last head: dCB done
            store_dcb(s0, gacc);
            warp::zero_tile(gacc);
          }
        }
        ring.drain();
        __syncthreads();  // shared tiles, side buffers, W, carries and s_seq are reused by the next item
      }
    }
  }
}

}  // namespace ssd_kernels
