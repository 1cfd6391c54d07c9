#include "runtime/launch_graph.h"

#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "common/log.h"
#include "runtime/runtime.h"

namespace ssd {

namespace {

thread_local CallRecording* t_recording = nullptr;

// cuLaunchKernel's / a kernel node's parameter pointers into a launch's copied bytes.
std::vector<void*> param_pointers(const RecordedLaunch& l) {
  std::vector<void*> ptrs(l.kernel->param_offsets.size());
  unsigned char* base = const_cast<unsigned char*>(l.bytes.data());
  for (size_t i = 0; i < ptrs.size(); ++i) ptrs[i] = base + l.kernel->param_offsets[i];
  return ptrs;
}

CUDA_KERNEL_NODE_PARAMS node_params(const RecordedLaunch& l, void** ptrs) {
  CUDA_KERNEL_NODE_PARAMS p{};
  p.func = l.kernel->function;
  p.gridDimX = l.grid[0];
  p.gridDimY = l.grid[1];
  p.gridDimZ = l.grid[2];
  p.blockDimX = unsigned(l.kernel->built->unit.block_threads);
  p.blockDimY = 1;
  p.blockDimZ = 1;
  p.sharedMemBytes = unsigned(l.kernel->built->unit.dynamic_shared_bytes);
  p.kernelParams = ptrs;
  return p;
}

}  // namespace

struct LaunchGraphs::Entry {
  uint64_t last_use = 0;
  bool failed = false;  // instantiation or an update failed once: eager launches from then on
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  std::vector<CUgraphNode> nodes;                 // in launch order
  std::vector<std::vector<unsigned char>> bytes;  // each node's parameters as last set

  void destroy(const cuda::Driver& d) {
    if (exec) d.cuGraphExecDestroy(exec);  // a replay in flight completes first (CUDA's guarantee)
    if (graph) d.cuGraphDestroy(graph);
    exec = nullptr;
    graph = nullptr;
    nodes.clear();
    bytes.clear();
  }

  // One kernel node per launch, each depending on the previous one (the stream's order).
  Status instantiate(const cuda::Driver& d, const std::vector<RecordedLaunch>& launches) {
    SSD_RETURN_IF_ERROR(cuda::check(d.cuGraphCreate(&graph, 0), "cuGraphCreate"));
    nodes.assign(launches.size(), nullptr);
    for (size_t i = 0; i < launches.size(); ++i) {
      std::vector<void*> ptrs = param_pointers(launches[i]);
      const CUDA_KERNEL_NODE_PARAMS p = node_params(launches[i], ptrs.data());
      SSD_RETURN_IF_ERROR(cuda::check(
          d.cuGraphAddKernelNode(&nodes[i], graph, i ? &nodes[i - 1] : nullptr, i ? 1 : 0, &p), "cuGraphAddKernelNode"));
    }
    SSD_RETURN_IF_ERROR(cuda::check(d.cuGraphInstantiateWithFlags(&exec, graph, 0), "cuGraphInstantiateWithFlags"));
    bytes.clear();
    for (const RecordedLaunch& l : launches) bytes.push_back(l.bytes);
    return Status::Ok();
  }

  // The nodes whose parameters differ from the last replay's; counts them into `updated`.
  Status update(const cuda::Driver& d, const std::vector<RecordedLaunch>& launches, uint64_t& updated) {
    for (size_t i = 0; i < launches.size(); ++i) {
      if (bytes[i] == launches[i].bytes) continue;
      std::vector<void*> ptrs = param_pointers(launches[i]);
      const CUDA_KERNEL_NODE_PARAMS p = node_params(launches[i], ptrs.data());
      SSD_RETURN_IF_ERROR(cuda::check(d.cuGraphExecKernelNodeSetParams(exec, nodes[i], &p),
                                      "cuGraphExecKernelNodeSetParams"));
      bytes[i] = launches[i].bytes;
      ++updated;
    }
    return Status::Ok();
  }
};

LaunchGraphs::LaunchGraphs(bool enabled) : enabled_(enabled) {}

LaunchGraphs::~LaunchGraphs() {
  if (entries_.empty()) return;
  auto d = cuda::driver();
  if (!d.ok()) return;
  for (auto& [key, e] : entries_) e->destroy(*d.value());
}

LaunchGraphs::Counters LaunchGraphs::counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counters_;
}

Status launch_eagerly(const std::vector<RecordedLaunch>& launches, CUstream stream) {
  const cuda::Driver* d = nullptr;
  SSD_ASSIGN_OR_RETURN(d, cuda::driver());
  for (const RecordedLaunch& l : launches) {
    std::vector<void*> ptrs = param_pointers(l);
    const GeneratedUnit& u = l.kernel->built->unit;
    SSD_RETURN_IF_ERROR(cuda::check(d->cuLaunchKernel(l.kernel->function, l.grid[0], l.grid[1], l.grid[2],
                                                      unsigned(u.block_threads), 1, 1, unsigned(u.dynamic_shared_bytes),
                                                      stream, ptrs.data(), nullptr),
                                    "cuLaunchKernel"));
  }
  return Status::Ok();
}

