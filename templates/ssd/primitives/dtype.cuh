// Element types and exact conversions. NVRTC ships no cuda_bf16.h / cuda_fp16.h, so the 16-bit
// types are bit containers converted with cvt (round to nearest even), which is what the CUDA
// headers do too. sm_80+ only (cvt.rn.bf16.f32).
#pragma once

namespace ssd_kernels {

struct bf16 { unsigned short bits; };
struct fp16 { unsigned short bits; };

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(bf16 v) { return __uint_as_float(unsigned(v.bits) << 16); }
__device__ __forceinline__ float to_float(fp16 v) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.bits));
  return f;
}

template <class T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ bf16 from_float<bf16>(float v) {
  bf16 r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.bits) : "f"(v));
  return r;
}
template <> __device__ __forceinline__ fp16 from_float<fp16>(float v) {
  fp16 r;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.bits) : "f"(v));
  return r;
}

// The second term of v carried as hi + lo in T (issue 11): lo = rn_T(v − float(hi)) for hi = rn_T(v);
// the difference is exact in fp32, so hi + lo holds v to about twice T's precision.
template <class T>
__device__ __forceinline__ T lo_term(float v, T hi) {
  return from_float<T>(__fsub_rn(v, to_float(hi)));
}

template <class T>
__device__ __forceinline__ float load_as_float(const void* base, long long offset) {
  return to_float(static_cast<const T*>(base)[offset]);
}
template <class T>
__device__ __forceinline__ void store_from_float(void* base, long long offset, float v) {
  static_cast<T*>(base)[offset] = from_float<T>(v);
}

}  // namespace ssd_kernels
