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

// softplus'(u) = sigmoid(u). The backward's du = dΔ · [lo <= v <= hi] (0 where the clamp is active),
// then times dt_sigmoid(u) for softplus with u <= 20 (chunk_cumsum_bwd applies the two in this order).
__device__ __forceinline__ float dt_sigmoid(float u) { return 1.f / (1.f + expf(-u)); }

}  // namespace ssd_kernels
