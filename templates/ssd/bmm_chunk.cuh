// bmm_chunk_fwd (math F4): per (batch b, chunk c, group g), positions l, s in [0, Q):
//
//   CB[b, c, g, l, s] = σ_c(l, s) · Σ_n C[b, cQ+l, g, n] · B[b, cQ+s, g, n]        (fp32 out)
//
// σ_c(l, s) = [seq_idx(cQ+l) == seq_idx(cQ+s)] (1 without seq_idx), applied as a select (not a
// multiply). Rows/columns with t = cQ + l >= L (padding of the last chunk) are 0 (their operands
// are zero-filled, never read).
//
// Only the causal lower triangle is produced: the Q x Q square is cut into BLOCK_M x BLOCK_N tiles
// and tile (i, j) is computed iff j*BLOCK_N <= i*BLOCK_M + BLOCK_M - 1 (it holds some s <= l). A
// computed tile is written in full (entries with s > l inside it hold the σ-masked product, as
// upstream's full square would); tiles strictly above the diagonal are never written. Consumers
// (chunk_scan_fwd) read a 4-float group (l, s0..s0+3) only when s0 <= l, which always lies in a
// computed tile.
//
// Reduction order: the dstate axis n is walked in K = fwd_geom::bmm_chunk_block_k steps in
// increasing n; each step is a chain of K/16 mma.m16n8k16 (bf16/fp16 operands, fp32 accumulate)
// in increasing n. Every output is therefore one fp32 accumulation chain over n in 16-wide mma
// steps, in increasing n, starting from 0: its bits do not depend on BLOCK_M, BLOCK_N, K or the
// warp split.
//
// On sm_90a (Spec::kWgmma: the arch is sm_90a, the chunk 128 or 256, dstate a multiple of 64 and the
// tile 64 x 64 x 64) the entry runs bmm_chunk_fwd_wgmma (bmm_chunk_sm90a.cuh) instead: the same chains
// on wgmma, the same bits.
//
// Launch: block = fwd_geom::bmm_chunk_threads(BLOCK_M, BLOCK_N) threads;
//         grid  = (fwd_geom::bmm_chunk_tiles(Q, BLOCK_M, BLOCK_N), batch * nchunks, ngroups),
//         each axis grid-stride (any grid size >= 1 is correct); static shared memory
//         fwd_geom::bmm_chunk_smem_bytes(N, BLOCK_M, BLOCK_N) <= 48 KiB, no dynamic shared memory.
#pragma once

#include "ssd/forward_params.cuh"
#include "ssd/primitives/dtype.cuh"
#include "ssd/primitives/mma.cuh"
#include "ssd/primitives/spec.cuh"
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#include "ssd/bmm_chunk_sm90a.cuh"  // bmm_chunk_fwd_wgmma (hopper.cuh: sm_90a only)
#endif

