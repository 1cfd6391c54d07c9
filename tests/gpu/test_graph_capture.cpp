// CUDA-graph capture of ssd_forward and ssd_backward (issues 9 and 10). With the caller's workspace
// a call (kernels loaded by one eager call) is captured on a created stream in the global capture
// mode, where an allocation, a synchronization or a legacy-stream operation anywhere in the call
// invalidates the capture; the graph holds exactly the plan's kernels (and fast mode's memsets) and
// no memory node, and two replays into freshly poisoned outputs and workspace give the eager call's
// bits. Without a workspace the call's stream-ordered allocation is captured as one allocation and
// one free node, and the replays give the same bits too. A runtime's first call, whose modules load
// during the capture, works on drivers from CUDA 12.3. A call refused by validation during a
// capture returns its status and leaves the capture intact.
// The library's own launch graphs (runtime/launch_graph.h): a runtime's repeated calls replay its
// cached graph, with the parameters of new tensors set into it, and give the bits of a runtime that
// launches eagerly on the same tensors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <string>
#include <vector>

#include "gpu_support.h"
#include "ops/ssd_backward.h"
#include "ops/ssd_forward.h"
#include "runtime/runtime.h"

using namespace gputest;

namespace {

struct GraphCase {
  int64_t b, L, h, p, g, n;
  int32_t Q;
  ssd_dtype dtype;
  bool D, D_per_headdim, z, bias, softplus, init, seq_idx;
};

std::string describe(const GraphCase& c) { return describe_ssd_case(c); }

const GraphCase kGraphCases[] = {
    // Every option: z, D per headdim, dt_bias, softplus, initial states (and final states,
    // dfinal_states), seq_idx, a partial last chunk (2 * 128 + 37), fp16.
    {2, 293, 8, 64, 2, 64, 128, SSD_DTYPE_FP16, true, true, true, true, true, true, true},
    // Nemotron-H-like, small: p=64 n=256 chunk 256, 32 heads per group, bf16, D (h), dt_bias, softplus.
    {1, 512, 64, 64, 2, 256, 256, SSD_DTYPE_BF16, true, false, false, true, true, false, false},
};

// An output tensor's buffer; `atomic`: fast mode sums it with atomics (docs/determinism.md), so a
// replay may differ from the eager call in its last bits.
struct Output {
  const char* name;
  DeviceBuffer* buf;
  ssd_dtype dtype;
  bool atomic;
};

struct GraphProblem {
  GraphCase c;
  HostArray x, dt, A, B, C, D, z, bias, init, dout, dfinal, out_x;
  std::vector<int32_t> seq;
  DeviceBuffer d_x, d_dt, d_A, d_B, d_C, d_D, d_z, d_bias, d_init, d_seq, d_dout, d_dfinal, d_out_x;
  DeviceBuffer out, out_x_buf, final_states, fwd_ws;                   // the forward's
  DeviceBuffer dx, ddt, dA, dB, dC, dD, dz, ddt_bias, dinit, bwd_ws;  // the backward's
  size_t fwd_ws_bytes = 0, bwd_ws_bytes = 0;

