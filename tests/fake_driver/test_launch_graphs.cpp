// The launch graphs' state machine (src/runtime/launch_graph.h) against a fake driver
// (fake_libcuda.cpp, loaded through LD_LIBRARY_PATH as libcuda.so.1): what is launched eagerly and
// what through a graph, in which order, with which parameters; the graph's chain of nodes; per
// stream sequences; capture, flushes, nested calls, failed calls; instantiation failures and their
// retry; eviction; the parameter-layout query. No GPU and no kernel compile: the kernels are
// fabricated ssd_kernel objects with one 8-byte parameter, launched through ssd::launch_kernel as
// the library's stages launch theirs. The GPU test "launch graphs: …" checks the bits on a device.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <dlfcn.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "fake_driver.h"
#include "ops/plan.h"
#include "runtime/launch_graph.h"
#include "runtime/runtime.h"
#include "runtime/tensor_map.h"

namespace {

using Op = FakeCudaState::Op;

FakeCudaState& fake() {
  static FakeCudaState* state = [] {
    REQUIRE(ssd::cuda::driver().ok());  // the library loads the fake (LD_LIBRARY_PATH), then so do we
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    REQUIRE(lib != nullptr);
    auto get = reinterpret_cast<FakeCudaState* (*)()>(dlsym(lib, "fake_cuda_state"));
    REQUIRE_MESSAGE(reinterpret_cast<void*>(get) != nullptr, "libcuda.so.1 is not the fake driver (LD_LIBRARY_PATH)");
    return get();
  }();
  return *state;
}

const ssd::cuda::Driver& drv() { return *ssd::cuda::driver().value(); }

CUstream stream_handle(uintptr_t v) { return reinterpret_cast<CUstream>(v); }

// n fabricated kernels (functions 0x100 + i), one 8-byte parameter each (the layout queried from the fake).
std::vector<std::unique_ptr<ssd_kernel>> make_kernels(int n) {
  std::vector<std::unique_ptr<ssd_kernel>> out;
  for (int i = 0; i < n; ++i) {
    auto k = std::make_unique<ssd_kernel>();
    k->context = reinterpret_cast<CUcontext>(0x1);
    k->function = reinterpret_cast<CUfunction>(uintptr_t(0x100 + i));
    auto built = std::make_shared<ssd::BuiltKernel>();
    built->unit.block_threads = 128;
    built->unit.dynamic_shared_bytes = 1024 * i;
    k->built = built;
    ssd::query_param_layout(drv(), *k);
    REQUIRE(k->param_layout_known);
    out.push_back(std::move(k));
  }
  return out;
}

std::unique_ptr<ssd_runtime> make_runtime(int launch_graphs = 1) {
  ssd_runtime_options o{};
  o.struct_size = sizeof(o);
  o.arch = SSD_ARCH_SM90A;
  o.cache_mode = 3;
  o.launch_graphs = launch_graphs;
  auto rt = ssd::create_runtime(o);
  REQUIRE(rt.ok());
  return std::move(rt).value();
}

// One launch of `k` with the 8-byte parameter `value` (grid grid_x), as a stage launches its kernel.
ssd::Status launch_with(const ssd_kernel& k, uint64_t value, CUstream s, unsigned grid_x = 1) {
  void* p[] = {&value};
  return ssd::launch_kernel(k, grid_x, 1, 1, p, s);
}

// One "call": kernel i launched with parameter params[i] (grid grid_x), recorded and finished.
ssd::Status call(ssd_runtime& rt, const std::vector<std::unique_ptr<ssd_kernel>>& ks, std::vector<uint64_t> params,
                 CUstream s, unsigned grid_x = 4, ssd::Status end = ssd::Status::Ok()) {
  ssd::CallRecording rec(rt, s, true);
  for (size_t i = 0; i < ks.size(); ++i) SSD_RETURN_IF_ERROR(launch_with(*ks[i], params[i], s, grid_x));
  return rec.finish(end);
}

// The events since `from`, as (op, param) pairs.
std::vector<std::pair<Op, uint64_t>> since(size_t from) {
  std::vector<std::pair<Op, uint64_t>> out;
  for (size_t i = from; i < fake().events.size(); ++i) out.emplace_back(fake().events[i].op, fake().events[i].param);
  return out;
}
using Ev = std::vector<std::pair<Op, uint64_t>>;

}  // namespace

TEST_CASE("launch graphs: eager on the first sighting, a chained graph on the second, updates only where parameters changed") {
  auto rt = make_runtime();
  auto ks = make_kernels(3);
  const CUstream s = stream_handle(0x51);
  size_t mark = fake().events.size();
  REQUIRE(call(*rt, ks, {11, 12, 13}, s).ok());
  CHECK(since(mark) == Ev{{Op::Launch, 11}, {Op::Launch, 12}, {Op::Launch, 13}});
  CHECK(fake().events.back().stream == s);

  mark = fake().events.size();
  const size_t nodes_before = fake().node_dependencies.size();
  const int inst_before = fake().instantiated;
  REQUIRE(call(*rt, ks, {21, 22, 23}, s).ok());
  CHECK(since(mark) == Ev{{Op::AddNode, 21}, {Op::AddNode, 22}, {Op::AddNode, 23}, {Op::GraphLaunch, 0}});
  CHECK(fake().events.back().stream == s);
  CHECK(fake().instantiated == inst_before + 1);
  // Each node depends on the one before it (the stream's order), the first on none.
  REQUIRE(fake().node_dependencies.size() == nodes_before + 3);
  CHECK(fake().node_dependencies[nodes_before] == 0);
  CHECK(fake().node_dependencies[nodes_before + 1] == nodes_before + 1);
  CHECK(fake().node_dependencies[nodes_before + 2] == nodes_before + 2);
  // The graph calls ran in the relaxed capture mode, and the thread's mode was restored after them.
  CHECK(fake().graph_calls_not_relaxed == 0);
  CHECK(fake().mode == CU_STREAM_CAPTURE_MODE_GLOBAL);

  mark = fake().events.size();
  const int exchanges = fake().mode_exchanges;
  REQUIRE(call(*rt, ks, {21, 22, 23}, s).ok());  // the same parameters: a replay as is
  CHECK(since(mark) == Ev{{Op::GraphLaunch, 0}});
  CHECK(fake().mode_exchanges == exchanges);  // nothing to update: no graph call but the launch
  mark = fake().events.size();
  REQUIRE(call(*rt, ks, {21, 99, 23}, s).ok());  // one node's parameter changed
  CHECK(since(mark) == Ev{{Op::SetParams, 99}, {Op::GraphLaunch, 0}});
  CHECK(fake().graph_calls_not_relaxed == 0);
  CHECK(fake().mode == CU_STREAM_CAPTURE_MODE_GLOBAL);

  const ssd::LaunchGraphs::Counters c = rt->graphs->counters();
  CHECK(c.eager == 1);
  CHECK(c.instantiated == 1);
  CHECK(c.replays == 3);
  CHECK(c.nodes_updated == 1);
}

