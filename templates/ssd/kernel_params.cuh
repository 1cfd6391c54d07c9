// Kernel parameter blocks, shared verbatim by the host launchers (g++) and the kernels (NVRTC).
// Plain C layout only: pointers, long long, int, float. Strides are in elements.
#pragma once

namespace ssd_kernels {

// chunk_cumsum_fwd: dt (b, L, h) -> dt_out, dA_cumsum (b, h, nchunks, Q), Q-axis stride 1.
struct ChunkCumsumFwdParams {
  const void* dt;
  long long dt_stride_b, dt_stride_l, dt_stride_h;
  const float* A;
  long long A_stride;
  const float* dt_bias;  // null when the specialization has no dt_bias
  long long dt_bias_stride;
  float* dt_out;
  long long dt_out_stride_b, dt_out_stride_h, dt_out_stride_c;
  float* dA_cumsum;
  long long dA_cumsum_stride_b, dA_cumsum_stride_h, dA_cumsum_stride_c;
  long long batch, seqlen, nheads, nchunks;
  float dt_limit_lo, dt_limit_hi;
};

// chunk_cumsum_bwd: adjoint of chunk_cumsum_fwd.
struct ChunkCumsumBwdParams {
  const void* dt;
  long long dt_stride_b, dt_stride_l, dt_stride_h;
  const float* A;
  long long A_stride;
  const float* dt_bias;
  long long dt_bias_stride;
  const float* ddA_cumsum;
  long long ddA_cumsum_stride_b, ddA_cumsum_stride_h, ddA_cumsum_stride_c;
  const float* ddt_out;
  long long ddt_out_stride_b, ddt_out_stride_h, ddt_out_stride_c;
  void* ddt;  // dtype of dt
  long long ddt_stride_b, ddt_stride_l, ddt_stride_h;
  // deterministic: per-chunk partials (b, nchunks, h, P) contiguous, P = 2 with dt_bias else 1,
  // accumulated and stored in fp64 (docs/determinism.md: the whole-sequence sums).
  double* partials;
  // fast: accumulated with atomics into dA (h) and ddt_bias (h), zeroed by the launcher.
  float* dA;
  long long dA_stride;
  float* ddt_bias;
  long long ddt_bias_stride;
  long long batch, seqlen, nheads, nchunks;
  float dt_limit_lo, dt_limit_hi;
};

// reduce_head_partials: fp64 partials (b, nchunks, h, P) contiguous -> out[j][h * out_stride[j]].
constexpr int kMaxReduceOutputs = 8;
struct ReduceHeadPartialsParams {
  const double* partials;
  float* out[kMaxReduceOutputs];
  long long out_stride[kMaxReduceOutputs];
  long long batch, nchunks, nheads;
};

// state_passing_fwd (math F3): chunk states s (b, nchunks, h, p*n) fp32, overwritten in place by
// the entering states P; final states (b, h, p*n) fp32. The flattened p*n axis has unit stride.
struct StatePassingFwdParams {
  float* states;
  long long states_stride_b, states_stride_c, states_stride_h;
  const float* dA_cumsum;  // (b, h, nchunks, Q), unit Q-stride: the carry reads position λ_c
  long long dA_cumsum_stride_b, dA_cumsum_stride_h, dA_cumsum_stride_c;
  const float* initial_states;  // (b, h, p*n) or null
  long long init_stride_b, init_stride_h;
  float* final_states;  // (b, h, p*n) or null
  long long final_stride_b, final_stride_h;
  const int* seq_idx;  // (b, L) or null
  long long seq_idx_stride_b, seq_idx_stride_l;
  long long batch, seqlen, nheads, nchunks, state_size;  // state_size = p * n
};

// gate_bwd (math B-a): dout, x, z, out_x (b, L, h, p) in the element type; dy, dz written in it.
// dD partials: fast mode adds into dD directly; deterministic mode stores one fp64 value per
// (b, c, h) for D (h), per (b, c, h, p) for D (h, p), contiguous, for reduce_head_partials.
struct GateBwdParams {
  const void* dout;
  long long dout_stride_b, dout_stride_l, dout_stride_h, dout_stride_p;
  const void* x;
  long long x_stride_b, x_stride_l, x_stride_h, x_stride_p;
  const void* z;  // null without z
  long long z_stride_b, z_stride_l, z_stride_h, z_stride_p;
  const void* out_x;  // y = the forward's output before the gate; null without z
  long long out_x_stride_b, out_x_stride_l, out_x_stride_h, out_x_stride_p;
  void* dy;  // written with z (without z, dy is dout itself)
  long long dy_stride_b, dy_stride_l, dy_stride_h, dy_stride_p;
  void* dz;  // written with z
  long long dz_stride_b, dz_stride_l, dz_stride_h, dz_stride_p;
  double* partials;  // deterministic mode
  float* dD;        // fast mode: (h) or (h, p), contiguous, zeroed by the launcher
  long long batch, seqlen, nheads, nchunks;
};

}  // namespace ssd_kernels
