// chunk_state_fwd (math F2): per (batch b, chunk c, head h), group g = h / HEADS_PER_GROUP:
//
//   states[b, c, h, p, n] = Σ_{l=0}^{λ_c} w_l · x[b, cQ+l, h, p] · B[b, cQ+l, g, n]        (fp32 out)
//   w_l = ξ_c(l) ? exp(min(A(Q-1) - A(l), 0)) · Δ_l : 0        (A = dA_cumsum, Δ = dt, both fp32)
//
// ξ_c(l) = [seq_idx(cQ+l) == seq_idx(cQ+λ_c)] (1 without seq_idx), applied as a select; w_l = 0
// for padding positions l > λ_c. As upstream, w_l is computed in fp32 as exp(·) * Δ_l and applied
// to one operand before the mma: the tensor core multiplies rn_T(float(x_l) * w_l) by B_l (upstream
// scales B; scaling x instead gives the same products up to that one rounding, and x is the
// per-head operand). exp is __expf (ex2.approx), like Triton's tl.exp.
//
// Matrix form: S = Xᵀ diag(w) B, with M = p (BLOCK_M), N = n (BLOCK_N), K = positions (BLOCK_K).
// Reduction order: K loop over chunk positions l = 0 .. λ_c in BLOCK_K steps (increasing l; whole
// steps past λ_c are skipped, the tail of the last step is zero-filled), each step a chain of
// BLOCK_K/16 mma.m16n8k16 in increasing l; fp32 accumulate. Every output is one accumulation
// chain over l in 16-wide steps starting from 0, so its bits do not depend on the tile sizes.
//
// DSTATES = true makes the same template chunk_scan_bwd_dstates (math B-b), the entering-state
// gradient, with x := dy and B := C:
//   dP[b, c, h, p, n] = Σ_{l=0}^{λ_c} w_l · dy[b, cQ+l, h, p] · C[b, cQ+l, g, n],
//   w_l = η_c(l) ? exp(A(l)) : 0,   η_c(l) = [seq_idx(cQ+l) == seq_idx(cQ-1)], seq_idx(-1) := 0
// (E_start is not clamped, as in the forward's chunk_scan); same reduction order.
//
// TWO_TERM (SSD_FLAG_TWO_TERM_STATES; the backward's dstates and its recompute of P): the scaled
// operand enters as two T terms, hi = rn_T(float(x_l)·w_l) and lo = rn_T(float(x_l)·w_l − hi), and
// each K=16 step is two mma on the same accumulator, hi then lo (issue 11: the single rounding of
// that operand was one of the largest errors of dA). Same K order otherwise.
//
// X_LO (kXLo: chunk_scan_bwd_dstates with SSD_FLAG_Z; params ChunkStateXLoParams): dy is gate_bwd's
// fp32 dy stored as two T terms, x = rn_T(dy) and x_lo = rn_T(dy − float(x)). The K loop then runs
// twice through one pipeline, on the same fp32 accumulator: steps 0 .. K−1 the pass above on x
// (two-term with TWO_TERM), then steps K .. 2K−1 (K = ⌈(λ_c+1)/BLOCK_K⌉) the same positions in
// the same increasing order on x_lo, each K=16 step one mma of rn_T(float(x_lo_l)·w_l) (one term:
// x_lo is at most half an ulp of x, so that rounding is ~2^-9 of the single-term one that dominated
// dA's error, and x_lo's own rounding ~2^-17 of dy for bf16). The order is a function of the
// positions only, so the bits still do not depend on the tile.
//
// Launch: block = fwd_geom::chunk_state_threads(BLOCK_M, BLOCK_N) threads;
//         grid  = (fwd_geom::chunk_state_tiles(P, N, BLOCK_M, BLOCK_N), batch * nchunks, nheads),
//         each axis grid-stride; static shared memory fwd_geom::chunk_state_smem_bytes(Q, BLOCK_M,
//         BLOCK_N, BLOCK_K) <= 48 KiB, no dynamic shared memory.
#pragma once

#include "ssd/forward_params.cuh"
#include "ssd/primitives/dtype.cuh"
#include "ssd/primitives/mma.cuh"
#include "ssd/primitives/spec.cuh"

