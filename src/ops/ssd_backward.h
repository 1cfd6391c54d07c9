// The SSD backward: the gate stage's launcher (gate_backward) and the whole backward (ssd_backward),
// with the test/benchmark knobs the C API does not expose.
#pragma once

#include <functional>
#include <vector>

#include "common/status.h"
#include "ops/ssd_forward.h"
#include "runtime/runtime.h"

namespace ssd {

// Backward B-a. z, out_x, dy, dy_lo, dz are given together (data != NULL) or not at all; D and dD
// likewise. dy_lo (dy's rounding residual, the second T term) is laid out as dy: the same strides.
// dD is (h) or (h, p) fp32, contiguous.
struct GateBwdTensors {
  int32_t chunk_size = 256;
  ssd_tensor dout{}, x{}, z{}, out_x{}, dy{}, dy_lo{}, dz{}, D{}, dD{};
};

// Workspace bytes in `mode` (0 in fast mode or without D).
Result<size_t> gate_backward_workspace(const GateBwdTensors& t, ssd_mode mode);
// `workspace` may be null (allocated stream-ordered). `max_blocks` > 0 caps the grids (D4 tests).
Status gate_backward(ssd_runtime& rt, const GateBwdTensors& t, ssd_mode mode, void* workspace, int32_t max_blocks,
                     CUstream stream);

// ---- the whole backward (ssd_backward) ----------------------------------------------------------

ssd_backward_args default_backward_args();

// Per-kernel tile overrides (zeros = default) and a grid cap, for the D2/D4 tests and `ssdgen bench
// bwd`; not in the C API.
struct BackwardTuning {
  ForwardTuning forward{};  // the recompute: bmm, state_pass (or staged: state, passing); scan unused
  ssd_tile dstates{}, passing{}, dx{}, dcb{}, intra{}, db{}, dc{}, dda{}, cumsum{}, reduce{};
  ssd_tile state_pass{};  // chunk_state_passing_bwd (the fused dstates + state_passing_bwd)
  ssd_tile dcb_intra{};   // chunk_scan_bwd_dcb_ddA_intra (the fused dcb + ddA_intra)
  int32_t max_blocks = 0;  // > 0: every grid axis capped (persistent-style grid-stride)
  // SSD_MODE_FAST runs the deterministic kernels (issue 10: on the H200 the fast backward was slower
  // than the deterministic one at every measured shape, docs/perf.md); set this to run the fast
  // (atomic) kernels in fast mode anyway: their benchmark and their own tests.
  bool fast_kernels = false;
  // Deterministic mode runs chunk_state_passing_bwd (dP on chip); set this to run the staged pair
  // chunk_scan_bwd_dstates + state_passing_bwd instead (dP through the workspace): the fused
  // kernel's comparison test and `ssdgen bench bwd --staged`. Fast kernels always run the pair.
  bool staged_state_pass = false;
  // Both modes run the pair chunk_scan_bwd_dcb + chunk_scan_bwd_ddA_intra; set this to run
  // chunk_scan_bwd_dcb_ddA_intra instead (each head's dy·xᵀ formed once, the same bits) where a tile
  // of it fits: on the H200 it measured no faster than the pair (docs/perf.md, session 14), so it is
  // reached only through this flag (its tests, `ssdgen bench bwd --fused-intra`).
  bool fused_dcb_intra = false;
  // Group slices (docs/api.md, "Workspace"): the backward runs as `group_slices` sub-problems of
  // ngroups / group_slices groups each (the groups share nothing but the workspace), one after
  // another through `slice_buffers` workspace buffers taken in turn (in a launch graph a slice
  // overlaps the slices of the other buffers). 0: the default (kSliceTargetBytes, kSliceBuffers).
  // The same bits for every choice: every sum the backward forms lies inside one group's heads.
  int32_t group_slices = 0;
  int32_t slice_buffers = 0;
  // P (the fp32 entering states, from the recompute's state pass to the backward's) is one copy that
  // the buffers share, so slice i + 1's recompute waits for slice i's backward state pass; set this
  // to give each buffer its own copy (one P more per extra buffer, the slices' state passes side by
  // side). The same bits either way.
  bool p_per_buffer = false;
  // The fused state pass's and dx's cp.async loaders where their TMA paths (SSD_FLAG_TMA) would run:
  // the same bits (the GPU tests compare them); `forward.cp_async` is the recompute's. `ssdgen bench
  // bwd --cp-async` sets both. A sliced call sets it itself where a later slice's dy, B or C view would
  // not fit a map.
  bool cp_async = false;
};

// The default slicing: the fewest slices (a divisor of ngroups) whose workspace is at most
// kSliceTargetBytes, each of kSliceBuffers buffers (fewer if there are fewer slices).
inline constexpr size_t kSliceTargetBytes = size_t(128) << 20;
inline constexpr int32_t kSliceBuffers = 2;

// The mode whose kernels a backward call in mode `requested` runs (the layout, the configs and the
// launches all follow it): SSD_MODE_FAST runs the deterministic kernels unless tuning->fast_kernels.
ssd_mode backward_kernel_mode(ssd_mode requested, const BackwardTuning* tuning);

// Stage ids passed to `after_stage` (the benchmark records events there).
enum BackwardStage {
  kBwdRecompute = 0, kBwdGate, kBwdDstates, kBwdPassing, kBwdDx, kBwdDcb, kBwdIntra, kBwdDb, kBwdDc, kBwdDdA,
  kBwdCumsum, kBwdStageCount
};
const char* backward_stage_name(int stage);

// Byte offsets of the intermediates in the workspace (each 256-byte aligned): `buffers` buffers of
// slice_bytes, which the group slices take in turn (slice s: (s % buffers) · slice_bytes on, the
// offsets below < whole being those of buffer 0), then from `whole` on the whole problem's sections
// (dt_out, dA_cumsum, ddt_x, w, v, ddA, cumsum; gate without z), which every slice shares.
struct BackwardLayout {
  size_t dt_out, dA_cumsum, CB, states, dy, dy_lo, dP, ds, ds_lo, states_t, states_t_lo, rho, ddt_x, w, v, ddA, dCB, intra,
      dtx_intra, gate, cumsum, slice_bytes;
  int64_t slices = 1, buffers = 1;  // group slices, and the workspace buffers they take in turn
  size_t whole;                     // buffers · slice_bytes: where the whole problem's sections start
  size_t total;
};
// mode: the mode the call will run in (-1: the args' mode, else deterministic); tuning: the call's
// (only fast_kernels and staged_state_pass matter here: the layout is that of the kernels the call
// runs; the fused state pass has no dP section).
Result<BackwardLayout> backward_layout(const ssd_backward_args* args, int32_t mode,
                                       const BackwardTuning* tuning = nullptr);

Status ssd_backward(ssd_runtime& runtime, const ssd_backward_args* args, void* workspace, size_t workspace_bytes,
                    CUstream stream, const BackwardTuning* tuning = nullptr,
                    const std::function<void(int)>& after_stage = {});

// Every kernel specialization the call uses, in launch order (precompiling, benchmarks).
Result<std::vector<ssd_kernel_config>> backward_kernel_configs(const ssd_backward_args* args, ssd_arch arch,
                                                              ssd_mode mode, const BackwardTuning* tuning = nullptr);

}  // namespace ssd
