// The record the fake driver (fake_libcuda.cpp) keeps and the switches the test sets.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <map>
#include <vector>

struct FakeCudaState {
  enum class Op { Launch, AddNode, SetParams, GraphLaunch, Memset };
  struct Event {
    Op op;
    CUstream stream = nullptr;
    CUfunction function = nullptr;
    uintptr_t node = 0;  // AddNode: the node made; SetParams: the node set
    uint64_t param = 0;  // the launch's (or node's) one 8-byte parameter
    std::vector<uint64_t> exec_params;  // GraphLaunch: the launched exec's node parameters, in node order
  };
  std::vector<Event> events;
  std::vector<uintptr_t> node_dependencies;  // per node added: the first node it depends on (0: none)
  std::vector<std::vector<uintptr_t>> node_dependency_lists;  // per node added: every node it depends on
  // Each graph's nodes' parameters as added, each exec's as instantiated and then set (by node).
  std::map<uintptr_t, std::map<uintptr_t, uint64_t>> graph_params, exec_params;
  int graphs_created = 0, instantiated = 0, execs_destroyed = 0, mode_exchanges = 0;
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;  // the (one) thread mode, as exchanged
  int graph_calls_not_relaxed = 0;  // create / add / instantiate / set / destroy outside the relaxed mode
  size_t max_param_index = 0;       // the highest index cuFuncGetParamInfo was asked for
  int tensor_maps_encoded = 0;      // cuTensorMapEncodeTiled calls (the map: the arguments' words)
  // Switches.
  CUstream capturing_stream = nullptr;  // cuStreamIsCapturing reports this stream as capturing
  bool instantiate_fails = false;
  bool param_info_fails = false;
};

extern "C" FakeCudaState* fake_cuda_state();
