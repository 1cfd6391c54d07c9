// Launcher of the SSD forward: chunk_cumsum -> bmm_chunk -> chunk_state_passing (or chunk_state ->
// state_passing) -> chunk_scan.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/runtime.h"

namespace ssd {

ssd_forward_args default_forward_args();

// Sizes of one call (b, L, h, p, ngroups, dstate, nchunks; chunk size Q).
struct ForwardDims {
  int64_t b, L, h, p, g, n, nc;
  int32_t Q;
};
// Validates the forward's inputs (x, dt, A, B, C, D, z, dt_bias, initial_states, seq_idx, chunk
// size, dt limits) — not out, out_x, final_states — and fills `d`. Shared with the backward.
Status check_forward_inputs(const ssd_forward_args& args, ForwardDims& d);
// A state tensor (b, h, p, n) fp32 with unit n-stride and p-stride n: the state kernels index the
// flattened p*n axis with one stride (math §1.5). initial/final states, their gradients.
Status check_state_tensor(const ssd_tensor& t, const char* name, const ForwardDims& d, bool output);
// "b=.. L=.. h=.. p=.. g=.. n=.. chunk_size=.." for messages.
std::string dims_text(const ForwardDims& d);

// The intermediates F1..F4 write (contiguous, the layouts of ssd_forward_layout).
struct ForwardBuffers {
  float* dt_out;
  float* dA_cumsum;
  float* CB;
  void* states;  // P: x's dtype on the forward's output path, else fp32 (states_bytes)
  // dt_out and dA_cumsum as heads [chunk_head0, chunk_head0 + h) of (b, chunk_heads, nchunks, Q)
  // buffers (the backward's group slices share them); chunk_heads 0: (b, h, nchunks, Q) of the call.
  int64_t chunk_heads = 0, chunk_head0 = 0;
};
struct ForwardTuning;
// The layout ssd_forward needs (ssd_forward_workspace_layout: tuning null; the staged path of the
// states needs fp32 P, so a larger states section).
Result<ssd_forward_layout> forward_layout(const ssd_forward_args* args, const ForwardTuning* tuning = nullptr);
// Per-stage tile overrides (zeros = the default tile), and the staged path of the states. Not in
// the C API: for measuring tile candidates (`ssdgen bench fwd --tiles`) before one becomes a
// default, and for the tests and benchmarks that compare the fused state pass with the staged one.
struct ForwardTuning {
  ssd_tile bmm{}, state{}, passing{}, state_pass{}, scan{};
  // chunk_state_fwd then state_passing_fwd (s_c through device memory) instead of the fused
  // chunk_state_passing_fwd: the same bits (the GPU tests compare them), more traffic.
  bool staged_states = false;
  // The sm_90a kernels' cp.async loaders where their TMA path (SSD_FLAG_TMA: chunk_state_passing_fwd,
  // chunk_scan_fwd) would run: the same bits (the GPU tests compare them); `ssdgen bench fwd|bwd
  // --cp-async` times the two.
  bool cp_async = false;
  // > 0: every grid axis capped at this many blocks (the kernels walk their work grid-stride: the same
  // bits, docs/determinism.md D4); the C API's options->max_blocks is not honoured by ssd_forward.
  int32_t max_blocks = 0;
};

// bmm_chunk_fwd's wgmma kernel (sm_90a): its one tile, which the forward takes where the grid allows
// (ssd_forward.cpp's bmm_config) and prepare lists beside the family's default.
constexpr ssd_tile kBmmWgmmaTile{64, 64, 64, 0, 0};

// SSD_FLAG_SEQ_IDX, _INITIAL_STATES, _D, _D_PER_HEADDIM, _Z as the arguments give them.
uint32_t specialization_flags(const ssd_forward_args& args);

// One call of the forward's plan (src/ops/plan.h) on validated arguments: chunk_cumsum_fwd ->
// bmm_chunk -> chunk_state_passing (tiles.staged_states: chunk_state -> state_passing) ->
// chunk_scan, the last only with_output (the
// backward's recompute stops after the entering states). max_blocks > 0 caps every grid axis
// (D4 tests).
struct ForwardCall {
  const ssd_forward_args& a;
  ForwardDims d;
  ssd_mode mode;
  ssd_arch arch;
  ForwardBuffers buf;
  int32_t max_blocks;
  ForwardTuning tiles;
  bool with_output;
};
// The kernels the call uses, in launch order (prepare, presets, the backward's list).
std::vector<ssd_kernel_config> forward_plan_configs(const ForwardCall& call);
// The kernels of the call's stages (fetched before anything is allocated), then their launches;
// after_stage(i) after stage i (kForwardStageNames) is enqueued or skipped. The call's buffers are only read by the launches.
using PlanKernels = std::vector<const ssd_kernel*>;
// Bytes per element of P: x's dtype on the forward's output path (SSD_FLAG_STATES_IN_DTYPE), 4 for
// the backward's recompute (with_output false) and the staged path.
int64_t states_bytes(bool with_output, const ForwardTuning& tuning);
// The stages' names in report order (after_stage's argument indexes it).
constexpr int kForwardStages = 6;
extern const char* const kForwardStageNames[kForwardStages];
Result<PlanKernels> fetch_forward_plan(ssd_runtime& runtime, const ForwardCall& call);
// The launch of a fused state pass (chunk_state_passing_fwd or _bwd, mma.sync or wgmma kernel):
// grid (state tiles of one head's rows, batch, nheads / heads per block), each axis capped by
// max_blocks. A tile taller than headdim (the sm_90a kernels' m = 128 with headdim 64) stacks the
// heads of one group in a block; every mma.sync tile has m <= headdim, one head per block.
Status launch_state_pass(const ssd_kernel& k, int64_t batch, int64_t nheads, int64_t headdim, int64_t dstate,
                         int32_t max_blocks, void** params, CUstream stream);

Status launch_forward_plan(const ForwardCall& call, const PlanKernels& kernels, CUstream stream,
                           const std::function<void(int)>& after_stage = {});

// `after_stage(i)` runs on the host after stage i (kForwardStageNames) is enqueued or skipped (a
// stage that does not run for the call): the benchmark records events there.
Status ssd_forward(ssd_runtime& runtime, const ssd_forward_args* args, const ssd_launch_options* options,
                   CUstream stream, const std::function<void(int)>& after_stage = {},
                   const ForwardTuning* tiles = nullptr);

// The kernel specializations a call with these arguments uses, in launch order (for
// precompiling them in parallel).
Result<std::vector<ssd_kernel_config>> forward_kernel_configs(const ssd_forward_args* args, ssd_arch arch,
                                                             ssd_mode mode, const ForwardTuning* tiles = nullptr);

}  // namespace ssd
