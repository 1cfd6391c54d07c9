// chunk_state_passing_bwd (math B-b + B-c fused): per (batch b, head h, tile of the state's (p, n)),
// the entering-state gradients and the reverse pass over chunks, with the running dS in registers:
//
//   dS = dfinal (0 without dfinal_states);  for c = Nc-1 .. 0:
//     dP_c = Σ_{l=0}^{λ_c} w_l · dy[b, cQ+l, h, p] · C[b, cQ+l, g, n]        (chunk_scan_bwd_dstates' dP_c)
//     ds_c = dS, states_t_c = rn_T(P_c) and their second terms               (state_passing_bwd's stores)
//     ρ-part(c, e) = P_c[e] · dS[e]   (fp64, summed per 32 consecutive e)    (state_passing_bwd's slots)
//     dS = fma(θ_c · exp(dA_cumsum_c(λ_c)), dS, dP_c)                        (one rounding, __fmaf_rn)
//   dinit = dS                                                               (when dinit is given)
//   w_l = η_c(l) ? exp(A(l)) : 0,   η_c(l) = [seq_idx(cQ+l) == seq_idx(cQ−1)],  seq_idx(−1) := 0
//   θ_c = [seq_idx(cQ+λ_c) == seq_idx(cQ−1)]
//
// Reduction orders, all those of the staged pair (chunk_state.cuh with kDstates, kTwoTerm and, with
// z, kXLo; state_passing_bwd.cuh), so every output is bitwise theirs for every tile of either path:
// - dP_c: the same step function (detail::chunk_state_step, two-term operand), the same weights
//   (__expf(A(l)) under η: detail::ChunkStateWeights, kDstates), K over l = 0 .. λ_c in increasing
//   16-wide mma steps from 0 in fp32, then with kXLo the same positions again on dy_lo (one term).
//   dP_c never leaves the chip.
// - the recurrence over chunks is sequential (c = Nc−1 .. 0) and no value crosses threads.
// - ρ: the block of e = 32j .. 32j+31 is summed as state_passing_bwd's xor butterfly (offsets 16, 8,
//   4, 2, 1 on lanes holding e = 32j + i): the same pairings, each fp64 add commutative, so the same
//   bits. In the mma fragment of a 32-wide warp tile (n a multiple of 32), element o = 8jj + 2lt + q
//   of a block (fragment column group jj, lane column lt = lane & 3, pair member q) lies in one
//   lane's registers for o ≡ o' mod 8 with the same lt: offsets 16 and 8 are adds inside the thread
//   (jj with jj+2, then jj 0 with 1), 4 and 2 are shuffles (lane xor 2, xor 1), 1 is q 0 with q 1.
//   With dstate 16 a block is the rows 2k, 2k+1 (lanes lg, lg xor 1: offset 16 is a shuffle with
//   lane xor 4), then the same.
//
// Pipeline: chunk_state_passing_fwd's: a cp.async ring over the flattened (chunk, K step) sequence
// in the walk's order (the last chunk first), the next chunk's weights written into the other half
// of s_w during this chunk's last step, their global inputs loaded into registers a chunk ahead.
// The epilogue's own global inputs (P_c, the carry's) are all issued at its top, one round trip
// per chunk, and its bf16/fp16 outputs leave as whole-sector 8-byte stores (detail::store_quad);
// 512-thread tiles (128 registers) keep the per-element loads and 4-byte stores (see BATCHED).
//
// Launch: block = fwd_geom::chunk_state_passing_threads(BLOCK_M, BLOCK_N) threads; grid =
//         (fwd_geom::chunk_state_tiles(P, N, BLOCK_M, BLOCK_N), batch, nheads), each axis grid-stride;
//         static shared memory fwd_geom::chunk_state_passing_smem_bytes(...) <= 48 KiB. Requires
//         nchunks * 2 * (Q / BLOCK_K) < 2^31 (the host checks). Deterministic mode only.
#pragma once

#include "ssd/backward_params.cuh"
#include "ssd/chunk_state.cuh"  // detail::chunk_state_step
#include "ssd/chunk_state_weights.cuh"
#include "ssd/primitives/dtype.cuh"
#include "ssd/primitives/mma.cuh"
#include "ssd/primitives/spec.cuh"

