// bmm_chunk_fwd on sm_90a: the same computation as bmm_chunk.cuh (read its header for the math) with
// the n chain on wgmma instead of mma.sync. Included by bmm_chunk.cuh only when NVRTC compiles for
// sm_90a (__CUDA_ARCH_FEAT_SM90_ALL); the family selects it by Spec::kWgmma (src/kernels/bmm_chunk.cpp:
// arch sm_90a, chunk 128 or 256, dstate a multiple of 64, tile 64 x 64 x 64: fwd_geom::bmm_chunk_uses_wgmma;
// the forward takes it where its grid fills the GPU, src/ops/ssd_forward.cpp's bmm_config).
//
//   CB[b, c, g, l, s] = σ_c(l, s) · Σ_n C[b, cQ+l, g, n] · B[b, cQ+s, g, n]        (fp32 out)
//
// The same order, term for term: each output is one fp32 chain over n in 16-wide steps, increasing n,
// from an accumulator zeroed by ordinary stores (WgAcc::zero, so the first wgmma adds to +0.0 as the
// first mma.m16n8k16 does), one wgmma m64nNk16 per 16 n and accumulator part (N = 64 … 256 columns of a
// band: BmmBandAcc; the N split changes no element's chain). Its bits equal the mma.sync kernel's where
// one wgmma k16 step accumulates as one mma.m16n8k16 does (the GPU tests compare the two kernels' CB
// element for element). σ is the same select; the written entries are the mma.sync kernel's at its
// default 64 x 64 tile: every 64 x 64 tile (i, j) with j <= i, in full.
//
// Geometry: the chunk's Q / 64 row bands are taken in pairs (band lo, band NB - 1 - lo), so that every
// block owns NB + 1 tiles of 64 x 64 (band lo's lo + 1 and band hi's hi + 1): the same work for every
// block, and the C rows of two bands and the B rows 0 .. 64·hi + 63 are read once for all of them.
// One warpgroup (128 threads) per block; a band's tiles are one or two accumulators (m64n64 .. n256,
// BmmBandAcc), 32 registers per tile, in registers over the n chain. The N split of a wgmma does not
// change any element's chain. Shared memory (dynamic, 1024-aligned): two stages of 64 n columns, each
// the two C bands (128 rows) then the B rows (Q rows reserved), as 128-byte swizzled K-major tiles
// (rows of 64 n, what wgmma reads with desc_sw128); cp.async 16-byte copies, rows past the valid
// length zero-filled. Step ks: wait for its copies, fence them for the async proxy, block barrier
// (every wgmma of step ks - 1 is complete: its buffer may be refilled), issue step ks + 1's copies
// into that buffer, then the step's wgmma (per k16 slice one or two per band), commit, wait.
//
// Launch: block = fwd_geom::bmm_chunk_wgmma_threads; grid = (fwd_geom::bmm_chunk_wgmma_pairs(Q),
// batch * nchunks, ngroups), each axis grid-stride; dynamic shared memory
// fwd_geom::bmm_chunk_wgmma_smem_bytes(Q).
#pragma once

#include "ssd/chunk_scan_sm90a.cuh"  // sm90a_detail::load_tile_sw128
#include "ssd/forward_params.cuh"
#include "ssd/primitives/dtype.cuh"
#include "ssd/primitives/hopper.cuh"
#include "ssd/primitives/spec.cuh"

