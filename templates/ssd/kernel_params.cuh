// Kernel parameter blocks, shared verbatim by the host launchers (g++) and the kernels (NVRTC).
// Plain C layout only: pointers, TensorRef views (primitives/tensor_ref.cuh: pointer + strides in
// elements), long long, int, float.
#pragma once

#include "ssd/primitives/tensor_ref.cuh"

namespace ssd_kernels {

// chunk_cumsum_fwd: dt (b, L, h) -> dt_out, dA_cumsum (b, h, nchunks, Q), Q-axis stride 1.
struct ChunkCumsumFwdParams {
  TensorRef<const void, 3> dt;  // (b, L, h), dt's dtype
  TensorRef<const float, 1> A;   // (h)
  TensorRef<const float, 1> dt_bias;  // (h); data null when the specialization has no dt_bias
  TensorRef<float, 3> dt_out;     // (b, h, nchunks) rows of Q, unit Q-stride
  TensorRef<float, 3> dA_cumsum;  // (b, h, nchunks) rows of Q, unit Q-stride
  long long batch, seqlen, nheads, nchunks;
  float dt_limit_lo, dt_limit_hi;
};

// chunk_cumsum_fwd's tile: m = BLOCK_H heads per block, n = threads per block. Δ and the cumulative
// sum of the block's heads are staged in shared memory, a whole chunk at a time. chunk_cumsum_bwd's:
// m = BLOCK_H heads per block, n = positions per step.
namespace cumsum_geom {
SSD_HOST_DEVICE constexpr int fwd_smem_bytes(int q, int block_h) { return 2 * block_h * (q + 1) * 4; }
SSD_HOST_DEVICE constexpr const char* fwd_tile_problem(int q, int block_h, int threads) {
  return !(block_h == 8 || block_h == 16 || block_h == 32)              ? "m (heads per block) in 8, 16, 32"
         : !(threads == 64 || threads == 128 || threads == 256)          ? "n (threads per block) in 64, 128, 256"
         : fwd_smem_bytes(q, block_h) > 48 * 1024                        ? "m * (chunk_size + 1) * 8 bytes must fit in 48 KiB"
                                                                         : nullptr;
}
// chunk_cumsum_bwd: 16 threads per head of the block, at most 512 per block (one per head runs the
// head's chain): Δ's softplus and sigmoid, per element, are most of the kernel's instructions, and
// with 4 threads per head the whole problem held ~8 warps per SM (docs/perf.md, backward log).
SSD_HOST_DEVICE constexpr int bwd_threads(int block_h) { return 16 * block_h < 512 ? 16 * block_h : 512; }
}  // namespace cumsum_geom

// chunk_cumsum_bwd: adjoint of chunk_cumsum_fwd.
struct ChunkCumsumBwdParams {
  TensorRef<const void, 3> dt;  // (b, L, h)
  TensorRef<const float, 1> A;
  TensorRef<const float, 1> dt_bias;
  TensorRef<const float, 3> ddA_cumsum;  // (b, h, nchunks) rows of Q, unit Q-stride
  TensorRef<const float, 3> ddt_out;     // (b, h, nchunks) rows of Q, unit Q-stride
  TensorRef<void, 3> ddt;                // (b, L, h), dtype of dt
  // deterministic: per-chunk partials (b, nchunks, h, P) contiguous, P = 2 with dt_bias else 1,
  // accumulated and stored in fp64 (docs/determinism.md: the whole-sequence sums).
  double* partials;
  // fast: accumulated with atomics into dA (h) and ddt_bias (h), zeroed by the launcher.
  TensorRef<float, 1> dA;
  TensorRef<float, 1> ddt_bias;
  long long batch, seqlen, nheads, nchunks;
  float dt_limit_lo, dt_limit_hi;
};

// reduce_head_partials: fp64 partials (b, nchunks, h, P) contiguous -> out[j](h).
constexpr int kMaxReduceOutputs = 8;
struct ReduceHeadPartialsParams {
  const double* partials;
  TensorRef<float, 1> out[kMaxReduceOutputs];
  long long batch, nchunks, nheads;
};

// state_passing_fwd (math F3): chunk states s (b, nchunks, h, p*n) fp32, overwritten in place by
// the entering states P; final states (b, h, p*n) fp32. The flattened p*n axis has unit stride.
struct StatePassingFwdParams {
  TensorRef<float, 3> states;  // (b, nchunks, h) rows of p*n
  TensorRef<const float, 3> dA_cumsum;  // (b, h, nchunks) rows of Q, unit Q-stride: the carry reads position λ_c
  TensorRef<const float, 2> initial_states;  // (b, h) rows of p*n; data null without
  TensorRef<float, 2> final_states;  // (b, h) rows of p*n; data null without
  TensorRef<const int, 2> seq_idx;  // (b, L); data null without
  long long batch, seqlen, nheads, nchunks, state_size;  // state_size = p * n
};

// gate_bwd (math B-a): dout, x, z, out_x (b, L, h, p) in the element type; dy, dz written in it.
// dD partials: fast mode adds into dD directly; deterministic mode stores one fp64 value per
// (b, c, h) for D (h), per (b, c, h, p) for D (h, p), contiguous, for reduce_head_partials.
struct GateBwdParams {
  TensorRef<const void, 4> dout;
  TensorRef<const void, 4> x;
  TensorRef<const void, 4> z;      // data null without z
  TensorRef<const void, 4> out_x;  // y = the forward's output before the gate; data null without z
  TensorRef<void, 4> dy;           // written with z (without z, dy is dout itself)
  TensorRef<void, 4> dz;           // written with z
  double* partials;  // deterministic mode
  float* dD;        // fast mode: (h) or (h, p), contiguous, zeroed by the launcher
  long long batch, seqlen, nheads, nchunks;
};

// gate_bwd's geometry (no tile): a thread owns 8 consecutive p (one 16-byte row piece), P/8 threads
// a head, a block of 64 threads heads_per_block(P) adjacent heads of one (b, c). Small blocks: the
// items are few (b · nchunks · h / heads_per_block, 1024 at b=4 L=2048 h=256 p=64) and each is a
// long stream, so the finer grain spreads them more evenly over the SMs.
namespace gate_geom {
constexpr int kBlockThreads = 64;
SSD_HOST_DEVICE constexpr int threads_per_head(int headdim) { return headdim / 8; }
SSD_HOST_DEVICE constexpr int heads_per_block(int headdim) { return kBlockThreads / threads_per_head(headdim); }
// Head blocks per (b, c): the work items are (b, c, head block), the last block of a (b, c) predicated
// past nheads (the launcher's grid and the kernel's item count).
SSD_HOST_DEVICE constexpr long long head_blocks(long long nheads, int headdim) {
  return (nheads + heads_per_block(headdim) - 1) / heads_per_block(headdim);
}
}  // namespace gate_geom

// gate_bwd with z (the launcher always binds this block; a specialization without z reads only its
// GateBwdParams prefix): dy's rounding residual, the second term of dy where it enters dA's terms
// (chunk_scan_bwd_dstates, _ddA_intra and _dx with SSD_FLAG_Z).
struct GateBwdZParams : GateBwdParams {
  void* dy_lo;  // rn_T(dy − float(rn_T(dy))) of the fp32 dy, element type T, laid out as dy
};

}  // namespace ssd_kernels