TEST_CASE("launch graphs: a sequence per stream and per grid; eager on a capturing stream, with graphs off, on failure") {
  auto rt = make_runtime();
  auto ks = make_kernels(2);
  const CUstream s1 = stream_handle(0x61), s2 = stream_handle(0x62);
  REQUIRE(call(*rt, ks, {1, 2}, s1).ok());
  REQUIRE(call(*rt, ks, {1, 2}, s1).ok());  // instantiated on s1
  size_t mark = fake().events.size();
  REQUIRE(call(*rt, ks, {1, 2}, s2).ok());  // another stream: its own first sighting
  CHECK(since(mark) == Ev{{Op::Launch, 1}, {Op::Launch, 2}});
  mark = fake().events.size();
  REQUIRE(call(*rt, ks, {1, 2}, s1, 8).ok());  // another grid: a new sequence
  CHECK(since(mark) == Ev{{Op::Launch, 1}, {Op::Launch, 2}});

  // A stream under capture: launched as they come (the caller's capture takes them), every time.
  fake().capturing_stream = s1;
  for (int i = 0; i < 3; ++i) {
    mark = fake().events.size();
    REQUIRE(call(*rt, ks, {5, 6}, s1).ok());
    CHECK(since(mark) == Ev{{Op::Launch, 5}, {Op::Launch, 6}});
  }
  fake().capturing_stream = nullptr;

  // Graphs off: always eager.
  auto off = make_runtime(2);
  for (int i = 0; i < 3; ++i) {
    mark = fake().events.size();
    REQUIRE(call(*off, ks, {7, 8}, s1).ok());
    CHECK(since(mark) == Ev{{Op::Launch, 7}, {Op::Launch, 8}});
  }

  // A call that failed after recording launches nothing and returns its status.
  mark = fake().events.size();
  const ssd::Status failed = call(*rt, ks, {9, 9}, s1, 4, ssd::make_error(SSD_ERROR_CUDA, "a stage failed"));
  CHECK(failed.code == SSD_ERROR_CUDA);
  CHECK(since(mark).empty());
}

TEST_CASE("launch graphs: a flush (before a memset) and a nested call launch what was recorded first, in order") {
  auto rt = make_runtime();
  auto ks = make_kernels(3);
  const CUstream s = stream_handle(0x71);
  size_t mark = fake().events.size();
  {
    ssd::CallRecording rec(*rt, s, true);
    REQUIRE(launch_with(*ks[0], 31, s).ok());
    REQUIRE(launch_with(*ks[1], 32, s).ok());
    CHECK(since(mark).empty());  // recorded, not launched
    REQUIRE(ssd::flush_recorded_launches().ok());
    CHECK(since(mark) == Ev{{Op::Launch, 31}, {Op::Launch, 32}});
    REQUIRE(launch_with(*ks[2], 33, s).ok());  // the rest of the call: eager
    CHECK(since(mark) == Ev{{Op::Launch, 31}, {Op::Launch, 32}, {Op::Launch, 33}});
    REQUIRE(rec.finish(ssd::Status::Ok()).ok());
  }
  CHECK(since(mark).size() == 3);

  // The library's memset (fast mode's zeroing) flushes the same way: the recorded launches first.
  mark = fake().events.size();
  {
    ssd::CallRecording rec(*rt, s, true);
    REQUIRE(launch_with(*ks[0], 35, s).ok());
    REQUIRE(launch_with(*ks[1], 36, s).ok());
    float word = 1.f;
    REQUIRE(ssd::memset_zero_d32(&word, 4, 1, 1, s, "test memset").ok());
    CHECK(since(mark) == Ev{{Op::Launch, 35}, {Op::Launch, 36}, {Op::Memset, 0}});
    REQUIRE(rec.finish(ssd::Status::Ok()).ok());
  }
  CHECK(since(mark).size() == 3);

  mark = fake().events.size();
  {
    ssd::CallRecording outer(*rt, s, true);
    REQUIRE(launch_with(*ks[0], 41, s).ok());
    {
      ssd::CallRecording inner(*rt, s, true);  // the outer call's launch goes first
      CHECK(since(mark) == Ev{{Op::Launch, 41}});
      REQUIRE(launch_with(*ks[1], 42, s).ok());
      CHECK(since(mark) == Ev{{Op::Launch, 41}, {Op::Launch, 42}});
      REQUIRE(inner.finish(ssd::Status::Ok()).ok());
    }
    REQUIRE(outer.finish(ssd::Status::Ok()).ok());
  }
  CHECK(since(mark) == Ev{{Op::Launch, 41}, {Op::Launch, 42}});

  // A kernel whose parameter layout is unknown: what was recorded goes first, then it, eagerly.
  auto unknown = make_kernels(1);
  unknown[0]->param_layout_known = false;
  mark = fake().events.size();
  {
    ssd::CallRecording rec(*rt, s, true);
    REQUIRE(launch_with(*ks[0], 51, s).ok());
    REQUIRE(launch_with(*unknown[0], 52, s).ok());
    REQUIRE(rec.finish(ssd::Status::Ok()).ok());
  }
  CHECK(since(mark) == Ev{{Op::Launch, 51}, {Op::Launch, 52}});
}

