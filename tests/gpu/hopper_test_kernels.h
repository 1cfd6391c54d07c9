// Test kernels of the Hopper primitive layer (templates/ssd/primitives/hopper.cuh), NVRTC-compiled for
// sm_90a. The GPU tests (test_hopper_primitives.cpp) launch them; the CPU unit test compiles them and
// checks their PTX, so the instructions the GPU tests exercise are checked on every machine.
#pragma once

#include <string>

namespace hopper_test {

// Kernel names (extern "C").
inline const char* const kCopyNone = "hopper_tma_copy_none";
inline const char* const kCopySw128 = "hopper_tma_copy_sw128";
inline const char* const kCopy3d = "hopper_tma_copy_3d";  // 3-D map {cols, rows, 1}, no swizzle
inline const char* const kBulkCopy = "hopper_bulk_copy";

// Shapes of the copy test: one 64 x 64 bf16 tile per pipeline slot.
constexpr int kCopyTileRows = 64, kCopyTileCols = 64, kCopyStages = 3;
constexpr int kCopyThreads = 256;  // consumer warpgroup 0, producer warpgroup 1
constexpr int kCopySlotBytes = kCopyTileRows * kCopyTileCols * 2;
constexpr int kCopySharedBytes = kCopyStages * kCopySlotBytes + 1024;  // + alignment slack

// The GEMM test: D (M x N, fp32, row-major) = A (M x K) * B, M = 64 * CONSUMERS. Operand layouts:
enum GemmLayout {
  kKMajorSw128 = 0,    // A [M][K], B [N][K] row-major; TMA 2-D boxes {64, rows}, 128-byte swizzle
  kBMnMajorSw128 = 1,  // A as above, B [K][N] row-major (MN-major operand, transposed wgmma)
  kKMajorInterleave = 2,  // A [M][K], B [N][K]; the producer warpgroup stores unswizzled core matrices
  kARegisters = 3,     // as kKMajorSw128, A read from shared memory into registers (ldmatrix), mma_rs
};
constexpr int kGemmKTile = 64, kGemmStages = 3;
inline int gemm_threads(int consumers) { return 128 * (consumers + 1); }
inline int gemm_shared_bytes(int consumers, int n) {
  return kGemmStages * (64 * consumers + n) * kGemmKTile * 2 + 1024;
}
// extern "C" name of one instantiation.
inline std::string gemm_name(const char* dtype, int n, int consumers, int layout) {
  return std::string("hopper_gemm_") + dtype + "_n" + std::to_string(n) + "_c" + std::to_string(consumers) + "_l" +
         std::to_string(layout);
}

// The instantiations the tests use: (dtype, N, consumers, layout).
struct GemmVariant {
  const char* dtype;
  int n, consumers, layout;
};
inline const GemmVariant kGemmVariants[] = {
    {"bf16", 64, 1, kKMajorSw128},      {"bf16", 128, 1, kKMajorSw128},     {"bf16", 256, 1, kKMajorSw128},
    {"bf16", 128, 2, kKMajorSw128},     {"fp16", 128, 1, kKMajorSw128},     {"bf16", 128, 1, kBMnMajorSw128},
    {"bf16", 64, 2, kBMnMajorSw128},    {"bf16", 128, 1, kKMajorInterleave}, {"fp16", 64, 2, kKMajorInterleave},
    {"bf16", 128, 1, kARegisters},      {"fp16", 256, 2, kARegisters},       {"bf16", 32, 1, kKMajorSw128},
    {"fp16", 32, 2, kARegisters},
};

inline std::string kernel_source() {
  std::string src = R"CUDA(
#include "ssd/primitives/hopper.cuh"

using namespace ssd_kernels;

// Rounds the dynamic shared-memory base up to 1024 bytes (the 128-byte swizzle atom).
__device__ __forceinline__ unsigned char* align1024(unsigned char* p) {
  return reinterpret_cast<unsigned char*>((reinterpret_cast<unsigned long long>(p) + 1023ull) & ~1023ull);
}

// ---- (a) TMA tile copy through the pipeline. Tiles of 64 x 64 bf16 of a rows x cols matrix (edges
// zero-filled by TMA, clipped on store); CTA b takes tiles b, b + gridDim.x, ... Warpgroup 1's first
// thread produces; warpgroup 0 consumes: it writes out_ld (ordinary stores, reading the slot through the
// layout function) and its thread 0 writes out_tma with a TMA store of the same slot.
template <int SWIZZLE, int DIMS>
__device__ __forceinline__ void tma_copy(const TensorMap* in_map, const TensorMap* out_map, unsigned short* out_ld,
                                         int rows, int cols) {
  constexpr int kStages = 3, kTile = 64, kSlotBytes = kTile * kTile * 2;
  __shared__ Pipeline<kStages> pipe;
  extern __shared__ unsigned char dyn_smem[];
  unsigned char* slots = align1024(dyn_smem);
  if (threadIdx.x == 0) pipe.init(1, 128);
  __syncthreads();
  const int tiles_c = (cols + kTile - 1) / kTile, tiles = tiles_c * ((rows + kTile - 1) / kTile);
  if (threadIdx.x >= 128) {
    ptx::setmaxnreg_dec<40>();
    if (threadIdx.x == 128) {
      ptx::tma_prefetch_map(in_map);
      PipelineState<kStages> st;
      for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        pipe.producer_acquire(st);
        unsigned long long* bar = pipe.producer_expect_tx(st, kSlotBytes);
        if constexpr (DIMS == 3)
          ptx::tma_load_3d(slots + st.index * kSlotBytes, in_map, bar, (t % tiles_c) * kTile, (t / tiles_c) * kTile, 0);
        else
          ptx::tma_load_2d(slots + st.index * kSlotBytes, in_map, bar, (t % tiles_c) * kTile, (t / tiles_c) * kTile);
        st.advance();
      }
    }
  } else {
    ptx::setmaxnreg_inc<232>();
    PipelineState<kStages> st;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
      pipe.consumer_wait(st);
      const unsigned char* slot = slots + st.index * kSlotBytes;
      const int r0 = (t / tiles_c) * kTile, c0 = (t % tiles_c) * kTile;
      if (threadIdx.x == 0) {
        ptx::tma_store_2d(out_map, slot, c0, r0);
        ptx::bulk_commit_group();
      }
      for (int e = threadIdx.x; e < kTile * kTile; e += 128) {
        const int r = e / kTile, c = e % kTile;
        const unsigned off = SWIZZLE ? smem::swizzle128_offset(r, c) : unsigned(r * kTile + c) * 2u;
        if (r0 + r < rows && c0 + c < cols)
          out_ld[(long long)(r0 + r) * cols + c0 + c] = *reinterpret_cast<const unsigned short*>(slot + off);
      }
      if (threadIdx.x == 0) ptx::bulk_wait_group_read<0>();  // the store has read the slot
      pipe.consumer_release(st);
      st.advance();
    }
    if (threadIdx.x == 0) ptx::bulk_wait_group<0>();
  }
}