namespace ssd_kernels {

template <class Spec>
__device__ void bmm_chunk_fwd_mma(const BmmChunkFwdParams& p) {
  SSD_TILE_SPEC_NAMES(Spec);  // Q, P, N, HEADS_PER_GROUP, BLOCK_M, BLOCK_N, BLOCK_K; T: bf16 or fp16
  static_assert(fwd_geom::bmm_chunk_tile_problem(Q, N, BLOCK_M, BLOCK_N, 0) == nullptr,
                "illegal tile: the host's check (src/kernels) refuses it");
  using namespace fwd_geom;
  static_assert(Q % BLOCK_M == 0 && Q % BLOCK_N == 0, "tiles must divide the chunk");
  static_assert(BLOCK_M % 16 == 0 && BLOCK_N % 16 == 0, "tiles must be multiples of 16");
  static_assert(N % 16 == 0, "dstate must be a multiple of 16");
  constexpr int WM = warp_tile_m(BLOCK_M, BLOCK_N);
  constexpr int WN = warp_tile_n(BLOCK_M, BLOCK_N);
  constexpr int WARPS_N = BLOCK_N / WN;
  constexpr int NT = bmm_chunk_threads(BLOCK_M, BLOCK_N);
  constexpr int BK = bmm_chunk_block_k(N, BLOCK_M, BLOCK_N);
  constexpr int STAGES = bmm_chunk_stages(N, BLOCK_M, BLOCK_N);
  constexpr int LD = BK + kPad;
  constexpr int MI = WM / 16, NJ = WN / 8;
  constexpr int TILES = bmm_chunk_tiles(Q, BLOCK_M, BLOCK_N);
  constexpr int KSTEPS = N / BK;
  static_assert(WM % 16 == 0 && WN % 16 == 0, "warp tile must be a multiple of 16 x 16");
  static_assert(N % BK == 0, "K step must divide dstate");
  static_assert(bmm_chunk_smem_bytes(N, BLOCK_M, BLOCK_N) <= kMaxStaticSmem, "shared memory over 48 KiB");

  __shared__ __align__(16) T s_tiles[STAGES][(BLOCK_M + BLOCK_N) * LD];
  __shared__ int s_seq[Spec::kSeqIdx ? BLOCK_M + BLOCK_N : 1];

  SSD_WARP_TILE_COORDS(WM, WN, WARPS_N);  // tid, warp, lane, wm0, wn0, lg, lt

  const T* Cg = static_cast<const T*>(p.C.data);
  const T* Bg = static_cast<const T*>(p.B.data);
  const bool vec = aligned16(Cg) && aligned16(Bg) && p.C.stride[3] == 1 && p.B.stride[3] == 1 &&
                   ((p.C.stride[0] | p.C.stride[1] | p.C.stride[2]) & 7) == 0 &&
                   ((p.B.stride[0] | p.B.stride[1] | p.B.stride[2]) & 7) == 0;
  const bool vec_out = vec8_floats(p.CB);
  // Work indices are 32-bit (batch * nchunks and ngroups < 2^31); offsets are 64-bit.
  const int batch = int(p.batch), ngroups = int(p.ngroups);
  const int nbc = int(p.batch * p.nchunks);

  for (int grp = blockIdx.z; grp < ngroups; grp += gridDim.z) {
    for (int bc = blockIdx.y; bc < nbc; bc += gridDim.y) {
      SSD_CHUNK_COORDS(bc, batch, Q, p.seqlen);  // b, c, t0, valid: positions l < valid are real tokens
      const T* safe_c = Cg + p.C.offset(b, 0, grp);
      const T* safe_b = Bg + p.B.offset(b, 0, grp);
      for (int tile = blockIdx.x; tile < TILES; tile += gridDim.x) {
        SSD_LOWER_TRIANGLE_TILE(tile, Q, BLOCK_M, BLOCK_N);  // mi, ni
        const int m0 = mi * BLOCK_M, n0 = ni * BLOCK_N;

        if (Spec::kSeqIdx) SSD_STAGE_TILE_SEQ_IDS(s_seq, p.seq_idx, b, t0, m0, n0, valid);

        const T* Ct = safe_c + (t0 + m0) * p.C.stride[1];
        const T* Bt = safe_b + (t0 + n0) * p.B.stride[1];
        auto load_stage = [&](int buf, int ks) {
          const long long k0 = (long long)ks * BK;
          T* sa = s_tiles[buf];
          T* sb = sa + BLOCK_M * LD;
          block::load_tile<NT, BLOCK_M, BK, LD>(sa, Ct + k0 * p.C.stride[3], p.C.stride[1], p.C.stride[3], vec, safe_c,
                                                [&](int r, int) { return m0 + r < valid; });
          block::load_tile<NT, BLOCK_N, BK, LD>(sb, Bt + k0 * p.B.stride[3], p.B.stride[1], p.B.stride[3], vec, safe_b,
                                                [&](int r, int) { return n0 + r < valid; });
        };

        FragC acc[MI][NJ];
        warp::zero_tile(acc);

        // cp.async pipeline, STAGES buffers: stage ks lives in buffer ks % STAGES.
        const block::CpAsyncPipeline<STAGES> ring{KSTEPS};
        ring.prologue(load_stage);
        for (int ks = 0; ks < KSTEPS; ++ks) {
          ring.begin(ks, load_stage);  // stage ks visible to all; everyone is done with stage ks - 1
          const T* sa = s_tiles[ks % STAGES];
          const T* sb = sa + BLOCK_M * LD;
#pragma unroll
          for (int kk = 0; kk < BK; kk += 16) {
            SSD_WARP_MMA_K16(T, acc, warp::load_a(a[i], sa + (wm0 + 16 * i) * LD + kk, LD),
                             warp::load_b2(bf[j], bf[j + 1], sb + (wn0 + 8 * j) * LD + kk, LD));
          }
        }
        ring.drain();

        // Epilogue: σ mask (select), fp32 stores straight from the accumulators (each quad of
        // lanes writes 32 contiguous bytes of a row).
        // Sum spelled out: through ptr() the compiler orders the adds differently (same address, other cubin).
        float* out = p.CB.data + b * p.CB.stride[0] + c * p.CB.stride[1] + grp * p.CB.stride[2];
#pragma unroll
        for (int i = 0; i < MI; ++i) {
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int rl = wm0 + 16 * i + lg + 8 * half;  // row inside the tile
            float* orow = out + (long long)(m0 + rl) * p.CB.stride[3];
#pragma unroll
            for (int j = 0; j < NJ; ++j) {
              const int cl = wn0 + 8 * j + 2 * lt;  // column inside the tile
              float v0 = acc[i][j].x[2 * half], v1 = acc[i][j].x[2 * half + 1];
              if (Spec::kSeqIdx) {
                const int q = s_seq[rl];
                v0 = q == s_seq[BLOCK_M + cl] ? v0 : 0.f;
                v1 = q == s_seq[BLOCK_M + cl + 1] ? v1 : 0.f;
              }
              if (vec_out) {
                *reinterpret_cast<float2*>(orow + n0 + cl) = make_float2(v0, v1);
              } else {
                orow[n0 + cl] = v0;
                orow[n0 + cl + 1] = v1;
              }
            }
          }
        }
        __syncthreads();  // shared tiles and s_seq are reused by the next tile
      }
    }
  }
}

// The entry: on sm_90a the family sets Spec::kWgmma (a pure function of the specialization:
// src/kernels/bmm_chunk.cpp) and the wgmma kernel runs; elsewhere the mma.sync one.
template <class Spec>
__device__ void bmm_chunk_fwd(const BmmChunkFwdParams& p) {
  if constexpr (spec_detail::optional_kWgmma<Spec>(0)) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    bmm_chunk_fwd_wgmma<Spec>(p);
#else
    static_assert(!spec_detail::optional_kWgmma<Spec>(0), "the wgmma bmm_chunk_fwd needs the sm_90a target");
#endif
  } else {
    bmm_chunk_fwd_mma<Spec>(p);
  }
}

}  // namespace ssd_kernels
