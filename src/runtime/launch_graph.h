// A call's kernel launches through a cached CUDA graph. On the H200 host one cuLaunchKernel costs
// ~3.6 us of CPU, so the backward's 15 launches cost ~55 us; one cuGraphLaunch costs ~1.3 us and
// updating a node's parameters ~0.2-1 us by their bytes (docs/perf.md, "Launch graphs: the host
// path at one graph launch per call"). So while a call runs, its launches are recorded (kernel,
// grid, parameter bytes) instead of enqueued, and at its end:
//   - a launch sequence seen for the first time is launched eagerly, in order, as recorded;
//   - seen before, it is instantiated once as a graph of kernel nodes in the same order, each node
//     depending on every node before it (the stream order; as edges: on the nodes that have no
//     dependent yet) unless its launch names the earlier launches it follows (RecordedLaunch::after,
//     from the plan's data flow: src/ops/plan.h) or starts a segment (a part of the call that
//     shares only a workspace buffer with an earlier part: the backward's group slices), and
//     replayed: the nodes whose parameter
//     bytes changed since the last replay are updated (cuGraphExecKernelNodeSetParams), then one
//     cuGraphLaunch on the call's stream. A sequence keeps up to kMaxExecsPerSequence graphs: a
//     call that repeats (it has replayed this sequence before) while another call has set its
//     graph since gets a graph of its own, so calls that take turns (a model's layers, two
//     workspaces) each replay theirs as they left it; a call seen for the first time sets the least
//     recently used one.
// The same kernels, grids and parameters, each after every launch whose outputs it reads: the same
// bits as eager launches (each kernel's result is independent of what runs beside it).
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

// One recorded kernel launch: everything cuLaunchKernel takes, the parameter values copied, and the
// earlier launches of the call it must follow in a graph.
struct RecordedLaunch {
  static constexpr uint64_t kAfterAll = ~uint64_t(0);  // every earlier launch (the stream order)
  const ssd_kernel* kernel = nullptr;
  unsigned grid[3] = {1, 1, 1};
  // The parameters at the kernel's offsets (ssd_kernel::param_offsets), kernel->param_bytes of them,
  // in the recording's byte arena: bytes_at while it records, `bytes` once the recording hands its
  // launches over (the arena no longer grows then; valid until the recording ends).
  size_t bytes_at = 0;
  const unsigned char* bytes = nullptr;
  uint64_t after = kAfterAll;        // else bit i: launch i of its segment (i < 64); 0: none
  // Segments (CallRecording::begin_segment): a call in parts that share no data but a workspace
  // buffer. `after` counts launches from its segment's first one, and kAfterAll means every earlier
  // launch of the segment; a launch that follows nothing in its segment follows every launch of
  // segment `segment_after` (-1: none, it may start at once; -2: of every earlier segment).
  int32_t segment = 0;
  int32_t segment_after = -1;
  int32_t also_after = -1;  // such a launch also follows this launch of the call (-1: none)
};

// The graphs of one runtime, by launch sequence (stream, context, then per launch: function, grid,
// block, shared memory). Bounded: past kMaxSequences the least recently used sequence is dropped (its
// graph destroyed once no call uses it; a replay still in flight finishes first, as
// cuGraphExecDestroy guarantees). The map's lock covers lookup, insertion and eviction; each
// sequence's own lock covers its instantiation, updates and launch, so calls of other sequences
// (other streams, shapes) do not wait for them.
// A call's identity (its operation, arguments, workspace, stream, thread and context as words) for
// replaying its graph as it is: see LaunchGraphs::replay_same_call.
using CallKey = std::vector<uint64_t>;

class LaunchGraphs {
 public:
  static constexpr size_t kMaxSequences = 64;
  // Calls remembered for replay_same_call (least recently used out): more than the calls of a
  // model's layers per training step, forward and backward, so a step's cycle over them hits.
  static constexpr size_t kMaxCalls = 256;
  // Graphs kept per sequence: calls that take turns (layers, or two workspaces) each replay their
  // own as they left it, up to this many; past it they share the least recently used one's nodes.
  static constexpr size_t kMaxExecsPerSequence = 64;
  explicit LaunchGraphs(bool enabled);
  ~LaunchGraphs();
  LaunchGraphs(const LaunchGraphs&) = delete;
  LaunchGraphs& operator=(const LaunchGraphs&) = delete;
  bool enabled() const { return enabled_; }
  // Launches `launches` on `stream`: by a replay when the sequence was seen before, else eagerly.
  // With `call` (the call's identity), a replay is remembered for replay_same_call.
  Status launch(const std::vector<RecordedLaunch>& launches, CUstream stream, const CallKey* call = nullptr);
  // The graph that call `call` last replayed, launched again as it is on `stream` when no call has
  // changed its nodes since (then it holds exactly the launches, grids and parameter bytes that call
  // recorded, and an identical call would record them again): true, *out its launch's status. False
  // when there is no such graph; the caller then runs the call as usual.
  bool replay_same_call(const CallKey& call, CUstream stream, Status* out);

