// chunk_scan_bwd_dcb (math B-e): per (batch b, chunk c, group g), heads i = gR .. gR+R-1
// (R = HEADS_PER_GROUP), positions l, s in [0, Q), λ = λ_c:
//
//   M^(i)(l, s) = Σ_p dy[b, cQ+l, i, p] · x[b, cQ+s, i, p]                       (mma chain over p)
//   d^(i)(l, s) = (s <= l && l <= λ && σ(l, s)) ? (M^(i) · exp(min(A^(i)(l) − A^(i)(s), 0))) · Δ^(i)_s : 0
//   dCB(l, s)   = ((+0 + d^(gR)) + d^(gR+1)) + ... + d^(gR+R-1)                   (stored rounded to T)
//
// A^(i) = dA_cumsum, Δ^(i) = dt of head i for this (b, c); σ(l, s) = [seq_idx(cQ+l) == seq_idx(cQ+s)]
// (true without seq_idx). Every mask is a select (masked entries are +0, never multiplied); d is
// formed with __fmul_rn / __expf exactly as chunk_scan_bwd_ddA_intra forms it (the shared helper
// below), so the two kernels see the same bits of d.
//
// Reduction order per output (l, s): for each head i in increasing order, a fresh fp32 chain
// M^(i) = 0 + mma.m16n8k16 steps over p = 0, 16, 32, ... (P walked in min(BLOCK_K, P) stages, each
// a chain of 16-wide mma in increasing p); then d^(i) is formed in fp32 and added to the group
// accumulator (starting at +0.0) with __fadd_rn. Both chains are the same for every legal
// (BLOCK_M, BLOCK_N, BLOCK_K) and warp split: tiles only decide who computes an element.
//
// Tiles: the Q x Q square is cut into BLOCK_M x BLOCK_N tiles enumerated as bmm_chunk_fwd (tile
// (i, j) exists iff j·BLOCK_N <= i·BLOCK_M + BLOCK_M - 1). A tile is written in full (entries with
// s > l or on padding rows/columns are +0); tiles strictly above the diagonal are never written.
// Tiles with no valid (l, s) (first row or first column past λ) skip the contraction and store +0.
//
// Pipeline: one flat cp.async loop over step = head·KP + kp (KP = P / min(BLOCK_K, P)) with
// STAGES buffers, prefetching across head boundaries. The head's A(l), A(s), Δ(s) travel with
// the head's LAST p-step (fp32 side buffer of that stage), so they are resident exactly when the
// head's epilogue (at that step) reads them and are recycled with the stage: no extra barriers.
//
// Launch: block = bwd_geom::dcb_threads(BLOCK_M, BLOCK_N) threads (warp grid of bmm_chunk_fwd);
//         grid  = (bwd_geom::dcb_tiles(Q, BLOCK_M, BLOCK_N), batch * nchunks, ngroups), each axis
//         grid-stride; static shared memory bwd_geom::dcb_smem_bytes(Q, P, BLOCK_M, BLOCK_N,
//         BLOCK_K, HAS_SEQ_IDX) <= 48 KiB, no dynamic shared memory.
// Legal tiles: BLOCK_M, BLOCK_N in {16, 32, 64, 128} dividing Q; BLOCK_K in {16, 32, 64} with
//   min(BLOCK_K, P) dividing P; shared memory within 48 KiB.
#pragma once

#include "ssd/backward_params.cuh"
#include "ssd/primitives/dtype.cuh"
#include "ssd/primitives/mma.cuh"
#include "ssd/primitives/spec.cuh"
#include "ssd/primitives/tile_stream.cuh"

