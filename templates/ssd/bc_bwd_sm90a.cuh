// chunk_state_bwd_db / chunk_scan_bwd_dc on sm_90a: the same computation as bc_bwd.cuh (read its
// header for the math and the reduction order of every output), with every K chain on wgmma instead
// of mma.sync. Included by bc_bwd.cuh only when NVRTC compiles for sm_90a (__CUDA_ARCH_FEAT_SM90_ALL);
// the families select it by Spec::kWgmma (src/kernels/bc_bwd.cpp: arch sm_90a, chunk_size, headdim
// and dstate multiples of 64: bwd_geom::bc_wgmma_shape).
//
// The same order, term for term, per output (pos, n), one fp32 accumulator acc = +0.0:
//   1. heads i = g·R .. g·R+R−1 in increasing order: chain = +0.0 (zeroed with ordinary stores, so
//      the first wgmma adds to +0.0 as the mma.sync chain does), then one wgmma m64nNk16 per 16 p in
//      increasing p (A = x|dy [pos][p] K-major, B = ds|P [p][n] MN-major, both 128-byte swizzled);
//      acc = __fmaf_rn(scale_i(pos), chain, acc) with the mma.sync kernel's scales (BcRowScales);
//   2. the dCB term continues acc as one wgmma chain in increasing 16-position steps over the same
//      K blocks as there (dB: l from the tile's first row m0 up to λ; dC: s from 0 up to
//      min(m0 + BLOCK_M, λ + 1) − 1), dCB entries outside s <= l <= λ zero-filled (never read);
//      A = dCB [l][s] K-major (dC) or as [s][l] MN-major (dB: the transposed operand), B = C|B
//      [pos][n] MN-major;
//   3. out = rn_T(acc).
// The bits equal the mma.sync kernel's where one wgmma k16 step accumulates as one mma.m16n8k16 does
// (the GPU test "ssd_backward on sm_90a" compares every gradient with an sm_90 run). The K step is 64
// in both phases; a block with a larger BLOCK_K there only groups the same 16-steps differently, and
// the dCB blocks start at 64-aligned positions (m0, a multiple of 64), so the all-zero blocks that
// join or leave the chain are exact zeros as there (zero-filled dCB times finite C|B rows; an Inf or
// NaN there makes the result tile-dependent, as between the mma.sync tiles).
//
// Geometry: BLOCK_M / 64 warpgroups, warpgroup w the tile rows m0 + 64 w .. + 63 x BLOCK_N columns
// (WgAcc<BLOCK_N>: chain and acc). Shared memory (dynamic, 1024-aligned): a ring of
// bwd_geom::bc_wgmma_stages stages over the flat step sequence (head 0's p blocks, ..., head R−1's,
// then the dCB K blocks), each stage the A tile (BLOCK_M x 64, or 64 x BLOCK_M for dB's dCB) and the
// B tile (64 x BLOCK_N in 64-column swizzled blocks), then four buffers of row scales. The ring is
// the wgmma state passes' protocol: at the top of step s every thread waits for its copies of step s,
// fences them for the async proxy, waits for its warpgroup's wgmma but the last group, and after the
// block barrier refills step s−2's buffer with step s + STAGES − 2. A head's last step waits for its
// chain (wait_group 0) before the fma.
//
// Launch: block = bwd_geom::bc_wgmma_threads(BLOCK_M) threads; grid as bc_bwd.cuh's; dynamic shared
// memory bwd_geom::bc_wgmma_smem_bytes(BLOCK_M, BLOCK_N).
#pragma once

#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "ssd/bc_bwd_sm90a.cuh needs the sm_90a target (wgmma)"
#endif

#include "ssd/backward_params.cuh"
#include "ssd/chunk_scan_sm90a.cuh"  // sm90a_detail::load_tile_sw128
#include "ssd/primitives/hopper.cuh"

