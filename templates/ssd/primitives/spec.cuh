// The names a tiled kernel template reads from its Spec (the generated unit's `struct Spec`, written
// by the family's generator in src/kernels), declared once for every template:
//
//   SSD_TILE_SPEC_NAMES(Spec);   // at the top of template <class Spec> __device__ void kernel(...)
//
// declares the local constants Q (chunk length, Spec::kChunk), P (headdim, kHeaddim), N (dstate,
// kDstate), HEADS_PER_GROUP (kHeadsPerGroup), BLOCK_M / BLOCK_N / BLOCK_K (kBlockM / kBlockN /
// kBlockK) and the element type T (Spec::Element, asserted bf16 or fp16: the tensor-core kernels'
// operand types). kChunk, kBlockM and Element are required; a
// family whose Spec has no headdim, dstate, heads-per-group, BLOCK_N or BLOCK_K member (bmm_chunk
// has no headdim, chunk_scan_bwd_dx no BLOCK_N, ...) reads 0 there, and its own static_asserts and
// tile checks never see such a name. The family's flags (kSeqIdx, kD, ...) stay spelled out in the
// template, next to the formula that uses them.
//
// The constants are the Spec's values themselves, so the machine code is the same as with the
// hand-written `constexpr int Q = Spec::kChunk;` blocks the templates had before.
#pragma once

#include "ssd/primitives/mma.cuh"  // is_16bit_float, aligned16

namespace ssd_kernels {
namespace spec_detail {

// Spec::member when the Spec has it, else 0 (overload on int vs long picks the first when viable).
#define SSD_SPEC_OPTIONAL_INT(member)                                                                         \
  template <class S>                                                                                          \
  __host__ __device__ constexpr auto optional_##member(int) -> decltype(int(S::member)) { return S::member; } \
  template <class S>                                                                                          \
  __host__ __device__ constexpr int optional_##member(long) { return 0; }
SSD_SPEC_OPTIONAL_INT(kHeaddim)
SSD_SPEC_OPTIONAL_INT(kDstate)
SSD_SPEC_OPTIONAL_INT(kHeadsPerGroup)
SSD_SPEC_OPTIONAL_INT(kBlockN)
SSD_SPEC_OPTIONAL_INT(kBlockK)
// The sm_90a wgmma implementation of a family with two (chunk_scan_fwd, chunk_state_passing_fwd):
// the descriptor writes kWgmma = true only for the specializations that take it, so the others keep
// their Spec; absent reads 0, the mma.sync kernel.
SSD_SPEC_OPTIONAL_INT(kWgmma)
// chunk_scan_bwd_dx's resident-rows layout (sm_90, sm_90a: dynamic shared memory past 48 KiB);
// absent reads 0, the 48 KiB static layout.
SSD_SPEC_OPTIONAL_INT(kResidentRows)
// The sm_90a wgmma kernels of chunk_state_passing_fwd and chunk_scan_fwd with their operand tiles by
// TMA (SSD_FLAG_TMA); absent reads 0, cp.async.
SSD_SPEC_OPTIONAL_INT(kTma)
#undef SSD_SPEC_OPTIONAL_INT

}  // namespace spec_detail
// 16-byte vector access to a (b, L, h, p)-like view of 16-bit elements at ptr: an aligned base,
// unit innermost stride and the other strides multiples of 8 elements.
template <class View>
__device__ __forceinline__ bool vec16_rows(const void* ptr, const View& v) {
  return aligned16(ptr) && v.stride[3] == 1 && ((v.stride[0] | v.stride[1] | v.stride[2]) & 7) == 0;
}
// 8-byte (float2) access to a 4-axis fp32 view: an 8-byte aligned base and even strides.
template <class View>
__device__ __forceinline__ bool vec8_floats(const View& v) {
  return (reinterpret_cast<unsigned long long>(v.data) & 7ull) == 0 &&
         ((v.stride[0] | v.stride[1] | v.stride[2] | v.stride[3]) & 1) == 0;
}

}  // namespace ssd_kernels

// The thread's place in a grid of warps (WARPS_N warp columns, each warp a WM x WN tile): tid,
// warp, lane, the warp tile's origin (wm0, wn0) and the lane's mma fragment coordinates
// (lg = lane / 4, lt = lane % 4).
#define SSD_WARP_TILE_COORDS(WM, WN, WARPS_N)                                                        \
  const int tid = threadIdx.x;                                                                     \
  const int warp = tid >> 5, lane = tid & 31;                                                      \
  const int wm0 = (warp / WARPS_N) * WM, wn0 = (warp % WARPS_N) * WN;                               \
  const int lg = lane >> 2, lt = lane & 3

