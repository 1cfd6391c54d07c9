// chunk_state_passing_fwd (math F2 + F3 fused): per (batch b, head h, tile of the state's (p, n)), the
// chunk states and the pass over chunks, with the running state in registers:
//
//   S_{-1} = init (0 without initial states);  for c = 0 .. Nc-1 in order:
//     s_c = Σ_{l=0}^{λ_c} w_l · x[b, cQ+l, h, p] · B[b, cQ+l, g, n]     (chunk_state_fwd's s_c, its w_l)
//     P_c = S_{c-1}                                          (the entering state, written to states:
//                                                             fp32, or rounded to nearest in T)
//     S_c = fma(θ_c · exp(dA_cumsum_c(λ_c)), S_{c-1}, s_c)    (one rounding, __fmaf_rn; expf)
//   final = S_{Nc-1}                                        (written when final_states is given)
//   w_l = ξ_c(l) ? exp(min(A(Q-1) - A(l), 0)) · Δ_l : 0,   θ_c = [seq_idx(cQ+λ_c) == seq_idx(cQ-1)]
//
// With kTwoTerm (SSD_FLAG_TWO_TERM_STATES, the backward's recompute) s_c's scaled operand is two
// terms, as in chunk_state_fwd with the flag (the same step function, so the same bits).
//
// Reduction order: s_c is chunk_state_fwd's chain (K over l = 0 .. λ_c in increasing 16-wide mma
// steps, fp32, detail::chunk_state_step), the recurrence state_passing_fwd's (one fma per chunk, in
// chunk order). So P and the final states are bitwise those of chunk_state_fwd + state_passing_fwd,
// for every tile of either path: the order over chunks is sequential by construction and no value
// crosses threads. s_c never leaves the chip (the staged path writes it, reads it back and rewrites
// it as P).
//
// Pipeline: the cp.async ring runs over the flattened (chunk, K step) sequence, so the next chunk's
// first tiles are in flight while this chunk's last step and its epilogue (P_c store, fma) run. The
// per-position inputs of the weights (dA_cumsum, Δ, seq_idx) are loaded into registers a chunk
// ahead, and chunk c+1's weights are written into the other half of s_w during chunk c's last step,
// so no global load latency sits between the steps.
//
// Launch: block = fwd_geom::chunk_state_passing_threads(BLOCK_M, BLOCK_N) threads (warp tiles of
//         at most 32 x 32); grid = (fwd_geom::chunk_state_tiles(P, N, BLOCK_M, BLOCK_N), batch,
//         nheads), each axis grid-stride; static shared memory chunk_state_passing_smem_bytes(...)
//         <= 48 KiB. Requires nchunks * (Q / BLOCK_K) < 2^31 (the host checks).
//
// On sm_90a (Spec::kWgmma: the arch is sm_90a and headdim, dstate are multiples of 64) the entry runs
// chunk_state_passing_fwd_wgmma (chunk_state_passing_sm90a.cuh) instead: the same formula in the same
// order (s_c's K chain as wgmma m64nNk16 steps with the same A operand bits, then the same fma), one
// warpgroup per 64 x BLOCK_N tile (m = 128: two, on two heads of a group sharing B), dynamic shared
// memory, its own tiles and grid (m in 64, 128; n in 64, 128; k in 32, 64:
// fwd_geom::chunk_state_passing_wgmma_tile_problem, chunk_state_passing_heads_per_block).
#pragma once

#include "ssd/chunk_state.cuh"  // detail::chunk_state_step
#include "ssd/chunk_state_weights.cuh"
#include "ssd/forward_params.cuh"
#include "ssd/primitives/dtype.cuh"
#include "ssd/primitives/mma.cuh"
#include "ssd/primitives/spec.cuh"
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#include "ssd/chunk_state_passing_sm90a.cuh"  // chunk_state_passing_fwd_wgmma (hopper.cuh: sm_90a only)
#endif

