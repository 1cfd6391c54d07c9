// The workspace of one call: the caller's, or one allocated on the call's stream for this call only
// (stream-ordered, so no synchronization), released after the call's last launch. Callers that
// pass their own (CUDA graphs, a framework's caching allocator) never reach the allocator.
#pragma once

#include <cstddef>

#include "common/status.h"
#include "runtime/runtime.h"

namespace ssd {

class CallWorkspace {
 public:
  // given: the caller's buffer or null; bytes: what the call needs (nothing is allocated for 0).
  // warning: logged once per runtime when the call allocates (what to pass instead).
  Status acquire(ssd_runtime& rt, void* given, size_t bytes, CUstream stream, const char* warning);
  char* base() const { return base_; }
  // Frees what acquire allocated (stream-ordered); `s` is the call's status, returned unless it
  // was ok and the release failed.
  Status release(Status s);

 private:
  char* base_ = nullptr;
  bool owned_ = false;
  CUstream stream_ = nullptr;
};

}  // namespace ssd
