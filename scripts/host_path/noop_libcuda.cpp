// A no-op CUDA driver (built as libcuda.so.1 into a temporary directory by
// scripts/host-path-bench.sh, never installed) for measuring the library's own host path on a
// machine without a GPU: every entry point succeeds and does nothing; the few with outputs give
// fixed values (one sm_90 device, one context, one module, one function, one allocation). What
// the library does around the driver — validation, plans, kernel lookups, parameter blocks — runs
// for real.
#include <cuda.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

// With SSD_NOOP_DRIVER_COUNTS set, every entry point the library resolves counts its calls and the
// counts are printed at exit (the driver calls a host path makes per call, for a GPU host where each
// costs more than here).
namespace {
constexpr int kMaxCounted = 512;
const char* g_names[kMaxCounted];
std::atomic<unsigned long long> g_calls[kMaxCounted];
std::atomic<int> g_used{0};
void* g_targets[kMaxCounted];  // the entry point each counter forwards to

struct PrintCounts {
  ~PrintCounts() {
    if (!std::getenv("SSD_NOOP_DRIVER_COUNTS")) return;
    for (int i = 0; i < g_used.load(); ++i)
      if (g_calls[i].load()) std::fprintf(stderr, "noop driver: %-40s %llu calls\n", g_names[i], g_calls[i].load());
  }
} g_print_counts;

// Counter I forwards its arguments (up to 12 words in registers and on the stack, as the x86-64
// convention passes them) to its target.
using Fn = CUresult (*)(void*, void*, void*, void*, void*, void*, void*, void*, void*, void*, void*, void*);
template <int I>
CUresult counted(void* a, void* b, void* c, void* d, void* e, void* f, void* g, void* h, void* i, void* j, void* k,
                 void* l) {
  g_calls[I].fetch_add(1, std::memory_order_relaxed);
  return reinterpret_cast<Fn>(g_targets[I])(a, b, c, d, e, f, g, h, i, j, k, l);
}
template <int... I>
void* const* counters_of(std::integer_sequence<int, I...>) {
  static void* const table[] = {reinterpret_cast<void*>(&counted<I>)...};
  return table;
}
void* const* const g_counters = counters_of(std::make_integer_sequence<int, kMaxCounted>{});

void* maybe_counted(const char* sym, void* target) {
  if (!std::getenv("SSD_NOOP_DRIVER_COUNTS")) return target;
  const int i = g_used.fetch_add(1);
  if (i >= kMaxCounted) return target;
  g_names[i] = strdup(sym);
  g_targets[i] = target;
  return g_counters[i];
}
}  // namespace

extern "C" {
// Every entry point without an output: called through its own signature, it ignores its arguments
// and returns CUDA_SUCCESS in the return register (the x86-64 and AArch64 calling conventions).
static CUresult ok_any() { return CUDA_SUCCESS; }
static CUresult s_ctx(CUcontext* c) { *c = reinterpret_cast<CUcontext>(0x1); return CUDA_SUCCESS; }
static CUresult s_count(int* n) { *n = 1; return CUDA_SUCCESS; }
static CUresult s_devget(CUdevice* d, int) { *d = 0; return CUDA_SUCCESS; }
static CUresult s_retain(CUcontext* c, CUdevice) { *c = reinterpret_cast<CUcontext>(0x1); return CUDA_SUCCESS; }
static CUresult s_ctxdev(CUdevice* d) { *d = 0; return CUDA_SUCCESS; }
static CUresult s_attr(int* v, CUdevice_attribute a, CUdevice) {
  *v = a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR ? 9 : a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR ? 0 : 65536;
  return CUDA_SUCCESS;
}
static CUresult s_modload(CUmodule* m, const void*) { *m = reinterpret_cast<CUmodule>(0x2); return CUDA_SUCCESS; }
static CUresult s_getfn(CUfunction* f, CUmodule, const char*) { *f = reinterpret_cast<CUfunction>(0x3); return CUDA_SUCCESS; }
static CUresult s_errname(CUresult, const char** s) { *s = "STUB"; return CUDA_SUCCESS; }
static CUresult s_alloc(CUdeviceptr* p, size_t, CUstream) { *p = 0x10000000; return CUDA_SUCCESS; }
static CUresult s_version(int* v) { *v = 13000; return CUDA_SUCCESS; }
static CUresult s_graph(CUgraph* g, unsigned) { *g = reinterpret_cast<CUgraph>(0x4); return CUDA_SUCCESS; }
static CUresult s_node(CUgraphNode* n, CUgraph, const CUgraphNode*, size_t, const void*) {
  *n = reinterpret_cast<CUgraphNode>(0x5);
  return CUDA_SUCCESS;
}
static CUresult s_inst(CUgraphExec* e, CUgraph, unsigned long long) {
  *e = reinterpret_cast<CUgraphExec>(0x6);
  return CUDA_SUCCESS;
}
// One 128-byte parameter (no larger than any parameter block), so the launch graphs record.
static CUresult s_paraminfo(CUfunction, size_t i, size_t* off, size_t* size) {
  if (i > 0) return CUDA_ERROR_INVALID_VALUE;
  *off = 0;
  *size = 128;
  return CUDA_SUCCESS;
}
CUresult cuGetProcAddress_v2(const char* sym, void** pfn, int, cuuint64_t, CUdriverProcAddressQueryResult* q) {
  if (q) *q = CU_GET_PROC_ADDRESS_SUCCESS;
  struct { const char* n; void* f; } t[] = {
      {"cuCtxGetCurrent", (void*)s_ctx}, {"cuDeviceGetCount", (void*)s_count}, {"cuDeviceGet", (void*)s_devget},
      {"cuDevicePrimaryCtxRetain", (void*)s_retain}, {"cuCtxGetDevice", (void*)s_ctxdev},
      {"cuDeviceGetAttribute", (void*)s_attr}, {"cuModuleLoadData", (void*)s_modload},
      {"cuModuleGetFunction", (void*)s_getfn}, {"cuGetErrorName", (void*)s_errname}, {"cuGetErrorString", (void*)s_errname},
      {"cuMemAllocAsync", (void*)s_alloc}, {"cuDriverGetVersion", (void*)s_version},
      {"cuFuncGetParamInfo", (void*)s_paraminfo}, {"cuGraphCreate", (void*)s_graph},
      {"cuGraphAddKernelNode", (void*)s_node}, {"cuGraphInstantiateWithFlags", (void*)s_inst}};
  for (auto& e : t)
    if (!std::strcmp(sym, e.n)) { *pfn = maybe_counted(sym, e.f); return CUDA_SUCCESS; }
  *pfn = maybe_counted(sym, (void*)ok_any);
  return CUDA_SUCCESS;
}
}
