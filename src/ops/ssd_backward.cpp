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
#include "ops/op_common.h"
#include "ops/operand_maps.h"
#include "ops/plan.h"
#include "ops/tensor_check.h"
#include "ops/tensor_ref.h"
#include "ops/workspace.h"
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
    SSD_RETURN_IF_ERROR(check_tensor(t.dy_lo, {"dy_lo", bthp, {T}, true}));
    for (int i = 0; i < 4; ++i)
      if (t.dy_lo.strides[i] != t.dy.strides[i])
        return make_error(SSD_ERROR_INVALID_STRIDE, "dy_lo: must have dy's strides (the kernel indexes both alike)");
    SSD_RETURN_IF_ERROR(check_tensor(t.dz, {"dz", bthp, {T}, true}));
  } else if (t.out_x.data || t.dy.data || t.dy_lo.data || t.dz.data) {
    return make_error(SSD_ERROR_INVALID_ARGUMENT, "out_x/dy/dy_lo/dz: given without z (without z, dy is dout)");
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

// The dD partials (b, nchunks, h[, p]) in fp64: a pure function of the extents.
Result<size_t> partial_bytes(bool D_per_headdim, const GateDims& d) {
  CheckedSize z;
  const size_t bytes = z.mul({d.b, d.nc, d.h, D_per_headdim ? d.p : 1, int64_t(sizeof(double))});
  SSD_RETURN_IF_ERROR(z.status("gate_bwd", [&] { return fmt::format("b={} L={} h={} p={}", d.b, d.L, d.h, d.p); }));
  return bytes;
}

}  // namespace

Result<size_t> gate_backward_workspace(const GateBwdTensors& t, ssd_mode mode) {
  GateDims d{};
  SSD_RETURN_IF_ERROR(check_gate(t, d));
  if (mode == SSD_MODE_FAST || !t.D.data) return size_t(0);
  return partial_bytes(t.D.ndim == 2, d);
}

namespace {

// The gate stage's pieces, shared by gate_backward and the backward's plan.
ssd_kernel_config gate_config(const GateBwdTensors& t, const GateDims& d, ssd_mode mode, ssd_arch arch) {
  const bool z = t.z.data != nullptr, D = t.D.data != nullptr, per_p = D && t.D.ndim == 2;
  ssd_kernel_config c = default_config(SSD_KERNEL_GATE_BWD);
  c.chunk_size = t.chunk_size;
  c.headdim = int32_t(d.p);
  c.dtype = t.dout.dtype;
  c.flags = (z ? uint32_t(SSD_FLAG_Z) : 0u) | (D ? uint32_t(SSD_FLAG_D) : 0u) |
            (per_p ? uint32_t(SSD_FLAG_D_PER_HEADDIM) : 0u);
  c.mode = mode;
  c.arch = arch;
  return c;
}

// Fast mode: dD accumulates with atomics into zeroed memory.
Status zero_dD(const GateBwdTensors& t, const GateDims& d, CUstream stream) {
  const bool per_p = t.D.ndim == 2;
  const size_t count = per_p ? size_t(d.h * d.p) : size_t(d.h);
  const size_t pitch = per_p ? 4 : size_t(std::max<int64_t>(t.dD.strides[0], 1)) * 4;
  return memset_zero_d32(t.dD.data, pitch, 1, count, stream, "cuMemsetD2D32Async(dD)");
}

Status launch_gate(const ssd_kernel& k, const GateBwdTensors& t, const GateDims& d, void* partials, int32_t max_blocks,
                   CUstream stream) {
  ssd_kernels::GateBwdZParams p{};  // without z the kernel reads only the GateBwdParams prefix
  p.dout = ref<const void, 4>(t.dout);
  p.x = ref<const void, 4>(t.x);
  if (t.z.data) {
    p.z = ref<const void, 4>(t.z);
    p.out_x = ref<const void, 4>(t.out_x);
    p.dy = ref<void, 4>(t.dy);
    p.dy_lo = t.dy_lo.data;  // laid out as dy (check_gate)
    p.dz = ref<void, 4>(t.dz);
  }
  p.partials = static_cast<double*>(partials);
  p.dD = static_cast<float*>(t.dD.data);
  p.batch = d.b;
  p.seqlen = d.L;
  p.nheads = d.h;
  p.nchunks = d.nc;
  void* params[] = {&p};
  // Work items (b, c, head block): heads_per_block(p) adjacent heads each.
  const int64_t head_blocks = ssd_kernels::gate_geom::head_blocks(d.h, int(d.p));
  return launch_kernel(k, grid_x(d.b * d.nc * head_blocks, max_blocks), 1, 1, params, stream);
}

// Deterministic mode: dD = the ordered sum of the gate's fp64 partials.
Status launch_dD_reduce(const ssd_kernel& reduce, const GateBwdTensors& t, const GateDims& d, void* partials,
                        int32_t max_blocks, CUstream stream) {
  const bool per_p = t.D.ndim == 2;
  ssd_kernels::ReduceHeadPartialsParams r{};
  r.partials = static_cast<double*>(partials);
  r.out[0].data = static_cast<float*>(t.dD.data);
  r.out[0].stride[0] = per_p ? 1 : t.dD.strides[0];
  r.batch = d.b;
  r.nchunks = d.nc;
  r.nheads = per_p ? d.h * d.p : d.h;  // (h, p) flattened: one "head" per (h, p)
  void* rparams[] = {&r};
  const int block = reduce.built->config.tile.m;
  return launch_kernel(reduce, grid_x((r.nheads + block - 1) / block, max_blocks), 1, 1, rparams, stream);
}

}  // namespace

Status gate_backward(ssd_runtime& rt, const GateBwdTensors& t, ssd_mode mode, void* workspace, int32_t max_blocks,
                     CUstream stream) {
  GateDims d{};
  SSD_RETURN_IF_ERROR(check_gate(t, d));
  auto arch = runtime_arch(rt);
  if (!arch.ok()) return arch.status();
  const bool D = t.D.data != nullptr;
  const bool deterministic = mode == SSD_MODE_DETERMINISTIC;
  auto kernel = get_kernel(rt, gate_config(t, d, mode, arch.value()));
  if (!kernel.ok()) return kernel.status();
  const ssd_kernel* reduce = nullptr;
  if (D && deterministic) {
    auto r = get_kernel(rt, reduce_head_partials_config(1, ssd_tile{}, mode, arch.value()));
    if (!r.ok()) return r.status();
    reduce = r.value();
  }
  size_t bytes = 0;
  if (reduce) SSD_ASSIGN_OR_RETURN(bytes, partial_bytes(t.D.ndim == 2, d));
  CallWorkspace ws;
  SSD_RETURN_IF_ERROR(ws.acquire(rt, workspace, bytes, stream, nullptr));
  void* partials = ws.base();
  Status s;
  if (D && !deterministic) s = zero_dD(t, d, stream);
  if (s.ok()) s = launch_gate(*kernel.value(), t, d, partials, max_blocks, stream);
  if (s.ok() && reduce) s = launch_dD_reduce(*reduce, t, d, partials, max_blocks, stream);
  return ws.release(s);
}

// =================================================================================================
// The whole backward.