#define SSD_TILE_SPEC_NAMES(Spec)                                                                             \
  [[maybe_unused]] constexpr int Q = Spec::kChunk, BLOCK_M = Spec::kBlockM;                                   \
  [[maybe_unused]] constexpr int P = ::ssd_kernels::spec_detail::optional_kHeaddim<Spec>(0),                  \
                                 N = ::ssd_kernels::spec_detail::optional_kDstate<Spec>(0);                   \
  [[maybe_unused]] constexpr int HEADS_PER_GROUP =                                                            \
      ::ssd_kernels::spec_detail::optional_kHeadsPerGroup<Spec>(0);                                           \
  [[maybe_unused]] constexpr int BLOCK_N = ::ssd_kernels::spec_detail::optional_kBlockN<Spec>(0),             \
                                 BLOCK_K = ::ssd_kernels::spec_detail::optional_kBlockK<Spec>(0);             \
  using T = typename Spec::Element;                                                                           \
  static_assert(::ssd_kernels::is_16bit_float<T>::value, "element type must be bf16 or fp16")

// The one-dimensional kernels (state_passing_fwd / _bwd, chunk_scan_bwd_ddA): Q (Spec::kChunk) and
// BLOCK (Spec::kBlock, threads per block), checked by the family's tile_problem(BLOCK, 0, 0) as
// the host's check in src/kernels does.
#define SSD_BLOCK_SPEC_NAMES(Spec, tile_problem)                                                              \
  [[maybe_unused]] constexpr int Q = Spec::kChunk, BLOCK = Spec::kBlock;                                      \
  static_assert(tile_problem(BLOCK, 0, 0) == nullptr, "illegal tile: the host's check (src/kernels) refuses it")

namespace ssd_kernels {

// How many positions of the chunk starting at token t0 = cQ are real tokens: min(Q, seqlen - t0)
// (λ_c = valid - 1; positions past it are padding).
template <int Q>
__device__ __forceinline__ int chunk_valid(long long seqlen, long long t0) {
  const long long rem_len = seqlen - t0;
  return rem_len < Q ? int(rem_len) : Q;
}

}  // namespace ssd_kernels

// Work item bc of the (batch, chunk) grid axis (batch fastest): declares b, c, the chunk's first
// token t0 = cQ (64-bit) and valid = chunk_valid<Q>(seqlen, t0).
#define SSD_CHUNK_COORDS(bc, batch, Q, seqlen)                                                      \
  const int b = (bc) % (batch), c = (bc) / (batch);                                                 \
  const long long t0 = (long long)c * (Q);                                                          \
  const int valid = ::ssd_kernels::chunk_valid<(Q)>((seqlen), t0)

// Linear tile index `tile` -> (row tile mi, column tile ni) of the chunk's lower triangle of
// BLOCK_M x BLOCK_N tiles (those with some column s <= row l), row tile by row tile: declares mi,
// ni. A macro so the loop stays where the kernels had it (a helper function changed bmm_chunk_fwd's
// and chunk_scan_bwd_dcb's code).
#define SSD_LOWER_TRIANGLE_TILE(tile, Q, BLOCK_M, BLOCK_N)                                          \
  int mi = 0, ni = (tile);                                                                          \
  while (true) {                                                                                    \
    const int cnt = imin((Q) / (BLOCK_N), (mi * (BLOCK_M) + (BLOCK_M)-1) / (BLOCK_N) + 1);          \
    if (ni < cnt) break;                                                                            \
    ni -= cnt;                                                                                      \
    ++mi;                                                                                           \
  }

// The seq_idx ids of a lower-triangle tile's BLOCK_M rows (positions m0 + i) and BLOCK_N columns
// (n0 + i) into s_seq[0 .. BLOCK_M + BLOCK_N), -1 past the valid length; NT threads, tid.
#define SSD_STAGE_TILE_SEQ_IDS(s_seq, seq_idx, b, t0, m0, n0, valid)                               \
  for (int i = tid; i < BLOCK_M + BLOCK_N; i += NT) {                                               \
    const int l = i < BLOCK_M ? (m0) + i : (n0) + (i - BLOCK_M);                                    \
    (s_seq)[i] = l < (valid) ? (seq_idx)((b), (t0) + l) : -1;                                       \
  }