  explicit GraphProblem(const GraphCase& cc) : c(cc) {
    const size_t nx = size_t(c.b * c.L * c.h * c.p), nbc = size_t(c.b * c.L * c.g * c.n);
    const size_t nst = size_t(c.b * c.h * c.p * c.n), ndt = size_t(c.b * c.L * c.h);
    x = make_array(c.dtype, normal(nx));
    z = make_array(c.dtype, normal(nx));
    dout = make_array(c.dtype, normal(nx));
    out_x = make_array(c.dtype, normal(nx));  // any values: the bits of replays are compared, not math
    draw_ssd_inputs(*this);
    dfinal = make_array(SSD_DTYPE_FP32, normal(nst));
    d_x = upload_array(x); d_dt = upload_array(dt); d_A = upload_array(A); d_B = upload_array(B); d_C = upload_array(C);
    d_D = upload_array(D); d_z = upload_array(z); d_bias = upload_array(bias); d_init = upload_array(init);
    d_dout = upload_array(dout); d_dfinal = upload_array(dfinal); d_out_x = upload_array(out_x);
    d_seq = DeviceBuffer(seq.size() * 4);
    d_seq.upload(seq.data(), seq.size() * 4);
    const size_t T = dtype_bytes(c.dtype);
    out = DeviceBuffer(nx * T); out_x_buf = DeviceBuffer(nx * T); final_states = DeviceBuffer(nst * 4);
    dx = DeviceBuffer(nx * T); dz = DeviceBuffer(nx * T); ddt = DeviceBuffer(ndt * T);
    dA = DeviceBuffer(size_t(c.h) * 4); ddt_bias = DeviceBuffer(size_t(c.h) * 4);
    dD = DeviceBuffer(D.values.size() * 4);
    dB = DeviceBuffer(nbc * T); dC = DeviceBuffer(nbc * T);
    dinit = DeviceBuffer(nst * 4);
    ssd_forward_layout layout{};
    layout.struct_size = sizeof(layout);
    ssd_forward_args fa = fwd_args(false);
    GPU_CHECK_SSD(ssd_forward_workspace_layout(&fa, &layout));
    fwd_ws_bytes = layout.total_bytes;
    fwd_ws = DeviceBuffer(fwd_ws_bytes);
    ssd_backward_args ba = bwd_args(-1);
    GPU_CHECK_SSD(ssd_backward_workspace_size(&ba, &bwd_ws_bytes));  // mode -1: deterministic's, the larger
    bwd_ws = DeviceBuffer(bwd_ws_bytes);
  }

  std::vector<int64_t> bthp() const { return {c.b, c.L, c.h, c.p}; }
  std::vector<int64_t> btgn() const { return {c.b, c.L, c.g, c.n}; }
  std::vector<int64_t> bhpn() const { return {c.b, c.h, c.p, c.n}; }
  std::vector<int64_t> d_shape() const {
    return c.D_per_headdim ? std::vector<int64_t>{c.h, c.p} : std::vector<int64_t>{c.h};
  }

  // The forward's inputs and options, shared by both calls' args.
  template <class Args>
  void set_inputs(Args& a) const {
    a.chunk_size = c.Q;
    a.dt_softplus = c.softplus;
    a.x = tensor(d_x, c.dtype, bthp());
    a.dt = tensor(d_dt, c.dtype, {c.b, c.L, c.h});
    a.A = tensor(d_A, SSD_DTYPE_FP32, {c.h});
    a.B = tensor(d_B, c.dtype, btgn());
    a.C = tensor(d_C, c.dtype, btgn());
    if (c.D) a.D = tensor(d_D, SSD_DTYPE_FP32, d_shape());
    if (c.z) a.z = tensor(d_z, c.dtype, bthp());
    if (c.bias) a.dt_bias = tensor(d_bias, SSD_DTYPE_FP32, {c.h});
    if (c.init) a.initial_states = tensor(d_init, SSD_DTYPE_FP32, bhpn());
    if (c.seq_idx) a.seq_idx = tensor(d_seq, SSD_DTYPE_INT32, {c.b, c.L});
  }

  ssd_forward_args fwd_args(bool with_workspace) const {
    ssd_forward_args a;
    ssd_forward_args_init(&a);
    set_inputs(a);
    if (c.z) a.out_x = tensor(out_x_buf, c.dtype, bthp());
    a.out = tensor(out, c.dtype, bthp());
    a.final_states = tensor(final_states, SSD_DTYPE_FP32, bhpn());
    if (with_workspace) {
      a.workspace = fwd_ws.get();
      a.workspace_bytes = fwd_ws_bytes;
    }
    return a;
  }

