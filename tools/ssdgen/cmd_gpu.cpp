// GPU subcommands: `bench` (CUDA-event timings, median of many runs) and `check` (the forward
// against the float64 oracle). Both need a driver and a device: without them they exit 6.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "cli.h"
#include "common/float16.h"
#include "config/config.h"
#include "presets.h"
#include "ops/tensor_check.h"
#include "ops/ssd_forward.h"
#include "reference/metrics.h"
#include "ops/ssd_backward.h"
#include "reference/ssd_reference.h"
#include "runtime/runtime.h"

namespace ssdgen {
namespace {

using ssd::cuda::Driver;

// A device allocation that frees itself.
struct DeviceMemory {
  const Driver* drv = nullptr;
  CUdeviceptr ptr = 0;
  size_t bytes = 0;
  ~DeviceMemory() {
    if (ptr) drv->cuMemFree(ptr);
  }
  void* ptr_void() const { return reinterpret_cast<void*>(ptr); }
};

struct Problem {
  int64_t b, L, h, p, g, n;
  int32_t Q;
};

// Inputs of one forward problem (bf16, the Mamba2 layer's options: D per head, dt_bias, softplus).
struct ForwardInputs {
  Problem pr;
  DeviceMemory x, dt, A, B, C, D, bias, out, final_states, ws;
  DeviceMemory z, out_x;  // bench --z only (add_z_gate)
  ssd_forward_layout layout{};
  // Host copies (exact bf16 values) when the oracle needs them.
  std::vector<double> hx, hdt, hA, hB, hC, hD, hbias;
};

ssd::Status alloc(const Driver& drv, DeviceMemory& m, size_t bytes) {
  m.drv = &drv;
  m.bytes = bytes;
  return ssd::cuda::check(drv.cuMemAlloc(&m.ptr, std::max<size_t>(bytes, 4)), "cuMemAlloc");
}

// Fills `count` bf16 values: a random block of up to 4M values, repeated (large problems would
// spend minutes in the host RNG otherwise). `keep` receives the exact values when non-null.
ssd::Status fill_bf16(const Driver& drv, DeviceMemory& m, size_t count, double lo, double hi, bool normal,
                      std::mt19937_64& rng, std::vector<double>* keep) {
  SSD_RETURN_IF_ERROR(alloc(drv, m, count * 2));
  const size_t block = std::min<size_t>(count, size_t(1) << 22);
  std::vector<uint16_t> host(block);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_real_distribution<float> ud{float(lo), float(hi)};
  for (uint16_t& v : host) v = ssd::float_to_bf16(normal ? nd(rng) : ud(rng));
  if (keep) {
    keep->resize(count);
    for (size_t i = 0; i < count; ++i) (*keep)[i] = ssd::bf16_to_float(host[i % block]);
  }
  for (size_t off = 0; off < count; off += block)
    SSD_RETURN_IF_ERROR(ssd::cuda::check(drv.cuMemcpyHtoD(m.ptr + off * 2, host.data(), std::min(block, count - off) * 2),
                                         "cuMemcpyHtoD"));
  return ssd::Status::Ok();
}

ssd::Status fill_f32(const Driver& drv, DeviceMemory& m, size_t count, double lo, double hi, std::mt19937_64& rng,
                     std::vector<double>& keep) {
  SSD_RETURN_IF_ERROR(alloc(drv, m, count * 4));
  std::uniform_real_distribution<float> ud{float(lo), float(hi)};
  std::vector<float> host(count);
  keep.resize(count);
  for (size_t i = 0; i < count; ++i) keep[i] = host[i] = ud(rng);
  return ssd::cuda::check(drv.cuMemcpyHtoD(m.ptr, host.data(), count * 4), "cuMemcpyHtoD");
}

ssd::Status prepare(const Driver& drv, const Problem& pr, bool keep_host, ForwardInputs& in) {
  in.pr = pr;
  std::mt19937_64 rng(std::random_device{}());
  const size_t nx = size_t(pr.b * pr.L * pr.h * pr.p), nbc = size_t(pr.b * pr.L * pr.g * pr.n);
  SSD_RETURN_IF_ERROR(fill_bf16(drv, in.x, nx, 0, 0, true, rng, keep_host ? &in.hx : nullptr));
  SSD_RETURN_IF_ERROR(fill_bf16(drv, in.B, nbc, 0, 0, true, rng, keep_host ? &in.hB : nullptr));
  SSD_RETURN_IF_ERROR(fill_bf16(drv, in.C, nbc, 0, 0, true, rng, keep_host ? &in.hC : nullptr));
  SSD_RETURN_IF_ERROR(fill_bf16(drv, in.dt, size_t(pr.b * pr.L * pr.h), -3.0, 0.5, false, rng, keep_host ? &in.hdt : nullptr));
  SSD_RETURN_IF_ERROR(fill_f32(drv, in.A, size_t(pr.h), -4.0, -0.5, rng, in.hA));
  SSD_RETURN_IF_ERROR(fill_f32(drv, in.D, size_t(pr.h), 0.5, 1.5, rng, in.hD));
  SSD_RETURN_IF_ERROR(fill_f32(drv, in.bias, size_t(pr.h), -3.0, -1.0, rng, in.hbias));
  SSD_RETURN_IF_ERROR(alloc(drv, in.out, nx * 2));
  SSD_RETURN_IF_ERROR(alloc(drv, in.final_states, size_t(pr.b * pr.h * pr.p * pr.n) * 4));
  return ssd::Status::Ok();
}

ssd_forward_args forward_args(const ForwardInputs& in) {
  const Problem& pr = in.pr;
  ssd_forward_args a;
  ssd_forward_args_init(&a);
  a.chunk_size = pr.Q;
  a.dt_softplus = 1;
  a.x = ssd::contiguous_tensor(in.x.ptr_void(), SSD_DTYPE_BF16, {pr.b, pr.L, pr.h, pr.p});
  a.dt = ssd::contiguous_tensor(in.dt.ptr_void(), SSD_DTYPE_BF16, {pr.b, pr.L, pr.h});
  a.A = ssd::contiguous_tensor(in.A.ptr_void(), SSD_DTYPE_FP32, {pr.h});
  a.B = ssd::contiguous_tensor(in.B.ptr_void(), SSD_DTYPE_BF16, {pr.b, pr.L, pr.g, pr.n});
  a.C = ssd::contiguous_tensor(in.C.ptr_void(), SSD_DTYPE_BF16, {pr.b, pr.L, pr.g, pr.n});
  a.D = ssd::contiguous_tensor(in.D.ptr_void(), SSD_DTYPE_FP32, {pr.h});
  a.dt_bias = ssd::contiguous_tensor(in.bias.ptr_void(), SSD_DTYPE_FP32, {pr.h});
  a.out = ssd::contiguous_tensor(in.out.ptr_void(), SSD_DTYPE_BF16, {pr.b, pr.L, pr.h, pr.p});
  a.final_states = ssd::contiguous_tensor(in.final_states.ptr_void(), SSD_DTYPE_FP32, {pr.b, pr.h, pr.p, pr.n});
  a.workspace = reinterpret_cast<void*>(in.ws.ptr);
  a.workspace_bytes = in.ws.bytes;
  return a;
}

struct GpuArgs {
  std::string what, preset = "nemotronh-56b", tiles;
  int64_t batch = -1, seqlen = -1;
  int iters = 100, warmup = 10;
  bool staged = false;  // bench fwd: chunk_state + state_passing instead of the fused state pass
  bool cp_async = false;  // bench: the sm_90a forward kernels' cp.async loaders instead of TMA
  bool fused_intra = false;  // bench bwd: chunk_scan_bwd_dcb_ddA_intra instead of the pair dcb + ddA_intra
  bool p_per_buffer = false;  // bench bwd: a P per slice buffer (BackwardTuning::p_per_buffer)
  bool z = false;       // bench: with the z gate (out = y · silu(z), out_x = y): add_z_gate
  int32_t arch = 0;     // --arch: the kernels' target (0: the device's), e.g. sm_90's mma.sync beside sm_90a's wgmma
  int32_t max_blocks = 0;  // --max-blocks: every grid axis of the timed calls capped (grid-stride kernels)
  int32_t slices = 0, slice_buffers = 0;  // bench bwd --slices / --slice-buffers (0: the default)
};

// " arch sm_90" when --arch was given (the report's header), else "".
std::string arch_note(const GpuArgs& ga) {
  std::string note = ga.arch ? std::string(" arch ") + ssd::arch_name(ssd_arch(ga.arch)) : std::string();
  if (ga.max_blocks) note += fmt::format(" max-blocks {}", ga.max_blocks);
  return note;
}

int parse_gpu_args(Context& ctx, const std::vector<std::string>& args, bool want_what, GpuArgs& out) {
  ArgCursor cur(args);
  while (!cur.done()) {
    if (auto v = cur.value("--preset")) out.preset = *v;
    else if (auto v = cur.value("--tiles")) out.tiles = *v;
    else if (cur.flag("--staged")) out.staged = true;
    else if (cur.flag("--cp-async")) out.cp_async = true;
    else if (cur.flag("--fused-intra")) out.fused_intra = true;
    else if (cur.flag("--p-per-buffer")) out.p_per_buffer = true;
    else if (cur.flag("--z")) out.z = true;
    else if (auto v = cur.value("--arch")) {
      auto a = ssd::parse_arch(*v);
      if (!a.ok()) return fail(ctx, a.status());
      out.arch = int32_t(a.value());
    }
    else if (auto v = cur.value("--batch")) {
      auto n = parse_positive_int(*v, "--batch", 1 << 16);
      if (!n.ok()) return fail(ctx, n.status());
      out.batch = n.value();
    } else if (auto v = cur.value("--seqlen")) {
      auto n = parse_positive_int(*v, "--seqlen", 1 << 24);
      if (!n.ok()) return fail(ctx, n.status());
      out.seqlen = n.value();
    } else if (auto v = cur.value("--slices")) {
      auto n = parse_positive_int(*v, "--slices", 1 << 16);
      if (!n.ok()) return fail(ctx, n.status());
      out.slices = int32_t(n.value());
    } else if (auto v = cur.value("--slice-buffers")) {
      auto n = parse_positive_int(*v, "--slice-buffers", 1 << 16);
      if (!n.ok()) return fail(ctx, n.status());
      out.slice_buffers = int32_t(n.value());
    } else if (auto v = cur.value("--max-blocks")) {
      auto n = parse_positive_int(*v, "--max-blocks", 65535);
      if (!n.ok()) return fail(ctx, n.status());
      out.max_blocks = int32_t(n.value());
    } else if (auto v = cur.value("--iters")) {
      auto n = parse_positive_int(*v, "--iters", 100000);
      if (!n.ok()) return fail(ctx, n.status());
      out.iters = n.value();
    } else if (auto v = cur.value("--warmup")) {
      auto n = parse_positive_int(*v, "--warmup", 100000);
      if (!n.ok()) return fail(ctx, n.status());
      out.warmup = n.value();
    } else if (cur.at_option()) {
      return usage_error(ctx, "unknown option '" + cur.peek() + "'");
    } else if (want_what && out.what.empty()) {
      out.what = cur.take();
    } else {
      return usage_error(ctx, "unexpected argument '" + cur.peek() + "'");
    }
  }
  if (cur.error()) return usage_error(ctx, *cur.error());
  return -1;
}

// A named tile slot of --tiles ("dx" -> BackwardTuning::dx).
struct TileSlot {
  const char* name;
  ssd_tile* tile;
};

// "NAME=MxNxK,NAME=MxN,NAME=M": fills the named slots. `noun` is what a name names (stage, kernel)
// and `legal_label` introduces the list of names in the error.
ssd::Status parse_tile_items(const std::string& text, const std::string& noun, const std::string& legal_label,
                             const std::vector<TileSlot>& slots) {
  std::string legal, upper = noun;
  for (const TileSlot& slot : slots) legal += (legal.empty() ? "" : ", ") + std::string(slot.name);
  for (char& ch : upper) ch = char(std::toupper(static_cast<unsigned char>(ch)));
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(start, end - start);
    const size_t eq = item.find('=');
    int m = 0, n = 0, k = 0;
    if (eq == std::string::npos || std::sscanf(item.c_str() + eq + 1, "%dx%dx%d", &m, &n, &k) < 1)
      return ssd::make_error(SSD_ERROR_INVALID_ARGUMENT,
                             "--tiles: expected " + upper + "=MxNxK items, got '" + item + "'");
    const std::string name = item.substr(0, eq);
    ssd_tile* target = nullptr;
    for (const TileSlot& slot : slots)
      if (name == slot.name) target = slot.tile;
    if (!target)
      return ssd::make_error(SSD_ERROR_INVALID_ARGUMENT,
                             "--tiles: " + noun + " '" + name + "' (" + legal_label + ": " + legal + ")");
    *target = ssd_tile{m, n, k, 0, 0};
    start = end + 1;
  }
  return ssd::Status::Ok();
}

// "scan=64x64x32,state_pass=64x128x32,bmm=64x64,state=..,passing=256": per-stage tile overrides.
ssd::Result<ssd::ForwardTuning> parse_tiles(const std::string& text) {
  ssd::ForwardTuning t;
  SSD_RETURN_IF_ERROR(parse_tile_items(text, "stage", "legal",
                                       {{"scan", &t.scan}, {"state_pass", &t.state_pass}, {"bmm", &t.bmm},
                                        {"state", &t.state}, {"passing", &t.passing}}));
  return t;
}

// "dx=64x0x32,dcb=64x64x32,...,cumsum=64x32": per-kernel tile overrides of the backward;
// recompute_state_pass= / recompute_bmm= set the recompute's forward kernels' tiles.
ssd::Result<ssd::BackwardTuning> parse_bwd_tiles(const std::string& text) {
  ssd::BackwardTuning t;
  SSD_RETURN_IF_ERROR(parse_tile_items(text, "kernel", "legal for bwd",
                                       {{"dstates", &t.dstates}, {"passing", &t.passing}, {"state_pass", &t.state_pass}, {"dx", &t.dx}, {"dcb", &t.dcb},
                                        {"intra", &t.intra}, {"dcb_intra", &t.dcb_intra}, {"db", &t.db}, {"dc", &t.dc}, {"dda", &t.dda},
                                        {"cumsum", &t.cumsum}, {"recompute_state_pass", &t.forward.state_pass},
                                        {"recompute_bmm", &t.forward.bmm}}));
  return t;
}

// What bench and check share: driver, context, a deterministic runtime, the preset's inputs
// (random bf16, the Mamba2 layer's options) and a workspace.
struct GpuSession {
  const Driver* drv = nullptr;
  std::unique_ptr<ssd_runtime> rt;
  ModelPreset preset;
  ForwardInputs in;
  ssd_forward_args args{};
  ssd_forward_layout layout{};
};

ssd::Status open_session(const GpuArgs& ga, bool keep_host, GpuSession& s) {
  SSD_ASSIGN_OR_RETURN(s.preset, find_preset(ga.preset));
  SSD_ASSIGN_OR_RETURN(s.drv, ssd::cuda::driver());
  SSD_RETURN_IF_ERROR(ssd::cuda::current_context().status());
  ssd_runtime_options ro{};
  ro.struct_size = sizeof(ro);
  ro.mode = SSD_MODE_DETERMINISTIC;
  ro.cache_mode = -1;
  ro.launch_graphs = 0;  // the C API's default: the host path measures what a caller gets
  ro.arch = ga.arch;
  SSD_ASSIGN_OR_RETURN(s.rt, ssd::create_runtime(ro));
  const ModelPreset& m = s.preset;
  const Problem pr{ga.batch, ga.seqlen, m.nheads, m.headdim, m.ngroups, m.dstate, m.chunk_size};
  SSD_RETURN_IF_ERROR(prepare(*s.drv, pr, keep_host, s.in));
  ssd_forward_args a = forward_args(s.in);
  SSD_ASSIGN_OR_RETURN(s.layout, ssd::forward_layout(&a));
  SSD_RETURN_IF_ERROR(alloc(*s.drv, s.in.ws, s.layout.total_bytes));
  s.args = forward_args(s.in);
  return ssd::Status::Ok();
}

// bench --z: random bf16 z, and out_x (y before gating: the forward writes it, the backward reads it;
// random values are enough for timing), bound to the session's forward args, which both benches
// start from.
ssd::Status add_z_gate(GpuSession& s) {
  const Problem& pr = s.in.pr;
  const size_t nx = size_t(pr.b * pr.L * pr.h * pr.p);
  std::mt19937_64 rng(std::random_device{}());
  SSD_RETURN_IF_ERROR(fill_bf16(*s.drv, s.in.z, nx, 0, 0, true, rng, nullptr));
  SSD_RETURN_IF_ERROR(fill_bf16(*s.drv, s.in.out_x, nx, 0, 0, true, rng, nullptr));
  s.args.z = ssd::contiguous_tensor(s.in.z.ptr_void(), SSD_DTYPE_BF16, {pr.b, pr.L, pr.h, pr.p});
  s.args.out_x = ssd::contiguous_tensor(s.in.out_x.ptr_void(), SSD_DTYPE_BF16, {pr.b, pr.L, pr.h, pr.p});
  return ssd::Status::Ok();
}

double median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// A C-API status as a Status with the call's detail.
ssd::Status api_status(ssd_status st) {
  return st == SSD_OK ? ssd::Status::Ok() : ssd::make_error(st, ssd_last_error_detail());
}

// The host path of one call (issues 9 and 10: <= 20 us of CPU with the kernels loaded): `call`
// (one C-API call with the workspace given, or one graph launch) back-to-back, the thread's CPU time
// (CLOCK_THREAD_CPUTIME_ID) per call. Two untimed calls first: the first loads what the timed ones
// use and records the call's launch sequence, the second instantiates its launch graph
// (runtime/launch_graph.h; with SSD_LAUNCH_GRAPHS=0 both launch eagerly). Nothing
// is waited for inside a round; between rounds the stream is drained, untimed, so a round's
// launches stay below the launch queue's depth (a full queue blocks the launching thread, and
// that wait is not the host path).
struct HostPath {
  double cpu_us = 0, wall_us = 0;  // per call
  std::string graphs;              // what the runtime's launch graphs did in the calls (bench bwd)
};

// The launch-graph counters' change over some calls, as text (empty without graphs).
std::string graph_counter_delta(const ssd::LaunchGraphs::Counters& a, const ssd::LaunchGraphs::Counters& b) {
  return fmt::format("graphs: {} replays ({} of the same call as is), {} nodes updated, {} instantiated, {} eager",
                     b.replays - a.replays, b.same_call_replays - a.same_call_replays, b.nodes_updated - a.nodes_updated,
                     b.instantiated - a.instantiated, b.eager - a.eager);
}
ssd::Status measure_host_path(const Driver& drv, CUstream stream, int rounds, int calls_per_round,
                              const std::function<ssd::Status()>& call, HostPath& out) {
  auto drain = [&] { return ssd::cuda::check(drv.cuStreamSynchronize(stream), "cuStreamSynchronize"); };
  SSD_RETURN_IF_ERROR(call());
  SSD_RETURN_IF_ERROR(call());
  SSD_RETURN_IF_ERROR(drain());
  auto us = [](const timespec& t0, const timespec& t1) {
    return (double(t1.tv_sec - t0.tv_sec) * 1e9 + double(t1.tv_nsec - t0.tv_nsec)) / 1e3;
  };
  double cpu = 0, wall = 0;
  for (int r = 0; r < rounds; ++r) {
    timespec cpu0{}, cpu1{}, wall0{}, wall1{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu0);
    clock_gettime(CLOCK_MONOTONIC, &wall0);
    for (int i = 0; i < calls_per_round; ++i) SSD_RETURN_IF_ERROR(call());
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu1);
    clock_gettime(CLOCK_MONOTONIC, &wall1);
    cpu += us(cpu0, cpu1);
    wall += us(wall0, wall1);
    SSD_RETURN_IF_ERROR(drain());
  }
  out.cpu_us = cpu / (rounds * calls_per_round);
  out.wall_us = wall / (rounds * calls_per_round);
  return ssd::Status::Ok();
}