// The tile geometry of the fused mma.sync state passes (chunk_state_passing.cuh,
// chunk_state_passing_bwd.cuh), from SSD_TILE_SPEC_NAMES' Q, P, N, BLOCK_M, BLOCK_N, BLOCK_K: warp
// tiles WM x WN (WARPS_N across n), NT threads, STAGES ring stages of the [k][p] and [k][n] tiles
// (row strides LDX, LDB), MI x NJ fragments per warp, TILES state tiles (TILES_N across n), KS K
// steps of a whole chunk. One definition, so the two passes keep one tile set and launch geometry.
#define SSD_STATE_PASS_TILE_NAMES()                                                                             \
  constexpr int WM = ::ssd_kernels::fwd_geom::state_pass_warp_m(BLOCK_M);                                      \
  constexpr int WN = ::ssd_kernels::fwd_geom::state_pass_warp_n(BLOCK_N);                                      \
  constexpr int WARPS_N = BLOCK_N / WN;                                                                         \
  constexpr int NT = ::ssd_kernels::fwd_geom::chunk_state_passing_threads(BLOCK_M, BLOCK_N);                   \
  constexpr int STAGES = ::ssd_kernels::fwd_geom::chunk_state_passing_stages(Q, BLOCK_M, BLOCK_N, BLOCK_K);    \
  constexpr int LDX = BLOCK_M + ::ssd_kernels::fwd_geom::kPad;                                                 \
  constexpr int LDB = BLOCK_N + ::ssd_kernels::fwd_geom::kPad;                                                 \
  constexpr int MI = WM / 16, NJ = WN / 8;                                                                      \
  constexpr int TILES_N = N / BLOCK_N;                                                                          \
  constexpr int TILES = ::ssd_kernels::fwd_geom::chunk_state_tiles(P, N, BLOCK_M, BLOCK_N);                    \
  constexpr int KS = Q / BLOCK_K

namespace ssd_kernels {
namespace detail {

// One K step of S += Xᵀ diag(w) B for one warp's MI x NJ fragments: sx, sb are the [k][p] and [k][n]
// stage tiles, (wm0, wn0) the warp's corner, w_step the step's BLOCK_K weights; increasing k in
// 16-wide mma steps. (The address sums keep the order the kernels wrote: the same machine code.)
template <class T, int BLOCK_K, int LDX, int LDB, bool TWO_TERM, int MI, int NJ>
__device__ __forceinline__ void chunk_state_step(FragC (&acc)[MI][NJ], const T* sx, const T* sb, int wm0, int wn0,
                                                 const float* w_step, int lt) {
#pragma unroll
  for (int kk = 0; kk < BLOCK_K; kk += 16) {
    const float* w = w_step + kk + 2 * lt;
    const float2 w01 = *reinterpret_cast<const float2*>(w);
    const float2 w89 = *reinterpret_cast<const float2*>(w + 8);
    if constexpr (TWO_TERM) {
      FragA a[MI], lo[MI];
      FragB bf[NJ];
#pragma unroll
      for (int i = 0; i < MI; ++i) {
        warp::load_a_trans(a[i], sx + kk * LDX + wm0 + 16 * i, LDX);
        warp::scale_a_cols_two_term<T>(a[i], lo[i], w01, w89);
      }
#pragma unroll
      for (int j = 0; j < NJ; j += 2) warp::load_b2_trans(bf[j], bf[j + 1], sb + kk * LDB + wn0 + 8 * j, LDB);
#pragma unroll
      for (int i = 0; i < MI; ++i) {
#pragma unroll
        for (int j = 0; j < NJ; ++j) {
          warp::mma<T>(acc[i][j], a[i], bf[j]);
          warp::mma<T>(acc[i][j], lo[i], bf[j]);
        }
      }
    } else {
      SSD_WARP_MMA_K16(T, acc,
                       warp::load_a_trans(a[i], sx + kk * LDX + wm0 + 16 * i, LDX);
                       warp::scale_a_cols<T>(a[i], w01, w89),
                       warp::load_b2_trans(bf[j], bf[j + 1], sb + kk * LDB + wn0 + 8 * j, LDB));
    }
  }
}

// The running state of the fused state passes (chunk_state_passing.cuh, chunk_state_passing_bwd.cuh)
// is a (b, h) state of p x n fp32 (row stride N) in a warp's MI x NJ accumulator fragments: the
// pair x[2·half], x[2·half + 1] of fragment (i, j) is the elements (row, col), (row, col + 1) with
// row = p0 + wm0 + 16i + FragC::row(lane, half), col = n0 + wn0 + 8j + FragC::col(lane). The
// corner comes as its four terms and the loops are the kernels' own, so the address arithmetic
// stays where they had it (a precomputed p0 + wm0 changed their machine code).

// A tile's start: the chunk's accumulator acc zeroed and run loaded from `state` when `load`, else
// zeroed. One loop, as the kernels wrote it (zeroing first, then loading, changed their machine code).
template <int N, int MI, int NJ>
__device__ __forceinline__ void start_state_fragments(FragC (&run)[MI][NJ], FragC (&acc)[MI][NJ], bool load,
                                                      const TensorRef<const float, 2>& state, int b, int h, int p0,
                                                      int wm0, int n0, int wn0, int lane) {
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      warp::zero(acc[i][j]);
      warp::zero(run[i][j]);
      if (load) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int row = p0 + wm0 + 16 * i + FragC::row(lane, half);  // headdim index
          const int col = n0 + wn0 + 8 * j + FragC::col(lane);         // dstate index
          const float* src = state.ptr(b, h) + (long long)row * N + col;
          run[i][j].x[2 * half] = src[0];
          run[i][j].x[2 * half + 1] = src[1];
        }
      }
    }
}

