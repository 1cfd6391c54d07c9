// chunk_state_passing_bwd on sm_90a: the same computation as chunk_state_passing_bwd.cuh (read its
// header for the math and every reduction order), with dP_c's K chain on wgmma instead of mma.sync.
// Included by chunk_state_passing_bwd.cuh only when NVRTC compiles for sm_90a
// (__CUDA_ARCH_FEAT_SM90_ALL); the family selects it by Spec::kWgmma (src/kernels/
// chunk_state_passing_bwd.cpp: arch sm_90a, headdim and dstate multiples of 64, chunks of at least 128
// positions counting z's second pass: bwd_geom::chunk_state_passing_bwd_wgmma_walk).
//
// The same order, term for term:
//   dP_c   a separate fp32 accumulator (WgAcc, zeroed with ordinary stores, so its first wgmma adds to
//          +0.0 as the mma.sync chain does); for l = 0 .. λ_c in increasing 16-wide steps one wgmma
//          m64nNk16 per term adding rn_T(dy_l · w_l)ᵀ C_l, hi then lo (the two-term operand of
//          detail::chunk_state_step<.., true>), then with kXLo the same positions again on dy_lo, one
//          term; the A operand is built exactly as the mma.sync kernel builds it (ldmatrix.trans of the
//          dy tile, warp::scale_a_cols_two_term / scale_a_cols with the same w_l: detail::state_pass_k16,
//          shared with chunk_state_passing_fwd_wgmma); whole 16-steps past λ_c are skipped, the tail of
//          the last one is zero-filled, as there;
//   epilogue detail::state_pass_bwd_row, the mma.sync kernel's own: ds_c = rn_T(dS), states_t_c =
//          rn_T(P_c) and their second terms, ρ's fp64 butterfly per 32 consecutive e, then
//          dS = __fmaf_rn(θ_c · exp(A_c(λ_c)), dS, dP_c).
// The bits equal the mma.sync kernel's where one wgmma k16 step accumulates as one mma.m16n8k16 does
// (the GPU test "ssd_backward on sm_90a" compares every gradient and the workspace with an sm_90 run).
//
// Geometry (chunk_state_passing_fwd_wgmma's): BLOCK_M / 64 warpgroups per block, each a 64 (p) x
// BLOCK_N (n) tile of one head's state (BLOCK_M = 128 with headdim 64: two heads of one group that
// share every C stage); warp w of a warpgroup holds p rows 16 w .. 16 w + 15, i.e. the mma.sync
// kernel's fragments of a 16 x BLOCK_N warp tile (MI = 1, NJ = BLOCK_N / 8). Shared memory (dynamic,
// 1024-aligned): a ring of stages, each a dy tile [BLOCK_K][64 p] per warpgroup (128-byte swizzle, read
// by ldmatrix.trans) and the C tile [BLOCK_K][BLOCK_N] as BLOCK_N / 64 swizzled column blocks (the
// MN-major wgmma B operand), then the weights of two chunks per warpgroup, then P_c's buffer.
// The ring runs over the walk's flattened (chunk, pass, K stage) sequence, last chunk first, 128
// positions ahead of the stage being multiplied (chunk_state_passing_fwd_wgmma's protocol: at the top
// of step s every thread waits for its copies of step s, fences them for the async proxy, waits for
// its warpgroup's wgmma but the last kInFlight groups, and after the block barrier refills step s-2's
// buffer). P_c comes into shared memory by cp.async at its chunk's first step (loaded from global
// memory next to their use its pairs were a dependent round trip each: the first version, 1.32 ms
// against the mma.sync kernel's 1.105). At a chunk's end the
// carry's inputs and the next chunk's weights are issued while the last wgmma group runs; then
// wait_group 0 and the epilogue, whose outputs leave as whole-sector 8-byte stores (detail::store_quad).
// With Spec::kTma (SSD_FLAG_TMA, ChunkStatePassingBwdTmaParams) thread 0 fills each stage's dy (or
// dy_lo) and C tiles with the tensor copy engine instead (chunk_state_passing_fwd_wgmma's copies: one
// 4-D copy per warpgroup's dy tile and per 64 columns of C, the same swizzled layout, positions past
// seqlen zero-filled) on the stage's mbarrier, which every thread waits on next to its cp.async wait;
// P_c keeps its cp.async copies and groups (its padded rows are not a TMA box). The same operands, so
// the same bits.
//
// Launch: block = fwd_geom::chunk_state_passing_wgmma_threads(BLOCK_M); grid = (chunk_state_tiles(P, N,
// chunk_state_passing_head_rows(P, BLOCK_M), BLOCK_N), batch, nheads / chunk_state_passing_heads_per_block(
// P, BLOCK_M)), grid-stride; dynamic shared memory bwd_geom::chunk_state_passing_bwd_wgmma_smem_bytes.
#pragma once

