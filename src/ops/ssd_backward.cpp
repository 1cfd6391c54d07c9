#include "ops/ssd_backward.h"

#include <algorithm>

#include <fmt/format.h>

#include "config/config.h"
#include "ops/tensor_check.h"
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
  d.nc = (d.L + t.chunk_size - 1) / t.chunk_size;
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

size_t partial_bytes(const GateBwdTensors& t, const GateDims& d) {
  const size_t per = t.D.ndim == 2 ? size_t(d.p) : 1;
  return size_t(d.b * d.nc * d.h) * per * sizeof(float);
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
    SSD_RETURN_IF_ERROR(cuda::check(drv.cuMemAllocAsync(&ws, partial_bytes(t, d), stream), "cuMemAllocAsync(workspace)"));
    owned = true;
  }
  ssd_kernels::GateBwdParams p{};
  auto set4 = [](const ssd_tensor& s, const void*& ptr, long long& sb, long long& sl, long long& sh, long long& sp) {
    ptr = s.data;
    sb = s.strides[0];
    sl = s.strides[1];
    sh = s.strides[2];
    sp = s.strides[3];
  };
  set4(t.dout, p.dout, p.dout_stride_b, p.dout_stride_l, p.dout_stride_h, p.dout_stride_p);
  set4(t.x, p.x, p.x_stride_b, p.x_stride_l, p.x_stride_h, p.x_stride_p);
  if (z) {
    set4(t.z, p.z, p.z_stride_b, p.z_stride_l, p.z_stride_h, p.z_stride_p);
    set4(t.out_x, p.out_x, p.out_x_stride_b, p.out_x_stride_l, p.out_x_stride_h, p.out_x_stride_p);
    const void* dy = nullptr;
    const void* dz = nullptr;
    set4(t.dy, dy, p.dy_stride_b, p.dy_stride_l, p.dy_stride_h, p.dy_stride_p);
    set4(t.dz, dz, p.dz_stride_b, p.dz_stride_l, p.dz_stride_h, p.dz_stride_p);
    p.dy = t.dy.data;
    p.dz = t.dz.data;
  }
  p.partials = reinterpret_cast<float*>(ws);
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
    r.out[0] = p.dD;
    r.out_stride[0] = per_p ? 1 : t.dD.strides[0];
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

}  // namespace ssd
