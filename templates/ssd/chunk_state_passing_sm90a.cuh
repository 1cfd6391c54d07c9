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
// Geometry: one warpgroup (128 threads) per block owns a 64 (p) x BLOCK_N (n) state tile; warp w holds
// p rows 16w..16w+15 of the A operand. Shared memory (dynamic, 1024-aligned): a ring of
// kStatePassWgmmaStages stages of x [BLOCK_K][64 p] (128-byte rows, 128-byte swizzle, read by
// ldmatrix.trans) and B [BLOCK_K][BLOCK_N] as BLOCK_N/64 swizzled column blocks (the MN-major wgmma B
// operand, desc_mn_major_sw128), then the weights of two chunks. The ring runs over the flattened
// (chunk, K stage) sequence with two stages in flight ahead of the one being multiplied, and one
// wgmma group (the previous stage's) still running while the next stage's A fragments are built:
// at the top of step s every thread waits for its copies of step s, fences them for the async proxy,
// waits until only step s-1's wgmma group is pending (step s-2's buffer is then free), and after the
// block barrier issues the copies of step s+2 into that buffer. At a chunk's end the P_c stores go
// out while the last group runs; then wait_group 0 and the fma.
//
// Launch: block = fwd_geom::kStatePassWgmmaThreads; grid as the mma.sync kernel (tiles, batch, nheads;
// grid-stride); dynamic shared memory fwd_geom::chunk_state_passing_wgmma_smem_bytes(Q, BLOCK_N,
// BLOCK_K).
#pragma once

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
// barrier); otherwise element-wise synchronous copies (visible after the barrier).
template <int NTHREADS, int ROWS, int COLS, class T, class Pred>
__device__ __forceinline__ void load_tile_sw128(unsigned char* s, const T* g, long long row_stride,
                                                long long col_stride, bool vec, const T* safe, Pred pred) {
  static_assert(sizeof(T) == 2 && COLS % 64 == 0, "16-bit elements, whole 64-column blocks");
  constexpr int CPR = COLS / 8;  // 16-byte chunks per row
  constexpr int TOTAL = ROWS * CPR;
  constexpr int ITERS = (TOTAL + NTHREADS - 1) / NTHREADS;
  if (vec) {
#pragma unroll
    for (int it = 0; it < ITERS; ++it) {
      const int i = it * NTHREADS + int(threadIdx.x);
      if (TOTAL % NTHREADS == 0 || i < TOTAL) {
        const int r = i / CPR, c = (i % CPR) * 8;
        const bool ok = pred(r);
        const unsigned dst = ptx::smem_addr(s + (c >> 6) * (ROWS * 128) + smem::swizzle128_offset(r, c & 63));
        ptx::cp_async_16(dst, ok ? g + (long long)r * row_stride + c : safe, ok);
      }
    }
  } else {
    for (int i = threadIdx.x; i < TOTAL; i += NTHREADS) {
      const int r = i / CPR, c0 = (i % CPR) * 8;
      const bool ok = pred(r);
      T* dst = reinterpret_cast<T*>(s + (c0 >> 6) * (ROWS * 128) + smem::swizzle128_offset(r, c0 & 63));
#pragma unroll
      for (int v = 0; v < 8; ++v) dst[v] = ok ? g[(long long)r * row_stride + (long long)(c0 + v) * col_stride]
                                              : from_float<T>(0.f);
    }
  }
}

}  // namespace detail