  ssd_backward_args bwd_args(int32_t mode) const {
    ssd_backward_args a;
    ssd_backward_args_init(&a);
    set_inputs(a);
    a.mode = mode;
    a.dout = tensor(d_dout, c.dtype, bthp());
    if (c.z) {
      a.out_x = tensor(d_out_x, c.dtype, bthp());
      a.dz = tensor(dz, c.dtype, bthp());
    }
    if (c.D) a.dD = tensor(dD, SSD_DTYPE_FP32, d_shape());
    if (c.bias) a.ddt_bias = tensor(ddt_bias, SSD_DTYPE_FP32, {c.h});
    if (c.init) {
      a.dinitial_states = tensor(dinit, SSD_DTYPE_FP32, bhpn());
      a.dfinal_states = tensor(d_dfinal, SSD_DTYPE_FP32, bhpn());
    }
    a.dx = tensor(dx, c.dtype, bthp());
    a.ddt = tensor(ddt, c.dtype, {c.b, c.L, c.h});
    a.dA = tensor(dA, SSD_DTYPE_FP32, {c.h});
    a.dB = tensor(dB, c.dtype, btgn());
    a.dC = tensor(dC, c.dtype, btgn());
    return a;
  }

  std::vector<Output> fwd_outputs() {
    std::vector<Output> o = {{"out", &out, c.dtype, false}, {"final_states", &final_states, SSD_DTYPE_FP32, false}};
    if (c.z) o.push_back({"out_x", &out_x_buf, c.dtype, false});
    return o;
  }
  // Fast mode's atomic outputs: dA, dD, ddt_bias, and ddt (it sums the atomic ddA terms).
  std::vector<Output> bwd_outputs() {
    std::vector<Output> o = {{"dx", &dx, c.dtype, false},
                             {"ddt", &ddt, c.dtype, true},
                             {"dA", &dA, SSD_DTYPE_FP32, true},
                             {"dB", &dB, c.dtype, false},
                             {"dC", &dC, c.dtype, false}};
    if (c.D) o.push_back({"dD", &dD, SSD_DTYPE_FP32, true});
    if (c.z) o.push_back({"dz", &dz, c.dtype, false});
    if (c.bias) o.push_back({"ddt_bias", &ddt_bias, SSD_DTYPE_FP32, true});
    if (c.init) o.push_back({"dinitial_states", &dinit, SSD_DTYPE_FP32, false});
    return o;
  }
};

// Every output and the workspaces 0xFF (NaN), finished before the next operation on any stream.
void poison(GraphProblem& pr, const std::vector<Output>& outputs) {
  for (const Output& o : outputs) o.buf->poison();
  pr.fwd_ws.poison();
  pr.bwd_ws.poison();
  GPU_CHECK_CU(drv().cuCtxSynchronize());
}

struct Stream {
  CUstream s = nullptr;
  Stream() { GPU_CHECK_CU(drv().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING)); }
  ~Stream() {
    if (s) drv().cuStreamDestroy(s);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
};

struct Graph {
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  ~Graph() {
    if (exec) drv().cuGraphExecDestroy(exec);
    if (graph) drv().cuGraphDestroy(graph);
  }
  // How many nodes of each type the captured graph has.
  std::map<CUgraphNodeType, size_t> node_counts() const {
    size_t count = 0;
    GPU_CHECK_CU(drv().cuGraphGetNodes(graph, nullptr, &count));
    std::vector<CUgraphNode> nodes(count);
    GPU_CHECK_CU(drv().cuGraphGetNodes(graph, nodes.data(), &count));
    std::map<CUgraphNodeType, size_t> out;
    for (CUgraphNode n : nodes) {
      CUgraphNodeType t;
      GPU_CHECK_CU(drv().cuGraphNodeGetType(n, &t));
      ++out[t];
    }
    return out;
  }
};

// What a call did during a capture: its status and detail, and how the capture ended.
struct CaptureResult {
  ssd_status status = SSD_OK;
  std::string detail;
  CUstreamCaptureStatus during = CU_STREAM_CAPTURE_STATUS_NONE;  // right after the call
  CUresult end = CUDA_SUCCESS;                                   // cuStreamEndCapture's
};

// Captures `call(stream)` in the global mode (the strictest: any thread's unsafe call, e.g. a
// cuMemAlloc or a synchronization, invalidates it). The capture is always ended, whatever the call
// returned, so a failing case leaves the stream usable.
template <class Call>
CaptureResult capture(CUstream stream, Graph& g, Call call) {
  CaptureResult r;
  GPU_CHECK_CU(drv().cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
  r.status = call(stream);
  r.detail = ssd_last_error_detail();
  drv().cuStreamIsCapturing(stream, &r.during);
  r.end = drv().cuStreamEndCapture(stream, &g.graph);
  return r;
}

// The bytes of every output, after whatever ran on the stream has finished.
std::vector<std::vector<uint8_t>> read_outputs(CUstream stream, const std::vector<Output>& outputs) {
  GPU_CHECK_CU(drv().cuStreamSynchronize(stream));
  std::vector<std::vector<uint8_t>> bytes;
  for (const Output& o : outputs) bytes.push_back(download_bytes(*o.buf));
  return bytes;
}

double decode(const std::vector<uint8_t>& bytes, ssd_dtype dtype, size_t i) {
  if (dtype == SSD_DTYPE_FP32) {
    float f;
    std::memcpy(&f, &bytes[4 * i], 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, &bytes[2 * i], 2);
  return dtype == SSD_DTYPE_BF16 ? bf16_to_float(h) : fp16_to_float(h);
}

// The replay's outputs against the eager call's: the same bits, except fast mode's atomic sums,
// which must be finite and agree to rounding (a different summation order): within one ulp of the
// element's 16-bit type (ddt) plus 1e-3 of the output's largest magnitude (the digest script's
// bound for these outputs, docs/determinism.md).
void check_replay(const std::vector<Output>& outputs, const std::vector<std::vector<uint8_t>>& eager,
                  const std::vector<std::vector<uint8_t>>& replay, bool fast) {
  REQUIRE(eager.size() == outputs.size());
  REQUIRE(replay.size() == outputs.size());
  for (size_t k = 0; k < outputs.size(); ++k) {
    const Output& o = outputs[k];
    const std::string output = o.name;
    CAPTURE(output);
    if (!fast || !o.atomic) {
      CHECK(same_bytes(eager[k], replay[k]));
      continue;
    }
    const size_t count = eager[k].size() / dtype_bytes(o.dtype);
    double max_abs = 0;
    for (size_t i = 0; i < count; ++i) max_abs = std::max(max_abs, std::fabs(decode(eager[k], o.dtype, i)));
    const double ulp = o.dtype == SSD_DTYPE_BF16 ? 0x1p-7 : o.dtype == SSD_DTYPE_FP16 ? 0x1p-10 : 0x1p-23;
    size_t bad = 0;
    for (size_t i = 0; i < count; ++i) {
      const double e = decode(eager[k], o.dtype, i), r = decode(replay[k], o.dtype, i);
      if (!std::isfinite(e) || !std::isfinite(r) || std::fabs(r - e) > ulp * std::fabs(e) + 1e-3 * max_abs) ++bad;
    }
    CHECK(bad == 0);
  }
}

using Launch = ssd_status (*)(ssd_runtime* rt, GraphProblem& pr, bool with_workspace, ssd_mode mode, CUstream stream);

ssd_status launch_forward(ssd_runtime* rt, GraphProblem& pr, bool with_workspace, ssd_mode mode, CUstream stream) {
  const ssd_forward_args a = pr.fwd_args(with_workspace);
  ssd_launch_options o;
  ssd_launch_options_init(&o);
  o.mode = mode;
  return ssd_forward(rt, &a, &o, reinterpret_cast<ssd_cuda_stream>(stream));
}

ssd_status launch_backward(ssd_runtime* rt, GraphProblem& pr, bool with_workspace, ssd_mode mode, CUstream stream) {
  const ssd_backward_args a = pr.bwd_args(mode);
  return ssd_backward(rt, &a, with_workspace ? pr.bwd_ws.get() : nullptr, with_workspace ? pr.bwd_ws_bytes : 0,
                      reinterpret_cast<ssd_cuda_stream>(stream));
}

// How many kernels the call launches: the plan's kernel list for its arguments and mode.
size_t planned_kernels(ssd_runtime* rt, GraphProblem& pr, bool backward, ssd_mode mode) {
  auto arch = ssd::runtime_arch(*rt);
  REQUIRE(arch.ok());
  if (backward) {
    const ssd_backward_args a = pr.bwd_args(mode);
    auto k = ssd::backward_kernel_configs(&a, arch.value(), mode);
    REQUIRE_MESSAGE(k.ok(), k.status().detail);
    return k.value().size();
  }
  const ssd_forward_args a = pr.fwd_args(true);
  auto k = ssd::forward_kernel_configs(&a, arch.value(), mode);
  REQUIRE_MESSAGE(k.ok(), k.status().detail);
  return k.value().size();
}

// Eager once (loads the kernels), then capture with or without the caller's workspace,
// instantiate, and replay twice into poisoned outputs: the eager bits each time. capture_rt: the
// runtime of the captured call (default: the eager call's, whose kernels are then loaded).
void check_capture(ssd_runtime* rt, GraphProblem& pr, bool backward, ssd_mode mode, bool with_workspace,
                   ssd_runtime* capture_rt = nullptr) {
  if (!capture_rt) capture_rt = rt;
  const bool fast = mode == SSD_MODE_FAST;
  CAPTURE(backward);
  CAPTURE(fast);
  CAPTURE(with_workspace);
  const Launch launch = backward ? launch_backward : launch_forward;
  const std::vector<Output> outputs = backward ? pr.bwd_outputs() : pr.fwd_outputs();
  Stream stream;

  poison(pr, outputs);
  {
    const ssd_status s = launch(rt, pr, true, mode, stream.s);
    INFO("eager call: " << ssd_status_string(s) << ": " << ssd_last_error_detail());
    REQUIRE(s == SSD_OK);
  }
  const std::vector<std::vector<uint8_t>> eager = read_outputs(stream.s, outputs);

  Graph g;
  const CaptureResult r =
      capture(stream.s, g, [&](CUstream s) { return launch(capture_rt, pr, with_workspace, mode, s); });
  INFO("captured call: " << ssd_status_string(r.status) << ": " << r.detail);
  REQUIRE(r.status == SSD_OK);
  CHECK(r.during == CU_STREAM_CAPTURE_STATUS_ACTIVE);  // nothing in the call invalidated the capture
  GPU_CHECK_CU(r.end);
  REQUIRE(g.graph != nullptr);

  // Exactly the plan's launches; memory nodes only for the library's own workspace.
  std::map<CUgraphNodeType, size_t> nodes = g.node_counts();
  CHECK(nodes[CU_GRAPH_NODE_TYPE_KERNEL] == planned_kernels(rt, pr, backward, mode));
  CHECK(nodes[CU_GRAPH_NODE_TYPE_MEM_ALLOC] == (with_workspace ? 0u : 1u));
  CHECK(nodes[CU_GRAPH_NODE_TYPE_MEM_FREE] == (with_workspace ? 0u : 1u));
  if (!fast) CHECK(nodes[CU_GRAPH_NODE_TYPE_MEMSET] == 0u);  // deterministic mode zeroes nothing
  const std::string label = std::string(backward ? "bwd " : "fwd ") + (fast ? "fast" : "det") +
                            (with_workspace ? " ws " : " no-ws ") + describe(pr.c);
  MESSAGE(label << ": " << nodes[CU_GRAPH_NODE_TYPE_KERNEL] << " kernel, " << nodes[CU_GRAPH_NODE_TYPE_MEMSET]
                << " memset nodes");

  GPU_CHECK_CU(drv().cuGraphInstantiateWithFlags(&g.exec, g.graph, 0));
  for (int replay = 0; replay < 2; ++replay) {
    CAPTURE(replay);
    poison(pr, outputs);
    GPU_CHECK_CU(drv().cuGraphLaunch(g.exec, stream.s));
    check_replay(outputs, eager, read_outputs(stream.s, outputs), fast);
  }
}

}  // namespace

TEST_CASE("graph capture: ssd_forward with the caller's workspace replays the eager bits (both modes)" *
          doctest::skip(!gpu_available())) {
  for_each_case(kGraphCases, [&](ssd_runtime* rt, const GraphCase& c) {
    GraphProblem pr(c);
    for (ssd_mode mode : {SSD_MODE_DETERMINISTIC, SSD_MODE_FAST}) check_capture(rt, pr, false, mode, true);
  });
}

TEST_CASE("graph capture: ssd_backward with the caller's workspace replays the eager bits (both modes)" *
          doctest::skip(!gpu_available())) {
  for_each_case(kGraphCases, [&](ssd_runtime* rt, const GraphCase& c) {
    GraphProblem pr(c);
    for (ssd_mode mode : {SSD_MODE_DETERMINISTIC, SSD_MODE_FAST}) check_capture(rt, pr, true, mode, true);
  });
}

TEST_CASE("graph capture: without a workspace the stream-ordered allocation becomes graph memory nodes" *
          doctest::skip(!gpu_available())) {
  for_each_case(kGraphCases, [&](ssd_runtime* rt, const GraphCase& c) {
    GraphProblem pr(c);
    check_capture(rt, pr, false, SSD_MODE_DETERMINISTIC, false);
    check_capture(rt, pr, true, SSD_MODE_DETERMINISTIC, false);
    check_capture(rt, pr, true, SSD_MODE_FAST, false);
  });
}

TEST_CASE("graph capture: a call refused by validation returns its status and leaves the capture intact" *
          doctest::skip(!gpu_available())) {
  RuntimeHolder rt;
  GraphProblem pr(kGraphCases[1]);
  Stream stream;
  for (bool backward : {false, true}) {
    CAPTURE(backward);
    Graph g;
    const CaptureResult r = capture(stream.s, g, [&](CUstream s) {
      if (backward) {
        const ssd_backward_args a = pr.bwd_args(SSD_MODE_DETERMINISTIC);
        return ssd_backward(rt.rt, &a, pr.bwd_ws.get(), pr.bwd_ws_bytes - 1, reinterpret_cast<ssd_cuda_stream>(s));
      }
      ssd_forward_args a = pr.fwd_args(true);
      a.workspace_bytes -= 1;
      return ssd_forward(rt.rt, &a, nullptr, reinterpret_cast<ssd_cuda_stream>(s));
    });
    CHECK(r.status == SSD_ERROR_WORKSPACE_TOO_SMALL);
    CHECK(r.detail.find("workspace_bytes") != std::string::npos);
    CHECK(r.during == CU_STREAM_CAPTURE_STATUS_ACTIVE);
    GPU_CHECK_CU(r.end);
    REQUIRE(g.graph != nullptr);
    CHECK(g.node_counts().empty());  // nothing was enqueued
  }
  // The stream works normally afterwards.
  poison(pr, pr.fwd_outputs());
  GPU_CHECK_SSD(launch_forward(rt.rt, pr, true, SSD_MODE_DETERMINISTIC, stream.s));
  GPU_CHECK_CU(drv().cuStreamSynchronize(stream.s));
}

TEST_CASE("graph capture: a runtime's first call loads its kernels inside the capture (drivers >= 12.3)" *
          doctest::skip(!gpu_available())) {
  // A fresh runtime has loaded nothing into the context: the captured call builds its kernels
  // (from the disk cache the eager call filled) and loads their modules during the capture, which
  // drivers from CUDA 12.3 on allow. Older drivers must refuse it with a status, not crash.
  int version = 0;
  GPU_CHECK_CU(drv().cuDriverGetVersion(&version));
  RuntimeHolder eager_rt;
  GraphProblem pr(kGraphCases[1]);
  for (bool backward : {false, true}) {
    CAPTURE(backward);
    RuntimeHolder fresh;
    if (version >= 12030) {
      check_capture(eager_rt.rt, pr, backward, SSD_MODE_DETERMINISTIC, true, fresh.rt);
      continue;
    }
    Stream stream;
    Graph g;
    const CaptureResult r = capture(stream.s, g, [&](CUstream s) {
      return (backward ? launch_backward : launch_forward)(fresh.rt, pr, true, SSD_MODE_DETERMINISTIC, s);
    });
    MESSAGE("driver " << version << ": first call captured -> " << ssd_status_string(r.status) << ": " << r.detail);
    CHECK(r.status != SSD_OK);
    CHECK_FALSE(r.detail.empty());
  }
}

TEST_CASE("launch graphs: repeated calls replay a cached graph with the eager launches' bits, on new tensors too" *
          doctest::skip(!gpu_available())) {
  // Two problems of one shape (their own tensors and workspaces: every pointer differs) and one of
  // another shape. The eager runtime (launch_graphs = 2, off) gives each call's reference bits; the
  // graph runtime (1, on) sees A (recorded, launched eagerly: the first sighting), A again
  // (instantiated and replayed), A (replayed as is), B (every node's parameters replaced), A (back),
  // then the other shape (a second sequence, eager) twice (its own graph); each into poisoned
  // outputs and workspaces. Then without a workspace (an allocation per call around the launches),
  // on a second stream (its own sequence: graphs are per stream), and while another thread holds a
  // capture in the global mode (which neither the graph calls nor the replays may disturb).
  if (!drv().cuFuncGetParamInfo) {
    MESSAGE("driver without cuFuncGetParamInfo (before CUDA 12.4): calls launch eagerly; nothing to check");
    return;
  }
  RuntimeHolder probe;
  auto arch = ssd::runtime_arch(*probe.rt);
  REQUIRE(arch.ok());
  RuntimeHolder eager_rt(arch.value(), 2), graph_rt(arch.value(), 1);
  REQUIRE(graph_rt.rt->graphs->enabled());
  REQUIRE_FALSE(eager_rt.rt->graphs->enabled());
  GraphProblem a(kGraphCases[1]), b(kGraphCases[1]), other(kGraphCases[0]);
  Stream stream, stream2;
  CUcontext ctx = nullptr;
  GPU_CHECK_CU(drv().cuCtxGetCurrent(&ctx));
  for (bool backward : {false, true}) {
    CAPTURE(backward);
    const Launch launch = backward ? launch_backward : launch_forward;
    auto outputs_of = [&](GraphProblem& pr) { return backward ? pr.bwd_outputs() : pr.fwd_outputs(); };
    auto call = [&](ssd_runtime* rt, GraphProblem& pr, CUstream s, bool with_workspace = true) {
      const ssd_status st = launch(rt, pr, with_workspace, SSD_MODE_DETERMINISTIC, s);
      INFO(ssd_status_string(st) << ": " << ssd_last_error_detail());
      REQUIRE(st == SSD_OK);
    };
    auto run = [&](ssd_runtime* rt, GraphProblem& pr, CUstream s, bool with_workspace = true) {
      const std::vector<Output> outputs = outputs_of(pr);
      poison(pr, outputs);
      call(rt, pr, s, with_workspace);
      return read_outputs(s, outputs);
    };
    const auto eager_a = run(eager_rt.rt, a, stream.s), eager_b = run(eager_rt.rt, b, stream.s),
               eager_other = run(eager_rt.rt, other, stream.s);
    auto expected = [&](GraphProblem* pr) { return pr == &a ? eager_a : pr == &b ? eager_b : eager_other; };
    const size_t planned = planned_kernels(graph_rt.rt, a, backward, SSD_MODE_DETERMINISTIC);
    ssd::LaunchGraphs::Counters before = graph_rt.rt->graphs->counters();
    GraphProblem* order[] = {&a, &a, &a, &b, &a, &other, &other};
    for (GraphProblem* pr : order) {
      const std::string problem = pr == &a ? "A" : pr == &b ? "B" : "other shape";
      CAPTURE(problem);
      check_replay(outputs_of(*pr), expected(pr), run(graph_rt.rt, *pr, stream.s), false);
    }
    ssd::LaunchGraphs::Counters after = graph_rt.rt->graphs->counters();
    CHECK(after.eager - before.eager == 2);  // the first sighting of each sequence
    // The A calls are remembered (replay_same_call): A after B repeats while B has set A's graph,
    // so it gets a graph of its own (the sequence's second), and B's call updates A's first graph.
    CHECK(after.instantiated - before.instantiated == 3);
    CHECK(after.replays - before.replays == 5);
    // The third A call repeats the second's arguments, workspace and stream: it replays its graph
    // as it is, without recording (runtime/launch_graph.h, replay_same_call).
    CHECK(after.same_call_replays - before.same_call_replays == 1);
    // B's call replaces every node's parameters; A after it takes a graph of its own, repeated A
    // calls set none.
    CHECK(after.nodes_updated - before.nodes_updated == planned);
    MESSAGE(std::string(backward ? "bwd" : "fwd") << ": eager " << after.eager - before.eager << ", instantiated "
                                       << after.instantiated - before.instantiated << ", replays "
                                       << after.replays - before.replays << ", nodes updated "
                                       << after.nodes_updated - before.nodes_updated << " (" << planned
                                       << " kernels), all bitwise equal");

    // Without a workspace: the stream-ordered allocation before the replay, the free after it.
    for (int i = 0; i < 3; ++i) check_replay(outputs_of(a), eager_a, run(graph_rt.rt, a, stream.s, false), false);
    // A second stream: a sequence of its own (eager, then instantiated).
    before = graph_rt.rt->graphs->counters();
    for (int i = 0; i < 2; ++i) check_replay(outputs_of(a), eager_a, run(graph_rt.rt, a, stream2.s), false);
    after = graph_rt.rt->graphs->counters();
    CHECK(after.eager - before.eager == 1);
    CHECK(after.instantiated - before.instantiated == 1);

    // Another thread captures in the global mode (any thread's unsafe call would invalidate it)
    // while this one runs a fresh sequence (a third stream) through its first sighting,
    // instantiation, replay and update; nothing is synchronized inside that window.
    Stream stream3;
    poison(a, outputs_of(a));
    poison(b, outputs_of(b));
    std::mutex m;
    std::condition_variable cv;
    int phase = 0;  // 1: capture begun; 2: calls done
    CUresult begin = CUDA_SUCCESS, end = CUDA_SUCCESS;
    CUstreamCaptureStatus during = CU_STREAM_CAPTURE_STATUS_NONE;
    CUgraph captured = nullptr;
    std::thread capturer([&] {
      drv().cuCtxSetCurrent(ctx);
      CUstream s = nullptr;
      drv().cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
      begin = drv().cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL);
      {
        std::lock_guard<std::mutex> lock(m);
        phase = 1;
      }
      cv.notify_all();
      std::unique_lock<std::mutex> lock(m);
      cv.wait(lock, [&] { return phase == 2; });
      drv().cuStreamIsCapturing(s, &during);
      end = drv().cuStreamEndCapture(s, &captured);
      if (captured) drv().cuGraphDestroy(captured);
      drv().cuStreamDestroy(s);
    });
    {
      std::unique_lock<std::mutex> lock(m);
      cv.wait(lock, [&] { return phase == 1; });
    }
    before = graph_rt.rt->graphs->counters();
    // No REQUIRE inside the window (a failure must not leave the other thread waiting).
    std::vector<ssd_status> statuses;
    for (GraphProblem* pr : {&a, &a, &a, &b})
      statuses.push_back(launch(graph_rt.rt, *pr, true, SSD_MODE_DETERMINISTIC, stream3.s));
    after = graph_rt.rt->graphs->counters();
    {
      std::lock_guard<std::mutex> lock(m);
      phase = 2;
    }
    cv.notify_all();
    capturer.join();
    for (ssd_status st : statuses) CHECK(st == SSD_OK);
    GPU_CHECK_CU(begin);
    CHECK(during == CU_STREAM_CAPTURE_STATUS_ACTIVE);  // the other thread's capture survived
    GPU_CHECK_CU(end);
    CHECK(after.eager - before.eager == 1);
    CHECK(after.instantiated - before.instantiated == 1);
    CHECK(after.replays - before.replays == 3);
    check_replay(outputs_of(a), eager_a, read_outputs(stream3.s, outputs_of(a)), false);
    check_replay(outputs_of(b), eager_b, read_outputs(stream3.s, outputs_of(b)), false);
  }
}
