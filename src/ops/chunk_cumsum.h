// Launcher of the chunk_cumsum family (forward, backward, and its deterministic head reduction).
#pragma once

#include "common/status.h"
#include "ops/tensor_ref.h"
#include "runtime/runtime.h"
#include "ssd/kernel_params.cuh"

namespace ssd {

// For plans that validated their inputs themselves (the SSD forward): the forward kernel's config
// and its launch (grid from the block's heads and the params' dimensions, capped by max_blocks).
ssd_kernel_config chunk_cumsum_fwd_config(ssd_dtype dt_dtype, int32_t chunk_size, bool dt_bias, bool dt_softplus,
                                          const ssd_tile& tile, ssd_mode mode, ssd_arch arch);
Status launch_chunk_cumsum_fwd(const ssd_kernel& kernel, const ssd_kernels::ChunkCumsumFwdParams& params,
                               int32_t max_blocks, CUstream stream);
// The backward's: its kernel (ddA_increments: the SSD backward's variant), the deterministic head
// reduction of its partials (`partials` values per record), fast mode's zeroing of dA / ddt_bias
// before the atomics, and the reduction of params.partials into params.dA (and .ddt_bias).
ssd_kernel_config chunk_cumsum_bwd_config(ssd_dtype dt_dtype, int32_t chunk_size, bool dt_bias, bool dt_softplus,
                                          bool ddA_increments, const ssd_tile& tile, ssd_mode mode, ssd_arch arch);
ssd_kernel_config reduce_head_partials_config(int32_t partials, const ssd_tile& tile, ssd_mode mode, ssd_arch arch);
Status launch_chunk_cumsum_bwd(const ssd_kernel& kernel, const ssd_kernels::ChunkCumsumBwdParams& params,
                               int32_t max_blocks, CUstream stream);
Status zero_head_sums(const ssd_kernels::ChunkCumsumBwdParams& params, CUstream stream);
Status launch_head_sums_reduce(const ssd_kernel& reduce, const ssd_kernels::ChunkCumsumBwdParams& params,
                               int32_t max_blocks, CUstream stream);

// The fields chunk_cumsum_fwd's and _bwd's parameter blocks share: dt, A, dt_bias and dt_limit
// from `a` (any args struct with those fields: the cumsum ops', ssd_forward's, ssd_backward's) and
// the sizes.
template <class Params, class Args>
void bind_cumsum_inputs(Params& p, const Args& a, int64_t batch, int64_t seqlen, int64_t nheads, int64_t nchunks) {
  p.dt = ref<const void, 3>(a.dt);
  p.A = ref<const float, 1>(a.A);
  p.dt_bias = ref<const float, 1>(a.dt_bias);
  p.batch = batch;
  p.seqlen = seqlen;
  p.nheads = nheads;
  p.nchunks = nchunks;
  p.dt_limit_lo = a.dt_limit_lo;
  p.dt_limit_hi = a.dt_limit_hi;
}

ssd_launch_options default_launch_options();
ssd_chunk_cumsum_fwd_args default_cumsum_fwd_args();
ssd_chunk_cumsum_bwd_args default_cumsum_bwd_args();

Status chunk_cumsum_fwd(ssd_runtime& runtime, const ssd_chunk_cumsum_fwd_args* args,
                        const ssd_launch_options* options, CUstream stream);
// Bytes of workspace the backward needs in the runtime's mode (0 in fast mode).
Result<size_t> chunk_cumsum_bwd_workspace_size(const ssd_chunk_cumsum_bwd_args* args, ssd_mode mode);
// The same size as a pure function of the (already validated) extents: the fp64 partials
// (b, nchunks, h, dt_bias ? 2 : 1) in deterministic mode, 0 in fast mode; refuses sizes past size_t.
Result<size_t> chunk_cumsum_bwd_workspace_bytes(int64_t batch, int64_t seqlen, int64_t nheads, int64_t nchunks,
                                                bool dt_bias, ssd_mode mode);
// ddA_increments (internal, the SSD backward): args.ddA_cumsum holds the gradient w.r.t. the
// increments a_l = Δ_l A, not w.r.t. dA_cumsum (SSD_FLAG_DDA_INCREMENTS).
Status chunk_cumsum_bwd(ssd_runtime& runtime, const ssd_chunk_cumsum_bwd_args* args,
                        const ssd_launch_options* options, CUstream stream, bool ddA_increments = false);

}  // namespace ssd