// The same call captured once into a CUDA graph (global capture mode, the workspace given) and
// replayed back-to-back with cuGraphLaunch, measured as measure_host_path measures calls: the host
// cost per step of a caller that captures instead of calling.
ssd::Status measure_graph_replay(const Driver& drv, CUstream stream, int rounds, int replays_per_round,
                                 const std::function<ssd::Status()>& call, HostPath& out) {
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  ssd::Status s = ssd::cuda::check(drv.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL),
                                   "cuStreamBeginCapture");
  if (s.ok()) {
    s = call();
    const CUresult end = drv.cuStreamEndCapture(stream, &graph);  // always ended: the stream stays usable
    if (s.ok()) s = ssd::cuda::check(end, "cuStreamEndCapture");
  }
  if (s.ok()) s = ssd::cuda::check(drv.cuGraphInstantiateWithFlags(&exec, graph, 0), "cuGraphInstantiateWithFlags");
  if (s.ok())
    s = measure_host_path(drv, stream, rounds, replays_per_round, [&] {
      return ssd::cuda::check(drv.cuGraphLaunch(exec, stream), "cuGraphLaunch");
    }, out);
  if (exec) drv.cuGraphExecDestroy(exec);
  if (graph) drv.cuGraphDestroy(graph);
  return s;
}

