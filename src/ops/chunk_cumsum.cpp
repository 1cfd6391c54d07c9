#include "ops/chunk_cumsum.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include <fmt/format.h>

#include "common/log.h"
#include "common/struct_io.h"
#include "config/config.h"
#include "ops/op_common.h"
#include "ops/tensor_check.h"
#include "ops/workspace.h"
#include "ops/tensor_ref.h"
#include "ssd/kernel_params.cuh"

namespace ssd {
namespace {

struct Dims {
  int64_t batch, seqlen, nheads, nchunks;
  int32_t chunk;
};

Status check_chunk(int32_t chunk) {
  for (int q : {16, 32, 64, 128, 256})
    if (chunk == q) return Status::Ok();
  return make_error(SSD_ERROR_INVALID_SHAPE, fmt::format("args.chunk_size: {} (legal: 16, 32, 64, 128, 256)", chunk));
}

Status check_limits(float lo, float hi) {
  if (std::isnan(lo) || std::isnan(hi) || lo > hi)
    return make_error(SSD_ERROR_INVALID_ARGUMENT,
                      fmt::format("args.dt_limit_lo/dt_limit_hi: ({}, {}) must be ordered numbers", lo, hi));
  return Status::Ok();
}

// dt, A, dt_bias: the inputs both directions share. Fills the dims.
Status check_dt_inputs(const ssd_tensor& dt, const ssd_tensor& A, const ssd_tensor& dt_bias, int32_t chunk, Dims& dims) {
  SSD_RETURN_IF_ERROR(check_chunk(chunk));
  SSD_RETURN_IF_ERROR(check_tensor(dt, {"dt", {-1, -1, -1}, {SSD_DTYPE_BF16, SSD_DTYPE_FP16, SSD_DTYPE_FP32}}));
  dims.batch = dt.shape[0];
  dims.seqlen = dt.shape[1];
  dims.nheads = dt.shape[2];
  dims.chunk = chunk;
  dims.nchunks = dims.seqlen / chunk + (dims.seqlen % chunk != 0);  // no overflow for L near 2^63
  SSD_RETURN_IF_ERROR(check_tensor(A, {"A", {dims.nheads}, {SSD_DTYPE_FP32}}));
  if (dt_bias.data) SSD_RETURN_IF_ERROR(check_tensor(dt_bias, {"dt_bias", {dims.nheads}, {SSD_DTYPE_FP32}}));
  return Status::Ok();
}

Status check_chunked(const ssd_tensor& t, const char* name, const Dims& d, bool output) {
  return check_tensor(t, {name, {d.batch, d.nheads, d.nchunks, d.chunk}, {SSD_DTYPE_FP32}, output, true});
}

Result<ssd_launch_options> read_options(const ssd_launch_options* options) {
  if (!options) return default_launch_options();
  auto o = read_sized_struct(options, default_launch_options(), "options", offsetof(ssd_launch_options, mode));
  if (!o.ok()) return o.status();
  if (o->max_blocks < 0)
    return make_error(SSD_ERROR_INVALID_ARGUMENT, fmt::format("options.max_blocks: {} (legal: 0 or more)", o->max_blocks));
  if (o->mode < -1 || o->mode > 1)
    return make_error(SSD_ERROR_INVALID_ARGUMENT, fmt::format("options.mode: {} (legal: -1, 0, 1)", o->mode));
  return o;
}

// A call's arguments (read up to the caller's struct_size over `defaults`) and launch options.
template <class Args>
Status read_call(const Args* user_args, const Args& defaults, const ssd_launch_options* user_options, Args& args,
                 ssd_launch_options& options) {
  SSD_ASSIGN_OR_RETURN(args, read_sized_struct(user_args, defaults, "args", sizeof(Args)));
  SSD_ASSIGN_OR_RETURN(options, read_options(user_options));
  return Status::Ok();
}

ssd_kernel_config cumsum_config(ssd_kernel_id kernel, ssd_dtype dtype, int32_t chunk, bool bias, bool softplus,
                                const ssd_tile& tile, ssd_mode mode, ssd_arch arch) {
  ssd_kernel_config c = default_config(kernel);
  c.chunk_size = chunk;
  c.dtype = dtype;
  c.flags = (bias ? uint32_t(SSD_FLAG_DT_BIAS) : 0u) | (softplus ? uint32_t(SSD_FLAG_DT_SOFTPLUS) : 0u);
  c.tile = tile;
  c.mode = mode;
  c.arch = arch;
  return c;
}

Result<ssd_kernel_config> make_config(ssd_runtime& rt, ssd_kernel_id kernel, const Dims& d, ssd_dtype dtype, bool bias,
                                      bool softplus, const ssd_launch_options& o, ssd_mode mode) {
  auto arch = runtime_arch(rt);
  if (!arch.ok()) return arch.status();
  return cumsum_config(kernel, dtype, d.chunk, bias, softplus, o.tile, mode, arch.value());
}

int64_t cumsum_work(const Dims& d, int32_t block_h) {
  return d.batch * d.nchunks * ((d.nheads + block_h - 1) / block_h);
}

// Either direction's launch: a block per (batch, chunk, BLOCK_H heads) work item, grid-stride.
template <class Params>
Status launch_cumsum(const ssd_kernel& kernel, const Params& p, int32_t max_blocks, CUstream stream) {
  const Dims d{p.batch, p.seqlen, p.nheads, p.nchunks, kernel.built->config.chunk_size};
  Params copy = p;
  void* params[] = {&copy};
  return launch_kernel(kernel, grid_x(cumsum_work(d, kernel.built->config.tile.m), max_blocks), 1, 1, params, stream);
}

constexpr size_t kWorkspaceAlign = 256;

Result<size_t> partials_bytes(const Dims& d, bool bias) {
  CheckedSize z;  // absurd shapes must not wrap into a small size
  const size_t bytes = z.align_up(z.mul({d.batch, d.nchunks, d.nheads, bias ? 2 : 1, int64_t(sizeof(double))}),
                                  kWorkspaceAlign);
  SSD_RETURN_IF_ERROR(
      z.status("chunk_cumsum_bwd", [&] { return fmt::format("b={} L={} h={}", d.batch, d.seqlen, d.nheads); }));
  return bytes;
}

Status check_bwd(const ssd_chunk_cumsum_bwd_args& a, Dims& d) {
  SSD_RETURN_IF_ERROR(check_limits(a.dt_limit_lo, a.dt_limit_hi));
  SSD_RETURN_IF_ERROR(check_dt_inputs(a.dt, a.A, a.dt_bias, a.chunk_size, d));
  SSD_RETURN_IF_ERROR(check_chunked(a.ddA_cumsum, "ddA_cumsum", d, false));
  SSD_RETURN_IF_ERROR(check_chunked(a.ddt_out, "ddt_out", d, false));
  SSD_RETURN_IF_ERROR(check_tensor(a.ddt, {"ddt", {d.batch, d.seqlen, d.nheads}, {a.dt.dtype}, true}));
  SSD_RETURN_IF_ERROR(check_tensor(a.dA, {"dA", {d.nheads}, {SSD_DTYPE_FP32}, true}));
  if (a.dt_bias.data) {
    SSD_RETURN_IF_ERROR(check_tensor(a.ddt_bias, {"ddt_bias", {d.nheads}, {SSD_DTYPE_FP32}, true}));
  } else if (a.ddt_bias.data) {
    return make_error(SSD_ERROR_INVALID_ARGUMENT, "ddt_bias: given without dt_bias (pass dt_bias, or NULL ddt_bias)");
  }
  return Status::Ok();
}

}  // namespace

ssd_launch_options default_launch_options() {
  ssd_launch_options o{};
  o.struct_size = sizeof(o);
  o.mode = -1;
  return o;
}

ssd_chunk_cumsum_fwd_args default_cumsum_fwd_args() { return default_dt_args<ssd_chunk_cumsum_fwd_args>(); }

ssd_chunk_cumsum_bwd_args default_cumsum_bwd_args() { return default_dt_args<ssd_chunk_cumsum_bwd_args>(); }

Status chunk_cumsum_fwd(ssd_runtime& rt, const ssd_chunk_cumsum_fwd_args* user_args,
                        const ssd_launch_options* user_options, CUstream stream) {
  ssd_chunk_cumsum_fwd_args a{};  // read_call fills both (value-initialized: g++ cannot see that it does)
  ssd_launch_options options{};
  SSD_RETURN_IF_ERROR(read_call(user_args, default_cumsum_fwd_args(), user_options, a, options));
  Dims d{};
  SSD_RETURN_IF_ERROR(check_limits(a.dt_limit_lo, a.dt_limit_hi));
  SSD_RETURN_IF_ERROR(check_dt_inputs(a.dt, a.A, a.dt_bias, a.chunk_size, d));
  SSD_RETURN_IF_ERROR(check_chunked(a.dt_out, "dt_out", d, true));
  SSD_RETURN_IF_ERROR(check_chunked(a.dA_cumsum, "dA_cumsum", d, true));

  ssd_mode mode = options.mode < 0 ? rt.mode : ssd_mode(options.mode);
  auto config = make_config(rt, SSD_KERNEL_CHUNK_CUMSUM_FWD, d, a.dt.dtype, a.dt_bias.data != nullptr,
                            a.dt_softplus != 0, options, mode);
  if (!config.ok()) return config.status();
  auto kernel = get_kernel(rt, config.value());
  if (!kernel.ok()) return kernel.status();

  ssd_kernels::ChunkCumsumFwdParams p{};
  bind_cumsum_inputs(p, a, d.batch, d.seqlen, d.nheads, d.nchunks);
  p.dt_out = ref<float, 3>(a.dt_out);
  p.dA_cumsum = ref<float, 3>(a.dA_cumsum);
  return launch_chunk_cumsum_fwd(*kernel.value(), p, options.max_blocks, stream);
}

ssd_kernel_config chunk_cumsum_fwd_config(ssd_dtype dt_dtype, int32_t chunk_size, bool dt_bias, bool dt_softplus,
                                          const ssd_tile& tile, ssd_mode mode, ssd_arch arch) {
  return cumsum_config(SSD_KERNEL_CHUNK_CUMSUM_FWD, dt_dtype, chunk_size, dt_bias, dt_softplus, tile, mode, arch);
}

ssd_kernel_config chunk_cumsum_bwd_config(ssd_dtype dt_dtype, int32_t chunk_size, bool dt_bias, bool dt_softplus,
                                          bool ddA_increments, const ssd_tile& tile, ssd_mode mode, ssd_arch arch) {
  ssd_kernel_config c =
      cumsum_config(SSD_KERNEL_CHUNK_CUMSUM_BWD, dt_dtype, chunk_size, dt_bias, dt_softplus, tile, mode, arch);
  if (ddA_increments) c.flags |= SSD_FLAG_DDA_INCREMENTS;
  return c;
}

ssd_kernel_config reduce_head_partials_config(int32_t partials, const ssd_tile& tile, ssd_mode mode, ssd_arch arch) {
  ssd_kernel_config c = default_config(SSD_KERNEL_REDUCE_HEAD_PARTIALS);
  c.partials = partials;
  c.tile = tile;
  c.mode = mode;
  c.arch = arch;
  return c;
}

Status launch_chunk_cumsum_bwd(const ssd_kernel& kernel, const ssd_kernels::ChunkCumsumBwdParams& p,
                               int32_t max_blocks, CUstream stream) {
  return launch_cumsum(kernel, p, max_blocks, stream);
}

Status zero_head_sums(const ssd_kernels::ChunkCumsumBwdParams& p, CUstream stream) {
  Status s = memset_zero_d32(p.dA.data, size_t(std::max<long long>(p.dA.stride[0], 1)) * 4, 1, size_t(p.nheads),
                             stream, "cuMemsetD2D32Async(dA)");
  if (s.ok() && p.ddt_bias.data)
    s = memset_zero_d32(p.ddt_bias.data, size_t(std::max<long long>(p.ddt_bias.stride[0], 1)) * 4, 1,
                        size_t(p.nheads), stream, "cuMemsetD2D32Async(ddt_bias)");
  return s;
}

Status launch_head_sums_reduce(const ssd_kernel& reduce, const ssd_kernels::ChunkCumsumBwdParams& p,
                               int32_t max_blocks, CUstream stream) {
  ssd_kernels::ReduceHeadPartialsParams r{};
  r.partials = p.partials;
  r.out[0] = p.dA;
  if (p.ddt_bias.data) r.out[1] = p.ddt_bias;
  r.batch = p.batch;
  r.nchunks = p.nchunks;
  r.nheads = p.nheads;
  void* rparams[] = {&r};
  const int block = reduce.built->config.tile.m;
  return launch_kernel(reduce, grid_x((p.nheads + block - 1) / block, max_blocks), 1, 1, rparams, stream);
}

Status launch_chunk_cumsum_fwd(const ssd_kernel& kernel, const ssd_kernels::ChunkCumsumFwdParams& p,
                               int32_t max_blocks, CUstream stream) {
  return launch_cumsum(kernel, p, max_blocks, stream);
}

Result<size_t> chunk_cumsum_bwd_workspace_size(const ssd_chunk_cumsum_bwd_args* user_args, ssd_mode mode) {
  auto args = read_sized_struct(user_args, default_cumsum_bwd_args(), "args", sizeof(ssd_chunk_cumsum_bwd_args));
  if (!args.ok()) return args.status();
  Dims d{};
  SSD_RETURN_IF_ERROR(check_bwd(args.value(), d));
  return chunk_cumsum_bwd_workspace_bytes(d.batch, d.seqlen, d.nheads, d.nchunks, args->dt_bias.data != nullptr, mode);
}

Result<size_t> chunk_cumsum_bwd_workspace_bytes(int64_t batch, int64_t seqlen, int64_t nheads, int64_t nchunks,
                                                bool dt_bias, ssd_mode mode) {
  if (mode == SSD_MODE_FAST) return size_t(0);
  return partials_bytes(Dims{batch, seqlen, nheads, nchunks, 0}, dt_bias);
}

Status chunk_cumsum_bwd(ssd_runtime& rt, const ssd_chunk_cumsum_bwd_args* user_args,
                        const ssd_launch_options* user_options, CUstream stream, bool ddA_increments) {
  ssd_chunk_cumsum_bwd_args a{};  // read_call fills both (value-initialized: g++ cannot see that it does)
  ssd_launch_options options{};
  SSD_RETURN_IF_ERROR(read_call(user_args, default_cumsum_bwd_args(), user_options, a, options));
  Dims d{};
  SSD_RETURN_IF_ERROR(check_bwd(a, d));
  const bool bias = a.dt_bias.data != nullptr;
  const ssd_mode mode = options.mode < 0 ? rt.mode : ssd_mode(options.mode);
  const bool deterministic = mode == SSD_MODE_DETERMINISTIC;
  size_t need = 0;
  if (deterministic) {
    auto bytes = partials_bytes(d, bias);
    if (!bytes.ok()) return bytes.status();
    need = bytes.value();
  }
  if (a.workspace && a.workspace_bytes < need)
    return make_error(SSD_ERROR_WORKSPACE_TOO_SMALL,
                      fmt::format("workspace_bytes: {} given, {} needed (ssd_chunk_cumsum_bwd_workspace_size)",
                                  a.workspace_bytes, need));
  if (a.workspace && reinterpret_cast<uintptr_t>(a.workspace) % 16 != 0)
    return make_error(SSD_ERROR_INVALID_ALIGNMENT, "workspace: must be 16-byte aligned");

  auto arch = runtime_arch(rt);
  if (!arch.ok()) return arch.status();
  auto kernel = get_kernel(rt, chunk_cumsum_bwd_config(a.dt.dtype, d.chunk, bias, a.dt_softplus != 0, ddA_increments,
                                                       options.tile, mode, arch.value()));
  if (!kernel.ok()) return kernel.status();
  const ssd_kernel* reduce = nullptr;
  if (deterministic) {
    auto r = get_kernel(rt, reduce_head_partials_config(bias ? 2 : 1, options.reduce_tile, mode, arch.value()));
    if (!r.ok()) return r.status();
    reduce = r.value();
  }
  CallWorkspace ws;
  // Formatted only when the call allocates (the host path of a call with a workspace stays short).
  const std::string warning = a.workspace ? std::string() : fmt::format(
      "ssd_chunk_cumsum_bwd: no workspace given; allocating {} bytes per call on the stream (pass one of "
      "ssd_chunk_cumsum_bwd_workspace_size bytes to avoid this)", need);
  SSD_RETURN_IF_ERROR(ws.acquire(rt, a.workspace, need, stream, warning.c_str()));

  ssd_kernels::ChunkCumsumBwdParams p{};
  bind_cumsum_inputs(p, a, d.batch, d.seqlen, d.nheads, d.nchunks);
  p.ddA_cumsum = ref<const float, 3>(a.ddA_cumsum);
  p.ddt_out = ref<const float, 3>(a.ddt_out);
  p.ddt = ref<void, 3>(a.ddt);
  p.partials = reinterpret_cast<double*>(ws.base());
  p.dA = ref<float, 1>(a.dA);
  p.ddt_bias = ref<float, 1>(a.ddt_bias);

  Status s;
  if (!deterministic) s = zero_head_sums(p, stream);  // atomics accumulate into zeroed outputs
  if (s.ok()) s = launch_chunk_cumsum_bwd(*kernel.value(), p, options.max_blocks, stream);
  if (s.ok() && reduce) s = launch_head_sums_reduce(*reduce, p, options.max_blocks, stream);
  return ws.release(s);
}

}  // namespace ssd