Status LaunchGraphs::launch(const std::vector<RecordedLaunch>& launches, CUstream stream) {
  if (launches.empty()) return Status::Ok();
  const cuda::Driver* d = nullptr;
  SSD_ASSIGN_OR_RETURN(d, cuda::driver());
  Key key;
  key.reserve(1 + 6 * launches.size());
  key.push_back(reinterpret_cast<uintptr_t>(launches[0].kernel->context));
  for (const RecordedLaunch& l : launches) {
    key.push_back(reinterpret_cast<uintptr_t>(l.kernel->function));
    key.push_back(l.grid[0]);
    key.push_back(l.grid[1]);
    key.push_back(l.grid[2]);
    key.push_back(uint64_t(l.kernel->built->unit.block_threads));
    key.push_back(uint64_t(l.kernel->built->unit.dynamic_shared_bytes));
  }

  std::unique_lock<std::mutex> lock(mutex_);
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    // First sighting: eager. A sequence that never repeats (a new shape each call) never pays for
    // an instantiation.
    if (entries_.size() >= kMaxSequences) {
      auto oldest = entries_.begin();
      for (auto e = entries_.begin(); e != entries_.end(); ++e)
        if (e->second->last_use < oldest->second->last_use) oldest = e;
      oldest->second->destroy(*d);
      entries_.erase(oldest);
    }
    auto e = std::make_unique<Entry>();
    e->last_use = ++clock_;
    entries_.emplace(std::move(key), std::move(e));
    ++counters_.eager;
    lock.unlock();
    return launch_eagerly(launches, stream);
  }
  Entry& e = *it->second;
  e.last_use = ++clock_;
  if (!e.failed) {
    const bool fresh = !e.exec;  // second sighting: instantiate now
    Status s = fresh ? e.instantiate(*d, launches) : e.update(*d, launches, counters_.nodes_updated);
    if (s.ok()) {
      if (fresh) ++counters_.instantiated;
      // Under the lock: the parameters just set are the ones this replay runs with.
      ++counters_.replays;
      return cuda::check(d->cuGraphLaunch(e.exec, stream), "cuGraphLaunch");
    }
    log_warning(fmt::format("launch graphs: {}; launching this call sequence eagerly from now on", s.detail));
    e.destroy(*d);
    e.failed = true;
  }
  ++counters_.eager;
  lock.unlock();
  return launch_eagerly(launches, stream);
}

CallRecording::CallRecording(ssd_runtime& rt, CUstream stream, bool record) {
  if (!record || !rt.graphs || !rt.graphs->enabled() || t_recording) return;
  auto d = cuda::driver();
  if (!d.ok()) return;
  // A stream under capture: the caller's graph takes the launches as they come.
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  if (d.value()->cuStreamIsCapturing(stream, &capture) != CUDA_SUCCESS || capture != CU_STREAM_CAPTURE_STATUS_NONE)
    return;
  graphs_ = rt.graphs.get();
  stream_ = stream;
  active_ = true;
  t_recording = this;
}

CallRecording::~CallRecording() {
  if (t_recording == this) t_recording = nullptr;
}

Status CallRecording::finish(Status s) {
  if (!active_) return s;
  active_ = false;
  if (t_recording == this) t_recording = nullptr;
  if (!s.ok()) return s;
  return graphs_->launch(launches_, stream_);
}

Status CallRecording::flush() {
  active_ = false;
  if (t_recording == this) t_recording = nullptr;
  Status s = launch_eagerly(launches_, stream_);
  launches_.clear();
  return s;
}

bool CallRecording::record(const ssd_kernel& kernel, unsigned gx, unsigned gy, unsigned gz, void** params,
                           CUstream stream, Status* out) {
  CallRecording* r = t_recording;
  if (!r || !r->active_ || stream != r->stream_) return false;
  if (!kernel.param_layout_known) {
    // Unknown parameter sizes: this and the rest of the call go eagerly, after what was recorded.
    *out = r->flush();
    return !out->ok();
  }
  RecordedLaunch l;
  l.kernel = &kernel;
  l.grid[0] = gx;
  l.grid[1] = gy;
  l.grid[2] = gz;
  l.bytes.assign(kernel.param_bytes, 0);
  for (size_t i = 0; i < kernel.param_offsets.size(); ++i)
    std::memcpy(l.bytes.data() + kernel.param_offsets[i], params[i], kernel.param_sizes[i]);
  r->launches_.push_back(std::move(l));
  *out = Status::Ok();
  return true;
}

Status flush_recorded_launches() {
  if (!t_recording) return Status::Ok();
  return t_recording->flush();
}

bool launch_graphs_from_env() {
  const char* v = std::getenv("SSD_LAUNCH_GRAPHS");
  return !(v && std::strcmp(v, "0") == 0);
}

}  // namespace ssd
