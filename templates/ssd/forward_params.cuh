// Parameter blocks and launch geometry of the forward tensor-core kernels (math F2, F4, F5):
//   bmm_chunk_fwd   (bmm_chunk.cuh)    CB = σ ∘ (C Bᵀ) per (batch, chunk, group), lower triangle
//   chunk_state_fwd (chunk_state.cuh)  s_c = Xᵀ diag(ξ E_end Δ) B per (batch, chunk, head)
//   chunk_state_passing_fwd (chunk_state_passing.cuh)  s_c as above, and the pass over chunks (F3)
//                                      with the running state on chip: P_c, final states
//   chunk_scan_fwd  (chunk_scan.cuh)   y = (CB ∘ L ∘ causal) diag(Δ) X + diag(η E_start) C P_cᵀ (+ D x, · silu z)
//
// Shared verbatim by the host launchers (g++) and the kernels (NVRTC): plain C layout only
// (pointers, TensorRef views = pointer + strides in ELEMENTS, 64-bit (primitives/tensor_ref.cuh),
// long long, int, float; members two blocks share may come first as a common base, laid out as
// the members written out: ChunkStateInputs). A view whose comment names a unit-stride innermost
// axis covers only the axes before it. The geometry helpers below are constexpr functions usable on
// both sides; the kernels static_assert against the same helpers.
//
// Layout requirements (the host validates; nothing else is assumed):
//   * every tensor below comes with full strides, except the unit-stride axes named per field;
//   * 16-bit inputs (x, z, B, C, out, out_x, 16-bit states) are read/written with 16-byte vectors
//     when the base pointer is 16-byte aligned, the innermost stride is 1 and the other strides are
//     multiples of 8 elements (fp32 tensors: multiples of 4); otherwise the kernels fall back to
//     element-wise copies (correct, slower). The kernels test this themselves, per launch.
//   * seq_idx (b, L) int32 may be null only when the kernel was specialized without seq_idx.
#pragma once

#include "ssd/primitives/tensor_map.cuh"
#include "ssd/primitives/tensor_ref.cuh"  // also defines SSD_HOST_DEVICE

