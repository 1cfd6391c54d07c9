// The library's own CPU time per ssd_forward / ssd_backward call (C API, workspace given, kernels
// loaded), run against scripts/host_path/noop_libcuda.cpp: what the driver adds on a real GPU
// (cuLaunchKernel, ~2-3 us each) is not in it. Usage: host_path_bench [--calls N]. Tensors are
// fake device addresses: the library never dereferences them on the host.
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

#include "ssd/ssd.h"

namespace {

uintptr_t next_address = 0x700000000000ull;  // 64 GiB apart, 256-byte aligned

ssd_tensor fake_tensor(ssd_dtype dtype, std::initializer_list<int64_t> shape) {
  ssd_tensor t{};
  t.data = reinterpret_cast<void*>(next_address);
  next_address += uintptr_t(1) << 36;
  t.dtype = dtype;
  t.ndim = int32_t(shape.size());
  int i = 0;
  for (int64_t s : shape) t.shape[i++] = s;
  int64_t stride = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    t.strides[d] = stride;
    stride *= t.shape[d];
  }
  return t;
}

double thread_cpu_us() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) * 1e6 + double(t.tv_nsec) / 1e3;
}

bool ok(ssd_status s, const char* what) {
  if (s == SSD_OK) return true;
  std::fprintf(stderr, "%s: %s: %s\n", what, ssd_status_string(s), ssd_last_error_detail());
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  int calls = 20000;
  if (argc == 3 && std::strcmp(argv[1], "--calls") == 0) calls = std::atoi(argv[2]);
  if (calls <= 0) {
    std::fprintf(stderr, "usage: host_path_bench [--calls N]\n");
    return 2;
  }
  // ssdgen bench's default problem: nemotronh-56b (h=256 p=64 n=256 g=8, chunk 256), b=4, L=2048,
  // bf16, D per head, dt_bias, softplus.
  const int64_t b = 4, L = 2048, h = 256, p = 64, g = 8, n = 256;
  const ssd_dtype bf16 = SSD_DTYPE_BF16, fp32 = SSD_DTYPE_FP32;
  ssd_runtime_options ro;
  ssd_runtime_options_init(&ro);
  ro.arch = SSD_ARCH_SM90A;
  ssd_runtime* rt = nullptr;
  if (!ok(ssd_runtime_create(&ro, &rt), "ssd_runtime_create")) return 1;
  const ssd_cuda_stream stream = reinterpret_cast<ssd_cuda_stream>(uintptr_t(0x100));

  ssd_forward_args f;
  ssd_forward_args_init(&f);
  f.chunk_size = 256;
  f.dt_softplus = 1;
  f.x = fake_tensor(bf16, {b, L, h, p});
  f.dt = fake_tensor(bf16, {b, L, h});
  f.A = fake_tensor(fp32, {h});
  f.B = fake_tensor(bf16, {b, L, g, n});
  f.C = fake_tensor(bf16, {b, L, g, n});
  f.D = fake_tensor(fp32, {h});
  f.dt_bias = fake_tensor(fp32, {h});
  f.out = fake_tensor(bf16, {b, L, h, p});
  f.final_states = fake_tensor(fp32, {b, h, p, n});
  ssd_forward_layout layout{};
  layout.struct_size = sizeof(layout);
  if (!ok(ssd_forward_workspace_layout(&f, &layout), "ssd_forward_workspace_layout")) return 1;
  f.workspace = fake_tensor(bf16, {1}).data;
  f.workspace_bytes = layout.total_bytes;

  ssd_backward_args a;
  ssd_backward_args_init(&a);
  a.chunk_size = f.chunk_size;
  a.dt_softplus = f.dt_softplus;
  a.x = f.x; a.dt = f.dt; a.A = f.A; a.B = f.B; a.C = f.C; a.D = f.D; a.dt_bias = f.dt_bias;
  a.dout = fake_tensor(bf16, {b, L, h, p});
  a.dx = fake_tensor(bf16, {b, L, h, p});
  a.ddt = fake_tensor(bf16, {b, L, h});
  a.dA = fake_tensor(fp32, {h});
  a.dB = fake_tensor(bf16, {b, L, g, n});
  a.dC = fake_tensor(bf16, {b, L, g, n});
  a.dD = fake_tensor(fp32, {h});
  a.ddt_bias = fake_tensor(fp32, {h});
  size_t bwd_bytes = 0;
  if (!ok(ssd_backward_workspace_size(&a, &bwd_bytes), "ssd_backward_workspace_size")) return 1;
  void* bwd_ws = fake_tensor(bf16, {1}).data;

  // Every kernel compiled first (in parallel, into the disk cache), then one call each loads them.
  ssd_prepare_options po;
  ssd_prepare_options_init(&po);
  po.arch = SSD_ARCH_SM90A;
  if (!ok(ssd_forward_prepare(rt, &f, &po, nullptr), "ssd_forward_prepare")) return 1;
  for (int mode : {SSD_MODE_DETERMINISTIC, SSD_MODE_FAST}) {
    a.mode = mode;
    po.mode = mode;
    if (!ok(ssd_backward_prepare(rt, &a, &po, nullptr), "ssd_backward_prepare")) return 1;
    if (!ok(ssd_backward(rt, &a, bwd_ws, bwd_bytes, stream), "ssd_backward")) return 1;
  }
  if (!ok(ssd_forward(rt, &f, nullptr, stream), "ssd_forward")) return 1;

  auto per_call = [&](auto&& call) {
    const double t0 = thread_cpu_us();
    for (int i = 0; i < calls; ++i)
      if (!call()) std::exit(1);
    return (thread_cpu_us() - t0) / calls;
  };
  const double fwd = per_call([&] { return ok(ssd_forward(rt, &f, nullptr, stream), "ssd_forward"); });
  double bwd[2];
  for (int mode : {SSD_MODE_DETERMINISTIC, SSD_MODE_FAST}) {
    a.mode = mode;
    bwd[mode] = per_call([&] { return ok(ssd_backward(rt, &a, bwd_ws, bwd_bytes, stream), "ssd_backward"); });
  }
  std::printf("library host path (no-op driver, %d calls each; the driver's own cost not included):\n", calls);
  std::printf("  ssd_forward                 %6.2f us of CPU per call\n", fwd);
  std::printf("  ssd_backward deterministic  %6.2f us of CPU per call\n", bwd[0]);
  std::printf("  ssd_backward fast           %6.2f us of CPU per call\n", bwd[1]);
  ssd_runtime_destroy(rt);
  return 0;
}