TEST_CASE("launch graphs: a failed instantiation launches eagerly, pauses the sequence, then retries") {
  auto rt = make_runtime();
  auto ks = make_kernels(2);
  const CUstream s = stream_handle(0x81);
  REQUIRE(call(*rt, ks, {1, 2}, s).ok());  // first sighting
  fake().instantiate_fails = true;
  size_t mark = fake().events.size();
  REQUIRE(call(*rt, ks, {3, 4}, s).ok());  // instantiation refused: the same launches, eagerly
  Ev got = since(mark);
  CHECK(got == Ev{{Op::AddNode, 3}, {Op::AddNode, 4}, {Op::Launch, 3}, {Op::Launch, 4}});
  fake().instantiate_fails = false;
  for (int i = 0; i < 256; ++i) {  // the pause
    mark = fake().events.size();
    REQUIRE(call(*rt, ks, {5, 6}, s).ok());
    REQUIRE(since(mark) == Ev{{Op::Launch, 5}, {Op::Launch, 6}});
  }
  mark = fake().events.size();
  REQUIRE(call(*rt, ks, {7, 8}, s).ok());  // retried
  CHECK(since(mark) == Ev{{Op::AddNode, 7}, {Op::AddNode, 8}, {Op::GraphLaunch, 0}});
}

TEST_CASE("launch graphs: past 64 sequences the least recently used one's graph is destroyed") {
  auto rt = make_runtime();
  auto ks = make_kernels(1);
  const CUstream s = stream_handle(0x91);
  const int destroyed = fake().execs_destroyed;
  for (unsigned g = 1; g <= ssd::LaunchGraphs::kMaxSequences; ++g) {
    REQUIRE(call(*rt, ks, {g}, s, g).ok());
    REQUIRE(call(*rt, ks, {g}, s, g).ok());  // each instantiated
  }
  CHECK(fake().execs_destroyed == destroyed);
  REQUIRE(call(*rt, ks, {1}, s, 1).ok());  // grid 1 used again: grid 2's is now the oldest
  REQUIRE(call(*rt, ks, {0}, s, 1000).ok());  // a 65th sequence
  CHECK(fake().execs_destroyed == destroyed + 1);
  size_t mark = fake().events.size();
  REQUIRE(call(*rt, ks, {1}, s, 1).ok());  // still cached
  CHECK(since(mark) == Ev{{Op::GraphLaunch, 0}});
  mark = fake().events.size();
  REQUIRE(call(*rt, ks, {2}, s, 2).ok());  // evicted: a first sighting again, which evicts grid 3's
  CHECK(since(mark) == Ev{{Op::Launch, 2}});
  CHECK(fake().execs_destroyed == destroyed + 2);
  rt.reset();  // the runtime's graphs go with it: grids 1 and 4..64 (1000 and 2 have none yet)
  CHECK(fake().execs_destroyed == destroyed + 2 + 62);
  CHECK(fake().graph_calls_not_relaxed == 0);  // the destroys too
}

TEST_CASE("launch graphs: the parameter layout is known only from a successful query") {
  auto ks = make_kernels(1);
  CHECK(fake().max_param_index == 0);  // the unit's one parameter, no probe past it
  CHECK(ks[0]->param_offsets == std::vector<size_t>{0});
  CHECK(ks[0]->param_sizes == std::vector<size_t>{8});
  CHECK(ks[0]->param_bytes == 8);
  fake().param_info_fails = true;
  ssd::query_param_layout(drv(), *ks[0]);
  fake().param_info_fails = false;
  CHECK_FALSE(ks[0]->param_layout_known);
  CHECK(ks[0]->param_offsets.empty());
}

TEST_CASE("launch graphs: two threads on one sequence: each replay runs with one call's parameters") {
  // The same stream, kernels and grid from two threads: one graph. Each call's parameters carry its
  // thread and call number; the per-sequence lock keeps a call's updates and its launch together,
  // so at every graph launch all nodes hold the parameters of one call.
  auto rt = make_runtime();
  auto ks = make_kernels(2);
  const CUstream s = stream_handle(0xa1);
  constexpr int kCalls = 1000;
  const size_t mark = fake().events.size();
  std::vector<ssd::Status> status(2);
  auto worker = [&](int t) {
    for (int i = 0; i < kCalls && status[t].ok(); ++i) {
      const uint64_t tag = (uint64_t(t + 1) << 32) | (uint64_t(i) << 8);
      status[t] = call(*rt, ks, {tag | 0, tag | 1}, s);
    }
  };
  std::thread a(worker, 0), b(worker, 1);
  a.join();
  b.join();
  REQUIRE(status[0].ok());
  REQUIRE(status[1].ok());
  std::map<uintptr_t, uint64_t> node_value;
  int launches = 0, eager = 0;
  for (size_t i = mark; i < fake().events.size(); ++i) {
    const FakeCudaState::Event& e = fake().events[i];
    if (e.op == Op::AddNode || e.op == Op::SetParams) node_value[e.node] = e.param;
    if (e.op == Op::Launch) ++eager;
    if (e.op != Op::GraphLaunch) continue;
    ++launches;
    REQUIRE(node_value.size() == 2);
    const uint64_t first = node_value.begin()->second, second = node_value.rbegin()->second;
    CHECK((first >> 8) == (second >> 8));  // the same thread and call
    CHECK((first & 0xff) == 0);            // in kernel order
    CHECK((second & 0xff) == 1);
  }
  CHECK(launches + eager / 2 == 2 * kCalls);
  CHECK(eager == 2);  // the first sighting only
}