// `bench bwd`: the whole backward and each of its stages, deterministic then fast mode.
// Event timing of one operation with `stages` stages: `call(after_stage)` runs it once on `stream`
// (after_stage(i) once stage i is enqueued; a stage may report several times, once per group slice
// of the backward: its time is the sum of the intervals that end at its reports); warm-up calls
// first, then `iters` timed ones, each waited for. ev: the event pool (grown as needed).
struct StageTimes {
  std::vector<float> total;               // ms of each timed call
  std::vector<std::vector<float>> stage;  // [stage] ms of each timed call
};
ssd::Status time_stages(const Driver& drv, CUstream stream, std::vector<CUevent>& ev, int stages, int warmup, int iters,
                        const std::function<ssd::Status(const std::function<void(int)>&)>& call, StageTimes& out) {
  out.total.clear();
  out.stage.assign(stages, {});
  std::vector<int> reported;  // the stage of each event after the first
  for (int it = 0; it < warmup + iters; ++it) {
    reported.clear();
    drv.cuEventRecord(ev[0], stream);
    ssd::Status recorded;
    SSD_RETURN_IF_ERROR(call([&](int i) {
      const size_t e = reported.size() + 1;
      if (e == ev.size()) {
        ev.emplace_back();
        if (recorded.ok()) recorded = ssd::cuda::check(drv.cuEventCreate(&ev.back(), CU_EVENT_DEFAULT), "cuEventCreate");
      }
      drv.cuEventRecord(ev[e], stream);
      reported.push_back(i);
    }));
    SSD_RETURN_IF_ERROR(recorded);
    const CUevent last = ev[reported.size()];
    SSD_RETURN_IF_ERROR(ssd::cuda::check(drv.cuEventSynchronize(last), "cuEventSynchronize"));
    if (it < warmup) continue;
    float ms = 0;
    drv.cuEventElapsedTime(&ms, ev[0], last);
    out.total.push_back(ms);
    std::vector<float> sum(size_t(stages), 0.0f);
    for (size_t e = 0; e < reported.size(); ++e) {
      drv.cuEventElapsedTime(&ms, ev[e], ev[e + 1]);
      if (reported[e] >= 0 && reported[e] < stages) sum[size_t(reported[e])] += ms;
    }
    for (int i = 0; i < stages; ++i) out.stage[size_t(i)].push_back(sum[size_t(i)]);
  }
  return ssd::Status::Ok();
}