template <class Spec>
__device__ void chunk_state_passing_fwd_wgmma(const ChunkStatePassingFwdParams& p) {
  SSD_TILE_SPEC_NAMES(Spec);  // Q, P, N, HEADS_PER_GROUP, BLOCK_M, BLOCK_N, BLOCK_K; T: bf16 or fp16
  using S = typename Spec::State;  // P's type in memory: float, or T (SSD_FLAG_STATES_IN_DTYPE)
  constexpr bool HAS_SEQ_IDX = Spec::kSeqIdx;
  constexpr bool HAS_INIT = Spec::kInitialStates;
  constexpr bool TWO_TERM = Spec::kTwoTerm;
  using namespace fwd_geom;
  static_assert(chunk_state_passing_wgmma_tile_problem(Q, P, N, BLOCK_M, BLOCK_N, BLOCK_K) == nullptr,
                "illegal tile: the host's check (src/kernels) refuses it");
  static_assert(same_type<S, float>::value || same_type<S, T>::value, "the state type is fp32 or the element type");
  constexpr int NT = kStatePassWgmmaThreads;
  constexpr int STAGES = kStatePassWgmmaStages;
  static_assert(STAGES >= 3, "the ring keeps one stage under wgmma while the next is multiplied");
  constexpr int X_BYTES = BLOCK_K * 128;  // x stage: [BLOCK_K][64 p], one swizzled column block
  constexpr int STAGE_BYTES = chunk_state_passing_wgmma_stage_bytes(BLOCK_N, BLOCK_K);
  static_assert(X_BYTES % 1024 == 0 && STAGE_BYTES % 1024 == 0, "stages keep the 1024-byte swizzle alignment");
  constexpr int TILES_N = N / BLOCK_N;
  constexpr int TILES = chunk_state_tiles(P, N, BLOCK_M, BLOCK_N);
  constexpr int KS = Q / BLOCK_K;  // K stages of a whole chunk
  using Acc = WgAcc<BLOCK_N>;

  // The base rounded up to the 1024-byte swizzle atom by an offset into the shared array (so the compiler
  // still knows the weights' loads below are shared-memory loads).
  extern __shared__ unsigned char smem_dynamic[];
  unsigned char* const smem = smem_dynamic + ((1024u - (ptx::smem_addr(smem_dynamic) & 1023u)) & 1023u);
  float* const s_w = reinterpret_cast<float*>(smem + STAGES * STAGE_BYTES);  // [2][Q]: chunk c in half c % 2

  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31, lt = lane & 3;

  const T* xg = static_cast<const T*>(p.x.data);
  const T* Bg = static_cast<const T*>(p.B.data);
  const bool vec_x = vec16_rows(xg, p.x), vec_b = vec16_rows(Bg, p.B);
  S* const Pg = static_cast<S*>(p.states.data);
  // Pairs of P elements as one 8-byte (fp32) or 4-byte (16-bit) store.
  const bool vec_out = (reinterpret_cast<unsigned long long>(Pg) & (2 * sizeof(S) - 1)) == 0 &&
                       ((p.states.stride[0] | p.states.stride[1] | p.states.stride[2] | p.states.stride[3]) & 1) == 0;
  const int batch = int(p.batch), nheads = int(p.nheads), nchunks = int(p.nchunks);
  const int valid_last = int(p.seqlen - (long long)(nchunks - 1) * Q);
  const int steps_last = (valid_last + BLOCK_K - 1) / BLOCK_K;
  auto chunk_valid = [&](int c) { return c < nchunks - 1 ? Q : valid_last; };  // λ_c + 1

  // ldmatrix.trans addresses of this lane in an x stage (load_a_trans's lanes on the swizzled rows):
  // stored row k = kk + L%8 + (L/16)*8, column p = 16 w + ((L/8)%2)*8.
  const int a_row = (lane & 7) + ((lane >> 4) << 3), a_col = 16 * warp + ((lane >> 3) & 1) * 8;

  for (int h = blockIdx.z; h < nheads; h += gridDim.z) {
    const int g = h / HEADS_PER_GROUP;
    for (int b = blockIdx.y; b < batch; b += gridDim.y) {
      const T* safe_x = xg + p.x.offset(b, 0, h);
      const T* safe_b = Bg + p.B.offset(b, 0, g);

      // Weights of chunk c (chunk_state_fwd's w_l, the mma.sync kernel's expressions): the global
      // loads into registers a chunk ahead (fetch), then w_l into shared memory (put).
      constexpr int WPT = (Q + NT - 1) / NT;
      struct WeightInputs {
        float a_last, dA[WPT], dt[WPT];
        int q_last, seq[WPT];
      };
      auto fetch = [&](int c, WeightInputs& in) {
        const long long t0 = (long long)c * Q;
        const int valid = chunk_valid(c);
        const float* dA = p.dA_cumsum.ptr(b, h, c);
        const float* dt = p.dt.ptr(b, h, c);
        in.a_last = dA[Q - 1];
        in.q_last = HAS_SEQ_IDX ? p.seq_idx(b, t0 + valid - 1) : 0;
#pragma unroll
        for (int k = 0; k < WPT; ++k) {
          const int l = tid + k * NT;
          if (l < valid) {
            in.dA[k] = dA[l];
            in.dt[k] = dt[l];
            if (HAS_SEQ_IDX) in.seq[k] = p.seq_idx(b, t0 + l);
          }
        }
      };
      auto put = [&](int c, const WeightInputs& in, float* w_out) {
        const int valid = chunk_valid(c);
#pragma unroll
        for (int k = 0; k < WPT; ++k) {
          const int l = tid + k * NT;
          if (l < Q) {
            float w = 0.f;
            if (l < valid) {
              const float e = __expf(fminf(in.a_last - in.dA[k], 0.f)) * in.dt[k];
              bool keep = true;
              if (HAS_SEQ_IDX) keep = in.seq[k] == in.q_last;
              w = keep ? e : 0.f;
            }
            w_out[l] = w;
          }
        }
      };

      for (int tile = blockIdx.x; tile < TILES; tile += gridDim.x) {
        const int p0 = (tile / TILES_N) * BLOCK_M, n0 = (tile % TILES_N) * BLOCK_N;
        const T* xt = safe_x + p0 * p.x.stride[3];
        const T* bt = safe_b + n0 * p.B.stride[3];
        // Flattened step s = c * KS + ks (only the last chunk may have fewer than KS steps).
        auto load_stage = [&](int buf, int s) {
          const int c = s / KS, k0 = (s % KS) * BLOCK_K;
          const int valid = chunk_valid(c);
          const long long row = (long long)c * Q + k0;
          unsigned char* stage = smem + buf * STAGE_BYTES;
          detail::load_tile_sw128<NT, BLOCK_K, 64>(stage, xt + row * p.x.stride[1], p.x.stride[1], p.x.stride[3],
                                                   vec_x, safe_x, [&](int r) { return k0 + r < valid; });
          detail::load_tile_sw128<NT, BLOCK_K, BLOCK_N>(stage + X_BYTES, bt + row * p.B.stride[1], p.B.stride[1],
                                                        p.B.stride[3], vec_b, safe_b,
                                                        [&](int r) { return k0 + r < valid; });
        };

        // The running state S and this chunk's s_c, element for element in the same registers.
        Acc run, acc;
        acc.zero();
#pragma unroll
        for (int i = 0; i < Acc::kRegs; ++i) {
          run.x[i] = 0.f;
          if (HAS_INIT) run.x[i] = p.initial_states.ptr(b, h)[(long long)(p0 + Acc::row(i)) * N + n0 + Acc::col(i)];
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
          ptx::cp_async_commit();
        }
        int c = 0, ks = 0;
        for (int s = 0; s < steps; ++s) {
          // Step s's copies landed (this thread's), handed to the async proxy (wgmma reads B); step s-2's
          // wgmma group finished (its buffer is refilled below) once every thread passed the barrier.
          ptx::cp_async_wait<STAGES - 3>();
          ptx::fence_proxy_async_shared();
          warpgroup::wait_group<1>();
          warpgroup::fence_operand(acc);
          __syncthreads();
          {
            const int ahead = s + STAGES - 2;
            if (ahead < steps) load_stage(ahead % STAGES, ahead);
            ptx::cp_async_commit();
          }
          const unsigned char* stage = smem + (s % STAGES) * STAGE_BYTES;
          const T* sb = reinterpret_cast<const T*>(stage + X_BYTES);
          const float* w_step = s_w + (c & 1) * Q + ks * BLOCK_K;
#pragma unroll
          for (int kk = 0; kk < BLOCK_K; kk += 16) {
            const float* w = w_step + kk + 2 * lt;
            const float2 w01 = *reinterpret_cast<const float2*>(w);
            const float2 w89 = *reinterpret_cast<const float2*>(w + 8);
            FragA a;
            ptx::ldmatrix_x4_trans(a.x, ptx::smem_addr(stage + smem::swizzle128_offset(kk + a_row, a_col)));
            const unsigned long long desc_b = smem::desc_mn_major_sw128(sb, BLOCK_K, kk);
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
          }
          warpgroup::commit_group();
          warpgroup::fence_operand(acc);
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
          S* out = Pg + p.states.offset(b, c, h);
#pragma unroll
          for (int i = 0; i < Acc::kRegs; i += 2) {
            S* dst = out + (long long)(p0 + Acc::row(i)) * p.states.stride[3] + n0 + Acc::col(i);
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
        ptx::cp_async_wait<0>();
        warpgroup::wait_group<0>();

        if (p.final_states.data) {
#pragma unroll
          for (int i = 0; i < Acc::kRegs; ++i)
            p.final_states.ptr(b, h)[(long long)(p0 + Acc::row(i)) * N + n0 + Acc::col(i)] = run.x[i];
        }
        __syncthreads();  // s_w and the stage buffers are reused by the next tile
      }
    }
  }
}

}  // namespace ssd_kernels