TEST_CASE("launch graphs: CU_STREAM_PER_THREAD is another stream on each thread: a sequence per thread") {
  auto rt = make_runtime();
  auto ks = make_kernels(1);
  const ssd::LaunchGraphs::Counters before = rt->graphs->counters();
  // Both threads alive at once (a finished thread's id may be reused by the next one: then its
  // graph is, which is harmless, since a graph is not bound to a stream).
  std::mutex m;
  std::condition_variable cv;
  int done = 0;
  std::vector<ssd::Status> status(2);
  auto worker = [&](int t) {
    for (uint64_t i = 0; i < 3 && status[t].ok(); ++i) status[t] = call(*rt, ks, {i}, CU_STREAM_PER_THREAD);
    std::unique_lock<std::mutex> lock(m);
    ++done;
    cv.notify_all();
    cv.wait(lock, [&] { return done == 2; });
  };
  std::thread a(worker, 0), b(worker, 1);
  a.join();
  b.join();
  REQUIRE(status[0].ok());
  REQUIRE(status[1].ok());
  const ssd::LaunchGraphs::Counters after = rt->graphs->counters();
  CHECK(after.eager - before.eager == 2);  // each thread's first call
  CHECK(after.instantiated - before.instantiated == 2);
  CHECK(after.replays - before.replays == 4);
}

TEST_CASE("launch graphs: a launch that names the earlier launches it follows gets edges to those alone") {
  auto rt = make_runtime();
  auto ks = make_kernels(4);
  const CUstream s = stream_handle(0x61);
  // Launch 1 follows none, launch 2 launch 0 (and a bit of a launch not yet made, dropped), launch 3
  // every earlier one: the shape of the forward (cumsum; bmm beside it; the state pass; chunk_scan).
  auto masked_call = [&](std::vector<uint64_t> params) {
    ssd::CallRecording rec(*rt, s, true);
    CHECK(ssd::CallRecording::recorded_launches() == 0);
    SSD_RETURN_IF_ERROR(launch_with(*ks[0], params[0], s));
    ssd::CallRecording::next_launch_after(0);
    SSD_RETURN_IF_ERROR(launch_with(*ks[1], params[1], s));
    ssd::CallRecording::next_launch_after(uint64_t(1) << 0 | uint64_t(1) << 5);
    SSD_RETURN_IF_ERROR(launch_with(*ks[2], params[2], s));
    SSD_RETURN_IF_ERROR(launch_with(*ks[3], params[3], s));
    CHECK(ssd::CallRecording::recorded_launches() == 4);
    return rec.finish(ssd::Status::Ok());
  };
  size_t mark = fake().events.size();
  REQUIRE(masked_call({1, 2, 3, 4}).ok());  // first sighting: eager, in order
  CHECK(since(mark) == Ev{{Op::Launch, 1}, {Op::Launch, 2}, {Op::Launch, 3}, {Op::Launch, 4}});
  const size_t n0 = fake().node_dependency_lists.size();
  mark = fake().events.size();
  REQUIRE(masked_call({5, 6, 7, 8}).ok());
  CHECK(since(mark) == Ev{{Op::AddNode, 5}, {Op::AddNode, 6}, {Op::AddNode, 7}, {Op::AddNode, 8}, {Op::GraphLaunch, 0}});
  REQUIRE(fake().node_dependency_lists.size() == n0 + 4);
  using Deps = std::vector<uintptr_t>;
  const uintptr_t a = n0 + 1, b = n0 + 2, c = n0 + 3;  // the fake's node ids: 1-based creation order
  CHECK(fake().node_dependency_lists[n0] == Deps{});
  CHECK(fake().node_dependency_lists[n0 + 1] == Deps{});
  CHECK(fake().node_dependency_lists[n0 + 2] == Deps{a});
  CHECK(fake().node_dependency_lists[n0 + 3] == Deps{b, c});  // every node without a dependent yet
  // The same launches as a plain chain are another sequence (the masks are part of the key).
  mark = fake().events.size();
  REQUIRE(call(*rt, ks, {5, 6, 7, 8}, s, 1).ok());
  CHECK(since(mark) == Ev{{Op::Launch, 5}, {Op::Launch, 6}, {Op::Launch, 7}, {Op::Launch, 8}});
  // Without a recording the calls do nothing and report none.
  CHECK(ssd::CallRecording::recorded_launches() == -1);
  ssd::CallRecording::next_launch_after(0);
  mark = fake().events.size();
  REQUIRE(launch_with(*ks[0], 9, s).ok());
  CHECK(since(mark) == Ev{{Op::Launch, 9}});
}