extern "C" __global__ void __launch_bounds__(256, 1)
hopper_tma_copy_none(const __grid_constant__ TensorMap in_map, const __grid_constant__ TensorMap out_map,
                     unsigned short* out_ld, int rows, int cols) {
  tma_copy<0, 2>(&in_map, &out_map, out_ld, rows, cols);
}
extern "C" __global__ void __launch_bounds__(256, 1)
hopper_tma_copy_sw128(const __grid_constant__ TensorMap in_map, const __grid_constant__ TensorMap out_map,
                      unsigned short* out_ld, int rows, int cols) {
  tma_copy<1, 2>(&in_map, &out_map, out_ld, rows, cols);
}

extern "C" __global__ void __launch_bounds__(256, 1)
hopper_tma_copy_3d(const __grid_constant__ TensorMap in_map, const __grid_constant__ TensorMap out_map,
                   unsigned short* out_ld, int rows, int cols) {
  tma_copy<0, 3>(&in_map, &out_map, out_ld, rows, cols);
}

// ---- 1-D bulk copy: `bytes` (multiple of 16) per chunk of 4096 through a two-slot pipeline whose
// consumer is all 128 threads; one block.
extern "C" __global__ void __launch_bounds__(128, 1)
hopper_bulk_copy(const unsigned char* in, unsigned char* out, unsigned bytes) {
  constexpr int kStages = 2, kChunk = 4096;
  __shared__ Pipeline<kStages> pipe;
  __shared__ __align__(128) unsigned char slots[kStages][kChunk];
  if (threadIdx.x == 0) pipe.init(1, 96);  // warps 1..3 consume
  __syncthreads();
  const unsigned chunks = (bytes + kChunk - 1) / kChunk;
  PipelineState<kStages> st;
  if (threadIdx.x < 32) {
    if (threadIdx.x == 0)
      for (unsigned i = 0; i < chunks; ++i) {
        const unsigned n = bytes - i * kChunk < kChunk ? bytes - i * kChunk : kChunk;
        pipe.producer_acquire(st);
        ptx::bulk_load(slots[st.index], in + (unsigned long long)i * kChunk, n, pipe.producer_expect_tx(st, n));
        st.advance();
      }
  } else {
    for (unsigned i = 0; i < chunks; ++i) {
      const unsigned n = bytes - i * kChunk < kChunk ? bytes - i * kChunk : kChunk;
      pipe.consumer_wait(st);
      for (unsigned e = threadIdx.x - 32; e < n; e += 96) out[(unsigned long long)i * kChunk + e] = slots[st.index][e];
      pipe.consumer_release(st);
      st.advance();
    }
  }
}

