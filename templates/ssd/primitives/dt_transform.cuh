// dt preprocessing shared by the forward and the backward (math §1.3, B-i), so that both see the
// same Δ bits:  u = dt + dt_bias;  v = softplus(u) (u if u > 20);  Δ = min(max(v, lo), hi).
#pragma once

namespace ssd_kernels {

__device__ __forceinline__ float dt_preact(float dt, float bias) { return __fadd_rn(dt, bias); }

__device__ __forceinline__ float softplus(float u) { return u <= 20.f ? log1pf(expf(u)) : u; }

template <bool kSoftplus>
__device__ __forceinline__ float dt_activation(float u) {
  return kSoftplus ? softplus(u) : u;
}

__device__ __forceinline__ float dt_clamp(float v, float lo, float hi) { return fminf(fmaxf(v, lo), hi); }

// d(Δ)/du times dΔ: zero where the clamp is active (strictly outside [lo, hi]), times sigmoid(u)
// for softplus with u <= 20.
template <bool kSoftplus>
__device__ __forceinline__ float dt_backward(float u, float v, float d_delta, float lo, float hi) {
  float dv = (v < lo || v > hi) ? 0.f : d_delta;
  if (kSoftplus && u <= 20.f) dv = __fmul_rn(dv, 1.f / (1.f + expf(-u)));
  return dv;
}

}  // namespace ssd_kernels
