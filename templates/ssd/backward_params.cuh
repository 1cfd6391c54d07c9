// Parameter blocks and launch geometry of the SSD backward's kernels (math §3; the decomposition
// and the canonical order of every sum are in docs/determinism.md):
//
//   chunk_scan_bwd_dstates  (chunk_state.cuh, DSTATES)  dP_c = dYᵀ diag(η E_start) C            (B-b)
//   state_passing_bwd       (state_passing_bwd.cuh)     ds_c, dinit, ρ partials                  (B-c)
//   chunk_state_passing_bwd (chunk_state_passing_bwd.cuh) the two above fused, dP on chip    (B-b + B-c)
//   chunk_scan_bwd_dx       (chunk_scan_bwd_dx.cuh)     dx, dΔˣ, w_l (ddA next), v_l (ddA prev)  (B-d, B-g)
//   chunk_scan_bwd_dcb      (chunk_scan_bwd_dcb.cuh)    dCB per group, heads summed in order     (B-e)
//   chunk_scan_bwd_ddA_intra(chunk_scan_bwd_ddA_intra.cuh) ddA intra, per 64-row group          (B-g)
//   chunk_state_bwd_db      (bc_bwd.cuh, !IS_DC)        dB                                       (B-f)
//   chunk_scan_bwd_dc       (bc_bwd.cuh, IS_DC)         dC                                       (B-f)
//   chunk_scan_bwd_ddA      (chunk_scan_bwd_ddA.cuh)    ddA = intra + next + prev (+ρ)           (B-g)
//   chunk_cumsum_bwd (increments variant) then finishes ddt, dA, ddt_bias (B-h, B-i).
//
// Shared verbatim by the host launchers (g++) and the kernels (NVRTC), like forward_params.cuh:
// plain C layout, TensorRef views (strides in ELEMENTS, 64-bit). Intermediates the library
// allocates (dt, dA_cumsum, CB, P, dP, ds, dCB, the (b, h, nchunks, Q) vectors) are contiguous in
// the order of their shape comment; the kernels still take their strides where a view is given.
// A plain pointer next to a view "laid out as" that view shares its strides.
#pragma once

#include "ssd/forward_params.cuh"