// The running state into `state`.
template <int N, int MI, int NJ>
__device__ __forceinline__ void store_state_fragments(const FragC (&frag)[MI][NJ], const TensorRef<float, 2>& state,
                                                      int b, int h, int p0, int wm0, int n0, int wn0, int lane) {
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int j = 0; j < NJ; ++j) {
        const int row = p0 + wm0 + 16 * i + FragC::row(lane, half);
        const int col = n0 + wn0 + 8 * j + FragC::col(lane);
        float* dst = state.ptr(b, h) + (long long)row * N + col;
        dst[0] = frag[i][j].x[2 * half];
        dst[1] = frag[i][j].x[2 * half + 1];
      }
}

}  // namespace detail

template <class Spec, class Params>  // Params: ChunkStateXLoParams with kXLo, else ChunkStateFwdParams
__device__ void chunk_state_fwd(const Params& p) {
  SSD_TILE_SPEC_NAMES(Spec);  // Q, P, N, HEADS_PER_GROUP, BLOCK_M, BLOCK_N, BLOCK_K; T: bf16 or fp16
  static_assert(fwd_geom::chunk_state_tile_problem(Q, P, N, BLOCK_M, BLOCK_N, BLOCK_K) == nullptr,
                "illegal tile: the host's check (src/kernels) refuses it");
  using namespace fwd_geom;
  static_assert(P % BLOCK_M == 0 && N % BLOCK_N == 0 && Q % BLOCK_K == 0, "tiles must divide P, N, Q");
  static_assert(BLOCK_M % 16 == 0 && BLOCK_N % 16 == 0 && BLOCK_K % 16 == 0, "tiles must be multiples of 16");
  static_assert(HEADS_PER_GROUP >= 1, "HEADS_PER_GROUP >= 1");
  constexpr int WM = warp_tile_m(BLOCK_M, BLOCK_N);
  constexpr int WN = warp_tile_n(BLOCK_M, BLOCK_N);
  constexpr int WARPS_N = BLOCK_N / WN;
  constexpr int NT = chunk_state_threads(BLOCK_M, BLOCK_N);
  constexpr int STAGES = chunk_state_stages(Q, BLOCK_M, BLOCK_N, BLOCK_K);
  constexpr int LDX = BLOCK_M + kPad;  // x tile [k][p]
  constexpr int LDB = BLOCK_N + kPad;  // B tile [k][n]
  constexpr int MI = WM / 16, NJ = WN / 8;
  constexpr int TILES_N = N / BLOCK_N;
  constexpr int TILES = chunk_state_tiles(P, N, BLOCK_M, BLOCK_N);
  static_assert(WM % 16 == 0 && WN % 16 == 0, "warp tile must be a multiple of 16 x 16");
  static_assert(chunk_state_smem_bytes(Q, BLOCK_M, BLOCK_N, BLOCK_K) <= kMaxStaticSmem, "shared memory over 48 KiB");

  __shared__ __align__(16) T s_x[STAGES][BLOCK_K * LDX];
  __shared__ __align__(16) T s_b[STAGES][BLOCK_K * LDB];
  __shared__ __align__(16) float s_w[Q];

  SSD_WARP_TILE_COORDS(WM, WN, WARPS_N);  // tid, warp, lane, wm0, wn0, lg, lt

  const T* xg = static_cast<const T*>(p.x.data);
  const T* Bg = static_cast<const T*>(p.B.data);
  bool vec_x = vec16_rows(xg, p.x);
  if constexpr (Spec::kXLo) vec_x = vec_x && aligned16(p.x_lo);  // x_lo: x's strides
  const bool vec_b = vec16_rows(Bg, p.B);
  const bool vec_out = vec8_floats(p.states);
  // Work indices are 32-bit (batch * nchunks and nheads < 2^31); offsets are 64-bit.
  const int batch = int(p.batch), nheads = int(p.nheads);
  const int nbc = int(p.batch * p.nchunks);

  for (int h = blockIdx.z; h < nheads; h += gridDim.z) {
    const int g = h / HEADS_PER_GROUP;
    for (int bc = blockIdx.y; bc < nbc; bc += gridDim.y) {
      SSD_CHUNK_COORDS(bc, batch, Q, p.seqlen);  // b, c, t0, valid: λ_c = valid - 1
      const int ksteps = (valid + BLOCK_K - 1) / BLOCK_K;  // per pass over the positions
      const int steps = Spec::kXLo ? 2 * ksteps : ksteps;   // X_LO: the pass on x, then on x_lo
      const T* safe_x = xg + p.x.offset(b, 0, h);
      const T* safe_b = Bg + p.B.offset(b, 0, g);
      const float* dA = p.dA_cumsum.ptr(b, h, c);
      const float* dt = p.dt.ptr(b, h, c);

      for (int tile = blockIdx.x; tile < TILES; tile += gridDim.x) {
        const int p0 = (tile / TILES_N) * BLOCK_M, n0 = (tile % TILES_N) * BLOCK_N;

        // Per-position weights w_l (visible after the first barrier of the K loop).
        {
          const float a_last = dA[Q - 1];
          int q_last = 0;  // the id tokens must match: seq_idx(cQ+λ) (ξ), or seq_idx(cQ-1) (η, DSTATES)
          if (Spec::kSeqIdx) {
            if (!Spec::kDstates) q_last = p.seq_idx(b, t0 + valid - 1);
            else if (c > 0) q_last = p.seq_idx(b, t0 - 1);
          }
          for (int l = tid; l < Q; l += NT) {
            float w = 0.f;
            if (l < valid) {
              const float e = Spec::kDstates ? __expf(dA[l]) : __expf(fminf(a_last - dA[l], 0.f)) * dt[l];
              bool keep = true;
              if (Spec::kSeqIdx) keep = p.seq_idx(b, t0 + l) == q_last;
              w = keep ? e : 0.f;
            }
            s_w[l] = w;
          }
        }

        const T* xt = safe_x + t0 * p.x.stride[1] + p0 * p.x.stride[3];
        const T* bt = safe_b + t0 * p.B.stride[1] + n0 * p.B.stride[3];
        auto load_stage = [&](int buf, int step) {
          int ks = step;  // the position step inside its pass
          const T* xs = xt;
          const T* safe_xs = safe_x;
          if constexpr (Spec::kXLo) {
            if (step >= ksteps) {  // the pass on x_lo, laid out as x
              ks = step - ksteps;
              safe_xs = static_cast<const T*>(p.x_lo) + p.x.offset(b, 0, h);
              xs = safe_xs + t0 * p.x.stride[1] + p0 * p.x.stride[3];
            }
          }
          const int k0 = ks * BLOCK_K;
          block::load_tile<NT, BLOCK_K, BLOCK_M, LDX>(s_x[buf], xs + k0 * p.x.stride[1], p.x.stride[1], p.x.stride[3],
                                                      vec_x, safe_xs, [&](int r, int) { return k0 + r < valid; });
          block::load_tile<NT, BLOCK_K, BLOCK_N, LDB>(s_b[buf], bt + k0 * p.B.stride[1], p.B.stride[1], p.B.stride[3],
                                                      vec_b, safe_b, [&](int r, int) { return k0 + r < valid; });
        };

        FragC acc[MI][NJ];
        warp::zero_tile(acc);

        const block::CpAsyncPipeline<STAGES> ring{steps};
        ring.prologue(load_stage);
        for (int ks = 0; ks < steps; ++ks) {
          ring.begin(ks, load_stage);
          const T* sx = s_x[ks % STAGES];
          const T* sb = s_b[ks % STAGES];
          if (!Spec::kXLo || ks < ksteps)
            detail::chunk_state_step<T, BLOCK_K, LDX, LDB, Spec::kTwoTerm>(acc, sx, sb, wm0, wn0, s_w + ks * BLOCK_K, lt);
          else  // x_lo's pass: the same weights, one term
            detail::chunk_state_step<T, BLOCK_K, LDX, LDB, false>(acc, sx, sb, wm0, wn0, s_w + (ks - ksteps) * BLOCK_K,
                                                                  lt);
        }
        ring.drain();

        float* out = p.states.ptr(b, c, h);
#pragma unroll
        for (int i = 0; i < MI; ++i) {
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int row = p0 + wm0 + 16 * i + FragC::row(lane, half);  // headdim index
            float* orow = out + (long long)row * p.states.stride[3];
#pragma unroll
            for (int j = 0; j < NJ; ++j) {
              const int col = n0 + wn0 + 8 * j + FragC::col(lane);  // dstate index
              const float v0 = acc[i][j].x[2 * half], v1 = acc[i][j].x[2 * half + 1];
              if (vec_out) {
                *reinterpret_cast<float2*>(orow + col) = make_float2(v0, v1);
              } else {
                orow[col] = v0;
                orow[col + 1] = v1;
              }
            }
          }
        }
        __syncthreads();  // s_w and the stage buffers are reused by the next tile
      }
    }
  }
}

}  // namespace ssd_kernels