// The median ms of `iters` calls of `call` after `warmup`, each between two events and waited for:
// the whole call as it runs without stage events (the backward: one launch graph replay).
ssd::Status time_calls(const Driver& drv, CUstream stream, int warmup, int iters, const std::function<ssd::Status()>& call,
                       float& median_ms) {
  CUevent e0, e1;
  drv.cuEventCreate(&e0, CU_EVENT_DEFAULT);
  drv.cuEventCreate(&e1, CU_EVENT_DEFAULT);
  std::vector<float> ms;
  ssd::Status s;
  for (int it = 0; it < warmup + iters && s.ok(); ++it) {
    drv.cuEventRecord(e0, stream);
    s = call();
    drv.cuEventRecord(e1, stream);
    if (s.ok()) s = ssd::cuda::check(drv.cuEventSynchronize(e1), "cuEventSynchronize");
    float t = 0;
    drv.cuEventElapsedTime(&t, e0, e1);
    if (it >= warmup) ms.push_back(t);
  }
  drv.cuEventDestroy(e0);
  drv.cuEventDestroy(e1);
  median_ms = ms.empty() ? 0.0f : median(ms);
  return s;
}

int bench_backward(Context& ctx, const GpuArgs& ga, GpuSession& session, const ssd::BackwardTuning& tuning) {
  const Driver& drv = *session.drv;
  const ModelPreset& m = session.preset;
  const Problem& pr = session.in.pr;
  const size_t nx = size_t(pr.b * pr.L * pr.h * pr.p), nbc = size_t(pr.b * pr.L * pr.g * pr.n);
  std::mt19937_64 rng(std::random_device{}());
  DeviceMemory dout, dx, ddt, dA, dB, dC, dD, dbias, ws, dz;
  if (ssd::Status st = fill_bf16(drv, dout, nx, 0, 0, true, rng, nullptr); !st.ok()) return fail(ctx, st);
  if (ga.z) {
    if (ssd::Status st = alloc(drv, dz, nx * 2); !st.ok()) return fail(ctx, st);
  }
  for (auto [mem, bytes] : {std::pair<DeviceMemory*, size_t>{&dx, nx * 2}, {&ddt, size_t(pr.b * pr.L * pr.h) * 2},
                            {&dA, size_t(pr.h) * 4}, {&dB, nbc * 2}, {&dC, nbc * 2}, {&dD, size_t(pr.h) * 4},
                            {&dbias, size_t(pr.h) * 4}})
    if (ssd::Status st = alloc(drv, *mem, bytes); !st.ok()) return fail(ctx, st);
  const ssd_forward_args& f = session.args;
  ssd_backward_args a;
  ssd_backward_args_init(&a);
  a.chunk_size = f.chunk_size;
  a.dt_softplus = f.dt_softplus;
  a.x = f.x; a.dt = f.dt; a.A = f.A; a.B = f.B; a.C = f.C; a.D = f.D; a.dt_bias = f.dt_bias;
  a.dout = ssd::contiguous_tensor(dout.ptr_void(), SSD_DTYPE_BF16, {pr.b, pr.L, pr.h, pr.p});
  a.dx = ssd::contiguous_tensor(dx.ptr_void(), SSD_DTYPE_BF16, {pr.b, pr.L, pr.h, pr.p});
  a.ddt = ssd::contiguous_tensor(ddt.ptr_void(), SSD_DTYPE_BF16, {pr.b, pr.L, pr.h});
  a.dA = ssd::contiguous_tensor(dA.ptr_void(), SSD_DTYPE_FP32, {pr.h});
  a.dB = ssd::contiguous_tensor(dB.ptr_void(), SSD_DTYPE_BF16, {pr.b, pr.L, pr.g, pr.n});
  a.dC = ssd::contiguous_tensor(dC.ptr_void(), SSD_DTYPE_BF16, {pr.b, pr.L, pr.g, pr.n});
  a.dD = ssd::contiguous_tensor(dD.ptr_void(), SSD_DTYPE_FP32, {pr.h});
  a.ddt_bias = ssd::contiguous_tensor(dbias.ptr_void(), SSD_DTYPE_FP32, {pr.h});
  if (ga.z) {  // z and out_x from add_z_gate
    a.z = f.z;
    a.out_x = f.out_x;
    a.dz = ssd::contiguous_tensor(dz.ptr_void(), SSD_DTYPE_BF16, {pr.b, pr.L, pr.h, pr.p});
  }
  // The larger of the two rows' layouts (the fast kernels' has a dP section the fused state pass does
  // not need; --staged's has it in both), and at least the C API's size (the host-path rows).
  size_t ws_bytes = 0;
  for (bool fast_kernels : {false, true}) {
    ssd::BackwardTuning tn = tuning;
    tn.fast_kernels = fast_kernels;
    auto l = ssd::backward_layout(&a, fast_kernels ? SSD_MODE_FAST : SSD_MODE_DETERMINISTIC, &tn);
    if (!l.ok()) return fail(ctx, l.status());
    ws_bytes = std::max(ws_bytes, l->total);
  }
  {
    auto l = ssd::backward_layout(&a, SSD_MODE_DETERMINISTIC);
    if (!l.ok()) return fail(ctx, l.status());
    ws_bytes = std::max(ws_bytes, l->total);
  }
  if (ssd::Status st = alloc(drv, ws, ws_bytes); !st.ok()) return fail(ctx, st);
  char dev_name[256] = {0};
  CUdevice dev;
  drv.cuCtxGetDevice(&dev);
  drv.cuDeviceGetName(dev_name, sizeof(dev_name), dev);
  CUstream stream;
  drv.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
  constexpr int kStages = ssd::kBwdStageCount;
  std::vector<CUevent> ev(kStages + 1);
  for (CUevent& e : ev) drv.cuEventCreate(&e, CU_EVENT_DEFAULT);
  nlohmann::json out_json{{"what", "bwd"}, {"preset", m.name}, {"batch", pr.b}, {"seqlen", pr.L},
                          {"iters", ga.iters}, {"z", ga.z}, {"device", dev_name}, {"staged", tuning.staged_state_pass},
                          {"fused_intra", tuning.fused_dcb_intra}};
  for (ssd_mode mode : {SSD_MODE_DETERMINISTIC, SSD_MODE_FAST}) {
    a.mode = mode;
    // Fast mode runs the deterministic kernels (backward_kernel_mode); the fast row times the fast
    // (atomic) kernels themselves, which is what decides that choice.
    ssd::BackwardTuning tn = tuning;
    tn.fast_kernels = mode == SSD_MODE_FAST;
    auto l = ssd::backward_layout(&a, mode, &tn);
    if (!l.ok()) return fail(ctx, l.status());
    StageTimes times;
    ssd::Status s = time_stages(drv, stream, ev, kStages, ga.warmup, ga.iters, [&](const std::function<void(int)>& after_stage) {
      return ssd::ssd_backward(*session.rt, &a, ws.ptr_void(), ws_bytes, stream, &tn, after_stage);
    }, times);
    if (!s.ok()) return fail(ctx, s);
    // The same call without stage events: its launches as one launch graph (from the second call
    // on), group slices side by side where they have their own buffers.
    float graph_ms = 0;
    s = time_calls(drv, stream, ga.warmup, ga.iters, [&] {
      return ssd::ssd_backward(*session.rt, &a, ws.ptr_void(), ws_bytes, stream, &tn);
    }, graph_ms);
    if (!s.ok()) return fail(ctx, s);
    // The host path (issue 10), once, with the deterministic pass: a C-API call runs the
    // deterministic kernels in either mode (the fast ones only through BackwardTuning), the default
    // tiles whatever --tiles chose. 15 kernels per call, so 20 calls per round stay within the 400
    // queued operations of bench fwd's single round of 100 calls. Then the same call replayed from a
    // captured graph.
    constexpr int kHostRounds = 5, kHostCallsPerRound = 20;
    const bool with_host_path = mode == SSD_MODE_DETERMINISTIC;
    HostPath host, alternating, replay;
    if (with_host_path) {
      auto one_call = [&] { return api_status(::ssd_backward(session.rt.get(), &a, ws.ptr_void(), ws_bytes, stream)); };
      auto counters = [&] {
        return session.rt->graphs ? session.rt->graphs->counters() : ssd::LaunchGraphs::Counters{};
      };
      ssd::LaunchGraphs::Counters c0 = counters();
      s = measure_host_path(drv, stream, kHostRounds, kHostCallsPerRound, one_call, host);
      host.graphs = graph_counter_delta(c0, counters());
      // Two workspaces taking turns: each call's parameters differ from the previous call's (calls
      // that alternate, like a model's layers): from the second repeat on each call replays a graph
      // of its own (runtime/launch_graph.h); the counters say what happened.
      DeviceMemory ws2;
      if (s.ok()) s = alloc(drv, ws2, ws_bytes);
      int turn = 0;
      auto alternating_call = [&] {
        void* w = (turn++ & 1) ? ws2.ptr_void() : ws.ptr_void();
        return api_status(::ssd_backward(session.rt.get(), &a, w, ws_bytes, stream));
      };
      c0 = counters();
      if (s.ok()) s = measure_host_path(drv, stream, kHostRounds, kHostCallsPerRound, alternating_call, alternating);
      alternating.graphs = graph_counter_delta(c0, counters());
      if (s.ok()) s = measure_graph_replay(drv, stream, kHostRounds, kHostCallsPerRound, one_call, replay);
      if (!s.ok()) return fail(ctx, s);
    }
    const std::vector<float>& total = times.total;
    const std::vector<std::vector<float>>& stage = times.stage;
    const char* mname = mode == SSD_MODE_DETERMINISTIC ? "deterministic" : "fast kernels";
    if (ctx.json) {
      nlohmann::json j{{"median_ms", median(total)}, {"graph_median_ms", graph_ms}, {"workspace_bytes", l->total},
                       {"group_slices", l->slices}, {"slice_buffers", l->buffers}};
      if (with_host_path) {
        j["host_cpu_us_per_call"] = host.cpu_us;
        j["host_wall_us_per_call"] = host.wall_us;
        j["host_alternating_cpu_us_per_call"] = alternating.cpu_us;
        j["graph_replay_cpu_us_per_call"] = replay.cpu_us;
        j["graph_replay_wall_us_per_call"] = replay.wall_us;
      }
      for (int i = 0; i < kStages; ++i) j["stages_median_ms"][ssd::backward_stage_name(i)] = median(stage[i]);
      out_json[mname] = j;
    } else {
      fmt::print("bench bwd {} b={} L={} on {} ({}, bf16, D, dt_bias, softplus{}; median of {} after {} warm-up){}{}{}\n",
                 m.name, pr.b, pr.L, dev_name, mname, ga.z ? ", z" : "", ga.iters, ga.warmup, ga.tiles.empty() ? "" : " tiles " + ga.tiles,
                 std::string(tuning.staged_state_pass ? " staged state pass" : "") +
                     (tuning.fused_dcb_intra ? " fused dcb + ddA_intra" : ""),
                 arch_note(ga));
      for (int i = 0; i < kStages; ++i) fmt::print("  {:<42} {:8.3f} ms\n", ssd::backward_stage_name(i), median(stage[i]));
      fmt::print("  {:<42} {:8.3f} ms   (workspace {}: {} group slice{}, {} buffer{})\n", "total", median(total),
                 format_bytes(l->total), l->slices, l->slices == 1 ? "" : "s", l->buffers, l->buffers == 1 ? "" : "s");
      fmt::print("  {:<42} {:8.3f} ms\n", "total, one launch graph (no stage events)", graph_ms);
      if (with_host_path) {
        fmt::print("  host path: {:.1f} us of CPU per call ({:.1f} us wall; {} back-to-back ssd_backward calls in {} "
                   "rounds, C API, workspace given, kernels loaded; {})\n", host.cpu_us, host.wall_us,
                   kHostRounds * kHostCallsPerRound, kHostRounds, host.graphs);
        fmt::print("  host path, two workspaces taking turns: {:.1f} us of CPU per call ({:.1f} us wall; {})\n",
                   alternating.cpu_us, alternating.wall_us, alternating.graphs);
        fmt::print("  graph replay: {:.1f} us of CPU per call ({:.1f} us wall; the same call captured once, {} "
                   "back-to-back cuGraphLaunch)\n", replay.cpu_us, replay.wall_us, kHostRounds * kHostCallsPerRound);
      }
    }
  }
  for (CUevent& e : ev) drv.cuEventDestroy(e);
  drv.cuStreamDestroy(stream);
  if (ctx.json) print_json(out_json);
  return kExitOk;
}

}  // namespace

