// reduce_head_partials: finishes a per-head gradient from per-(batch, chunk) partials.
//
//   out[j][h] = sum_{b=0..B-1} rn_fp32( sum_{c=0..Nc-1} partials[b][c][h][j] )
//
// Canonical order (docs/determinism.md): for each b, the fp64 chunk partials are added in
// increasing c starting from +0.0 in fp64 and the per-sample sum is rounded to fp32 once (what a
// call with that sample alone returns); the per-sample results are then added in increasing b
// starting from +0.0 in fp32, so a batch's sum is the ordered fp32 sum of its samples' results. One
// thread owns one head's P outputs, so neither the block size nor the grid size changes the bits, and
// a sample's contribution does not depend on which other samples share the batch.
#pragma once

#include "ssd/kernel_params.cuh"

namespace ssd_kernels {

inline constexpr int kReduceBatch = 8;  // chunk partials loaded per batch of the chain

template <class Spec>
__device__ void reduce_head_partials(const ReduceHeadPartialsParams& p) {
  constexpr int BLOCK = Spec::kBlock, P = Spec::kPartials;  // heads per block, values per record
  for (long long h = (long long)blockIdx.x * BLOCK + threadIdx.x; h < p.nheads; h += (long long)gridDim.x * BLOCK) {
    float total[P];
#pragma unroll
    for (int j = 0; j < P; ++j) total[j] = 0.f;
    for (long long b = 0; b < p.batch; ++b) {
      double sample[P];
#pragma unroll
      for (int j = 0; j < P; ++j) sample[j] = 0.0;
      const double* row = p.partials + b * p.nchunks * p.nheads * P + h * P;
      const long long step = p.nheads * P;  // from one chunk's record to the next
      // Eight chunks' partials are loaded before they are added (the same adds in the same order):
      // the chain then waits for one memory latency per eight chunks instead of one per chunk.
      long long c = 0;
      for (; c + kReduceBatch <= p.nchunks; c += kReduceBatch) {
        double v[kReduceBatch][P];
#pragma unroll
        for (int q = 0; q < kReduceBatch; ++q)
#pragma unroll
          for (int j = 0; j < P; ++j) v[q][j] = row[(c + q) * step + j];
#pragma unroll
        for (int q = 0; q < kReduceBatch; ++q)
#pragma unroll
          for (int j = 0; j < P; ++j) sample[j] = __dadd_rn(sample[j], v[q][j]);
      }
      for (; c < p.nchunks; ++c) {
#pragma unroll
        for (int j = 0; j < P; ++j) sample[j] = __dadd_rn(sample[j], row[c * step + j]);
      }
#pragma unroll
      for (int j = 0; j < P; ++j) total[j] = __fadd_rn(total[j], __double2float_rn(sample[j]));
    }
#pragma unroll
    for (int j = 0; j < P; ++j) p.out[j](h) = total[j];
  }
}

}  // namespace ssd_kernels
