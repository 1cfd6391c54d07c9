// chunk_scan_fwd (math F5): per (batch b, chunk c, head h), group g = h / HEADS_PER_GROUP, valid
// positions l <= λ_c (t = cQ + l < L):
//
//   ŷ_l = e_l · Σ_n C[t, g, n] · P_c[p, n]                              (state part, contraction over n)
//       + Σ_{s ≤ l} CB[l, s] · exp(A(l) - A(s)) · Δ_s · x[cQ+s, h, p]      (intra part, contraction over s)
//   e_l = η_c(l) ? exp(A(l)) : 0,   η_c(l) = [seq_idx(t) == seq_idx(cQ-1)], seq_idx(-1) := 0
// evaluated with the row's 64-block r = 64 ⌊l / 64⌋ (a property of the position, not of a tile)
// factored out of the positions below it:
//   ŷ_l = f(l) · (e'_l · Σ_n C·P  +  Σ_{s < r} V(l, s) · x_s)  +  Σ_{r ≤ s ≤ l} W(l, s) · x_s   (r > 0)
//   ŷ_l =         e_l  · Σ_n C·P                             +  Σ_{0 ≤ s ≤ l} W(l, s) · x_s   (r = 0)
//   e'_l   = η_c(l) ? exp(A(r)) : 0,   f(l) = exp(min(A(l) - A(r), 88))
//   V(l,s) = CB[l, s] · u_r(s),   u_r(s) = exp(min(A(r) - A(s), 88)) · Δ_s  (s < r <= l: no mask)
//   W(l,s) = (s <= l) ? (CB[l, s] · exp(min(A(l) - A(s), 0))) · Δ_s : 0    (the direct form)
// (below r the product exp(A(l) - A(r)) · exp(A(r) - A(s)) is exp(A(l) - A(s)) unclamped, as the math,
// wherever A falls; the caps at 88 only keep a rising A (negative Δ) from overflowing to inf;
// one multiply per element of V instead of W's exp: most of the intra work lies below the block.)
//   y_l = ŷ_l + D ⊙ x_l (D per head or per (head, p));  out_l = y_l · (z_l · sigmoid(z_l)) with z
//   (and out_x_l = y_l), else out_l = y_l.  out / out_x are stored in x's dtype T.
//
// Operand precision (math §1.4, as upstream): P_c is converted to T before the mma (it comes in
// the state type S: fp32 or T); V(l, s) and W(l, s) are formed in fp32 (W selected: masked entries
// are 0, never multiplied), then rounded to T; both contractions accumulate in fp32 on the tensor
// cores. The e_l (e'_l) row scale multiplies the fp32 state-part accumulator before the intra part
// is added, f(l) the fp32 accumulator after the last position below r. exp is
// __expf (ex2.approx, like tl.exp); sigmoid is 1 / (1 + __expf(-z)) with an IEEE division (its bits,
// formed eight at a time without a branch per element: primitives/sigmoid.cuh).
//
// Reduction order per output (l, p), one fp32 accumulator starting from 0:
//   1. K loop over n in min(BLOCK_K, N) steps, increasing n, each a chain of K/16 mma.m16n8k16 in
//      increasing n;  2. multiply by e_l (e'_l where r > 0);  3. K loop over s = 0 .. r - 1 in BLOCK_K
//      steps (BLOCK_K divides 64), increasing s, each a chain of BLOCK_K/16 mma of V in increasing s;
//      then, where r > 0, multiply by f(l);  4. the K loop continued over s = r .. min(m0 + BLOCK_M,
//      λ_c + 1) - 1 with W (entries with s > l contribute exact zeros);  5. + x·D (fp32 FMA),
//      6. gating in fp32, one rounding to T. u_r(s) = __expf(min(A(r) - A(s), 88)) * Δ_s and
//      f(l) = __expf(min(A(l) - A(r), 88)) as fp32 expressions (the wgmma kernel forms u_r once per tile in shared
//      memory, this one per k16 slice: the same expression, the same bits).
// Tiles only move data: the chains above are the same for every (BLOCK_M, BLOCK_N, BLOCK_K), except
// that BLOCK_M decides how many all-zero s-steps are skipped (adding exact zeros changes nothing
// but the sign of a zero result).
//
// CB is read as 16-byte groups (l, s0..s0+3) and only when s0 <= l and l <= λ_c: tiles that
// bmm_chunk_fwd skips (all s > l) and padding rows are never read.
//
// Two implementations of this formula and this order: the mma.sync one below (sm_80, sm_90, and
// sm_90a shapes off the 64 grid), and on sm_90a chunk_scan_sm90a.cuh (wgmma: the same K=16 chains,
// HGMMA instead of HMMA; Spec::kWgmma, set by src/kernels/chunk_scan.cpp; its own tiles, launch and
// dynamic shared memory, fwd_geom::chunk_scan_wg_*). Whether the two give the same bits is what
// tests/gpu/test_ssd_forward.cpp's "sm_90a (wgmma) against sm_80 (mma.sync)" measures.
//
// Launch (mma.sync): block = fwd_geom::chunk_scan_threads() = 128 threads (4 warps; warp w owns rows
//         [w·BLOCK_M/4, (w+1)·BLOCK_M/4) of the tile and all BLOCK_N columns);
//         grid = (fwd_geom::chunk_scan_tiles(Q, P, BLOCK_M, BLOCK_N), batch * nchunks, nheads), each
//         axis grid-stride (x is walked with the longest l-tiles first); static shared memory
//         fwd_geom::chunk_scan_smem_bytes(Q, N, BLOCK_M, BLOCK_N, BLOCK_K, HAS_SEQ_IDX) <= 48 KiB,
//         no dynamic shared memory.
#pragma once