int cmd_bench(Context& ctx, const std::vector<std::string>& args) {
  GpuArgs ga;
  ga.batch = 4;
  ga.seqlen = 2048;
  if (int rc = parse_gpu_args(ctx, args, true, ga); rc >= 0) return rc;
  if (ga.what != "fwd" && ga.what != "bwd")
    return usage_error(ctx, "bench: what to time? 'fwd' (the SSD forward) or 'bwd' (the SSD backward)");
  if (ga.what == "bwd") {
    auto tuning = parse_bwd_tiles(ga.tiles);  // no --tiles: the defaults
    if (!tuning.ok()) return fail(ctx, tuning.status());
    tuning->forward.staged_states = ga.staged;  // the recompute's states
    tuning->staged_state_pass = ga.staged;      // dstates + state_passing_bwd instead of the fused kernel
    tuning->fused_dcb_intra = ga.fused_intra;   // the fused dcb + ddA_intra instead of the pair
    tuning->forward.cp_async = ga.cp_async;     // the recompute's state pass with cp.async stages
    tuning->cp_async = ga.cp_async;             // and the backward's fused state pass and dx
    tuning->max_blocks = ga.max_blocks;         // 0: one block per work item
    tuning->group_slices = ga.slices;           // 0: the default slicing
    tuning->slice_buffers = ga.slice_buffers;
    tuning->p_per_buffer = ga.p_per_buffer;
    GpuSession session;
    if (ssd::Status st = open_session(ga, false, session); !st.ok()) return fail(ctx, st);
    if (ga.z) {
      if (ssd::Status st = add_z_gate(session); !st.ok()) return fail(ctx, st);
    }
    return bench_backward(ctx, ga, session, tuning.value());
  }
  auto parsed_tiles = parse_tiles(ga.tiles);
  if (!parsed_tiles.ok()) return fail(ctx, parsed_tiles.status());
  ssd::ForwardTuning tiles = parsed_tiles.value();
  tiles.staged_states = ga.staged;
  tiles.cp_async = ga.cp_async;
  tiles.max_blocks = ga.max_blocks;  // (ssd_forward does not read the C API options' max_blocks)
  GpuSession session;
  if (ssd::Status st = open_session(ga, false, session); !st.ok()) return fail(ctx, st);
  if (ga.z) {
    if (ssd::Status st = add_z_gate(session); !st.ok()) return fail(ctx, st);
  }
  const Driver& drv = *session.drv;
  const ModelPreset& m = session.preset;
  const Problem& pr = session.in.pr;
  ssd_forward_args a = session.args;
  const ssd_forward_layout* layout = &session.layout;
  // The staged path keeps P in fp32: a larger states section than ssd_forward_workspace_layout's.
  DeviceMemory staged_ws;
  ssd_forward_layout staged_layout{};
  if (ga.staged) {
    auto l = ssd::forward_layout(&a, &tiles);
    if (!l.ok()) return fail(ctx, l.status());
    staged_layout = l.value();
    if (ssd::Status st = alloc(drv, staged_ws, staged_layout.total_bytes); !st.ok()) return fail(ctx, st);
    a.workspace = staged_ws.ptr_void();
    a.workspace_bytes = staged_layout.total_bytes;
    layout = &staged_layout;
  }
  CUstream stream;
  drv.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
  constexpr int kStages = ssd::kForwardStages;
  std::vector<CUevent> ev(kStages + 1);
  for (CUevent& e : ev) drv.cuEventCreate(&e, CU_EVENT_DEFAULT);
  StageTimes times;
  ssd::Status timed = time_stages(drv, stream, ev, kStages, ga.warmup, ga.iters, [&](const std::function<void(int)>& after_stage) {
    return ssd::ssd_forward(*session.rt, &a, nullptr, stream, after_stage, &tiles);
  }, times);
  if (!timed.ok()) return fail(ctx, timed);
  const std::vector<float>& total = times.total;
  const std::vector<std::vector<float>>& stage = times.stage;
  // The host path (issue 9: <= 20 us of CPU per call with the kernels loaded): back-to-back calls
  // through the C API (the library's default path, whatever --tiles and --staged chose above) with
  // the workspace given, the thread's CPU time per call. Nothing is waited for between calls; 100
  // calls (400 launches) stay below the launch queue's depth.
  constexpr int kHostCalls = 100;
  HostPath host, alternating;
  {
    auto one_call = [&] { return api_status(::ssd_forward(session.rt.get(), &a, nullptr, stream)); };
    ssd::Status hs = measure_host_path(drv, stream, 1, kHostCalls, one_call, host);
    // Two workspaces taking turns: calls that alternate, each replaying a graph of its own.
    DeviceMemory ws2;
    if (hs.ok()) hs = alloc(drv, ws2, a.workspace_bytes);
    ssd_forward_args a2 = a;
    a2.workspace = ws2.ptr_void();
    int turn = 0;
    auto alternating_call = [&] {
      return api_status(::ssd_forward(session.rt.get(), (turn++ & 1) ? &a2 : &a, nullptr, stream));
    };
    if (hs.ok()) hs = measure_host_path(drv, stream, 1, kHostCalls, alternating_call, alternating);
    if (!hs.ok()) return fail(ctx, hs);
  }
  for (CUevent& e : ev) drv.cuEventDestroy(e);
  drv.cuStreamDestroy(stream);

  const char* const* names = ssd::kForwardStageNames;
  // The stages that ran: the plan's kernels for this call (a skipped stage still reports its event).
  auto arch = ssd::runtime_arch(*session.rt);
  if (!arch.ok()) return fail(ctx, arch.status());
  auto ran_configs = ssd::forward_kernel_configs(&a, arch.value(), SSD_MODE_DETERMINISTIC, &tiles);
  if (!ran_configs.ok()) return fail(ctx, ran_configs.status());
  auto ran = [&](int i) {
    return std::any_of(ran_configs->begin(), ran_configs->end(), [&](const ssd_kernel_config& k) {
      return std::strcmp(ssd::kernel_name(k.kernel), names[i]) == 0;
    });
  };
  char dev_name[256] = {0};
  CUdevice dev;
  drv.cuCtxGetDevice(&dev);
  drv.cuDeviceGetName(dev_name, sizeof(dev_name), dev);
  if (ctx.json) {
    nlohmann::json j{{"what", "fwd"}, {"preset", m.name}, {"batch", pr.b}, {"seqlen", pr.L}, {"iters", ga.iters}, {"z", ga.z},
                     {"device", dev_name}, {"cp_async", ga.cp_async}, {"median_ms", median(total)}, {"workspace_bytes", layout->total_bytes},
                     {"host_cpu_us_per_call", host.cpu_us}, {"host_wall_us_per_call", host.wall_us},
                     {"host_alternating_cpu_us_per_call", alternating.cpu_us}};
    for (int i = 0; i < kStages; ++i)
      if (ran(i)) j["stages_median_ms"][names[i]] = median(stage[i]);
    print_json(j);
  } else {
    fmt::print("bench fwd {} b={} L={} on {} (deterministic, bf16, D, dt_bias, softplus{}; median of {} after {} warm-up){}{}{}\n",
               m.name, pr.b, pr.L, dev_name, ga.z ? ", z" : "", ga.iters, ga.warmup, ga.tiles.empty() ? "" : " tiles " + ga.tiles,
               std::string(ga.staged ? " staged states" : "") + (ga.cp_async ? " cp.async loaders" : ""), arch_note(ga));
    for (int i = 0; i < kStages; ++i)
      if (ran(i)) fmt::print("  {:<23} {:8.3f} ms\n", names[i], median(stage[i]));
    fmt::print("  {:<23} {:8.3f} ms   (workspace {})\n", "total", median(total), format_bytes(layout->total_bytes));
    fmt::print("  host path: {:.1f} us of CPU per call ({:.1f} us wall; {} back-to-back ssd_forward calls, C API, "
               "workspace given, kernels loaded)\n", host.cpu_us, host.wall_us, kHostCalls);
    fmt::print("  host path, two workspaces taking turns: {:.1f} us of CPU per call ({:.1f} us wall)\n",
               alternating.cpu_us, alternating.wall_us);
  }
  return kExitOk;
}

