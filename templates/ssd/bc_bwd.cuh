// chunk_state_bwd_db (IS_DC false) and chunk_scan_bwd_dc (IS_DC true), math B-f: per (batch b,
// chunk c, group g), heads i = g·R .. g·R + R − 1 (R = HEADS_PER_GROUP), rows = chunk positions,
// columns = dstate n, t = cQ + position, λ = λ_c:
//
//   dB[b, cQ+s, g, n] = Σ_i fma(u_i(s), Σ_p x^(i)[s, p] · ds^(i)_c[p, n], ·)  +  Σ_{l=s}^{λ} dCB(l, s) · C[cQ+l, n]
//   dC[b, cQ+l, g, n] = Σ_i fma(e_i(l), Σ_p dy^(i)[l, p] · P^(i)_c[p, n], ·)  +  Σ_{s=0}^{l} dCB(l, s) · B[cQ+s, n]
//
//   u_i(s) = ξ(s) ? exp(min(A_i(Q−1) − A_i(s), 0)) · Δ_i(s) : 0,   ξ(s) = [seq_idx(cQ+s) == seq_idx(cQ+λ)]
//   e_i(l) = η(l) ? exp(A_i(l)) : 0,                              η(l) = [seq_idx(cQ+l) == seq_idx(cQ−1)],
//                                                                  seq_idx(−1) := 0
// (A_i = dA_cumsum, Δ_i = dt of head i; ξ, η are 1 without seq_idx; u, e are 0 past λ; selects, not
// multiplies). Rows past λ (padding) are never stored. "other" of the params is C for dB, B for dC.
//
// Operand precision: x, dy, dCB, B, C and both states are T (ds as state_passing_bwd stores it; P as
// its rn_T copy of the fp32 entering states, upstream's cast); all mma accumulate in fp32; the
// row scales are fp32 (__expf = ex2.approx, like tl.exp; __fmul_rn); one rounding to T at the store.
//
// Reduction order of every output (pos, n), one thread, one fp32 accumulator acc = +0.0:
//   1. heads i = g·R .. g·R+R−1 in increasing order:
//        chain = mma chain over p = 0 .. P−1 in K=16 steps, increasing p, from 0 (a per-head tile);
//        acc   = __fmaf_rn(scale_i(pos), chain, acc)                     (scale = u_i for dB, e_i for dC)
//   2. the dCB term continues the same accumulator as one mma chain in increasing K=16 steps:
//        dB: over l-blocks from m0 (the tile's first row) up to λ;  dC: over s-blocks from 0 up to
//        min(m0 + BLOCK_M, λ + 1) − 1.
//   3. out = rn_T(acc).
// Why it is the same for every legal tile: a head chain is a K=16 chain over p from 0, whatever the
// p step min(BLOCK_K, P) is; the fma sequence over heads is fixed; the dCB K blocks are 16-aligned
// (m0 and BLOCK_K are multiples of 16) and walked in increasing order, and the tile only decides
// how many all-zero blocks join the chain (dB: l-blocks entirely below s, where dCB(l, s) is
// zero-filled; dC: s-blocks entirely above l) — adding exact zeros leaves acc unchanged except
// possibly the sign of a zero result. The block staging (BLOCK_K groupings, stages) only moves data.
//
// Reads: a dCB 16-byte group (l, s0..s0+7) is read only when s0 <= l and l <= λ (it then lies in a
// tile chunk_scan_bwd_dcb wrote; any other entry may be unwritten); x|dy rows and C|B rows past λ
// are zero-filled, never read.
//
// Pipeline: one cp.async ring of STAGES buffers over the flat step sequence (head 0 p-steps, head 1
// p-steps, ..., head R−1 p-steps, then the dCB K steps), so loads run ahead across head and phase
// boundaries. A head's row scales are staged in shared memory (two buffers; head i+1's are written
// while head i runs, separated from their use by at least one pipeline barrier).
//
// Launch: block = bwd_geom::bc_threads(BLOCK_M, BLOCK_N) threads (<= bc_max_threads(); warp grid of
//         fwd_geom::warp_tile_m x warp_tile_n tiles as chunk_state.cuh);
//         grid = (bwd_geom::bc_tiles(Q, N, BLOCK_M, BLOCK_N), batch * nchunks, ngroups), each axis
//         grid-stride; static shared memory bwd_geom::bc_smem_bytes(Q, P, BLOCK_M, BLOCK_N, BLOCK_K,
//         HAS_SEQ_IDX) <= 48 KiB, no dynamic shared memory.
#pragma once