namespace ssd_kernels {

namespace sm90a_detail {

// A band's T column tiles (columns 0 .. 64T - 1 of its 64 rows) as at most two wgmma accumulators: the
// widest wrappers that cover them (T = 1: 64; 2: 128; 3: 128 + 64; 4: 256), so that a k16 step is one
// or two wgmma per band instead of T (each wgmma's descriptors are registers while it is issued).
SSD_HOST_DEVICE constexpr int bmm_band_w0(int t) { return t == 1 ? 64 : t == 4 ? 256 : 128; }
SSD_HOST_DEVICE constexpr int bmm_band_w1(int t) { return t == 3 ? 64 : 0; }
template <int W>
struct BmmBandPart {
  WgAcc<W> acc;
};
template <>
struct BmmBandPart<0> {};
template <int T>
struct BmmBandAcc {
  static constexpr int W0 = bmm_band_w0(T), W1 = bmm_band_w1(T);
  static_assert(T >= 1 && T <= 4 && W0 + W1 == 64 * T, "1 to 4 column tiles");
  BmmBandPart<W0> p0;
  BmmBandPart<W1> p1;  // columns W0 .. W0 + W1 - 1
  __device__ __forceinline__ void zero() {
    p0.acc.zero();
    if constexpr (W1 > 0) p1.acc.zero();
  }
  __device__ __forceinline__ void fence_operand() {
    warpgroup::fence_operand(p0.acc);
    if constexpr (W1 > 0) warpgroup::fence_operand(p1.acc);
  }
  // acc (+)= A[a_off: the band's C rows] · B[b_off: B rows 0 .. 64T - 1]ᵀ for the k16 slice at byte kb
  // of the stage whose descriptor low word is lo_word.
  template <class E>
  __device__ __forceinline__ void mma(unsigned lo_word, int a_off, int b_off, int kb) {
    warpgroup::mma_ss<E, 0, 0>(p0.acc, smem::desc_sw128(lo_word + (a_off + kb) / 16),
                               smem::desc_sw128(lo_word + (b_off + kb) / 16), true);
    if constexpr (W1 > 0)
      warpgroup::mma_ss<E, 0, 0>(p1.acc, smem::desc_sw128(lo_word + (a_off + kb) / 16),
                                 smem::desc_sw128(lo_word + (b_off + W0 * 128 + kb) / 16), true);
  }
};

// The σ-masked fp32 stores of one accumulator part: rows m0 + its row, columns n0 + its column.
template <int W, bool SEQ>
__device__ __forceinline__ void bmm_store_part(const WgAcc<W>& acc, float* out, long long row_stride, int m0, int n0,
                                               const int* s_seq, bool vec_out) {
#pragma unroll
  for (int i = 0; i < WgAcc<W>::kRegs; i += 2) {
    const int rl = m0 + WgAcc<W>::row(i), cl = n0 + WgAcc<W>::col(i);
    float v0 = acc.x[i], v1 = acc.x[i + 1];
    if constexpr (SEQ) {
      const int q = s_seq[rl];
      v0 = q == s_seq[cl] ? v0 : 0.f;
      v1 = q == s_seq[cl + 1] ? v1 : 0.f;
    }
    float* orow = out + (long long)rl * row_stride;
    if (vec_out) {
      *reinterpret_cast<float2*>(orow + cl) = make_float2(v0, v1);
    } else {
      orow[cl] = v0;
      orow[cl + 1] = v1;
    }
  }
}

// One work item of bmm_chunk_fwd_wgmma: band pair LO (bands LO and Q/64 - 1 - LO) of chunk (b, c),
// group grp. LO is a template argument so that every operand offset is an immediate from the stage's
// base and each band's accumulators have their widths fixed.
template <class Spec, int LO>
__device__ __forceinline__ void bmm_chunk_wgmma_pair(const BmmChunkFwdParams& p, unsigned char* body, int* s_seq,
                                                     const typename Spec::Element* Cc, const typename Spec::Element* Bc,
                                                     const typename Spec::Element* safe_c,
                                                     const typename Spec::Element* safe_b, bool vec, bool vec_out,
                                                     int b, int c, int grp, long long t0, int valid) {
  SSD_TILE_SPEC_NAMES(Spec);  // Q, N; T: bf16 or fp16
  using namespace fwd_geom;
  constexpr int NT = bmm_chunk_wgmma_threads();
  constexpr int NB = Q / 64;           // row bands (and column tiles) of the chunk
  constexpr int HI = NB - 1 - LO;
  constexpr int KS = N / 64;           // n steps of 64
  constexpr int STAGES = bmm_chunk_wgmma_stages();
  constexpr int STAGE = bmm_chunk_wgmma_stage_bytes(Q);
  constexpr int A_BYTES = 128 * 128;   // the two C bands: 128 rows x 128 bytes
  static_assert(LO < HI, "band pairs");
  const int tid = int(threadIdx.x);
  const unsigned body_addr = ptx::smem_addr(body);
  if (Spec::kSeqIdx) {
    for (int i = tid; i < Q; i += NT) s_seq[i] = i < valid ? p.seq_idx(b, t0 + i) : -1;
  }
  // Step ks's tiles: C bands LO, HI (rows 64·band .. +63) at 0 and 64 rows; B rows 0 .. 64·HI + 63.
  auto load_stage = [&](int buf, int ks) {
    unsigned char* const st = body + buf * STAGE;
    const long long k0 = (long long)ks * 64 * p.C.stride[3];
    const long long kb = (long long)ks * 64 * p.B.stride[3];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r0 = 64 * (half ? HI : LO);
      load_tile_sw128<NT, 64>(st + half * 64 * 128, Cc + r0 * p.C.stride[1] + k0, p.C.stride[1], p.C.stride[3], vec,
                              safe_c, [&](int r, int) { return r0 + r < valid; });
    }
#pragma unroll
    for (int j = 0; j <= HI; ++j)
      load_tile_sw128<NT, 64>(st + A_BYTES + j * 64 * 128, Bc + 64 * j * p.B.stride[1] + kb, p.B.stride[1],
                              p.B.stride[3], vec, safe_b, [&](int r, int) { return 64 * j + r < valid; });
  };

  BmmBandAcc<LO + 1> acc_lo;  // band LO: columns 0 .. 64·LO + 63
  BmmBandAcc<HI + 1> acc_hi;  // band HI: columns 0 .. 64·HI + 63
  acc_lo.zero();
  acc_hi.zero();