namespace ssd_kernels {
namespace detail {

// Chunk c's epilogue inputs, loaded at the top of its epilogue, all in flight together: the
// compiler may not move a load above the epilogue's stores (it cannot prove them disjoint), so
// loaded next to its use each fragment's P_c was a dependent round trip of its own (16 per chunk
// per thread at 64 × 64). P_c in the accumulator's fragment layout, P[g][j] = elements col, col + 1
// of fragment row group g = 2i + half (row 16i + FragC::row(lane, half)), for G groups (2 · MI, or
// 0: loaded in place, see the kernel's BATCHED); the carry's inputs dA_cumsum_c(λ_c), seq_idx(cQ+λ_c),
// seq_idx(cQ−1).
template <int Q, int N, int G, int NJ, bool HAS_SEQ_IDX>
struct EpilogueInputs {
  float2 P[G > 0 ? G : 1][NJ];
  float dA_last;
  int id_last, id_prev;

  template <class Params>
  __device__ __forceinline__ void fetch(const Params& p, const float* Pc, int b, int h, int c, int last, int row0,
                                        int col0, int lane) {
#pragma unroll
    for (int g = 0; g < G; ++g)
#pragma unroll
      for (int j = 0; j < NJ; ++j) {
        const int row = row0 + 16 * (g / 2) + FragC::row(lane, g % 2);
        const int col = col0 + 8 * j + FragC::col(lane);
        P[g][j] = *reinterpret_cast<const float2*>(Pc + (long long)row * N + col);
      }
    dA_last = p.dA_cumsum.ptr(b, h, c)[last];
    if (HAS_SEQ_IDX) {
      id_last = p.seq_idx(b, (long long)c * Q + last);
      id_prev = c > 0 ? p.seq_idx(b, (long long)c * Q - 1) : 0;
    }
  }