TEST_CASE("launch graphs: segments follow only the segment whose buffer they reuse, or every earlier one") {
  auto rt = make_runtime();
  auto ks = make_kernels(3);
  const CUstream s = stream_handle(0x62);
  // Three segments of two launches (the backward's group slices through two workspace buffers):
  // segment 0 and 1 start at once, segment 2 follows segment 0. Inside a segment the second launch
  // follows the first (the default), and masks count from the segment's first launch.
  auto segmented_call = [&](uint64_t p) {
    ssd::CallRecording rec(*rt, s, true);
    int seg[3];
    for (int i = 0; i < 3; ++i) {
      seg[i] = ssd::CallRecording::begin_segment(i >= 2 ? seg[i - 2] : -1);
      CHECK(seg[i] == i);
      CHECK(ssd::CallRecording::recorded_launches() == 0);
      SSD_RETURN_IF_ERROR(launch_with(*ks[0], p + 10 * uint64_t(i), s));
      if (i == 1) ssd::CallRecording::next_launch_after(uint64_t(1) << 0 | uint64_t(1) << 1);  // bit 1: not yet made
      SSD_RETURN_IF_ERROR(launch_with(*ks[1], p + 10 * uint64_t(i) + 1, s));
      CHECK(ssd::CallRecording::recorded_launches() == 2);
    }
    // An empty segment is not counted: the next one keeps the number.
    CHECK(ssd::CallRecording::begin_segment(-1) == 3);
    CHECK(ssd::CallRecording::begin_segment(0) == 3);
    SSD_RETURN_IF_ERROR(launch_with(*ks[2], p + 30, s));
    // The part after every slice: after each earlier segment's last launches.
    CHECK(ssd::CallRecording::begin_segment(ssd::CallRecording::kAfterEverySegment) == 4);
    SSD_RETURN_IF_ERROR(launch_with(*ks[2], p + 40, s));
    SSD_RETURN_IF_ERROR(launch_with(*ks[2], p + 41, s));
    // A segment after segment 2 that also follows launch 0 of segment 1 (a shared buffer's reader).
    CHECK(ssd::CallRecording::begin_segment(2, 1, 0) == 5);
    ssd::CallRecording::next_launch_after(0);
    SSD_RETURN_IF_ERROR(launch_with(*ks[0], p + 50, s));
    SSD_RETURN_IF_ERROR(launch_with(*ks[0], p + 51, s));
    return rec.finish(ssd::Status::Ok());
  };
  size_t mark = fake().events.size();
  REQUIRE(segmented_call(100).ok());  // eager: the stream order
  CHECK(since(mark) == Ev{{Op::Launch, 100}, {Op::Launch, 101}, {Op::Launch, 110}, {Op::Launch, 111},
                          {Op::Launch, 120}, {Op::Launch, 121}, {Op::Launch, 130}, {Op::Launch, 140},
                          {Op::Launch, 141}, {Op::Launch, 150}, {Op::Launch, 151}});
  const size_t n0 = fake().node_dependency_lists.size();
  REQUIRE(segmented_call(200).ok());
  REQUIRE(fake().node_dependency_lists.size() == n0 + 11);
  using Deps = std::vector<uintptr_t>;
  const uintptr_t s0a = n0 + 1, s0b = n0 + 2, s1a = n0 + 3, s2a = n0 + 5;  // the fake's node ids: 1-based
  CHECK(fake().node_dependency_lists[n0] == Deps{});          // segment 0
  CHECK(fake().node_dependency_lists[n0 + 1] == Deps{s0a});
  CHECK(fake().node_dependency_lists[n0 + 2] == Deps{});      // segment 1: beside segment 0
  CHECK(fake().node_dependency_lists[n0 + 3] == Deps{s1a});   // its mask, counted in the segment
  CHECK(fake().node_dependency_lists[n0 + 4] == Deps{s0b});   // segment 2: after segment 0's last
  CHECK(fake().node_dependency_lists[n0 + 5] == Deps{s2a});
  CHECK(fake().node_dependency_lists[n0 + 6] == Deps{s0b});   // segment 3: after segment 0 too
  CHECK(fake().node_dependency_lists[n0 + 7] == (Deps{s0b, n0 + 4, n0 + 6, n0 + 7}));  // segment 4: every sink
  CHECK(fake().node_dependency_lists[n0 + 8] == Deps{n0 + 8});
  CHECK(fake().node_dependency_lists[n0 + 9] == (Deps{n0 + 6, s1a}));  // segment 5: after 2, and 1's first
  CHECK(fake().node_dependency_lists[n0 + 10] == Deps{n0 + 10});
  // Without a recording there are no segments.
  CHECK(ssd::CallRecording::begin_segment(-1) == -1);
}

namespace {
// A plan of four stages over fabricated kernels (stage i launches kernel i with parameter 100 + i):
// stage 1 follows none, stage 2 runs only when `with_two`, stage 3 follows stages 0 and 2.
struct PlanCall {
  const std::vector<std::unique_ptr<ssd_kernel>>* ks;
  CUstream stream;
  bool with_two;
};
template <int I>
ssd::Status plan_launch(const PlanCall& c, const ssd_kernel& k, CUstream s) {
  return launch_with(k, 100 + I, s);
}
ssd_kernel_config plan_config(const PlanCall&) { return ssd_kernel_config{}; }
bool runs_two(const PlanCall& c) { return c.with_two; }
ssd::Status launch_nothing(const PlanCall&, const ssd_kernel&, CUstream) { return ssd::Status::Ok(); }
// A stage with a mask that launches nothing, then one that names no stage in particular.
const std::vector<ssd::Stage<PlanCall>>& empty_stage_plan() {
  static const std::vector<ssd::Stage<PlanCall>> plan = {
      {"zero", -1, nullptr, plan_config, plan_launch<0>},
      {"one", -1, nullptr, plan_config, plan_launch<1>},
      {"nothing", -1, nullptr, plan_config, launch_nothing, ssd::after_stages({})},
      {"three", -1, nullptr, plan_config, plan_launch<3>},
  };
  return plan;
}
const std::vector<ssd::Stage<PlanCall>>& test_plan() {
  static const std::vector<ssd::Stage<PlanCall>> plan = {
      {"zero", -1, nullptr, plan_config, plan_launch<0>},
      {"one", -1, nullptr, plan_config, plan_launch<1>, ssd::after_stages({})},
      {"two", -1, runs_two, plan_config, plan_launch<2>, ssd::after_stages({0})},
      {"three", -1, nullptr, plan_config, plan_launch<3>, ssd::after_stages({0, 2})},
      {"four", -1, nullptr, plan_config, plan_launch<4>},
  };
  return plan;
}
}  // namespace