namespace ssd_kernels {

// ------------------------------------------------------------------------------------------------
// chunk_scan_bwd_dstates reuses ChunkStateFwdParams: x := dy (b, L, h, p), B := C (b, L, g, n),
// dt unused (may be null), states := dP (b, nchunks, h, p, n) fp32; with z (SSD_FLAG_Z) its
// extension ChunkStateXLoParams, x_lo := dy_lo (gate_bwd's second term of dy).
//
// With z, dy (gate_bwd's output) is stored as two T terms, dy = rn_T(dy_fp32) and
// dy_lo = rn_T(dy_fp32 − float(dy)); the kernels that build dA's terms from dy (dstates, dx's v,
// ddA_intra's M) take both under SSD_FLAG_Z, through a parameter block that extends theirs by
// dy_lo at its end (the specializations without z keep their layout).

// state_passing_bwd (B-c): per (b, h, e), e in the flattened p*n axis (unit stride everywhere):
//   dS_{Nc-1} = dfinal (0 if null);  for c = Nc-1 .. 0:
//     ds_c = dS_c (stored in T);  ρ-part(c, e) = P_c[e] · dS_c[e];
//     dS_{c-1} = fma(θ_c · exp(A_c(λ_c)), dS_c, dP_c)
//   dinit = dS_{-1} (written when dinit != null).
struct StatePassingBwdParams {
  TensorRef<const float, 3> states;  // P: entering states (b, nchunks, h) rows of p*n fp32 (the forward recompute)
  TensorRef<const float, 3> dstates;  // dP (b, nchunks, h) rows of p*n fp32
  TensorRef<void, 3> ds;  // (b, nchunks, h) rows of p*n, element type T: hi = rn_T(ds)
  void* ds_lo;     // rn_T(ds − hi), laid out as ds
  void* states_t;  // rn_T(P), element type T, laid out as ds: the mma operand of dx and dC
  void* states_t_lo;  // rn_T(P − rn_T(P)), laid out as ds: dx's second term
  TensorRef<const float, 3> dA_cumsum;  // (b, h, nchunks) rows of Q, unit Q-stride
  TensorRef<const float, 2> dfinal_states;  // (b, h) rows of p*n fp32; data null (= 0) without
  TensorRef<float, 2> dinit;  // (b, h) rows of p*n fp32; data null (not written) without
  // deterministic: ρ partials (b, h, nchunks, p*n/32) contiguous, fp64, one per 32 consecutive e
  //                (exact fp64 products, xor-butterfly sum inside the warp in fp64); the θ·exp
  //                factor is NOT applied here.
  // fast:          ρ sums (b, h, nchunks) fp32 contiguous, zeroed by the launcher, atomically added.
  double* rho_slots;
  float* rho;
  TensorRef<const int, 2> seq_idx;  // (b, L); data null without
  long long batch, seqlen, nheads, nchunks, state_size;  // state_size = p * n (a multiple of 128)
};

// chunk_state_passing_bwd (B-b + B-c fused): per (b, h) and state tile, c = Nc-1 .. 0, dP_c's tile as
// chunk_scan_bwd_dstates computes it (two-term operand; with z, SSD_FLAG_Z, the second pass on dy_lo)
// kept on chip, then state_passing_bwd's per-element steps (ds, states_t and their second terms,
// the ρ partials, dS = fma(carry, dS, dP_c)), dinit at the end.
struct ChunkStatePassingBwdParams {
  TensorRef<const void, 4> x;  // dy (b, L, h, p), element type (with z: gate_bwd's dy)
  const void* x_lo;            // with z: dy_lo, laid out as x; null without
  TensorRef<const void, 4> B;  // C (b, L, g, n)
  TensorRef<const float, 3> dA_cumsum;  // (b, h, nchunks) rows of Q, unit Q-stride
  TensorRef<const int, 2> seq_idx;      // (b, L); data null without
  TensorRef<const float, 3> states;     // P (b, nchunks, h) rows of p*n fp32 (the forward recompute)
  TensorRef<void, 3> ds;  // (b, nchunks, h) rows of p*n, element type T: hi = rn_T(ds)
  void* ds_lo;            // laid out as ds
  void* states_t;         // laid out as ds
  void* states_t_lo;      // laid out as ds
  TensorRef<const float, 2> dfinal_states;  // (b, h) rows of p*n fp32; data null (= 0) without
  TensorRef<float, 2> dinit;                // (b, h) rows of p*n fp32; data null (not written) without
  double* rho_slots;  // (b, h, nchunks, p*n/32) fp64, as state_passing_bwd's (deterministic only)
  long long batch, seqlen, nchunks, nheads;  // nheads = ngroups * HEADS_PER_GROUP
};
// The same with the tensor maps of the sm_90a TMA specialization (SSD_FLAG_TMA; the others take the
// block above): chunk_state_passing_fwd's maps (ChunkStatePassingFwdTmaParams) of dy, dy_lo and C.
//   map_x   dy (b, L, h, p):     dims {p, h, L, b}, box {64, 1, BLOCK_K, 1}, 128-byte swizzle
//   map_xl  dy_lo, laid out as dy (encoded only with z: SSD_FLAG_Z)
//   map_b   C (b, L, g, n):      dims {n, g, L, b}, box {64, 1, BLOCK_K, 1}
// Positions past seqlen lie outside the maps (zero-filled, as the cp.async predicates do).
struct ChunkStatePassingBwdTmaParams : ChunkStatePassingBwdParams {
  TensorMap map_x, map_xl, map_b;
};

// chunk_scan_bwd_dx (B-d, and the per-position w_l, v_l of B-g), per (b, c, h), rows l:
//   Rst_l   = ξ_c(l)·exp(min(A(Q-1) − A(l), 0)) · (ds_c B_l)              (contraction over n)
//   R_l     = Rst_l + Σ_{m ≥ l, m ≤ λ} CB(m, l)·exp(min(A(m) − A(l), 0)) · dy_m   (over m)
//   dx_l    = fma(dy_l, D, Δ_l·R_l)   (D term only with D)
//   dΔˣst_l = Σ_p x_lp Rst_lp;   w_l = Δ_l · dΔˣst_l;
//   v_l     = η_c(l)·exp(A(l)) · Σ_p dy_lp (C_l P_cᵀ)_p                    (contraction over n;
//             with z, dy_lp + dy_lo_lp)
// ddt_x (dΔˣ's state part; chunk_scan_bwd_ddA adds the intra part), w, v: (b, h, nchunks, Q) fp32
// laid out as dA_cumsum (unit Q-stride); all Q positions of a chunk are written (0 past λ_c).
// P_c and ds_c enter the two n contractions as two terms each, hi = rn_T(v) and lo = rn_T(v − hi)
// (state_passing_bwd's copies): the hi chain over n, then the lo chain on the same accumulator.
struct ChunkScanBwdDxParams {
  TensorRef<const float, 4> CB;  // (b, nchunks, g, Q) rows of Q fp32, unit s-stride; only (m, l) with l <= m <= λ read
  TensorRef<const void, 4> x;  // (b, L, h, p)
  TensorRef<const void, 4> dy;  // (b, L, h, p): dout, or gate_bwd's dy with z
  const float* dt;  // Δ (b, h, nchunks, Q), laid out as dA_cumsum
  TensorRef<const float, 3> dA_cumsum;  // (b, h, nchunks) rows of Q, unit Q-stride
  TensorRef<const void, 4> B;  // (b, L, g, n)
  TensorRef<const void, 4> C;  // (b, L, g, n)
  TensorRef<const void, 4> ds;  // hi: (b, nchunks, h, p) rows of n, element type T, unit n-stride
  TensorRef<const void, 4> ds_lo;  // lo, laid out as ds
  TensorRef<const void, 4> states;  // hi: rn_T(P) (b, nchunks, h, p) rows of n, element type T (state_passing_bwd's copy), unit n-stride
  TensorRef<const void, 4> states_lo;  // lo, laid out as states
  TensorRef<const float, 2> D;  // (h) or (h, p) (stride[1] = 0 for (h)); data null without D
  TensorRef<const int, 2> seq_idx;  // (b, L); data null without
  TensorRef<void, 4> dx;  // (b, L, h, p) element type
  float* ddt_x;  // laid out as dA_cumsum
  float* w;      // laid out as dA_cumsum
  float* v;      // laid out as dA_cumsum
  long long batch, seqlen, nchunks, nheads;
};

// chunk_scan_bwd_dx with SSD_FLAG_Z: v's p sum also takes dy's second term (gate_bwd's dy_lo).
struct ChunkScanBwdDxZParams : ChunkScanBwdDxParams {
  const void* dy_lo;  // rn_T(dy_fp32 − float(dy)), element type T, laid out as dy
};
// The same with the tensor maps of the sm_90a TMA specialization (SSD_FLAG_TMA: the wgmma tiles,
// bwd_geom::dx_wg_shape, at headdim 64; the others take the blocks above). 4-D, innermost first, 128-byte swizzle,
// boxes of 64 innermost elements (the layouts the cp.async loaders write; positions past seqlen lie
// outside the maps, zero-filled as their predicates do):
//   map_c, map_b   C, B (b, L, g, n):   dims {n, g, L, b}, box {64, 1, BLOCK_M, 1} (phase A's row tile)
//   map_states, map_states_lo, map_ds, map_ds_lo   the K tiles, contiguous (b, nchunks, h, p, n):
//                  dims {n, p, h, b · nchunks}, box {64, P, 1, 1}
//   map_dy         dy (b, L, h, p):     dims {p, h, L, b}, box {64, 1, BLOCK_K, 1} (phase B)
//   map_cb         CB, fp32, contiguous (b, nchunks, g, Q, Q): dims {Q (l), Q (m), g, b · nchunks},
//                  box {32, BLOCK_K, 1, 1} (phase B: BLOCK_M / 32 boxes a step; only the lower
//                  triangle is written, and only it is selected)
struct ChunkScanBwdDxTmaParams : ChunkScanBwdDxZParams {
  TensorMap map_c, map_b, map_states, map_states_lo, map_ds, map_ds_lo, map_dy, map_cb;
};

// chunk_scan_bwd_dcb (B-e), per (b, c, g), lower-triangle tiles of (l, s):
//   d^(i)(l, s) = (s <= l && l <= λ && σ(l, s)) ? (M^(i)(l, s) · exp(min(A^(i)(l) − A^(i)(s), 0))) · Δ^(i)_s : 0
//   M^(i)(l, s) = Σ_p dy^(i)_lp x^(i)_sp                 (mma chain over p from 0)
//   dCB(l, s)   = ((0 + d^(r g)) + d^(r g + 1)) + ...    (heads of the group in increasing order)
// stored rounded to T (it is only an mma operand of dB/dC). A written tile is written in full
// (entries with s > l or padding are 0); tiles strictly above the diagonal are not written.
struct ChunkScanBwdDcbParams {
  TensorRef<const void, 4> x;  // (b, L, h, p)
  TensorRef<const void, 4> dy;  // (b, L, h, p)
  const float* dt;  // Δ (b, h, nchunks, Q), laid out as dA_cumsum
  TensorRef<const float, 3> dA_cumsum;  // (b, h, nchunks) rows of Q, unit Q-stride
  TensorRef<const int, 2> seq_idx;  // (b, L); data null without
  TensorRef<void, 4> dCB;  // (b, nchunks, g, Q) rows of Q, element type T, unit s-stride
  long long batch, seqlen, nchunks, ngroups;
};

// chunk_scan_bwd_ddA_intra (the intra term of B-g), per (b, c, h), M = Σ_p dy·x (with z
// Σ_p dy·x + Σ_p dy_lo·x, one chain; chunk_scan_bwd_ddA_intra.cuh):
//   W(l, s)  = (s < l && l <= λ) ? CB(l, s) · d(l, s) : 0      (d as in dcb for this head, without σ:
//                                                              CB is already 0 where σ = 0)
//   S(l, k)  = Σ_{s < k} W(l, s)                               (16-column blocks: see below)
//   T_r(k)   = Σ_{l in [64r, 64r+64), k <= l <= λ} S(l, k)     (four 16-row blocks: see below)
// the sums blocked at kIntraSumBlock = 16 chunk positions, whatever the tile (docs/determinism.md):
//   S(l, k) = C_j + L_j(k), j = ⌊k/16⌋: L_j(k) = Σ_{16j <= s < k} W(l, s) (s increasing from +0.0),
//   C_0 = +0.0, C_{j+1} = C_j + L_j(16j + 16); T_r(k) = ((σ_0 + σ_1) + σ_2) + σ_3 from +0.0, σ_q the
//   sum over the group's rows 64r + 16q .. 64r + 16q + 15 in range, l increasing from +0.0; U_r as T_r.
// deterministic: T_r(k) stored for every r with 64r <= λ and k < min(64r + 64, λ + 1), in
//   intra (b, h, nchunks, Q/64, Q) contiguous; chunk_scan_bwd_ddA sums r increasing.
// fast: T_r(k) atomically added into intra (b, h, nchunks, Q) contiguous, zeroed by the launcher.
// dtx_intra: U_r(s) = Σ_{l in [64r, 64r+64), s <= l <= λ} CB(l, s)·(M(l, s)·exp(min(A(l) − A(s), 0)))
//   (l increasing from +0.0 in T_r's four blocks), the intra part of dΔˣ, in the same slots / layout as intra.
constexpr int kIntraRowGroup = 64;
constexpr int kIntraSumBlock = 16;  // the blocking of S's row prefix and of T's and U's column sums
struct ChunkScanBwdDdaIntraParams {
  TensorRef<const float, 4> CB;  // (b, nchunks, g, Q) rows of Q fp32, unit s-stride; only s <= l <= λ read
  TensorRef<const void, 4> x;  // (b, L, h, p)
  TensorRef<const void, 4> dy;  // (b, L, h, p)
  const float* dt;  // laid out as dA_cumsum
  TensorRef<const float, 3> dA_cumsum;  // (b, h, nchunks) rows of Q, unit Q-stride
  float* intra;
  float* dtx_intra;  // laid out as intra
  long long batch, seqlen, nchunks, nheads;
};

// chunk_scan_bwd_ddA_intra with SSD_FLAG_Z: M's chain over p continues over dy's second term.
struct ChunkScanBwdDdaIntraZParams : ChunkScanBwdDdaIntraParams {
  const void* dy_lo;  // rn_T(dy_fp32 − float(dy)), element type T, laid out as dy
};

// chunk_scan_bwd_dcb_ddA_intra: chunk_scan_bwd_dcb and chunk_scan_bwd_ddA_intra in one pass per
// (b, c, g) (each head's M formed once; chunk_scan_bwd_dcb_ddA_intra.cuh): ddA_intra's block (dy_lo
// read only with SSD_FLAG_Z) plus dcb's outputs. Every output is bitwise the two kernels'.
struct ChunkScanBwdDcbIntraParams : ChunkScanBwdDdaIntraZParams {
  TensorRef<const int, 2> seq_idx;  // (b, L); data null without
  TensorRef<void, 4> dCB;           // (b, nchunks, g, Q) rows of Q, element type T, unit s-stride
  long long ngroups;
};

// chunk_state_bwd_db / chunk_scan_bwd_dc (B-f), per (b, c, g), rows = positions, columns = n:
//   dB_s = Σ_i^{heads increasing} fma(ξ(s)·exp(min(A(Q-1) − A(s), 0))·Δ_s, (x_s ds_c)(n), ·)
//          + Σ_{l ≥ s, l <= λ} dCB(l, s) C_l                                  (mma chain over l)
//   dC_l = Σ_i^{heads increasing} fma(η(l)·exp(A(l)), (dy_l P_c)(n), ·)
//          + Σ_{s <= l} dCB(l, s) B_s                                         (mma chain over s)
// The head term of each head is an mma chain over p from 0 (ds / P rounded to T); the group sum
// starts from +0.0; the dCB chain then continues on the same fp32 accumulator. Stored in T.
struct BcBwdParams {
  TensorRef<const void, 4> xy;  // dB: x, dC: dy   (b, L, h, p)
  TensorRef<const void, 4> state;  // dB: ds, dC: rn_T(P); (b, nchunks, h, p) rows of n in T, unit n-stride
  TensorRef<const void, 4> dCB;  // (b, nchunks, g, Q) rows of Q, element type T, unit s-stride
  TensorRef<const void, 4> other;  // dB: C, dC: B   (b, L, g, n)
  const float* dt;  // laid out as dA_cumsum
  TensorRef<const float, 3> dA_cumsum;  // (b, h, nchunks) rows of Q, unit Q-stride
  TensorRef<const int, 2> seq_idx;  // (b, L); data null without
  TensorRef<void, 4> out;  // dB or dC (b, L, g, n)
  long long batch, seqlen, nchunks, ngroups;
};

// chunk_scan_bwd_ddA (B-g), per (b, c, h), positions k <= λ (0 past λ):
//   ρ     = θ_c·exp(A(λ_c)) · ρsum,  ρsum = Σ_j rho_slots[b, h, c, j] (fp64, j increasing from +0.0;
//           fast: rho[b, h, c])
//   intra = Σ_{r = k/64}^{λ/64} T_r(k) (r increasing from +0.0; fast: intra[b, h, c, k])
//   next  = Σ_{l < k} w_l (l increasing from +0.0)
//   prev  = (Σ_{l = λ}^{k} v_l (l decreasing from +0.0)) + ρ
//   ddA_k = rn_fp32((intra + next) + prev), every sum and the combination in fp64
//   dΔˣ_k = rn_fp32(Σ_{r = k/64}^{λ/64} U_r(k) + dΔˣst_k) (fp64, r increasing from +0.0; fast:
//           dtx_intra[b, h, c, k] + dΔˣst_k), written over ddt_x (which held dΔˣst)
struct ChunkScanBwdDdaParams {
  const float* intra;
  const float* dtx_intra;  // laid out as intra
  float* ddt_x;  // laid out as dA_cumsum: in dΔˣst (chunk_scan_bwd_dx), out dΔˣ
  const double* rho_slots;  // deterministic
  const float* rho;         // fast
  const float* w;  // laid out as dA_cumsum
  const float* v;  // laid out as dA_cumsum
  TensorRef<const float, 3> dA_cumsum;  // (b, h, nchunks) rows of Q, unit Q-stride
  float* ddA;  // laid out as dA_cumsum
  TensorRef<const int, 2> seq_idx;  // (b, L); data null without
  long long batch, seqlen, nchunks, nheads, rho_slots_per_chunk;  // = p*n/32 (deterministic)
};

// ------------------------------------------------------------------------------------------------
// Launch geometry (the host launchers and config validation use these; each kernel static_asserts
// against them). Grids: x = tiles inside one (batch, chunk, head|group), y = batch * nchunks
// (batch fastest), z = heads | groups, each grid-stride (any grid >= 1 is correct).
namespace bwd_geom {

using fwd_geom::imax;
using fwd_geom::imin;
using fwd_geom::kMaxStaticSmem;
using fwd_geom::kPad;
using fwd_geom::two_phase_fixed_bytes;
using fwd_geom::two_phase_body_bytes;
using fwd_geom::two_phase_smem_bytes;
using fwd_geom::two_phase_stages;
using fwd_geom::TwoPhaseBytes;

// ---- chunk_scan_bwd_dx<Q, P, N, HEADS_PER_GROUP, BLOCK_M (l), BLOCK_K, T, HAS_D, D_PER_HEADDIM, HAS_SEQ_IDX>
// 8 warps of one 16-row band each: BM/16 (rows) x 128/BM (P blocks), 8 x 1 for BM = 128, 4 x 2 for
// 64 (the kernel's header says why). BLOCK_K is the step of the contractions over n
// (min(BLOCK_K, N)) and over m (BLOCK_K).
// 256, not 128: 8 warps share the tile's accumulators (at most 32 per thread, 128 registers), so 2
// blocks = 16 warps fit per SM instead of 8 (the kernel is latency-bound).
SSD_HOST_DEVICE constexpr int dx_threads() { return 256; }
SSD_HOST_DEVICE constexpr int dx_tiles(int q, int bm) { return q / bm; }
SSD_HOST_DEVICE constexpr int dx_block_kn(int n, int bk) { return imin(n, bk); }
SSD_HOST_DEVICE constexpr int dx_stage_a_bytes(int p, int n, int bm, int bk) {
  return (bm + p) * (dx_block_kn(n, bk) + kPad) * 2;  // B|C tile [l][n] + ds|P tile [p][n], in T
}
SSD_HOST_DEVICE constexpr int dx_stage_b_bytes(int p, int bm, int bk) {
  return bk * (bm + 4) * 4 + bk * (p + kPad) * 2;  // CB tile [m][l] fp32 + dy tile [m][p]
}
SSD_HOST_DEVICE constexpr int dx_epilogue_bytes(int p, int bm) { return bm * (p + 4) * 4; }
SSD_HOST_DEVICE constexpr TwoPhaseBytes dx_bytes(int p, int n, int bm, int bk) {
  return {dx_stage_a_bytes(p, n, bm, bk), dx_stage_b_bytes(p, bm, bk), dx_epilogue_bytes(p, bm)};
}
// The two rings' depths: phase A's (the n contractions, 2 × N/BKN steps a tile) gets 3 buffers
// wherever they fit beside phase B's 2, phase B's 3 where those fit too (two steps of copies in
// flight instead of one). A tile is legal iff 2 and 2 fit, as with two_phase_stages.
SSD_HOST_DEVICE constexpr int dx_body_bytes(int stages_a, int stages_b, TwoPhaseBytes b) {
  return imax(imax(stages_a * b.stage_a, stages_b * b.stage_b), b.epilogue);
}
SSD_HOST_DEVICE constexpr int dx_stages_a(TwoPhaseBytes b, int q, bool seq) {
  return dx_body_bytes(3, 2, b) + two_phase_fixed_bytes(q, seq) <= kMaxStaticSmem ? 3 : 2;
}
SSD_HOST_DEVICE constexpr int dx_stages_b(TwoPhaseBytes b, int q, bool seq) {
  return dx_body_bytes(dx_stages_a(b, q, seq), 3, b) + two_phase_fixed_bytes(q, seq) <= kMaxStaticSmem ? 3 : 2;
}
SSD_HOST_DEVICE constexpr int dx_smem_bytes(int q, int p, int n, int bm, int bk, bool seq) {
  return dx_body_bytes(dx_stages_a(dx_bytes(p, n, bm, bk), q, seq), dx_stages_b(dx_bytes(p, n, bm, bk), q, seq),
                       dx_bytes(p, n, bm, bk)) +
         two_phase_fixed_bytes(q, seq);
}

// ---- chunk_scan_bwd_dx with resident rows (sm_90 / sm_90a, Spec::kResidentRows): the n loops'
// row tile (C | B, BLOCK_M x N in T) is copied once per phase into shared memory and stays there
// for both terms' chains (hi, then lo), instead of being copied again for the lo chain; only the K
// tile (P | ds terms, P x BKN) streams through the ring. Half of phase A's copies go, a quarter of
// the kernel's bytes from L2. The body is dynamic shared memory; with the fixed arrays (static) a
// block takes at most dx_res_budget(), so 2 blocks of 256 threads fit per SM (228 KiB, 1 KiB
// reserved per block). The same mma chains in the same order as the 48 KiB layout: the same bits.
SSD_HOST_DEVICE constexpr int dx_res_budget() { return 113 * 1024; }
// wgmma (sm_90a, Spec::kWgmma) for the n loops where the tile allows it: BLOCK_M = 128 (two
// warpgroups of 64 rows, each over the whole headdim: the warps' row bands of the mma.sync layout),
// 64-wide K steps (BLOCK_K = 64, dstate a multiple of 64), headdim 32 or 64 (wgmma N). The row tile
// and the K tile are then 128-byte swizzled atoms (rows of 64 elements, no padding), the dynamic base
// aligned up to 1 KiB (1 KiB of slack). `wg` below selects that layout.
SSD_HOST_DEVICE constexpr bool dx_wg_shape(int p, int n, int bm, int bk) {
  return bm == 128 && bk == 64 && n % 64 == 0 && (p == 32 || p == 64);
}
SSD_HOST_DEVICE constexpr int dx_res_rows_bytes(int n, int bm, bool wg = false) { return bm * (wg ? n : n + kPad) * 2; }
SSD_HOST_DEVICE constexpr int dx_res_kstage_bytes(int p, int n, int bk, bool wg = false) {
  return p * (wg ? 64 : dx_block_kn(n, bk) + kPad) * 2;
}
SSD_HOST_DEVICE constexpr int dx_res_body_bytes(int p, int n, int bm, int bk, int stages_a, int stages_b, bool wg = false) {
  return imax(imax(dx_res_rows_bytes(n, bm, wg) + stages_a * dx_res_kstage_bytes(p, n, bk, wg),
                   stages_b * dx_stage_b_bytes(p, bm, bk)),
              dx_epilogue_bytes(p, bm)) +
         (wg ? 1024 : 0);
}
// Depths: the K ring 4 buffers where they fit beside phase B's 2 (else 3, else 2), phase B's 3
// where they fit too. Legal iff 2 and 2 fit (in the padded layout, which is never smaller).
SSD_HOST_DEVICE constexpr bool dx_res_fits(int q, int p, int n, int bm, int bk, bool seq, int sa, int sb, bool wg = false) {
  return dx_res_body_bytes(p, n, bm, bk, sa, sb, wg) + two_phase_fixed_bytes(q, seq) <= dx_res_budget();
}
SSD_HOST_DEVICE constexpr int dx_res_stages_a(int q, int p, int n, int bm, int bk, bool seq, bool wg = false) {
  return dx_res_fits(q, p, n, bm, bk, seq, 4, 2, wg) ? 4 : dx_res_fits(q, p, n, bm, bk, seq, 3, 2, wg) ? 3 : 2;
}
SSD_HOST_DEVICE constexpr int dx_res_stages_b(int q, int p, int n, int bm, int bk, bool seq, bool wg = false) {
  return dx_res_fits(q, p, n, bm, bk, seq, dx_res_stages_a(q, p, n, bm, bk, seq, wg), 3, wg) ? 3 : 2;
}
// The dynamic shared memory of a block (the body, with wg its alignment slack); the fixed arrays are static.
SSD_HOST_DEVICE constexpr int dx_res_dynamic_bytes(int q, int p, int n, int bm, int bk, bool seq, bool wg = false) {
  return dx_res_body_bytes(p, n, bm, bk, dx_res_stages_a(q, p, n, bm, bk, seq, wg),
                           dx_res_stages_b(q, p, n, bm, bk, seq, wg), wg);
}

// ---- chunk_scan_bwd_dcb<Q, P, HEADS_PER_GROUP, BLOCK_M (l), BLOCK_N (s), BLOCK_K (p step), T, HAS_SEQ_IDX>
// Lower-triangle tiles as bmm_chunk_fwd; warp grid as fwd_geom::warp_grid_threads.
SSD_HOST_DEVICE constexpr int dcb_threads(int bm, int bn) { return fwd_geom::warp_grid_threads(bm, bn); }
SSD_HOST_DEVICE constexpr int dcb_tiles(int q, int bm, int bn) { return fwd_geom::bmm_chunk_tiles(q, bm, bn); }
SSD_HOST_DEVICE constexpr int dcb_block_kp(int p, int bk) { return imin(p, bk); }
SSD_HOST_DEVICE constexpr int dcb_stage_bytes(int p, int bm, int bn, int bk) {
  // dy tile [l][p] + x tile [s][p] in T, + the stage's head's A(l) rows, A(s) and Δ(s) columns in
  // fp32 (filled with the head's last p-step, read by that head's epilogue)
  return (bm + bn) * (dcb_block_kp(p, bk) + kPad) * 2 + (bm + 2 * bn) * 4;
}
SSD_HOST_DEVICE constexpr int dcb_fixed_bytes(int bm, int bn, bool seq) { return seq ? (bm + bn) * 4 : 0; }
SSD_HOST_DEVICE constexpr int dcb_stages(int /*q*/, int p, int bm, int bn, int bk, bool seq) {
  return 3 * dcb_stage_bytes(p, bm, bn, bk) + dcb_fixed_bytes(bm, bn, seq) <= kMaxStaticSmem ? 3 : 2;
}
SSD_HOST_DEVICE constexpr int dcb_smem_bytes(int q, int p, int bm, int bn, int bk, bool seq) {
  return dcb_stages(q, p, bm, bn, bk, seq) * dcb_stage_bytes(p, bm, bn, bk) + dcb_fixed_bytes(bm, bn, seq);
}

// ---- chunk_scan_bwd_ddA_intra<Q, P, HEADS_PER_GROUP, BLOCK_M (l, 64 | 128), BLOCK_N (s), BLOCK_K (p step), T, DETERMINISTIC>
// grid.x = Q / BLOCK_M row blocks; each walks its column tiles s0 = 0, BN, ... in increasing order.
SSD_HOST_DEVICE constexpr int intra_threads(int bm, int bn) { return fwd_geom::warp_grid_threads(bm, bn); }
SSD_HOST_DEVICE constexpr int intra_tiles(int q, int bm) { return q / bm; }
SSD_HOST_DEVICE constexpr int intra_stage_bytes(int p, int bm, int bn, int bk) {
  return (bm + bn) * (dcb_block_kp(p, bk) + kPad) * 2;  // dy tile [l][p] + x tile [s][p]
}
// fp32 epilogue tiles: W / S rows padded to 16-byte multiples with 4 floats (8 consecutive rows'
// float4 on distinct banks, the row owners' walk); u rows with 8 (the mma fragments' 8-byte stores on
// distinct banks). u lives in the stage buffer the last p-step read when it fits there.
SSD_HOST_DEVICE constexpr int intra_w_ld(int bn) { return bn + 4; }
SSD_HOST_DEVICE constexpr int intra_u_ld(int bn) { return bn + 8; }
SSD_HOST_DEVICE constexpr int intra_w_bytes(int bm, int bn) { return bm * intra_w_ld(bn) * 4; }  // W / S tile
SSD_HOST_DEVICE constexpr bool intra_u_in_stage(int p, int bm, int bn, int bk) {
  return intra_stage_bytes(p, bm, bn, bk) >= bm * intra_u_ld(bn) * 4;
}
SSD_HOST_DEVICE constexpr int intra_fixed_bytes(int q) { return q * 4 * 2; }  // A, Δ of the chunk
SSD_HOST_DEVICE constexpr int intra_stages(int q, int p, int bm, int bn, int bk) {
  return 3 * intra_stage_bytes(p, bm, bn, bk) + intra_w_bytes(bm, bn) + intra_fixed_bytes(q) <= kMaxStaticSmem ? 3
                                                                                                             : 2;
}
SSD_HOST_DEVICE constexpr int intra_smem_bytes(int q, int p, int bm, int bn, int bk) {
  // stages of (dy, x) + the W / S tile + A, Δ (CB goes straight to registers; row carries in registers)
  return intra_stages(q, p, bm, bn, bk) * intra_stage_bytes(p, bm, bn, bk) + intra_w_bytes(bm, bn) +
         intra_fixed_bytes(q);
}

// ---- chunk_scan_bwd_dcb_ddA_intra<Q, P, HEADS_PER_GROUP, BLOCK_M (l, 64 | 128), BLOCK_N (s), BLOCK_K, T, ...>
// grid.x = Q / BLOCK_M row blocks of a (b, c, g); ddA_intra's tiles, plus per stage the head's A rows,
// A columns and Δ columns (fp32), the row carries of all the group's heads and, with seq_idx, the
// chunk's sequence ids.
SSD_HOST_DEVICE constexpr int dcb_intra_threads(int bm, int bn) { return intra_threads(bm, bn); }
SSD_HOST_DEVICE constexpr int dcb_intra_tiles(int q, int bm) { return q / bm; }
SSD_HOST_DEVICE constexpr int dcb_intra_stage_bytes(int p, int bm, int bn, int bk) {
  return intra_stage_bytes(p, bm, bn, bk) + (bm + 2 * bn) * 4;
}
SSD_HOST_DEVICE constexpr int dcb_intra_fixed_bytes(int q, int r, int bm, int bn, bool seq) {
  return intra_w_bytes(bm, bn) + r * bm * 4 + (seq ? q * 4 : 0);
}
SSD_HOST_DEVICE constexpr int dcb_intra_stages(int q, int p, int r, int bm, int bn, int bk, bool seq) {
  return 3 * dcb_intra_stage_bytes(p, bm, bn, bk) + dcb_intra_fixed_bytes(q, r, bm, bn, seq) <= kMaxStaticSmem ? 3 : 2;
}
SSD_HOST_DEVICE constexpr int dcb_intra_smem_bytes(int q, int p, int r, int bm, int bn, int bk, bool seq) {
  return dcb_intra_stages(q, p, r, bm, bn, bk, seq) * dcb_intra_stage_bytes(p, bm, bn, bk) +
         dcb_intra_fixed_bytes(q, r, bm, bn, seq);
}

// ---- bc_bwd<Q, P, N, HEADS_PER_GROUP, BLOCK_M (positions), BLOCK_N (n), BLOCK_K, T, IS_DC, HAS_SEQ_IDX>
// grid.x = (Q / BLOCK_M) * (N / BLOCK_N). BLOCK_K: step over p (min(BLOCK_K, P)) in the head
// phase and over positions in the dCB phase. Two fp32 warp tiles stay live (head chain + group
// sum, up to 64 registers each), so the block may have at most bc_max_threads() threads
// (255 registers per thread): every legal tile but 128 x 256.
SSD_HOST_DEVICE constexpr int bc_threads(int bm, int bn) { return fwd_geom::warp_grid_threads(bm, bn); }
SSD_HOST_DEVICE constexpr int bc_max_threads() { return 256; }
SSD_HOST_DEVICE constexpr int bc_tiles(int q, int n, int bm, int bn) { return (q / bm) * (n / bn); }
SSD_HOST_DEVICE constexpr int bc_block_kp(int p, int bk) { return imin(p, bk); }
SSD_HOST_DEVICE constexpr int bc_stage_bytes(int p, int bm, int bn, int bk) {
  // head phase: x|dy tile [pos][p] + state tile [p][n] (in T); dCB phase: dCB tile [l][s] (dB:
  // BK x BM, dC: BM x BK; the larger of the two) + C|B tile [pos][n]
  return imax(bm * (bc_block_kp(p, bk) + kPad) * 2 + bc_block_kp(p, bk) * (bn + kPad) * 2,
              imax(bk * (bm + kPad), bm * (bk + kPad)) * 2 + bk * (bn + kPad) * 2);
}
SSD_HOST_DEVICE constexpr int bc_fixed_bytes(int bm) { return 2 * bm * 4; }  // per-head row scales, 2 buffers
SSD_HOST_DEVICE constexpr int bc_stages(int /*q*/, int p, int bm, int bn, int bk, bool /*seq: registers only*/) {
  return 3 * bc_stage_bytes(p, bm, bn, bk) + bc_fixed_bytes(bm) <= kMaxStaticSmem ? 3 : 2;
}
SSD_HOST_DEVICE constexpr int bc_smem_bytes(int q, int p, int bm, int bn, int bk, bool seq) {
  return bc_stages(q, p, bm, bn, bk, seq) * bc_stage_bytes(p, bm, bn, bk) + bc_fixed_bytes(bm);
}

// ---- chunk_scan_bwd_ddA<Q, BLOCK (threads), DETERMINISTIC, HAS_SEQ_IDX>
// One warp per (b, c, h) item, BLOCK / 32 items per block (grid-stride per warp over
// b * nchunks * nheads, h fastest). Each warp owns ddA_warp_doubles(Q) fp64 of shared memory:
// w (then next) and v reversed (then prev) rows of Q + 2 (the 2 keep the three lanes' 16-byte
// reads of one step in different banks), and one round of ρ slots.
SSD_HOST_DEVICE constexpr int ddA_items_per_block(int bm) { return bm / 32; }
SSD_HOST_DEVICE constexpr int ddA_rho_round() { return 128; }  // ρ slots per refill of the buffer
SSD_HOST_DEVICE constexpr int ddA_warp_doubles(int q) { return 2 * (q + 2) + ddA_rho_round(); }
SSD_HOST_DEVICE constexpr int ddA_smem_bytes(int q, int bm) { return ddA_items_per_block(bm) * ddA_warp_doubles(q) * 8; }

// ---- Tile legality (as fwd_geom's): nullptr when legal, else what is wrong.
using fwd_geom::divides;
using fwd_geom::pow2_in;

// The rules of both layouts but shared memory.
SSD_HOST_DEVICE constexpr const char* dx_tile_shape_problem(int q, int p, int n, int bm, int bn, int bk) {
  return !pow2_in(bm, 64, 128) || bn != 0 || !pow2_in(bk, 16, 64) ? "m in 64, 128; n = 0; k in 16, 32, 64"
         : !divides(bm, q) || !divides(bk, q)                      ? "m and k must divide chunk_size"
         : bm * p > 8192                                           ? "m * headdim <= 8192 (accumulator registers)"
         : n % dx_block_kn(n, bk) != 0                             ? "k must divide dstate or exceed it"
                                                                   : nullptr;
}
SSD_HOST_DEVICE constexpr const char* dx_tile_problem(int q, int p, int n, int bm, int bn, int bk, bool seq) {
  const char* shape = dx_tile_shape_problem(q, p, n, bm, bn, bk);
  return shape ? shape
         : dx_smem_bytes(q, p, n, bm, bk, seq) > kMaxStaticSmem ? "the tiles' shared memory must fit in 48 KiB"
                                                                : nullptr;
}
// The resident-rows layout's tiles (sm_90, sm_90a): the same rules, its own shared-memory bound.
SSD_HOST_DEVICE constexpr const char* dx_res_tile_problem(int q, int p, int n, int bm, int bn, int bk, bool seq) {
  const char* shape = dx_tile_shape_problem(q, p, n, bm, bn, bk);
  return shape ? shape
         : !dx_res_fits(q, p, n, bm, bk, seq, 2, 2) ? "the tiles' shared memory must fit in 113 KiB (2 blocks per SM)"
                                                    : nullptr;
}

SSD_HOST_DEVICE constexpr const char* dcb_tile_problem(int q, int p, int bm, int bn, int bk, bool seq) {
  return !pow2_in(bm, 16, 128) || !pow2_in(bn, 16, 128) || !pow2_in(bk, 16, 64)
             ? "m, n in 16, 32, 64, 128; k in 16, 32, 64"
         : !divides(bm, q) || !divides(bn, q)                    ? "m and n must divide chunk_size"
         : p % dcb_block_kp(p, bk) != 0                          ? "k must divide headdim or exceed it"
         : dcb_smem_bytes(q, p, bm, bn, bk, seq) > kMaxStaticSmem ? "the tiles' shared memory must fit in 48 KiB"
                                                                  : nullptr;
}

SSD_HOST_DEVICE constexpr const char* intra_tile_problem(int q, int p, int bm, int bn, int bk) {
  return !pow2_in(bm, 64, 128) || !pow2_in(bn, 16, 64) || !pow2_in(bk, 16, 64)
             ? "m in 64, 128; n in 16, 32, 64; k in 16, 32, 64"
         : !divides(bm, q)                                     ? "m must divide chunk_size"
         : p % dcb_block_kp(p, bk) != 0                        ? "k must divide headdim or exceed it"
         : intra_smem_bytes(q, p, bm, bn, bk) > kMaxStaticSmem ? "the tiles' shared memory must fit in 48 KiB"
                                                               : nullptr;
}

// r: heads per group (the row carries of every head of the group stay in shared memory).
SSD_HOST_DEVICE constexpr const char* dcb_intra_tile_problem(int q, int p, int r, int bm, int bn, int bk, bool seq) {
  return intra_tile_problem(q, p, bm, bn, bk) != nullptr ? intra_tile_problem(q, p, bm, bn, bk)
         : dcb_intra_smem_bytes(q, p, r, bm, bn, bk, seq) > kMaxStaticSmem
             ? "the tiles' shared memory (with a row carry per head of the group) must fit in 48 KiB"
             : nullptr;
}

// chunk_state_bwd_db and chunk_scan_bwd_dc (the same template).
SSD_HOST_DEVICE constexpr const char* bc_tile_problem(int q, int p, int n, int bm, int bn, int bk, bool seq) {
  return !pow2_in(bm, 16, 128) || !pow2_in(bn, 16, 256) || !pow2_in(bk, 16, 64)
             ? "m in 16, 32, 64, 128; n in 16, 32, 64, 128, 256; k in 16, 32, 64"
         : !divides(bm, q) || !divides(bn, n) || !divides(bk, q) ? "m | chunk_size, n | dstate, k | chunk_size"
         : p % bc_block_kp(p, bk) != 0                           ? "k must divide headdim or exceed it"
         : bc_threads(bm, bn) > bc_max_threads()                 ? "m x n too large (two live accumulator tiles)"
         : bc_smem_bytes(q, p, bm, bn, bk, seq) > kMaxStaticSmem ? "the tiles' shared memory must fit in 48 KiB"
                                                                 : nullptr;
}

// bc_bwd on wgmma (sm_90a, bc_bwd_sm90a.cuh): BLOCK_M / 64 warpgroups, each 64 positions x BLOCK_N;
// the K step is 64 in both phases (one 128-byte swizzled column block of p, or of positions), so the
// shape needs chunk_size, headdim and dstate in whole 64s. A stage holds the A tile (BLOCK_M x 64:
// x|dy, or dCB as [l][s] / [s][l]) and the B tile (64 x BLOCK_N: the state, or C|B), 128 bytes a row.
SSD_HOST_DEVICE constexpr bool bc_wgmma_shape(int q, int p, int n) { return q % 64 == 0 && p % 64 == 0 && n % 64 == 0; }
SSD_HOST_DEVICE constexpr int bc_wgmma_threads(int bm) { return bm / 64 * 128; }
SSD_HOST_DEVICE constexpr int bc_wgmma_stage_bytes(int bm, int bn) { return (bm + bn) * 128; }
// The ring prefetches STAGES - 2 steps: 4 with the 128 x 128 tile (one block per SM), 2 for the
// smaller tiles (several blocks per SM hide the rest).
SSD_HOST_DEVICE constexpr int bc_wgmma_stages(int bm, int bn) { return bm * bn >= 128 * 128 ? 6 : 4; }
// The stages, four buffers of row scales (fp32), 1024 bytes of alignment slack.
SSD_HOST_DEVICE constexpr int bc_wgmma_smem_bytes(int bm, int bn) {
  return bc_wgmma_stages(bm, bn) * bc_wgmma_stage_bytes(bm, bn) + 4 * bm * 4 + 1024;
}
SSD_HOST_DEVICE constexpr const char* bc_wgmma_tile_problem(int q, int p, int n, int bm, int bn, int bk) {
  return !bc_wgmma_shape(q, p, n) ? "the wgmma kernel needs chunk_size, headdim and dstate multiples of 64"
         : (bm != 64 && bm != 128) || (bn != 64 && bn != 128) || bk != 64
             ? "m in 64, 128; n in 64, 128; k = 64 (wgmma on sm_90a)"
         : !divides(bm, q) || !divides(bn, n)    ? "m | chunk_size, n | dstate"
         : bc_wgmma_smem_bytes(bm, bn) > 227 * 1024 ? "shared memory above 227 KiB"
                                                    : nullptr;
}

SSD_HOST_DEVICE constexpr const char* ddA_tile_problem(int bm, int bn, int bk) {
  return !pow2_in(bm, 64, 256) || bn != 0 || bk != 0 ? "m in 64, 128, 256; n = k = 0" : nullptr;
}

// chunk_state_passing_bwd: chunk_state_passing_fwd's geometry (warp tiles of at most 32 x 32, its stage
// count, two Q-rows of weights); the ρ blocks of 32 consecutive p*n elements must lie inside one
// warp's fragments: n a multiple of 32 (a block is one row of a 32-wide warp tile), or n = dstate = 16
// (a block is two adjacent rows).
SSD_HOST_DEVICE constexpr const char* chunk_state_passing_bwd_tile_problem(int q, int p, int n, int bm, int bn,
                                                                           int bk) {
  return fwd_geom::chunk_state_passing_tile_problem(q, p, n, bm, bn, bk) != nullptr
             ? fwd_geom::chunk_state_passing_tile_problem(q, p, n, bm, bn, bk)
         : bn % 32 != 0 && !(bn == 16 && n == 16)
             ? "n must be a multiple of 32, or 16 with dstate 16 (the blocks of 32 consecutive p*n elements of rho)"
             : nullptr;
}

// chunk_state_passing_bwd on sm_90a (wgmma; chunk_state_passing_bwd_sm90a.cuh): chunk_state_passing_fwd's
// wgmma geometry (fwd_geom: warpgroups, heads per block, ring) and tiles (m in 64, 128; n in 64, 128; k in
// 32, 64; n | dstate, so ρ's blocks of 32 columns lie in one warp's fragments; within 227 KiB of shared
// memory); the weights of two chunks per warpgroup, one P_c buffer, no output staging tile. Used when the
// arch is sm_90a and headdim, dstate are multiples of 64.
// P_c is copied at its chunk's first step into the one buffer (the previous chunk's readers passed that
// step's barrier) and read in the chunk's epilogue: visible from STAGES - 2 steps later on (the step whose
// cp.async wait covers the copy), else after a wait and a barrier in the epilogue. Chunks shorter than 128
// positions counting passes (Q = 32, or Q = 64 without z) keep the mma.sync kernel: the rule of the walk's
// first form (two P_c buffers copied a ring's distance ahead), no longer needed for correctness, kept so
// that each specialization keeps its kernel.
SSD_HOST_DEVICE constexpr bool chunk_state_passing_bwd_wgmma_walk(int q, int passes) { return passes * q >= 128; }
// The ring is the forward's (fwd_geom::chunk_state_passing_wgmma_stages: 128 positions ahead of the stage
// being multiplied). Measured at the default 64 x 64 x 64 (session 30, docs/perf.md): 3 stages (64 ahead)
// at 3 blocks per SM ran 33 % slower, 5 stages (192 ahead) the same as 4.
// wgmma groups left running while the next A fragment is built (two A fragments live): the forward
// state pass's choice (fwd_geom::chunk_state_passing_wgmma_in_flight), and 1 also for the default
// 64 x 64 x 64: the second fragment fits without a spill (sm_90a, bf16 / fp16, every flag, headdim 64 /
// 128, dstate 64-256), and the k16 steps stop waiting for each other (0.862 -> 0.832 ms at nemotronh-56b
// b=4 L=2048, docs/perf.md). Other 64-row tiles keep 0 (64 x 128: 4-128 bytes of spill with 1).
SSD_HOST_DEVICE constexpr int chunk_state_passing_bwd_wgmma_in_flight(int bm, int bn, int bk) {
  // 128 x 128 x 64 (the call's tile where a slice gives it a block per SM) keeps 0: its epilogue already
  // takes 255 registers with 12 bytes of spill, 20 with a second fragment.
  return (fwd_geom::chunk_state_passing_wgmma_in_flight(bm, bn, bk) == 1 && !(bn == 128 && bk == 64)) ||
                 (bm == 64 && bn == 64 && bk == 64)
             ? 1
             : 0;
}
// P_c's shared rows (fp32 words): BLOCK_N + 8, 32 bytes past a multiple of 128 bytes.
SSD_HOST_DEVICE constexpr int chunk_state_passing_bwd_wgmma_p_ld(int bn) { return bn + 8; }
// The forward's stages, weights, mbarriers (with `tma`, SSD_FLAG_TMA) and alignment (state_bytes 4: no
// staged output tile), plus P_c's buffer of BLOCK_M rows.
SSD_HOST_DEVICE constexpr int chunk_state_passing_bwd_wgmma_p_bytes(int bm, int bn) {
  return bm * chunk_state_passing_bwd_wgmma_p_ld(bn) * 4;
}
SSD_HOST_DEVICE constexpr int chunk_state_passing_bwd_wgmma_smem_bytes(int q, int bm, int bn, int bk, bool tma = false) {
  return fwd_geom::chunk_state_passing_wgmma_smem_bytes(q, bm, bn, bk, 4, tma) + chunk_state_passing_bwd_wgmma_p_bytes(bm, bn);
}
SSD_HOST_DEVICE constexpr const char* chunk_state_passing_bwd_wgmma_tile_problem(int q, int p, int n,
                                                                                 int heads_per_group, int bm, int bn,
                                                                                 int bk) {
  return fwd_geom::chunk_state_passing_wgmma_tile_problem(q, p, n, heads_per_group, bm, bn, bk) != nullptr
             ? fwd_geom::chunk_state_passing_wgmma_tile_problem(q, p, n, heads_per_group, bm, bn, bk)
         : chunk_state_passing_bwd_wgmma_smem_bytes(q, bm, bn, bk, true) > 227 * 1024
             ? "shared memory above 227 KiB (stages, weights and the P_c buffer)"
             : nullptr;
}

}  // namespace bwd_geom
}  // namespace ssd_kernels
