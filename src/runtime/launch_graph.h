// A call's kernel launches through a cached CUDA graph. On the H200 host one cuLaunchKernel costs
// ~3.6 us of CPU, so the backward's 15 launches cost ~55 us; one cuGraphLaunch costs ~1.3 us and
// updating a node's parameters ~0.2-1 us by their bytes (docs/perf.md, "Launch graphs: the host
// path at one graph launch per call"). So while a call runs, its launches are recorded (kernel,
// grid, parameter bytes) instead of enqueued, and at its end:
//   - a launch sequence seen for the first time is launched eagerly, in order, as recorded;
//   - seen before, it is instantiated once as a graph of kernel nodes in the same order (each node
//     depending on the previous one: the stream order), and replayed: the nodes whose parameter
//     bytes changed since the last replay are updated (cuGraphExecKernelNodeSetParams), then one
//     cuGraphLaunch on the call's stream.
// The same kernels, grids and parameters in the same stream order: the same bits as eager launches.
// A sequence is per stream (the key holds it): launches of one graph are serialized by CUDA across
// streams, so sharing one between streams would order calls that eager launches leave independent.
// Not recorded (eager, as before): calls on a stream that is being captured (the caller's graph
// takes the launches), calls whose caller times their stages (events between launches), and a
// call in which anything else is enqueued on the stream (a memset): flush_recorded_launches()
// launches what was recorded and the rest of the call goes eagerly. Off with
// ssd_runtime_options.launch_graphs = 2, or with the default 0 and SSD_LAUNCH_GRAPHS=0, and where
// the driver lacks cuFuncGetParamInfo (before CUDA 12.4: the parameter sizes are unknown).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "common/status.h"
#include "runtime/driver.h"

struct ssd_kernel;
struct ssd_runtime;

namespace ssd {

// One recorded kernel launch: everything cuLaunchKernel takes, the parameter values copied.
struct RecordedLaunch {
  const ssd_kernel* kernel = nullptr;
  unsigned grid[3] = {1, 1, 1};
  std::vector<unsigned char> bytes;  // the parameters at the kernel's offsets (ssd_kernel::param_offsets)
};

// The graphs of one runtime, by launch sequence (stream, context, then per launch: function, grid,
// block, shared memory). Bounded: past kMaxSequences the least recently used sequence is dropped (its
// graph destroyed once no call uses it; a replay still in flight finishes first, as
// cuGraphExecDestroy guarantees). The map's lock covers lookup, insertion and eviction; each
// sequence's own lock covers its instantiation, updates and launch, so calls of other sequences
// (other streams, shapes) do not wait for them.
class LaunchGraphs {
 public:
  static constexpr size_t kMaxSequences = 64;
  explicit LaunchGraphs(bool enabled);
  ~LaunchGraphs();
  LaunchGraphs(const LaunchGraphs&) = delete;
  LaunchGraphs& operator=(const LaunchGraphs&) = delete;
  bool enabled() const { return enabled_; }
  // Launches `launches` on `stream`: by a replay when the sequence was seen before, else eagerly.
  Status launch(const std::vector<RecordedLaunch>& launches, CUstream stream);

  struct Counters {
    uint64_t eager = 0, instantiated = 0, replays = 0, nodes_updated = 0;
  };
  Counters counters() const;

 private:
  struct Entry;
  using Key = std::vector<uint64_t>;
  bool enabled_;
  mutable std::mutex mutex_;  // entries_, clock_, counters_
  std::map<Key, std::shared_ptr<Entry>> entries_;
  uint64_t clock_ = 0;
  Counters counters_;
};

// The launches of one call on `stream`, recorded on this thread while the object lives (when the
// runtime's graphs are on, record is true and the stream is not capturing). finish() launches them
// (LaunchGraphs::launch); without finish() nothing recorded is launched. One recording per thread:
// a recording made while another is active (a call inside a call) first launches the outer one's
// launches eagerly and ends it, and records nothing itself.
class CallRecording {
 public:
  CallRecording(ssd_runtime& rt, CUstream stream, bool record);
  ~CallRecording();
  CallRecording(const CallRecording&) = delete;
  CallRecording& operator=(const CallRecording&) = delete;
  // `s`: the call's status so far. On error nothing recorded is launched and `s` is returned.
  Status finish(Status s);

  // Used by launch_kernel: true when this thread is recording on `stream` (then `out` is the
  // recording's status for this launch).
  static bool record(const ssd_kernel& kernel, unsigned gx, unsigned gy, unsigned gz, void** params, CUstream stream,
                     Status* out);

 private:
  friend Status flush_recorded_launches();
  Status flush();
  LaunchGraphs* graphs_ = nullptr;
  CUstream stream_ = nullptr;
  bool active_ = false;
  Status outer_flush_;  // a nested recording's flush of the outer one
  std::vector<RecordedLaunch> launches_;
};

// Before enqueueing anything but a kernel launch (a memset) during a call: launches what this
// thread has recorded, eagerly, and ends the recording (the rest of the call launches eagerly).
Status flush_recorded_launches();

// "SSD_LAUNCH_GRAPHS": unset or anything but "0": on.
bool launch_graphs_from_env();

}  // namespace ssd