TEST_CASE("launch graphs: a plan's stages become launches after the stages they name; skipped stages are passed over") {
  auto rt = make_runtime();
  auto ks = make_kernels(5);
  const CUstream s = stream_handle(0x62);
  using Deps = std::vector<uintptr_t>;
  for (bool with_two : {true, false}) {
    CAPTURE(with_two);
    PlanCall pc{&ks, s, with_two};
    std::vector<const ssd_kernel*> kernels;
    for (size_t i = 0; i < ks.size(); ++i)
      kernels.push_back(i == 2 && !with_two ? nullptr : ks[i].get());
    auto run = [&] {
      ssd::CallRecording rec(*rt, s, true);
      return rec.finish(ssd::launch_plan(pc, test_plan(), kernels, s, nullptr));
    };
    REQUIRE(run().ok());  // eager
    const size_t n0 = fake().node_dependency_lists.size();
    REQUIRE(run().ok());  // instantiated
    const uintptr_t n = n0 + 1;  // node id of the call's first launch
    if (with_two) {
      REQUIRE(fake().node_dependency_lists.size() == n0 + 5);
      CHECK(fake().node_dependency_lists[n0 + 0] == Deps{});
      CHECK(fake().node_dependency_lists[n0 + 1] == Deps{});            // one: none
      CHECK(fake().node_dependency_lists[n0 + 2] == Deps{n});           // two: zero
      CHECK(fake().node_dependency_lists[n0 + 3] == Deps{n, n + 2});    // three: zero and two
      CHECK(fake().node_dependency_lists[n0 + 4] == Deps{n + 1, n + 3});  // four: all (the sinks)
    } else {
      REQUIRE(fake().node_dependency_lists.size() == n0 + 4);
      CHECK(fake().node_dependency_lists[n0 + 1] == Deps{});
      CHECK(fake().node_dependency_lists[n0 + 2] == Deps{n});             // three: zero (two did not run)
      CHECK(fake().node_dependency_lists[n0 + 3] == Deps{n + 1, n + 2});  // four: all
    }
  }
}

TEST_CASE("launch graphs: a stage's mask that no launch took does not pass to the next stage") {
  auto rt = make_runtime();
  auto ks = make_kernels(4);
  const CUstream s = stream_handle(0x63);
  PlanCall pc{&ks, s, true};
  const std::vector<const ssd_kernel*> kernels{ks[0].get(), ks[1].get(), ks[2].get(), ks[3].get()};
  auto run = [&] {
    ssd::CallRecording rec(*rt, s, true);
    return rec.finish(ssd::launch_plan(pc, empty_stage_plan(), kernels, s, nullptr));
  };
  REQUIRE(run().ok());
  const size_t n0 = fake().node_dependency_lists.size();
  REQUIRE(run().ok());
  REQUIRE(fake().node_dependency_lists.size() == n0 + 3);
  CHECK(fake().node_dependency_lists[n0 + 2] == std::vector<uintptr_t>{n0 + 2});  // three: after one (the chain)
}

TEST_CASE("tensor maps: an equal description is answered from the thread's kept maps, any change encodes anew") {
  (void)fake();  // the library loads the fake driver
  alignas(256) static unsigned char memory[4096];
  const auto desc = [](const void* base, uint64_t rows) {
    return ssd::cuda::matrix_map_desc(SSD_DTYPE_BF16, base, rows, 64, 64, 64, 64, ssd::cuda::TmaSwizzle::k128B);
  };
  const int before = fake().tensor_maps_encoded;
  auto a = ssd::cuda::encode_tensor_map(desc(memory, 256));
  REQUIRE(a.ok());
  CHECK(fake().tensor_maps_encoded == before + 1);
  auto again = ssd::cuda::encode_tensor_map(desc(memory, 256));
  REQUIRE(again.ok());
  CHECK(fake().tensor_maps_encoded == before + 1);  // kept
  CHECK(std::memcmp(&a.value(), &again.value(), sizeof(CUtensorMap)) == 0);
  // Another base, another extent, another box or swizzle: each its own encoding.
  ssd::cuda::TensorMapDesc box = desc(memory, 256);
  box.box[1] = 32;
  ssd::cuda::TensorMapDesc swz = desc(memory, 256);
  swz.swizzle = ssd::cuda::TmaSwizzle::kNone;
  int expected = before + 1;
  for (const ssd::cuda::TensorMapDesc& d : {desc(memory + 256, 256), desc(memory, 128), box, swz}) {
    auto m = ssd::cuda::encode_tensor_map(d);
    REQUIRE(m.ok());
    CHECK(fake().tensor_maps_encoded == ++expected);
    CHECK(std::memcmp(&m.value(), &a.value(), sizeof(CUtensorMap)) != 0);
  }
  // An invalid description is refused before the kept maps or the driver.
  ssd::cuda::TensorMapDesc bad = desc(memory + 8, 256);  // not 16-byte aligned
  CHECK(!ssd::cuda::encode_tensor_map(bad).ok());
  CHECK(fake().tensor_maps_encoded == expected);
  // Past 64 kept maps the least recently used one goes: the first is encoded again, the last is not.
  for (int i = 0; i < 64; ++i) REQUIRE(ssd::cuda::encode_tensor_map(desc(memory, 1000 + uint64_t(i))).ok());
  expected += 64;
  CHECK(fake().tensor_maps_encoded == expected);
  REQUIRE(ssd::cuda::encode_tensor_map(desc(memory, 1063)).ok());
  CHECK(fake().tensor_maps_encoded == expected);
  REQUIRE(ssd::cuda::encode_tensor_map(desc(memory, 256)).ok());
  CHECK(fake().tensor_maps_encoded == expected + 1);
  // Another thread keeps its own.
  std::thread([&] {
    REQUIRE(ssd::cuda::encode_tensor_map(desc(memory, 1063)).ok());
  }).join();
  CHECK(fake().tensor_maps_encoded == expected + 2);
}

