// The tensors of an ssd_forward / ssd_backward call by role, for the unit tests that build call
// arguments with their own tensor maker (test_ops_checks: broadcast / dense views of fake memory,
// test_prepare: shapes without memory). make(dtype, shape) returns the ssd_tensor of one role.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "ssd/ssd.h"

namespace calltest {

using Dims = std::initializer_list<int64_t>;

struct CallShape {
  int64_t b = 1, L = 96, h = 4, p = 32, g = 1, n = 16;
  int32_t Q = 64;
  ssd_dtype T = SSD_DTYPE_BF16, dt = SSD_DTYPE_FP32;
};

// The inputs both directions take: chunk size, x, dt, A, B, C.
template <class Args, class Make>
Args with_inputs(Args a, const CallShape& s, Make make) {
  a.chunk_size = s.Q;
  a.x = make(s.T, Dims{s.b, s.L, s.h, s.p});
  a.dt = make(s.dt, Dims{s.b, s.L, s.h});
  a.A = make(SSD_DTYPE_FP32, Dims{s.h});
  a.B = make(s.T, Dims{s.b, s.L, s.g, s.n});
  a.C = make(s.T, Dims{s.b, s.L, s.g, s.n});
  return a;
}

// The backward's required gradients (dx, ddt, dA, dB, dC) and dout.
template <class Make>
void set_gradients(ssd_backward_args& a, const CallShape& s, Make make) {
  a.dout = make(s.T, Dims{s.b, s.L, s.h, s.p});
  a.dx = make(s.T, Dims{s.b, s.L, s.h, s.p});
  a.ddt = make(s.dt, Dims{s.b, s.L, s.h});
  a.dA = make(SSD_DTYPE_FP32, Dims{s.h});
  a.dB = make(s.T, Dims{s.b, s.L, s.g, s.n});
  a.dC = make(s.T, Dims{s.b, s.L, s.g, s.n});
}

}  // namespace calltest