int cmd_check(Context& ctx, const std::vector<std::string>& args) {
  GpuArgs ga;
  ga.batch = 1;
  ga.seqlen = 512;
  if (int rc = parse_gpu_args(ctx, args, false, ga); rc >= 0) return rc;
  GpuSession session;
  if (ssd::Status st = open_session(ga, true, session); !st.ok()) return fail(ctx, st);
  const Driver& drv = *session.drv;
  const ModelPreset& m = session.preset;
  ForwardInputs& in = session.in;
  const Problem& pr = in.pr;
  const ssd_forward_args& a = session.args;
  drv.cuMemsetD8(in.out.ptr, 0xFF, in.out.bytes);  // poison: unwritten elements stay NaN
  drv.cuMemsetD8(in.final_states.ptr, 0xFF, in.final_states.bytes);
  if (ssd::Status s = ssd::ssd_forward(*session.rt, &a, nullptr, nullptr); !s.ok()) return fail(ctx, s);
  if (ssd::Status s = ssd::cuda::check(drv.cuCtxSynchronize(), "cuCtxSynchronize"); !s.ok()) return fail(ctx, s);

  std::vector<uint16_t> out16(in.out.bytes / 2);
  std::vector<float> fin32(in.final_states.bytes / 4);
  drv.cuMemcpyDtoH(out16.data(), in.out.ptr, in.out.bytes);
  drv.cuMemcpyDtoH(fin32.data(), in.final_states.ptr, in.final_states.bytes);
  std::vector<double> out(out16.size()), fin(fin32.begin(), fin32.end());
  for (size_t i = 0; i < out.size(); ++i) out[i] = ssd::bf16_to_float(out16[i]);

  ssd::ref::SsdProblem q;
  q.sz = {pr.b, pr.L, pr.h, pr.p, pr.g, pr.n, pr.Q};
  q.x = in.hx.data(); q.dt = in.hdt.data(); q.A = in.hA.data(); q.B = in.hB.data(); q.C = in.hC.data();
  q.D = in.hD.data(); q.dt_bias = in.hbias.data(); q.dt_softplus = true;
  const auto t0 = std::chrono::steady_clock::now();
  const ssd::ref::SsdForwardResult ref = ssd::ref::forward_chunked(q);
  const double oracle_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double e_out = ssd::ref::rel_l2(out.data(), ref.out.data(), out.size());
  const double e_fin = ssd::ref::rel_l2(fin.data(), ref.final_states.data(), fin.size());
  const bool ok = std::isfinite(e_out) && std::isfinite(e_fin) && e_out < 3e-3 && e_fin < 3e-3;
  if (ctx.json) {
    print_json({{"preset", m.name}, {"batch", pr.b}, {"seqlen", pr.L}, {"rel_l2", {{"out", e_out}, {"final_states", e_fin}}},
                {"tolerance", 3e-3}, {"ok", ok}});
  } else {
    fmt::print("check fwd {} b={} L={} (bf16, D, dt_bias, softplus) vs float64 oracle ({:.1f} s):\n", m.name, pr.b,
               pr.L, oracle_s);
    fmt::print("  out           rel_l2 {:.3e}\n  final_states  rel_l2 {:.3e}\n  {}\n", e_out, e_fin,
               ok ? "OK (< 3e-3)" : "FAILED (tolerance 3e-3; NaN means unwritten elements)");
  }
  return ok ? kExitOk : kExitCheckFailed;
}

}  // namespace ssdgen
