#include "runtime/launch_graph.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "common/log.h"
#include "runtime/runtime.h"

namespace ssd {

namespace {

thread_local CallRecording* t_recording = nullptr;
// The active recording's launches and parameter bytes (one active recording per thread).
thread_local std::vector<RecordedLaunch> t_launches;
thread_local std::vector<unsigned char> t_arena;

// CU_STREAM_PER_THREAD names another stream on each thread: in a key, the thread is part of it.
uint64_t stream_thread_word(CUstream stream) {
  return stream == CU_STREAM_PER_THREAD ? std::hash<std::thread::id>{}(std::this_thread::get_id()) : 0;
}

// Erases the entry of `m` (values with a last_use) used least recently.
template <class Map, class LastUse>
void erase_least_recent(Map& m, LastUse last_use) {
  m.erase(std::min_element(m.begin(), m.end(), [&](const auto& a, const auto& b) {
    return last_use(a.second) < last_use(b.second);
  }));
}

// The runtime's graphs when a call on `stream` is recorded: graphs on, the driver loaded, and the
// stream not under capture (the caller's graph takes the launches as they come); else null.
LaunchGraphs* recording_graphs(ssd_runtime& rt, CUstream stream) {
  if (!rt.graphs || !rt.graphs->enabled()) return nullptr;
  auto d = cuda::driver();
  if (!d.ok()) return nullptr;
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  if (d.value()->cuStreamIsCapturing(stream, &capture) != CUDA_SUCCESS || capture != CU_STREAM_CAPTURE_STATUS_NONE)
    return nullptr;
  return rt.graphs.get();
}

// cuLaunchKernel's / a kernel node's parameter pointers into a launch's copied bytes.
std::vector<void*> param_pointers(const RecordedLaunch& l) {
  std::vector<void*> ptrs(l.kernel->param_offsets.size());
  unsigned char* base = const_cast<unsigned char*>(l.bytes);
  for (size_t i = 0; i < ptrs.size(); ++i) ptrs[i] = base + l.kernel->param_offsets[i];
  return ptrs;
}

// The library's graph calls (create, instantiate, update, destroy) in the relaxed capture mode:
// another thread's capture in the global mode must neither refuse them nor be invalidated by them
// (they touch no captured stream).
class RelaxedCaptureMode {
 public:
  explicit RelaxedCaptureMode(const cuda::Driver& d) : d_(d) {
    exchanged_ = d_.cuThreadExchangeStreamCaptureMode(&mode_) == CUDA_SUCCESS;
  }
  ~RelaxedCaptureMode() {
    if (exchanged_) d_.cuThreadExchangeStreamCaptureMode(&mode_);
  }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  const cuda::Driver& d_;
  CUstreamCaptureMode mode_ = CU_STREAM_CAPTURE_MODE_RELAXED;
  bool exchanged_ = false;
};

// Recorded launches enqueued one by one, in order, through launch_kernel (no recording is active
// on this thread when they are: finish() and flush() end it first).
Status launch_eagerly(const std::vector<RecordedLaunch>& launches, CUstream stream) {
  for (const RecordedLaunch& l : launches) {
    std::vector<void*> ptrs = param_pointers(l);
    SSD_RETURN_IF_ERROR(launch_kernel(*l.kernel, l.grid[0], l.grid[1], l.grid[2], ptrs.data(), stream));
  }
  return Status::Ok();
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
  // Calls of a sequence that failed to instantiate or update go eagerly for this many sightings,
  // then try again (an out-of-memory or a refused call need not last).
  static constexpr int kRetryAfter = 256;

  // One instantiation of the sequence, its nodes' parameters those of the call that last set them.
  struct Exec {
    CUgraph graph = nullptr;
    CUgraphExec exec = nullptr;
    std::vector<CUgraphNode> nodes;                 // in launch order
    std::vector<std::vector<unsigned char>> bytes;  // each node's parameters as last set
    uint64_t version = 0;   // Entry::versions when its parameters were last set: unique in the entry
    uint64_t last_use = 0;  // Entry::clock

    void destroy(const cuda::Driver& d) {
      if (!exec && !graph) return;
      RelaxedCaptureMode relaxed(d);
      if (exec) d.cuGraphExecDestroy(exec);  // a replay in flight completes first (CUDA's guarantee)
      if (graph) d.cuGraphDestroy(graph);
      exec = nullptr;
      graph = nullptr;
      nodes.clear();
      bytes.clear();
    }

    // One kernel node per launch. Within a segment, a launch with `after` = kAfterAll depends on every
    // earlier node of its segment: edges to the ones that have no dependent yet (a chain where every
    // launch is so); otherwise on the launches its mask names. A launch that so depends on nothing
    // follows the whole of segment `segment_after` (edges to that segment's nodes without a dependent
    // in it; -2: of every earlier segment) and launch `also_after`. Segments are recorded one after
    // another, so a segment's launches are contiguous.
    Status instantiate(const cuda::Driver& d, const std::vector<RecordedLaunch>& launches) {
      RelaxedCaptureMode relaxed(d);
      SSD_RETURN_IF_ERROR(cuda::check(d.cuGraphCreate(&graph, 0), "cuGraphCreate"));
      nodes.assign(launches.size(), nullptr);
      std::vector<bool> has_dependent(launches.size(), false);  // within its segment
      std::vector<size_t> segment_start(1, 0), segment_end(1, 0);  // [start, end) per segment
      for (size_t i = 0; i < launches.size(); ++i) {
        const size_t seg = size_t(launches[i].segment);
        if (seg >= segment_start.size()) {
          segment_start.resize(seg + 1, i);
          segment_end.resize(seg + 1, i);
        }
        const size_t first = segment_start[seg];
        std::vector<CUgraphNode> deps;
        for (size_t j = first; j < i; ++j) {
          const size_t k = j - first;
          const bool named = launches[i].after == RecordedLaunch::kAfterAll ? !has_dependent[j]
                                                                            : k < 64 && (launches[i].after >> k & 1);
          if (!named) continue;
          deps.push_back(nodes[j]);
          has_dependent[j] = true;
        }
        const bool root = deps.empty();  // follows nothing in its segment
        const int32_t prior = launches[i].segment_after;
        if (root && prior != -1)
          for (size_t sg = 0; sg < seg; ++sg) {
            if (prior >= 0 && sg != size_t(prior)) continue;  // -2 (kAfterEverySegment): every one
            for (size_t j = segment_start[sg]; j < segment_end[sg]; ++j)
              if (!has_dependent[j]) deps.push_back(nodes[j]);
          }
        const int32_t also = launches[i].also_after;
        if (root && also >= 0 && size_t(also) < first &&
            std::find(deps.begin(), deps.end(), nodes[size_t(also)]) == deps.end())
          deps.push_back(nodes[size_t(also)]);
        segment_end[seg] = i + 1;
        std::vector<void*> ptrs = param_pointers(launches[i]);
        const CUDA_KERNEL_NODE_PARAMS p = node_params(launches[i], ptrs.data());
        SSD_RETURN_IF_ERROR(cuda::check(
            d.cuGraphAddKernelNode(&nodes[i], graph, deps.empty() ? nullptr : deps.data(), deps.size(), &p),
            "cuGraphAddKernelNode"));
      }
      SSD_RETURN_IF_ERROR(cuda::check(d.cuGraphInstantiateWithFlags(&exec, graph, 0), "cuGraphInstantiateWithFlags"));
      bytes.clear();
      for (const RecordedLaunch& l : launches) bytes.emplace_back(l.bytes, l.bytes + l.kernel->param_bytes);
      return Status::Ok();
    }

    // The nodes whose parameters differ from the last replay's; counts them into `updated`. The
    // capture mode is exchanged only if some node differs (a replay as is makes no graph call).
    Status update(const cuda::Driver& d, const std::vector<RecordedLaunch>& launches, uint64_t& updated) {
      std::optional<RelaxedCaptureMode> relaxed;
      for (size_t i = 0; i < launches.size(); ++i) {
        const size_t n = launches[i].kernel->param_bytes;  // the same kernel as at instantiation (the key)
        if (bytes[i].size() == n && std::memcmp(bytes[i].data(), launches[i].bytes, n) == 0) continue;
        if (!relaxed) relaxed.emplace(d);
        std::vector<void*> ptrs = param_pointers(launches[i]);
        const CUDA_KERNEL_NODE_PARAMS p = node_params(launches[i], ptrs.data());
        SSD_RETURN_IF_ERROR(cuda::check(d.cuGraphExecKernelNodeSetParams(exec, nodes[i], &p),
                                        "cuGraphExecKernelNodeSetParams"));
        bytes[i].assign(launches[i].bytes, launches[i].bytes + n);
        ++updated;
      }
      return Status::Ok();
    }
  };

  std::mutex mutex;        // the execs, their nodes and bytes: held from update to launch
  uint64_t last_use = 0;   // LaunchGraphs::clock_ (under the map's lock)
  int eager_left = 1;      // sightings still launched eagerly: 1 at first (instantiate on the second)
  bool warned = false;     // a failure was logged for this sequence
  // At most kMaxExecsPerSequence: a call that repeats (remembered) but whose exec another call has
  // set since gets one of its own while there is room; any other call sets the least recently used.
  std::vector<Exec> execs;
  uint64_t versions = 0;  // the last Exec::version given
  uint64_t clock = 0;     // Exec::last_use

  ~Entry() {
    if (execs.empty()) return;
    auto d = cuda::driver();
    if (d.ok()) destroy(*d.value());
  }

  void destroy(const cuda::Driver& d) {
    for (Exec& x : execs) x.destroy(d);
    execs.clear();
  }

  // The exec whose parameters are those version `v` set, or null.
  Exec* with_version(uint64_t v) {
    for (Exec& x : execs)
      if (x.version == v) return &x;
    return nullptr;
  }

  Exec* least_recent() {
    auto oldest = std::min_element(execs.begin(), execs.end(),
                                   [](const Exec& a, const Exec& b) { return a.last_use < b.last_use; });
    return oldest == execs.end() ? nullptr : &*oldest;
  }
};

LaunchGraphs::LaunchGraphs(bool enabled) : enabled_(enabled) {}

LaunchGraphs::~LaunchGraphs() = default;  // each Entry destroys its graph

LaunchGraphs::Counters LaunchGraphs::counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counters_;
}

bool LaunchGraphs::replay_same_call(const CallKey& call, CUstream stream, Status* out) {
  auto d = cuda::driver();
  if (!d.ok()) return false;
  std::shared_ptr<Entry> entry;
  uint64_t version = 0;
  {
    std::lock_guard<std::mutex> map_lock(mutex_);
    auto it = calls_.find(call);
    if (it == calls_.end() || it->second.stream != stream) return false;  // a sequence is per stream
    entry = it->second.entry.lock();
    if (!entry) {
      calls_.erase(it);
      return false;
    }
    version = it->second.version;
    it->second.last_use = ++clock_;
    entry->last_use = clock_;
  }
  Entry& e = *entry;
  std::unique_lock<std::mutex> lock(e.mutex);
  // Another call's parameters since (an update), or the graphs destroyed after a failure: not as is.
  Entry::Exec* x = e.eager_left > 0 ? nullptr : e.with_version(version);
  if (!x || !x->exec) return false;
  x->last_use = ++e.clock;
  *out = cuda::check(d.value()->cuGraphLaunch(x->exec, stream), "cuGraphLaunch");
  lock.unlock();
  std::lock_guard<std::mutex> map_lock(mutex_);
  ++counters_.replays;
  ++counters_.same_call_replays;
  return true;
}

Status LaunchGraphs::launch(const std::vector<RecordedLaunch>& launches, CUstream stream, const CallKey* call) {
  if (launches.empty()) return Status::Ok();
  const cuda::Driver* d = nullptr;
  SSD_ASSIGN_OR_RETURN(d, cuda::driver());
  // The key in a thread-local buffer that keeps its capacity (copied into the map only when new).
  thread_local Key key;
  constexpr size_t kPerLaunch = 9;
  key.resize(3 + kPerLaunch * launches.size());
  uint64_t* k = key.data();
  *k++ = reinterpret_cast<uintptr_t>(stream);
  *k++ = stream_thread_word(stream);
  *k++ = reinterpret_cast<uintptr_t>(launches[0].kernel->context);
  for (const RecordedLaunch& l : launches) {
    *k++ = reinterpret_cast<uintptr_t>(l.kernel->function);
    *k++ = l.grid[0];
    *k++ = l.grid[1];
    *k++ = l.grid[2];
    *k++ = uint64_t(l.kernel->built->unit.block_threads);
    *k++ = uint64_t(l.kernel->built->unit.dynamic_shared_bytes);
    *k++ = l.after;
    *k++ = uint64_t(uint32_t(l.segment)) << 32 | uint32_t(l.segment_after);
    *k++ = uint64_t(uint32_t(l.also_after));
  }

  std::shared_ptr<Entry> entry;
  bool remembered = false;  // the call replayed this sequence before: `version`, the parameters it left
  uint64_t version = 0;
  {
    std::lock_guard<std::mutex> map_lock(mutex_);
    auto it = entries_.find(key);
    if (it == entries_.end()) {
      if (entries_.size() >= kMaxSequences)  // its graph goes with the last call holding it
        erase_least_recent(entries_, [](const std::shared_ptr<Entry>& e) { return e->last_use; });
      it = entries_.emplace(key, std::make_shared<Entry>()).first;
    }
    entry = it->second;
    entry->last_use = ++clock_;
    if (call && !call->empty()) {
      auto c = calls_.find(*call);
      if (c != calls_.end() && c->second.entry.lock() == entry) {
        remembered = true;
        version = c->second.version;
      }
    }
  }

  Entry& e = *entry;
  std::unique_lock<std::mutex> lock(e.mutex);
  if (e.eager_left > 0) {
    // First sighting (or a failed sequence's pause): eager. A sequence that never repeats (a new
    // shape each call) never pays for an instantiation.
    --e.eager_left;
    lock.unlock();
    {
      std::lock_guard<std::mutex> map_lock(mutex_);
      ++counters_.eager;
    }
    return launch_eagerly(launches, stream);
  }
  // The exec to set: the call's own if it still holds its parameters; a new one on the second
  // sighting, or for a call that repeats while its exec was set by another since and there is room
  // (callers that take turns, e.g. the layers of a model, each keep a graph); else the least
  // recently used (a call seen for the first time, whose tensors may never repeat, instantiates
  // nothing while the sequence has a graph).
  Entry::Exec* x = remembered ? e.with_version(version) : nullptr;
  bool fresh = !x && (e.execs.empty() || (remembered && e.execs.size() < kMaxExecsPerSequence));
  if (fresh) {
    x = &e.execs.emplace_back();
  } else if (!x) {
    x = e.least_recent();
  }
  uint64_t updated = 0;
  Status s = fresh ? x->instantiate(*d, launches) : x->update(*d, launches, updated);
  bool fell_back = false;  // a further graph did not instantiate: the call set another one instead
  std::string why;
  if (!s.ok() && fresh && e.execs.size() > 1) {
    // The sequence's other graphs stay (an out-of-memory need not cost them): drop the new one and
    // set the least recently used of the others, as a call past the bound does.
    fell_back = true;
    why = s.detail;
    x->destroy(*d);
    e.execs.pop_back();
    x = e.least_recent();
    fresh = false;
    s = x->update(*d, launches, updated);
  }
  if (s.ok()) {
    if (fresh || updated) x->version = ++e.versions;
    x->last_use = ++e.clock;
    // Under the sequence's lock: the parameters just set are the ones this replay runs with.
    s = cuda::check(d->cuGraphLaunch(x->exec, stream), "cuGraphLaunch");
    const uint64_t set_version = x->version;
    const bool warn = fell_back && !e.warned;
    e.warned = e.warned || fell_back;
    lock.unlock();
    if (warn)  // outside the sequence's lock: a log sink may call the library
      log_warning(fmt::format("launch graphs: {}; this call sequence's calls share the graphs it has", why));
    std::lock_guard<std::mutex> map_lock(mutex_);
    counters_.instantiated += fresh ? 1 : 0;
    counters_.nodes_updated += updated;
    ++counters_.replays;
    if (s.ok() && call && !call->empty()) {
      auto it = calls_.find(*call);
      if (it == calls_.end()) {
        if (calls_.size() >= kMaxCalls) erase_least_recent(calls_, [](const RememberedCall& c) { return c.last_use; });
        it = calls_.emplace(*call, RememberedCall{}).first;
      }
      it->second.entry = entry;
      it->second.stream = stream;
      it->second.version = set_version;
      it->second.last_use = ++clock_;
    }
    return s;
  }
  const bool warn = !e.warned;
  e.warned = true;
  e.destroy(*d);
  e.eager_left = Entry::kRetryAfter;
  lock.unlock();
  if (warn)  // outside the sequence's lock: a log sink may call the library
    log_warning(fmt::format("launch graphs: {}; launching this call sequence eagerly for its next {} calls",
                            s.detail, Entry::kRetryAfter));
  {
    std::lock_guard<std::mutex> map_lock(mutex_);
    ++counters_.eager;
  }
  return launch_eagerly(launches, stream);
}

CallRecording::CallRecording(ssd_runtime& rt, CUstream stream, bool record) : launches_(t_launches), arena_(t_arena) {
  if (t_recording) {
    // A call inside a call: the outer one's launches go first, eagerly, and neither records.
    outer_flush_ = t_recording->flush();
    return;
  }
  if (!record) return;
  graphs_ = recording_graphs(rt, stream);
  if (!graphs_) return;
  stream_ = stream;
  active_ = true;
  t_recording = this;
  launches_.clear();  // RecordedLaunch owns nothing: the vectors keep their capacity
  arena_.clear();
}

CallRecording::~CallRecording() {
  if (t_recording == this) t_recording = nullptr;
}

Status CallRecording::finish(Status s) {
  if (!outer_flush_.ok() && s.ok()) s = outer_flush_;
  if (!active_) return s;
  active_ = false;
  if (t_recording == this) t_recording = nullptr;
  if (!s.ok()) return s;
  return graphs_->launch(handed_over(), stream_, &call_);
}

bool CallRecording::replay_same_call(ssd_runtime& rt, CUstream stream, const CallKey& call, Status* out) {
  // Only where the call would be recorded (the constructor's conditions).
  if (t_recording) return false;
  LaunchGraphs* graphs = recording_graphs(rt, stream);
  return graphs && graphs->replay_same_call(call, stream, out);
}

const std::vector<RecordedLaunch>& CallRecording::handed_over() {
  for (RecordedLaunch& l : launches_) l.bytes = arena_.data() + l.bytes_at;
  return launches_;
}

Status CallRecording::flush() {
  active_ = false;
  if (t_recording == this) t_recording = nullptr;
  Status s = launch_eagerly(handed_over(), stream_);
  launches_.clear();
  arena_.clear();
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
  // Parameter blocks start 16-byte aligned in the arena, as a vector's allocation was: the driver
  // copies each parameter's bytes from its pointer, so their device alignment (a TensorMap's 64 or
  // 128 bytes) does not apply here, and nothing on the host reads them as their types.
  l.bytes_at = (r->arena_.size() + 15) & ~size_t(15);
  r->arena_.resize(l.bytes_at + kernel.param_bytes);  // new elements are zeroed: the gaps between parameters too
  unsigned char* dst = r->arena_.data() + l.bytes_at;
  for (size_t i = 0; i < kernel.param_offsets.size(); ++i)
    std::memcpy(dst + kernel.param_offsets[i], params[i], kernel.param_sizes[i]);
  // A mask names earlier launches of the segment only (bits of launches not yet recorded, or past
  // 64, are dropped).
  const size_t n = r->launches_.size() - r->segment_start_;
  l.after = r->next_after_ == RecordedLaunch::kAfterAll ? RecordedLaunch::kAfterAll
            : n >= 64                                    ? RecordedLaunch::kAfterAll
                                                         : r->next_after_ & ((uint64_t(1) << n) - 1);
  l.segment = r->segment_;
  l.segment_after = r->segment_after_;
  l.also_after = r->also_after_;
  r->next_after_ = RecordedLaunch::kAfterAll;
  r->launches_.push_back(std::move(l));
  *out = Status::Ok();
  return true;
}

int CallRecording::recorded_launches() {
  CallRecording* r = t_recording;
  return r && r->active_ ? int(r->launches_.size() - r->segment_start_) : -1;
}

int CallRecording::begin_segment(int after_segment, int also_segment, int also_index) {
  CallRecording* r = t_recording;
  if (!r || !r->active_) return -1;
  // An empty segment is reused (its number names no launch another segment could follow).
  if (r->launches_.size() > r->segment_start_) {
    ++r->segment_;
    r->segment_start_ = r->launches_.size();
    r->segment_starts_.push_back(r->segment_start_);
  }
  r->also_after_ = -1;
  if (also_segment >= 0 && also_segment < r->segment_ && also_index >= 0) {
    const size_t at = r->segment_starts_[size_t(also_segment)] + size_t(also_index);
    const size_t end = size_t(also_segment) + 1 < r->segment_starts_.size() ? r->segment_starts_[size_t(also_segment) + 1]
                                                                           : r->launches_.size();
    if (at < end) r->also_after_ = int32_t(at);
  }
  r->segment_after_ = after_segment == kAfterEverySegment                ? kAfterEverySegment
                      : after_segment >= 0 && after_segment < r->segment_ ? after_segment
                                                                          : -1;
  r->next_after_ = RecordedLaunch::kAfterAll;
  return r->segment_;
}

void CallRecording::next_launch_after(uint64_t mask) {
  CallRecording* r = t_recording;
  if (r && r->active_) r->next_after_ = mask;
}

CallKey call_key(uint64_t op, const void* args, size_t args_bytes, const void* workspace, size_t workspace_bytes,
                 CUstream stream, int mode) {
  auto d = cuda::driver();
  CUcontext ctx = nullptr;
  if (!d.ok() || d.value()->cuCtxGetCurrent(&ctx) != CUDA_SUCCESS) return {};
  CallKey key(7 + (args_bytes + 7) / 8, 0);  // zeroed: the struct's last word padded with zeros
  key[0] = op;
  key[1] = reinterpret_cast<uintptr_t>(stream);
  key[2] = stream_thread_word(stream);
  key[3] = reinterpret_cast<uintptr_t>(ctx);
  key[4] = uint64_t(uint32_t(mode));
  key[5] = reinterpret_cast<uintptr_t>(workspace);
  key[6] = workspace_bytes;
  std::memcpy(key.data() + 7, args, args_bytes);
  return key;
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