  struct Counters {
    uint64_t eager = 0, instantiated = 0, replays = 0, nodes_updated = 0;
    uint64_t same_call_replays = 0;  // of the replays, those replay_same_call made (no recording)
  };
  Counters counters() const;

 private:
  struct Entry;
  using Key = std::vector<uint64_t>;
  bool enabled_;
  mutable std::mutex mutex_;  // entries_, clock_, counters_
  std::map<Key, std::shared_ptr<Entry>> entries_;
  struct RememberedCall {
    std::weak_ptr<Entry> entry;  // expired once the sequence is evicted
    CUstream stream = nullptr;   // the stream it was replayed on (the sequence's)
    uint64_t version = 0;        // the entry's parameter version after this call's replay
    uint64_t last_use = 0;
  };
  std::map<CallKey, RememberedCall> calls_;
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
  // The call's identity: finish() remembers it with the graph it replays (LaunchGraphs::launch).
  void remember_as(CallKey call) { call_ = std::move(call); }
  // Before a call's work: when a call on `stream` would be recorded (graphs on, the stream not
  // capturing, no recording active on this thread) and `rt`'s graphs replay the identical call `call`
  // as it is, does so: true, *out the status. Else false (run the call, recording it).
  static bool replay_same_call(ssd_runtime& rt, CUstream stream, const CallKey& call, Status* out);

  // Used by launch_kernel: true when this thread is recording on `stream` (then `out` is the
  // recording's status for this launch).
  static bool record(const ssd_kernel& kernel, unsigned gx, unsigned gy, unsigned gz, void** params, CUstream stream,
                     Status* out);
  // The launches of the current segment this thread's active recording holds (its next launch's
  // index in the segment), or -1 when none is active (then launches go eagerly, in stream order).
  static int recorded_launches();
  // The next launch this thread records follows only the launches of `mask` (bit i: launch i of the
  // segment); the launch after it again every earlier one. No effect without an active recording.
  static void next_launch_after(uint64_t mask);
  // The launches from here on form a new segment: they follow none of the earlier segments' launches
  // but those of segment `after_segment` (the one whose workspace buffer they reuse; -1: none;
  // kAfterEverySegment: all of them). The first segment (0) starts with the recording. Returns the
  // new segment's number (-1 when no recording is active: eager launches keep the stream order).
  // Its launches that follow nothing in it also follow launch `also_index` of segment `also_segment`
  // (a part of an earlier segment that held a buffer this one reuses; -1: none).
  static constexpr int kAfterEverySegment = -2;
  static int begin_segment(int after_segment, int also_segment = -1, int also_index = -1);

 private:
  friend Status flush_recorded_launches();
  Status flush();
  // The launches with their `bytes` pointing into the arena (done once recording ends).
  const std::vector<RecordedLaunch>& handed_over();
  LaunchGraphs* graphs_ = nullptr;
  CUstream stream_ = nullptr;
  bool active_ = false;
  Status outer_flush_;  // a nested recording's flush of the outer one
  // The thread's one active recording records into these thread-local buffers, which keep their
  // capacity from call to call: a call with ~150 launches (the sliced backward) allocates nothing.
  std::vector<RecordedLaunch>& launches_;
  std::vector<unsigned char>& arena_;
  CallKey call_;  // empty: not remembered
  uint64_t next_after_ = RecordedLaunch::kAfterAll;
  size_t segment_start_ = 0;  // index of the current segment's first launch in launches_
  int32_t segment_ = 0, segment_after_ = -1, also_after_ = -1;
  std::vector<size_t> segment_starts_{0};  // each segment's first launch
};

// The identity of a call of operation `op` with the (checked, normalized) argument struct `args`:
// its bytes, the workspace, the stream (with the thread for CU_STREAM_PER_THREAD), the current
// context (a stream handle such as the null stream means another stream in another context) and
// the mode it runs. Empty when the driver is not loaded.
CallKey call_key(uint64_t op, const void* args, size_t args_bytes, const void* workspace, size_t workspace_bytes,
                 CUstream stream, int mode);

// Before enqueueing anything but a kernel launch (a memset) during a call: launches what this
// thread has recorded, eagerly, and ends the recording (the rest of the call launches eagerly).
Status flush_recorded_launches();

// "SSD_LAUNCH_GRAPHS": unset or anything but "0": on.
bool launch_graphs_from_env();

}  // namespace ssd
