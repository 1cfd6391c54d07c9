// chunk_state_passing_fwd on sm_90a: the same computation as chunk_state_passing.cuh (read its header
// for the math and the reduction order), with the K chain on wgmma instead of mma.sync. Included by
// chunk_state_passing.cuh only when NVRTC compiles for sm_90a (__CUDA_ARCH_FEAT_SM90_ALL); the family
// selects it by Spec::kWgmma (src/kernels/chunk_state_passing.cpp: arch sm_90a and headdim, dstate
// multiples of 64).
//
// The same order, term for term:
//   s_c    a separate fp32 accumulator (WgAcc, zeroed with ordinary stores, so its first wgmma adds to
//          +0.0 as the mma.sync chain does), then for l = 0 .. λ_c in increasing 16-wide steps one
//          wgmma m64nNk16 adding rn_T(x_l · w_l)ᵀ B_l (with kTwoTerm: the hi then the lo term, two
//          wgmma on the same accumulator, as detail::chunk_state_step); the A operand is built in
//          registers exactly as the mma.sync kernel builds it (ldmatrix.trans of the x tile, then
//          warp::scale_a_cols / scale_a_cols_two_term with the same w_l), so every product enters
//          with the same bits; whole 16-steps past λ_c are skipped, the tail of the last one is
//          zero-filled, as there.
//   P_c    = S_{c-1} (fp32, or rn_T with SSD_FLAG_STATES_IN_DTYPE through ptx::pack2);
//   S_c    = __fmaf_rn(θ_c · exp(A_c(λ_c)), S_{c-1}, s_c)   (one rounding, as there).
// The bits equal the mma.sync kernel's where one wgmma k16 step accumulates as one mma.m16n8k16 does
// (the GPU test compares the two kernels' P and final states element for element).
//
// Geometry: BLOCK_M / 64 warpgroups per block (128 threads each), each owning a 64 (p) x BLOCK_N (n)
// state tile of one head; warp w of a warpgroup holds p rows 16w..16w+15 of the A operand. The block's
// rows are the group's heads' states stacked (fwd_geom::chunk_state_passing_heads_per_block): with
// BLOCK_M = 128 and headdim 64 the two warpgroups take two heads of one group (headdim 128: the two p
// halves of one head) and share every B stage, so B is read from L2 half as often. Shared memory
// (dynamic, 1024-aligned): a ring of stages, each an x tile [BLOCK_K][64 p] per
// warpgroup (128-byte rows, 128-byte swizzle, read by ldmatrix.trans) and the B tile [BLOCK_K][BLOCK_N]
// as BLOCK_N/64 swizzled column blocks (the MN-major wgmma B operand, desc_mn_major_sw128), then the
// weights of two chunks per warpgroup. The ring (fwd_geom::chunk_state_passing_wgmma_stages: 4 stages of
// 64 positions or 6 of 32) runs over the flattened (chunk, K stage) sequence with 128 positions in
// flight ahead of the stage being multiplied: at the top of step s every thread waits for its copies of
// step s, fences them for the async proxy, waits for its warpgroup's wgmma (kInFlight groups may still
// run), and after the block barrier issues the copies of step s + STAGES - 2 into the buffer of step
// s-2. Each 16 positions are one commit group: the A fragment is built (ldmatrix.trans, scale, round),
// wgmma.fence, wgmma(s), commit. With kInFlight = 1 the previous group still runs while the A fragment
// is built (two A fragments live); with 0 it has finished (one live: the registers sit next to two
// 64 x BLOCK_N fp32 accumulators) and the other warpgroups on the SM keep the tensor cores busy. At a
// chunk's end the P_c stores go out while the last group runs; then wait_group 0 and the fma.
//
// With Spec::kTma (SSD_FLAG_TMA, ChunkStatePassingFwdTmaParams) thread 0 fills each stage with the
// tensor copy engine instead (one 4-D copy per warpgroup's x tile and per 64 columns of B, the same
// swizzled layout, positions past seqlen zero-filled) on the stage's mbarrier, which every thread
// waits on where it waited for its cp.async copies; the barrier that frees step s - 2's buffer stays.
// The same operands, so the same bits.
//
// Launch: block = fwd_geom::chunk_state_passing_wgmma_threads(BLOCK_M); grid = (chunk_state_tiles(P, N,
// chunk_state_passing_head_rows(P, BLOCK_M), BLOCK_N), batch, nheads / chunk_state_passing_heads_per_block(
// P, BLOCK_M)), grid-stride; dynamic shared memory fwd_geom::chunk_state_passing_wgmma_smem_bytes(Q,
// BLOCK_M, BLOCK_N, BLOCK_K).
#pragma once

