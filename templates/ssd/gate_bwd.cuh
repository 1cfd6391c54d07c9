// gate_bwd (math B-a): the gradient through the z gate and the D skip, per (b, t, h, p):
//
//   with z:    σ = 1 / (1 + exp(-z));  dy = dout · z · σ;  dz = dout · y · σ · (1 + z · (1 − σ))
//              dy is stored as two T terms: dy = rn_T(dy_f32), dy_lo = rn_T(dy_f32 − float(dy)) (the
//              difference exact in fp32), so that the kernels that build dA's terms from dy
//              (chunk_scan_bwd_dstates, _ddA_intra, _dx with SSD_FLAG_Z) do not inherit dy's
//              rounding to T (issue 11); the params are then GateBwdZParams
//   without z: dy = dout (not written: the caller's dout is dy)
//   dD (h):    Σ_b Σ_c Σ_p Σ_l dy · x        dD (h, p): Σ_b Σ_c Σ_l dy · x
//
// Order (docs/determinism.md): one thread owns (b, c, h, p) and accumulates over the chunk's valid
// positions l = 0 .. λ_c in increasing order, acc = fma(dy_l, x_l, acc) from +0.0 in fp64 (the
// products of the fp32 dy, before it is rounded for storage, and x are exact there). For D (h) the
// P column sums of a (b, c, h) are then added in increasing p from +0.0 in fp64 by thread 0.
// reduce_head_partials finishes: chunks in increasing c per sample in fp64, one rounding per sample,
// samples in increasing b in fp32. Fast mode adds the rounded (b, c, h[, p]) partials with atomics.
// No tile: one block per (b, c, h) work item (grid-stride), one thread per headdim element.
#pragma once

#include "ssd/kernel_params.cuh"
#include "ssd/primitives/dtype.cuh"

namespace ssd_kernels {

template <class Spec, class Params>  // Params: GateBwdZParams with z, else GateBwdParams
__device__ void gate_bwd(const Params& p) {
  constexpr int Q = Spec::kChunk, P = Spec::kHeaddim;  // one thread per headdim element
  using T = typename Spec::Element;
  __shared__ double s_col[P];
  const int e = threadIdx.x;
  const long long work = p.batch * p.nchunks * p.nheads;
  for (long long w = blockIdx.x; w < work; w += gridDim.x) {
    const long long h = w % p.nheads, bc = w / p.nheads;
    const long long c = bc % p.nchunks, b = bc / p.nchunks;
    const long long valid = (c * Q + Q <= p.seqlen ? Q : p.seqlen - c * Q);
    double acc = 0.0;
    for (long long l = 0; l < valid; ++l) {
      const long long t = c * Q + l;
      const float g = load_as_float<T>(p.dout.data, p.dout.offset(b, t, h, e));
      float dy = g;
      if constexpr (Spec::kZ) {
        const float z = load_as_float<T>(p.z.data, p.z.offset(b, t, h, e));
        const float y = load_as_float<T>(p.out_x.data, p.out_x.offset(b, t, h, e));
        const float sig = 1.f / (1.f + expf(-z));
        dy = __fmul_rn(__fmul_rn(g, z), sig);
        const float dz = __fmul_rn(__fmul_rn(__fmul_rn(g, y), sig), __fmaf_rn(z, 1.f - sig, 1.f));
        const long long dy_off = p.dy.offset(b, t, h, e);
        const T dy_hi = from_float<T>(dy);
        static_cast<T*>(p.dy.data)[dy_off] = dy_hi;
        static_cast<T*>(p.dy_lo)[dy_off] = lo_term<T>(dy, dy_hi);  // laid out as dy
        store_from_float<T>(p.dz.data, p.dz.offset(b, t, h, e), dz);
      }
      if (Spec::kD) {
        const float x = load_as_float<T>(p.x.data, p.x.offset(b, t, h, e));
        acc = __fma_rn(double(dy), double(x), acc);
      }
    }
    if (Spec::kD) {
      if (Spec::kDPerHeaddim) {
        if (Spec::kDeterministic) p.partials[((b * p.nchunks + c) * p.nheads + h) * P + e] = acc;
        else atomicAdd(p.dD + h * P + e, __double2float_rn(acc));
      } else {
        s_col[e] = acc;
        __syncthreads();
        if (e == 0) {
          double sum = 0.0;
          for (int q = 0; q < P; ++q) sum = __dadd_rn(sum, s_col[q]);
          if (Spec::kDeterministic) p.partials[(b * p.nchunks + c) * p.nheads + h] = sum;
          else atomicAdd(p.dD + h, __double2float_rn(sum));
        }
        __syncthreads();
      }
    }
  }
}

}  // namespace ssd_kernels