TEST_CASE("launch graphs: an identical call replays its graph as it is; after another call's update it records again") {
  auto rt = make_runtime();
  auto ks = make_kernels(2);
  const CUstream s = stream_handle(0x71), other = stream_handle(0x72);
  int recorded = 0;
  // A call identified by `key` whose launches carry `params` (a call of the same identity must
  // record the same parameters, as the library's calls do): a replay as is, else recorded.
  auto keyed_call = [&](const ssd::CallKey& key, std::vector<uint64_t> params, CUstream st = nullptr) {
    st = st ? st : s;
    ssd::Status out;
    if (ssd::CallRecording::replay_same_call(*rt, st, key, &out)) return out;
    ++recorded;
    ssd::CallRecording rec(*rt, st, true);
    rec.remember_as(key);
    for (size_t i = 0; i < ks.size(); ++i) SSD_RETURN_IF_ERROR(launch_with(*ks[i], params[i], st));
    return rec.finish(ssd::Status::Ok());
  };
  const ssd::CallKey x{1, 100}, y{1, 200};
  REQUIRE(keyed_call(x, {1, 2}).ok());  // eager: not remembered
  REQUIRE(keyed_call(x, {1, 2}).ok());  // instantiated and replayed: remembered
  CHECK(recorded == 2);
  size_t mark = fake().events.size();
  REQUIRE(keyed_call(x, {1, 2}).ok());  // as is: one graph launch, nothing recorded
  CHECK(recorded == 2);
  CHECK(since(mark) == Ev{{Op::GraphLaunch, 0}});
  CHECK(fake().events.back().stream == s);
  // Another call of the same sequence changes a node: x's graph is no longer as x left it.
  mark = fake().events.size();
  REQUIRE(keyed_call(y, {1, 7}).ok());
  CHECK(since(mark) == Ev{{Op::SetParams, 7}, {Op::GraphLaunch, 0}});
  const uintptr_t first_exec = fake().events.back().node;
  // x repeats, its graph set by y since: recorded again, into a graph of its own (no update).
  mark = fake().events.size();
  const int instantiated = fake().instantiated;
  REQUIRE(keyed_call(x, {1, 2}).ok());
  CHECK(recorded == 4);
  CHECK(since(mark) == Ev{{Op::AddNode, 1}, {Op::AddNode, 2}, {Op::GraphLaunch, 0}});
  CHECK(fake().instantiated == instantiated + 1);
  const uintptr_t second_exec = fake().events.back().node;
  CHECK(second_exec != first_exec);
  // Now x and y take turns, each replaying its own graph as it left it.
  mark = fake().events.size();
  REQUIRE(keyed_call(x, {1, 2}).ok());
  REQUIRE(keyed_call(y, {1, 7}).ok());
  REQUIRE(keyed_call(x, {1, 2}).ok());
  CHECK(recorded == 4);
  CHECK(since(mark) == Ev{{Op::GraphLaunch, 0}, {Op::GraphLaunch, 0}, {Op::GraphLaunch, 0}});
  CHECK(fake().events[mark].node == second_exec);
  CHECK(fake().events[mark + 1].node == first_exec);
  // A call seen for the first time sets the least recently used graph (y's); one that changes
  // nothing there keeps y's replay valid: y and z record the same bytes.
  const ssd::CallKey z{1, 300};
  mark = fake().events.size();
  REQUIRE(keyed_call(z, {1, 7}).ok());  // recorded, no update
  CHECK(since(mark) == Ev{{Op::GraphLaunch, 0}});
  CHECK(fake().events.back().node == first_exec);
  mark = fake().events.size();
  REQUIRE(keyed_call(y, {1, 7}).ok());
  CHECK(since(mark) == Ev{{Op::GraphLaunch, 0}});
  // Not on another stream (its own sequence), not while the stream is captured, not inside a call.
  const int before = recorded;
  REQUIRE(keyed_call(y, {1, 7}, other).ok());
  CHECK(recorded == before + 1);
  fake().capturing_stream = s;
  ssd::Status st;
  CHECK_FALSE(ssd::CallRecording::replay_same_call(*rt, s, y, &st));
  fake().capturing_stream = nullptr;
  {
    ssd::CallRecording outer(*rt, s, true);
    CHECK_FALSE(ssd::CallRecording::replay_same_call(*rt, s, y, &st));
    REQUIRE(outer.finish(ssd::Status::Ok()).ok());
  }
  CHECK(ssd::CallRecording::replay_same_call(*rt, s, y, &st));
  CHECK(st.ok());
  // With graphs off nothing is remembered or replayed.
  auto off = make_runtime(2);
  CHECK_FALSE(ssd::CallRecording::replay_same_call(*off, s, y, &st));
  const ssd::LaunchGraphs::Counters c = rt->graphs->counters();
  CHECK(c.same_call_replays == 6);  // x; x, y, x; y; y after the nested call
}

