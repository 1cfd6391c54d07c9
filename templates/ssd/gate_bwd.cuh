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
// P column sums of a (b, c, h) are then added in increasing p from +0.0 in fp64 by one thread.
// reduce_head_partials finishes: chunks in increasing c per sample in fp64, one rounding per sample,
// samples in increasing b in fp32. Fast mode adds the rounded (b, c, h[, p]) partials with atomics.
//
// No tile. Mapping (gate_geom in kernel_params.cuh): a thread owns 8 consecutive p of one (b, c, h),
// P/8 threads a head, a block of 64 threads gate_geom::heads_per_block(P) adjacent heads of one
// (b, c) (the last block of a (b, c) predicated past nheads); the work items, (b, c, head block),
// grid-stride. Why: the kernel is a stream over dout and x (and z, out_x), and with one thread per p
// its 2-byte loads made L2 requests, not bytes, the limit; a thread's row of 8 p is one 16-byte load
// (the heads of a block are adjacent in memory for contiguous tensors), the l loop loads kRows rows
// before it uses them (several loads per thread in flight), and with z dy, dy_lo and dz are 16-byte
// stores. When any touched view does not allow 16-byte access (vec16_rows), the whole launch takes
// per-element loads and stores: the same values, the same order per output.
#pragma once

#include "ssd/chunk_scan.cuh"  // detail::load8
#include "ssd/kernel_params.cuh"
#include "ssd/primitives/dtype.cuh"
#include "ssd/primitives/mma.cuh"  // ptx::st_global_v4
#include "ssd/primitives/sigmoid.cuh"  // recip_one_plus
#include "ssd/primitives/spec.cuh"  // vec16_rows, aligned16

namespace ssd_kernels {

namespace gate_detail {

// 8 consecutive p of one row, already rounded to T: one 16-byte store, or 8 stores at stride sp.
template <bool VEC, class T>
__device__ __forceinline__ void store_row8(T* ptr, long long sp, const T (&v)[8]) {
  if constexpr (VEC) {
    // ptx::st_global_v4: a uint4 assignment came out of NVVM as four 4-byte stores (the row
    // pointers' 16-byte alignment lost in the loop's address arithmetic).
    ptx::st_global_v4(ptr, unsigned(v[0].bits) | (unsigned(v[1].bits) << 16),
                      unsigned(v[2].bits) | (unsigned(v[3].bits) << 16),
                      unsigned(v[4].bits) | (unsigned(v[5].bits) << 16),
                      unsigned(v[6].bits) | (unsigned(v[7].bits) << 16));
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) ptr[i * sp] = v[i];
  }
}

// One (b, c, h) item's view of a thread's 8 p: each tensor's pointer at the chunk's first row, its
// row (l) stride and its p stride.
template <class T>
struct RowView {
  T* row0;
  long long sl, sp;
  template <class Erased, int N>
  __device__ __forceinline__ RowView(const TensorRef<Erased, N>& v, long long b, long long t0, long long h, int e0)
      : row0(static_cast<T*>(v.data) + v.offset(b, t0, h, e0)), sl(v.stride[1]), sp(v.stride[3]) {}
  __device__ __forceinline__ T* at(int l) const { return row0 + l * sl; }
};

template <class Spec, bool VEC>
struct ChunkRows {
  using T = typename Spec::Element;
  RowView<const T> dout, x, z, out_x;  // x with D, z and out_x with z
  RowView<T> dy, dz;                   // with z
  T* dy_lo;                            // with z: laid out as dy (dy's offset and strides)
  template <class Params>
  __device__ __forceinline__ ChunkRows(const Params& p, long long b, long long t0, long long h, int e0)
      : dout(p.dout, b, t0, h, e0), x(p.x, b, t0, h, e0), z(p.z, b, t0, h, e0), out_x(p.out_x, b, t0, h, e0),
        dy(p.dy, b, t0, h, e0), dz(p.dz, b, t0, h, e0), dy_lo(nullptr) {
    if constexpr (Spec::kZ) dy_lo = static_cast<T*>(p.dy_lo) + p.dy.offset(b, t0, h, e0);
  }

  // N rows from l: all their loads first (in flight together), then the rows in increasing l, each
  // the fp32 dy of 8 p (stored with z), then the 8 fma chains.
  template <int N>
  __device__ __forceinline__ void run(int l, double (&acc)[8]) const {
    float g[N][8], xv[N][8], zv[N][8], yv[N][8];  // xv with D, zv and yv with z
#pragma unroll
    for (int r = 0; r < N; ++r) {
      detail::load8<T>(dout.at(l + r), 0, dout.sp, VEC, g[r]);
      if constexpr (Spec::kD) detail::load8<T>(x.at(l + r), 0, x.sp, VEC, xv[r]);
      if constexpr (Spec::kZ) {
        detail::load8<T>(z.at(l + r), 0, z.sp, VEC, zv[r]);
        detail::load8<T>(out_x.at(l + r), 0, out_x.sp, VEC, yv[r]);
      }
    }
#pragma unroll
    for (int r = 0; r < N; ++r) {
      float dy_f[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) dy_f[i] = g[r][i];
      if constexpr (Spec::kZ) {
        T dy_hi[8], dy_lo_t[8], dz_t[8];
        // σ(z) = 1 / (1 + expf(−z)) with the IEEE division, the eight at once without a branch each
        // (primitives/sigmoid.cuh).
        float ez[8], sigs[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) ez[i] = expf(-zv[r][i]);
        recip_one_plus<8>(ez, sigs);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const float gi = g[r][i], zi = zv[r][i], yi = yv[r][i];
          const float sig = sigs[i];
          dy_f[i] = __fmul_rn(__fmul_rn(gi, zi), sig);
          const float dzf = __fmul_rn(__fmul_rn(__fmul_rn(gi, yi), sig), __fmaf_rn(zi, 1.f - sig, 1.f));
          dy_hi[i] = from_float<T>(dy_f[i]);
          dy_lo_t[i] = lo_term<T>(dy_f[i], dy_hi[i]);
          dz_t[i] = from_float<T>(dzf);
        }
        store_row8<VEC>(dy.at(l + r), dy.sp, dy_hi);
        store_row8<VEC>(dy_lo + (l + r) * dy.sl, dy.sp, dy_lo_t);
        store_row8<VEC>(dz.at(l + r), dz.sp, dz_t);
      }
      if constexpr (Spec::kD) {
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[i] = __fma_rn(double(dy_f[i]), double(xv[r][i]), acc[i]);
      }
    }
  }
};