#include "ssd/forward_params.cuh"
#include "ssd/primitives/dtype.cuh"
#include "ssd/primitives/mma.cuh"
#include "ssd/primitives/sigmoid.cuh"
#include "ssd/primitives/spec.cuh"

namespace ssd_kernels {

namespace detail {

// 8 consecutive elements of a (b, L, h, p)-strided 16-bit tensor at `ptr` (element offset `off`,
// p-stride `sp`) as floats; one 16-byte load with vec.
template <class T>
__device__ __forceinline__ void load8(const T* ptr, long long off, long long sp, bool vec, float (&v)[8]) {
  if (vec) {
    const uint4 u = *reinterpret_cast<const uint4*>(ptr + off);
    ptx::unpack2<T>(u.x, v[0], v[1]);
    ptx::unpack2<T>(u.y, v[2], v[3]);
    ptx::unpack2<T>(u.z, v[4], v[5]);
    ptx::unpack2<T>(u.w, v[6], v[7]);
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = to_float(ptr[off + i * sp]);
  }
}
template <class T>
__device__ __forceinline__ void store8(T* ptr, long long off, long long sp, bool vec, const float (&v)[8]) {
  if (vec) {
    uint4 u;
    u.x = ptx::pack2<T>(v[0], v[1]);
    u.y = ptx::pack2<T>(v[2], v[3]);
    u.z = ptx::pack2<T>(v[4], v[5]);
    u.w = ptx::pack2<T>(v[6], v[7]);
    *reinterpret_cast<uint4*>(ptr + off) = u;
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) ptr[off + i * sp] = from_float<T>(v[i]);
  }
}
__device__ __forceinline__ bool vec16_bhlp(const void* ptr, long long sb, long long sl, long long sh, long long sp) {
  return aligned16(ptr) && sp == 1 && ((sb | sl | sh) & 7) == 0;
}

// Which of chunk_scan_fwd's tensors allow 16-byte copies: one decision for the mma.sync and the
// wgmma kernel (x, C, out, z, out_x as (b, l, h, p) rows; P in the state type S; CB in fp32).
struct ChunkScanVec {
  bool x, c, p, cb, out, z, ox;
};
template <class S, bool kZ, class Params>
__device__ __forceinline__ ChunkScanVec chunk_scan_vec(const Params& p) {
  ChunkScanVec v;
  v.x = vec16_bhlp(p.x.data, p.x.stride[0], p.x.stride[1], p.x.stride[2], p.x.stride[3]);
  v.c = vec16_bhlp(p.C.data, p.C.stride[0], p.C.stride[1], p.C.stride[2], p.C.stride[3]);
  constexpr long long SV = 16 / sizeof(S);  // elements per 16 bytes of the state type
  v.p = aligned16(p.states.data) &&
        ((p.states.stride[0] | p.states.stride[1] | p.states.stride[2] | p.states.stride[3]) & (SV - 1)) == 0;
  v.cb = aligned16(p.CB.data) && ((p.CB.stride[0] | p.CB.stride[1] | p.CB.stride[2] | p.CB.stride[3]) & 3) == 0;
  v.out = vec16_bhlp(p.out.data, p.out.stride[0], p.out.stride[1], p.out.stride[2], p.out.stride[3]);
  v.z = v.ox = true;
  if (kZ) {
    v.z = vec16_bhlp(p.z.data, p.z.stride[0], p.z.stride[1], p.z.stride[2], p.z.stride[3]);
    v.ox = vec16_bhlp(p.out_x.data, p.out_x.stride[0], p.out_x.stride[1], p.out_x.stride[2], p.out_x.stride[3]);
  }
  return v;
}

// The factored W's fp32 factors (the header's u_r(s), f(l)), one expression each for both kernels,
// whose bits must agree: u_r(s) = exp(min(A(r) - A(s), 88)) · Δ_s; f(l) = exp(min(A(l) - A(r), 88)).
// The cap changes nothing where A falls (every exponent <= 0 with Δ >= 0); where A rises by more than
// 88 inside a chunk (negative Δ) it keeps u_r finite, so a CB of 0 across a seq_idx boundary gives 0
// instead of 0 · inf = NaN (the direct form's min(·, 0) did the same).
__device__ __forceinline__ float factored_u(float a_r, float a_s, float dt_s) {
  return __expf(fminf(a_r - a_s, 88.0f)) * dt_s;
}
__device__ __forceinline__ float row_factor(float a_l, float a_r) { return __expf(fminf(a_l - a_r, 88.0f)); }

}  // namespace detail
}  // namespace ssd_kernels

