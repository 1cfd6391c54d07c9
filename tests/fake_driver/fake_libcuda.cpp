// A fake CUDA driver (built as libcuda.so.1 into the build tree, found through LD_LIBRARY_PATH only
// by the launch-graph test) that records what the library asks of it, so the launch graphs' state
// machine runs on machines without a GPU: which launches went eagerly, which graphs were built,
// which nodes were updated, and in which order, with the parameter bytes each launch carried.
// Every other entry point succeeds and does nothing. fake_cuda_state() hands the test the record
// and the switches (a stream reported as capturing, graph calls made to fail).
#include "fake_driver.h"

#include <cstring>
#include <mutex>

namespace {
FakeCudaState g_state;
std::recursive_mutex g_mutex;  // the record, from several threads (the test's two-thread case)

void record(FakeCudaState::Op op, CUstream stream, CUfunction f, void** params, uintptr_t node = 0) {
  FakeCudaState::Event e;
  e.op = op;
  e.stream = stream;
  e.function = f;
  e.node = node;
  if (params) std::memcpy(&e.param, params[0], sizeof e.param);
  g_state.events.push_back(e);
}
void graph_call() {
  if (g_state.mode != CU_STREAM_CAPTURE_MODE_RELAXED) ++g_state.graph_calls_not_relaxed;
}
}  // namespace

extern "C" {
FakeCudaState* fake_cuda_state() { return &g_state; }

static CUresult ok_any() { return CUDA_SUCCESS; }
static CUresult s_ctx(CUcontext* c) { *c = reinterpret_cast<CUcontext>(0x1); return CUDA_SUCCESS; }
static CUresult s_count(int* n) { *n = 1; return CUDA_SUCCESS; }
static CUresult s_errname(CUresult, const char** s) { *s = "FAKE"; return CUDA_SUCCESS; }
// Every kernel takes one 8-byte parameter (the tests pass a uint64_t).
static CUresult s_paraminfo(CUfunction, size_t i, size_t* off, size_t* size) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (i > g_state.max_param_index) g_state.max_param_index = i;
  if (i > 0) return CUDA_ERROR_INVALID_VALUE;
  *off = 0;
  *size = sizeof(uint64_t);
  return g_state.param_info_fails ? CUDA_ERROR_NOT_SUPPORTED : CUDA_SUCCESS;
}
static CUresult s_launch(CUfunction f, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                         CUstream s, void** params, void**) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  record(FakeCudaState::Op::Launch, s, f, params);
  return CUDA_SUCCESS;
}
// A map made of its arguments (base, rank, the dims and boxes), so equal arguments give equal maps.
static CUresult s_encode_map(CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank, void* base,
                             const cuuint64_t* dims, const cuuint64_t*, const cuuint32_t* box, const cuuint32_t*,
                             CUtensorMapInterleave, CUtensorMapSwizzle swizzle, CUtensorMapL2promotion,
                             CUtensorMapFloatOOBfill) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  ++g_state.tensor_maps_encoded;
  uint64_t words[16] = {reinterpret_cast<uintptr_t>(base), rank, uint64_t(type), uint64_t(swizzle)};
  for (cuuint32_t i = 0; i < rank && i < 5; ++i) {
    words[4 + i] = dims[i];
    words[9 + i] = box[i];
  }
  std::memcpy(map, words, sizeof words);
  return CUDA_SUCCESS;
}
static CUresult s_is_capturing(CUstream s, CUstreamCaptureStatus* st) {
  *st = s == g_state.capturing_stream && s ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}