  // θ_c · exp(dA_cumsum_c(λ_c)), the same expressions as state_passing_bwd's.
  __device__ __forceinline__ float carry() const {
    float carry = expf(dA_last);
    if (HAS_SEQ_IDX && id_last != id_prev) carry = 0.f;
    return carry;
  }
};

// Two T values packed as the 4 bytes of one store (the lower address in the low half).
template <class T>
__device__ __forceinline__ unsigned pack_pair(T a, T b) {
  return unsigned(a.bits) | (unsigned(b.bits) << 16);
}

// The pairs of fragment columns j, j+1 of one row, from the 4 lanes lt = 0..3 of a row group, as
// 8-byte stores: lane lt even stores its column pair of j and lane lt+1's (4 elements from
// 8j + 2lt), lane lt odd lane lt−1's pair of j+1 and its own (from 8(j+1) + 2(lt−1)). A warp's
// store is then 8 rows × 32 whole bytes (one sector each), where two 4-byte stores wrote 8 rows
// × 16 bytes twice (half sectors). One shuffle per pair; no value changes. dst + e 8-byte aligned:
// the workspace rows are contiguous and 256-byte aligned, e a multiple of 4.
template <class T>
__device__ __forceinline__ void store_quad(T* row_base, int col_j, unsigned u_j, unsigned u_j1, int lt) {
  const bool odd = lt & 1;
  const unsigned recv = __shfl_xor_sync(0xffffffffu, odd ? u_j : u_j1, 1);
  const unsigned lo = odd ? recv : u_j, hi = odd ? u_j1 : recv;
  // One 64-bit integer store (a uint2 of T* was split into two 4-byte stores).
  *reinterpret_cast<unsigned long long*>(row_base + (odd ? col_j + 8 - 2 : col_j)) =
      (unsigned long long)lo | ((unsigned long long)hi << 32);
}

// Step s of the fused backward pass's flattened walk: the chunks last to first, each PASSES passes
// (dy, then with z dy_lo) of its K stages (the last chunk, first in the walk, has steps_first =
// PASSES · ceil(valid_last / BLOCK_K) steps, every other PASSES · KS). The step's chunk c, its index st
// among the chunk's steps, the chunk's valid positions (λ_c + 1), whether it is dy_lo's pass, and its
// first position k0.
struct BwdWalkStep {
  int c, st, valid, k0;
  bool lo_pass;
};
template <int BLOCK_K, int KS, int PASSES, bool X_LO>
__device__ __forceinline__ BwdWalkStep bwd_walk_step(int s, int nchunks, int steps_first, int valid_last) {
  BwdWalkStep w;
  w.c = nchunks - 1;
  w.st = s;
  if (s >= steps_first) {
    const int r = s - steps_first;
    w.c = nchunks - 2 - r / (PASSES * KS);
    w.st = r % (PASSES * KS);
  }
  w.valid = w.c < nchunks - 1 ? KS * BLOCK_K : valid_last;
  const int ksteps = (w.valid + BLOCK_K - 1) / BLOCK_K;
  w.lo_pass = X_LO && w.st >= ksteps;
  w.k0 = (w.lo_pass ? w.st - ksteps : w.st) * BLOCK_K;
  return w;
}

// Chunk c's epilogue for one fragment row of this thread (state_passing_bwd's steps per element,
// dP_c = acc): `row` its state row (p), NJ fragments of columns col0 + 8 j + FragC::col(lane), the pair
// v = run_at(j) of the running dS (updated to fma(carry, dS, dP_c)), a = acc_at(j) of dP_c and P_c's
// pair p_at(j, e) (e = row · N + col). Stores rn_T(dS), rn_T(P_c) and their second terms (QUAD: 8-byte
// whole-sector stores, detail::store_quad; else 4-byte pairs), and ρ's sums of 32 consecutive e = row · N + col
// (the butterfly of the header; ROW_PAIRS: dstate 16, a block spans rows lg, lg ^ 1). The mma.sync
// kernel calls it per (fragment row i, half); the wgmma kernel (chunk_state_passing_bwd_sm90a.cuh)
// per half of its warp's 16 rows, whose accumulator holds the same pairs (WgAcc: register 4 j + 2 half
// + q is fragment j's x[2 half + q]). The same operations on the same values: the same bits.
template <class T, int N, int NJ, bool ROW_PAIRS, bool QUAD, class RunAt, class AccAt, class PAt>
__device__ __forceinline__ void state_pass_bwd_row(RunAt run_at, AccAt acc_at, PAt p_at, float carry, int row, int col0,
                                                   T* dsc, T* dslc, T* ptc, T* ptlc, double* rho_c, int lane) {
  const int lg = lane >> 2, lt = lane & 3;
  const long long e_row = (long long)row * N;
  // ρ's products: with dstate 16 all of the row's (the block spans two rows), else per
  // block of four fragment columns, its offset-16 sums taken as soon as both terms exist.
  double part[ROW_PAIRS ? NJ : 2][2], s16[2][2];
  unsigned u_ds[2], u_pt[2], u_dsl[2], u_ptl[2];  // the T pairs of fragment columns j−1, j
#pragma unroll
  for (int j = 0; j < NJ; ++j) {
    const int col = col0 + 8 * j + FragC::col(lane);
    const float2 Pv = p_at(j, e_row + col);
    float* v = run_at(j);
    const T ds0 = from_float<T>(v[0]), ds1 = from_float<T>(v[1]);
    const T p0h = from_float<T>(Pv.x), p1h = from_float<T>(Pv.y);
    u_ds[j & 1] = pack_pair<T>(ds0, ds1);
    u_pt[j & 1] = pack_pair<T>(p0h, p1h);
    u_dsl[j & 1] = pack_pair<T>(lo_term<T>(v[0], ds0), lo_term<T>(v[1], ds1));
    u_ptl[j & 1] = pack_pair<T>(lo_term<T>(Pv.x, p0h), lo_term<T>(Pv.y, p1h));
    const double pj[2] = {__dmul_rn(double(Pv.x), double(v[0])),  // exact: 24 + 24 mantissa bits
                          __dmul_rn(double(Pv.y), double(v[1]))};
    const float* a = acc_at(j);
    v[0] = __fmaf_rn(carry, v[0], a[0]);
    v[1] = __fmaf_rn(carry, v[1], a[1]);
    if constexpr (!QUAD) {
      *reinterpret_cast<unsigned*>(dsc + e_row + col) = u_ds[j & 1];
      *reinterpret_cast<unsigned*>(ptc + e_row + col) = u_pt[j & 1];
      *reinterpret_cast<unsigned*>(dslc + e_row + col) = u_dsl[j & 1];
      *reinterpret_cast<unsigned*>(ptlc + e_row + col) = u_ptl[j & 1];
    } else if (j & 1) {  // NJ is even: the pair j−1, j
      store_quad<T>(dsc + e_row, col - 8, u_ds[0], u_ds[1], lt);
      store_quad<T>(ptc + e_row, col - 8, u_pt[0], u_pt[1], lt);
      store_quad<T>(dslc + e_row, col - 8, u_dsl[0], u_dsl[1], lt);
      store_quad<T>(ptlc + e_row, col - 8, u_ptl[0], u_ptl[1], lt);
    }
    // ρ: state_passing_bwd's butterfly per block of 32 consecutive e (see the header).
    if constexpr (ROW_PAIRS) {
      part[j][0] = pj[0];
      part[j][1] = pj[1];
    } else if (j % 4 < 2) {
      part[j % 4][0] = pj[0];
      part[j % 4][1] = pj[1];
    } else {
#pragma unroll
      for (int q = 0; q < 2; ++q) s16[j % 4 - 2][q] = __dadd_rn(part[j % 4 - 2][q], pj[q]);  // offset 16
      if (j % 4 == 3) {
        double t[2];
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          t[q] = __dadd_rn(s16[0][q], s16[1][q]);                                // offset 8
          t[q] = __dadd_rn(t[q], __shfl_xor_sync(0xffffffffu, t[q], 2));         // offset 4
          t[q] = __dadd_rn(t[q], __shfl_xor_sync(0xffffffffu, t[q], 1));         // offset 2
        }
        const double sum = __dadd_rn(t[0], t[1]);                                // offset 1
        const long long e0 = e_row + col0 + 32 * (j / 4);
        if (lt == 0) rho_c[e0 / 32] = sum;
      }
    }
  }
  if constexpr (ROW_PAIRS) {
    double t[2];
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const double u0 = __dadd_rn(part[0][q], __shfl_xor_sync(0xffffffffu, part[0][q], 4));  // offset 16
      const double u1 = __dadd_rn(part[1][q], __shfl_xor_sync(0xffffffffu, part[1][q], 4));
      t[q] = __dadd_rn(u0, u1);                                                  // offset 8
      t[q] = __dadd_rn(t[q], __shfl_xor_sync(0xffffffffu, t[q], 2));             // offset 4
      t[q] = __dadd_rn(t[q], __shfl_xor_sync(0xffffffffu, t[q], 1));             // offset 2
    }
    const double sum = __dadd_rn(t[0], t[1]);                                    // offset 1
    if (lt == 0 && (lg & 1) == 0) rho_c[row / 2] = sum;
  }
}

}  // namespace detail

