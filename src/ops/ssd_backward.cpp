#include "ops/ssd_backward.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include <fmt/format.h>

#include "common/log.h"
#include "common/struct_io.h"
#include "config/config.h"
#include "kernels/family.h"
#include "ops/chunk_cumsum.h"
#include "ops/tensor_check.h"
#include "ops/tensor_ref.h"
#include "ssd/backward_params.cuh"
#include "ssd/kernel_params.cuh"

namespace ssd {
namespace {

struct GateDims {
  int64_t b, L, h, p, nc;
};

Status check_gate(const GateBwdTensors& t, GateDims& d) {
  if (t.chunk_size != 64 && t.chunk_size != 128 && t.chunk_size != 256)
    return make_error(SSD_ERROR_INVALID_SHAPE, fmt::format("chunk_size: {} (legal: 64, 128, 256)", t.chunk_size));
  SSD_RETURN_IF_ERROR(check_tensor(t.dout, {"dout", {-1, -1, -1, -1}, {SSD_DTYPE_BF16, SSD_DTYPE_FP16}}));
  d = GateDims{t.dout.shape[0], t.dout.shape[1], t.dout.shape[2], t.dout.shape[3], 0};
  d.nc = d.L / t.chunk_size + (d.L % t.chunk_size != 0);  // no overflow for L near 2^63
  if (d.p != 32 && d.p != 64 && d.p != 128)
    return make_error(SSD_ERROR_INVALID_SHAPE, fmt::format("dout: headdim {} (legal: 32, 64, 128)", d.p));
  const std::initializer_list<int64_t> bthp = {d.b, d.L, d.h, d.p};
  const ssd_dtype T = t.dout.dtype;
  SSD_RETURN_IF_ERROR(check_tensor(t.x, {"x", bthp, {T}}));
  const bool z = t.z.data != nullptr;
  if (z) {
    SSD_RETURN_IF_ERROR(check_tensor(t.z, {"z", bthp, {T}}));
    SSD_RETURN_IF_ERROR(check_tensor(t.out_x, {"out_x", bthp, {T}}));
    SSD_RETURN_IF_ERROR(check_tensor(t.dy, {"dy", bthp, {T}, true}));
    SSD_RETURN_IF_ERROR(check_tensor(t.dz, {"dz", bthp, {T}, true}));
  } else if (t.out_x.data || t.dy.data || t.dz.data) {
    return make_error(SSD_ERROR_INVALID_ARGUMENT, "out_x/dy/dz: given without z (without z, dy is dout)");
  }
  if (t.D.data) {
    const bool per_p = t.D.ndim == 2;
    if (per_p) {
      SSD_RETURN_IF_ERROR(check_tensor(t.D, {"D", {d.h, d.p}, {SSD_DTYPE_FP32}}));
      SSD_RETURN_IF_ERROR(check_tensor(t.dD, {"dD", {d.h, d.p}, {SSD_DTYPE_FP32}, true, true}));
      if (t.dD.strides[0] != d.p) return make_error(SSD_ERROR_INVALID_STRIDE, "dD: must be contiguous (h, p)");
    } else {
      SSD_RETURN_IF_ERROR(check_tensor(t.D, {"D", {d.h}, {SSD_DTYPE_FP32}}));
      SSD_RETURN_IF_ERROR(check_tensor(t.dD, {"dD", {d.h}, {SSD_DTYPE_FP32}, true, true}));
    }
  } else if (t.dD.data) {
    return make_error(SSD_ERROR_INVALID_ARGUMENT, "dD: given without D");
  }
  if (!z && !t.D.data) return make_error(SSD_ERROR_INVALID_ARGUMENT, "z, D: neither given, nothing to compute");
  return Status::Ok();
}

Result<size_t> partial_bytes(const GateBwdTensors& t, const GateDims& d) {
  CheckedSize z;
  const size_t bytes = z.mul({d.b, d.nc, d.h, t.D.ndim == 2 ? d.p : 1, int64_t(sizeof(double))});
  SSD_RETURN_IF_ERROR(z.status("gate_bwd", fmt::format("b={} L={} h={} p={}", d.b, d.L, d.h, d.p)));
  return bytes;
}

unsigned grid_for(int64_t work, int32_t max_blocks) {
  const int64_t g = max_blocks > 0 ? std::min<int64_t>(work, max_blocks) : work;
  return unsigned(std::max<int64_t>(1, std::min<int64_t>(g, 0x7fffffff)));
}

}  // namespace

Result<size_t> gate_backward_workspace(const GateBwdTensors& t, ssd_mode mode) {
  GateDims d{};
  SSD_RETURN_IF_ERROR(check_gate(t, d));
  if (mode == SSD_MODE_FAST || !t.D.data) return size_t(0);
  return partial_bytes(t, d);
}

Status gate_backward(ssd_runtime& rt, const GateBwdTensors& t, ssd_mode mode, void* workspace, int32_t max_blocks,
                     CUstream stream) {
  GateDims d{};
  SSD_RETURN_IF_ERROR(check_gate(t, d));
  auto arch = runtime_arch(rt);
  if (!arch.ok()) return arch.status();
  const bool z = t.z.data != nullptr, D = t.D.data != nullptr, per_p = D && t.D.ndim == 2;
  const bool deterministic = mode == SSD_MODE_DETERMINISTIC;
  ssd_kernel_config c = default_config(SSD_KERNEL_GATE_BWD);
  c.chunk_size = t.chunk_size;
  c.headdim = int32_t(d.p);
  c.dtype = t.dout.dtype;
  c.flags = (z ? uint32_t(SSD_FLAG_Z) : 0u) | (D ? uint32_t(SSD_FLAG_D) : 0u) |
            (per_p ? uint32_t(SSD_FLAG_D_PER_HEADDIM) : 0u);
  c.mode = mode;
  c.arch = arch.value();
  auto kernel = get_kernel(rt, c);
  if (!kernel.ok()) return kernel.status();
  const ssd_kernel* reduce = nullptr;
  if (D && deterministic) {
    ssd_kernel_config rc = default_config(SSD_KERNEL_REDUCE_HEAD_PARTIALS);
    rc.partials = 1;
    rc.mode = mode;
    rc.arch = arch.value();
    auto r = get_kernel(rt, rc);
    if (!r.ok()) return r.status();
    reduce = r.value();
  }
  const cuda::Driver& drv = *cuda::driver().value();
  CUdeviceptr ws = reinterpret_cast<CUdeviceptr>(workspace);
  bool owned = false;
  if (reduce && !workspace) {
    auto bytes = partial_bytes(t, d);
    if (!bytes.ok()) return bytes.status();
    SSD_RETURN_IF_ERROR(cuda::check(drv.cuMemAllocAsync(&ws, bytes.value(), stream), "cuMemAllocAsync(workspace)"));
    owned = true;
  }
  ssd_kernels::GateBwdParams p{};
  p.dout = ref<const void, 4>(t.dout);
  p.x = ref<const void, 4>(t.x);
  if (z) {
    p.z = ref<const void, 4>(t.z);
    p.out_x = ref<const void, 4>(t.out_x);
    p.dy = ref<void, 4>(t.dy);
    p.dz = ref<void, 4>(t.dz);
  }
  p.partials = reinterpret_cast<double*>(ws);
  p.dD = static_cast<float*>(t.dD.data);
  p.batch = d.b;
  p.seqlen = d.L;
  p.nheads = d.h;
  p.nchunks = d.nc;
  Status s;
  if (D && !deterministic) {
    const size_t count = per_p ? size_t(d.h * d.p) : size_t(d.h);
    const size_t pitch = per_p ? 4 : size_t(std::max<int64_t>(t.dD.strides[0], 1)) * 4;
    s = cuda::check(drv.cuMemsetD2D32Async(reinterpret_cast<CUdeviceptr>(t.dD.data), pitch, 0, 1, count, stream),
                    "cuMemsetD2D32Async(dD)");
  }
  void* params[] = {&p};
  if (s.ok()) s = launch_kernel(*kernel.value(), grid_for(d.b * d.nc * d.h, max_blocks), 1, 1, params, stream);
  if (s.ok() && reduce) {
    ssd_kernels::ReduceHeadPartialsParams r{};
    r.partials = p.partials;
    r.out[0].data = p.dD;
    r.out[0].stride[0] = per_p ? 1 : t.dD.strides[0];
    r.batch = d.b;
    r.nchunks = d.nc;
    r.nheads = per_p ? d.h * d.p : d.h;  // (h, p) flattened: one "head" per (h, p)
    void* rparams[] = {&r};
    const int block = reduce->built->config.tile.m;
    s = launch_kernel(*reduce, grid_for((r.nheads + block - 1) / block, max_blocks), 1, 1, rparams, stream);
  }
  if (owned) {
    Status f = cuda::check(drv.cuMemFreeAsync(ws, stream), "cuMemFreeAsync(workspace)");
    if (s.ok()) s = f;
  }
  return s;
}

// =================================================================================================
// The whole backward.

namespace {

constexpr size_t kAlign = 256;

unsigned cap_axis(int64_t v, int32_t max_blocks, int64_t limit) {
  const int64_t cap = max_blocks > 0 ? std::min<int64_t>(max_blocks, limit) : limit;
  return unsigned(std::max<int64_t>(1, std::min<int64_t>(v, cap)));
}
unsigned grid_x(int64_t v, int32_t mb) { return cap_axis(v, mb, 0x7fffffff); }
unsigned grid_yz(int64_t v, int32_t mb) { return cap_axis(v, mb, 65535); }

ssd_forward_args forward_inputs(const ssd_backward_args& a) {
  ssd_forward_args f = default_forward_args();
  f.chunk_size = a.chunk_size;
  f.dt_softplus = a.dt_softplus;
  f.dt_limit_lo = a.dt_limit_lo;
  f.dt_limit_hi = a.dt_limit_hi;
  f.x = a.x;
  f.dt = a.dt;
  f.A = a.A;
  f.B = a.B;
  f.C = a.C;
  f.D = a.D;
  f.z = a.z;
  f.dt_bias = a.dt_bias;
  f.initial_states = a.initial_states;
  f.seq_idx = a.seq_idx;
  return f;
}

Status check_backward(const ssd_backward_args& a, ForwardDims& d) {
  if (a.mode != -1 && a.mode != SSD_MODE_DETERMINISTIC && a.mode != SSD_MODE_FAST)
    return make_error(SSD_ERROR_INVALID_ARGUMENT, fmt::format("args.mode: {} (legal: -1 runtime's, 0 deterministic, "
                                                              "1 fast)", a.mode));
  SSD_RETURN_IF_ERROR(check_forward_inputs(forward_inputs(a), d));
  const ssd_dtype T = a.x.dtype;
  const std::initializer_list<int64_t> bthp = {d.b, d.L, d.h, d.p}, btgn = {d.b, d.L, d.g, d.n};
  auto check_state = [&](const ssd_tensor& t, const char* name, bool output) -> Status {
    SSD_RETURN_IF_ERROR(check_tensor(t, {name, {d.b, d.h, d.p, d.n}, {SSD_DTYPE_FP32}, output, true}));
    if (t.strides[2] != d.n)
      return make_error(SSD_ERROR_INVALID_STRIDE, fmt::format("{}: headdim stride {} must equal dstate {} (p*n is "
                                                              "one flattened axis)", name, t.strides[2], d.n));
    return Status::Ok();
  };
  // Tensors that exist iff an option is on.
  auto paired = [&](const ssd_tensor& opt, const char* opt_name, const ssd_tensor& t, const char* name) -> Status {
    if (opt.data && !t.data) return make_error(SSD_ERROR_NULL_POINTER, fmt::format("{}: required with {}", name, opt_name));
    if (!opt.data && t.data)
      return make_error(SSD_ERROR_INVALID_ARGUMENT, fmt::format("{}: given without {}", name, opt_name));
    return Status::Ok();
  };
  SSD_RETURN_IF_ERROR(paired(a.z, "z", a.out_x, "out_x"));
  if (a.out_x.data) SSD_RETURN_IF_ERROR(check_tensor(a.out_x, {"out_x", bthp, {T}}));
  SSD_RETURN_IF_ERROR(check_tensor(a.dout, {"dout", bthp, {T}}));
  if (a.dfinal_states.data) SSD_RETURN_IF_ERROR(check_state(a.dfinal_states, "dfinal_states", false));
  SSD_RETURN_IF_ERROR(check_tensor(a.dx, {"dx", bthp, {T}, true}));
  SSD_RETURN_IF_ERROR(check_tensor(a.ddt, {"ddt", {d.b, d.L, d.h}, {a.dt.dtype}, true}));
  SSD_RETURN_IF_ERROR(check_tensor(a.dA, {"dA", {d.h}, {SSD_DTYPE_FP32}, true}));
  SSD_RETURN_IF_ERROR(check_tensor(a.dB, {"dB", btgn, {T}, true}));
  SSD_RETURN_IF_ERROR(check_tensor(a.dC, {"dC", btgn, {T}, true}));
  SSD_RETURN_IF_ERROR(paired(a.D, "D", a.dD, "dD"));
  if (a.dD.data) {
    if (a.D.ndim == 2) {
      SSD_RETURN_IF_ERROR(check_tensor(a.dD, {"dD", {d.h, d.p}, {SSD_DTYPE_FP32}, true, true}));
      if (a.dD.strides[0] != d.p) return make_error(SSD_ERROR_INVALID_STRIDE, "dD: must be contiguous (h, p)");
    } else {
      SSD_RETURN_IF_ERROR(check_tensor(a.dD, {"dD", {d.h}, {SSD_DTYPE_FP32}, true, true}));  // gate_bwd writes it contiguously
    }
  }
  SSD_RETURN_IF_ERROR(paired(a.z, "z", a.dz, "dz"));
  if (a.dz.data) SSD_RETURN_IF_ERROR(check_tensor(a.dz, {"dz", bthp, {T}, true}));
  SSD_RETURN_IF_ERROR(paired(a.dt_bias, "dt_bias", a.ddt_bias, "ddt_bias"));
  if (a.ddt_bias.data) SSD_RETURN_IF_ERROR(check_tensor(a.ddt_bias, {"ddt_bias", {d.h}, {SSD_DTYPE_FP32}, true}));
  SSD_RETURN_IF_ERROR(paired(a.initial_states, "initial_states", a.dinitial_states, "dinitial_states"));
  if (a.dinitial_states.data) SSD_RETURN_IF_ERROR(check_state(a.dinitial_states, "dinitial_states", true));
  return Status::Ok();
}

ssd_chunk_cumsum_bwd_args cumsum_args(const ssd_backward_args& a, const ForwardDims& d, float* ddA, float* ddt_x,
                                      void* ws, size_t ws_bytes) {
  ssd_chunk_cumsum_bwd_args c = default_cumsum_bwd_args();
  c.chunk_size = d.Q;
  c.dt_softplus = a.dt_softplus;
  c.dt_limit_lo = a.dt_limit_lo;
  c.dt_limit_hi = a.dt_limit_hi;
  c.dt = a.dt;
  c.A = a.A;
  c.dt_bias = a.dt_bias;
  c.ddA_cumsum = contiguous_tensor(ddA, SSD_DTYPE_FP32, {d.b, d.h, d.nc, d.Q});
  c.ddt_out = contiguous_tensor(ddt_x, SSD_DTYPE_FP32, {d.b, d.h, d.nc, d.Q});
  c.ddt = a.ddt;
  c.dA = a.dA;
  c.ddt_bias = a.ddt_bias;
  c.workspace = ws;
  c.workspace_bytes = ws_bytes;
  return c;
}

GateBwdTensors gate_tensors(const ssd_backward_args& a, const ForwardDims& d, void* dy) {
  GateBwdTensors t;
  t.chunk_size = d.Q;
  t.dout = a.dout;
  t.x = a.x;
  if (a.z.data) {
    t.z = a.z;
    t.out_x = a.out_x;
    t.dy = contiguous_tensor(dy, a.x.dtype, {d.b, d.L, d.h, d.p});
    t.dz = a.dz;
  }
  if (a.D.data) {
    t.D = a.D;
    t.dD = a.dD;
  }
  return t;
}

Result<BackwardLayout> layout_for(const ssd_backward_args& a, const ForwardDims& d, ssd_mode mode) {
  const bool det = mode == SSD_MODE_DETERMINISTIC;
  const int64_t T = int64_t(dtype_size(a.x.dtype));
  // Checked: absurd shapes must not wrap into a small total with overlapping regions.
  CheckedSize z;
  const size_t chunked = z.mul({d.b, d.h, d.nc, d.Q, 4});
  const size_t states = z.mul({d.b, d.h, d.nc, d.p, d.n});
  const size_t cb = z.mul({d.b, d.nc, d.g, d.Q, d.Q});
  BackwardLayout l{};
  size_t at = 0;
  auto take = [&](size_t bytes) {
    const size_t off = at;
    at = z.add(at, z.align_up(bytes, kAlign));
    return off;
  };
  l.dt_out = take(chunked);
  l.dA_cumsum = take(chunked);
  l.CB = take(z.mul({int64_t(cb), 4}));
  l.states = take(z.mul({int64_t(states), 4}));
  l.dy = take(a.z.data ? z.mul({d.b, d.L, d.h, d.p, T}) : 0);
  l.dP = take(z.mul({int64_t(states), 4}));
  l.ds = take(z.mul({int64_t(states), T}));
  l.states_t = take(z.mul({int64_t(states), T}));
  l.rho = take(det ? z.mul({d.b, d.h, d.nc, d.p * d.n / 32, int64_t(sizeof(double))}) : z.mul({d.b, d.h, d.nc, 4}));
  l.ddt_x = take(chunked);
  l.w = take(chunked);
  l.v = take(chunked);
  l.ddA = take(chunked);
  l.dCB = take(z.mul({int64_t(cb), T}));
  l.intra = take(det ? z.mul({int64_t(chunked), d.Q / ssd_kernels::kIntraRowGroup}) : chunked);
  // Before the gate's and the cumsum's own sizing, which multiply the same extents.
  SSD_RETURN_IF_ERROR(z.status("ssd_backward", dims_text(d)));
  size_t gate = 0;
  if (a.z.data || a.D.data) {
    auto g = gate_backward_workspace(gate_tensors(a, d, a.dout.data), mode);  // dy pointer only for the shape check
    if (!g.ok()) return g.status();
    gate = g.value();
  }
  l.gate = take(gate);
  ssd_chunk_cumsum_bwd_args c = cumsum_args(a, d, nullptr, nullptr, nullptr, 0);
  c.ddA_cumsum.data = c.ddt_out.data = reinterpret_cast<void*>(kAlign);  // shape check only
  auto cw = chunk_cumsum_bwd_workspace_size(&c, mode);
  if (!cw.ok()) return cw.status();
  l.cumsum = take(cw.value());
  l.total = at;
  SSD_RETURN_IF_ERROR(z.status("ssd_backward", dims_text(d)));
  return l;
}

ssd_kernel_config with_tile(ssd_kernel_config c, const ssd_tile& t) {
  if (t.m || t.n || t.k) c.tile = t;
  return c;
}

std::vector<ssd_kernel_config> configs_for(const ssd_backward_args& a, const ForwardDims& d, ssd_arch arch,
                                           ssd_mode mode, const BackwardTuning& tn) {
  // The recompute: the forward's own plan without chunk_scan (the backward does not need out).
  const ssd_forward_args f = forward_inputs(a);
  std::vector<ssd_kernel_config> out =
      forward_plan_configs(ForwardCall{f, d, mode, arch, ForwardBuffers{}, 0, tn.forward, false});
  const uint32_t flags = specialization_flags(f);
  const SsdShape shape{d.Q, int32_t(d.p), int32_t(d.n), int32_t(d.h / d.g), a.x.dtype};
  // gate_bwd only with z or D (without both it has nothing to compute), then the backward proper.
  std::vector<ssd_kernel_id> kernels;
  if (flags & (SSD_FLAG_Z | SSD_FLAG_D)) kernels.push_back(SSD_KERNEL_GATE_BWD);
  for (ssd_kernel_id k : {SSD_KERNEL_CHUNK_SCAN_BWD_DSTATES, SSD_KERNEL_STATE_PASSING_BWD, SSD_KERNEL_CHUNK_SCAN_BWD_DX,
                          SSD_KERNEL_CHUNK_SCAN_BWD_DCB, SSD_KERNEL_CHUNK_SCAN_BWD_DDA_INTRA,
                          SSD_KERNEL_CHUNK_STATE_BWD_DB, SSD_KERNEL_CHUNK_SCAN_BWD_DC, SSD_KERNEL_CHUNK_SCAN_BWD_DDA})
    kernels.push_back(k);
  for (ssd_kernel_id k : kernels) {
    const ssd_kernel_config c = config_for_shape(k, shape, flags, mode, arch);
    const ssd_tile* t = nullptr;
    switch (c.kernel) {
      case SSD_KERNEL_CHUNK_SCAN_BWD_DSTATES: t = &tn.dstates; break;
      case SSD_KERNEL_STATE_PASSING_BWD: t = &tn.passing; break;
      case SSD_KERNEL_CHUNK_SCAN_BWD_DX: t = &tn.dx; break;
      case SSD_KERNEL_CHUNK_SCAN_BWD_DCB: t = &tn.dcb; break;
      case SSD_KERNEL_CHUNK_SCAN_BWD_DDA_INTRA: t = &tn.intra; break;
      case SSD_KERNEL_CHUNK_STATE_BWD_DB: t = &tn.db; break;
      case SSD_KERNEL_CHUNK_SCAN_BWD_DC: t = &tn.dc; break;
      case SSD_KERNEL_CHUNK_SCAN_BWD_DDA: t = &tn.dda; break;
      default: break;
    }
    out.push_back(t ? with_tile(c, *t) : c);
  }
  ssd_kernel_config cb = default_config(SSD_KERNEL_CHUNK_CUMSUM_BWD);
  cb.chunk_size = d.Q;
  cb.dtype = a.dt.dtype;
  cb.flags = out.front().flags | SSD_FLAG_DDA_INCREMENTS;  // chunk_cumsum_fwd's dt_bias, dt_softplus
  cb.tile = tn.cumsum;
  cb.mode = mode;
  cb.arch = arch;
  out.push_back(cb);
  if (mode == SSD_MODE_DETERMINISTIC) {
    ssd_kernel_config r = default_config(SSD_KERNEL_REDUCE_HEAD_PARTIALS);
    r.partials = a.dt_bias.data ? 2 : 1;
    r.tile = tn.reduce;
    r.mode = mode;
    r.arch = arch;
    out.push_back(r);
    if (a.D.data && r.partials != 1) {  // gate_bwd's dD reduction (one partial, default tile)
      ssd_kernel_config r1 = default_config(SSD_KERNEL_REDUCE_HEAD_PARTIALS);
      r1.mode = mode;
      r1.arch = arch;
      out.push_back(r1);
    }
  }
  return out;
}

const ssd_kernel* find_kernel(const std::vector<const ssd_kernel*>& ks, ssd_kernel_id id) {
  for (const ssd_kernel* k : ks)
    if (k->built->config.kernel == id) return k;
  return nullptr;
}

Status memset_zero(void* p, size_t floats, CUstream stream) {
  const cuda::Driver& drv = *cuda::driver().value();
  return cuda::check(drv.cuMemsetD2D32Async(reinterpret_cast<CUdeviceptr>(p), floats * 4, 0, floats, 1, stream),
                     "cuMemsetD2D32Async");
}

}  // namespace

const char* backward_stage_name(int stage) {
  static const char* names[kBwdStageCount] = {"recompute (cumsum, bmm, state, passing)", "gate_bwd", "chunk_scan_bwd_dstates",
                                              "state_passing_bwd", "chunk_scan_bwd_dx", "chunk_scan_bwd_dcb",
                                              "chunk_scan_bwd_ddA_intra", "chunk_state_bwd_db", "chunk_scan_bwd_dc",
                                              "chunk_scan_bwd_ddA", "chunk_cumsum_bwd (+ reduce)"};
  return stage >= 0 && stage < kBwdStageCount ? names[stage] : "?";
}

ssd_backward_args default_backward_args() {
  ssd_backward_args a{};
  a.struct_size = sizeof(a);
  a.chunk_size = 256;
  a.dt_limit_lo = 0.f;
  a.dt_limit_hi = INFINITY;
  a.mode = -1;
  return a;
}

Result<BackwardLayout> backward_layout(const ssd_backward_args* user_args, int32_t mode) {
  auto args = read_sized_struct(user_args, default_backward_args(), "args", sizeof(ssd_backward_args));
  if (!args.ok()) return args.status();
  ForwardDims d{};
  SSD_RETURN_IF_ERROR(check_backward(args.value(), d));
  if (mode < 0) mode = args->mode >= 0 ? args->mode : SSD_MODE_DETERMINISTIC;
  return layout_for(args.value(), d, ssd_mode(mode));
}

Result<std::vector<ssd_kernel_config>> backward_kernel_configs(const ssd_backward_args* user_args, ssd_arch arch,
                                                              ssd_mode mode, const BackwardTuning* tuning) {
  auto args = read_sized_struct(user_args, default_backward_args(), "args", sizeof(ssd_backward_args));
  if (!args.ok()) return args.status();
  ForwardDims d{};
  SSD_RETURN_IF_ERROR(check_backward(args.value(), d));
  return configs_for(args.value(), d, arch, mode, tuning ? *tuning : BackwardTuning{});
}

Status ssd_backward(ssd_runtime& rt, const ssd_backward_args* user_args, void* workspace, size_t workspace_bytes,
                    CUstream stream, const BackwardTuning* tuning, const std::function<void(int)>& after_stage) {
  auto stage_done = [&](int stage) {
    if (after_stage) after_stage(stage);
  };
  auto args = read_sized_struct(user_args, default_backward_args(), "args", sizeof(ssd_backward_args));
  if (!args.ok()) return args.status();
  const ssd_backward_args& a = args.value();
  ForwardDims d{};
  SSD_RETURN_IF_ERROR(check_backward(a, d));
  const BackwardTuning tn = tuning ? *tuning : BackwardTuning{};
  const int32_t mb = tn.max_blocks;
  const ssd_mode mode = a.mode >= 0 ? ssd_mode(a.mode) : rt.mode;
  const bool det = mode == SSD_MODE_DETERMINISTIC;
  auto layout = layout_for(a, d, mode);
  if (!layout.ok()) return layout.status();
  const BackwardLayout& L = layout.value();
  if (workspace && workspace_bytes < L.total)
    return make_error(SSD_ERROR_WORKSPACE_TOO_SMALL, fmt::format("workspace_bytes: {} given, {} needed "
                                                                 "(ssd_backward_workspace_size)", workspace_bytes, L.total));
  if (workspace && reinterpret_cast<uintptr_t>(workspace) % kAlign != 0)
    return make_error(SSD_ERROR_INVALID_ALIGNMENT, "workspace: must be 256-byte aligned");
  auto arch = runtime_arch(rt);
  if (!arch.ok()) return arch.status();

  // Every kernel first: nothing is launched unless all of them are available.
  std::vector<const ssd_kernel*> ks;
  for (const ssd_kernel_config& c : configs_for(a, d, arch.value(), mode, tn)) {
    auto k = get_kernel(rt, c);
    if (!k.ok()) return k.status();
    ks.push_back(k.value());
  }
  const ssd_kernel* k_dstates = find_kernel(ks, SSD_KERNEL_CHUNK_SCAN_BWD_DSTATES);
  const ssd_kernel* k_passing = find_kernel(ks, SSD_KERNEL_STATE_PASSING_BWD);
  const ssd_kernel* k_dx = find_kernel(ks, SSD_KERNEL_CHUNK_SCAN_BWD_DX);
  const ssd_kernel* k_dcb = find_kernel(ks, SSD_KERNEL_CHUNK_SCAN_BWD_DCB);
  const ssd_kernel* k_intra = find_kernel(ks, SSD_KERNEL_CHUNK_SCAN_BWD_DDA_INTRA);
  const ssd_kernel* k_db = find_kernel(ks, SSD_KERNEL_CHUNK_STATE_BWD_DB);
  const ssd_kernel* k_dc = find_kernel(ks, SSD_KERNEL_CHUNK_SCAN_BWD_DC);
  const ssd_kernel* k_dda = find_kernel(ks, SSD_KERNEL_CHUNK_SCAN_BWD_DDA);

  const cuda::Driver& drv = *cuda::driver().value();
  CUdeviceptr ws = reinterpret_cast<CUdeviceptr>(workspace);
  bool owned = false;
  if (!workspace) {
    if (!rt.warned_workspace.exchange(true))
      log_warning(fmt::format("ssd_backward: no workspace given; allocating {} bytes per call on the stream "
                              "(pass ssd_backward_workspace_size bytes to avoid this)", L.total));
    SSD_RETURN_IF_ERROR(cuda::check(drv.cuMemAllocAsync(&ws, L.total, stream), "cuMemAllocAsync(workspace)"));
    owned = true;
  }
  char* base = reinterpret_cast<char*>(ws);
  auto f32 = [&](size_t off) { return reinterpret_cast<float*>(base + off); };
  float* dt_out = f32(L.dt_out);
  float* dA_cs = f32(L.dA_cumsum);
  float* CB = f32(L.CB);
  float* P = f32(L.states);
  float* dP = f32(L.dP);
  void* ds = base + L.ds;
  void* P_t = base + L.states_t;
  float* rho = f32(L.rho);
  float* ddt_x = f32(L.ddt_x);
  float* w = f32(L.w);
  float* v = f32(L.v);
  float* ddA = f32(L.ddA);
  void* dCB = base + L.dCB;
  float* intra = f32(L.intra);

  const TensorRef<const int, 2> seq = ref<const int, 2>(a.seq_idx);
  // Workspace intermediates, contiguous (views over their leading axes).
  const long long chunk_shape[] = {d.b, d.h, d.nc, d.Q};
  const long long states_shape[] = {d.b, d.nc, d.h, d.p, d.n};  // (b, nc, h, p*n) for state_passing_bwd
  const long long cb_shape[] = {d.b, d.nc, d.g, d.Q, d.Q};
  const TensorRef<const float, 3> dA_cs_ref = contiguous_ref<const float, 3>(dA_cs, chunk_shape);
  // dy: gate_bwd's output with z, else dout itself.
  const ssd_tensor dy = a.z.data ? contiguous_tensor(base + L.dy, a.x.dtype, {d.b, d.L, d.h, d.p}) : a.dout;
  const unsigned gy = grid_yz(d.b * d.nc, mb), gh = grid_yz(d.h, mb), gg = grid_yz(d.g, mb);
  auto tile_of = [](const ssd_kernel* k) { return k->built->config.tile; };

  const ssd_forward_args f = forward_inputs(a);
  const ForwardCall recompute{f, d, mode, arch.value(), ForwardBuffers{dt_out, dA_cs, CB, P}, mb, tn.forward, false};
  Status s = run_forward_plan(rt, recompute, stream);
  if (s.ok()) stage_done(kBwdRecompute);
  if (s.ok() && (a.z.data || a.D.data)) {  // B-a: dy, dz, dD
    s = gate_backward(rt, gate_tensors(a, d, base + L.dy), mode, base + L.gate, mb, stream);
  }
  if (s.ok()) stage_done(kBwdGate);
  if (s.ok()) {  // B-b: dP = dyᵀ diag(η e^A) C
    ssd_kernels::ChunkStateFwdParams p{};
    p.x = ref<const void, 4>(dy);
    p.B = ref<const void, 4>(a.C);
    p.dt = contiguous_ref<const float, 3>(dt_out, chunk_shape);
    p.dA_cumsum = dA_cs_ref;
    p.seq_idx = seq;
    p.states = contiguous_ref<float, 4>(dP, states_shape);
    p.batch = d.b; p.seqlen = d.L; p.nchunks = d.nc; p.nheads = d.h;
    const ssd_tile t = tile_of(k_dstates);
    void* params[] = {&p};
    s = launch_kernel(*k_dstates, grid_x(ssd_kernels::fwd_geom::chunk_state_tiles(int(d.p), int(d.n), t.m, t.n), mb),
                      gy, gh, params, stream);
  }
  if (s.ok()) stage_done(kBwdDstates);
  if (s.ok() && !det) s = memset_zero(rho, size_t(d.b * d.h * d.nc), stream);
  if (s.ok()) {  // B-c: ds, dinit, ρ partials
    ssd_kernels::StatePassingBwdParams p{};
    p.states = contiguous_ref<const float, 3>(P, states_shape);
    p.dstates = contiguous_ref<const float, 3>(dP, states_shape);
    p.ds = contiguous_ref<void, 3>(ds, states_shape);
    p.states_t = P_t;  // laid out as ds
    p.dA_cumsum = dA_cs_ref;
    p.dfinal_states = ref<const float, 2>(a.dfinal_states);
    p.dinit = ref<float, 2>(a.dinitial_states);
    if (det) p.rho_slots = reinterpret_cast<double*>(base + L.rho);
    else p.rho = rho;
    p.seq_idx = seq;
    p.batch = d.b; p.seqlen = d.L; p.nheads = d.h; p.nchunks = d.nc; p.state_size = d.p * d.n;
    const int block = tile_of(k_passing).m;
    void* params[] = {&p};
    s = launch_kernel(*k_passing, grid_x((p.state_size + block - 1) / block * d.b * d.h, mb), 1, 1, params, stream);
  }
  if (s.ok()) stage_done(kBwdPassing);
  if (s.ok()) {  // B-d: dx, dΔˣ, w, v
    ssd_kernels::ChunkScanBwdDxParams p{};
    p.CB = contiguous_ref<const float, 4>(CB, cb_shape);
    p.x = ref<const void, 4>(a.x);
    p.dy = ref<const void, 4>(dy);
    p.dt = dt_out; p.dA_cumsum = dA_cs_ref;
    p.B = ref<const void, 4>(a.B);
    p.C = ref<const void, 4>(a.C);
    p.ds = contiguous_ref<const void, 4>(ds, states_shape);
    p.states = contiguous_ref<const void, 4>(P_t, states_shape);
    p.D = ref<const float, 2>(a.D);  // D (h): stride[1] = 0
    p.seq_idx = seq;
    p.dx = ref<void, 4>(a.dx);
    p.ddt_x = ddt_x; p.w = w; p.v = v;  // laid out as dA_cumsum
    p.batch = d.b; p.seqlen = d.L; p.nchunks = d.nc; p.nheads = d.h;
    void* params[] = {&p};
    s = launch_kernel(*k_dx, grid_x(ssd_kernels::bwd_geom::dx_tiles(d.Q, tile_of(k_dx).m), mb), gy, gh, params, stream);
  }
  if (s.ok()) stage_done(kBwdDx);
  if (s.ok()) {  // B-e: dCB per group
    ssd_kernels::ChunkScanBwdDcbParams p{};
    p.x = ref<const void, 4>(a.x);
    p.dy = ref<const void, 4>(dy);
    p.dt = dt_out; p.dA_cumsum = dA_cs_ref;
    p.seq_idx = seq;
    p.dCB = contiguous_ref<void, 4>(dCB, cb_shape);
    p.batch = d.b; p.seqlen = d.L; p.nchunks = d.nc; p.ngroups = d.g;
    const ssd_tile t = tile_of(k_dcb);
    void* params[] = {&p};
    s = launch_kernel(*k_dcb, grid_x(ssd_kernels::bwd_geom::dcb_tiles(d.Q, t.m, t.n), mb), gy, gg, params, stream);
  }
  if (s.ok()) stage_done(kBwdDcb);
  if (s.ok() && !det) s = memset_zero(intra, size_t(d.b * d.h * d.nc * d.Q), stream);
  if (s.ok()) {  // B-g intra
    ssd_kernels::ChunkScanBwdDdaIntraParams p{};
    p.CB = contiguous_ref<const float, 4>(CB, cb_shape);
    p.x = ref<const void, 4>(a.x);
    p.dy = ref<const void, 4>(dy);
    p.dt = dt_out; p.dA_cumsum = dA_cs_ref;
    p.intra = intra;
    p.batch = d.b; p.seqlen = d.L; p.nchunks = d.nc; p.nheads = d.h;
    void* params[] = {&p};
    s = launch_kernel(*k_intra, grid_x(ssd_kernels::bwd_geom::intra_tiles(d.Q, tile_of(k_intra).m), mb), gy, gh, params,
                      stream);
  }
  if (s.ok()) stage_done(kBwdIntra);
  for (int which = 0; which < 2 && s.ok(); ++which) {  // B-f: dB, then dC
    const bool is_dc = which == 1;
    const ssd_kernel* k = is_dc ? k_dc : k_db;
    ssd_kernels::BcBwdParams p{};
    const ssd_tensor& xy = is_dc ? dy : a.x;
    p.xy = ref<const void, 4>(xy);
    p.state = contiguous_ref<const void, 4>(is_dc ? P_t : ds, states_shape);
    p.dCB = contiguous_ref<const void, 4>(dCB, cb_shape);
    const ssd_tensor& other = is_dc ? a.B : a.C;
    p.other = ref<const void, 4>(other);
    p.dt = dt_out; p.dA_cumsum = dA_cs_ref;
    p.seq_idx = seq;
    const ssd_tensor& out = is_dc ? a.dC : a.dB;
    p.out = ref<void, 4>(out);
    p.batch = d.b; p.seqlen = d.L; p.nchunks = d.nc; p.ngroups = d.g;
    const ssd_tile t = tile_of(k);
    void* params[] = {&p};
    s = launch_kernel(*k, grid_x(ssd_kernels::bwd_geom::bc_tiles(d.Q, int(d.n), t.m, t.n), mb), gy, gg, params, stream);
    if (s.ok()) stage_done(is_dc ? kBwdDc : kBwdDb);
  }
  if (s.ok()) {  // B-g: ddA per position
    ssd_kernels::ChunkScanBwdDdaParams p{};
    p.intra = intra; p.w = w;
    if (det) p.rho_slots = reinterpret_cast<const double*>(base + L.rho);
    else p.rho = rho;
    p.v = v; p.dA_cumsum = dA_cs_ref;
    p.ddA = ddA;  // w, v, ddA: laid out as dA_cumsum
    p.seq_idx = seq;
    p.batch = d.b; p.seqlen = d.L; p.nchunks = d.nc; p.nheads = d.h; p.rho_slots_per_chunk = d.p * d.n / 32;
    void* params[] = {&p};
    s = launch_kernel(*k_dda, grid_x(d.b * d.nc * d.h, mb), 1, 1, params, stream);
  }
  if (s.ok()) stage_done(kBwdDdA);
  if (s.ok()) {  // B-h, B-i: ddt, dA, ddt_bias
    ssd_chunk_cumsum_bwd_args c = cumsum_args(a, d, ddA, ddt_x, base + L.cumsum, L.total - L.cumsum);
    ssd_launch_options o = default_launch_options();
    o.mode = mode;
    o.tile = tn.cumsum;
    o.reduce_tile = tn.reduce;
    o.max_blocks = mb;
    s = chunk_cumsum_bwd(rt, &c, &o, stream, /*ddA_increments=*/true);
  }
  if (s.ok()) stage_done(kBwdCumsum);
  if (owned) {
    Status f = cuda::check(drv.cuMemFreeAsync(ws, stream), "cuMemFreeAsync(workspace)");
    if (s.ok()) s = f;
  }
  return s;
}

}  // namespace ssd