TEST_CASE("launch graphs: calls that take turns each keep a graph, up to kMaxExecsPerSequence; then they share") {
  auto rt = make_runtime();
  auto ks = make_kernels(2);
  const CUstream s = stream_handle(0x91);
  int recorded = 0;
  auto keyed_call = [&](uint64_t i) {
    ssd::Status out;
    if (ssd::CallRecording::replay_same_call(*rt, s, ssd::CallKey{9, i}, &out)) return out;
    ++recorded;
    ssd::CallRecording rec(*rt, s, true);
    rec.remember_as(ssd::CallKey{9, i});
    for (size_t k = 0; k < ks.size(); ++k) SSD_RETURN_IF_ERROR(launch_with(*ks[k], 1000 * k + i, s));
    return rec.finish(ssd::Status::Ok());
  };
  // Four calls in turn (a model's layers): the first round records all (the first eager, the second
  // instantiates, the others set that graph), the second gives each repeating call its own graph
  // (the first call's was eager, so it is not remembered and sets the least recently used one), the
  // third replays each as is.
  const int instantiated = fake().instantiated;
  for (int round = 0; round < 3; ++round) {
    const size_t mark = fake().events.size();
    for (uint64_t i = 0; i < 4; ++i) REQUIRE(keyed_call(i).ok());
    if (round == 2) {
      std::vector<uintptr_t> execs;
      for (const auto& [op, param] : since(mark)) CHECK(op == Op::GraphLaunch);
      for (size_t e = mark; e < fake().events.size(); ++e) execs.push_back(fake().events[e].node);
      std::sort(execs.begin(), execs.end());
      CHECK(std::unique(execs.begin(), execs.end()) == execs.end());  // four graphs
    }
  }
  CHECK(recorded == 8);
  CHECK(fake().instantiated == instantiated + 4);
  // Past the bound: no more graphs than kMaxExecsPerSequence for the sequence, and every call still
  // launches its own parameters (the launched graph's nodes as the fake driver holds them).
  auto launched_own = [&](size_t mark, uint64_t i) {
    const auto& ev = fake().events;
    if (ev.size() <= mark) return false;
    if (ev.back().op != Op::Launch) {  // a replay: the launched graph's parameters are the call's
      return ev.back().op == Op::GraphLaunch && ev.back().exec_params == std::vector<uint64_t>{i, 1000 + i};
    }
    return ev.size() - mark == 2 && ev[mark].param == i && ev[mark + 1].param == 1000 + i;  // eager
  };
  const size_t n = ssd::LaunchGraphs::kMaxExecsPerSequence + 3;
  for (int round = 0; round < 3; ++round)
    for (uint64_t i = 0; i < n; ++i) {
      const size_t mark = fake().events.size();
      REQUIRE(keyed_call(100 + i).ok());
      CHECK(launched_own(mark, 100 + i));
    }
  CHECK(fake().instantiated - instantiated == int(ssd::LaunchGraphs::kMaxExecsPerSequence));
  // The four calls of the first part, now past the bound too: each still its own parameters.
  for (uint64_t i = 0; i < 4; ++i) {
    const size_t mark = fake().events.size();
    REQUIRE(keyed_call(i).ok());
    CHECK(launched_own(mark, i));
  }
}

TEST_CASE("launch graphs: a further graph that fails to instantiate leaves the sequence's other graphs") {
  auto rt = make_runtime();
  auto ks = make_kernels(1);
  const CUstream s = stream_handle(0xa1);
  auto keyed_call = [&](uint64_t i) {
    ssd::Status out;
    if (ssd::CallRecording::replay_same_call(*rt, s, ssd::CallKey{10, i}, &out)) return out;
    ssd::CallRecording rec(*rt, s, true);
    rec.remember_as(ssd::CallKey{10, i});
    SSD_RETURN_IF_ERROR(launch_with(*ks[0], i, s));
    return rec.finish(ssd::Status::Ok());
  };
  REQUIRE(keyed_call(1).ok());  // eager
  REQUIRE(keyed_call(2).ok());  // the first graph (2's)
  REQUIRE(keyed_call(1).ok());  // sets it (1 was eager: not remembered)
  const int destroyed = fake().execs_destroyed;
  // 2 repeats while 1 has set its graph: a second graph, which fails; 2 sets the first one instead.
  fake().instantiate_fails = true;
  size_t mark = fake().events.size();
  REQUIRE(keyed_call(2).ok());
  fake().instantiate_fails = false;
  CHECK(fake().events.back().op == Op::GraphLaunch);
  CHECK(fake().events.back().exec_params == std::vector<uint64_t>{2});
  const auto ev = since(mark);
  CHECK(std::count(ev.begin(), ev.end(), std::pair{Op::SetParams, uint64_t(2)}) == 1);
  CHECK(fake().execs_destroyed == destroyed);  // the first graph kept
  // Not paused: the next repeat of 1 gets the second graph.
  mark = fake().events.size();
  const int instantiated = fake().instantiated;
  REQUIRE(keyed_call(1).ok());
  CHECK(fake().instantiated == instantiated + 1);
  CHECK(fake().events.back().exec_params == std::vector<uint64_t>{1});
  mark = fake().events.size();
  REQUIRE(keyed_call(2).ok());  // as is, on the first graph
  CHECK(since(mark) == Ev{{Op::GraphLaunch, 0}});
  CHECK(fake().events.back().exec_params == std::vector<uint64_t>{2});
}

TEST_CASE("launch graphs: a remembered call's graph destroyed after a failure, or evicted, is not replayed") {
  auto rt = make_runtime();
  auto ks = make_kernels(1);
  const CUstream s = stream_handle(0x81);
  auto keyed_call = [&](const ssd::CallKey& key, uint64_t param, CUstream st) {
    ssd::Status out;
    if (ssd::CallRecording::replay_same_call(*rt, st, key, &out)) return std::pair{true, out};
    ssd::CallRecording rec(*rt, st, true);
    rec.remember_as(key);
    ssd::Status l = launch_with(*ks[0], param, st);
    return std::pair{false, l.ok() ? rec.finish(ssd::Status::Ok()) : l};
  };
  const ssd::CallKey x{2, 1};
  REQUIRE(keyed_call(x, 5, s).second.ok());
  REQUIRE(keyed_call(x, 5, s).second.ok());
  CHECK(keyed_call(x, 5, s).first);
  // Past kMaxSequences other sequences (other streams), x's sequence is evicted: recorded again.
  for (uintptr_t i = 0; i < ssd::LaunchGraphs::kMaxSequences; ++i)
    REQUIRE(keyed_call(ssd::CallKey{3, i}, 5, stream_handle(0x1000 + i)).second.ok());
  CHECK_FALSE(keyed_call(x, 5, s).first);
}
