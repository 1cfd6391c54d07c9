#include "ops/ssd_forward.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <vector>

#include <fmt/format.h>

#include "common/log.h"
#include "common/struct_io.h"
#include "config/config.h"
#include "kernels/family.h"
#include "ops/chunk_cumsum.h"
#include "ops/tensor_check.h"
#include "ops/tensor_ref.h"
#include "ssd/forward_params.cuh"
#include "ssd/kernel_params.cuh"

namespace ssd {
namespace {

constexpr size_t kAlign = 256;

bool one_of(int64_t v, std::initializer_list<int64_t> legal) {
  return std::find(legal.begin(), legal.end(), v) != legal.end();
}

}  // namespace

std::string dims_text(const ForwardDims& d) {
  return fmt::format("b={} L={} h={} p={} g={} n={} chunk_size={}", d.b, d.L, d.h, d.p, d.g, d.n, d.Q);
}

Status check_forward_inputs(const ssd_forward_args& a, ForwardDims& d) {
  if (!one_of(a.chunk_size, {64, 128, 256}))
    return make_error(SSD_ERROR_INVALID_SHAPE, fmt::format("args.chunk_size: {} (legal: 64, 128, 256)", a.chunk_size));
  if (std::isnan(a.dt_limit_lo) || std::isnan(a.dt_limit_hi) || a.dt_limit_lo > a.dt_limit_hi)
    return make_error(SSD_ERROR_INVALID_ARGUMENT, "args.dt_limit_lo/dt_limit_hi: must be ordered numbers");
  SSD_RETURN_IF_ERROR(check_tensor(a.x, {"x", {-1, -1, -1, -1}, {SSD_DTYPE_BF16, SSD_DTYPE_FP16}}));
  d = ForwardDims{a.x.shape[0], a.x.shape[1], a.x.shape[2], a.x.shape[3], 0, 0, 0, a.chunk_size};
  if (!one_of(d.p, {32, 64, 128}))
    return make_error(SSD_ERROR_INVALID_SHAPE, fmt::format("x: headdim {} (legal: 32, 64, 128)", d.p));
  SSD_RETURN_IF_ERROR(check_tensor(a.B, {"B", {d.b, d.L, -1, -1}, {a.x.dtype}}));
  d.g = a.B.shape[2];
  d.n = a.B.shape[3];
  d.nc = d.L / d.Q + (d.L % d.Q != 0);  // (L + Q - 1) / Q overflows for L near 2^63
  if (!one_of(d.n, {16, 32, 64, 128, 256}))
    return make_error(SSD_ERROR_INVALID_SHAPE, fmt::format("B: dstate {} (legal: 16, 32, 64, 128, 256)", d.n));
  if (d.h % d.g != 0)
    return make_error(SSD_ERROR_INVALID_SHAPE, fmt::format("B: ngroups {} does not divide nheads {}", d.g, d.h));
  SSD_RETURN_IF_ERROR(check_tensor(a.C, {"C", {d.b, d.L, d.g, d.n}, {a.x.dtype}}));
  SSD_RETURN_IF_ERROR(check_tensor(a.dt, {"dt", {d.b, d.L, d.h}, {SSD_DTYPE_BF16, SSD_DTYPE_FP16, SSD_DTYPE_FP32}}));
  SSD_RETURN_IF_ERROR(check_tensor(a.A, {"A", {d.h}, {SSD_DTYPE_FP32}}));
  if (a.D.data) {
    if (a.D.ndim == 1) SSD_RETURN_IF_ERROR(check_tensor(a.D, {"D", {d.h}, {SSD_DTYPE_FP32}}));
    else SSD_RETURN_IF_ERROR(check_tensor(a.D, {"D", {d.h, d.p}, {SSD_DTYPE_FP32}}));
  }
  if (a.z.data) SSD_RETURN_IF_ERROR(check_tensor(a.z, {"z", {d.b, d.L, d.h, d.p}, {a.x.dtype}}));
  if (a.dt_bias.data) SSD_RETURN_IF_ERROR(check_tensor(a.dt_bias, {"dt_bias", {d.h}, {SSD_DTYPE_FP32}}));
  // The state kernels index the flattened p*n axis with one stride (math §1.5).
  auto check_state = [&](const ssd_tensor& t, const char* name, bool output) -> Status {
    SSD_RETURN_IF_ERROR(check_tensor(t, {name, {d.b, d.h, d.p, d.n}, {SSD_DTYPE_FP32}, output, true}));
    if (t.strides[2] != d.n)
      return make_error(SSD_ERROR_INVALID_STRIDE, fmt::format("{}: headdim stride {} must equal dstate {} (p*n is "
                                                              "one flattened axis)", name, t.strides[2], d.n));
    return Status::Ok();
  };
  if (a.initial_states.data) SSD_RETURN_IF_ERROR(check_state(a.initial_states, "initial_states", false));
  if (a.final_states.data) SSD_RETURN_IF_ERROR(check_state(a.final_states, "final_states", true));
  if (a.seq_idx.data) SSD_RETURN_IF_ERROR(check_tensor(a.seq_idx, {"seq_idx", {d.b, d.L}, {SSD_DTYPE_INT32}}));
  return Status::Ok();
}

Status check_forward(const ssd_forward_args& a, ForwardDims& d) {
  SSD_RETURN_IF_ERROR(check_forward_inputs(a, d));
  SSD_RETURN_IF_ERROR(check_tensor(a.out, {"out", {d.b, d.L, d.h, d.p}, {a.x.dtype}, true}));
  if (a.z.data) SSD_RETURN_IF_ERROR(check_tensor(a.out_x, {"out_x", {d.b, d.L, d.h, d.p}, {a.x.dtype}, true}));
  else if (a.out_x.data)
    return make_error(SSD_ERROR_INVALID_ARGUMENT, "out_x: only written with z (pass z, or NULL out_x)");
  return Status::Ok();
}

namespace {

Result<ssd_forward_layout> layout_for(const ForwardDims& d) {
  CheckedSize z;  // absurd shapes must not wrap into a small total with overlapping regions
  ssd_forward_layout l{};
  l.struct_size = sizeof(l);
  const size_t chunked = z.align_up(z.mul({d.b, d.h, d.nc, d.Q, 4}), kAlign);
  const size_t cb = z.align_up(z.mul({d.b, d.nc, d.g, d.Q, d.Q, 4}), kAlign);
  const size_t states = z.align_up(z.mul({d.b, d.nc, d.h, d.p, d.n, 4}), kAlign);
  l.dt_out_offset = 0;
  l.dA_cumsum_offset = chunked;
  l.CB_offset = z.add(l.dA_cumsum_offset, chunked);
  l.states_offset = z.add(l.CB_offset, cb);
  l.total_bytes = z.add(l.states_offset, states);
  SSD_RETURN_IF_ERROR(z.status("ssd_forward", dims_text(d)));
  return l;
}

// The five specializations one call uses: chunk_cumsum_fwd, bmm_chunk, chunk_state, state_passing,
// chunk_scan (in launch order).
unsigned grid_x(int64_t v, int32_t max_blocks) {
  const int64_t cap = max_blocks > 0 ? max_blocks : 0x7fffffff;
  return unsigned(std::max<int64_t>(1, std::min<int64_t>(v, cap)));
}
unsigned clamp_grid(int64_t v, int32_t max_blocks) {
  const int64_t cap = max_blocks > 0 ? std::min<int64_t>(max_blocks, 65535) : 65535;
  return unsigned(std::max<int64_t>(1, std::min<int64_t>(v, cap)));
}

}  // namespace

uint32_t specialization_flags(const ssd_forward_args& a) {
  uint32_t flags = 0;
  if (a.seq_idx.data) flags |= SSD_FLAG_SEQ_IDX;
  if (a.initial_states.data) flags |= SSD_FLAG_INITIAL_STATES;
  if (a.D.data) flags |= SSD_FLAG_D | (a.D.ndim == 2 ? uint32_t(SSD_FLAG_D_PER_HEADDIM) : 0u);
  if (a.z.data) flags |= SSD_FLAG_Z;
  return flags;
}

std::vector<ssd_kernel_config> forward_stage_configs(const ssd_forward_args& a, const ForwardDims& d, ssd_arch arch,
                                                     ssd_mode mode, const ForwardTiles* tiles) {
  std::vector<ssd_kernel_config> out;
  ssd_kernel_config cs = default_config(SSD_KERNEL_CHUNK_CUMSUM_FWD);
  cs.chunk_size = d.Q;
  cs.dtype = a.dt.dtype;
  cs.flags = (a.dt_bias.data ? uint32_t(SSD_FLAG_DT_BIAS) : 0u) | (a.dt_softplus ? uint32_t(SSD_FLAG_DT_SOFTPLUS) : 0u);
  cs.mode = mode;
  cs.arch = arch;
  out.push_back(cs);
  const SsdShape shape{d.Q, int32_t(d.p), int32_t(d.n), int32_t(d.h / d.g), a.x.dtype};
  for (ssd_kernel_id k : {SSD_KERNEL_BMM_CHUNK_FWD, SSD_KERNEL_CHUNK_STATE_FWD, SSD_KERNEL_STATE_PASSING_FWD,
                          SSD_KERNEL_CHUNK_SCAN_FWD}) {
    ssd_kernel_config c = config_for_shape(k, shape, specialization_flags(a), mode, arch);
    if (tiles) {
      c.tile = c.kernel == SSD_KERNEL_BMM_CHUNK_FWD     ? tiles->bmm
               : c.kernel == SSD_KERNEL_CHUNK_STATE_FWD ? tiles->state
               : c.kernel == SSD_KERNEL_STATE_PASSING_FWD ? tiles->passing
                                                          : tiles->scan;
    }
    out.push_back(c);
  }
  return out;
}

Status launch_forward_stages(ssd_runtime& rt, const ssd_forward_args& a, const ForwardDims& d, ssd_mode mode,
                             const ssd_kernel* const kernels[4], const ForwardBuffers& buffers, int32_t max_blocks,
                             CUstream stream, const std::function<void(int)>& after_stage) {
  auto stage_done = [&](int stage) {
    if (after_stage) after_stage(stage);
  };
  float* dt_out = buffers.dt_out;
  float* dA_cs = buffers.dA_cumsum;
  float* CB = buffers.CB;
  float* states = buffers.states;
  const TensorRef<const int, 2> seq_idx = ref<const int, 2>(a.seq_idx);

  Status s;
  {  // F1: dt preprocessing and the within-chunk cumulative sum.
    ssd_chunk_cumsum_fwd_args c = default_cumsum_fwd_args();
    c.chunk_size = d.Q;
    c.dt_softplus = a.dt_softplus;
    c.dt_limit_lo = a.dt_limit_lo;
    c.dt_limit_hi = a.dt_limit_hi;
    c.dt = a.dt;
    c.A = a.A;
    c.dt_bias = a.dt_bias;
    c.dt_out = contiguous_tensor(dt_out, SSD_DTYPE_FP32, {d.b, d.h, d.nc, d.Q});
    c.dA_cumsum = contiguous_tensor(dA_cs, SSD_DTYPE_FP32, {d.b, d.h, d.nc, d.Q});
    ssd_launch_options o = default_launch_options();
    o.mode = mode;
    o.max_blocks = max_blocks;
    s = chunk_cumsum_fwd(rt, &c, &o, stream);
  }
  if (s.ok()) stage_done(0);
  // Workspace intermediates, contiguous: the (b, h, nchunks, Q) vectors and CB (b, nchunks, g, Q, Q).
  const long long chunk_shape[] = {d.b, d.h, d.nc, d.Q};
  const long long cb_shape[] = {d.b, d.nc, d.g, d.Q, d.Q};
  if (s.ok()) {  // F4: CB = C B^T per (b, c, g).
    ssd_kernels::BmmChunkFwdParams p{};
    p.C = ref<const void, 4>(a.C);
    p.B = ref<const void, 4>(a.B);
    p.seq_idx = seq_idx;
    p.CB = contiguous_ref<float, 4>(CB, cb_shape);
    p.batch = d.b; p.seqlen = d.L; p.nchunks = d.nc; p.ngroups = d.g;
    const ssd_tile& t = kernels[0]->built->config.tile;
    void* params[] = {&p};
    s = launch_kernel(*kernels[0], grid_x(ssd_kernels::fwd_geom::bmm_chunk_tiles(d.Q, t.m, t.n), max_blocks),
                      clamp_grid(d.b * d.nc, max_blocks), clamp_grid(d.g, max_blocks), params, stream);
  }
  if (s.ok()) stage_done(1);
  const long long states_shape[] = {d.b, d.nc, d.h, d.p, d.n};  // (b, nchunks, h, p*n) for the state kernels
  if (s.ok()) {  // F2: chunk states.
    ssd_kernels::ChunkStateFwdParams p{};
    p.x = ref<const void, 4>(a.x);
    p.B = ref<const void, 4>(a.B);
    p.dt = contiguous_ref<const float, 3>(dt_out, chunk_shape);
    p.dA_cumsum = contiguous_ref<const float, 3>(dA_cs, chunk_shape);
    p.seq_idx = seq_idx;
    p.states = contiguous_ref<float, 4>(states, states_shape);
    p.batch = d.b; p.seqlen = d.L; p.nchunks = d.nc; p.nheads = d.h;
    const ssd_tile& t = kernels[1]->built->config.tile;
    void* params[] = {&p};
    s = launch_kernel(*kernels[1], grid_x(ssd_kernels::fwd_geom::chunk_state_tiles(int(d.p), int(d.n), t.m, t.n), max_blocks),
                      clamp_grid(d.b * d.nc, max_blocks), clamp_grid(d.h, max_blocks), params, stream);
  }
  if (s.ok()) stage_done(2);
  if (s.ok()) {  // F3: entering states (in place) and final states.
    ssd_kernels::StatePassingFwdParams p{};
    p.states = contiguous_ref<float, 3>(states, states_shape);
    p.dA_cumsum = contiguous_ref<const float, 3>(dA_cs, chunk_shape);
    p.initial_states = ref<const float, 2>(a.initial_states);
    p.final_states = ref<float, 2>(a.final_states);
    p.seq_idx = seq_idx;
    p.batch = d.b; p.seqlen = d.L; p.nheads = d.h; p.nchunks = d.nc; p.state_size = d.p * d.n;
    const int block = kernels[2]->built->config.tile.m;
    const int64_t work = (p.state_size + block - 1) / block * d.b * d.h;
    void* params[] = {&p};
    s = launch_kernel(*kernels[2], grid_x(work, max_blocks), 1, 1, params, stream);
  }
  if (s.ok()) stage_done(3);
  if (s.ok() && kernels[3]) {  // F5: the output.
    ssd_kernels::ChunkScanFwdParams p{};
    p.CB = contiguous_ref<const float, 4>(CB, cb_shape);
    p.x = ref<const void, 4>(a.x);
    p.dt = contiguous_ref<const float, 3>(dt_out, chunk_shape);
    p.dA_cumsum = contiguous_ref<const float, 3>(dA_cs, chunk_shape);
    p.C = ref<const void, 4>(a.C);
    p.states = contiguous_ref<const void, 4>(states, states_shape);
    p.D = ref<const float, 2>(a.D);  // D (h): stride[1] = 0
    p.z = ref<const void, 4>(a.z);
    p.seq_idx = seq_idx;
    p.out = ref<void, 4>(a.out);
    p.out_x = ref<void, 4>(a.out_x);
    p.batch = d.b; p.seqlen = d.L; p.nchunks = d.nc; p.nheads = d.h;
    const ssd_tile& t = kernels[3]->built->config.tile;
    void* params[] = {&p};
    s = launch_kernel(*kernels[3], grid_x(ssd_kernels::fwd_geom::chunk_scan_tiles(d.Q, int(d.p), t.m, t.n), max_blocks),
                      clamp_grid(d.b * d.nc, max_blocks), clamp_grid(d.h, max_blocks), params, stream);
  }
  if (s.ok() && kernels[3]) stage_done(4);
  return s;
}

ssd_forward_args default_forward_args() {
  ssd_forward_args a{};
  a.struct_size = sizeof(a);
  a.chunk_size = 256;
  a.dt_limit_lo = 0.f;
  a.dt_limit_hi = INFINITY;
  return a;
}

Result<ssd_forward_layout> forward_layout(const ssd_forward_args* user_args) {
  auto args = read_sized_struct(user_args, default_forward_args(), "args", sizeof(ssd_forward_args));
  if (!args.ok()) return args.status();
  ForwardDims d{};
  SSD_RETURN_IF_ERROR(check_forward(args.value(), d));
  return layout_for(d);
}

Result<std::vector<ssd_kernel_config>> forward_kernel_configs(const ssd_forward_args* user_args, ssd_arch arch,
                                                             ssd_mode mode, const ForwardTiles* tiles) {
  auto args = read_sized_struct(user_args, default_forward_args(), "args", sizeof(ssd_forward_args));
  if (!args.ok()) return args.status();
  ForwardDims d{};
  SSD_RETURN_IF_ERROR(check_forward(args.value(), d));
  return forward_stage_configs(args.value(), d, arch, mode, tiles);
}

Status ssd_forward(ssd_runtime& rt, const ssd_forward_args* user_args, const ssd_launch_options* options,
                   CUstream stream, const std::function<void(int)>& after_stage, const ForwardTiles* tiles) {
  auto args = read_sized_struct(user_args, default_forward_args(), "args", sizeof(ssd_forward_args));
  if (!args.ok()) return args.status();
  const ssd_forward_args& a = args.value();
  ForwardDims d{};
  SSD_RETURN_IF_ERROR(check_forward(a, d));
  auto checked_layout = layout_for(d);
  if (!checked_layout.ok()) return checked_layout.status();
  const ssd_forward_layout layout = checked_layout.value();
  if (a.workspace && a.workspace_bytes < layout.total_bytes)
    return make_error(SSD_ERROR_WORKSPACE_TOO_SMALL, fmt::format("workspace_bytes: {} given, {} needed "
                                                                 "(ssd_forward_workspace_layout)", a.workspace_bytes,
                                                                 layout.total_bytes));
  if (a.workspace && reinterpret_cast<uintptr_t>(a.workspace) % kAlign != 0)
    return make_error(SSD_ERROR_INVALID_ALIGNMENT, "workspace: must be 256-byte aligned");
  ssd_mode mode = rt.mode;
  if (options) {
    ssd_launch_options o = default_launch_options();
    auto read = read_sized_struct(options, o, "options", offsetof(ssd_launch_options, mode) + sizeof(int32_t));
    if (!read.ok()) return read.status();
    if (read->mode < -1 || read->mode > 1)
      return make_error(SSD_ERROR_INVALID_ARGUMENT, fmt::format("options.mode: {} (legal: -1, 0, 1)", read->mode));
    if (read->mode >= 0) mode = ssd_mode(read->mode);
  }
  auto arch = runtime_arch(rt);
  if (!arch.ok()) return arch.status();

  // All kernels first: nothing is launched unless every one of them is available.
  const std::vector<ssd_kernel_config> configs = forward_stage_configs(a, d, arch.value(), mode, tiles);
  const ssd_kernel* kernels[4];
  for (int i = 0; i < 4; ++i) {
    auto k = get_kernel(rt, configs[i + 1]);
    if (!k.ok()) return k.status();
    kernels[i] = k.value();
  }

  const cuda::Driver& drv = *cuda::driver().value();
  CUdeviceptr ws = reinterpret_cast<CUdeviceptr>(a.workspace);
  bool owned = false;
  if (!a.workspace) {
    if (!rt.warned_workspace.exchange(true))
      log_warning(fmt::format("ssd_forward: no workspace given; allocating {} bytes per call on the stream "
                              "(pass one of ssd_forward_workspace_layout().total_bytes to avoid this)",
                              layout.total_bytes));
    SSD_RETURN_IF_ERROR(cuda::check(drv.cuMemAllocAsync(&ws, layout.total_bytes, stream), "cuMemAllocAsync(workspace)"));
    owned = true;
  }
  char* base = reinterpret_cast<char*>(ws);
  float* dt_out = reinterpret_cast<float*>(base + layout.dt_out_offset);
  float* dA_cs = reinterpret_cast<float*>(base + layout.dA_cumsum_offset);
  float* CB = reinterpret_cast<float*>(base + layout.CB_offset);
  float* states = reinterpret_cast<float*>(base + layout.states_offset);
  const ssd_kernel* const stage_kernels[4] = {kernels[0], kernels[1], kernels[2], kernels[3]};
  Status s = launch_forward_stages(rt, a, d, mode, stage_kernels, ForwardBuffers{dt_out, dA_cs, CB, states}, 0, stream,
                                   after_stage);
  if (owned) {
    Status f = cuda::check(drv.cuMemFreeAsync(ws, stream), "cuMemFreeAsync(workspace)");
    if (s.ok()) s = f;
  }
  return s;
}

}  // namespace ssd