#include "ssd/chunk_state_weights.cuh"
#include "ssd/forward_params.cuh"
#include "ssd/primitives/dtype.cuh"
#include "ssd/primitives/hopper.cuh"
#include "ssd/primitives/spec.cuh"

namespace ssd_kernels {
namespace detail {

// ROWS x COLS tile of T (COLS a multiple of 64) into 128-byte swizzled column blocks: element (r, c)
// at s + (c / 64) * ROWS * 128 + smem::swizzle128_offset(r, c % 64). Element (r, c) comes from
// g[r * row_stride + c * col_stride]; rows with pred(r) false are zero-filled and not read. With vec
// (16-byte aligned rows, col_stride 1): cp.async 16-byte chunks (complete after cp_async_wait and a
// barrier); otherwise element-wise synchronous copies (visible after the barrier). Threads `thread` =
// 0 .. NTHREADS-1 share the copy.
template <int NTHREADS, int ROWS, int COLS, class T, class Pred>
__device__ __forceinline__ void load_tile_sw128(unsigned char* s, const T* g, long long row_stride,
                                                long long col_stride, bool vec, const T* safe, int thread,
                                                Pred pred) {
  static_assert(sizeof(T) == 2 && COLS % 64 == 0, "16-bit elements, whole 64-column blocks");
  constexpr int CPR = COLS / 8;  // 16-byte chunks per row
  constexpr int TOTAL = ROWS * CPR;
  if (vec) {
    // Each thread keeps one 16-byte column chunk and walks the rows in steps of RSTEP, a multiple of 8:
    // the swizzled chunk stays the same, so the shared offsets are constants from the first row's and
    // the global addresses one base plus a stride (few registers across the K loop).
    constexpr int RSTEP = NTHREADS / CPR;
    static_assert(NTHREADS % CPR == 0 && RSTEP % 8 == 0 && ROWS % RSTEP == 0, "whole row steps of 8 rows");
    const int r0 = thread / CPR, c = (thread % CPR) * 8;
    unsigned char* const dst0 = s + (c >> 6) * (ROWS * 128) + smem::swizzle128_offset(r0, c & 63);
    const T* const src0 = g + (long long)r0 * row_stride + c;
#pragma unroll
    for (int it = 0; it < ROWS / RSTEP; ++it) {
      const int r = r0 + it * RSTEP;
      const bool ok = pred(r);
      ptx::cp_async_16(ptx::smem_addr(dst0 + it * RSTEP * 128), ok ? src0 + (long long)it * RSTEP * row_stride : safe,
                       ok);
    }
  } else {
    for (int i = thread; i < TOTAL; i += NTHREADS) {
      const int r = i / CPR, c0 = (i % CPR) * 8;
      const bool ok = pred(r);
      T* dst = reinterpret_cast<T*>(s + (c0 >> 6) * (ROWS * 128) + smem::swizzle128_offset(r, c0 & 63));
#pragma unroll
      for (int v = 0; v < 8; ++v) dst[v] = ok ? g[(long long)r * row_stride + (long long)(c0 + v) * col_stride]
                                              : from_float<T>(0.f);
    }
  }
}

// Register i of a thread's WgAcc in a row-major (p, n) state of row stride N, as an offset from the
// thread's first element (r_lo, c_lo) = (Acc::row(0), Acc::col(0)) of its tile: the pairs of each four
// registers are 8 rows apart, the groups of four 8 columns apart. The wgmma state passes' initial /
// final states (forward) and dfinal / dinit (backward) use it.
template <int N>
__device__ __forceinline__ long long wg_state_offset(int r_lo, int c_lo, int i) {
  return (long long)r_lo * N + c_lo + ((i >> 1) & 1) * 8 * N + (i >> 2) * 8 + (i & 1);
}

// One 16-position slice kk of a state pass's K chain on wgmma, S += rn_T(x ∘ w)ᵀ B: this lane's A
// fragment of the swizzled x stage `sx` ([BLOCK_K][64 p] of its warpgroup) by ldmatrix.trans at
// (kk + a_row, a_col), scaled by the slice's weights (w_step[kk ..]) as the mma.sync kernels scale
// it (warp::scale_a_cols, or with TWO_TERM the hi and lo terms, hi multiplied first), then one
// wgmma m64nNk16 per term with B the MN-major stage ([BLOCK_K][N]; sb_lo: its descriptor's low word,
// smem::desc_lo_sw128 of its address with LBO BLOCK_K · 128), one commit group. The caller waits for
// earlier groups before calling (the A registers are written here).
// chunk_state_passing_fwd_wgmma and chunk_state_passing_bwd_wgmma (its dy · C chain) share it.
// Split in two for a caller that issues the loads early (state_pass_k16 is the two back to back):
// state_pass_a_load reads the slice's raw A fragment and weights, state_pass_a_mma scales them and
// issues the wgmma.
struct StatePassA {
  FragA a;
  float2 w01, w89;
};
__device__ __forceinline__ StatePassA state_pass_a_load(const unsigned char* sx, const float* w_step, int kk, int lt,
                                                        int a_row, int a_col) {
  const float* w = w_step + kk + 2 * lt;
  StatePassA f;
  f.w01 = *reinterpret_cast<const float2*>(w);
  f.w89 = *reinterpret_cast<const float2*>(w + 8);
  ptx::ldmatrix_x4_trans(f.a.x, ptx::smem_addr(sx + smem::swizzle128_offset(kk + a_row, a_col)));
  return f;
}
template <class T, int BLOCK_K, bool TWO_TERM, int N>
__device__ __forceinline__ void state_pass_a_mma(WgAcc<N>& acc, StatePassA f, unsigned sb_lo, int kk) {
  FragA& a = f.a;
  const float2 w01 = f.w01, w89 = f.w89;
  const unsigned long long desc_b = smem::desc_sw128(sb_lo + kk * 128 / 16);  // desc_mn_major_sw128(sb, BLOCK_K, kk)
  // wgmma.fence between the ordinary writes of the A registers and the wgmma reading them.
  if constexpr (TWO_TERM) {
    FragA lo;
    warp::scale_a_cols_two_term<T>(a, lo, w01, w89);
    warpgroup::fence();
    warpgroup::mma_rs<T, 1>(acc, a, desc_b, true);
    warpgroup::mma_rs<T, 1>(acc, lo, desc_b, true);
  } else {
    warp::scale_a_cols<T>(a, w01, w89);
    warpgroup::fence();
    warpgroup::mma_rs<T, 1>(acc, a, desc_b, true);
  }
  warpgroup::commit_group();
  warpgroup::fence_operand(acc);
}
template <class T, int BLOCK_K, bool TWO_TERM, int N>
__device__ __forceinline__ void state_pass_k16(WgAcc<N>& acc, const unsigned char* sx, unsigned sb_lo,
                                               const float* w_step, int kk, int lt, int a_row, int a_col) {
  state_pass_a_mma<T, BLOCK_K, TWO_TERM>(acc, state_pass_a_load(sx, w_step, kk, lt, a_row, a_col), sb_lo, kk);
}

}  // namespace detail

template <class Spec, class Params>  // Params: ChunkStatePassingFwdTmaParams with kTma, else ChunkStatePassingFwdParams
__device__ void chunk_state_passing_fwd_wgmma(const Params& p) {
  SSD_TILE_SPEC_NAMES(Spec);  // Q, P, N, HEADS_PER_GROUP, BLOCK_M, BLOCK_N, BLOCK_K; T: bf16 or fp16
  using S = typename Spec::State;  // P's type in memory: float, or T (SSD_FLAG_STATES_IN_DTYPE)
  constexpr bool HAS_SEQ_IDX = Spec::kSeqIdx;
  constexpr bool HAS_INIT = Spec::kInitialStates;
  constexpr bool TWO_TERM = Spec::kTwoTerm;
  // The x and B stages by the tensor copy engine (SSD_FLAG_TMA) instead of cp.async.
  constexpr bool kTma = spec_detail::optional_kTma<Spec>(0) != 0;
  using namespace fwd_geom;
  static_assert(chunk_state_passing_wgmma_tile_problem(Q, P, N, HEADS_PER_GROUP, BLOCK_M, BLOCK_N, BLOCK_K) == nullptr,
                "illegal tile: the host's check (src/kernels) refuses it");
  static_assert(same_type<S, float>::value || same_type<S, T>::value, "the state type is fp32 or the element type");
  constexpr int NT = chunk_state_passing_wgmma_threads(BLOCK_M);
  constexpr int WGT = 128;  // threads of one warpgroup
  constexpr int HPB = chunk_state_passing_heads_per_block(P, BLOCK_M);  // heads per block
  constexpr int MT = chunk_state_passing_head_rows(P, BLOCK_M);         // rows of one head per block
  static_assert(HEADS_PER_GROUP % HPB == 0, "a block's heads share one group (one B)");
  constexpr int STAGES = chunk_state_passing_wgmma_stages(BLOCK_K);
  static_assert(STAGES >= 3, "the ring keeps one stage under wgmma while the next is multiplied");
  constexpr int X_BYTES = BLOCK_K * 128;  // one warpgroup's x stage: [BLOCK_K][64 p], one swizzled column block
  constexpr int STAGE_BYTES = chunk_state_passing_wgmma_stage_bytes(BLOCK_M, BLOCK_N, BLOCK_K);  // x per warpgroup, then B
  static_assert(X_BYTES % 1024 == 0 && STAGE_BYTES % 1024 == 0, "stages keep the 1024-byte swizzle alignment");
  constexpr int TILES_N = N / BLOCK_N;
  constexpr int TILES = chunk_state_tiles(P, N, MT, BLOCK_N);
  constexpr int KS = Q / BLOCK_K;  // K stages of a whole chunk
  // wgmma groups (one per 16 positions) left running while the next one's A fragment is built
  // (fwd_geom::chunk_state_passing_wgmma_in_flight: 1 or 0, by registers).
  constexpr int kInFlight = chunk_state_passing_wgmma_in_flight(BLOCK_M, BLOCK_N, BLOCK_K);
  static_assert(kInFlight >= 0 && kInFlight <= BLOCK_K / 16, "the groups in flight at a stage's top are its predecessor's");
  using Acc = WgAcc<BLOCK_N>;

  // The base rounded up to the 1024-byte swizzle atom by an offset into the shared array (so the compiler
  // still knows the weights' loads below are shared-memory loads).
  extern __shared__ unsigned char smem_dynamic[];
  unsigned char* const smem = smem::align1024(smem_dynamic);
  const int tid = threadIdx.x;
  const int wg = tid >> 7, wtid = tid & 127;  // this thread's warpgroup, its index there
  const int warp = wtid >> 5, lane = tid & 31, lt = lane & 3;
  const int row0 = 64 * wg;  // the warpgroup's first row of the block's stacked (head, p) rows
  // Weights per warpgroup: [2][Q], chunk c in half c % 2.
  float* const s_w = reinterpret_cast<float*>(smem + STAGES * STAGE_BYTES) + wg * 2 * Q;
  // P_c's staging tile (fwd_geom::chunk_state_passing_wgmma_out_bytes; 16-bit P with two warpgroups):
  // this warpgroup's 64 rows of BLOCK_N values of S, rows OUT_LD fp32 words apart.
  constexpr bool STAGED_OUT = chunk_state_passing_wgmma_staged_out(BLOCK_M, int(sizeof(S)));
  constexpr int OUT_LD = chunk_state_passing_wgmma_out_ld(BLOCK_N);
  unsigned char* const s_out = smem + STAGES * STAGE_BYTES + (NT / WGT) * 8 * Q + wg * 64 * OUT_LD * 4;
  // With kTma: one full barrier per stage (thread 0's arrive.expect_tx plus the copies' bytes); every
  // thread waits once for each phase, so each keeps the same parity bits (one per stage).
  unsigned long long* const s_bar = reinterpret_cast<unsigned long long*>(
      smem + STAGES * STAGE_BYTES + (NT / WGT) * 8 * Q + chunk_state_passing_wgmma_out_bytes(BLOCK_M, BLOCK_N, int(sizeof(S))));
  static_assert(STAGES <= chunk_state_passing_wgmma_barriers(), "one mbarrier per stage");
  MbarrierParities parity;
  if constexpr (kTma) {
    if (tid == 0) {
#pragma unroll
      for (int i = 0; i < STAGES; ++i) ptx::mbarrier_init(s_bar + i, 1);
      ptx::fence_mbarrier_init();
      ptx::tma_prefetch_map(&p.map_x);
      ptx::tma_prefetch_map(&p.map_b);
    }
    __syncthreads();
  }

  const T* xg = static_cast<const T*>(p.x.data);
  const T* Bg = static_cast<const T*>(p.B.data);
  const bool vec_x = vec16_rows(xg, p.x), vec_b = vec16_rows(Bg, p.B);
  S* const Pg = static_cast<S*>(p.states.data);
  // Pairs of P elements as one 8-byte (fp32) or 4-byte (16-bit) store.
  const bool vec_out = (reinterpret_cast<unsigned long long>(Pg) & (2 * sizeof(S) - 1)) == 0 &&
                       ((p.states.stride[0] | p.states.stride[1] | p.states.stride[2] | p.states.stride[3]) & 1) == 0;
  // P_c's rows as whole 16-byte chunks through the staging tile (16-byte aligned rows, unit n stride).
  constexpr int V16 = 16 / int(sizeof(S));  // elements per 16-byte chunk
  const bool vec16_out = (reinterpret_cast<unsigned long long>(Pg) & 15) == 0 && p.states.stride[3] % V16 == 0 &&
                         ((p.states.stride[0] | p.states.stride[1] | p.states.stride[2]) % V16) == 0;
  const int batch = int(p.batch), nheads = int(p.nheads), nchunks = int(p.nchunks);
  const int valid_last = int(p.seqlen - (long long)(nchunks - 1) * Q);
  const int steps_last = (valid_last + BLOCK_K - 1) / BLOCK_K;
  auto chunk_valid = [&](int c) { return c < nchunks - 1 ? Q : valid_last; };  // λ_c + 1

  // ldmatrix.trans addresses of this lane in an x stage (load_a_trans's lanes on the swizzled rows):
  // stored row k = kk + L%8 + (L/16)*8, column p = 16 w + ((L/8)%2)*8.
  const int a_row = (lane & 7) + ((lane >> 4) << 3), a_col = 16 * warp + ((lane >> 3) & 1) * 8;

  for (int hb = blockIdx.z; hb < nheads / HPB; hb += gridDim.z) {
    const int h = hb * HPB + row0 / P;  // this warpgroup's head (one group for the block)
    const int g = h / HEADS_PER_GROUP;
    for (int b = blockIdx.y; b < batch; b += gridDim.y) {
      const T* safe_x = xg + p.x.offset(b, 0, h);
      const T* safe_b = Bg + p.B.offset(b, 0, g);

      // Weights of chunk c (detail::ChunkStateWeights: chunk_state_fwd's w_l), in two halves: the global
      // loads into registers a chunk ahead (fetch), then w_l into shared memory (put).
      using WeightInputs = detail::ChunkStateWeights<Q, WGT, HAS_SEQ_IDX>;
      auto fetch = [&](int c, WeightInputs& in) { in.fetch(p, b, h, c, chunk_valid(c), wtid); };
      auto put = [&](int c, const WeightInputs& in, float* w_out) { in.put(chunk_valid(c), wtid, w_out); };

      for (int tile = blockIdx.x; tile < TILES; tile += gridDim.x) {
        // This warpgroup's p rows p0 .. p0+63 of head h; the block's n columns n0 .. n0+BLOCK_N-1.
        const int p0 = (tile / TILES_N) * MT + row0 % P, n0 = (tile % TILES_N) * BLOCK_N;
        const T* xt = safe_x + p0 * p.x.stride[3];
        const T* bt = safe_b + n0 * p.B.stride[3];
        // Flattened step s = c * KS + ks (only the last chunk may have fewer than KS steps).
        auto load_stage = [&](int buf, int s) {
          const int c = s / KS, k0 = (s % KS) * BLOCK_K;
          const int valid = chunk_valid(c);
          const long long row = (long long)c * Q + k0;
          unsigned char* stage = smem + buf * STAGE_BYTES;
          if constexpr (kTma) {
            // Each warpgroup's x rows [BLOCK_K][64 p] (its head and p rows), then B's column blocks; positions
            // past seqlen lie outside the maps (zero-filled, as the cp.async predicates do).
            if (tid == 0) {
              unsigned long long* bar = s_bar + buf;
              ptx::mbarrier_arrive_expect_tx(bar, STAGE_BYTES);
#pragma unroll
              for (int w = 0; w < NT / WGT; ++w)
                ptx::tma_load_4d(stage + w * X_BYTES, &p.map_x, bar, (tile / TILES_N) * MT + (64 * w) % P,
                                 hb * HPB + (64 * w) / P, int(row), b);
#pragma unroll
              for (int j = 0; j < BLOCK_N / 64; ++j)
                ptx::tma_load_4d(stage + (NT / WGT) * X_BYTES + j * BLOCK_K * 128, &p.map_b, bar, n0 + 64 * j, g,
                                 int(row), b);
            }
          } else {
            detail::load_tile_sw128<WGT, BLOCK_K, 64>(stage + wg * X_BYTES, xt + row * p.x.stride[1], p.x.stride[1],
                                                      p.x.stride[3], vec_x, safe_x, wtid,
                                                      [&](int r) { return k0 + r < valid; });
            detail::load_tile_sw128<NT, BLOCK_K, BLOCK_N>(stage + (NT / WGT) * X_BYTES, bt + row * p.B.stride[1],
                                                          p.B.stride[1], p.B.stride[3], vec_b, safe_b, tid,
                                                          [&](int r) { return k0 + r < valid; });
          }
        };

        // The running state S and this chunk's s_c, element for element in the same registers.
        Acc run, acc;
        acc.zero();
        // This thread's accumulator elements: rows p0 + r_lo and + 8, columns n0 + c_lo + 8 j (+ 1); every
        // other offset below is a constant (few live registers next to the two 64 x BLOCK_N accumulators).
        const int r_lo = p0 + Acc::row(0), c_lo = n0 + Acc::col(0);
#pragma unroll
        for (int i = 0; i < Acc::kRegs; ++i) {
          run.x[i] = 0.f;
          if (HAS_INIT)
            run.x[i] = p.initial_states.ptr(b, h)[detail::wg_state_offset<N>(r_lo, c_lo, i)];
        }

        WeightInputs next;
        fetch(0, next);
        put(0, next, s_w);  // visible after the first step's barrier
        if (nchunks > 1) fetch(1, next);
        int prev_id = 0;  // seq_idx(cQ - 1), with seq_idx(-1) := 0
        const int steps = (nchunks - 1) * KS + steps_last;
#pragma unroll
        for (int st = 0; st < STAGES - 2; ++st) {
          if (st < steps) load_stage(st, st);
          if constexpr (!kTma) ptx::cp_async_commit();
        }
        int c = 0, ks = 0;
        for (int s = 0; s < steps; ++s) {
          // Step s's copies landed (this thread's), handed to the async proxy (wgmma reads B); at most the
          // last kInFlight groups (step s-1's) still run, so step s-2's buffer (and step s-1's, with
          // kInFlight 0), refilled below once every thread passed the barrier, is free.
          if constexpr (kTma) {
            parity.wait(s_bar, s % STAGES);  // the copy engine's bytes landed
          } else {
            ptx::cp_async_wait<STAGES - 3>();
            ptx::fence_proxy_async_shared();
          }
          warpgroup::wait_group<kInFlight>();
          warpgroup::fence_operand(acc);
          __syncthreads();
          const unsigned char* stage = smem + (s % STAGES) * STAGE_BYTES;
          const unsigned char* sx = stage + wg * X_BYTES;
          const unsigned sb_lo = smem::desc_lo_sw128(ptx::smem_addr(stage + (NT / WGT) * X_BYTES), BLOCK_K * 128);
          const float* w_step = s_w + (c & 1) * Q + ks * BLOCK_K;
          // The step's first A fragment read before the next stage's copies are issued, so its
          // ldmatrix latency passes under them (the same fragment, no more of them live).
          const detail::StatePassA first = detail::state_pass_a_load(sx, w_step, 0, lt, a_row, a_col);
          {
            const int ahead = s + STAGES - 2;
            if (ahead < steps) load_stage(ahead % STAGES, ahead);
            if constexpr (!kTma) ptx::cp_async_commit();
          }
#pragma unroll
          for (int kk = 0; kk < BLOCK_K; kk += 16) {
            // One commit group per 16 positions; while this step's A is built at most kInFlight groups
            // run, so only kInFlight + 1 A fragments are live.
            if (kk > 0) {
              warpgroup::wait_group<kInFlight>();
              warpgroup::fence_operand(acc);
              detail::state_pass_k16<T, BLOCK_K, TWO_TERM>(acc, sx, sb_lo, w_step, kk, lt, a_row, a_col);
            } else {
              detail::state_pass_a_mma<T, BLOCK_K, TWO_TERM>(acc, first, sb_lo, 0);
            }
          }
          if (++ks < (c < nchunks - 1 ? KS : steps_last)) continue;

          // Chunk c+1's weights into the half chunk c-1 used (every thread built its last A fragment of
          // chunk c-1 before this chunk's first barrier; chunk c+1 reads them after its first barrier),
          // and chunk c+2's inputs on their way.
          if (c + 1 < nchunks) {
            put(c + 1, next, s_w + ((c + 1) & 1) * Q);
            if (c + 2 < nchunks) fetch(c + 2, next);
          }
          // Epilogue of chunk c: P_c = S_{c-1} (while the last group runs), then S_c = fma(carry, S_{c-1}, s_c).
          const int last = chunk_valid(c) - 1;  // λ_c
          float carry = expf(p.dA_cumsum.ptr(b, h, c)[last]);
          if (HAS_SEQ_IDX) {
            const int last_id = p.seq_idx(b, (long long)c * Q + last);
            if (last_id != prev_id) carry = 0.f;
            prev_id = last_id;
          }
          if constexpr (STAGED_OUT) {
            // Staged: each thread's pairs into the warpgroup's tile (conflict-free), one barrier, then
            // whole 16-byte chunks of the rows to global memory, 16 threads per 256-byte row segment
            // (vec16_out; else the chunk's elements one by one): a quarter of the store instructions
            // of the pair stores below, full sectors. The same values (the pairs'
            // conversions), only the store path differs. The tile is written again a chunk later,
            // after the K loop's barriers.
            S* const so = reinterpret_cast<S*>(s_out);
            constexpr int LDS = OUT_LD * 4 / int(sizeof(S));  // row stride in S
            const int r_w = Acc::row(0), c_w = Acc::col(0);  // this thread's first element in the warpgroup tile
#pragma unroll
            for (int i = 0; i < Acc::kRegs; i += 2) {
              S* dst = so + (r_w + ((i >> 1) & 1) * 8) * LDS + c_w + (i >> 2) * 8;
              const float* v = run.x + i;
              *reinterpret_cast<unsigned*>(dst) = ptx::pack2<T>(v[0], v[1]);
            }
            __syncthreads();
            constexpr int CPR = BLOCK_N / V16;            // 16-byte chunks per row
            constexpr int ITERS = 64 * CPR / WGT;         // per thread
            static_assert((64 * CPR) % WGT == 0 && WGT % CPR == 0, "whole rows per pass");
            S* const out_tile = Pg + p.states.offset(b, c, h) + (long long)p0 * p.states.stride[3] + n0;
            const int cr = wtid / CPR, cc = (wtid % CPR) * V16;
#pragma unroll
            for (int it = 0; it < ITERS; ++it) {
              const int r = cr + it * (WGT / CPR);
              S* const dst = out_tile + (long long)r * p.states.stride[3] + cc;
              if (vec16_out) {
                *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(so + r * LDS + cc);
              } else {
#pragma unroll
                for (int v = 0; v < V16; ++v) dst[v] = so[r * LDS + cc + v];
              }
            }
          } else {
            S* const out_lo = Pg + p.states.offset(b, c, h) + (long long)r_lo * p.states.stride[3] + c_lo;
            S* const out_hi = out_lo + 8 * p.states.stride[3];
#pragma unroll
            for (int i = 0; i < Acc::kRegs; i += 2) {
              S* dst = (((i >> 1) & 1) ? out_hi : out_lo) + (i >> 2) * 8;
              const float* v = run.x + i;
              if constexpr (same_type<S, float>::value) {
                if (vec_out) {
                  *reinterpret_cast<float2*>(dst) = make_float2(v[0], v[1]);
                } else {
                  dst[0] = v[0];
                  dst[1] = v[1];
                }
              } else {  // the rounding chunk_scan_fwd applies to fp32 P before its mma (ptx::pack2)
                const unsigned pair = ptx::pack2<T>(v[0], v[1]);
                if (vec_out) {
                  *reinterpret_cast<unsigned*>(dst) = pair;
                } else {
                  dst[0] = reinterpret_cast<const T*>(&pair)[0];
                  dst[1] = reinterpret_cast<const T*>(&pair)[1];
                }
              }
            }
          }
          warpgroup::wait_group<0>();
          warpgroup::fence_operand(acc);
#pragma unroll
          for (int i = 0; i < Acc::kRegs; ++i) {
            run.x[i] = __fmaf_rn(carry, run.x[i], acc.x[i]);
            acc.x[i] = 0.f;
          }
          warpgroup::fence_operand(acc);
          ks = 0;
          ++c;
        }
        if constexpr (!kTma) ptx::cp_async_wait<0>();
        warpgroup::wait_group<0>();

        if (p.final_states.data) {
#pragma unroll
          for (int i = 0; i < Acc::kRegs; ++i)
            p.final_states.ptr(b, h)[detail::wg_state_offset<N>(r_lo, c_lo, i)] = run.x[i];
        }
        __syncthreads();  // s_w and the stage buffers are reused by the next tile
      }
    }
  }
}

}  // namespace ssd_kernels