namespace ssd_kernels {

// ------------------------------------------------------------------------------------------------
// F4: CB[b, c, g, l, s] = σ_c(l, s) · Σ_n C[b, cQ+l, g, n] · B[b, cQ+s, g, n]   (fp32 out)
struct BmmChunkFwdParams {
  TensorRef<const void, 4> C;  // (b, L, g, n), element type; n-stride given (1 for the vector path)
  TensorRef<const void, 4> B;  // (b, L, g, n)
  TensorRef<const int, 2> seq_idx;  // (b, L); data null without
  TensorRef<float, 4> CB;  // (b, nchunks, g, Q) rows of Q, unit s-stride
  long long batch, seqlen, nchunks, ngroups;
};

// The inputs of F2, read alike by chunk_state_fwd and chunk_state_passing_fwd: the first members
// of both parameter blocks, as their base (one declaration; the layout is that of the members
// written out, every one 8-byte aligned).
struct ChunkStateInputs {
  TensorRef<const void, 4> x;  // (b, L, h, p), element type
  TensorRef<const void, 4> B;  // (b, L, g, n)
  TensorRef<const float, 3> dt;  // Δ, (b, h, nchunks) rows of Q, unit Q-stride (chunk_cumsum_fwd's dt_out)
  TensorRef<const float, 3> dA_cumsum;  // (b, h, nchunks) rows of Q, unit Q-stride
  TensorRef<const int, 2> seq_idx;  // (b, L); data null without
};

// F2: states[b, c, h, p, n] = Σ_{l ≤ λ_c} ξ_c(l) exp(min(A(Q-1) - A(l), 0)) Δ_l x[l, p] B[l, n]  (fp32 out)
struct ChunkStateFwdParams : ChunkStateInputs {
  TensorRef<float, 4> states;  // (b, nchunks, h, p) rows of n, unit n-stride
  long long batch, seqlen, nchunks, nheads;  // nheads = ngroups * HEADS_PER_GROUP
};

// chunk_scan_bwd_dstates with SSD_FLAG_Z (x := gate_bwd's dy, rounded to T): also dy's rounding
// residual, entering as a second pass over the positions (chunk_state.cuh). A block that extends
// ChunkStateFwdParams at its end, so the other specializations keep their parameter layout.
struct ChunkStateXLoParams : ChunkStateFwdParams {
  const void* x_lo;  // rn_T(dy − float(x)) (gate_bwd's dy_lo), element type T, laid out as x
};

// F2 + F3 fused: per (b, h) and state tile, s_c as chunk_state_fwd, then in chunk order
//   P_c = S_{c-1} (written to states),  S_c = fma(θ_c exp(A_c(λ_c)), S_{c-1}, s_c),  S_{-1} = init,
//   final = S_{Nc-1}.
struct ChunkStatePassingFwdParams : ChunkStateInputs {
  TensorRef<const float, 2> initial_states;  // (b, h) rows of p*n (p-stride n); data null without
  TensorRef<void, 4> states;  // P: (b, nchunks, h, p) rows of n, unit n-stride; the state type (fp32 or element type)
  TensorRef<float, 2> final_states;  // (b, h) rows of p*n (p-stride n); data null without
  long long batch, seqlen, nchunks, nheads;  // nheads = ngroups * HEADS_PER_GROUP
};
// The same with the tensor maps of the sm_90a TMA specializations (SSD_FLAG_TMA; the others take the
// block above). 4-D, innermost first, 128-byte swizzle, boxes of 64 innermost elements x BLOCK_K
// positions (the layout the cp.async loaders write; positions past seqlen lie outside, zero-filled):
//   map_x  x (b, L, h, p):  dims {p, h, L, b}, box {64, 1, BLOCK_K, 1}
//   map_b  B (b, L, g, n):  dims {n, g, L, b}, box {64, 1, BLOCK_K, 1}
// (the host's conditions: ChunkScanFwdTmaParams').
struct ChunkStatePassingFwdTmaParams : ChunkStatePassingFwdParams {
  TensorMap map_x, map_b;
};

// F5: ŷ_l = Σ_{s ≤ l} CB(l, s) exp(A(l) - A(s)) Δ_s x_s + η_c(l) exp(A(l)) P_c C_l;
//     y = ŷ + D ⊙ x;  out = y · silu(z) (out_x = y) with z, else out = y.   Stored in x's dtype.
//     (Evaluated with the row's 64-block r factored out below it: chunk_scan.cuh's header.)
struct ChunkScanFwdParams {
  TensorRef<const float, 4> CB;  // (b, nchunks, g, Q) rows of Q, unit s-stride; only entries with s <= l are read
  TensorRef<const void, 4> x;  // (b, L, h, p), element type
  TensorRef<const float, 3> dt;  // Δ, (b, h, nchunks) rows of Q, unit Q-stride
  TensorRef<const float, 3> dA_cumsum;  // (b, h, nchunks) rows of Q, unit Q-stride
  TensorRef<const void, 4> C;  // (b, L, g, n), element type
  TensorRef<const void, 4> states;  // P: (b, nchunks, h, p) rows of n, state type (fp32 or element type), unit n-stride
  TensorRef<const float, 2> D;  // (h) or (h, p) (stride[1] = 0 for (h)); data null when the specialization has no D
  TensorRef<const void, 4> z;  // (b, L, h, p), element type; data null without z
  TensorRef<const int, 2> seq_idx;  // (b, L); data null without
  TensorRef<void, 4> out;  // (b, L, h, p), element type
  TensorRef<void, 4> out_x;  // y before gating, (b, L, h, p), element type; written only with z (data may be null otherwise)
  long long batch, seqlen, nchunks, nheads;  // nheads = ngroups * HEADS_PER_GROUP
};
// The same with the tensor maps of the TMA specializations (SSD_FLAG_TMA: sm_90a wgmma path, P in x's
// dtype; the others take the block above, so their parameter layout is unchanged). The views above
// are still filled (the epilogue reads x, z and writes out through them). The maps are 4-D,
// innermost first, with the 128-byte swizzle, so each copy lands in the layout the cp.async loaders
// write (CB: two boxes of 32 floats side by side):
//   map_c      C  (b, L, g, n):              dims {n, g, L, b},         box {64, 1, BLOCK_M, 1}
//   map_states P  (b, nchunks, h, p, n):     dims {n, p, h, b·nchunks}, box {64, BLOCK_N, 1, 1}
//   map_x      x  (b, L, h, p):              dims {p, h, L, b},         box {64, 1, 64, 1}
//   map_cb     CB (b, nchunks, g, Q, Q) fp32: dims {Q, Q, g, b·nchunks}, box {32, BLOCK_M, 1, 1}
// Positions past seqlen lie outside the maps of C and x: the copy engine fills them with zeros, as
// the cp.async loaders' predicates do. The host takes this path only when x and C fit the maps
// (16-byte aligned base, unit innermost stride, the other strides multiples of 16 bytes; seqlen and
// batch · nchunks below 2^31: TMA coordinates are 32-bit).
struct ChunkScanFwdTmaParams : ChunkScanFwdParams {
  TensorMap map_c, map_states, map_x, map_cb;
};

// ------------------------------------------------------------------------------------------------
// Launch geometry. Grids are (x = tiles inside one (batch, chunk, head|group), y = batch * nchunks
// with batch fastest, z = heads | groups); every kernel is grid-stride in all three axes, so the
// host may clamp y and z to 65535. All shared memory is static (dynamic = 0) and <= 48 KiB, except
// chunk_scan_fwd's sm_90a path (chunk_scan_wg_*: dynamic).
// Requirements: blockDim = (*_threads(...), 1, 1) exactly (the warp layout is derived from it);
// nchunks = ceil(seqlen / Q); batch * nchunks, nheads and ngroups < 2^31 (work indices are 32-bit,
// all global offsets are 64-bit).
// The `name<...>` lines below list each template's compile-time constants under the local names its
// body uses (Q = Spec::kChunk, P = kHeaddim, N = kDstate, HEADS_PER_GROUP = kHeadsPerGroup,
// BLOCK_* = kBlock*, T = Element, HAS_* / flags = the Spec's booleans): the templates take one
// `class Spec` (src/kernels/ writes it) and alias these at their top.
namespace fwd_geom {

constexpr int kMaxStaticSmem = 48 * 1024;
constexpr int kPad = 8;  // shared-tile row padding in elements (16 bytes for 16-bit rows)

SSD_HOST_DEVICE constexpr int imin(int a, int b) { return a < b ? a : b; }
SSD_HOST_DEVICE constexpr int imax(int a, int b) { return a > b ? a : b; }

// Warp tile of a BM x BN block tile split over a 2-D warp grid (bmm_chunk, chunk_state):
// start at 32 x 64 (capped by the block tile), halve the larger side (not below 16) until there
// are at least 4 warps or the warp tile is 16 x 16.
SSD_HOST_DEVICE constexpr int warp_tile_side(int bm, int bn, bool n_side) {
  int wm = imin(bm, 32), wn = imin(bn, 64);
  while ((bm / wm) * (bn / wn) < 4 && (wm > 16 || wn > 16)) {
    if (wn >= wm && wn > 16) wn /= 2;
    else wm /= 2;
  }
  return n_side ? wn : wm;
}
SSD_HOST_DEVICE constexpr int warp_tile_m(int bm, int bn) { return warp_tile_side(bm, bn, false); }
SSD_HOST_DEVICE constexpr int warp_tile_n(int bm, int bn) { return warp_tile_side(bm, bn, true); }
SSD_HOST_DEVICE constexpr int warp_grid_threads(int bm, int bn) {
  return 32 * (bm / warp_tile_m(bm, bn)) * (bn / warp_tile_n(bm, bn));
}

// ---- bmm_chunk_fwd<Q, N, BLOCK_M, BLOCK_N, T, HAS_SEQ_IDX>
// grid.x = bmm_chunk_tiles(Q, BM, BN) (lower-triangle tiles: tile (i, j) exists iff j*BN <= i*BM + BM - 1)
SSD_HOST_DEVICE constexpr int bmm_chunk_threads(int bm, int bn) { return warp_grid_threads(bm, bn); }
SSD_HOST_DEVICE constexpr int bmm_chunk_tiles(int q, int bm, int bn) {
  int total = 0;
  for (int i = 0; i < q / bm; ++i) total += imin(q / bn, (i * bm + bm - 1) / bn + 1);
  return total;
}
SSD_HOST_DEVICE constexpr int bmm_chunk_stage_bytes(int bm, int bn, int bk) { return (bm + bn) * (bk + kPad) * 2; }
// K (dstate) step: the largest of 64, 32, 16 that divides N and lets 2 stages fit.
SSD_HOST_DEVICE constexpr int bmm_chunk_block_k(int n, int bm, int bn) {
  return (n % 64 == 0 && 2 * bmm_chunk_stage_bytes(bm, bn, 64) + 4 * (bm + bn) <= kMaxStaticSmem)   ? 64
         : (n % 32 == 0 && 2 * bmm_chunk_stage_bytes(bm, bn, 32) + 4 * (bm + bn) <= kMaxStaticSmem) ? 32
                                                                                                       : 16;
}
SSD_HOST_DEVICE constexpr int bmm_chunk_stages(int n, int bm, int bn) {
  return (n / bmm_chunk_block_k(n, bm, bn) >= 3 &&
          3 * bmm_chunk_stage_bytes(bm, bn, bmm_chunk_block_k(n, bm, bn)) + 4 * (bm + bn) <= kMaxStaticSmem)
             ? 3
             : 2;
}
SSD_HOST_DEVICE constexpr int bmm_chunk_smem_bytes(int n, int bm, int bn) {
  return bmm_chunk_stages(n, bm, bn) * bmm_chunk_stage_bytes(bm, bn, bmm_chunk_block_k(n, bm, bn)) + 4 * (bm + bn);
}

// ---- bmm_chunk_fwd on sm_90a (bmm_chunk_sm90a.cuh): one warpgroup per pair of 64-row bands (lo,
// Q/64 - 1 - lo), all of its 64 x 64 tiles; two stages of 64 n columns (the two C bands, then Q B rows).
// Its tile is 64 x 64 x 64 (k: the n step); the mma.sync kernel's tiles have k = 0 (derived), and on
// sm_90a both are legal where the shape allows the wgmma kernel (the same bits).
SSD_HOST_DEVICE constexpr bool bmm_chunk_wgmma_shape(int q, int n) { return (q == 128 || q == 256) && n % 64 == 0; }
// The one rule for which kernel a specialization runs (the family's Spec and the launcher's grid).
SSD_HOST_DEVICE constexpr bool bmm_chunk_uses_wgmma(bool sm90a, int q, int n, int bk) {
  return sm90a && bk == 64 && bmm_chunk_wgmma_shape(q, n);
}
SSD_HOST_DEVICE constexpr int bmm_chunk_wgmma_threads() { return 128; }
SSD_HOST_DEVICE constexpr int bmm_chunk_wgmma_pairs(int q) { return q / 128; }
SSD_HOST_DEVICE constexpr int bmm_chunk_wgmma_stages() { return 2; }
SSD_HOST_DEVICE constexpr int bmm_chunk_wgmma_stage_bytes(int q) { return (128 + q) * 128; }
SSD_HOST_DEVICE constexpr int bmm_chunk_wgmma_smem_bytes(int q) {
  return 1024 + bmm_chunk_wgmma_stages() * bmm_chunk_wgmma_stage_bytes(q);
}
// grid.x of either kernel.
SSD_HOST_DEVICE constexpr int bmm_chunk_blocks_x(bool sm90a, int q, int n, int bm, int bn, int bk) {
  return bmm_chunk_uses_wgmma(sm90a, q, n, bk) ? bmm_chunk_wgmma_pairs(q) : bmm_chunk_tiles(q, bm, bn);
}

// ---- chunk_state_fwd<Q, P, N, HEADS_PER_GROUP, BLOCK_M (p), BLOCK_N (n), BLOCK_K (positions), T, HAS_SEQ_IDX>
// grid.x = (P / BM) * (N / BN)
SSD_HOST_DEVICE constexpr int chunk_state_threads(int bm, int bn) { return warp_grid_threads(bm, bn); }
SSD_HOST_DEVICE constexpr int chunk_state_tiles(int p, int n, int bm, int bn) { return (p / bm) * (n / bn); }
SSD_HOST_DEVICE constexpr int chunk_state_stage_bytes(int bm, int bn, int bk) {
  return bk * ((bm + kPad) + (bn + kPad)) * 2;
}
SSD_HOST_DEVICE constexpr int chunk_state_stages(int q, int bm, int bn, int bk) {
  return (q / bk >= 3 && 3 * chunk_state_stage_bytes(bm, bn, bk) + 4 * q <= kMaxStaticSmem) ? 3 : 2;
}
SSD_HOST_DEVICE constexpr int chunk_state_smem_bytes(int q, int bm, int bn, int bk) {
  return chunk_state_stages(q, bm, bn, bk) * chunk_state_stage_bytes(bm, bn, bk) + 4 * q;
}

// ---- chunk_state_passing_fwd<Q, P, N, HEADS_PER_GROUP, BLOCK_M (p), BLOCK_N (n), BLOCK_K (positions), T,
//                              HAS_SEQ_IDX, HAS_INIT>
// grid = (chunk_state_tiles(P, N, BM, BN), batch, nheads). Warp tiles are at most 32 x 32: the
// running state doubles the accumulator registers. Per-position weights are double-buffered (the
// next chunk's are written while this chunk's are read).
SSD_HOST_DEVICE constexpr int state_pass_warp_m(int bm) { return imin(bm, 32); }
SSD_HOST_DEVICE constexpr int state_pass_warp_n(int bn) { return imin(bn, 32); }
SSD_HOST_DEVICE constexpr int chunk_state_passing_threads(int bm, int bn) {
  return 32 * (bm / state_pass_warp_m(bm)) * (bn / state_pass_warp_n(bn));
}
SSD_HOST_DEVICE constexpr int chunk_state_passing_stages(int q, int bm, int bn, int bk) {
  return 4 * chunk_state_stage_bytes(bm, bn, bk) + 8 * q <= kMaxStaticSmem   ? 4
         : 3 * chunk_state_stage_bytes(bm, bn, bk) + 8 * q <= kMaxStaticSmem ? 3
                                                                              : 2;
}
SSD_HOST_DEVICE constexpr int chunk_state_passing_smem_bytes(int q, int bm, int bn, int bk) {
  return chunk_state_passing_stages(q, bm, bn, bk) * chunk_state_stage_bytes(bm, bn, bk) + 8 * q;
}

// ---- chunk_scan_fwd<Q, P, N, HEADS_PER_GROUP, BLOCK_M (l), BLOCK_N (p), BLOCK_K, T, S, HAS_D,
//                     D_PER_HEADDIM, HAS_Z, HAS_SEQ_IDX>
// grid.x = (Q / BM) * (P / BN); 4 warps split BLOCK_M (each warp owns BM/4 rows and all BN columns).
// BLOCK_K is the step of both contractions (over n: min(BLOCK_K, N); over s: BLOCK_K).
SSD_HOST_DEVICE constexpr int chunk_scan_threads() { return 128; }
SSD_HOST_DEVICE constexpr int chunk_scan_tiles(int q, int p, int bm, int bn) { return (q / bm) * (p / bn); }
SSD_HOST_DEVICE constexpr int chunk_scan_block_kn(int n, int bk) { return imin(n, bk); }
SSD_HOST_DEVICE constexpr int chunk_scan_stage_a_bytes(int n, int bm, int bn, int bk) {
  return (bm + bn) * (chunk_scan_block_kn(n, bk) + kPad) * 2;  // C tile + P tile (P converted to T)
}
SSD_HOST_DEVICE constexpr int chunk_scan_stage_b_bytes(int bm, int bn, int bk) {
  return bm * (bk + kPad) * 4 + bk * (bn + kPad) * 2;  // CB tile (fp32) + x tile
}
SSD_HOST_DEVICE constexpr int chunk_scan_epilogue_bytes(int bm, int bn) { return bm * (bn + kPad) * 4; }
// The two-phase pipelined kernels (chunk_scan_fwd, chunk_scan_bwd_dx): one body buffer holds
// `stages` phase-A buffers, or `stages` phase-B buffers, or the fp32 epilogue tile, whichever is
// largest; next to it the chunk's fp32 A and Δ rows (and its seq_idx row). 3 stages when the body
// with 3 stages and those rows fit in static shared memory, else 2. Each kernel gives its
// TwoPhaseBytes; the stage count and the sizes follow from them here, for both kernels.
struct TwoPhaseBytes {
  int stage_a, stage_b, epilogue;  // one phase-A stage, one phase-B stage, the fp32 epilogue tile
};
SSD_HOST_DEVICE constexpr int two_phase_fixed_bytes(int q, bool seq) { return q * 4 * (seq ? 3 : 2); }
SSD_HOST_DEVICE constexpr int two_phase_body_bytes(int stages, TwoPhaseBytes b) {
  return imax(imax(stages * b.stage_a, stages * b.stage_b), b.epilogue);
}
SSD_HOST_DEVICE constexpr int two_phase_stages(TwoPhaseBytes b, int q, bool seq) {
  return two_phase_body_bytes(3, b) + two_phase_fixed_bytes(q, seq) <= kMaxStaticSmem ? 3 : 2;
}
SSD_HOST_DEVICE constexpr int two_phase_smem_bytes(TwoPhaseBytes b, int q, bool seq) {
  return two_phase_body_bytes(two_phase_stages(b, q, seq), b) + two_phase_fixed_bytes(q, seq);
}
SSD_HOST_DEVICE constexpr TwoPhaseBytes chunk_scan_bytes(int n, int bm, int bn, int bk) {
  return {chunk_scan_stage_a_bytes(n, bm, bn, bk), chunk_scan_stage_b_bytes(bm, bn, bk),
          chunk_scan_epilogue_bytes(bm, bn)};
}
SSD_HOST_DEVICE constexpr int chunk_scan_smem_bytes(int q, int n, int bm, int bn, int bk, bool seq) {
  return two_phase_smem_bytes(chunk_scan_bytes(n, bm, bn, bk), q, seq);
}

// ---- Tile legality, one function per kernel: nullptr when the tile is legal, else what is wrong.
// The host's config validation reports the text (src/kernels/); each template static_asserts the
// same function, so the two cannot disagree.
SSD_HOST_DEVICE constexpr bool pow2_in(int v, int lo, int hi) { return v >= lo && v <= hi && (v & (v - 1)) == 0; }
SSD_HOST_DEVICE constexpr bool divides(int a, int b) { return a > 0 && b % a == 0; }

SSD_HOST_DEVICE constexpr const char* bmm_chunk_tile_problem(int q, int n, int bm, int bn, int bk) {
  return !pow2_in(bm, 16, 128) || !pow2_in(bn, 16, 128)      ? "m, n in 16, 32, 64, 128"
         : !divides(bm, q) || !divides(bn, q)                ? "m and n must divide chunk_size"
         : bk != 0 ? "k must be 0 (derived), or 64: the wgmma kernel (sm_90a, chunk 128 or 256, dstate a "
                     "multiple of 64)"
         : bmm_chunk_smem_bytes(n, bm, bn) > kMaxStaticSmem ? "the tiles' shared memory must fit in 48 KiB"
                                                             : nullptr;
}

SSD_HOST_DEVICE constexpr const char* bmm_chunk_wgmma_tile_problem(int q, int n, int bm, int bn, int bk) {
  return !bmm_chunk_wgmma_shape(q, n)  ? "the wgmma kernel needs chunk_size 128 or 256 and dstate a multiple of 64"
         : bm != 64 || bn != 64 || bk != 64 ? "the wgmma kernel's tile is 64 x 64 x 64"
                                            : nullptr;
}

// chunk_state_fwd and chunk_scan_bwd_dstates (the same template).
SSD_HOST_DEVICE constexpr const char* chunk_state_tile_problem(int q, int p, int n, int bm, int bn, int bk) {
  return !pow2_in(bm, 16, 128) || !pow2_in(bn, 16, 256) || !pow2_in(bk, 16, 64)
             ? "m in 16, 32, 64, 128; n in 16, 32, 64, 128, 256; k in 16, 32, 64"
         : !divides(bm, p) || !divides(bn, n) || !divides(bk, q) ? "m | headdim, n | dstate, k | chunk_size"
         : chunk_state_smem_bytes(q, bm, bn, bk) > kMaxStaticSmem ? "the tiles' shared memory must fit in 48 KiB"
                                                                  : nullptr;
}

SSD_HOST_DEVICE constexpr const char* chunk_state_passing_tile_problem(int q, int p, int n, int bm, int bn, int bk) {
  return !pow2_in(bm, 16, 128) || !pow2_in(bn, 16, 256) || !pow2_in(bk, 16, 64)
             ? "m in 16, 32, 64, 128; n in 16, 32, 64, 128, 256; k in 16, 32, 64"
         : !divides(bm, p) || !divides(bn, n) || !divides(bk, q) ? "m | headdim, n | dstate, k | chunk_size"
         : chunk_state_passing_threads(bm, bn) > 512             ? "m * n <= 16384 (16 warps of 32 x 32)"
         : chunk_state_passing_smem_bytes(q, bm, bn, bk) > kMaxStaticSmem
             ? "the tiles' shared memory must fit in 48 KiB"
             : nullptr;
}

SSD_HOST_DEVICE constexpr const char* chunk_scan_tile_problem(int q, int p, int n, int bm, int bn, int bk, bool seq) {
  return !pow2_in(bm, 64, 128) || !pow2_in(bn, 16, 128) || !pow2_in(bk, 16, 64)
             ? "m in 64, 128; n in 16, 32, 64, 128; k in 16, 32, 64"
         : !divides(bm, q) || !divides(bn, p) || !divides(bk, q) ? "m | chunk_size, n | headdim, k | chunk_size"
         : (bm / 64) * (bn / 8) * 4 > 64                        ? "m * n <= 8192 (accumulator registers)"
         : n % chunk_scan_block_kn(n, bk) != 0                  ? "k must divide dstate or exceed it"
         : chunk_scan_smem_bytes(q, n, bm, bn, bk, seq) > kMaxStaticSmem
             ? "the tiles' shared memory must fit in 48 KiB"
             : nullptr;
}

// ---- chunk_scan_fwd on sm_90a (wgmma; templates/ssd/chunk_scan_sm90a.cuh). BLOCK_M / 64 warpgroups
// (128 threads each, 64 rows each) per BLOCK_M = 64 or 128 rows x BLOCK_N = 64 or 128 columns of
// headdim (m * n <= 8192); every K step is 64 wide (one 128-byte swizzle atom of 16-bit elements):
// N / 64 steps over dstate (phase A), then ceil(min(m0 + BLOCK_M, valid) / 64) steps over positions
// (phase B), each through a cp.async ring (phase B: 2 stages; phase A: chunk_scan_wg_stages_a). A stage holds [tile 0: C (BLOCK_M x 64,
// K-major) | x (64 s x BLOCK_N, MN-major), both 128-byte swizzled] then [tile 1: P (BLOCK_N x 64,
// K-major, swizzled) | CB (BLOCK_M x 64 fp32, rows padded by kPad)]; the epilogue's fp32 [l][p] tile
// reuses the stages. Dynamic shared memory: the chunk's A, Δ (and seq_idx) rows, 1 KiB of alignment
// slack, the stages. The warpgroups of a block share the P and x tiles (BLOCK_M = 128 reads them
// half as often per row as 64).
// With `tma` (SSD_FLAG_TMA: the tiles come by the tensor copy engine, ChunkScanFwdTmaParams) CB's
// tile is two 128-byte swizzled boxes of BLOCK_M rows x 32 fp32 (unpadded: TMA writes dense rows),
// and the fixed part also holds the rings' mbarriers (chunk_scan_wg_barriers of them).
SSD_HOST_DEVICE constexpr int chunk_scan_wg_threads(int bm) { return 2 * bm; }
SSD_HOST_DEVICE constexpr int chunk_scan_wg_stages() { return 2; }
SSD_HOST_DEVICE constexpr int chunk_scan_wg_tile0_bytes(int bm, int bn) { return imax(bm * 128, bn * 128); }
SSD_HOST_DEVICE constexpr int chunk_scan_wg_cb_ld(bool tma = false) { return tma ? 64 : 64 + kPad; }  // fp32 CB row stride
SSD_HOST_DEVICE constexpr int chunk_scan_wg_tile1_bytes(int bm, int bn, bool tma = false) {
  return imax(bn * 128, bm * chunk_scan_wg_cb_ld(tma) * 4);
}
SSD_HOST_DEVICE constexpr int chunk_scan_wg_epilogue_bytes(int bm, int bn) { return bm * (bn + kPad) * 4; }
// With 64 rows the epilogue's fp32 tile takes the stage beside the last x tile (chunk_scan_sm90a.cuh,
// kXFromTile): a stage holds it too (with the cp.async layout's padded CB it always does).
SSD_HOST_DEVICE constexpr int chunk_scan_wg_stage_bytes(int bm, int bn, bool tma = false) {
  return (imax(chunk_scan_wg_tile0_bytes(bm, bn) + chunk_scan_wg_tile1_bytes(bm, bn, tma),
               bm == 64 ? chunk_scan_wg_epilogue_bytes(bm, bn) : 0) +
          1023) / 1024 * 1024;
}
SSD_HOST_DEVICE constexpr int chunk_scan_wg_body_bytes(int bm, int bn, bool tma = false) {
  return imax(chunk_scan_wg_stages() * chunk_scan_wg_stage_bytes(bm, bn, tma), chunk_scan_wg_epilogue_bytes(bm, bn));
}
// Phase A's stages are smaller (C and P tiles only: [C (BLOCK_M x 64) | P (BLOCK_N x 64)]): as many as
// the body holds, up to 4 (3 at 64 x 64), for a deeper prefetch over dstate.
SSD_HOST_DEVICE constexpr int chunk_scan_wg_stage_a_bytes(int bm, int bn) { return (bm + bn) * 128; }
SSD_HOST_DEVICE constexpr int chunk_scan_wg_stages_a(int bm, int bn, bool tma = false) {
  return imin(4, chunk_scan_wg_body_bytes(bm, bn, tma) / chunk_scan_wg_stage_a_bytes(bm, bn));
}
// The TMA rings' mbarriers: phase A's slots (at most 4), phase B's (2), the chunk's A and Δ rows.
SSD_HOST_DEVICE constexpr int chunk_scan_wg_barriers() { return 8; }
// The factored W's per-position factors u_r(s), s < r (chunk_scan.cuh's header; r = 64 ⌊l / 64⌋ is
// the warpgroup's own): with 64 rows in Δ's row itself (the steps from r on read Δ_s only for s >= r),
// with 128 one fp32 row of q per warpgroup after the barriers (the two warpgroups' r differ).
SSD_HOST_DEVICE constexpr int chunk_scan_wg_u_bytes(int q, int bm) { return bm == 64 ? 0 : (bm / 64) * q * 4; }
SSD_HOST_DEVICE constexpr int chunk_scan_wg_u_offset(int q, bool seq, bool tma) {
  return two_phase_fixed_bytes(q, seq) + (tma ? chunk_scan_wg_barriers() * 8 : 0);
}
SSD_HOST_DEVICE constexpr int chunk_scan_wg_fixed_bytes(int q, int bm, bool seq, bool tma = false) {
  return chunk_scan_wg_u_offset(q, seq, tma) + chunk_scan_wg_u_bytes(q, bm);
}
SSD_HOST_DEVICE constexpr int chunk_scan_wg_smem_bytes(int q, int bm, int bn, bool seq, bool tma = false) {
  return chunk_scan_wg_fixed_bytes(q, bm, seq, tma) + 1024 + chunk_scan_wg_body_bytes(bm, bn, tma);
}
// Resident blocks per SM (__launch_bounds__'s second argument, so also the register cap): shared
// memory (228 KiB per SM, 1 KiB reserved per block) and the 64 K registers per SM at `regs` per
// thread, at most 4.
SSD_HOST_DEVICE constexpr int chunk_scan_wg_blocks_per_sm(int q, int bm, int bn, bool seq, int regs, bool tma = false) {
  return imin(imin(4, 228 * 1024 / (chunk_scan_wg_smem_bytes(q, bm, bn, seq, tma) + 1024)),
              65536 / (chunk_scan_wg_threads(bm) * regs));
}
// The shape the wgmma path takes (otherwise sm_90a runs the mma.sync kernel): 64-wide K steps over
// dstate and positions, headdim in 64-column swizzle atoms.
SSD_HOST_DEVICE constexpr bool chunk_scan_wg_shape(int q, int p, int n) {
  return q % 64 == 0 && p % 64 == 0 && n % 64 == 0 && q >= 64 && p >= 64 && n >= 64;
}
SSD_HOST_DEVICE constexpr const char* chunk_scan_wg_tile_problem(int q, int p, int n, int bm, int bn, int bk, bool seq) {
  return !chunk_scan_wg_shape(q, p, n) ? "the wgmma path needs chunk_size, headdim and dstate multiples of 64"
         : (bm != 64 && bm != 128) || (bn != 64 && bn != 128) || bk != 64
             ? "m in 64, 128, n in 64, 128, k = 64 (sm_90a wgmma path)"
         : bm * bn > 8192                                  ? "m * n <= 8192 (accumulator registers)"
         : !divides(bm, q) || !divides(bn, p)              ? "m | chunk_size, n | headdim"
         : chunk_scan_wg_smem_bytes(q, bm, bn, seq) > 227 * 1024 ||
                 chunk_scan_wg_smem_bytes(q, bm, bn, seq, true) > 227 * 1024
             ? "the tiles' shared memory must fit in 227 KiB"
                                                                 : nullptr;
}

// state_passing_fwd and state_passing_bwd: one block of `m` state elements.
SSD_HOST_DEVICE constexpr const char* state_passing_tile_problem(int bm, int bn, int bk) {
  return !pow2_in(bm, 64, 512) || bn != 0 || bk != 0 ? "m in 64, 128, 256, 512; n = k = 0" : nullptr;
}

// state_passing_bwd: consecutive state elements per thread (one float4 of P and dP), and its work items
// (blocks of BLOCK * 4 elements of one (b, h)).
constexpr int kStatePassingBwdElems = 4;
SSD_HOST_DEVICE constexpr long long state_passing_bwd_items(long long state_size, int block, long long batch,
                                                           long long nheads) {
  return (state_size + kStatePassingBwdElems * block - 1) / (kStatePassingBwdElems * block) * batch * nheads;
}

// ---- chunk_state_passing_fwd on sm_90a (wgmma; chunk_state_passing_sm90a.cuh): BLOCK_M / 64 warpgroups
// per block, each a 64 (p) x BLOCK_N (n) state tile (wgmma M x N) of one head; K = positions in stages
// of BLOCK_K through a ring of chunk_state_passing_wgmma_stages(BLOCK_K) cp.async stages (per warpgroup x [k][64 p], and
// the B [k][n] they share; 128-byte swizzled), dynamic shared memory. A block's BLOCK_M rows are the
// group's heads' states stacked (head-major, then p): BLOCK_M = 128 with headdim 64 is two heads of one
// group, which then read each B stage once. Used when the arch is sm_90a and the shape has whole
// 64 x 64 tiles (headdim and dstate multiples of 64); other shapes keep the mma.sync kernel.
// Stages: 128 positions in flight ahead of the stage wgmma reads, plus that one and the one before (whose
// last wgmma may still run).
SSD_HOST_DEVICE constexpr int chunk_state_passing_wgmma_stages(int bk) { return 2 + 128 / bk; }
SSD_HOST_DEVICE constexpr bool chunk_state_passing_wgmma_shape(int p, int n) { return p % 64 == 0 && n % 64 == 0; }
SSD_HOST_DEVICE constexpr int chunk_state_passing_wgmma_threads(int bm) { return 2 * bm; }  // 128 per warpgroup
// Heads per block (BLOCK_M over headdim, at least 1) and the rows of one head in a block; the grid is
// (chunk_state_tiles(P, N, chunk_state_passing_head_rows(P, BM), BN), batch, nheads / heads_per_block),
// which is the mma.sync kernel's grid whenever BM <= headdim.
SSD_HOST_DEVICE constexpr int chunk_state_passing_heads_per_block(int p, int bm) { return bm > p ? bm / p : 1; }
SSD_HOST_DEVICE constexpr int chunk_state_passing_head_rows(int p, int bm) { return bm > p ? p : bm; }
SSD_HOST_DEVICE constexpr int chunk_state_passing_wgmma_stage_bytes(int bm, int bn, int bk) { return bk * (bm + bn) * 2; }
// wgmma groups (16 positions each) left running while the next A fragment is built: 1 (two A fragments
// live) for two warpgroups per block, which hold one block per SM whatever their registers (ptxas fits
// the second fragment without spilling at every two-warpgroup tile: 128 x 128 x 64, the TMA default,
// 248 registers, 254 with cp.async, the two-term recompute 198); 0 for 64-row blocks, which keep ~168
// registers and 3 blocks per SM at n = 64.
SSD_HOST_DEVICE constexpr int chunk_state_passing_wgmma_in_flight(int bm, int /*bn*/, int /*bk*/) {
  return bm == 128 ? 1 : 0;
}
// The P_c staging tile of two-warpgroup blocks (BLOCK_M = 128: one block per SM whatever its shared
// memory, 255 registers; a 64-row block runs 2-3 per SM, and the tile would cost it one) with 16-bit P
// (state_bytes 2; fp32 P — the recompute's two-term P — measured slower staged, 0.49 -> 0.52 ms, and
// keeps its 8-byte pair stores): BLOCK_M rows, OUT_LD fp32 words apart (BLOCK_N + 4: room for fp32
// rows, the layout the device run measured and proved; 16-bit rows use the first half of each), so
// the fragment's pair stores, 8 rows x 4 lanes a warp, hit distinct banks.
SSD_HOST_DEVICE constexpr bool chunk_state_passing_wgmma_staged_out(int bm, int state_bytes) {
  return bm == 128 && state_bytes == 2;
}
SSD_HOST_DEVICE constexpr int chunk_state_passing_wgmma_out_ld(int bn) { return bn + 4; }  // in fp32 words
SSD_HOST_DEVICE constexpr int chunk_state_passing_wgmma_out_bytes(int bm, int bn, int state_bytes) {
  return chunk_state_passing_wgmma_staged_out(bm, state_bytes) ? bm * chunk_state_passing_wgmma_out_ld(bn) * 4 : 0;
}
// With `tma` (SSD_FLAG_TMA, ChunkStatePassingFwdTmaParams) the stages come by the copy engine, one
// mbarrier each after the P_c staging tile (chunk_state_passing_wgmma_barriers of room).
SSD_HOST_DEVICE constexpr int chunk_state_passing_wgmma_barriers() { return 8; }
// The stages, the weights of two chunks per warpgroup (2 Q fp32 each), the P_c staging tile (if any),
// the mbarriers (tma) and 1024 bytes to align the base to the swizzle atom. state_bytes: P's element
// size (4: fp32).
SSD_HOST_DEVICE constexpr int chunk_state_passing_wgmma_smem_bytes(int q, int bm, int bn, int bk, int state_bytes,
                                                                   bool tma = false) {
  return chunk_state_passing_wgmma_stages(bk) * chunk_state_passing_wgmma_stage_bytes(bm, bn, bk) + (bm / 64) * 8 * q +
         chunk_state_passing_wgmma_out_bytes(bm, bn, state_bytes) + (tma ? chunk_state_passing_wgmma_barriers() * 8 : 0) +
         1024;
}
SSD_HOST_DEVICE constexpr const char* chunk_state_passing_wgmma_tile_problem(int q, int p, int n, int heads_per_group,
                                                                             int bm, int bn, int bk) {
  return !pow2_in(bm, 64, 128) || !pow2_in(bn, 64, 128) || !pow2_in(bk, 32, 64)
             ? "on sm_90a (wgmma): m in 64, 128; n in 64, 128; k in 32, 64"
         : !divides(bn, n) || !divides(bk, q) ? "n | dstate, k | chunk_size"
         : !divides(bm, p) && !(bm % p == 0 && divides(bm / p, heads_per_group))
             ? "m | headdim, or m a multiple of headdim whose heads are in one group (m / headdim | nheads / ngroups)"
             : nullptr;
}

}  // namespace fwd_geom
}  // namespace ssd_kernels