// ---- (b, c) GEMM: D = A * B (fp32), M = 64 * CONSUMERS, K a multiple of 64. Warpgroups 0..CONSUMERS-1
// consume (setmaxnreg up), warpgroup CONSUMERS produces (setmaxnreg down; its first thread issues TMA).
// Each k tile (64) is one pipeline slot holding A (M x 64) and B (N x 64 or 64 x N); a consumer issues
// 4 wgmma k16 steps per slot, keeps one group in flight (wait_group<1>) and releases the previous slot.
template <class T, int N, int CONSUMERS, int LAYOUT>
__device__ __forceinline__ void gemm(const TensorMap* map_a, const TensorMap* map_b, const T* a, const T* b, float* d,
                                     int K) {
  constexpr int kStages = 3, kKT = 64, kM = 64 * CONSUMERS;
  constexpr int kABytes = kM * kKT * 2, kBBytes = N * kKT * 2, kSlotBytes = kABytes + kBBytes;
  __shared__ Pipeline<kStages> pipe;
  extern __shared__ unsigned char dyn_smem[];
  unsigned char* slots = align1024(dyn_smem);
  // LAYOUT 2 fills slots with the producer warpgroup's ordinary stores (128 arrivals), the others by TMA.
  if (threadIdx.x == 0) pipe.init(LAYOUT == 2 ? 128 : 1, 128 * CONSUMERS);
  __syncthreads();
  const int k_tiles = K / kKT;
  const int wg = threadIdx.x / 128;
  if (wg == CONSUMERS) {
    ptx::setmaxnreg_dec<40>();
    if constexpr (LAYOUT == 2) {
      // Core-matrix interleave written with 16-byte stores; fence.proxy.async before handing the slot
      // to wgmma (the async proxy).
      const int p = threadIdx.x - 128 * CONSUMERS;
      PipelineState<kStages> st;
      for (int kt = 0; kt < k_tiles; ++kt) {
        pipe.producer_acquire(st);
        unsigned char* a_s = slots + st.index * kSlotBytes;
        unsigned char* b_s = a_s + kABytes;
        for (int c = p; c < kM * 8; c += 128) {
          const int r = c / 8, k = (c % 8) * 8;
          *reinterpret_cast<uint4*>(a_s + smem::interleave_offset(kM, r, k)) =
              *reinterpret_cast<const uint4*>(a + (long long)r * K + kt * kKT + k);
        }
        for (int c = p; c < N * 8; c += 128) {
          const int r = c / 8, k = (c % 8) * 8;
          *reinterpret_cast<uint4*>(b_s + smem::interleave_offset(N, r, k)) =
              *reinterpret_cast<const uint4*>(b + (long long)r * K + kt * kKT + k);
        }
        ptx::fence_proxy_async_shared();
        pipe.producer_commit(st);
        st.advance();
      }
    } else if (threadIdx.x == 128 * CONSUMERS) {
      PipelineState<kStages> st;
      for (int kt = 0; kt < k_tiles; ++kt) {
        pipe.producer_acquire(st);
        // LAYOUT 1 announces B's bytes apart (expect_tx, no arrival) before the arrival that carries A's:
        // the phase cannot complete before both are counted.
        if constexpr (LAYOUT == 1) ptx::mbarrier_expect_tx(&pipe.full[st.index], kBBytes);
        unsigned long long* bar = pipe.producer_expect_tx(st, LAYOUT == 1 ? kABytes : kSlotBytes);
        unsigned char* a_s = slots + st.index * kSlotBytes;
        unsigned char* b_s = a_s + kABytes;
        ptx::tma_load_2d(a_s, map_a, bar, kt * kKT, 0);
        if constexpr (LAYOUT == 1) {
#pragma unroll
          for (int j = 0; j < N / 64; ++j) ptx::tma_load_2d(b_s + j * kKT * 128, map_b, bar, j * 64, kt * kKT);
        } else {
          ptx::tma_load_2d(b_s, map_b, bar, kt * kKT, 0);
        }
        st.advance();
      }
    }
  } else {
    ptx::setmaxnreg_inc<232>();
    WgAcc<N> acc;
    acc.zero();
    PipelineState<kStages> st, release;
    for (int kt = 0; kt < k_tiles; ++kt) {
      pipe.consumer_wait(st);
      const T* a_s = reinterpret_cast<const T*>(slots + st.index * kSlotBytes);
      const T* b_s = reinterpret_cast<const T*>(slots + st.index * kSlotBytes + kABytes);
      FragA a_frag[kKT / 16];
      if constexpr (LAYOUT == 3) {
        // A (this warp's 16 rows) through ldmatrix from the swizzled tile: lane L addresses row L%16,
        // 8-column chunk 2s + L/16 of k step s.
        const int lane = threadIdx.x & 31, r = wg * 64 + (threadIdx.x & 127) / 32 * 16 + (lane & 15);
#pragma unroll
        for (int s = 0; s < kKT / 16; ++s)
          ptx::ldmatrix_x4(a_frag[s].x, ptx::smem_addr(reinterpret_cast<const unsigned char*>(a_s) +
                                                         smem::swizzle128_offset(r, s * 16 + (lane >> 4) * 8)));
      }
      warpgroup::fence_operand(acc);
      warpgroup::fence();
#pragma unroll
      for (int s = 0; s < kKT / 16; ++s) {
        const bool accumulate = kt > 0 || s > 0;
        if constexpr (LAYOUT == 0) {
          warpgroup::mma_ss<T, 0, 0>(acc, smem::desc_k_major_sw128(a_s + wg * 64 * kKT, 64, s * 16),
                                     smem::desc_k_major_sw128(b_s, N, s * 16), accumulate);
        } else if constexpr (LAYOUT == 1) {
          warpgroup::mma_ss<T, 0, 1>(acc, smem::desc_k_major_sw128(a_s + wg * 64 * kKT, 64, s * 16),
                                     smem::desc_mn_major_sw128(b_s, kKT, s * 16), accumulate);
        } else if constexpr (LAYOUT == 2) {
          warpgroup::mma_ss<T, 0, 0>(acc, smem::desc_k_major_interleave(a_s + wg * 64 * 8, kM, s * 16),
                                     smem::desc_k_major_interleave(b_s, N, s * 16), accumulate);
        } else {
          warpgroup::mma_rs<T, 0>(acc, a_frag[s], smem::desc_k_major_sw128(b_s, N, s * 16), accumulate);
        }
      }
      warpgroup::commit_group();
      warpgroup::fence_operand(acc);
      // The group of the previous slot has finished reading it: release that slot.
      warpgroup::wait_group<1>();
      warpgroup::fence_operand(acc);
      if (kt > 0) {
        pipe.consumer_release(release);
        release.advance();
      }
      st.advance();
    }
    warpgroup::wait_group<0>();
    warpgroup::fence_operand(acc);
    if (k_tiles > 0) pipe.consumer_release(release);
#pragma unroll
    for (int i = 0; i < WgAcc<N>::kRegs; ++i) d[(wg * 64 + WgAcc<N>::row(i)) * N + WgAcc<N>::col(i)] = acc.x[i];
  }
}
)CUDA";
  for (const GemmVariant& v : kGemmVariants) {
    const std::string threads = std::to_string(gemm_threads(v.consumers));
    src += "extern \"C\" __global__ void __launch_bounds__(" + threads + ", 1)\n" +
           gemm_name(v.dtype, v.n, v.consumers, v.layout) +
           "(const __grid_constant__ TensorMap map_a, const __grid_constant__ TensorMap map_b, const " + v.dtype +
           "* a, const " + v.dtype + "* b, float* d, int K) {\n  gemm<" + v.dtype + ", " + std::to_string(v.n) + ", " +
           std::to_string(v.consumers) + ", " + std::to_string(v.layout) + ">(&map_a, &map_b, a, b, d, K);\n}\n";
  }
  return src;
}

}  // namespace hopper_test