#include "ssd/backward_params.cuh"
#include "ssd/primitives/dtype.cuh"
#include "ssd/primitives/mma.cuh"
#include "ssd/primitives/spec.cuh"
#include "ssd/primitives/tile_stream.cuh"

namespace ssd_kernels {
namespace detail {

// The per-head row scales of a BLOCK_M-row tile (u_i for dB, e_i for dC; the header's formulas, one
// expression for both kernels of the family): thread `tid` owns rows r = tid + rr * NT. q_ref: the
// sequence the rows must belong to (dB: seq_idx(cQ + λ); dC: seq_idx(cQ − 1), 0 for the first chunk);
// kept / init: which rows keep a scale (inside λ, and with seq_idx in q_ref); fetch: head h's dA_cumsum
// (and dt) of those rows into registers; value: a kept row's scale; store: the scales into
// s[0 .. BLOCK_M).
template <bool IS_DC, bool SEQ, int Q, int BLOCK_M, int NT>
struct BcRowScales {
  static constexpr int KR = (BLOCK_M + NT - 1) / NT;  // rows per thread
  bool keep[KR];
  float a[KR], d[KR], last = 0.f;

  static __device__ __forceinline__ int q_ref(const BcBwdParams& p, int b, int c, long long t0, int valid) {
    if (!SEQ) return 0;
    const int* sq = p.seq_idx.data + b * p.seq_idx.stride[0];
    if (IS_DC) return c > 0 ? sq[(t0 - 1) * p.seq_idx.stride[1]] : 0;
    return sq[(t0 + valid - 1) * p.seq_idx.stride[1]];
  }
  static __device__ __forceinline__ bool kept(const BcBwdParams& p, int b, long long t0, int pos, int valid,
                                              int qref) {
    bool k = pos < valid;
    if (SEQ && k) k = p.seq_idx(b, t0 + pos) == qref;
    return k;
  }
  static __device__ __forceinline__ float value(float a, float d, float last) {
    return IS_DC ? __expf(a) : __fmul_rn(__expf(fminf(__fsub_rn(last, a), 0.f)), d);
  }
  __device__ __forceinline__ void init(const BcBwdParams& p, int b, long long t0, int m0, int valid, int qref,
                                       int tid) {
#pragma unroll
    for (int rr = 0; rr < KR; ++rr) {
      const int r = tid + rr * NT;
      keep[rr] = r < BLOCK_M && kept(p, b, t0, m0 + r, valid, qref);
    }
  }
  __device__ __forceinline__ void fetch(const BcBwdParams& p, long long chunk_bc, int head, int m0, int tid) {
    const long long off = chunk_bc + (long long)head * p.dA_cumsum.stride[1];
    const float* dA = p.dA_cumsum.data + off;
    if (!IS_DC) last = dA[Q - 1];
#pragma unroll
    for (int rr = 0; rr < KR; ++rr) {
      a[rr] = 0.f;
      d[rr] = 0.f;
      if (keep[rr]) {
        const int pos = m0 + tid + rr * NT;
        a[rr] = dA[pos];
        if (!IS_DC) d[rr] = p.dt[off + pos];
      }
    }
  }
  __device__ __forceinline__ void store(float* s, int tid) const {
#pragma unroll
    for (int rr = 0; rr < KR; ++rr) {
      const int r = tid + rr * NT;
      if (KR * NT == BLOCK_M || r < BLOCK_M) {
        float v = 0.f;
        if (keep[rr]) v = value(a[rr], d[rr], last);
        s[r] = v;
      }
    }
  }
};

}  // namespace detail

template <class Spec>
__device__ void bc_bwd_mma(const BcBwdParams& p) {
  SSD_TILE_SPEC_NAMES(Spec);  // Q, P, N, HEADS_PER_GROUP, BLOCK_M, BLOCK_N, BLOCK_K; T: bf16 or fp16
  static_assert(bwd_geom::bc_tile_problem(Q, P, N, BLOCK_M, BLOCK_N, BLOCK_K, Spec::kSeqIdx) == nullptr,
                "illegal tile: the host's check (src/kernels) refuses it");
  using namespace bwd_geom;
  static_assert(Q % BLOCK_M == 0 && N % BLOCK_N == 0 && Q % BLOCK_K == 0, "tiles must divide Q, N, Q");
  static_assert(BLOCK_M % 16 == 0 && BLOCK_N % 16 == 0 && BLOCK_K % 16 == 0 && P % 16 == 0,
                "tiles and headdim must be multiples of 16");
  static_assert(HEADS_PER_GROUP >= 1, "HEADS_PER_GROUP >= 1");
  constexpr int R = HEADS_PER_GROUP;
  constexpr int WM = fwd_geom::warp_tile_m(BLOCK_M, BLOCK_N);
  constexpr int WN = fwd_geom::warp_tile_n(BLOCK_M, BLOCK_N);
  constexpr int WARPS_N = BLOCK_N / WN;
  constexpr int NT = bc_threads(BLOCK_M, BLOCK_N);
  constexpr int MI = WM / 16, NJ = WN / 8;
  static_assert(WM % 16 == 0 && WN % 16 == 0, "warp tile must be a multiple of 16 x 16");
  static_assert(MI * NJ * 4 <= 64, "accumulator tile over 64 registers per thread");
  static_assert(NT <= bc_max_threads(), "two live accumulator tiles need <= 256 threads: lower BLOCK_M * BLOCK_N");
  constexpr int BKP = bc_block_kp(P, BLOCK_K);  // p step of the head phase
  static_assert(P % BKP == 0, "BLOCK_K must divide headdim (or exceed it)");
  constexpr int KP = P / BKP;  // p steps per head
  constexpr int KH = R * KP;   // steps of the head phase
  constexpr int STAGES = bc_stages(Q, P, BLOCK_M, BLOCK_N, BLOCK_K, Spec::kSeqIdx);
  constexpr int STAGE = bc_stage_bytes(P, BLOCK_M, BLOCK_N, BLOCK_K);
  constexpr int LDXY = BKP + kPad;      // x|dy tile [pos][p]
  constexpr int LDST = BLOCK_N + kPad;  // ds|P tile [p][n]
  constexpr int LDO = BLOCK_N + kPad;   // C|B tile [pos][n]
  // dCB tile [l][s]: dC: BLOCK_M rows l x BLOCK_K columns s; dB: BLOCK_K rows l x BLOCK_M columns s.
  constexpr int D_ROWS = Spec::kIsDC ? BLOCK_M : BLOCK_K;
  constexpr int LDD = (Spec::kIsDC ? BLOCK_K : BLOCK_M) + kPad;
  constexpr int TILES_N = N / BLOCK_N;
  constexpr int TILES_M = Q / BLOCK_M;
  constexpr int TILES = bc_tiles(Q, N, BLOCK_M, BLOCK_N);
  using Scales = detail::BcRowScales<Spec::kIsDC, Spec::kSeqIdx, Q, BLOCK_M, NT>;
  static_assert(bc_smem_bytes(Q, P, BLOCK_M, BLOCK_N, BLOCK_K, Spec::kSeqIdx) <= kMaxStaticSmem,
                "shared memory over 48 KiB: lower BLOCK_K or the tile");
  static_assert(BLOCK_M * LDXY * 2 + BKP * LDST * 2 <= STAGE && D_ROWS * LDD * 2 + BLOCK_K * LDO * 2 <= STAGE,
                "stage layout exceeds bc_stage_bytes");
  static_assert(STAGE % 16 == 0 && (BLOCK_M * LDXY * 2) % 16 == 0 && (D_ROWS * LDD * 2) % 16 == 0,
                "stage alignment");

  __shared__ __align__(16) unsigned char s_stage[STAGES * STAGE];
  __shared__ __align__(16) float s_scale[2][BLOCK_M];

  SSD_WARP_TILE_COORDS(WM, WN, WARPS_N);  // tid, warp, lane, wm0, wn0, lg, lt
  static_assert(sizeof(T) == 2, "ldmatrix tiles of 16-bit elements");
  static_assert(LDST == LDO, "the state and C|B tiles share the B-fragment lane offset");
  const unsigned s_stage_addr = ptx::smem_addr(s_stage);
  // This lane's ldmatrix byte offsets (warp::*_lane_offset): A of the head phase, A of the dCB
  // phase, B of both phases.
  const unsigned xy_lane = warp::a_lane_offset<T, LDXY>();
  const unsigned d_lane = Spec::kIsDC ? warp::a_lane_offset<T, LDD>() : warp::a_trans_lane_offset<T, LDD>();
  const unsigned b_lane = warp::b2_trans_lane_offset<T, LDST>();

  const T* xyg = static_cast<const T*>(p.xy.data);
  const T* dcbg = static_cast<const T*>(p.dCB.data);
  const T* og = static_cast<const T*>(p.other.data);
  const T* st_t = static_cast<const T*>(p.state.data);  // dB: ds, dC: P (both T)
  const bool vec_xy = vec16_rows(xyg, p.xy);
  const bool vec_st = aligned16(p.state.data) &&
                      ((p.state.stride[0] | p.state.stride[1] | p.state.stride[2] | p.state.stride[3]) & 7) == 0;
  const bool vec_dcb = aligned16(dcbg) && ((p.dCB.stride[0] | p.dCB.stride[1] | p.dCB.stride[2] | p.dCB.stride[3]) & 7) == 0;
  const bool vec_o = aligned16(og) && p.other.stride[3] == 1 &&
                     ((p.other.stride[0] | p.other.stride[1] | p.other.stride[2]) & 7) == 0;
  const bool vec_out = (reinterpret_cast<unsigned long long>(p.out.data) & 3ull) == 0 && p.out.stride[3] == 1 &&
                       ((p.out.stride[0] | p.out.stride[1] | p.out.stride[2]) & 1) == 0;
  // Work indices are 32-bit (batch * nchunks and ngroups < 2^31); offsets are 64-bit.
  const int batch = int(p.batch), ngroups = int(p.ngroups);
  const int nbc = int(p.batch * p.nchunks);

  for (int g = blockIdx.z; g < ngroups; g += gridDim.z) {
    for (int bc = blockIdx.y; bc < nbc; bc += gridDim.y) {
      SSD_CHUNK_COORDS(bc, batch, Q, p.seqlen);  // b, c, t0, valid: λ = valid - 1
      const int q_ref = Scales::q_ref(p, b, c, t0, valid);
      const T* safe_xy = xyg + b * p.xy.stride[0];
      const T* dcb = dcbg + p.dCB.offset(b, c, g);
      const T* safe_o = og + p.other.offset(b, 0, g);
      const long long chunk_bc = p.dA_cumsum.offset(b, 0, c);

      for (int tile = blockIdx.x; tile < TILES; tile += gridDim.x) {
        // Longest dCB chains first: dB rows near the chunk start, dC rows near its end.
        const int mt = Spec::kIsDC ? TILES_M - 1 - tile / TILES_N : tile / TILES_N;
        const int m0 = mt * BLOCK_M, n0 = (tile % TILES_N) * BLOCK_N;
        if (m0 >= valid) continue;  // rows all padding (uniform over the block; no shared memory touched)
        // dCB K steps: dB over l in [m0, valid), dC over s in [0, min(m0 + BLOCK_M, valid)).
        const int kd = Spec::kIsDC ? ((m0 + BLOCK_M < valid ? m0 + BLOCK_M : valid) + BLOCK_K - 1) / BLOCK_K
                             : (valid - m0 + BLOCK_K - 1) / BLOCK_K;
        const int ksteps = KH + kd;
        const T* ot = safe_o + t0 * p.other.stride[1] + n0 * p.other.stride[3];

        // ---- Per-head row scales: this thread owns rows r = tid + rr * NT of the tile. ----
        Scales scales;
        scales.init(p, b, t0, m0, valid, q_ref, tid);

        // ---- Stage buffers (one layout per phase, in the same ring). ----
        auto sXY = [&](int buf) { return reinterpret_cast<T*>(s_stage + buf * STAGE); };
        auto sST = [&](int buf) { return reinterpret_cast<T*>(s_stage + buf * STAGE) + BLOCK_M * LDXY; };
        auto sD = [&](int buf) { return reinterpret_cast<T*>(s_stage + buf * STAGE); };
        auto sO = [&](int buf) { return reinterpret_cast<T*>(s_stage + buf * STAGE) + D_ROWS * LDD; };

        // Tile streams (ssd/primitives/tile_stream.cuh): each thread's chunks are fixed for the
        // tile; steps are loaded in increasing order, each once, so the streams just move on.
        // Head phase: a step moves x|dy and the state by one p block, or to the next head after
        // the head's last one.
        block::TileStream<NT, BLOCK_M, BKP, LDXY, T> xy_in;
        block::TileStream<NT, BKP, BLOCK_N, LDST, T> st_in;
        xy_in.init(xyg + p.xy.offset(b, t0 + m0, g * R, 0), p.xy.stride[1], p.xy.stride[3]);
        st_in.init(st_t + p.state.offset(b, c, g * R, 0) + n0, p.state.stride[3], 1);
        // dCB phase: a step moves both tiles by BLOCK_K positions; d_k0 is the next step's first
        // position (l for dB, s for dC; 16-aligned).
        int d_k0 = Spec::kIsDC ? 0 : m0;
        block::TileStream<NT, D_ROWS, LDD - kPad, LDD, T> d_in;
        block::TileStream<NT, BLOCK_K, BLOCK_N, LDO, T> o_in;
        d_in.init(dcb + (long long)m0 * p.dCB.stride[3] + (Spec::kIsDC ? 0 : m0), p.dCB.stride[3], 1);
        o_in.init(ot + d_k0 * p.other.stride[1], p.other.stride[1], p.other.stride[3]);

        auto head_load = [&](int buf, int k) {
          T* sx = sXY(buf);
          const unsigned sx_addr = s_stage_addr + unsigned(buf * STAGE);
          xy_in.copy(sx, sx_addr, vec_xy, p.xy.stride[3], safe_xy, [&](int r, int) { return m0 + r < valid; });
          st_in.copy(sST(buf), sx_addr + unsigned(BLOCK_M * LDXY * int(sizeof(T))), vec_st, 1, st_t,
                     [](int, int) { return true; });
          if (k % KP == KP - 1) {
            xy_in.advance(p.xy.stride[2] - (KP - 1) * BKP * p.xy.stride[3]);
            st_in.advance(p.state.stride[2] - (KP - 1) * BKP * p.state.stride[3]);
          } else {
            xy_in.advance(BKP * p.xy.stride[3]);
            st_in.advance(BKP * p.state.stride[3]);
          }
        };
        auto dcb_load = [&](int buf) {
          const int k0 = d_k0;
          T* sd = sD(buf);
          const unsigned sd_addr = s_stage_addr + unsigned(buf * STAGE);
          if constexpr (Spec::kIsDC) {
            // rows l = m0 + r, columns s = k0 + cc
            d_in.copy(sd, sd_addr, vec_dcb, 1, dcb, [&](int r, int c0) { return k0 + c0 <= m0 + r && m0 + r < valid; });
            d_in.advance(BLOCK_K);
          } else {
            // rows l = k0 + r, columns s = m0 + cc
            d_in.copy(sd, sd_addr, vec_dcb, 1, dcb, [&](int r, int c0) { return m0 + c0 <= k0 + r && k0 + r < valid; });
            d_in.advance(BLOCK_K * p.dCB.stride[3]);
          }
          o_in.copy(sO(buf), sd_addr + unsigned(D_ROWS * LDD * int(sizeof(T))), vec_o, p.other.stride[3], safe_o,
                    [&](int r, int) { return k0 + r < valid; });
          o_in.advance(BLOCK_K * p.other.stride[1]);
          d_k0 = k0 + BLOCK_K;
        };
        auto load_stage = [&](int buf, int k) {
          if (k < KH) {
            head_load(buf, k);
          } else {
            dcb_load(buf);
          }
        };

        FragC chain[MI][NJ], acc[MI][NJ];
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
          for (int j = 0; j < NJ; ++j) {
            warp::zero(chain[i][j]);
            warp::zero(acc[i][j]);
          }

        scales.fetch(p, chunk_bc, g * R, m0, tid);
        scales.store(s_scale[0], tid);  // visible after the first barrier of the loop

        // cp.async ring, STAGES buffers: step k lives in buffer k % STAGES.
        const block::CpAsyncPipeline<STAGES> ring{ksteps};
        ring.prologue(load_stage);
        // Start of step k: wait for its data, barrier, issue step k + STAGES - 1.
        auto step_begin = [&](int k) {
          ring.begin(k, load_stage);  // step k visible to all; everyone is done with step k - 1 (and its buffer)
        };

        // ---- Head phase: per head, chain = xy · state over p; acc = fma(scale, chain, acc) ----
        for (int hi = 0; hi < R; ++hi) {
#pragma unroll
          for (int pk = 0; pk < KP; ++pk) {
            const int k = hi * KP + pk;
            step_begin(k);
            // Head hi+1's scales go to buffer (hi+1)&1 now: head hi-1 read it before this step's
            // barrier, head hi+1 reads it at its last step, after at least one more barrier.
            const bool next_scale = pk == 0 && hi + 1 < R;
            if (next_scale) scales.fetch(p, chunk_bc, g * R + hi + 1, m0, tid);
            const unsigned sx_addr = s_stage_addr + unsigned((k % STAGES) * STAGE);
            const unsigned ss_addr = sx_addr + unsigned(BLOCK_M * LDXY * int(sizeof(T))) + b_lane;
#pragma unroll
            for (int kk = 0; kk < BKP; kk += 16) {
              // B fragments one pair at a time (register pressure).
              SSD_WARP_MMA_K16_PAIRS(T, chain, warp::load_a_at(a[i], sx_addr + xy_lane + 2u * ((wm0 + 16 * i) * LDXY + kk)),
                                     warp::load_b2_trans_at(b0, b1, ss_addr + 2u * (kk * LDST + wn0 + 8 * j)));
            }
            if (next_scale) scales.store(s_scale[(hi + 1) & 1], tid);
          }
          // acc = fma(scale_hi(pos), chain, acc); the next head's chain starts from 0.
          const float* scl = s_scale[hi & 1];
#pragma unroll
          for (int i = 0; i < MI; ++i) {
#pragma unroll
            for (int half = 0; half < 2; ++half) {
              const float sc = scl[wm0 + 16 * i + lg + 8 * half];
#pragma unroll
              for (int j = 0; j < NJ; ++j) {
                acc[i][j].x[2 * half] = __fmaf_rn(sc, chain[i][j].x[2 * half], acc[i][j].x[2 * half]);
                acc[i][j].x[2 * half + 1] = __fmaf_rn(sc, chain[i][j].x[2 * half + 1], acc[i][j].x[2 * half + 1]);
                chain[i][j].x[2 * half] = 0.f;
                chain[i][j].x[2 * half + 1] = 0.f;
              }
            }
          }
        }

        // ---- dCB phase: acc += dCB-operand · (C | B), K steps in increasing position ----
        for (int k = KH; k < ksteps; ++k) {
          step_begin(k);
          const unsigned sd_addr = s_stage_addr + unsigned((k % STAGES) * STAGE) + d_lane;
          const unsigned so_addr = s_stage_addr + unsigned((k % STAGES) * STAGE + D_ROWS * LDD * int(sizeof(T))) + b_lane;
#pragma unroll
          for (int kk = 0; kk < BLOCK_K; kk += 16) {
            // A: dCB as [l][s] row-major (dC), or transposed, [l][s] = [k][m] (dB: dCBᵀ). B
            // fragments one pair at a time (register pressure).
            SSD_WARP_MMA_K16_PAIRS(T, acc,
                                   if constexpr (Spec::kIsDC) warp::load_a_at(a[i], sd_addr + 2u * ((wm0 + 16 * i) * LDD + kk));
                                   else warp::load_a_trans_at(a[i], sd_addr + 2u * (kk * LDD + wm0 + 16 * i)),
                                   warp::load_b2_trans_at(b0, b1, so_addr + 2u * (kk * LDO + wn0 + 8 * j)));
          }
        }
        ring.drain();

        // ---- Store rows pos <= λ, rounded to T (pairs of columns per 32-bit store when aligned). ----
        T* out = p.out.ptr_as<T>(b, 0, g);
#pragma unroll
        for (int i = 0; i < MI; ++i) {
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int pos = m0 + wm0 + 16 * i + lg + 8 * half;
            if (pos < valid) {
              T* orow = out + (t0 + pos) * p.out.stride[1];
#pragma unroll
              for (int j = 0; j < NJ; ++j) {
                const int col = n0 + wn0 + 8 * j + 2 * lt;
                const float v0 = acc[i][j].x[2 * half], v1 = acc[i][j].x[2 * half + 1];
                if (vec_out) {
                  *reinterpret_cast<unsigned*>(orow + col) = ptx::pack2<T>(v0, v1);
                } else {
                  orow[col * p.out.stride[3]] = from_float<T>(v0);
                  orow[(col + 1) * p.out.stride[3]] = from_float<T>(v1);
                }
              }
            }
          }
        }
        __syncthreads();  // the stage ring and the scale buffers are reused by the next tile
      }
    }
  }
}

}  // namespace ssd_kernels

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#include "ssd/bc_bwd_sm90a.cuh"  // bc_bwd_wgmma (hopper.cuh: sm_90a only)
#endif

namespace ssd_kernels {

// The entry: on sm_90a the families set Spec::kWgmma (a pure function of the specialization:
// src/kernels/bc_bwd.cpp) and the wgmma kernel runs; elsewhere the mma.sync one.
template <class Spec>
__device__ void bc_bwd(const BcBwdParams& p) {
  if constexpr (spec_detail::optional_kWgmma<Spec>(0)) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    bc_bwd_wgmma<Spec>(p);
#else
    static_assert(!spec_detail::optional_kWgmma<Spec>(0), "the wgmma bc_bwd needs the sm_90a target");
#endif
  } else {
    bc_bwd_mma<Spec>(p);
  }
}

}  // namespace ssd_kernels
