// The sigmoid 1 / (1 + e), e = __expf(−z) or expf(−z), with the IEEE (correctly rounded) division's
// bits, for N elements at once: the forward's z gate out = y · (z · σ(z)) (chunk_scan_fwd, with
// __expf) and the backward's σ(z) (gate_bwd, with expf). Written as the plain expression, each
// element's 1 / d compiled to the correctly rounded reciprocal's fast path behind its own branch to
// the slow path (d outside the fast path's exponent range): N branch regions in a row, each a
// dependent chain (exp, reciprocal, Newton step) that the next one waited for. Here every element
// takes the fast path, with no branch, and only when some d is outside its range (d >= 2^126, i.e.
// z < -87.3, or d infinite or NaN) do all N take the IEEE division again, so each result is the IEEE
// division's either way (tests/gpu/test_sigmoid.cpp compares both forms for all 2^32 values of z).
#pragma once

#include "ssd/primitives/mma.cuh"  // ptx::rcp_approx_ftz

namespace ssd_kernels {

// rn(1 / d) for d with a biased exponent in [1, 252] (2^-126 <= |d| < 2^126): the fast path ptxas
// emits for rcp.rn.f32 (the IEEE 1 / d) there — r0 = rcp.approx(d), then one Newton step
// r0 + r0 · (1 − d · r0) with two fma — the same instructions, so the same bits. Outside that range
// the result is not the IEEE one (the caller's test: rcp_rn_fast_ok).
__device__ __forceinline__ float rcp_rn_fast(float d) {
  const float r0 = ptx::rcp_approx_ftz(d);
  const float e = __fmaf_rn(d, r0, -1.f);
  return __fmaf_rn(r0, -e, r0);
}

// Whether rcp_rn_fast(d) is the IEEE 1 / d, for d >= 1 or NaN (1 + an exp): d < 2^126 (false for
// infinity and NaN).
__device__ __forceinline__ bool rcp_rn_fast_ok(float d) { return d < 0x1p126f; }

// r[v] = 1 / (1 + e[v]) with the IEEE division, for e[v] >= 0 or NaN (an exp of anything).
template <int N>
__device__ __forceinline__ void recip_one_plus(const float (&e)[N], float (&r)[N]) {
  float d[N];
  bool fast = true;
#pragma unroll
  for (int v = 0; v < N; ++v) {
    d[v] = 1.f + e[v];
    r[v] = rcp_rn_fast(d[v]);
    fast = fast && rcp_rn_fast_ok(d[v]);
  }
  if (!fast) {
#pragma unroll
    for (int v = 0; v < N; ++v) r[v] = 1.f / d[v];
  }
}

// The forward's z gate: y[v] = y[v] · (z[v] · (1 / (1 + __expf(−z[v])))) for v = 0 .. N−1, bit for
// bit the expression with the IEEE division.
template <int N>
__device__ __forceinline__ void silu_gate(float (&y)[N], const float (&z)[N]) {
  float e[N], r[N];
#pragma unroll
  for (int v = 0; v < N; ++v) e[v] = __expf(-z[v]);
  recip_one_plus<N>(e, r);
#pragma unroll
  for (int v = 0; v < N; ++v) y[v] = y[v] * (z[v] * r[v]);
}

}  // namespace ssd_kernels
