// reduce_head_partials: finishes a per-head gradient from per-(batch, chunk) partials.
//
//   out[j][h] = sum_{b=0..B-1} ( sum_{c=0..Nc-1} partials[b][c][h][j] )
//
// Canonical order (docs/determinism.md): for each b, the chunk partials are added in increasing c
// starting from +0.0; the per-sample sums are then added in increasing b starting from +0.0. One
// thread owns one head's P outputs, so neither the block size nor the grid size changes the bits, and
// a sample's contribution does not depend on which other samples share the batch.
#pragma once

#include "ssd/kernel_params.cuh"

namespace ssd_kernels {

template <int BLOCK, int P>
__device__ void reduce_head_partials(const ReduceHeadPartialsParams& p) {
  for (long long h = (long long)blockIdx.x * BLOCK + threadIdx.x; h < p.nheads; h += (long long)gridDim.x * BLOCK) {
    float total[P];
#pragma unroll
    for (int j = 0; j < P; ++j) total[j] = 0.f;
    for (long long b = 0; b < p.batch; ++b) {
      float sample[P];
#pragma unroll
      for (int j = 0; j < P; ++j) sample[j] = 0.f;
      const float* row = p.partials + b * p.nchunks * p.nheads * P + h * P;
      for (long long c = 0; c < p.nchunks; ++c) {
#pragma unroll
        for (int j = 0; j < P; ++j) sample[j] = __fadd_rn(sample[j], row[c * p.nheads * P + j]);
      }
#pragma unroll
      for (int j = 0; j < P; ++j) total[j] = __fadd_rn(total[j], sample[j]);
    }
#pragma unroll
    for (int j = 0; j < P; ++j) p.out[j][h * p.out_stride[j]] = total[j];
  }
}

}  // namespace ssd_kernels