namespace {

constexpr size_t kAlign = 256;


ssd_forward_args forward_inputs(const ssd_backward_args& a) {
  ssd_forward_args f = default_forward_args();
  f.chunk_size = a.chunk_size;
  copy_dt_options(f, a);
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
  auto check_state = [&](const ssd_tensor& t, const char* name, bool output) {
    return check_state_tensor(t, name, d, output);
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

GateBwdTensors gate_tensors(const ssd_backward_args& a, const ForwardDims& d, void* dy, void* dy_lo) {
  GateBwdTensors t;
  t.chunk_size = d.Q;
  t.dout = a.dout;
  t.x = a.x;
  if (a.z.data) {
    t.z = a.z;
    t.out_x = a.out_x;
    t.dy = contiguous_tensor(dy, a.x.dtype, {d.b, d.L, d.h, d.p});
    t.dy_lo = contiguous_tensor(dy_lo, a.x.dtype, {d.b, d.L, d.h, d.p});
    t.dz = a.dz;
  }
  if (a.D.data) {
    t.D = a.D;
    t.dD = a.dD;
  }
  return t;
}

// Deterministic mode fuses chunk_scan_bwd_dstates and state_passing_bwd (chunk_state_passing_bwd)
// unless the tuning asks for the staged pair; fast mode's kernels are the pair.
bool fused_state_pass(ssd_mode mode, const BackwardTuning& tn) {
  return mode == SSD_MODE_DETERMINISTIC && !tn.staged_state_pass;
}

// gate_bwd runs over the whole problem, before the group slices, unless it writes dy (with z: dy and
// dy_lo are x-sized, so they are a slice's); without z its only output is dD's partials.
bool gate_in_slices(const ssd_backward_args& a) { return a.z.data != nullptr; }

// One slice's sections (d: the slice's extents) at the start of a buffer, the whole problem's
// (w: the call's extents; the (b, h, nchunks, Q) vectors the per-head scans read, one P, and the
// partials) from `whole_start` on (sliced_layout_for: past the buffers).
Result<BackwardLayout> layout_for(const ssd_backward_args& a, const ForwardDims& d, const ForwardDims& w, ssd_mode mode,
                                  const BackwardTuning& tn, size_t whole_start) {
  const bool det = mode == SSD_MODE_DETERMINISTIC;
  const int64_t T = int64_t(dtype_size(a.x.dtype));
  // Checked: absurd shapes must not wrap into a small total with overlapping regions.
  CheckedSize z;
  const size_t chunked = z.mul({d.b, d.h, d.nc, d.Q, 4});
  const size_t whole_chunked = z.mul({w.b, w.h, w.nc, w.Q, 4});
  const size_t states = z.mul({d.b, d.h, d.nc, d.p, d.n});
  const size_t cb = z.mul({d.b, d.nc, d.g, d.Q, d.Q});
  BackwardLayout l{};
  size_t at = 0, at_whole = whole_start;
  auto take = [&](size_t bytes) {
    const size_t off = at;
    at = z.add(at, z.align_up(bytes, kAlign));
    return off;
  };
  auto take_whole = [&](size_t bytes) {
    const size_t off = at_whole;
    at_whole = z.add(at_whole, z.align_up(bytes, kAlign));
    return off;
  };
  // The (b, h, nchunks, Q) vectors laid out as dA_cumsum: one stride set for every kernel that
  // reads them, so they are the whole problem's, and a slice sees its heads of them.
  l.dt_out = take_whole(whole_chunked);
  l.dA_cumsum = take_whole(whole_chunked);
  l.ddt_x = take_whole(whole_chunked);
  l.w = take_whole(whole_chunked);
  l.v = take_whole(whole_chunked);
  l.ddA = take_whole(whole_chunked);
  l.CB = take(z.mul({int64_t(cb), 4}));
  // P (fp32) lives from the recompute's state pass to the backward's state pass, the first part of a
  // slice: one copy serves every buffer (a slice starts after the previous slice's state pass).
  l.states = tn.p_per_buffer ? take(z.mul({int64_t(states), 4})) : take_whole(z.mul({int64_t(states), 4}));
  l.dy = take(a.z.data ? z.mul({d.b, d.L, d.h, d.p, T}) : 0);
  l.dy_lo = take(a.z.data ? z.mul({d.b, d.L, d.h, d.p, T}) : 0);  // dy's second term, laid out as dy
  l.dP = take(fused_state_pass(mode, tn) ? 0 : z.mul({int64_t(states), 4}));  // fused: dP stays on chip
  l.ds = take(z.mul({int64_t(states), T}));
  l.ds_lo = take(z.mul({int64_t(states), T}));
  l.states_t = take(z.mul({int64_t(states), T}));
  l.states_t_lo = take(z.mul({int64_t(states), T}));
  l.rho = take(det ? z.mul({d.b, d.h, d.nc, d.p * d.n / 32, int64_t(sizeof(double))}) : z.mul({d.b, d.h, d.nc, 4}));
  l.dCB = take(z.mul({int64_t(cb), T}));
  // ddA_intra's T and U: one slot per 64-row group (deterministic) or one atomic sum (fast) per position.
  const size_t intra = det ? z.mul({int64_t(chunked), d.Q / ssd_kernels::kIntraRowGroup}) : chunked;
  l.intra = take(intra);
  l.dtx_intra = take(intra);
  // Before the gate's and the cumsum's own sizing, which multiply the same extents.
  SSD_RETURN_IF_ERROR(z.status("ssd_backward", [&] { return dims_text(w); }));
  // Pure functions of the extents (check_backward has validated every tensor): the dD partials
  // (deterministic mode, with D: the slice's with z, else the whole problem's) and chunk_cumsum_bwd's
  // fp64 partials (the whole problem's: it runs after the slices).
  size_t gate = 0;
  const ForwardDims& gd = gate_in_slices(a) ? d : w;
  if (a.D.data && det) {
    SSD_ASSIGN_OR_RETURN(gate, partial_bytes(a.D.ndim == 2, GateDims{gd.b, gd.L, gd.h, gd.p, gd.nc}));
  }
  l.gate = gate_in_slices(a) ? take(gate) : take_whole(gate);
  size_t cumsum = 0;
  SSD_ASSIGN_OR_RETURN(cumsum, chunk_cumsum_bwd_workspace_bytes(w.b, w.L, w.h, w.nc, a.dt_bias.data != nullptr, mode));
  l.cumsum = take_whole(cumsum);
  l.slice_bytes = at;
  l.whole = whole_start;
  l.total = at_whole;
  SSD_RETURN_IF_ERROR(z.status("ssd_backward", [&] { return dims_text(w); }));
  return l;
}

// ---- Group slices. Every sum of the backward lies inside one group's heads (dB, dC and dCB over
// the heads of a group; everything else per head), so the groups g0 .. g0 + G - 1 with their heads
// form a sub-problem whose outputs are those of the whole, bit for bit: the kernels see the same
// per-head data through views that start at the slice's first head or group. Slicing bounds the
// workspace, whose S-sized intermediates (ds, ds_lo, states_t, states_t_lo, the states) grow with
// b·L·h: a slice's are 1/slices of them.

ForwardDims slice_dims(const ForwardDims& d, int64_t slices) {
  ForwardDims s = d;
  s.h = d.h / slices;
  s.g = d.g / slices;
  return s;
}

// The view of `t` over [start, start + count) of axis `axis` (an absent tensor stays absent).
ssd_tensor axis_slice(const ssd_tensor& t, int axis, int64_t start, int64_t count) {
  if (!t.data) return t;
  ssd_tensor v = t;
  v.data = static_cast<char*>(t.data) + start * t.strides[axis] * int64_t(dtype_size(t.dtype));
  v.shape[axis] = count;
  return v;
}

// The arguments of slice `i` of `slices`: its heads of x, dt, A, D, z, dt_bias, the states and
// every gradient, its groups of B, C, dB, dC; seq_idx and the scalars as they are.
ssd_backward_args slice_args(const ssd_backward_args& a, const ForwardDims& d, int64_t slices, int64_t i) {
  const int64_t hs = d.h / slices, gs = d.g / slices, h0 = i * hs, g0 = i * gs;
  ssd_backward_args s = a;
  for (ssd_tensor* t : {&s.x, &s.z, &s.out_x, &s.dout, &s.dx, &s.dz, &s.dt, &s.ddt}) *t = axis_slice(*t, 2, h0, hs);
  for (ssd_tensor* t : {&s.B, &s.C, &s.dB, &s.dC}) *t = axis_slice(*t, 2, g0, gs);
  for (ssd_tensor* t : {&s.A, &s.dA, &s.dt_bias, &s.ddt_bias, &s.D, &s.dD}) *t = axis_slice(*t, 0, h0, hs);
  for (ssd_tensor* t : {&s.initial_states, &s.dinitial_states, &s.dfinal_states}) *t = axis_slice(*t, 1, h0, hs);
  return s;
}

// The layout of the call: the slicing (tuning's, else the default) and one slice's layout.
Result<BackwardLayout> sliced_layout_for(const ssd_backward_args& a, const ForwardDims& d, ssd_mode mode,
                                         const BackwardTuning& tn) {
  int64_t slices = tn.group_slices;
  if (slices < 0 || (slices > 0 && d.g % slices != 0))
    return make_error(SSD_ERROR_INVALID_ARGUMENT, fmt::format("tuning.group_slices: {} does not divide ngroups {}",
                                                              tn.group_slices, d.g));
  if (tn.slice_buffers < 0)
    return make_error(SSD_ERROR_INVALID_ARGUMENT, fmt::format("tuning.slice_buffers: {} (legal: 0 default, >= 1)",
                                                              tn.slice_buffers));
  BackwardLayout l{};
  if (slices == 0) {  // the fewest slices within the target, else one group each
    for (slices = 1; slices < d.g; ++slices) {
      if (d.g % slices != 0) continue;
      SSD_ASSIGN_OR_RETURN(l, layout_for(a, slice_dims(d, slices), d, mode, tn, 0));
      if (l.slice_bytes <= kSliceTargetBytes) break;
    }
  }
  const int64_t buffers = std::min<int64_t>(slices, tn.slice_buffers > 0 ? tn.slice_buffers : kSliceBuffers);
  SSD_ASSIGN_OR_RETURN(l, layout_for(a, slice_dims(d, slices), d, mode, tn, 0));
  // The buffers first, then the whole problem's sections.
  CheckedSize z;
  const size_t whole_start = z.mul({int64_t(l.slice_bytes), buffers});
  SSD_RETURN_IF_ERROR(z.status("ssd_backward", [&] { return dims_text(d); }));
  SSD_ASSIGN_OR_RETURN(l, layout_for(a, slice_dims(d, slices), d, mode, tn, whole_start));
  l.slices = slices;
  l.buffers = buffers;
  return l;
}

ssd_kernel_config with_tile(ssd_kernel_config c, const ssd_tile& t) {
  if (t.m || t.n || t.k) c.tile = t;
  return c;
}

Status memset_zero(void* p, size_t floats, CUstream stream) {
  return memset_zero_d32(p, floats * 4, floats, 1, stream, "cuMemsetD2D32Async");
}

// ---- The backward's plan (after the recompute, the forward's plan without chunk_scan): gate_bwd
// and its dD reduction, then B-b .. B-g, then chunk_cumsum_bwd and its dA / ddt_bias reduction.
// Each stage binds its parameter block from a BackwardCall of validated arguments; fast mode zeroes
// what its atomics accumulate into right before the stage that needs it.

// The parts of a sliced call (BackwardCall::parts): the whole problem's stages before the slices
// (gate_bwd without z), each slice's, the whole problem's after them (chunk_cumsum_bwd and its
// reduction); an unsliced call runs every part as one.
enum BackwardPart : uint8_t { kPartBefore = 1, kPartSlice = 2, kPartAfter = 4, kEveryPart = 7 };

struct BackwardCall {
  const ssd_backward_args& a;  // the slice's views (the whole problem's for kPartBefore / kPartAfter)
  const ForwardDims& d;        // their extents
  ssd_mode mode;
  ssd_arch arch;
  const BackwardTuning& tn;
  const BackwardLayout& L;
  char* base;                  // the workspace (null while only listing the kernels)
  size_t buffer = 0;           // the slice's buffer: (slice % buffers) · slice_bytes
  int64_t head0 = 0;           // the slice's first head in the whole problem's sections
  int64_t heads = 0;           // the whole problem's heads (0: d.h)
  uint8_t parts = kEveryPart;
  bool det() const { return mode == SSD_MODE_DETERMINISTIC; }
  bool in(BackwardPart part) const { return (parts & part) != 0; }
  // A section's address: the slice's buffer, or past L.whole the whole problem's sections.
  char* at(size_t offset) const { return base + (offset >= L.whole ? offset : buffer + offset); }
  float* f32(size_t offset) const { return reinterpret_cast<float*>(at(offset)); }
  // A (b, h, nchunks, Q) vector of the whole problem (laid out as dA_cumsum): the slice's heads.
  float* vec(size_t offset) const { return f32(offset) + head0 * d.nc * d.Q; }
  // dy: gate_bwd's output with z, else dout itself.
  ssd_tensor dy() const {
    return a.z.data ? contiguous_tensor(at(L.dy), a.x.dtype, {d.b, d.L, d.h, d.p}) : a.dout;
  }
  // dy's second term (gate_bwd's dy_lo, laid out as dy()), bound where dy enters dA's terms; only
  // with z (without z dy is the caller's dout, exact, and the kernels are specialized without it).
  const void* dy_lo() const { return a.z.data && base ? at(L.dy_lo) : nullptr; }
  GateBwdTensors gate() const {
    return gate_tensors(a, d, base ? at(L.dy) : nullptr, base ? at(L.dy_lo) : nullptr);
  }
  GateDims gate_dims() const { return GateDims{d.b, d.L, d.h, d.p, d.nc}; }
  SsdShape shape() const { return SsdShape{d.Q, int32_t(d.p), int32_t(d.n), int32_t(d.h / d.g), a.x.dtype}; }
  ssd_kernel_config shaped(ssd_kernel_id k, const ssd_tile& tile) const {
    return with_tile(config_for_shape(k, shape(), specialization_flags(forward_inputs(a)), mode, arch), tile);
  }
  unsigned gy() const { return grid_yz(d.b * d.nc, tn.max_blocks); }
  unsigned gh() const { return grid_yz(d.h, tn.max_blocks); }
  unsigned gg() const { return grid_yz(d.g, tn.max_blocks); }
  // Workspace intermediates viewed over their leading axes: the whole problem's (b, h, nchunks, Q)
  // vectors at the slice's heads, the slice's own sections contiguous.
  template <class T, int N>
  TensorRef<T, N> chunked(size_t offset) const {
    const long long shape[] = {d.b, heads > 0 ? heads : d.h, d.nc, d.Q};
    return contiguous_ref<T, N>(reinterpret_cast<T*>(vec(offset)), shape);
  }
  template <class T, int N>
  TensorRef<T, N> states(size_t offset) const {  // (b, nc, h, p*n) for state_passing_bwd
    const long long shape[] = {d.b, d.nc, d.h, d.p, d.n};
    return contiguous_ref<T, N>(reinterpret_cast<T*>(at(offset)), shape);
  }
  template <class T, int N>
  TensorRef<T, N> cb(size_t offset) const {
    const long long shape[] = {d.b, d.nc, d.g, d.Q, d.Q};
    return contiguous_ref<T, N>(reinterpret_cast<T*>(at(offset)), shape);
  }
  ssd_kernels::ChunkCumsumBwdParams cumsum() const {
    ssd_kernels::ChunkCumsumBwdParams p{};
    bind_cumsum_inputs(p, a, d.b, d.L, d.h, d.nc);
    p.ddA_cumsum = chunked<const float, 3>(L.ddA);
    p.ddt_out = chunked<const float, 3>(L.ddt_x);
    p.ddt = ref<void, 3>(a.ddt);
    p.partials = reinterpret_cast<double*>(at(L.cumsum));
    p.dA = ref<float, 1>(a.dA);
    p.ddt_bias = ref<float, 1>(a.ddt_bias);
    return p;
  }
};
using B = BackwardCall;

// B-a: dy, dz and the dD partials (fast mode: dD itself, zeroed first), with z or D.
BackwardPart gate_part(const B& c) { return gate_in_slices(c.a) ? kPartSlice : kPartBefore; }
bool gate_runs(const B& c) { return (c.a.z.data || c.a.D.data) && c.in(gate_part(c)); }
ssd_kernel_config gate_cfg(const B& c) { return gate_config(c.gate(), c.gate_dims(), c.mode, c.arch); }
Status gate_launch(const B& c, const ssd_kernel& k, CUstream stream) {
  if (c.a.D.data && !c.det()) SSD_RETURN_IF_ERROR(zero_dD(c.gate(), c.gate_dims(), stream));
  return launch_gate(k, c.gate(), c.gate_dims(), c.at(c.L.gate), c.tn.max_blocks, stream);
}
bool dD_reduce_runs(const B& c) { return c.a.D.data && c.det() && c.in(gate_part(c)); }
ssd_kernel_config dD_reduce_cfg(const B& c) { return reduce_head_partials_config(1, ssd_tile{}, c.mode, c.arch); }
Status dD_reduce_launch(const B& c, const ssd_kernel& k, CUstream stream) {
  return launch_dD_reduce(k, c.gate(), c.gate_dims(), c.at(c.L.gate), c.tn.max_blocks, stream);
}

// B-b: dP = dyᵀ diag(η e^A) C (chunk_state's template on (dy, C)).
// Two-term weighted operand (SSD_FLAG_TWO_TERM_STATES): dP's rounding enters every ds and so dA.
// With z, SSD_FLAG_Z (from the shape's flags): dy's second term as a second pass.
ssd_kernel_config dstates_cfg(const B& c) {
  ssd_kernel_config k = c.shaped(SSD_KERNEL_CHUNK_SCAN_BWD_DSTATES, c.tn.dstates);
  k.flags |= SSD_FLAG_TWO_TERM_STATES;
  return k;
}
Status dstates_launch(const B& c, const ssd_kernel& k, CUstream stream) {
  ssd_kernels::ChunkStateXLoParams p{};  // without z the kernel reads only the ChunkStateFwdParams prefix
  p.x = ref<const void, 4>(c.dy());
  p.x_lo = c.dy_lo();  // laid out as dy (null without z)
  p.B = ref<const void, 4>(c.a.C);
  p.dt = c.chunked<const float, 3>(c.L.dt_out);
  p.dA_cumsum = c.chunked<const float, 3>(c.L.dA_cumsum);
  p.seq_idx = ref<const int, 2>(c.a.seq_idx);
  p.states = c.states<float, 4>(c.L.dP);
  p.batch = c.d.b; p.seqlen = c.d.L; p.nchunks = c.d.nc; p.nheads = c.d.h;
  const ssd_tile t = k.built->config.tile;
  void* params[] = {&p};
  return launch_kernel(
      k, grid_x(ssd_kernels::fwd_geom::chunk_state_tiles(int(c.d.p), int(c.d.n), t.m, t.n), c.tn.max_blocks), c.gy(),
      c.gh(), params, stream);
}

// B-c: ds, dinit, the ρ partials (fast mode: ρ by atomics, zeroed first).
ssd_kernel_config passing_cfg(const B& c) { return c.shaped(SSD_KERNEL_STATE_PASSING_BWD, c.tn.passing); }
Status passing_launch(const B& c, const ssd_kernel& k, CUstream stream) {
  float* rho = c.f32(c.L.rho);
  if (!c.det()) SSD_RETURN_IF_ERROR(memset_zero(rho, size_t(c.d.b * c.d.h * c.d.nc), stream));
  ssd_kernels::StatePassingBwdParams p{};
  p.states = c.states<const float, 3>(c.L.states);
  p.dstates = c.states<const float, 3>(c.L.dP);
  p.ds = c.states<void, 3>(c.L.ds);
  p.ds_lo = c.at(c.L.ds_lo);  // laid out as ds
  p.states_t = c.at(c.L.states_t);
  p.states_t_lo = c.at(c.L.states_t_lo);
  p.dA_cumsum = c.chunked<const float, 3>(c.L.dA_cumsum);
  p.dfinal_states = ref<const float, 2>(c.a.dfinal_states);
  p.dinit = ref<float, 2>(c.a.dinitial_states);
  if (c.det()) p.rho_slots = reinterpret_cast<double*>(c.at(c.L.rho));
  else p.rho = rho;
  p.seq_idx = ref<const int, 2>(c.a.seq_idx);
  p.batch = c.d.b; p.seqlen = c.d.L; p.nheads = c.d.h; p.nchunks = c.d.nc; p.state_size = c.d.p * c.d.n;
  const int block = k.built->config.tile.m;
  void* params[] = {&p};
  return launch_kernel(
      k, grid_x(ssd_kernels::fwd_geom::state_passing_bwd_items(p.state_size, block, c.d.b, c.d.h), c.tn.max_blocks),
      1, 1, params, stream);
}

// B-b + B-c fused (deterministic mode's default): dP on chip, the same outputs bit for bit.
bool in_slice(const B& c) { return c.in(kPartSlice); }
bool staged_runs(const B& c) { return !fused_state_pass(c.mode, c.tn) && in_slice(c); }
bool fused_runs(const B& c) { return fused_state_pass(c.mode, c.tn) && in_slice(c); }
// Its wgmma kernel with TMA stages (SSD_FLAG_TMA) where dy and C fit the maps (with z dy and dy_lo
// are the workspace's, contiguous and 256-byte aligned): sm_90a, the wgmma kernel's shapes and chunks
// (the family's uses_wgmma), not turned off by BackwardTuning::cp_async; its cp.async loaders
// otherwise (the same bits).
bool fused_tma(const B& c) {
  namespace geom = ssd_kernels::fwd_geom;
  return c.arch == SSD_ARCH_SM90A && !c.tn.cp_async && geom::chunk_state_passing_wgmma_shape(int(c.d.p), int(c.d.n)) &&
         ssd_kernels::bwd_geom::chunk_state_passing_bwd_wgmma_walk(int(c.d.Q), c.a.z.data ? 2 : 1) &&
         fits_tma_map(c.dy()) && fits_tma_map(c.a.C);
}
ssd_kernel_config fused_cfg(const B& c) {
  ssd_kernel_config k = c.shaped(SSD_KERNEL_CHUNK_STATE_PASSING_BWD, c.tn.state_pass);
  if (fused_tma(c)) k.flags |= SSD_FLAG_TMA;
  return k;
}
Status fused_launch(const B& c, const ssd_kernel& k, CUstream stream) {
  // The larger block for both specializations: the cp.async one reads its ChunkStatePassingBwdParams prefix.
  ssd_kernels::ChunkStatePassingBwdTmaParams p{};
  p.x = ref<const void, 4>(c.dy());
  p.x_lo = c.dy_lo();  // laid out as dy (null without z)
  p.B = ref<const void, 4>(c.a.C);
  p.dA_cumsum = c.chunked<const float, 3>(c.L.dA_cumsum);
  p.seq_idx = ref<const int, 2>(c.a.seq_idx);
  p.states = c.states<const float, 3>(c.L.states);
  p.ds = c.states<void, 3>(c.L.ds);
  p.ds_lo = c.at(c.L.ds_lo);  // laid out as ds
  p.states_t = c.at(c.L.states_t);
  p.states_t_lo = c.at(c.L.states_t_lo);
  p.dfinal_states = ref<const float, 2>(c.a.dfinal_states);
  p.dinit = ref<float, 2>(c.a.dinitial_states);
  p.rho_slots = reinterpret_cast<double*>(c.at(c.L.rho));
  p.batch = c.d.b; p.seqlen = c.d.L; p.nchunks = c.d.nc; p.nheads = c.d.h;
  const ssd_tile t = k.built->config.tile;
  // The flattened (chunk, pass, K step) walk is a 32-bit index (two passes with z).
  if (c.d.nc * (c.a.z.data ? 2 : 1) * (c.d.Q / t.k) >= (int64_t(1) << 31))
    return make_error(SSD_ERROR_INVALID_SHAPE, fmt::format("x: seqlen {} has too many chunk steps for "
                                                           "chunk_state_passing_bwd", c.d.L));
  if (k.built->config.flags & SSD_FLAG_TMA) {
    const ssd_tensor dy = c.dy();
    const uint32_t positions = uint32_t(t.k);
    SSD_RETURN_IF_ERROR(put_map(blhp_map(dy, positions), p.map_x));
    if (c.a.z.data) {
      ssd_tensor dy_lo = dy;
      dy_lo.data = const_cast<void*>(c.dy_lo());  // the map only reads it
      SSD_RETURN_IF_ERROR(put_map(blhp_map(dy_lo, positions), p.map_xl));
    }
    SSD_RETURN_IF_ERROR(put_map(blhp_map(c.a.C, positions), p.map_b));
  }
  void* params[] = {&p};
  return launch_state_pass(k, c.d.b, c.d.h, c.d.p, c.d.n, c.tn.max_blocks, params, stream);
}

// B-d: dx, dΔˣ's state part, w, v (with z, SSD_FLAG_Z: v's p sum also over dy's second term).
// Its wgmma tiles at headdim 64 take TMA stages (SSD_FLAG_TMA) where C, B and dy fit the maps (the K
// tiles are the workspace's, contiguous): sm_90a, the tile (the tuning's, else the default) one of
// bwd_geom::dx_wg_shape's, not turned off by BackwardTuning::cp_async; the cp.async loaders
// otherwise (the same bits).
bool dx_tma(const B& c, const ssd_kernel_config& k) {
  const ssd_tile t = k.tile.m ? k.tile : default_tile(k);
  return c.arch == SSD_ARCH_SM90A && !c.tn.cp_async && c.d.p == 64 &&
         ssd_kernels::bwd_geom::dx_wg_shape(int(c.d.p), int(c.d.n), t.m, t.k) && fits_tma_map(c.a.C) &&
         fits_tma_map(c.a.B) && fits_tma_map(c.dy());
}
ssd_kernel_config dx_cfg(const B& c) {
  ssd_kernel_config k = c.shaped(SSD_KERNEL_CHUNK_SCAN_BWD_DX, c.tn.dx);
  if (dx_tma(c, k)) k.flags |= SSD_FLAG_TMA;
  return k;
}
// ChunkScanBwdDxTmaParams' maps (backward_params.cuh) for the kernel's tile.
Status encode_dx_maps(const B& c, const ssd_tile& t, ssd_kernels::ChunkScanBwdDxTmaParams& p) {
  SSD_RETURN_IF_ERROR(put_map(blhp_map(c.a.C, uint32_t(t.m)), p.map_c));
  SSD_RETURN_IF_ERROR(put_map(blhp_map(c.a.B, uint32_t(t.m)), p.map_b));
  const uint64_t dims[4] = {uint64_t(c.d.n), uint64_t(c.d.p), uint64_t(c.d.h), uint64_t(c.d.b * c.d.nc)};
  const ssd_dtype T = c.a.x.dtype;
  const uint32_t P = uint32_t(c.d.p);
  SSD_RETURN_IF_ERROR(put_map(dense_map(c.at(c.L.states_t), T, 2, dims, 64, P), p.map_states));
  SSD_RETURN_IF_ERROR(put_map(dense_map(c.at(c.L.states_t_lo), T, 2, dims, 64, P), p.map_states_lo));
  SSD_RETURN_IF_ERROR(put_map(dense_map(c.at(c.L.ds), T, 2, dims, 64, P), p.map_ds));
  SSD_RETURN_IF_ERROR(put_map(dense_map(c.at(c.L.ds_lo), T, 2, dims, 64, P), p.map_ds_lo));
  SSD_RETURN_IF_ERROR(put_map(blhp_map(c.dy(), uint32_t(t.k)), p.map_dy));  // phase B's dy
  const uint64_t cb_dims[4] = {uint64_t(c.d.Q), uint64_t(c.d.Q), uint64_t(c.d.g), uint64_t(c.d.b * c.d.nc)};
  SSD_RETURN_IF_ERROR(put_map(dense_map(c.at(c.L.CB), SSD_DTYPE_FP32, 4, cb_dims, 32, uint32_t(t.k)), p.map_cb));
  return Status::Ok();
}
Status dx_launch(const B& c, const ssd_kernel& k, CUstream stream) {
  // The larger block for every specialization: the others read its ChunkScanBwdDxZParams (without z
  // ChunkScanBwdDxParams) prefix.
  ssd_kernels::ChunkScanBwdDxTmaParams p{};
  p.CB = c.cb<const float, 4>(c.L.CB);
  p.x = ref<const void, 4>(c.a.x);
  p.dy = ref<const void, 4>(c.dy());
  p.dy_lo = c.dy_lo();  // laid out as dy (null without z)
  p.dt = c.vec(c.L.dt_out);
  p.dA_cumsum = c.chunked<const float, 3>(c.L.dA_cumsum);
  p.B = ref<const void, 4>(c.a.B);
  p.C = ref<const void, 4>(c.a.C);
  p.ds = c.states<const void, 4>(c.L.ds);
  p.ds_lo = c.states<const void, 4>(c.L.ds_lo);
  p.states = c.states<const void, 4>(c.L.states_t);
  p.states_lo = c.states<const void, 4>(c.L.states_t_lo);
  p.D = ref<const float, 2>(c.a.D);  // D (h): stride[1] = 0
  p.seq_idx = ref<const int, 2>(c.a.seq_idx);
  p.dx = ref<void, 4>(c.a.dx);
  p.ddt_x = c.vec(c.L.ddt_x); p.w = c.vec(c.L.w); p.v = c.vec(c.L.v);  // laid out as dA_cumsum
  p.batch = c.d.b; p.seqlen = c.d.L; p.nchunks = c.d.nc; p.nheads = c.d.h;
  if (k.built->config.flags & SSD_FLAG_TMA) SSD_RETURN_IF_ERROR(encode_dx_maps(c, k.built->config.tile, p));
  void* params[] = {&p};
  return launch_kernel(k, grid_x(ssd_kernels::bwd_geom::dx_tiles(c.d.Q, k.built->config.tile.m), c.tn.max_blocks),
                       c.gy(), c.gh(), params, stream);
}

// B-e: dCB per group.
ssd_kernel_config dcb_cfg(const B& c) { return c.shaped(SSD_KERNEL_CHUNK_SCAN_BWD_DCB, c.tn.dcb); }
Status dcb_launch(const B& c, const ssd_kernel& k, CUstream stream) {
  ssd_kernels::ChunkScanBwdDcbParams p{};
  p.x = ref<const void, 4>(c.a.x);
  p.dy = ref<const void, 4>(c.dy());
  p.dt = c.vec(c.L.dt_out);
  p.dA_cumsum = c.chunked<const float, 3>(c.L.dA_cumsum);
  p.seq_idx = ref<const int, 2>(c.a.seq_idx);
  p.dCB = c.cb<void, 4>(c.L.dCB);
  p.batch = c.d.b; p.seqlen = c.d.L; p.nchunks = c.d.nc; p.ngroups = c.d.g;
  const ssd_tile t = k.built->config.tile;
  void* params[] = {&p};
  return launch_kernel(k, grid_x(ssd_kernels::bwd_geom::dcb_tiles(c.d.Q, t.m, t.n), c.tn.max_blocks), c.gy(), c.gg(),
                       params, stream);
}

// B-g (intra-chunk part of ddA and of dΔˣ; fast mode: atomics into zeroed rows). With z
// (SSD_FLAG_Z): M's chain over p continues over dy's second term.
ssd_kernel_config intra_cfg(const B& c) { return c.shaped(SSD_KERNEL_CHUNK_SCAN_BWD_DDA_INTRA, c.tn.intra); }
// ddA_intra's parameter block (also the head of the fused dcb + ddA_intra's); fast mode's atomic
// sums start from zeroed rows.
Status intra_params(const B& c, CUstream stream, ssd_kernels::ChunkScanBwdDdaIntraZParams& p) {
  float* intra = c.f32(c.L.intra);
  float* dtx_intra = c.f32(c.L.dtx_intra);
  if (!c.det()) {
    SSD_RETURN_IF_ERROR(memset_zero(intra, size_t(c.d.b * c.d.h * c.d.nc * c.d.Q), stream));
    SSD_RETURN_IF_ERROR(memset_zero(dtx_intra, size_t(c.d.b * c.d.h * c.d.nc * c.d.Q), stream));
  }
  p.CB = c.cb<const float, 4>(c.L.CB);
  p.x = ref<const void, 4>(c.a.x);
  p.dy = ref<const void, 4>(c.dy());
  p.dy_lo = c.dy_lo();  // laid out as dy (null without z)
  p.dt = c.vec(c.L.dt_out);
  p.dA_cumsum = c.chunked<const float, 3>(c.L.dA_cumsum);
  p.intra = intra;
  p.dtx_intra = dtx_intra;
  p.batch = c.d.b; p.seqlen = c.d.L; p.nchunks = c.d.nc; p.nheads = c.d.h;
  return Status::Ok();
}
Status intra_launch(const B& c, const ssd_kernel& k, CUstream stream) {
  ssd_kernels::ChunkScanBwdDdaIntraZParams p{};  // without z the kernel reads only the base block's fields
  SSD_RETURN_IF_ERROR(intra_params(c, stream, p));
  void* params[] = {&p};
  return launch_kernel(k, grid_x(ssd_kernels::bwd_geom::intra_tiles(c.d.Q, k.built->config.tile.m), c.tn.max_blocks),
                       c.gy(), c.gh(), params, stream);
}

// B-e + B-g in one pass (chunk_scan_bwd_dcb_ddA_intra): each head's dy·xᵀ formed once, the two
// kernels' bits. It runs when the tuning asks for it and a tile of it fits the shape (its row
// carries, one per head of a group, must fit in shared memory beside the tiles); measured no faster
// than the pair on the H200 (docs/perf.md), so the pair is the default.
bool dcb_intra_fused(const B& c) {
  if (!c.tn.fused_dcb_intra) return false;
  if (c.tn.dcb_intra.m != 0) return true;  // a tile given: validated (and refused) by the plan
  // The smallest tile (64 x 16 x 16) has the least shared memory: if it does not fit, none does.
  return ssd_kernels::bwd_geom::dcb_intra_tile_problem(int(c.d.Q), int(c.d.p), int(c.d.h / c.d.g), 64, 16, 16,
                                                       c.a.seq_idx.data != nullptr) == nullptr;
}
bool dcb_intra_split(const B& c) { return !dcb_intra_fused(c) && in_slice(c); }
bool dcb_intra_one(const B& c) { return dcb_intra_fused(c) && in_slice(c); }
ssd_kernel_config dcb_intra_cfg(const B& c) {
  return c.shaped(SSD_KERNEL_CHUNK_SCAN_BWD_DCB_DDA_INTRA, c.tn.dcb_intra);
}
Status dcb_intra_launch(const B& c, const ssd_kernel& k, CUstream stream) {
  ssd_kernels::ChunkScanBwdDcbIntraParams p{};
  SSD_RETURN_IF_ERROR(intra_params(c, stream, p));
  p.seq_idx = ref<const int, 2>(c.a.seq_idx);
  p.dCB = c.cb<void, 4>(c.L.dCB);
  p.ngroups = c.d.g;
  void* params[] = {&p};
  return launch_kernel(k, grid_x(ssd_kernels::bwd_geom::dcb_intra_tiles(c.d.Q, k.built->config.tile.m), c.tn.max_blocks),
                       c.gy(), c.gg(), params, stream);
}

// B-f: dB (from x and ds), then dC (from dy and the entering states).
Status bc_launch(const B& c, const ssd_kernel& k, CUstream stream, bool is_dc) {
  ssd_kernels::BcBwdParams p{};
  p.xy = ref<const void, 4>(is_dc ? c.dy() : c.a.x);
  p.state = c.states<const void, 4>(is_dc ? c.L.states_t : c.L.ds);
  p.dCB = c.cb<const void, 4>(c.L.dCB);
  p.other = ref<const void, 4>(is_dc ? c.a.B : c.a.C);
  p.dt = c.vec(c.L.dt_out);
  p.dA_cumsum = c.chunked<const float, 3>(c.L.dA_cumsum);
  p.seq_idx = ref<const int, 2>(c.a.seq_idx);
  p.out = ref<void, 4>(is_dc ? c.a.dC : c.a.dB);
  p.batch = c.d.b; p.seqlen = c.d.L; p.nchunks = c.d.nc; p.ngroups = c.d.g;
  const ssd_tile t = k.built->config.tile;
  void* params[] = {&p};
  return launch_kernel(k, grid_x(ssd_kernels::bwd_geom::bc_tiles(c.d.Q, int(c.d.n), t.m, t.n), c.tn.max_blocks),
                       c.gy(), c.gg(), params, stream);
}
ssd_kernel_config db_cfg(const B& c) { return c.shaped(SSD_KERNEL_CHUNK_STATE_BWD_DB, c.tn.db); }
Status db_launch(const B& c, const ssd_kernel& k, CUstream stream) { return bc_launch(c, k, stream, false); }
ssd_kernel_config dc_cfg(const B& c) { return c.shaped(SSD_KERNEL_CHUNK_SCAN_BWD_DC, c.tn.dc); }
Status dc_launch(const B& c, const ssd_kernel& k, CUstream stream) { return bc_launch(c, k, stream, true); }

// B-g: ddA per position.
ssd_kernel_config dda_cfg(const B& c) { return c.shaped(SSD_KERNEL_CHUNK_SCAN_BWD_DDA, c.tn.dda); }
Status dda_launch(const B& c, const ssd_kernel& k, CUstream stream) {
  ssd_kernels::ChunkScanBwdDdaParams p{};
  p.intra = c.f32(c.L.intra);
  p.dtx_intra = c.f32(c.L.dtx_intra);
  p.ddt_x = c.vec(c.L.ddt_x);
  p.w = c.vec(c.L.w);
  if (c.det()) p.rho_slots = reinterpret_cast<const double*>(c.at(c.L.rho));
  else p.rho = c.f32(c.L.rho);
  p.v = c.vec(c.L.v);
  p.dA_cumsum = c.chunked<const float, 3>(c.L.dA_cumsum);
  p.ddA = c.vec(c.L.ddA);  // w, v, ddA: laid out as dA_cumsum
  p.seq_idx = ref<const int, 2>(c.a.seq_idx);
  p.batch = c.d.b; p.seqlen = c.d.L; p.nchunks = c.d.nc; p.nheads = c.d.h; p.rho_slots_per_chunk = c.d.p * c.d.n / 32;
  void* params[] = {&p};
  const int64_t items = c.d.b * c.d.nc * c.d.h;  // one warp per (b, c, h)
  const int64_t items_per_block = ssd_kernels::bwd_geom::ddA_items_per_block(k.built->config.tile.m);
  return launch_kernel(k, grid_x(items / items_per_block + (items % items_per_block != 0), c.tn.max_blocks), 1, 1,
                       params, stream);
}

// B-h, B-i: ddt, and dA, ddt_bias (deterministic: fp64 partials, then their ordered reduction;
// fast: atomics into zeroed outputs).
ssd_kernel_config cumsum_cfg(const B& c) {
  return chunk_cumsum_bwd_config(c.a.dt.dtype, c.d.Q, c.a.dt_bias.data != nullptr, c.a.dt_softplus != 0,
                                 /*ddA_increments=*/true, c.tn.cumsum, c.mode, c.arch);
}
Status cumsum_launch(const B& c, const ssd_kernel& k, CUstream stream) {
  const ssd_kernels::ChunkCumsumBwdParams p = c.cumsum();
  if (!c.det()) SSD_RETURN_IF_ERROR(zero_head_sums(p, stream));
  return launch_chunk_cumsum_bwd(k, p, c.tn.max_blocks, stream);
}
bool in_after(const B& c) { return c.in(kPartAfter); }
bool sums_reduce_runs(const B& c) { return c.det() && in_after(c); }
ssd_kernel_config sums_reduce_cfg(const B& c) {
  return reduce_head_partials_config(c.a.dt_bias.data ? 2 : 1, c.tn.reduce, c.mode, c.arch);
}
Status sums_reduce_launch(const B& c, const ssd_kernel& k, CUstream stream) {
  return launch_head_sums_reduce(k, c.cumsum(), c.tn.max_blocks, stream);
}

const std::vector<Stage<B>>& backward_plan() {
  static const std::vector<Stage<B>> plan = {
      {"gate_bwd", -1, gate_runs, gate_cfg, gate_launch},
      {"reduce_head_partials (dD)", kBwdGate, dD_reduce_runs, dD_reduce_cfg, dD_reduce_launch},
      {"chunk_scan_bwd_dstates", kBwdDstates, staged_runs, dstates_cfg, dstates_launch},
      {"state_passing_bwd", kBwdPassing, staged_runs, passing_cfg, passing_launch},
      {"chunk_state_passing_bwd", kBwdPassing, fused_runs, fused_cfg, fused_launch},
      {"chunk_scan_bwd_dx", kBwdDx, in_slice, dx_cfg, dx_launch},
      {"chunk_scan_bwd_dcb", kBwdDcb, dcb_intra_split, dcb_cfg, dcb_launch},
      {"chunk_scan_bwd_ddA_intra", kBwdIntra, dcb_intra_split, intra_cfg, intra_launch},
      {"chunk_scan_bwd_dcb_ddA_intra", kBwdIntra, dcb_intra_one, dcb_intra_cfg, dcb_intra_launch},
      {"chunk_state_bwd_db", kBwdDb, in_slice, db_cfg, db_launch},
      {"chunk_scan_bwd_dc", kBwdDc, in_slice, dc_cfg, dc_launch},
      {"chunk_scan_bwd_ddA", kBwdDdA, in_slice, dda_cfg, dda_launch},
      {"chunk_cumsum_bwd", -1, in_after, cumsum_cfg, cumsum_launch},
      {"reduce_head_partials (dA, ddt_bias)", kBwdCumsum, sums_reduce_runs, sums_reduce_cfg, sums_reduce_launch},
  };
  return plan;
}

// The recompute's tiles: the tuning's, and where it leaves the state pass's tile to the default and
// one slice's batch × heads give the default tile's grid at most kNarrowRecomputeBlocks blocks (one
// per SM at the 128 × 128 tiles: most of the H200's 132 SMs idle while the blocks walk the chunks),
// the 64 × 64 × 64 tile where it is legal: four times the blocks, each a quarter of the work per
// chunk. Measured (docs/perf.md, session 25): b=1 L=16384, 8 slices of 32 heads (32 blocks), 11.38
// -> 10.82 ms; b=4 L=2048 and L=4096 (128 blocks) 5.25 -> 5.30 and 10.37 -> 10.59 ms, so not there.
// A pure function of the extents, so a precompiled kernel list (backward_kernel_configs) holds the
// call's kernels; the same bits for every tile (docs/determinism.md, D2).
constexpr int64_t kNarrowRecomputeBlocks = 64;
// A (b, L, heads, inner) tensor's slice views of `count` heads (or groups) each start a multiple of
// 16 bytes apart.
bool slice_views_keep_alignment(const ssd_tensor& t, int64_t count) {
  return !t.data || (count * t.strides[2] * int64_t(dtype_size(t.dtype))) % 16 == 0;
}
// Every slice runs slice 0's recompute kernels, and which of the state pass's loaders they take (TMA
// or cp.async: the same bits) follows x's and B's alignment (fits_tma_map), which a slice's view
// keeps only if it starts a multiple of 16 bytes after slice 0's. Where one does not (a stride the
// one head or group of a slice leaves unchecked), the recompute takes the cp.async loaders, which
// every view can use.
bool slices_keep_alignment(const ssd_backward_args& a, int64_t h_slice, int64_t g_slice) {
  return slice_views_keep_alignment(a.x, h_slice) && slice_views_keep_alignment(a.B, g_slice) &&
         slice_views_keep_alignment(a.C, g_slice);
}
// The same for the backward's TMA paths (the fused state pass's fused_tma, dx's dx_tma), which every
// slice takes as slice 0 does: dout (dy without z; with z dy is the workspace's), B and C must fit a
// map as the whole tensors (a slice of one head or group would skip its head axis's stride check)
// and keep the alignment in every slice; where they do not, the tuning's cp_async turns the paths
// off for the whole call.
BackwardTuning with_slice_loaders(const ssd_backward_args& a, const ForwardDims& ds, bool sliced, BackwardTuning tn) {
  if (sliced && !(a.z.data || (fits_tma_map(a.dout) && slice_views_keep_alignment(a.dout, ds.h))))
    tn.cp_async = true;
  for (const ssd_tensor* t : {&a.B, &a.C})
    if (sliced && !(fits_tma_map(*t) && slice_views_keep_alignment(*t, ds.g))) tn.cp_async = true;
  return tn;
}
// The blocks of a wgmma state pass's grid (chunk_state_passing_fwd / _bwd, launch_state_pass) at tile
// t over one slice's extents ds: with tile_is_legal (config.h), the two tests of the slice rules below.
int64_t state_pass_blocks(const ForwardDims& ds, const ssd_tile& t) {
  namespace geom = ssd_kernels::fwd_geom;
  const int p = int(ds.p);
  return int64_t(geom::chunk_state_tiles(p, int(ds.n), geom::chunk_state_passing_head_rows(p, t.m), t.n)) * ds.b *
         (ds.h / geom::chunk_state_passing_heads_per_block(p, t.m));
}
// `a`: the whole problem's arguments; f0, ds: slice 0's forward inputs and extents (the whole
// problem's when `sliced` is false).
ForwardTuning recompute_tuning(const ssd_backward_args& a, const ssd_forward_args& f0, const ForwardDims& ds,
                               bool sliced, ssd_mode mode, ssd_arch arch, const BackwardTuning& tn) {
  ForwardTuning t = tn.forward;
  if (sliced && !slices_keep_alignment(a, ds.h, ds.g)) t.cp_async = true;
  const ssd_tile& set = t.state_pass;
  if (set.m || set.n || set.k || t.staged_states) return t;
  for (const ssd_kernel_config& c : forward_plan_configs(ForwardCall{f0, ds, mode, arch, ForwardBuffers{}, 0, t, false})) {
    if (c.kernel != SSD_KERNEL_CHUNK_STATE_PASSING_FWD) continue;
    const ssd_tile def = default_tile(c);
    if (def.m <= 0 || def.n <= 0) return t;
    if (state_pass_blocks(ds, def) > kNarrowRecomputeBlocks) return t;
    const ssd_tile narrow{64, 64, 64, 0, 0};
    if (tile_is_legal(c, narrow)) t.state_pass = narrow;
  }
  return t;
}

// The fused backward state pass's tile: the tuning's, and where it leaves the tile to the default on
// sm_90a and one slice's batch × heads give the 128 × 128 × 64 tile (two heads of a group a block, 128
// state columns each) at least kWideStatePassBlocks blocks (about one per SM: it takes one by its
// shared memory), that tile where it is legal. Measured (docs/perf.md, session 31, b=4 L=2048: 128
// blocks a slice): the state pass 0.835 -> 0.775 ms against the family's default 64 × 64 × 64 (512
// blocks); at b=1 a slice gives it 32 blocks, where the default's four times as many blocks are
// faster. A pure function of the extents, like the recompute's tile (recompute_tuning); the same bits
// for every tile (docs/determinism.md, D2).
constexpr int64_t kWideStatePassBlocks = 128;
BackwardTuning with_state_pass_tile(const ssd_backward_args& a, const ForwardDims& d, const ForwardDims& ds,
                                    ssd_mode mode, ssd_arch arch, BackwardTuning tn) {
  const ssd_tile wide{128, 128, 64, 0, 0};
  const ssd_tile& set = tn.state_pass;
  if (set.m || set.n || set.k || arch != SSD_ARCH_SM90A || !fused_state_pass(mode, tn)) return tn;
  if (state_pass_blocks(ds, wide) < kWideStatePassBlocks) return tn;
  const BackwardLayout no_layout{};
  if (tile_is_legal(fused_cfg(BackwardCall{a, d, mode, arch, tn, no_layout, nullptr}), wide)) tn.state_pass = wide;
  return tn;
}

// The recompute (the forward's plan without chunk_scan, on one slice's extents), then the
// backward's own stages.
Result<std::vector<ssd_kernel_config>> configs_for(const ssd_backward_args& a, const ForwardDims& d, ssd_arch arch,
                                                   ssd_mode mode, const BackwardTuning& tn) {
  BackwardLayout L{};
  SSD_ASSIGN_OR_RETURN(L, sliced_layout_for(a, d, mode, tn));
  const ForwardDims ds = slice_dims(d, L.slices);
  // The recompute's kernels as ssd_backward fetches them: from slice 0's views.
  const bool sliced = L.slices > 1;
  const ssd_forward_args f0 = forward_inputs(sliced ? slice_args(a, d, L.slices, 0) : a);
  std::vector<ssd_kernel_config> out = forward_plan_configs(
      ForwardCall{f0, ds, mode, arch, ForwardBuffers{}, 0, recompute_tuning(a, f0, ds, sliced, mode, arch, tn), false});
  const BackwardLayout no_layout{};
  const BackwardTuning tn_call = with_state_pass_tile(a, d, ds, mode, arch, with_slice_loaders(a, ds, sliced, tn));
  for (const ssd_kernel_config& c : plan_configs(BackwardCall{a, d, mode, arch, tn_call, no_layout, nullptr}, backward_plan()))
    out.push_back(c);
  return out;
}

}  // namespace

const char* backward_stage_name(int stage) {
  static const char* names[kBwdStageCount] = {"recompute (cumsum, bmm, state pass)", "gate_bwd", "chunk_scan_bwd_dstates",
                                              "state_passing_bwd / fused state pass", "chunk_scan_bwd_dx", "chunk_scan_bwd_dcb",
                                              "chunk_scan_bwd_ddA_intra (+ dcb when fused)", "chunk_state_bwd_db", "chunk_scan_bwd_dc",
                                              "chunk_scan_bwd_ddA", "chunk_cumsum_bwd (+ reduce)"};
  return stage >= 0 && stage < kBwdStageCount ? names[stage] : "?";
}

ssd_backward_args default_backward_args() {
  ssd_backward_args a = default_dt_args<ssd_backward_args>();
  a.mode = -1;
  return a;
}

ssd_mode backward_kernel_mode(ssd_mode requested, const BackwardTuning* tuning) {
  const bool fast_kernels = tuning && tuning->fast_kernels;
  return requested == SSD_MODE_FAST && !fast_kernels ? SSD_MODE_DETERMINISTIC : requested;
}

Result<BackwardLayout> backward_layout(const ssd_backward_args* user_args, int32_t mode, const BackwardTuning* tuning) {
  ssd_backward_args a;
  ForwardDims d{};
  SSD_RETURN_IF_ERROR(read_checked_args(user_args, default_backward_args(), check_backward, a, d));
  if (mode < 0) mode = a.mode >= 0 ? a.mode : SSD_MODE_DETERMINISTIC;
  return sliced_layout_for(a, d, backward_kernel_mode(ssd_mode(mode), tuning), tuning ? *tuning : BackwardTuning{});
}

Result<std::vector<ssd_kernel_config>> backward_kernel_configs(const ssd_backward_args* user_args, ssd_arch arch,
                                                              ssd_mode mode, const BackwardTuning* tuning) {
  ssd_backward_args a;
  ForwardDims d{};
  SSD_RETURN_IF_ERROR(read_checked_args(user_args, default_backward_args(), check_backward, a, d));
  return configs_for(a, d, arch, backward_kernel_mode(mode, tuning), tuning ? *tuning : BackwardTuning{});
}

Status ssd_backward(ssd_runtime& rt, const ssd_backward_args* user_args, void* workspace, size_t workspace_bytes,
                    CUstream stream, const BackwardTuning* tuning, const std::function<void(int)>& after_stage) {
  auto stage_done = [&](int stage) {
    if (after_stage) after_stage(stage);
  };
  ssd_backward_args a;
  ForwardDims d{};
  SSD_RETURN_IF_ERROR(read_checked_args(user_args, default_backward_args(), check_backward, a, d));
  const BackwardTuning tn_given = tuning ? *tuning : BackwardTuning{};
  const ssd_mode mode = backward_kernel_mode(a.mode >= 0 ? ssd_mode(a.mode) : rt.mode, &tn_given);
  auto layout = sliced_layout_for(a, d, mode, tn_given);
  if (!layout.ok()) return layout.status();
  const BackwardLayout& L = layout.value();
  const BackwardTuning tn_loaders = with_slice_loaders(a, slice_dims(d, L.slices), L.slices > 1, tn_given);
  if (workspace && workspace_bytes < L.total)
    return make_error(SSD_ERROR_WORKSPACE_TOO_SMALL, fmt::format("workspace_bytes: {} given, {} needed "
                                                                 "(ssd_backward_workspace_size)", workspace_bytes, L.total));
  if (workspace && reinterpret_cast<uintptr_t>(workspace) % kAlign != 0)
    return make_error(SSD_ERROR_INVALID_ALIGNMENT, "workspace: must be 256-byte aligned");
  auto arch = runtime_arch(rt);
  if (!arch.ok()) return arch.status();
  // A call identical to one whose launch graph is kept as that call left it (the same arguments,
  // workspace, stream, context and mode: every launch, grid and parameter byte would be recorded
  // again) replays it as is: no plan, no parameter blocks (runtime/launch_graph.h). Only calls of
  // the C API's form: a caller's workspace, no tuning, no stage events.
  CallKey same_call;
  if (workspace && !tuning && !after_stage) {
    constexpr uint64_t kBackwardOp = 0x5353442d42574400ull;  // "SSD-BWD"
    same_call = call_key(kBackwardOp, &a, sizeof a, workspace, workspace_bytes, stream, int(mode));
    Status replayed;
    if (!same_call.empty() && CallRecording::replay_same_call(rt, stream, same_call, &replayed)) return replayed;
  }
  const BackwardTuning tn = with_state_pass_tile(a, d, slice_dims(d, L.slices), mode, arch.value(), tn_loaders);

  // Every kernel first: nothing is allocated or launched unless all of them are available. Every
  // slice runs the same kernels (the specializations depend on the shape per head and group, not on
  // the counts), so slice 0's list serves them all. Unsliced, one call runs every part.
  const bool sliced_call = L.slices > 1;
  const ForwardDims ds = slice_dims(d, L.slices);
  std::vector<ssd_backward_args> sliced;
  sliced.reserve(size_t(L.slices));
  if (sliced_call)
    for (int64_t i = 0; i < L.slices; ++i) sliced.push_back(slice_args(a, d, L.slices, i));
  const ssd_backward_args& a0 = sliced_call ? sliced[0] : a;
  const ssd_arch ar = arch.value();
  auto whole_call = [&](char* base, uint8_t parts) { return BackwardCall{a, d, mode, ar, tn, L, base, 0, 0, 0, parts}; };
  auto slice_call = [&](const ssd_backward_args& ai, char* base, int64_t i) {
    return BackwardCall{ai, ds, mode, ar, tn, L, base, size_t(i % L.buffers) * L.slice_bytes, i * ds.h, d.h,
                        sliced_call ? uint8_t(kPartSlice) : uint8_t(kEveryPart)};
  };
  const auto& plan = backward_plan();
  PlanKernels recompute_kernels, kernels, before_kernels, after_kernels;
  const ssd_forward_args f0 = forward_inputs(a0);
  const ForwardTuning recompute_tiles = recompute_tuning(a, f0, ds, sliced_call, mode, ar, tn);
  {
    SSD_ASSIGN_OR_RETURN(recompute_kernels, fetch_forward_plan(rt, ForwardCall{f0, ds, mode, ar, ForwardBuffers{},
                                                                               tn.max_blocks, recompute_tiles, false}));
    SSD_ASSIGN_OR_RETURN(kernels, fetch_plan(rt, slice_call(a0, nullptr, 0), plan));
    if (sliced_call) {
      SSD_ASSIGN_OR_RETURN(before_kernels, fetch_plan(rt, whole_call(nullptr, kPartBefore), plan));
      SSD_ASSIGN_OR_RETURN(after_kernels, fetch_plan(rt, whole_call(nullptr, kPartAfter), plan));
    }
  }

  CallWorkspace ws;
  // Formatted only when the call allocates (the host path of a call with a workspace stays short).
  const std::string warning =
      workspace ? std::string()
                : fmt::format("ssd_backward: no workspace given; allocating {} bytes per call on the stream (pass "
                              "ssd_backward_workspace_size bytes to avoid this)", L.total);
  SSD_RETURN_IF_ERROR(ws.acquire(rt, workspace, L.total, stream, warning.c_str()));
  char* base = ws.base();
  // The recompute's launches and the backward's, recorded and launched as one cached graph
  // (runtime/launch_graph.h) unless the caller times the stages. Sliced, each part is a segment of
  // the graph: the stages before the slices, then each slice after only the slice before it in its
  // buffer (so slices of different buffers run side by side), then the stages after every slice.
  CallRecording recording(rt, stream, !after_stage);
  recording.remember_as(std::move(same_call));
  Status s;
  if (sliced_call) {
    CallRecording::begin_segment(-1);
    s = launch_plan(whole_call(base, kPartBefore), plan, before_kernels, stream, after_stage);
  }
  // The stage that reads P last (the backward's state pass, fused or staged): the next slice, which
  // rewrites P, starts after it.
  size_t p_reader = 0;
  for (size_t k = 0; k < plan.size(); ++k)
    if (kernels[k] && plan[k].report == kBwdPassing) p_reader = k;
  std::vector<int> segment_of(size_t(L.slices), -1), p_reader_launch(size_t(L.slices), -1), launch_of;
  for (int64_t i = 0; i < L.slices && s.ok(); ++i) {
    const ssd_backward_args& ai = sliced_call ? sliced[size_t(i)] : a;
    if (sliced_call)
      segment_of[size_t(i)] = CallRecording::begin_segment(i >= L.buffers ? segment_of[size_t(i - L.buffers)] : -1,
                                                           i > 0 ? segment_of[size_t(i - 1)] : -1,
                                                           i > 0 && !tn.p_per_buffer ? p_reader_launch[size_t(i - 1)] : -1);
    const BackwardCall c = slice_call(ai, base, i);
    ForwardBuffers buf{c.f32(L.dt_out), c.f32(L.dA_cumsum), c.f32(L.CB), c.f32(L.states)};
    buf.chunk_heads = d.h;  // the slice's heads of the whole problem's Δ and 𝒜
    buf.chunk_head0 = c.head0;
    const ssd_forward_args f = forward_inputs(ai);
    s = launch_forward_plan(ForwardCall{f, ds, mode, ar, buf, tn.max_blocks, recompute_tiles, false}, recompute_kernels,
                            stream);
    if (s.ok()) stage_done(kBwdRecompute);
    if (s.ok()) s = launch_plan(c, plan, kernels, stream, after_stage, &launch_of);
    if (s.ok()) p_reader_launch[size_t(i)] = launch_of[p_reader];  // (a failed slice ran no plan)
  }
  if (s.ok() && sliced_call) {
    CallRecording::begin_segment(CallRecording::kAfterEverySegment);
    s = launch_plan(whole_call(base, kPartAfter), plan, after_kernels, stream, after_stage);
  }
  return ws.release(recording.finish(s));
}

}  // namespace ssd