static CUresult s_graph_create(CUgraph* g, unsigned) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  graph_call();
  *g = reinterpret_cast<CUgraph>(uintptr_t(++g_state.graphs_created));
  return CUDA_SUCCESS;
}
static CUresult s_add_node(CUgraphNode* n, CUgraph g, const CUgraphNode* deps, size_t ndeps,
                           const CUDA_KERNEL_NODE_PARAMS* p) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  graph_call();
  g_state.node_dependencies.push_back(ndeps ? uintptr_t(deps[0]) : 0);
  std::vector<uintptr_t> all;
  for (size_t i = 0; i < ndeps; ++i) all.push_back(uintptr_t(deps[i]));
  g_state.node_dependency_lists.push_back(all);
  *n = reinterpret_cast<CUgraphNode>(uintptr_t(g_state.node_dependencies.size()));
  record(FakeCudaState::Op::AddNode, nullptr, p->func, p->kernelParams, uintptr_t(*n));
  g_state.graph_params[uintptr_t(g)][uintptr_t(*n)] = g_state.events.back().param;
  return CUDA_SUCCESS;
}
static CUresult s_instantiate(CUgraphExec* e, CUgraph g, unsigned long long) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  graph_call();
  if (g_state.instantiate_fails) return CUDA_ERROR_OUT_OF_MEMORY;
  ++g_state.instantiated;
  *e = reinterpret_cast<CUgraphExec>(uintptr_t(g) + 0x1000);
  g_state.exec_params[uintptr_t(*e)] = g_state.graph_params[uintptr_t(g)];
  return CUDA_SUCCESS;
}
static CUresult s_set_params(CUgraphExec e, CUgraphNode n, const CUDA_KERNEL_NODE_PARAMS* p) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  graph_call();
  record(FakeCudaState::Op::SetParams, nullptr, p->func, p->kernelParams, uintptr_t(n));
  g_state.exec_params[uintptr_t(e)][uintptr_t(n)] = g_state.events.back().param;
  return CUDA_SUCCESS;
}
static CUresult s_graph_launch(CUgraphExec e, CUstream s) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  record(FakeCudaState::Op::GraphLaunch, s, nullptr, nullptr, uintptr_t(e));  // node: the exec launched
  for (const auto& [node, param] : g_state.exec_params[uintptr_t(e)]) g_state.events.back().exec_params.push_back(param);
  return CUDA_SUCCESS;
}
static CUresult s_exec_destroy(CUgraphExec) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  graph_call();
  ++g_state.execs_destroyed;
  return CUDA_SUCCESS;
}
// One mode for all threads (the test's graph calls in the two-thread case hold the library's
// per-sequence lock, so they do not interleave).
static CUresult s_exchange_mode(CUstreamCaptureMode* m) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  ++g_state.mode_exchanges;
  const CUstreamCaptureMode previous = g_state.mode;
  g_state.mode = *m;
  *m = previous;
  return CUDA_SUCCESS;
}
static CUresult s_memset(CUdeviceptr, size_t, unsigned, size_t, size_t, CUstream s) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  record(FakeCudaState::Op::Memset, s, nullptr, nullptr);
  return CUDA_SUCCESS;
}

CUresult cuGetProcAddress_v2(const char* sym, void** pfn, int, cuuint64_t, CUdriverProcAddressQueryResult* q) {
  if (q) *q = CU_GET_PROC_ADDRESS_SUCCESS;
  struct {
    const char* n;
    void* f;
  } t[] = {{"cuCtxGetCurrent", (void*)s_ctx},
           {"cuDeviceGetCount", (void*)s_count},
           {"cuGetErrorName", (void*)s_errname},
           {"cuGetErrorString", (void*)s_errname},
           {"cuFuncGetParamInfo", (void*)s_paraminfo},
           {"cuLaunchKernel", (void*)s_launch},
           {"cuStreamIsCapturing", (void*)s_is_capturing},
           {"cuGraphCreate", (void*)s_graph_create},
           {"cuGraphAddKernelNode", (void*)s_add_node},
           {"cuGraphInstantiateWithFlags", (void*)s_instantiate},
           {"cuGraphExecKernelNodeSetParams", (void*)s_set_params},
           {"cuGraphLaunch", (void*)s_graph_launch},
           {"cuGraphExecDestroy", (void*)s_exec_destroy},
           {"cuThreadExchangeStreamCaptureMode", (void*)s_exchange_mode},
           {"cuMemsetD2D32Async", (void*)s_memset},
           {"cuTensorMapEncodeTiled", (void*)s_encode_map}};
  for (auto& e : t)
    if (!std::strcmp(sym, e.n)) {
      *pfn = e.f;
      return CUDA_SUCCESS;
    }
  *pfn = (void*)ok_any;
  return CUDA_SUCCESS;
}
}