template <class Spec>
__device__ void chunk_state_passing_bwd_mma(const ChunkStatePassingBwdParams& p) {
  SSD_TILE_SPEC_NAMES(Spec);  // Q, P, N, HEADS_PER_GROUP, BLOCK_M, BLOCK_N, BLOCK_K; T: bf16 or fp16
  constexpr bool HAS_SEQ_IDX = Spec::kSeqIdx;
  constexpr bool X_LO = Spec::kXLo;
  static_assert(bwd_geom::chunk_state_passing_bwd_tile_problem(Q, P, N, BLOCK_M, BLOCK_N, BLOCK_K) == nullptr,
                "illegal tile: the host's check (src/kernels) refuses it");
  using namespace fwd_geom;
  SSD_STATE_PASS_TILE_NAMES();  // WM, WN, WARPS_N, NT, STAGES, LDX (dy tile [k][p]), LDB (C tile [k][n]), MI,
                                // NJ, TILES_N, TILES, KS (K steps of a whole chunk, per pass)
  constexpr int PASSES = X_LO ? 2 : 1;      // dy, then dy_lo
  constexpr bool ROW_PAIRS = WN < 32;       // dstate 16: a ρ block is two rows
  static_assert(ROW_PAIRS ? (N == 16 && NJ == 2) : NJ % 4 == 0, "ρ blocks must lie in one warp's fragments");
  // The epilogue's batched form (P_c's loads all in flight at once, whole-sector 8-byte stores)
  // where the register bound is 255 (65536 / NT with one block per SM); under 128 (512 threads)
  // both spilled, so there P_c is loaded next to its use and stored 4 bytes at a time, as before.
  constexpr bool BATCHED = NT < 512;

  __shared__ __align__(16) T s_x[STAGES][BLOCK_K * LDX];
  __shared__ __align__(16) T s_b[STAGES][BLOCK_K * LDB];
  __shared__ __align__(16) float s_w[2][Q];  // weights of the walk's i-th chunk in s_w[i % 2]

  SSD_WARP_TILE_COORDS(WM, WN, WARPS_N);  // tid, warp, lane, wm0, wn0, lg, lt

  const T* xg = static_cast<const T*>(p.x.data);
  const T* xlg = static_cast<const T*>(p.x_lo);
  const T* Bg = static_cast<const T*>(p.B.data);
  bool vec_x = vec16_rows(xg, p.x);
  if constexpr (X_LO) vec_x = vec_x && aligned16(xlg);  // x_lo: x's strides
  const bool vec_b = vec16_rows(Bg, p.B);
  const int batch = int(p.batch), nheads = int(p.nheads), nchunks = int(p.nchunks);
  const int valid_last = int(p.seqlen - (long long)(nchunks - 1) * Q);
  const int ksteps_last = (valid_last + BLOCK_K - 1) / BLOCK_K;
  auto chunk_valid = [&](int c) { return c < nchunks - 1 ? Q : valid_last; };  // λ_c + 1
  const int steps_first = PASSES * ksteps_last;  // the walk starts at the last chunk
  const int steps = steps_first + (nchunks - 1) * PASSES * KS;
  constexpr long long SLOTS = (long long)P * N / 32;  // ρ slots per (b, h, c)

  for (int h = blockIdx.z; h < nheads; h += gridDim.z) {
    const int g = h / HEADS_PER_GROUP;
    for (int b = blockIdx.y; b < batch; b += gridDim.y) {
      const T* safe_x = xg + p.x.offset(b, 0, h);
      const T* safe_xl = X_LO ? xlg + p.x.offset(b, 0, h) : safe_x;
      const T* safe_b = Bg + p.B.offset(b, 0, g);

      using WeightInputs = detail::ChunkStateWeights<Q, NT, HAS_SEQ_IDX, detail::ChunkWeights::kDstates>;
      auto fetch = [&](int c, WeightInputs& in) { in.fetch(p, b, h, c, chunk_valid(c), tid); };
      auto put = [&](int c, const WeightInputs& in, float* w_out) { in.put(chunk_valid(c), tid, w_out); };

      for (int tile = blockIdx.x; tile < TILES; tile += gridDim.x) {
        const int p0 = (tile / TILES_N) * BLOCK_M, n0 = (tile % TILES_N) * BLOCK_N;
        // Flattened step s of the walk -> (chunk c, pass, K step), as chunk_state_fwd's steps of c.
        auto load_stage = [&](int buf, int s) {
          const detail::BwdWalkStep w = detail::bwd_walk_step<BLOCK_K, KS, PASSES, X_LO>(s, nchunks, steps_first, valid_last);
          const int valid = w.valid, k0 = w.k0;
          const T* safe_xs = w.lo_pass ? safe_xl : safe_x;
          const long long row = (long long)w.c * Q + k0;
          block::load_tile<NT, BLOCK_K, BLOCK_M, LDX>(s_x[buf], safe_xs + row * p.x.stride[1] + p0 * p.x.stride[3],
                                                      p.x.stride[1], p.x.stride[3], vec_x, safe_xs,
                                                      [&](int r, int) { return k0 + r < valid; });
          block::load_tile<NT, BLOCK_K, BLOCK_N, LDB>(s_b[buf], safe_b + row * p.B.stride[1] + n0 * p.B.stride[3],
                                                      p.B.stride[1], p.B.stride[3], vec_b, safe_b,
                                                      [&](int r, int) { return k0 + r < valid; });
        };

        // The running dS and this chunk's dP_c, element for element in the same fragment slots.
        FragC run[MI][NJ], acc[MI][NJ];
        detail::start_state_fragments<N>(run, acc, p.dfinal_states.data, p.dfinal_states, b, h, p0, wm0, n0, wn0, lane);

        WeightInputs next;
        fetch(nchunks - 1, next);
        put(nchunks - 1, next, s_w[0]);  // visible after the first step's barrier
        if (nchunks > 1) fetch(nchunks - 2, next);
        const block::CpAsyncPipeline<STAGES> ring{steps};
        ring.prologue(load_stage);
        int c = nchunks - 1, walk = 0, st = 0;
        int ksteps = ksteps_last;  // of chunk c, per pass
        for (int s = 0; s < steps; ++s) {
          ring.begin(s, load_stage);
          const float* w = s_w[walk & 1];
          if (!X_LO || st < ksteps)
            detail::chunk_state_step<T, BLOCK_K, LDX, LDB, true>(acc, s_x[s % STAGES], s_b[s % STAGES], wm0, wn0,
                                                                 w + st * BLOCK_K, lt);
          else  // dy_lo's pass: the same weights, one term
            detail::chunk_state_step<T, BLOCK_K, LDX, LDB, false>(acc, s_x[s % STAGES], s_b[s % STAGES], wm0, wn0,
                                                                  w + (st - ksteps) * BLOCK_K, lt);
          if (++st < PASSES * ksteps) continue;

          // Chunk c's epilogue inputs first, all in flight together, before the loads and stores below.
          const float* Pc = p.states.ptr(b, c, h);
          detail::EpilogueInputs<Q, N, BATCHED ? 2 * MI : 0, NJ, HAS_SEQ_IDX> ein;
          ein.fetch(p, Pc, b, h, c, chunk_valid(c) - 1, p0 + wm0, n0 + wn0, lane);

          // The next chunk's P_{c-1} (this thread's rows and columns of it, as ein.fetch reads them)
          // into L1 now, a whole chunk of K steps before its epilogue loads them: those loads were a
          // dependent round trip to L2/DRAM per chunk (ncu, session 13: ~13 % of the kernel's stall
          // samples). A hint only; no value depends on it.
          if (BATCHED && c > 0) {  // (512-thread tiles load P_c in place and have no register to spare)
            const float* Pn = p.states.ptr(b, c - 1, h);
#pragma unroll
            for (int g2 = 0; g2 < 2 * MI; ++g2) {
              const float* row = Pn + (long long)(p0 + wm0 + 16 * (g2 / 2) + FragC::row(lane, g2 % 2)) * N + n0 + wn0;
#pragma unroll
              for (int k = 0; k < 8 * NJ; k += 32) ptx::prefetch_global_l1(row + k);
              ptx::prefetch_global_l1(row + 8 * NJ - 1);  // the last line, if the span straddles one
            }
          }

          // The next chunk's weights into the half the previous chunk used, and the one after's
          // inputs on their way (chunk_state_passing_fwd's argument).
          if (c > 0) {
            put(c - 1, next, s_w[(walk + 1) & 1]);
            if (c > 1) fetch(c - 2, next);
          }

          // Epilogue of chunk c: state_passing_bwd's steps per element, dP_c = acc.
          const float carry = ein.carry();
          const long long at = p.ds.offset(b, c, h);
          double* rho_c = p.rho_slots + (((long long)b * nheads + h) * nchunks + c) * SLOTS;
          T* dsc = static_cast<T*>(p.ds.data) + at;
          T* dslc = static_cast<T*>(p.ds_lo) + at;
          T* ptc = static_cast<T*>(p.states_t) + at;
          T* ptlc = static_cast<T*>(p.states_t_lo) + at;
#pragma unroll
          for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int half = 0; half < 2; ++half) {
              const int row = p0 + wm0 + 16 * i + FragC::row(lane, half);
              detail::state_pass_bwd_row<T, N, NJ, ROW_PAIRS, BATCHED>(
                  [&](int j) { return run[i][j].x + 2 * half; },
                  [&](int j) -> const float* { return acc[i][j].x + 2 * half; },
                  [&](int j, long long e) {
                    return BATCHED ? ein.P[2 * i + half][j] : *reinterpret_cast<const float2*>(Pc + e);
                  },
                  carry, row, n0 + wn0, dsc, dslc, ptc, ptlc, rho_c, lane);
            }
#pragma unroll
          for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < NJ; ++j) warp::zero(acc[i][j]);
          st = 0;
          ++walk;
          --c;
          if (c >= 0) ksteps = KS;
        }
        ring.drain();

        if (p.dinit.data) detail::store_state_fragments<N>(run, p.dinit, b, h, p0, wm0, n0, wn0, lane);
        __syncthreads();  // s_w and the stage buffers are reused by the next tile
      }
    }
  }
}

}  // namespace ssd_kernels

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#include "ssd/chunk_state_passing_bwd_sm90a.cuh"  // chunk_state_passing_bwd_wgmma (hopper.cuh: sm_90a only)
#endif

namespace ssd_kernels {

// The entry: on sm_90a the family sets Spec::kWgmma (a pure function of the specialization:
// src/kernels/chunk_state_passing_bwd.cpp) and the wgmma kernel runs; elsewhere the mma.sync one.
template <class Spec, class Params>  // Params: ChunkStatePassingBwdTmaParams with Spec::kTma, else ChunkStatePassingBwdParams
__device__ void chunk_state_passing_bwd(const Params& p) {
  if constexpr (spec_detail::optional_kWgmma<Spec>(0)) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    chunk_state_passing_bwd_wgmma<Spec>(p);
#else
    static_assert(!spec_detail::optional_kWgmma<Spec>(0), "the wgmma chunk_state_passing_bwd needs the sm_90a target");
#endif
  } else {
    chunk_state_passing_bwd_mma<Spec>(p);
  }
}

}  // namespace ssd_kernels