  load_stage(0, 0);
  ptx::cp_async_commit();
#pragma unroll 1
  for (int ks = 0; ks < KS; ++ks) {
    ptx::cp_async_wait<0>();
    ptx::fence_proxy_async_shared();  // this thread's copies, before wgmma reads them
    __syncthreads();                  // step ks visible to all; every wgmma of step ks - 1 is complete
    if (ks + 1 < KS) load_stage((ks + 1) % STAGES, ks + 1);
    ptx::cp_async_commit();
    const unsigned lo_word = smem::desc_lo_sw128(body_addr + (ks % STAGES) * STAGE, 16);
    acc_lo.fence_operand();
    acc_hi.fence_operand();
    warpgroup::fence();
#pragma unroll
    for (int kk = 0; kk < 64; kk += 16) {
      acc_lo.template mma<T>(lo_word, 0, A_BYTES, kk * 2);
      acc_hi.template mma<T>(lo_word, 64 * 128, A_BYTES, kk * 2);
    }
    warpgroup::commit_group();
    warpgroup::wait_group<0>();
    acc_lo.fence_operand();
    acc_hi.fence_operand();
  }
  ptx::cp_async_wait<0>();

  // Epilogue: σ mask (select), fp32 stores straight from the accumulators (each quad of lanes writes
  // 32 contiguous bytes of a row), as the mma.sync kernel's.
  float* out = p.CB.data + b * p.CB.stride[0] + c * p.CB.stride[1] + grp * p.CB.stride[2];
  const long long rs = p.CB.stride[3];
  using AL = BmmBandAcc<LO + 1>;
  using AH = BmmBandAcc<HI + 1>;
  bmm_store_part<AL::W0, bool(Spec::kSeqIdx)>(acc_lo.p0.acc, out, rs, 64 * LO, 0, s_seq, vec_out);
  if constexpr (AL::W1 > 0)
    bmm_store_part<AL::W1, bool(Spec::kSeqIdx)>(acc_lo.p1.acc, out, rs, 64 * LO, AL::W0, s_seq, vec_out);
  bmm_store_part<AH::W0, bool(Spec::kSeqIdx)>(acc_hi.p0.acc, out, rs, 64 * HI, 0, s_seq, vec_out);
  if constexpr (AH::W1 > 0)
    bmm_store_part<AH::W1, bool(Spec::kSeqIdx)>(acc_hi.p1.acc, out, rs, 64 * HI, AH::W0, s_seq, vec_out);
  __syncthreads();  // the stages and s_seq are reused by the next work item
}

}  // namespace sm90a_detail

template <class Spec>
__device__ void bmm_chunk_fwd_wgmma(const BmmChunkFwdParams& p) {
  SSD_TILE_SPEC_NAMES(Spec);  // Q, N, BLOCK_M, BLOCK_N, BLOCK_K; T: bf16 or fp16
  static_assert(fwd_geom::bmm_chunk_wgmma_tile_problem(Q, N, BLOCK_M, BLOCK_N, BLOCK_K) == nullptr,
                "illegal tile: the host's check (src/kernels) refuses it");
  constexpr int PAIRS = fwd_geom::bmm_chunk_wgmma_pairs(Q);
  static_assert(PAIRS == 1 || PAIRS == 2, "chunk 128 or 256");

  extern __shared__ __align__(16) unsigned char dyn_smem[];
  unsigned char* const body = smem::align1024(dyn_smem);
  __shared__ int s_seq[Spec::kSeqIdx ? Q : 1];

  const T* Cg = static_cast<const T*>(p.C.data);
  const T* Bg = static_cast<const T*>(p.B.data);
  const bool vec = aligned16(Cg) && aligned16(Bg) && p.C.stride[3] == 1 && p.B.stride[3] == 1 &&
                   ((p.C.stride[0] | p.C.stride[1] | p.C.stride[2]) & 7) == 0 &&
                   ((p.B.stride[0] | p.B.stride[1] | p.B.stride[2]) & 7) == 0;
  const bool vec_out = vec8_floats(p.CB);
  const int batch = int(p.batch), ngroups = int(p.ngroups);
  const int nbc = int(p.batch * p.nchunks);

  for (int grp = blockIdx.z; grp < ngroups; grp += gridDim.z) {
    for (int bc = blockIdx.y; bc < nbc; bc += gridDim.y) {
      SSD_CHUNK_COORDS(bc, batch, Q, p.seqlen);  // b, c, t0, valid: positions l < valid are real tokens
      const T* safe_c = Cg + p.C.offset(b, 0, grp);
      const T* safe_b = Bg + p.B.offset(b, 0, grp);
      const T* Cc = safe_c + t0 * p.C.stride[1];
      const T* Bc = safe_b + t0 * p.B.stride[1];
      for (int pair = blockIdx.x; pair < PAIRS; pair += gridDim.x) {
        if (pair == 0)
          sm90a_detail::bmm_chunk_wgmma_pair<Spec, 0>(p, body, s_seq, Cc, Bc, safe_c, safe_b, vec, vec_out, b, c, grp,
                                                      t0, valid);
        else if constexpr (PAIRS == 2)
          sm90a_detail::bmm_chunk_wgmma_pair<Spec, 1>(p, body, s_seq, Cc, Bc, safe_c, safe_b, vec, vec_out, b, c, grp,
                                                      t0, valid);
      }
    }
  }
}

}  // namespace ssd_kernels