// The wgmma implementation exists only for sm_90a (hopper.cuh refuses every other target).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#include "ssd/chunk_scan_sm90a.cuh"
#endif

namespace ssd_kernels {

// The mma.sync (HMMA) implementation: sm_80, sm_90, and sm_90a shapes the wgmma path does not take.
template <class Spec>
__device__ void chunk_scan_fwd_mma(const ChunkScanFwdParams& p) {
  SSD_TILE_SPEC_NAMES(Spec);  // Q, P, N, HEADS_PER_GROUP, BLOCK_M, BLOCK_N, BLOCK_K; T: bf16 or fp16
  using S = typename Spec::State;
  static_assert(fwd_geom::chunk_scan_tile_problem(Q, P, N, BLOCK_M, BLOCK_N, BLOCK_K, Spec::kSeqIdx) == nullptr,
                "illegal tile: the host's check (src/kernels) refuses it");
  using namespace fwd_geom;
  static_assert(same_type<S, float>::value || same_type<S, T>::value, "state type must be float or the element type");
  static_assert(Q % BLOCK_M == 0 && P % BLOCK_N == 0 && Q % BLOCK_K == 0, "tiles must divide Q, P");
  static_assert(BLOCK_M % 64 == 0 && BLOCK_M <= 128, "BLOCK_M must be 64 or 128 (4 warps of 16 or 32 rows)");
  static_assert(BLOCK_N % 16 == 0 && BLOCK_K % 16 == 0 && N % 16 == 0, "tiles must be multiples of 16");
  constexpr int NT = chunk_scan_threads();
  constexpr int WM = BLOCK_M / 4;
  constexpr int MI = WM / 16, NJ = BLOCK_N / 8;
  static_assert(MI * NJ * 4 <= 64, "accumulator over 64 registers per thread: lower BLOCK_M or BLOCK_N");
  constexpr int BKN = chunk_scan_block_kn(N, BLOCK_K);
  static_assert(N % BKN == 0, "BLOCK_K must divide dstate (or exceed it)");
  constexpr TwoPhaseBytes BYTES = chunk_scan_bytes(N, BLOCK_M, BLOCK_N, BLOCK_K);
  constexpr int STAGES = two_phase_stages(BYTES, Q, Spec::kSeqIdx);
  constexpr int LDA = BKN + kPad;      // C tile [l][n] and P tile [p][n], type T
  constexpr int LDCB = BLOCK_K + kPad;  // CB tile [l][s], fp32 (row stride = 8 mod 32 words)
  constexpr int LDX = BLOCK_N + kPad;   // x tile [s][p], type T
  constexpr int LDO = BLOCK_N + kPad;   // epilogue tile [l][p], fp32
  constexpr int STAGE_A = BYTES.stage_a;
  constexpr int STAGE_B = BYTES.stage_b;
  constexpr int BODY = two_phase_body_bytes(STAGES, BYTES);
  constexpr int TILES_N = P / BLOCK_N;
  constexpr int TILES_M = Q / BLOCK_M;
  constexpr int TILES = chunk_scan_tiles(Q, P, BLOCK_M, BLOCK_N);
  constexpr int KA = N / BKN;
  static_assert(chunk_scan_smem_bytes(Q, N, BLOCK_M, BLOCK_N, BLOCK_K, Spec::kSeqIdx) <= kMaxStaticSmem,
                "shared memory over 48 KiB: lower BLOCK_K");
  static_assert(STAGE_A % 16 == 0 && STAGE_B % 16 == 0 && (BLOCK_M * LDCB * 4) % 16 == 0, "stage alignment");

  __shared__ __align__(16) unsigned char s_body[BODY];
  __shared__ __align__(16) float s_dA[Q];
  __shared__ __align__(16) float s_dt[Q];
  __shared__ int s_seq[Spec::kSeqIdx ? Q : 1];

  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int wm0 = warp * WM;
  const int lg = lane >> 2, lt = lane & 3;

  const T* xg = static_cast<const T*>(p.x.data);
  const T* Cg = static_cast<const T*>(p.C.data);
  const S* Pg = static_cast<const S*>(p.states.data);
  const detail::ChunkScanVec vec = detail::chunk_scan_vec<S, Spec::kZ>(p);
  // Work indices are 32-bit (batch * nchunks and nheads < 2^31); offsets are 64-bit.
  const int batch = int(p.batch), nheads = int(p.nheads);
  const int nbc = int(p.batch * p.nchunks);

  for (int h = blockIdx.z; h < nheads; h += gridDim.z) {
    const int g = h / HEADS_PER_GROUP;
    float d_head = 0.f;
    if (Spec::kD && !Spec::kDPerHeaddim) d_head = p.D.data[h * p.D.stride[0]];
    for (int bc = blockIdx.y; bc < nbc; bc += gridDim.y) {
      SSD_CHUNK_COORDS(bc, batch, Q, p.seqlen);  // b, c, t0, valid: λ_c = valid - 1
      const float* dA = p.dA_cumsum.ptr(b, h, c);
      const float* dt = p.dt.ptr(b, h, c);
      const T* safe_x = xg + p.x.offset(b, 0, h);
      const T* safe_c = Cg + p.C.offset(b, 0, g);
      const float* cb_base = p.CB.ptr(b, c, g);
      int q_prev = 0;
      if (Spec::kSeqIdx && c > 0) q_prev = p.seq_idx(b, t0 - 1);

      for (int tile = blockIdx.x; tile < TILES; tile += gridDim.x) {
        const int m0 = (TILES_M - 1 - tile / TILES_N) * BLOCK_M;  // longest rows first
        const int p0 = (tile % TILES_N) * BLOCK_N;
        if (m0 >= valid) continue;  // rows all padding (uniform over the block; no shared memory touched)
        const int kend = (m0 + BLOCK_M < valid) ? m0 + BLOCK_M : valid;  // positions s < kend are needed

        // Per-position fp32 data of the whole chunk (visible after the first barrier of phase A).
        for (int l = tid; l < Q; l += NT) {
          s_dA[l] = dA[l];
          s_dt[l] = dt[l];
          if (Spec::kSeqIdx) s_seq[l] = l < valid ? p.seq_idx(b, t0 + l) : -1;
        }

        FragC acc[MI][NJ];
        warp::zero_tile(acc);

        // ---------------- Phase A: acc = C_tile · P_cᵀ (contraction over n) ----------------
        {
          const T* ct = safe_c + (t0 + m0) * p.C.stride[1];
          const S* pt = Pg + p.states.offset(b, c, h, p0);
          auto sC = [&](int buf) { return reinterpret_cast<T*>(s_body + buf * STAGE_A); };
          auto sP = [&](int buf) { return reinterpret_cast<T*>(s_body + buf * STAGE_A) + BLOCK_M * LDA; };
          // fp32 states: register-staged copy (load before the compute, convert + store after it).
          constexpr int PCH = BLOCK_N * BKN / 4;  // 16-byte fp32 chunks per P tile
          constexpr int PIT = (PCH + NT - 1) / NT;
          float4 preg[same_type<S, float>::value ? PIT : 1];
          auto p_fetch = [&](int ks) {
            if constexpr (same_type<S, float>::value) {
              const S* src = pt + ks * BKN;
#pragma unroll
              for (int it = 0; it < PIT; ++it) {
                const int i = it * NT + tid;
                if (PCH % NT == 0 || i < PCH) {
                  const int r = i / (BKN / 4), cc = (i % (BKN / 4)) * 4;
                  const S* q = src + (long long)r * p.states.stride[3] + cc;
                  if (vec.p) {
                    preg[it] = *reinterpret_cast<const float4*>(q);
                  } else {
                    preg[it] = make_float4(q[0], q[1], q[2], q[3]);
                  }
                }
              }
            }
          };
          auto p_store = [&](int buf) {
            if constexpr (same_type<S, float>::value) {
              T* dst = sP(buf);
#pragma unroll
              for (int it = 0; it < PIT; ++it) {
                const int i = it * NT + tid;
                if (PCH % NT == 0 || i < PCH) {
                  const int r = i / (BKN / 4), cc = (i % (BKN / 4)) * 4;
                  uint2 u;
                  u.x = ptx::pack2<T>(preg[it].x, preg[it].y);
                  u.y = ptx::pack2<T>(preg[it].z, preg[it].w);
                  *reinterpret_cast<uint2*>(dst + r * LDA + cc) = u;
                }
              }
            }
          };
          auto load_stage = [&](int buf, int ks) {
            const int k0 = ks * BKN;
            block::load_tile<NT, BLOCK_M, BKN, LDA>(sC(buf), ct + k0 * p.C.stride[3], p.C.stride[1], p.C.stride[3], vec.c,
                                                    safe_c, [&](int r, int) { return m0 + r < valid; });
            if constexpr (!same_type<S, float>::value) {
              block::load_tile<NT, BLOCK_N, BKN, LDA>(sP(buf), pt + k0, p.states.stride[3], 1, vec.p, pt,
                                                      [&](int, int) { return true; });
            }
          };

          // The prologue's steps also store their P tile at once; a later step fetches it with its
          // copies and stores it after the step's math (register staging of the P conversion).
          const block::CpAsyncPipeline<STAGES> ring{KA};
          ring.prologue([&](int buf, int st) {
            load_stage(buf, st);
            p_fetch(st);
            p_store(st);
          });
          for (int ks = 0; ks < KA; ++ks) {
            const int kn = ks + STAGES - 1;
            ring.begin(ks, [&](int buf, int step) {
              load_stage(buf, step);
              p_fetch(step);
            });
            const T* sc = sC(ks % STAGES);
            const T* sp = sP(ks % STAGES);
#pragma unroll
            for (int kk = 0; kk < BKN; kk += 16) {
              SSD_WARP_MMA_K16(T, acc, warp::load_a(a[i], sc + (wm0 + 16 * i) * LDA + kk, LDA),
                               warp::load_b2(bf[j], bf[j + 1], sp + (8 * j) * LDA + kk, LDA));
            }
            if (kn < KA) p_store(kn % STAGES);  // buffer kn % STAGES is not read in this step
          }
          ring.drain();
          __syncthreads();  // phase-A buffers are reused by phase B
        }

        // The warp's rows lie in one 64-block r (WM <= 32 rows from a multiple of WM). Row scale: e_l =
        // exp(A(l)) where r = 0, else exp(A(r)), the row factor f(l) = exp(A(l) - A(r)) following the
        // steps below r; the rows' A(l) for the direct W of the steps from r on.
        const int r_w = (m0 + wm0) & ~63;
        float a_row[MI][2];
#pragma unroll
        for (int i = 0; i < MI; ++i) {
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int l = m0 + wm0 + 16 * i + lg + 8 * half;
            const float al = s_dA[l];
            a_row[i][half] = al;
            bool keep = l < valid;
            if (Spec::kSeqIdx) keep = keep && s_seq[l] == q_prev;
            const float e = keep ? __expf(r_w > 0 ? s_dA[r_w] : al) : 0.f;
#pragma unroll
            for (int j = 0; j < NJ; ++j) {
              acc[i][j].x[2 * half] *= e;
              acc[i][j].x[2 * half + 1] *= e;
            }
          }
        }

        // ---------------- Phase B: acc += W · X (contraction over s) ----------------
        {
          const int kb = (kend + BLOCK_K - 1) / BLOCK_K;
          const float* cbt = cb_base + (long long)m0 * p.CB.stride[3];
          const T* xt = safe_x + t0 * p.x.stride[1] + p0 * p.x.stride[3];
          auto sCB = [&](int buf) { return reinterpret_cast<float*>(s_body + buf * STAGE_B); };
          auto sX = [&](int buf) { return reinterpret_cast<T*>(s_body + buf * STAGE_B + BLOCK_M * LDCB * 4); };
          auto load_stage = [&](int buf, int ks) {
            const int k0 = ks * BLOCK_K;
            block::load_tile<NT, BLOCK_M, BLOCK_K, LDCB>(sCB(buf), cbt + k0, p.CB.stride[3], 1, vec.cb, cb_base,
                                                         [&](int r, int c0) {
                                                           return k0 + c0 <= m0 + r && m0 + r < valid;
                                                         });
            block::load_tile<NT, BLOCK_K, BLOCK_N, LDX>(sX(buf), xt + k0 * p.x.stride[1], p.x.stride[1], p.x.stride[3],
                                                        vec.x, safe_x, [&](int r, int) { return k0 + r < valid; });
          };

          const block::CpAsyncPipeline<STAGES> ring{kb};
          ring.prologue(load_stage);
          for (int ks = 0; ks < kb; ++ks) {
            ring.begin(ks, load_stage);
            const float* scb = sCB(ks % STAGES);
            const T* sx = sX(ks % STAGES);
            if (r_w > 0 && ks * BLOCK_K == r_w) {  // the steps below r are done: × f(l) = exp(A(l) - A(r))
              const float a_r = s_dA[r_w];
#pragma unroll
              for (int i = 0; i < MI; ++i) {
                const float f0 = detail::row_factor(a_row[i][0], a_r), f1 = detail::row_factor(a_row[i][1], a_r);
#pragma unroll
                for (int j = 0; j < NJ; ++j) {
                  acc[i][j].x[0] *= f0;
                  acc[i][j].x[1] *= f0;
                  acc[i][j].x[2] *= f1;
                  acc[i][j].x[3] *= f1;
                }
              }
            }
            // Wholly below the warp's 64-block (BLOCK_K divides 64): the factored W, else the direct one.
            const bool below = ks * BLOCK_K < r_w;
#pragma unroll
            for (int kk = 0; kk < BLOCK_K; kk += 16) {
              const int s01 = ks * BLOCK_K + kk + 2 * lt;  // chunk positions of columns 2t, 2t+1 (+8, +9)
              const float2 as01 = *reinterpret_cast<const float2*>(s_dA + s01);
              const float2 as89 = *reinterpret_cast<const float2*>(s_dA + s01 + 8);
              const float2 dt01 = *reinterpret_cast<const float2*>(s_dt + s01);
              const float2 dt89 = *reinterpret_cast<const float2*>(s_dt + s01 + 8);
              // u_r(s): the wgmma kernel's shared row, by the same expression (detail::factored_u).
              float u0 = 0.f, u1 = 0.f, u8 = 0.f, u9 = 0.f;
              if (below) {
                const float a_r = s_dA[r_w];
                u0 = detail::factored_u(a_r, as01.x, dt01.x), u1 = detail::factored_u(a_r, as01.y, dt01.y);
                u8 = detail::factored_u(a_r, as89.x, dt89.x), u9 = detail::factored_u(a_r, as89.y, dt89.y);
              }
              FragB bf[NJ];
#pragma unroll
              for (int j = 0; j < NJ; j += 2) warp::load_b2_trans(bf[j], bf[j + 1], sx + kk * LDX + 8 * j, LDX);
#pragma unroll
              for (int i = 0; i < MI; ++i) {
                FragA a;
#pragma unroll
                for (int half = 0; half < 2; ++half) {
                  const int r = wm0 + 16 * i + lg + 8 * half;  // row inside the tile
                  const int l = m0 + r;
                  const float al = a_row[i][half];
                  const float* cbr = scb + r * LDCB + kk + 2 * lt;
                  const float2 c01 = *reinterpret_cast<const float2*>(cbr);
                  const float2 c89 = *reinterpret_cast<const float2*>(cbr + 8);
                  float w0, w1, w8, w9;
                  if (below) {  // s < r <= l: no mask
                    w0 = c01.x * u0, w1 = c01.y * u1, w8 = c89.x * u8, w9 = c89.y * u9;
                  } else {
                    w0 = s01 <= l ? c01.x * __expf(fminf(al - as01.x, 0.f)) * dt01.x : 0.f;
                    w1 = s01 + 1 <= l ? c01.y * __expf(fminf(al - as01.y, 0.f)) * dt01.y : 0.f;
                    w8 = s01 + 8 <= l ? c89.x * __expf(fminf(al - as89.x, 0.f)) * dt89.x : 0.f;
                    w9 = s01 + 9 <= l ? c89.y * __expf(fminf(al - as89.y, 0.f)) * dt89.y : 0.f;
                  }
                  a.x[half] = ptx::pack2<T>(w0, w1);      // a[0] (row g) / a[1] (row g+8), k = 2t, 2t+1
                  a.x[2 + half] = ptx::pack2<T>(w8, w9);  // a[2] / a[3], k = 2t+8, 2t+9
                }
#pragma unroll
                for (int j = 0; j < NJ; ++j) warp::mma<T>(acc[i][j], a, bf[j]);
              }
            }
          }
          ring.drain();
          __syncthreads();  // phase-B buffers are reused by the epilogue tile
        }

        // ---------------- Epilogue: D, z, 16-byte stores ----------------
        float* so = reinterpret_cast<float*>(s_body);
#pragma unroll
        for (int i = 0; i < MI; ++i) {
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int r = wm0 + 16 * i + lg + 8 * half;
#pragma unroll
            for (int j = 0; j < NJ; ++j)
              *reinterpret_cast<float2*>(so + r * LDO + 8 * j + 2 * lt) =
                  make_float2(acc[i][j].x[2 * half], acc[i][j].x[2 * half + 1]);
          }
        }
        __syncthreads();
        {
          constexpr int CPR = BLOCK_N / 8;
          constexpr int TOTAL = BLOCK_M * CPR;
          for (int i = tid; i < TOTAL; i += NT) {
            const int r = i / CPR, cc = (i % CPR) * 8;
            const int l = m0 + r;
            if (l >= valid) continue;
            const long long t = t0 + l;
            const long long pp = p0 + cc;
            float y[8];
            {
              const float4 y0 = *reinterpret_cast<const float4*>(so + r * LDO + cc);
              const float4 y1 = *reinterpret_cast<const float4*>(so + r * LDO + cc + 4);
              y[0] = y0.x, y[1] = y0.y, y[2] = y0.z, y[3] = y0.w;
              y[4] = y1.x, y[5] = y1.y, y[6] = y1.z, y[7] = y1.w;
            }
            if (Spec::kD) {
              float xv[8];
              detail::load8<T>(xg, p.x.offset(b, t, h, pp),
                               p.x.stride[3], vec.x, xv);
#pragma unroll
              for (int v = 0; v < 8; ++v) {
                const float d = Spec::kDPerHeaddim ? p.D(h, pp + v) : d_head;
                y[v] = __fmaf_rn(xv[v], d, y[v]);
              }
            }
            if (Spec::kZ) {
              detail::store8<T>(static_cast<T*>(p.out_x.data),
                                p.out_x.offset(b, t, h, pp),
                                p.out_x.stride[3], vec.ox, y);
              float zv[8];
              detail::load8<T>(static_cast<const T*>(p.z.data),
                               p.z.offset(b, t, h, pp), p.z.stride[3],
                               vec.z, zv);
              silu_gate<8>(y, zv);  // y · (z · (1 / (1 + __expf(−z)))), the IEEE division's bits
            }
            detail::store8<T>(static_cast<T*>(p.out.data),
                              p.out.offset(b, t, h, pp),
                              p.out.stride[3], vec.out, y);
          }
        }
        __syncthreads();  // the epilogue tile and the per-position arrays are reused by the next tile
      }
    }
  }
}

template <class Spec, class Params>  // Params: ChunkScanFwdTmaParams with Spec::kTma, else ChunkScanFwdParams
__device__ void chunk_scan_fwd(const Params& p) {
  if constexpr (spec_detail::optional_kWgmma<Spec>(0)) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    chunk_scan_fwd_wgmma<Spec>(p);  // deduces Params
#else
    static_assert(!spec_detail::optional_kWgmma<Spec>(0), "the wgmma chunk_scan_fwd needs the sm_90a target");
#endif
  } else {
    chunk_scan_fwd_mma<Spec>(p);
  }
}

}  // namespace ssd_kernels