namespace ssd_kernels {

// The mma.sync kernel (sm_80, sm_90, and the sm_90a shapes wgmma does not take).
template <class Spec>
__device__ void chunk_state_passing_fwd_mma(const ChunkStatePassingFwdParams& p) {
  SSD_TILE_SPEC_NAMES(Spec);  // Q, P, N, HEADS_PER_GROUP, BLOCK_M, BLOCK_N, BLOCK_K; T: bf16 or fp16
  using S = typename Spec::State;  // P's type in memory: float, or T (SSD_FLAG_STATES_IN_DTYPE)
  constexpr bool HAS_SEQ_IDX = Spec::kSeqIdx;
  constexpr bool HAS_INIT = Spec::kInitialStates;
  static_assert(fwd_geom::chunk_state_passing_tile_problem(Q, P, N, BLOCK_M, BLOCK_N, BLOCK_K) == nullptr,
                "illegal tile: the host's check (src/kernels) refuses it");
  static_assert(same_type<S, float>::value || same_type<S, T>::value, "the state type is fp32 or the element type");
  using namespace fwd_geom;
  SSD_STATE_PASS_TILE_NAMES();  // WM, WN, WARPS_N, NT, STAGES, LDX (x tile [k][p]), LDB (B tile [k][n]), MI,
                                // NJ, TILES_N, TILES, KS (K steps of a whole chunk)

  __shared__ __align__(16) T s_x[STAGES][BLOCK_K * LDX];
  __shared__ __align__(16) T s_b[STAGES][BLOCK_K * LDB];
  __shared__ __align__(16) float s_w[2][Q];  // weights of chunk c in s_w[c % 2]

  SSD_WARP_TILE_COORDS(WM, WN, WARPS_N);  // tid, warp, lane, wm0, wn0, lg, lt

  const T* xg = static_cast<const T*>(p.x.data);
  const T* Bg = static_cast<const T*>(p.B.data);
  const bool vec_x = vec16_rows(xg, p.x), vec_b = vec16_rows(Bg, p.B);
  S* const Pg = static_cast<S*>(p.states.data);
  // Pairs of P elements as one 8-byte (fp32) or 4-byte (16-bit) store.
  const bool vec_out = (reinterpret_cast<unsigned long long>(Pg) & (2 * sizeof(S) - 1)) == 0 &&
                       ((p.states.stride[0] | p.states.stride[1] | p.states.stride[2] | p.states.stride[3]) & 1) == 0;
  // Work indices are 32-bit (batch, nheads, nchunks * KS < 2^31); offsets are 64-bit.
  const int batch = int(p.batch), nheads = int(p.nheads), nchunks = int(p.nchunks);
  const int valid_last = int(p.seqlen - (long long)(nchunks - 1) * Q);  // positions of the last chunk
  const int steps_last = (valid_last + BLOCK_K - 1) / BLOCK_K;
  auto chunk_valid = [&](int c) { return c < nchunks - 1 ? Q : valid_last; };  // λ_c + 1

  for (int h = blockIdx.z; h < nheads; h += gridDim.z) {
    const int g = h / HEADS_PER_GROUP;
    for (int b = blockIdx.y; b < batch; b += gridDim.y) {
      const T* safe_x = xg + p.x.offset(b, 0, h);
      const T* safe_b = Bg + p.B.offset(b, 0, g);

      // Weights of chunk c (detail::ChunkStateWeights: chunk_state_fwd's w_l), in two halves: the global
      // loads into registers a chunk ahead (fetch), then w_l into shared memory (put).
      using WeightInputs = detail::ChunkStateWeights<Q, NT, HAS_SEQ_IDX>;
      auto fetch = [&](int c, WeightInputs& in) { in.fetch(p, b, h, c, chunk_valid(c), tid); };
      auto put = [&](int c, const WeightInputs& in, float* w_out) { in.put(chunk_valid(c), tid, w_out); };

      for (int tile = blockIdx.x; tile < TILES; tile += gridDim.x) {
        const int p0 = (tile / TILES_N) * BLOCK_M, n0 = (tile % TILES_N) * BLOCK_N;
        const T* xt = safe_x + p0 * p.x.stride[3];
        const T* bt = safe_b + n0 * p.B.stride[3];
        // Flattened step s = c * KS + ks (only the last chunk may have fewer than KS steps).
        auto load_stage = [&](int buf, int s) {
          const int c = s / KS, k0 = (s % KS) * BLOCK_K;
          const int valid = chunk_valid(c);
          const long long row = (long long)c * Q + k0;
          block::load_tile<NT, BLOCK_K, BLOCK_M, LDX>(s_x[buf], xt + row * p.x.stride[1], p.x.stride[1], p.x.stride[3],
                                                      vec_x, safe_x, [&](int r, int) { return k0 + r < valid; });
          block::load_tile<NT, BLOCK_K, BLOCK_N, LDB>(s_b[buf], bt + row * p.B.stride[1], p.B.stride[1], p.B.stride[3],
                                                      vec_b, safe_b, [&](int r, int) { return k0 + r < valid; });
        };

        // The running state (S above) and this chunk's s_c, element for element in the same fragment slots.
        FragC run[MI][NJ], acc[MI][NJ];
        detail::start_state_fragments<N>(run, acc, HAS_INIT, p.initial_states, b, h, p0, wm0, n0, wn0, lane);

        WeightInputs next;
        fetch(0, next);
        put(0, next, s_w[0]);  // visible after the first step's barrier
        if (nchunks > 1) fetch(1, next);
        int prev_id = 0;     // seq_idx(cQ - 1), with seq_idx(-1) := 0
        const int steps = (nchunks - 1) * KS + steps_last;
        const block::CpAsyncPipeline<STAGES> ring{steps};
        ring.prologue(load_stage);
        int c = 0, ks = 0;
        for (int s = 0; s < steps; ++s) {
          ring.begin(s, load_stage);
          detail::chunk_state_step<T, BLOCK_K, LDX, LDB, Spec::kTwoTerm>(acc, s_x[s % STAGES], s_b[s % STAGES], wm0, wn0,
                                                         s_w[c & 1] + ks * BLOCK_K, lt);
          if (++ks < (c < nchunks - 1 ? KS : steps_last)) continue;

          // Chunk c+1's weights into the half chunk c-1 used (every thread finished chunk c-1 before
          // this chunk's first barrier; the next chunk reads it after its own first barrier), and
          // chunk c+2's inputs on their way.
          if (c + 1 < nchunks) {
            put(c + 1, next, s_w[(c + 1) & 1]);
            if (c + 2 < nchunks) fetch(c + 2, next);
          }

          // Epilogue of chunk c: P_c = S_{c-1}, then S_c = fma(carry, S_{c-1}, s_c) (state_passing_fwd).
          const int last = chunk_valid(c) - 1;  // λ_c
          float carry = expf(p.dA_cumsum.ptr(b, h, c)[last]);
          if (HAS_SEQ_IDX) {
            const int last_id = p.seq_idx(b, (long long)c * Q + last);
            if (last_id != prev_id) carry = 0.f;
            prev_id = last_id;
          }
          S* out = Pg + p.states.offset(b, c, h);
#pragma unroll
          for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int half = 0; half < 2; ++half) {
              const int row = p0 + wm0 + 16 * i + FragC::row(lane, half);
              S* orow = out + (long long)row * p.states.stride[3];
#pragma unroll
              for (int j = 0; j < NJ; ++j) {
                const int col = n0 + wn0 + 8 * j + FragC::col(lane);
                float* v = run[i][j].x + 2 * half;
                if constexpr (same_type<S, float>::value) {
                  if (vec_out) {
                    *reinterpret_cast<float2*>(orow + col) = make_float2(v[0], v[1]);
                  } else {
                    orow[col] = v[0];
                    orow[col + 1] = v[1];
                  }
                } else {  // the rounding chunk_scan_fwd applies to fp32 P before its mma (ptx::pack2)
                  const unsigned pair = ptx::pack2<T>(v[0], v[1]);
                  if (vec_out) {
                    *reinterpret_cast<unsigned*>(orow + col) = pair;
                  } else {
                    orow[col] = reinterpret_cast<const T*>(&pair)[0];
                    orow[col + 1] = reinterpret_cast<const T*>(&pair)[1];
                  }
                }
                const float* a = acc[i][j].x + 2 * half;
                v[0] = __fmaf_rn(carry, v[0], a[0]);
                v[1] = __fmaf_rn(carry, v[1], a[1]);
              }
            }
#pragma unroll
          for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < NJ; ++j) warp::zero(acc[i][j]);
          ks = 0;
          ++c;
        }
        ring.drain();

        if (p.final_states.data) detail::store_state_fragments<N>(run, p.final_states, b, h, p0, wm0, n0, wn0, lane);
        __syncthreads();  // s_w and the stage buffers are reused by the next tile
      }
    }
  }
}

// The entry: on sm_90a the family sets Spec::kWgmma (a pure function of the specialization:
// src/kernels/chunk_state_passing.cpp) and the wgmma kernel runs; elsewhere the mma.sync one.
template <class Spec, class Params>  // Params: ChunkStatePassingFwdTmaParams with Spec::kTma, else ChunkStatePassingFwdParams
__device__ void chunk_state_passing_fwd(const Params& p) {
  if constexpr (spec_detail::optional_kWgmma<Spec>(0)) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    chunk_state_passing_fwd_wgmma<Spec>(p);
#else
    static_assert(!spec_detail::optional_kWgmma<Spec>(0), "the wgmma chunk_state_passing_fwd needs the sm_90a target");
#endif
  } else {
    chunk_state_passing_fwd_mma<Spec>(p);
  }
}

}  // namespace ssd_kernels