namespace ssd_kernels {
namespace detail {

// The kernel's tiles with the copies' path fixed: VEC, every tile copy by cp.async (all four inputs
// 16-byte aligned rows), or every one element-wise. One path per instantiation: with both at each
// copy site ptxas held both paths' addresses across the K loops (~50 more registers; spills).
template <class Spec, bool VEC>
__device__ __forceinline__ void bc_bwd_wgmma_tiles(const BcBwdParams& p) {
  SSD_TILE_SPEC_NAMES(Spec);  // Q, P, N, HEADS_PER_GROUP, BLOCK_M, BLOCK_N, BLOCK_K; T: bf16 or fp16
  using namespace bwd_geom;
  static_assert(bc_wgmma_tile_problem(Q, P, N, BLOCK_M, BLOCK_N, BLOCK_K) == nullptr,
                "illegal tile: the host's check (src/kernels) refuses it");
  constexpr int R = HEADS_PER_GROUP;
  constexpr int NT = bc_wgmma_threads(BLOCK_M);
  constexpr int KB = 64;          // K step of both phases: one swizzled column block
  constexpr int KP = P / KB;      // p steps per head
  constexpr int KH = R * KP;      // steps of the head phase
  constexpr int STAGES = bc_wgmma_stages(BLOCK_M, BLOCK_N);
  static_assert(STAGES >= 3, "the ring keeps one stage under wgmma while the next is multiplied");
  constexpr int A_BYTES = BLOCK_M * 128;  // A tile: BLOCK_M x 64 (or 64 x BLOCK_M) 16-bit elements
  constexpr int STAGE = bc_wgmma_stage_bytes(BLOCK_M, BLOCK_N);
  static_assert(A_BYTES % 1024 == 0 && STAGE % 1024 == 0, "stages keep the 1024-byte swizzle alignment");
  constexpr int TILES_N = N / BLOCK_N;
  constexpr int TILES_M = Q / BLOCK_M;
  constexpr int TILES = bc_tiles(Q, N, BLOCK_M, BLOCK_N);
  using Acc = WgAcc<BLOCK_N>;
  using Scales = detail::BcRowScales<Spec::kIsDC, Spec::kSeqIdx, Q, BLOCK_M, NT>;

  extern __shared__ unsigned char smem_dynamic[];
  unsigned char* const smem = smem::align1024(smem_dynamic);
  float* const s_scale = reinterpret_cast<float*>(smem + STAGES * STAGE);  // [4][BLOCK_M]: head i's in i % 4
  const int tid = threadIdx.x;
  const int wg = tid >> 7;  // this thread's warpgroup: tile rows 64 wg .. 64 wg + 63

  const T* xyg = static_cast<const T*>(p.xy.data);
  const T* dcbg = static_cast<const T*>(p.dCB.data);
  const T* og = static_cast<const T*>(p.other.data);
  const T* st_t = static_cast<const T*>(p.state.data);  // dB: ds, dC: P (both T)
  const bool vec_out = (reinterpret_cast<unsigned long long>(p.out.data) & 3ull) == 0 && p.out.stride[3] == 1 &&
                       ((p.out.stride[0] | p.out.stride[1] | p.out.stride[2]) & 1) == 0;
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
        const int kd = Spec::kIsDC ? ((m0 + BLOCK_M < valid ? m0 + BLOCK_M : valid) + KB - 1) / KB
                                   : (valid - m0 + KB - 1) / KB;
        const int ksteps = KH + kd;
        const T* ot = safe_o + t0 * p.other.stride[1] + n0 * p.other.stride[3];
        const T* xyt = xyg + p.xy.offset(b, t0 + m0, g * R, 0);
        const T* stt = st_t + p.state.offset(b, c, g * R, 0) + n0;

        // Step k's tiles into ring buffer `buf`.
        auto load_stage = [&](int buf, int k) {
          unsigned char* sa = smem + buf * STAGE;
          unsigned char* sb = sa + A_BYTES;
          if (k < KH) {
            const int hi = k / KP, pk = k % KP;
            const T* src = xyt + hi * p.xy.stride[2] + pk * KB * p.xy.stride[3];
            sm90a_detail::load_tile_sw128<NT, BLOCK_M>(sa, src, p.xy.stride[1], p.xy.stride[3], VEC, safe_xy,
                                                       [&](int r, int) { return m0 + r < valid; });
            const T* ssrc = stt + hi * p.state.stride[2] + pk * KB * p.state.stride[3];
#pragma unroll
            for (int j = 0; j < BLOCK_N / 64; ++j)
              sm90a_detail::load_tile_sw128<NT, KB>(sb + j * KB * 128, ssrc + 64 * j, p.state.stride[3], 1, VEC,
                                                    st_t, [](int, int) { return true; });
          } else {
            const int k0 = (Spec::kIsDC ? 0 : m0) + (k - KH) * KB;  // the step's first l (dB) or s (dC)
            if constexpr (Spec::kIsDC) {
              // A = dCB rows l = m0 + r, columns s = k0 + cc (K-major)
              sm90a_detail::load_tile_sw128<NT, BLOCK_M>(sa, dcb + (long long)m0 * p.dCB.stride[3] + k0,
                                                         p.dCB.stride[3], 1, VEC, dcbg, [&](int r, int c0) {
                                                           return k0 + c0 <= m0 + r && m0 + r < valid;
                                                         });
            } else {
              // A = dCBᵀ: rows l = k0 + r, columns s = m0 + cc, 64-column blocks of s (MN-major)
#pragma unroll
              for (int j = 0; j < BLOCK_M / 64; ++j)
                sm90a_detail::load_tile_sw128<NT, KB>(sa + j * KB * 128,
                                                      dcb + (long long)k0 * p.dCB.stride[3] + m0 + 64 * j,
                                                      p.dCB.stride[3], 1, VEC, dcbg, [&](int r, int c0) {
                                                        return m0 + 64 * j + c0 <= k0 + r && k0 + r < valid;
                                                      });
            }
#pragma unroll
            for (int j = 0; j < BLOCK_N / 64; ++j)
              sm90a_detail::load_tile_sw128<NT, KB>(sb + j * KB * 128,
                                                    ot + k0 * p.other.stride[1] + 64 * j * p.other.stride[3],
                                                    p.other.stride[1], p.other.stride[3], VEC, safe_o,
                                                    [&](int r, int) { return k0 + r < valid; });
          }
        };

#pragma unroll 1
        for (int st = 0; st < STAGES - 2; ++st) {
          if (st < ksteps) load_stage(st, st);
          ptx::cp_async_commit();
        }
        // Row scales: head i's in buffer i % 4 of s_scale, stored two heads ahead of its fma from
        // registers fetched one head before that (a head is one or two K steps: fetched next to their
        // use, as in the mma.sync kernel, each was a global round trip the wgmma waited for). Buffer
        // (i + 2) % 4 is written at head i's first step, after its barrier; its last reader, head
        // i − 2's fma, ran before head i − 1's first barrier.
        Scales scales;
        scales.init(p, b, t0, m0, valid, q_ref, tid);
#pragma unroll
        for (int hi = 0; hi < 2 && hi < R; ++hi) {
          scales.fetch(p, chunk_bc, g * R + hi, m0, tid);
          scales.store(s_scale + hi * BLOCK_M, tid);  // visible after the first barrier of the loop
        }
        if (R > 2) scales.fetch(p, chunk_bc, g * R + 2, m0, tid);
        Acc chain, acc;
        chain.zero();
        acc.zero();
        // The top of step s: its copies landed and are handed to the async proxy; at most step s−1's
        // group still runs, so step s−2's buffer, refilled once every thread passed the barrier, is free.
        auto step_begin = [&](int s) {
          ptx::cp_async_wait<STAGES - 3>();
          ptx::fence_proxy_async_shared();
          warpgroup::wait_group<1>();
          warpgroup::fence_operand(chain);
          warpgroup::fence_operand(acc);
          __syncthreads();
          const int ahead = s + STAGES - 2;
          if (ahead < ksteps) load_stage(ahead % STAGES, ahead);
          ptx::cp_async_commit();
        };

        // ---- Head phase: per head, chain = xy · state over p; acc = fma(scale, chain, acc) ----
        for (int hi = 0; hi < R; ++hi) {
#pragma unroll
          for (int pk = 0; pk < KP; ++pk) {
            const int k = hi * KP + pk;
            step_begin(k);
            const unsigned char* sa = smem + (k % STAGES) * STAGE;
            // Descriptor low words (smem::desc_k_major_sw128 / desc_mn_major_sw128's, formed with 32-bit
            // adds): x|dy K-major (a k16 slice 32 bytes further), the state MN-major (16 rows further).
            const unsigned x_lo = smem::desc_lo_sw128(ptx::smem_addr(sa + wg * 64 * 128), 16);
            const unsigned s_lo = smem::desc_lo_sw128(ptx::smem_addr(sa + A_BYTES), KB * 128);
            warpgroup::fence();
#pragma unroll
            for (int kk = 0; kk < KB; kk += 16)
              warpgroup::mma_ss<T, 0, 1>(chain, smem::desc_sw128(x_lo + kk * 2 / 16),
                                         smem::desc_sw128(s_lo + kk * 128 / 16), true);
            warpgroup::commit_group();
            warpgroup::fence_operand(chain);
            if (pk == 0 && hi + 2 < R) {
              scales.store(s_scale + ((hi + 2) & 3) * BLOCK_M, tid);
              if (hi + 3 < R) scales.fetch(p, chunk_bc, g * R + hi + 3, m0, tid);
            }
          }
          // acc = fma(scale_hi(pos), chain, acc); the next head's chain starts from +0.0.
          warpgroup::wait_group<0>();
          warpgroup::fence_operand(chain);
          const float* scl = s_scale + (hi & 3) * BLOCK_M + 64 * wg;
          const float sc_lo = scl[Acc::row(0)], sc_hi = scl[Acc::row(2)];
#pragma unroll
          for (int i = 0; i < Acc::kRegs; ++i) {
            acc.x[i] = __fmaf_rn((i & 2) ? sc_hi : sc_lo, chain.x[i], acc.x[i]);
            chain.x[i] = 0.f;
          }
          warpgroup::fence_operand(chain);
          warpgroup::fence_operand(acc);
        }

        // ---- dCB phase: acc += dCB-operand · (C | B), K steps in increasing position ----
        for (int k = KH; k < ksteps; ++k) {
          step_begin(k);
          const unsigned char* sa = smem + (k % STAGES) * STAGE;
          // Descriptor low words as in the head phase: dC's dCB operand K-major, dB's MN-major
          // (transposed); the other operand (C | B) MN-major.
          const unsigned d_lo =
              smem::desc_lo_sw128(ptx::smem_addr(sa + wg * 64 * 128), Spec::kIsDC ? 16u : unsigned(KB * 128));
          const unsigned o_lo = smem::desc_lo_sw128(ptx::smem_addr(sa + A_BYTES), KB * 128);
          warpgroup::fence();
#pragma unroll
          for (int kk = 0; kk < KB; kk += 16) {
            if constexpr (Spec::kIsDC)
              warpgroup::mma_ss<T, 0, 1>(acc, smem::desc_sw128(d_lo + kk * 2 / 16),
                                         smem::desc_sw128(o_lo + kk * 128 / 16), true);
            else
              warpgroup::mma_ss<T, 1, 1>(acc, smem::desc_sw128(d_lo + kk * 128 / 16),
                                         smem::desc_sw128(o_lo + kk * 128 / 16), true);
          }
          warpgroup::commit_group();
          warpgroup::fence_operand(acc);
        }
        ptx::cp_async_wait<0>();
        warpgroup::wait_group<0>();
        warpgroup::fence_operand(acc);

        // ---- Store rows pos <= λ, rounded to T (pairs of columns per 32-bit store when aligned). ----
        T* out = p.out.ptr_as<T>(b, 0, g);
#pragma unroll
        for (int i = 0; i < Acc::kRegs; i += 2) {
          const int pos = m0 + 64 * wg + Acc::row(i);
          if (pos < valid) {
            T* orow = out + (t0 + pos) * p.out.stride[1];
            const int col = n0 + Acc::col(i);
            if (vec_out) {
              *reinterpret_cast<unsigned*>(orow + col) = ptx::pack2<T>(acc.x[i], acc.x[i + 1]);
            } else {
              orow[col * p.out.stride[3]] = from_float<T>(acc.x[i]);
              orow[(col + 1) * p.out.stride[3]] = from_float<T>(acc.x[i + 1]);
            }
          }
        }
        __syncthreads();  // the stage ring and the scale buffers are reused by the next tile
      }
    }
  }
}

}  // namespace detail

template <class Spec>
__device__ void bc_bwd_wgmma(const BcBwdParams& p) {
  using T = typename Spec::Element;
  const bool vec = vec16_rows(static_cast<const T*>(p.xy.data), p.xy) && aligned16(p.state.data) &&
                   ((p.state.stride[0] | p.state.stride[1] | p.state.stride[2] | p.state.stride[3]) & 7) == 0 &&
                   aligned16(p.dCB.data) &&
                   ((p.dCB.stride[0] | p.dCB.stride[1] | p.dCB.stride[2] | p.dCB.stride[3]) & 7) == 0 &&
                   aligned16(p.other.data) && p.other.stride[3] == 1 &&
                   ((p.other.stride[0] | p.other.stride[1] | p.other.stride[2]) & 7) == 0;
  if (vec) {
    detail::bc_bwd_wgmma_tiles<Spec, true>(p);
  } else {
    detail::bc_bwd_wgmma_tiles<Spec, false>(p);
  }
}

}  // namespace ssd_kernels