#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "ssd/chunk_state_passing_bwd_sm90a.cuh needs the sm_90a target (wgmma)"
#endif

#include "ssd/backward_params.cuh"
#include "ssd/chunk_state_passing_bwd.cuh"   // detail::EpilogueInputs, state_pass_bwd_row
#include "ssd/chunk_state_passing_sm90a.cuh"  // detail::load_tile_sw128, state_pass_k16
#include "ssd/chunk_state_weights.cuh"
#include "ssd/primitives/hopper.cuh"

namespace ssd_kernels {

template <class Spec, class Params>  // Params: ChunkStatePassingBwdTmaParams with kTma, else ChunkStatePassingBwdParams
__device__ void chunk_state_passing_bwd_wgmma(const Params& p) {
  SSD_TILE_SPEC_NAMES(Spec);  // Q, P, N, HEADS_PER_GROUP, BLOCK_M, BLOCK_N, BLOCK_K; T: bf16 or fp16
  constexpr bool HAS_SEQ_IDX = Spec::kSeqIdx;
  constexpr bool X_LO = Spec::kXLo;
  // The dy and C stages by the tensor copy engine (SSD_FLAG_TMA) instead of cp.async.
  constexpr bool kTma = spec_detail::optional_kTma<Spec>(0) != 0;
  using namespace fwd_geom;
  static_assert(bwd_geom::chunk_state_passing_bwd_wgmma_tile_problem(Q, P, N, HEADS_PER_GROUP, BLOCK_M, BLOCK_N,
                                                                     BLOCK_K) == nullptr,
                "illegal tile: the host's check (src/kernels) refuses it");
  constexpr int NT = chunk_state_passing_wgmma_threads(BLOCK_M);
  constexpr int WGT = 128;  // threads of one warpgroup
  constexpr int HPB = chunk_state_passing_heads_per_block(P, BLOCK_M);  // heads per block
  constexpr int MT = chunk_state_passing_head_rows(P, BLOCK_M);         // rows of one head per block
  static_assert(HEADS_PER_GROUP % HPB == 0, "a block's heads share one group (one C)");
  constexpr int STAGES = chunk_state_passing_wgmma_stages(BLOCK_K);
  static_assert(STAGES >= 3, "the ring keeps one stage under wgmma while the next is multiplied");
  constexpr int X_BYTES = BLOCK_K * 128;  // one warpgroup's dy stage: [BLOCK_K][64 p], one swizzled column block
  constexpr int STAGE_BYTES = chunk_state_passing_wgmma_stage_bytes(BLOCK_M, BLOCK_N, BLOCK_K);
  static_assert(X_BYTES % 1024 == 0 && STAGE_BYTES % 1024 == 0, "stages keep the 1024-byte swizzle alignment");
  constexpr int TILES_N = N / BLOCK_N;
  constexpr int TILES = chunk_state_tiles(P, N, MT, BLOCK_N);
  constexpr int KS = Q / BLOCK_K;        // K stages of a whole chunk, per pass
  constexpr int PASSES = X_LO ? 2 : 1;  // dy, then dy_lo
  static_assert(bwd_geom::chunk_state_passing_bwd_wgmma_walk(Q, PASSES),
                "the family keeps mma.sync for chunks of fewer than 128 positions counting passes");
  // wgmma groups left running while the next A fragment is built (bwd_geom: the forward's choice, and
  // 1 for 64 x 64 x 64).
  constexpr int kInFlight = bwd_geom::chunk_state_passing_bwd_wgmma_in_flight(BLOCK_M, BLOCK_N, BLOCK_K);
  static_assert(kInFlight >= 0 && kInFlight <= BLOCK_K / 16, "the groups in flight at a stage's top are its predecessor's");
  constexpr int NJ = BLOCK_N / 8;                 // fragments of a warp's 16 rows
  static_assert(NJ % 4 == 0, "ρ's blocks of 32 columns lie in one warp's fragments");
  constexpr long long SLOTS = (long long)P * N / 32;  // ρ slots per (b, h, c)
  using Acc = WgAcc<BLOCK_N>;

  extern __shared__ unsigned char smem_dynamic[];
  unsigned char* const smem = smem::align1024(smem_dynamic);
  const int tid = threadIdx.x;
  const int wg = tid >> 7, wtid = tid & 127;  // this thread's warpgroup, its index there
  const int warp = wtid >> 5, lane = tid & 31, lt = lane & 3;
  const int row0 = 64 * wg;  // the warpgroup's first row of the block's stacked (head, p) rows
  float* const s_w = reinterpret_cast<float*>(smem + STAGES * STAGE_BYTES) + wg * 2 * Q;  // [2][Q] per warpgroup
  // P_c of this warpgroup's 64 x BLOCK_N tile, one buffer, rows LDP fp32 apart: a warp's float2 reads of
  // 8 rows x 4 lanes cover each 128-byte bank window once.
  constexpr int LDP = bwd_geom::chunk_state_passing_bwd_wgmma_p_ld(BLOCK_N);
  constexpr int P_TILE = 64 * LDP;  // floats per warpgroup
  float* const s_p = reinterpret_cast<float*>(smem + STAGES * STAGE_BYTES + (NT / WGT) * 8 * Q) + wg * P_TILE;
  // With kTma: one full barrier per stage after P_c's buffer (thread 0's arrive.expect_tx plus the
  // copies' bytes); every thread waits once for each phase, so each keeps the same parity bits.
  unsigned long long* const s_bar = reinterpret_cast<unsigned long long*>(
      smem + STAGES * STAGE_BYTES + (NT / WGT) * 8 * Q + bwd_geom::chunk_state_passing_bwd_wgmma_p_bytes(BLOCK_M, BLOCK_N));
  static_assert(STAGES <= chunk_state_passing_wgmma_barriers(), "one mbarrier per stage");
  MbarrierParities parity;
  // The barriers' set-up and the stage copies below are the forward state pass's lines, kept as
  // their own in both kernels: through shared helpers (tried in session 27) the forward's PTX
  // changed and its 128 x 64 x 32 TMA tile went from 128 to 136 registers (one block per SM
  // instead of two).
  if constexpr (kTma) {
    if (tid == 0) {
#pragma unroll
      for (int i = 0; i < STAGES; ++i) ptx::mbarrier_init(s_bar + i, 1);
      ptx::fence_mbarrier_init();
      ptx::tma_prefetch_map(&p.map_x);
      if constexpr (X_LO) ptx::tma_prefetch_map(&p.map_xl);
      ptx::tma_prefetch_map(&p.map_b);
    }
    __syncthreads();
  }

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

  // ldmatrix.trans addresses of this lane in a dy stage (load_a_trans's lanes on the swizzled rows).
  const int a_row = (lane & 7) + ((lane >> 4) << 3), a_col = 16 * warp + ((lane >> 3) & 1) * 8;

  for (int hb = blockIdx.z; hb < nheads / HPB; hb += gridDim.z) {
    const int h = hb * HPB + row0 / P;  // this warpgroup's head (one group for the block)
    const int g = h / HEADS_PER_GROUP;
    for (int b = blockIdx.y; b < batch; b += gridDim.y) {
      const T* safe_x = xg + p.x.offset(b, 0, h);
      const T* safe_xl = X_LO ? xlg + p.x.offset(b, 0, h) : safe_x;
      const T* safe_b = Bg + p.B.offset(b, 0, g);

      using WeightInputs = detail::ChunkStateWeights<Q, WGT, HAS_SEQ_IDX, detail::ChunkWeights::kDstates>;
      auto fetch = [&](int c, WeightInputs& in) { in.fetch(p, b, h, c, chunk_valid(c), wtid); };
      auto put = [&](int c, const WeightInputs& in, float* w_out) { in.put(chunk_valid(c), wtid, w_out); };

      for (int tile = blockIdx.x; tile < TILES; tile += gridDim.x) {
        // This warpgroup's p rows p0 .. p0+63 of head h; the block's n columns n0 .. n0+BLOCK_N-1.
        const int p0 = (tile / TILES_N) * MT + row0 % P, n0 = (tile % TILES_N) * BLOCK_N;
        // Flattened step s of the walk -> (chunk c, pass, K step), as the mma.sync kernel's.
        auto load_stage = [&](int buf, int s) {
          const detail::BwdWalkStep w = detail::bwd_walk_step<BLOCK_K, KS, PASSES, X_LO>(s, nchunks, steps_first, valid_last);
          const int c = w.c, valid = w.valid, k0 = w.k0;
          const T* safe_xs = w.lo_pass ? safe_xl : safe_x;
          const long long row = (long long)c * Q + k0;
          unsigned char* stage = smem + buf * STAGE_BYTES;
          if constexpr (kTma) {
            // Each warpgroup's dy rows [BLOCK_K][64 p] (its head and p rows), then C's column blocks
            // (the forward state pass's copies, on dy_lo's map in the second pass).
            if (tid == 0) {
              unsigned long long* bar = s_bar + buf;
              const TensorMap* map_x = X_LO && w.lo_pass ? &p.map_xl : &p.map_x;
              ptx::mbarrier_arrive_expect_tx(bar, STAGE_BYTES);
#pragma unroll
              for (int v = 0; v < NT / WGT; ++v)
                ptx::tma_load_4d(stage + v * X_BYTES, map_x, bar, (tile / TILES_N) * MT + (64 * v) % P,
                                 hb * HPB + (64 * v) / P, int(row), b);
#pragma unroll
              for (int j = 0; j < BLOCK_N / 64; ++j)
                ptx::tma_load_4d(stage + (NT / WGT) * X_BYTES + j * BLOCK_K * 128, &p.map_b, bar, n0 + 64 * j, g,
                                 int(row), b);
            }
          } else {
            detail::load_tile_sw128<WGT, BLOCK_K, 64>(stage + wg * X_BYTES,
                                                      safe_xs + row * p.x.stride[1] + p0 * p.x.stride[3],
                                                      p.x.stride[1], p.x.stride[3], vec_x, safe_xs, wtid,
                                                      [&](int r) { return k0 + r < valid; });
            detail::load_tile_sw128<NT, BLOCK_K, BLOCK_N>(stage + (NT / WGT) * X_BYTES,
                                                          safe_b + row * p.B.stride[1] + n0 * p.B.stride[3],
                                                          p.B.stride[1], p.B.stride[3], vec_b, safe_b, tid,
                                                          [&](int r) { return k0 + r < valid; });
          }
        };
        // Chunk c's P_c (this warpgroup's tile; rows of N fp32, 16-byte aligned: n0 is a multiple of 64)
        // into the buffer, at the chunk's first step after its barrier (the previous chunk's readers are
        // past it), in that step's cp.async group: complete at the top of step first + STAGES - 2 (the
        // wait there leaves STAGES - 3 groups pending), visible after that step's barrier. Each thread one
        // 16-byte column chunk, rows RSTEP apart; the row step made opaque so the copies' addresses are
        // formed here, not held across the K loop as invariants (ptxas spilled with them).
        auto load_p = [&](int c) {
          constexpr int CPR = BLOCK_N / 4;  // 16-byte chunks per row
          constexpr int RSTEP = WGT / CPR;
          static_assert(WGT % CPR == 0 && 64 % RSTEP == 0, "whole rows per pass");
          const int r0 = wtid / CPR, c4 = 4 * (wtid % CPR);
          const unsigned dst = ptx::smem_addr(s_p + r0 * LDP + c4);
          const float* src = p.states.ptr(b, c, h) + (long long)(p0 + r0) * N + n0 + c4;
          long long step = (long long)RSTEP * N;
          asm volatile("" : "+l"(step));
#pragma unroll
          for (int it = 0; it < 64 / RSTEP; ++it) {
            ptx::cp_async_16(dst + it * RSTEP * LDP * 4, src, true);
            src += step;
          }
        };

        // The running dS and this chunk's dP_c, element for element in the same registers.
        Acc run, acc;
        acc.zero();
        const int r_lo = p0 + Acc::row(0), c_lo = n0 + Acc::col(0);  // this thread's first element
#pragma unroll
        for (int i = 0; i < Acc::kRegs; ++i) {
          run.x[i] = 0.f;
          if (p.dfinal_states.data)
            run.x[i] = p.dfinal_states.ptr(b, h)[detail::wg_state_offset<N>(r_lo, c_lo, i)];
        }

        WeightInputs next;
        fetch(nchunks - 1, next);
        put(nchunks - 1, next, s_w);  // visible after the first step's barrier
        if (nchunks > 1) fetch(nchunks - 2, next);
        // The forward wgmma state pass's ring, the same protocol (kept as its own lines there: through
        // a shared helper the forward's 64-row tiles took 172 registers instead of 168, a block less
        // per SM).
#pragma unroll
        for (int st = 0; st < STAGES - 2; ++st) {
          if (st < steps) load_stage(st, st);
          ptx::cp_async_commit();
        }
        int c = nchunks - 1, walk = 0, st = 0;
        int ksteps = ksteps_last;  // of chunk c, per pass
        constexpr int P_READY = STAGES - 2;  // the chunk's first step whose barrier makes P_c visible
        for (int s = 0; s < steps; ++s) {
          // Step s's copies landed (this thread's, and with kTma the copy engine's bytes on the
          // stage's barrier), handed to the async proxy; at most the last kInFlight groups (step
          // s-1's) still run, so step s-2's buffer, refilled below once every thread passed the
          // barrier, is free. (With kTma the cp.async groups hold only P_c's copies.)
          ptx::cp_async_wait<STAGES - 3>();
          if constexpr (kTma) parity.wait(s_bar, s % STAGES);
          ptx::fence_proxy_async_shared();
          warpgroup::wait_group<kInFlight>();
          warpgroup::fence_operand(acc);
          __syncthreads();
          {
            const int ahead = s + STAGES - 2;
            if (ahead < steps) load_stage(ahead % STAGES, ahead);
            if (st == 0) load_p(c);
            ptx::cp_async_commit();
          }
          const unsigned char* stage = smem + (s % STAGES) * STAGE_BYTES;
          const unsigned char* sx = stage + wg * X_BYTES;
          const unsigned sb_lo = smem::desc_lo_sw128(ptx::smem_addr(stage + (NT / WGT) * X_BYTES), BLOCK_K * 128);
          const bool lo_pass = X_LO && st >= ksteps;
          const float* w_step = s_w + (walk & 1) * Q + (lo_pass ? st - ksteps : st) * BLOCK_K;
          if (!lo_pass) {
#pragma unroll
            for (int kk = 0; kk < BLOCK_K; kk += 16) {
              if (kk > 0) {
                warpgroup::wait_group<kInFlight>();
                warpgroup::fence_operand(acc);
              }
              detail::state_pass_k16<T, BLOCK_K, true>(acc, sx, sb_lo, w_step, kk, lt, a_row, a_col);
            }
          } else {
            // dy_lo's pass: the same weights, one term, no group in flight while its A fragment is
            // built (with one, ptxas serialized the fp16 kernel's wgmma: C7513).
#pragma unroll
            for (int kk = 0; kk < BLOCK_K; kk += 16) {
              warpgroup::wait_group<0>();
              warpgroup::fence_operand(acc);
              detail::state_pass_k16<T, BLOCK_K, false>(acc, sx, sb_lo, w_step, kk, lt, a_row, a_col);
            }
          }
          if (++st < PASSES * ksteps) continue;

          // Chunk c's carry inputs, in flight while the last group runs (P_c waits in shared memory).
          const int prow = p0 + 16 * warp;  // this warp's first state row
          detail::EpilogueInputs<Q, N, 0, NJ, HAS_SEQ_IDX> ein;
          ein.fetch(p, nullptr, b, h, c, chunk_valid(c) - 1, prow, n0, lane);
          // The next chunk's weights into the half the previous chunk used (every thread built its last
          // A fragment of that chunk before this chunk's first barrier), the one after's inputs on their way.
          if (c > 0) {
            put(c - 1, next, s_w + ((walk + 1) & 1) * Q);
            if (c > 1) fetch(c - 2, next);
          }
          const float carry = ein.carry();
          // dP_c complete: the epilogue's fma reads it (its stores and ρ read only dS and P_c, but they
          // update dS element by element in the same loop, so the wait comes first).
          warpgroup::wait_group<0>();
          warpgroup::fence_operand(acc);
          // P_c is visible from the chunk's step P_READY on; a chunk of at most P_READY steps (a short
          // first chunk of the walk; every chunk where PASSES · Q = 128) waits for every thread's copies
          // here, then the barrier: P_c's group (its first step's) is followed by one group per later
          // step of the chunk, so a whole chunk leaves PASSES · KS - 1 newer groups pending (the cp.async
          // loaders' prefetch keeps running); a short first chunk waits for all.
          if (PASSES * ksteps <= P_READY) {
            if (ksteps == KS)
              ptx::cp_async_wait<PASSES * KS - 1>();
            else
              ptx::cp_async_wait<0>();
            __syncthreads();
          }
          const long long at = p.ds.offset(b, c, h);
          double* rho_c = p.rho_slots + (((long long)b * nheads + h) * nchunks + c) * SLOTS;
          T* dsc = static_cast<T*>(p.ds.data) + at;
          T* dslc = static_cast<T*>(p.ds_lo) + at;
          T* ptc = static_cast<T*>(p.states_t) + at;
          T* ptlc = static_cast<T*>(p.states_t_lo) + at;
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int row = prow + FragC::row(lane, half);
            detail::state_pass_bwd_row<T, N, NJ, false, true>(
                [&](int j) { return run.x + 4 * j + 2 * half; },
                [&](int j) -> const float* { return acc.x + 4 * j + 2 * half; },
                [&](int j, long long) {
                  return *reinterpret_cast<const float2*>(s_p + (16 * warp + FragC::row(lane, half)) * LDP + 8 * j +
                                                          FragC::col(lane));
                },
                carry, row, n0, dsc, dslc, ptc, ptlc, rho_c, lane);
          }
#pragma unroll
          for (int i = 0; i < Acc::kRegs; ++i) acc.x[i] = 0.f;
          warpgroup::fence_operand(acc);
          st = 0;
          ++walk;
          --c;
          if (c >= 0) ksteps = KS;
        }
        ptx::cp_async_wait<0>();
        warpgroup::wait_group<0>();

        if (p.dinit.data) {
#pragma unroll
          for (int i = 0; i < Acc::kRegs; ++i)
            p.dinit.ptr(b, h)[detail::wg_state_offset<N>(r_lo, c_lo, i)] = run.x[i];
        }
        __syncthreads();  // s_w and the stage buffers are reused by the next tile
      }
    }
  }
}

}  // namespace ssd_kernels