namespace ssd_kernels {

namespace detail {

// (M · exp(min(A(l) − A(s), 0))) · Δ(s), every operation rounded on its own (no contraction).
// The one definition of d used by chunk_scan_bwd_dcb and chunk_scan_bwd_ddA_intra.
__device__ __forceinline__ float bwd_decay(float m, float a_l, float a_s) {
  return __fmul_rn(m, __expf(fminf(__fsub_rn(a_l, a_s), 0.f)));
}
__device__ __forceinline__ float bwd_decay_product(float m, float a_l, float a_s, float dt_s) {
  return __fmul_rn(bwd_decay(m, a_l, a_s), dt_s);
}


// A block's dCB tile (rows m0.., columns n0..) from this thread's fp32 fragments, rounded to T: pairs
// of columns, 4 bytes (vec) or two element stores; each quad of lanes writes 16 contiguous bytes of a
// row. `out` is the (b, c, g) slab, row_stride its l-stride.
template <class T, int MI, int NJ>
__device__ __forceinline__ void store_dcb_tile(T* out, long long row_stride, int m0, int n0, const FragC (&f)[MI][NJ],
                                               bool vec, int wm0, int wn0, int lg, int lt) {
#pragma unroll
  for (int i = 0; i < MI; ++i) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int rl = wm0 + 16 * i + lg + 8 * half;
      T* orow = out + (long long)(m0 + rl) * row_stride + n0;
#pragma unroll
      for (int j = 0; j < NJ; ++j) {
        const int cl = wn0 + 8 * j + 2 * lt;
        const float v0 = f[i][j].x[2 * half], v1 = f[i][j].x[2 * half + 1];
        if (vec) {
          *reinterpret_cast<unsigned*>(orow + cl) = ptx::pack2<T>(v0, v1);
        } else {
          orow[cl] = from_float<T>(v0);
          orow[cl + 1] = from_float<T>(v1);
        }
      }
    }
  }
}

}  // namespace detail