// D (h): the block's heads' P column sums, for each head's one summing thread. One array for both
// gate_bwd_items instantiations (a __shared__ declared there would be two).
template <int H, int P>
__device__ __forceinline__ double (&head_columns())[H][P] {
  __shared__ double cols[H][P];
  return cols;
}

// The (b, c, head block) items of one block. VEC: every tensor the specialization touches allows
// 16-byte rows.
template <class Spec, bool VEC, class Params>
__device__ __forceinline__ void gate_bwd_items(const Params& p) {
  constexpr int Q = Spec::kChunk, P = Spec::kHeaddim;
  constexpr int kHeadThreads = gate_geom::threads_per_head(P), kHeads = gate_geom::heads_per_block(P);
  // Rows loaded before the first of them is used: 4 rows of two 16-byte loads (dout, x); with z one
  // row, already four loads (more rows held ~190 registers, past 128 they spilled).
  constexpr int kRows = Spec::kZ ? 1 : 4;
  static_assert(Q % kRows == 0, "gate_bwd: a full chunk is a whole number of row groups");
  using T = typename Spec::Element;
  const int head = threadIdx.x / kHeadThreads;
  const int e0 = (threadIdx.x % kHeadThreads) * 8;  // the thread's first p
  const long long head_blocks = gate_geom::head_blocks(p.nheads, P);
  const long long work = p.batch * p.nchunks * head_blocks;
  for (long long w = blockIdx.x; w < work; w += gridDim.x) {
    const long long h = (w % head_blocks) * kHeads + head, bc = w / head_blocks;
    const long long c = bc % p.nchunks, b = bc / p.nchunks;
    const int valid = int(c * Q + Q <= p.seqlen ? Q : p.seqlen - c * Q);
    const bool live = h < p.nheads;  // the last head block of a (b, c) may reach past nheads
    double acc[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i] = 0.0;
    if (live) {
      ChunkRows<Spec, VEC> rows(p, b, c * Q, h, e0);
      int l = 0;
#pragma unroll 1
      for (; l + kRows <= valid; l += kRows) rows.template run<kRows>(l, acc);
#pragma unroll 1
      for (; l < valid; ++l) rows.template run<1>(l, acc);  // a partial last chunk's remainder
    }
    if constexpr (Spec::kD) {
      if constexpr (Spec::kDPerHeaddim) {
        if (live) {
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            if (Spec::kDeterministic) p.partials[((b * p.nchunks + c) * p.nheads + h) * P + e0 + i] = acc[i];
            else atomicAdd(p.dD + h * P + e0 + i, __double2float_rn(acc[i]));
          }
        }
      } else {
        double (&s_col)[kHeads][P] = head_columns<kHeads, P>();
        // A head's threads are one aligned group of P/8 lanes of a warp, and every lane of the block
        // runs every item: __syncwarp orders the group's column writes and its summing thread's reads.
#pragma unroll
        for (int i = 0; i < 8; ++i) s_col[head][e0 + i] = acc[i];
        __syncwarp();
        if (live && e0 == 0) {
          double sum = 0.0;
          for (int q = 0; q < P; ++q) sum = __dadd_rn(sum, s_col[head][q]);
          if (Spec::kDeterministic) p.partials[(b * p.nchunks + c) * p.nheads + h] = sum;
          else atomicAdd(p.dD + h, __double2float_rn(sum));
        }
        __syncwarp();  // the next item's column writes after this item's sum
      }
    }
  }
}

}  // namespace gate_detail

template <class Spec, class Params>  // Params: GateBwdZParams with z, else GateBwdParams
__device__ void gate_bwd(const Params& p) {
  // One decision for the whole launch: every touched view allows 16-byte rows (dy_lo: dy's strides).
  bool vec = vec16_rows(p.dout.data, p.dout);
  if constexpr (Spec::kD) vec = vec && vec16_rows(p.x.data, p.x);
  if constexpr (Spec::kZ)
    vec = vec && vec16_rows(p.z.data, p.z) && vec16_rows(p.out_x.data, p.out_x) && vec16_rows(p.dy.data, p.dy) &&
          aligned16(p.dy_lo) && vec16_rows(p.dz.data, p.dz);
  if (vec) gate_detail::gate_bwd_items<Spec, true>(p);
  else gate_detail::gate_bwd_items<Spec, false>(p);
}

}  // namespace ssd_kernels
