// The record the fake driver (fake_libcuda.cpp) keeps and the switches the test sets.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <vector>

struct FakeCudaState {
  enum class Op { Launch, AddNode, SetParams, GraphLaunch, Memset };
  struct Event {
    Op op;
    CUstream stream = nullptr;
    CUfunction function = nullptr;
    uint64_t param = 0;  // the launch's (or node's) one 8-byte parameter
  };
  std::vector<Event> events;
  std::vector<uintptr_t> node_dependencies;  // per node added: the node it depends on (0: none)
  int graphs_created = 0, instantiated = 0, execs_destroyed = 0, mode_exchanges = 0;
  bool relaxed = false;  // the thread's capture mode as last exchanged
  // Switches.
  CUstream capturing_stream = nullptr;  // cuStreamIsCapturing reports this stream as capturing
  bool instantiate_fails = false;
  bool param_info_fails = false;
};

extern "C" FakeCudaState* fake_cuda_state();