template <class Spec>
__device__ void chunk_scan_bwd_dcb(const ChunkScanBwdDcbParams& p) {
  SSD_TILE_SPEC_NAMES(Spec);  // Q, P, N, HEADS_PER_GROUP, BLOCK_M, BLOCK_N, BLOCK_K; T: bf16 or fp16
  static_assert(bwd_geom::dcb_tile_problem(Q, P, BLOCK_M, BLOCK_N, BLOCK_K, Spec::kSeqIdx) == nullptr,
                "illegal tile: the host's check (src/kernels) refuses it");
  using namespace bwd_geom;
  static_assert(HEADS_PER_GROUP >= 1, "HEADS_PER_GROUP >= 1");
  static_assert(Q % BLOCK_M == 0 && Q % BLOCK_N == 0, "tiles must divide the chunk");
  static_assert(BLOCK_M % 16 == 0 && BLOCK_N % 16 == 0 && BLOCK_M <= 128 && BLOCK_N <= 128,
                "BLOCK_M, BLOCK_N in 16, 32, 64, 128");
  static_assert(BLOCK_K % 16 == 0 && P % 16 == 0, "BLOCK_K and headdim must be multiples of 16");
  constexpr int WM = fwd_geom::warp_tile_m(BLOCK_M, BLOCK_N);
  constexpr int WN = fwd_geom::warp_tile_n(BLOCK_M, BLOCK_N);
  constexpr int WARPS_N = BLOCK_N / WN;
  constexpr int NT = dcb_threads(BLOCK_M, BLOCK_N);
  constexpr int BKP = dcb_block_kp(P, BLOCK_K);  // p-step
  constexpr int KP = P / BKP;                     // p-steps per head
  constexpr int STEPS = HEADS_PER_GROUP * KP;
  constexpr int STAGES = dcb_stages(Q, P, BLOCK_M, BLOCK_N, BLOCK_K, Spec::kSeqIdx);
  constexpr int LD = BKP + kPad;  // dy tile [l][p] and x tile [s][p], type T
  constexpr int MI = WM / 16, NJ = WN / 8;
  constexpr int TILES = dcb_tiles(Q, BLOCK_M, BLOCK_N);
  constexpr int SIDE = BLOCK_M + 2 * BLOCK_N;  // A rows | A columns | Δ columns, fp32
  static_assert(P % BKP == 0, "min(BLOCK_K, headdim) must divide headdim");
  static_assert(WM % 16 == 0 && WN % 16 == 0, "warp tile must be a multiple of 16 x 16");
  static_assert(2 * MI * NJ * 4 <= 128, "two fp32 warp tiles (head + group) over 128 registers per thread");
  static_assert(dcb_smem_bytes(Q, P, BLOCK_M, BLOCK_N, BLOCK_K, Spec::kSeqIdx) <= kMaxStaticSmem,
                "shared memory over 48 KiB: lower BLOCK_K or the tile");
  static_assert(sizeof(T) * STAGES * (BLOCK_M + BLOCK_N) * LD + 4 * STAGES * SIDE +
                        (Spec::kSeqIdx ? 4 * (BLOCK_M + BLOCK_N) : 0) ==
                    dcb_smem_bytes(Q, P, BLOCK_M, BLOCK_N, BLOCK_K, Spec::kSeqIdx),
                "shared layout out of sync with bwd_geom::dcb_smem_bytes");

  __shared__ __align__(16) T s_tiles[STAGES][(BLOCK_M + BLOCK_N) * LD];
  __shared__ __align__(16) float s_side[STAGES][SIDE];
  __shared__ int s_seq[Spec::kSeqIdx ? BLOCK_M + BLOCK_N : 1];

  SSD_WARP_TILE_COORDS(WM, WN, WARPS_N);  // tid, warp, lane, wm0, wn0, lg, lt
  const unsigned s_tiles_addr = ptx::smem_addr(&s_tiles[0][0]);
  const unsigned s_side_addr = ptx::smem_addr(&s_side[0][0]);
  static_assert(sizeof(T) == 2, "ldmatrix tiles of 16-bit elements");
  const unsigned a_lane = warp::a_lane_offset<T, LD>(), b_lane = warp::b2_lane_offset<T, LD>();

  const T* xg = static_cast<const T*>(p.x.data);
  const T* dyg = static_cast<const T*>(p.dy.data);
  const bool vec_x = vec16_rows(xg, p.x);
  const bool vec_dy = vec16_rows(dyg, p.dy);
  // A, Δ rows are unit-stride; tile offsets m0, n0 are multiples of 16 floats.
  const bool vec_f = aligned16(p.dt) && aligned16(p.dA_cumsum.data) &&
                     ((p.dA_cumsum.stride[0] | p.dA_cumsum.stride[1] | p.dA_cumsum.stride[2]) & 3) == 0;
  const bool vec_out = (reinterpret_cast<unsigned long long>(p.dCB.data) & 3ull) == 0 &&
                       ((p.dCB.stride[0] | p.dCB.stride[1] | p.dCB.stride[2] | p.dCB.stride[3]) & 1) == 0;
  // Work indices are 32-bit (batch * nchunks and nheads < 2^31); offsets are 64-bit.
  const int batch = int(p.batch), ngroups = int(p.ngroups);
  const int nbc = int(p.batch * p.nchunks);

  for (int grp = blockIdx.z; grp < ngroups; grp += gridDim.z) {
    const int h0 = grp * HEADS_PER_GROUP;
    for (int bc = blockIdx.y; bc < nbc; bc += gridDim.y) {
      SSD_CHUNK_COORDS(bc, batch, Q, p.seqlen);  // b, c, t0, valid: λ_c = valid - 1
      const T* safe_x = xg + b * p.x.stride[0];
      const T* safe_dy = dyg + b * p.dy.stride[0];
      const long long chunk_off = p.dA_cumsum.offset(b, 0, c);
      // Sum spelled out: through ptr() the compiler orders the adds differently (same address, other cubin).
      T* out = static_cast<T*>(p.dCB.data) + b * p.dCB.stride[0] + c * p.dCB.stride[1] + grp * p.dCB.stride[2];

      for (int tile = blockIdx.x; tile < TILES; tile += gridDim.x) {
        SSD_LOWER_TRIANGLE_TILE(tile, Q, BLOCK_M, BLOCK_N);  // mi, ni
        const int m0 = mi * BLOCK_M, n0 = ni * BLOCK_N;
        // Some (l, s) with s <= l <= λ in the tile iff m0 <= λ and n0 <= λ (n0 <= m0 + BM - 1 always).
        const bool live = m0 < valid && n0 < valid;  // uniform over the block

        FragC gacc[MI][NJ];  // group accumulator: Σ_i d^(i), from +0.0
        warp::zero_tile(gacc);

        if (live) {
          // Visible after the first barrier of the loop below.
          if (Spec::kSeqIdx) SSD_STAGE_TILE_SEQ_IDS(s_seq, p.seq_idx, b, t0, m0, n0, valid);

          // Tile streams (ssd/primitives/tile_stream.cuh): each thread's chunks are fixed for the
          // tile; a step moves the source by one p block, or to the next head after the last one.
          block::TileStream<NT, BLOCK_M, BKP, LD, T> dy_in;
          block::TileStream<NT, BLOCK_N, BKP, LD, T> x_in;
          dy_in.init(safe_dy + (t0 + m0) * p.dy.stride[1] + h0 * p.dy.stride[2], p.dy.stride[1], p.dy.stride[3]);
          x_in.init(safe_x + (t0 + n0) * p.x.stride[1] + h0 * p.x.stride[2], p.x.stride[1], p.x.stride[3]);
          // The head's A rows, A columns and Δ columns: (b, h, nchunks, Q) intermediates, unit
          // stride along Q; all Q entries exist, padding values are masked out.
          block::TileStream<NT, 1, BLOCK_M, BLOCK_M, float> a_rows_in;
          block::TileStream<NT, 1, BLOCK_N, BLOCK_N, float> a_cols_in, dt_cols_in;
          {
            const long long off = chunk_off + h0 * p.dA_cumsum.stride[1];
            a_rows_in.init(p.dA_cumsum.data + off + m0, 0, 1);
            a_cols_in.init(p.dA_cumsum.data + off + n0, 0, 1);
            dt_cols_in.init(p.dt + off + n0, 0, 1);
          }
          // Stage `step` = (head h0 + step / KP, p-step step % KP) into buffer buf; steps are
          // loaded in increasing order, each once, so the streams just move on.
          auto load_stage = [&](int buf, int step) {
            const int kp = step % KP;
            T* sa = s_tiles[buf];
            T* sb = sa + BLOCK_M * LD;
            const unsigned sa_addr = s_tiles_addr + unsigned(buf * int(sizeof(s_tiles[0])));
            dy_in.copy(sa, sa_addr, vec_dy, p.dy.stride[3], safe_dy, [&](int r, int) { return m0 + r < valid; });
            x_in.copy(sb, sa_addr + unsigned(BLOCK_M * LD * int(sizeof(T))), vec_x, p.x.stride[3], safe_x,
                      [&](int r, int) { return n0 + r < valid; });
            if (kp == KP - 1) {  // the head's epilogue runs on this stage: bring its A, Δ along
              dy_in.advance(p.dy.stride[2] - (KP - 1) * BKP * p.dy.stride[3]);
              x_in.advance(p.x.stride[2] - (KP - 1) * BKP * p.x.stride[3]);
              float* sd = s_side[buf];
              const unsigned sd_addr = s_side_addr + unsigned(buf * int(sizeof(s_side[0])));
              auto all = [](int, int) { return true; };
              a_rows_in.copy(sd, sd_addr, vec_f, 1, p.dA_cumsum.data, all);
              a_cols_in.copy(sd + BLOCK_M, sd_addr + 4u * BLOCK_M, vec_f, 1, p.dA_cumsum.data, all);
              dt_cols_in.copy(sd + BLOCK_M + BLOCK_N, sd_addr + 4u * (BLOCK_M + BLOCK_N), vec_f, 1, p.dt, all);
              const long long head_step = p.dA_cumsum.stride[1];
              a_rows_in.advance(head_step);
              a_cols_in.advance(head_step);
              dt_cols_in.advance(head_step);
            } else {
              dy_in.advance(BKP * p.dy.stride[3]);
              x_in.advance(BKP * p.x.stride[3]);
            }
          };

          FragC hacc[MI][NJ];  // M^(i) of the current head, from 0
          warp::zero_tile(hacc);

          // cp.async pipeline, STAGES buffers: step s lives in buffer s % STAGES.
          const block::CpAsyncPipeline<STAGES> ring{STEPS};
          ring.prologue(load_stage);
#pragma unroll 1
          for (int step = 0; step < STEPS; ++step) {
            ring.begin(step, load_stage);  // step visible to all; everyone is done with step - 1 (and its side buffer)
            const int buf = step % STAGES;
            // This lane's ldmatrix addresses in the stage (32-bit shared window).
            const unsigned sa_addr = s_tiles_addr + unsigned(buf * int(sizeof(s_tiles[0]))) + a_lane;
            const unsigned sb_addr = s_tiles_addr + unsigned(buf * int(sizeof(s_tiles[0]))) + b_lane;
#pragma unroll
            for (int kk = 0; kk < BKP; kk += 16) {
              // B fragments one pair at a time (register pressure).
              SSD_WARP_MMA_K16_PAIRS(T, hacc, warp::load_a_at(a[i], sa_addr + 2u * ((wm0 + 16 * i) * LD + kk)),
                                     warp::load_b2_at(b0, b1, sb_addr + 2u * ((BLOCK_M + wn0 + 8 * j) * LD + kk)));
            }
            if (step % KP == KP - 1) {
              // Head epilogue: gacc += d^(i) (select, then one rounded add), and restart M from 0.
              // The column values A(s), Δ(s) are read once per step (not per row), and d is formed
              // for every entry before the select: straight-line code, the same operations on the
              // kept entries (a masked entry's d is discarded, never added).
              const float* sd = s_side[buf];
              float2 a_s[NJ], dt_s[NJ];
#pragma unroll
              for (int j = 0; j < NJ; ++j) {
                const int cl = wn0 + 8 * j + 2 * lt;  // columns cl, cl + 1 inside the tile
                a_s[j] = *reinterpret_cast<const float2*>(sd + BLOCK_M + cl);
                dt_s[j] = *reinterpret_cast<const float2*>(sd + BLOCK_M + BLOCK_N + cl);
              }
#pragma unroll
              for (int i = 0; i < MI; ++i) {
#pragma unroll
                for (int half = 0; half < 2; ++half) {
                  const int rl = wm0 + 16 * i + lg + 8 * half;  // row inside the tile
                  const int l = m0 + rl;
                  const float al = sd[rl];
                  const bool row_ok = l < valid;
                  const int q = Spec::kSeqIdx ? s_seq[rl] : 0;
#pragma unroll
                  for (int j = 0; j < NJ; ++j) {
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                      const int cl = wn0 + 8 * j + 2 * lt + e;  // column inside the tile
                      bool keep = row_ok && n0 + cl <= l;
                      if (Spec::kSeqIdx) keep = keep && q == s_seq[BLOCK_M + cl];
                      float& m = hacc[i][j].x[2 * half + e];
                      const float d_all = detail::bwd_decay_product(m, al, e ? a_s[j].y : a_s[j].x,
                                                                    e ? dt_s[j].y : dt_s[j].x);
                      const float d = keep ? d_all : 0.f;
                      gacc[i][j].x[2 * half + e] = __fadd_rn(gacc[i][j].x[2 * half + e], d);
                      m = 0.f;
                    }
                  }
                }
              }
            }
          }
          ring.drain();
        }

        detail::store_dcb_tile<T>(out, p.dCB.stride[3], m0, n0, gacc, vec_out, wm0, wn0, lg, lt);  // the whole tile
        __syncthreads();  // shared tiles, side buffers and s_seq are reused by the next tile
      }
    }
  }
}

}  // namespace ssd_kernels
