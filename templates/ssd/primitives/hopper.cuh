// Hopper (sm_90a) primitives: mbarrier, TMA (cp.async.bulk / cp.async.bulk.tensor), wgmma, setmaxnreg,
// and a Pipeline<STAGES> of full/empty mbarriers for the TMA-producer / wgmma-consumer pattern. Same
// scopes as mma.cuh:
//
//   ptx::        one thread: mbarrier operations, TMA copies, proxy fences, setmaxnreg
//   warpgroup::  four consecutive warps (128 threads, first warp index divisible by 4) that issue wgmma
//                together; its accumulator fragment WgAcc<N> knows its thread -> (row, col) mapping
//   smem::       shared-memory tile layouts (128-byte swizzle, core-matrix interleave) and the wgmma
//                matrix descriptors that describe them
//   Pipeline     the mbarrier ring (block scope, roles: producer and consumers)
//
// NVRTC-safe (no system or CUDA headers). Compiles only for --gpu-architecture=sm_90a: wgmma and
// setmaxnreg exist only on that target (PTX ISA 9.7.15 "Asynchronous Warpgroup Level Matrix
// Multiply-Accumulate Instructions", and "setmaxnreg"); NVRTC defines __CUDA_ARCH_FEAT_SM90_ALL for it.
// References name the PTX ISA sections (section numbers move between ISA versions; 9.7.15 is wgmma
// in ISA 8.x/9.0).
//
// Layout facts used below (PTX ISA 9.7.15.5.1 "Register Fragments and Shared Memory Matrix
// Layouts", with its "Matrix Descriptor Format"):
//   * A core matrix is 8 rows x 16 bytes (8 x 8 16-bit elements), 128 contiguous bytes.
//   * 128-byte swizzle: the 16-byte chunk j of row r (r counted from a 1024-byte aligned base) is stored
//     at chunk j ^ (r % 8). This is what TMA writes with CU_TENSOR_MAP_SWIZZLE_128B for a box whose inner
//     dimension is 128 bytes, so TMA tiles feed wgmma directly.
//   * wgmma D (m64nNk16, fp32): thread t of the warpgroup, warp w = t / 32, lane l = t % 32, register i
//     holds D[16w + l/4 + 8*((i/2)%2)][8*(i/4) + 2*(l%4) + i%2]  (the mma.m16n8 C layout tiled over N).
//   * wgmma A from registers (m64k16, 16-bit): warp w holds rows 16w..16w+15 as an mma.m16n8k16 A
//     fragment (FragA of mma.cuh).
#pragma once

#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "ssd/primitives/hopper.cuh needs the sm_90a target (--gpu-architecture=sm_90a): wgmma, setmaxnreg"
#endif

#include "ssd/primitives/mma.cuh"
#include "ssd/primitives/tensor_map.cuh"

namespace ssd_kernels {

// TensorMap (the opaque CUtensorMap the TMA copies below take): primitives/tensor_map.cuh.

// ================================================================================================
// Thread scope.
namespace ptx {

// ---- mbarrier (PTX ISA "Parallel Synchronization and Communication Instructions:
// mbarrier"). A 64-bit shared-memory object counting arrivals and transaction bytes; a phase completes
// when both pending counts reach zero, then the barrier re-arms with the init count and flips parity.

// mbarrier.init: `arrivals` arrivals complete each phase. One thread; then fence_mbarrier_init() and a
// block barrier before any other thread or the copy engine uses it.
__device__ __forceinline__ void mbarrier_init(unsigned long long* bar, unsigned arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(arrivals) : "memory");
}
// fence.mbarrier_init (PTX ISA "membar/fence"): makes prior mbarrier.init visible to the async
// proxy (the copy engine completes transactions on the barrier) and to the cluster.
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// mbarrier.arrive (release, CTA scope): one arrival.
__device__ __forceinline__ void mbarrier_arrive(unsigned long long* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
// mbarrier.arrive.expect_tx: raises the pending transaction count by `bytes` (the bytes the copies
// completing on this barrier will deliver), then one arrival.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(unsigned long long* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}
// mbarrier.expect_tx: raises the pending transaction count without arriving.
__device__ __forceinline__ void mbarrier_expect_tx(unsigned long long* bar, unsigned bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}
// mbarrier.try_wait.parity (acquire, CTA scope): true once the phase with parity `parity` has
// completed. A barrier whose current phase has parity p reports the phase of parity !p as complete,
// which is how a fresh "empty" barrier reads as free (Pipeline below).
__device__ __forceinline__ bool mbarrier_try_wait(unsigned long long* bar, unsigned parity) {
  unsigned done;
  asm volatile(
      "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }\n"
      : "=r"(done)
      : "r"(smem_addr(bar)), "r"(parity)
      : "memory");
  return done != 0;
}
// Blocks until the phase with parity `parity` has completed. With SSD_MBARRIER_SPIN_LIMIT defined (the
// GPU tests do), a wait that spins that many times traps, so a broken protocol fails the launch instead
// of hanging the device.
__device__ __forceinline__ void mbarrier_wait(unsigned long long* bar, unsigned parity) {
#ifdef SSD_MBARRIER_SPIN_LIMIT
  long long spins = 0;
  while (!mbarrier_try_wait(bar, parity))
    if (++spins == (long long)(SSD_MBARRIER_SPIN_LIMIT)) __trap();
#else
  while (!mbarrier_try_wait(bar, parity)) {
  }
#endif
}

// ---- Proxy fence (PTX ISA "membar/fence", fence.proxy.async). Shared memory written by ordinary
// stores (st.shared, stmatrix) that the copy engine (TMA store) or wgmma reads next: each writing thread
// fences before the barrier that hands the data over.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// ---- TMA: bulk copies by the copy engine (PTX ISA "Data Movement and Conversion Instructions:
// cp.async.bulk", "cp.async.bulk.tensor"). Issued by one thread; loads complete on an
// mbarrier (complete_tx: the delivered bytes count down the barrier's pending transactions).

// prefetch.tensormap (PTX ISA "prefetch, prefetchu"): pulls a tensor map into the descriptor cache.
__device__ __forceinline__ void tma_prefetch_map(const TensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(map) : "memory");
}
// Tile of a 2-D tensor map at element coordinates (c0 = innermost, c1) -> shared `dst` (aligned to 128
// bytes, 1024 for the 128-byte swizzle). Elements outside the tensor are filled with zeros; the full
// box size is always counted in the transaction bytes.
__device__ __forceinline__ void tma_load_2d(void* dst, const TensorMap* map, unsigned long long* bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n"
      ::"r"(smem_addr(dst)), "l"(map), "r"(smem_addr(bar)), "r"(c0), "r"(c1)
      : "memory");
}
// Same for a 3-D tensor map (c0 innermost).
__device__ __forceinline__ void tma_load_3d(void* dst, const TensorMap* map, unsigned long long* bar, int c0, int c1,
                                            int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], "
      "[%2];\n" ::"r"(smem_addr(dst)),
      "l"(map), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
// Same for a 4-D tensor map (c0 innermost).
__device__ __forceinline__ void tma_load_4d(void* dst, const TensorMap* map, unsigned long long* bar, int c0, int c1,
                                            int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], "
      "[%2];\n" ::"r"(smem_addr(dst)),
      "l"(map), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}
// Shared `src` -> the tile of a 2-D tensor map at (c0, c1); elements outside the tensor are not
// written. Completes in a bulk group: bulk_commit_group(), then bulk_wait_group_read<0>() before `src`
// is overwritten, bulk_wait_group<0>() before the global data is needed. Ordinary stores into `src`
// need fence_proxy_async_shared() first.
__device__ __forceinline__ void tma_store_2d(const TensorMap* map, const void* src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(map),
               "r"(smem_addr(src)), "r"(c0), "r"(c1)
               : "memory");
}
// Contiguous global -> shared copy of `bytes` (multiple of 16; both addresses 16-byte aligned),
// completing on `bar`.
__device__ __forceinline__ void bulk_load(void* dst, const void* src, unsigned bytes, unsigned long long* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
}
// cp.async.bulk.commit_group / wait_group (PTX ISA "cp.async.bulk.wait_group"): bulk stores issued by this thread.
__device__ __forceinline__ void bulk_commit_group() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// At most N of this thread's bulk groups still pending (writes to global complete).
template <int N>
__device__ __forceinline__ void bulk_wait_group() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}
// At most N still reading their shared-memory source (the source may be reused).
template <int N>
__device__ __forceinline__ void bulk_wait_group_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}

// ---- setmaxnreg (PTX ISA "Miscellaneous Instructions: setmaxnreg"). Executed by all threads of a
// warpgroup: sets the warpgroup's per-thread register count to REGS (24..256, multiple of 8), releasing
// registers to (dec) or taking them from (inc, blocks until available) the CTA's pool. It takes effect
// only when the kernel has a register count at entry (__launch_bounds__(threads, 1)); otherwise ptxas
// ignores it with warning C7508. The pool is what the warpgroups hold at entry, so the increases must
// be paid for by the decreases (e.g. 384 threads enter with 168: one warpgroup 40, two 232).
template <int REGS>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(REGS >= 24 && REGS <= 256 && REGS % 8 == 0, "setmaxnreg: 24..256, a multiple of 8");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGS));
}
template <int REGS>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(REGS >= 24 && REGS <= 256 && REGS % 8 == 0, "setmaxnreg: 24..256, a multiple of 8");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGS));
}

}  // namespace ptx

// ================================================================================================
// Shared-memory tile layouts and wgmma matrix descriptors ("Matrix Descriptor Format" of the wgmma
// section). A descriptor is 64 bits:
//   bits  0-13  start address >> 4          bits 16-29  leading-dimension byte offset (LBO) >> 4
//   bits 32-45  stride-dimension byte offset (SBO) >> 4
//   bits 49-51  base offset (0: the swizzle pattern starts at a 1024-byte aligned address)
//   bits 62-63  swizzle: 0 none (core-matrix interleave), 1 128-byte, 2 64-byte, 3 32-byte
// For a K-major operand (K contiguous: A as [m][k], B as [n][k]) SBO is the distance between 8-row
// groups along M/N; LBO the distance between core matrices adjacent along K (unused with a swizzle,
// whose 128-byte row holds the K extent of the atom). For an MN-major operand (M/N contiguous: A as
// [k][m], B as [k][n]; wgmma's transpose flag set) SBO is the distance between 8-row groups along K and
// LBO the distance between 64-element column blocks along M/N.
namespace smem {

enum Swizzle : int { kInterleave = 0, kSwizzle128B = 1, kSwizzle64B = 2, kSwizzle32B = 3 };

__device__ __forceinline__ unsigned long long make_desc(const void* start, unsigned lbo_bytes, unsigned sbo_bytes,
                                                       Swizzle swizzle) {
  const unsigned addr = ptx::smem_addr(start);
  return (unsigned long long)((addr >> 4) & 0x3FFFu) | ((unsigned long long)((lbo_bytes >> 4) & 0x3FFFu) << 16) |
         ((unsigned long long)((sbo_bytes >> 4) & 0x3FFFu) << 32) | ((unsigned long long)swizzle << 62);
}

// ---- 128-byte swizzled tiles of 16-bit elements: `rows` rows of 64 elements (128 bytes), base aligned
// to 1024 bytes; what TMA writes for a box {64, rows} with CU_TENSOR_MAP_SWIZZLE_128B. A wider K (or
// M/N) extent is several such tiles side by side, `rows * 128` bytes apart.

// Byte offset of element (r, c) in a swizzled tile: smem::swizzle128_offset (primitives/mma.cuh,
// for every target: cp.async writers on any arch).

// K-major operand (A [m][k] or B [n][k]) in swizzled tiles of `rows` rows x 64 k each: the
// descriptor of the m64/nN x k16 slice starting at column k (multiple of 16). Within the atom the K step
// is a plain 32-byte start-address advance: the hardware applies the swizzle to the computed address.
template <class T>
__device__ __forceinline__ unsigned long long desc_k_major_sw128(const T* tile, int rows, int k) {
  static_assert(sizeof(T) == 2, "16-bit operands");
  const char* p = reinterpret_cast<const char*>(tile) + (k >> 6) * rows * 128 + (k & 63) * 2;
  return make_desc(p, 16, 1024, kSwizzle128B);
}
// MN-major operand (A [k][m] or B [k][n], use with transpose) in swizzled tiles of `k_rows` rows (k)
// x 64 m/n each, the tiles for m/n 0..63, 64..127, ... `k_rows * 128` bytes apart: the descriptor of
// the k16 slice starting at row k (multiple of 16).
template <class T>
__device__ __forceinline__ unsigned long long desc_mn_major_sw128(const T* tile, int k_rows, int k) {
  static_assert(sizeof(T) == 2, "16-bit operands");
  return make_desc(reinterpret_cast<const char*>(tile) + k * 128, unsigned(k_rows) * 128u, 1024, kSwizzle128B);
}

// The same descriptors from 32-bit halves (make_desc's bits): the low word holds the start address
// >> 4 (14 bits, which covers the whole shared window) and the LBO; the high word the SBO (1024 bytes)
// and the 128-byte swizzle. A start address advanced by `bytes` is the low word + bytes / 16, no 64-bit
// arithmetic.
__device__ __forceinline__ unsigned desc_lo_sw128(unsigned smem_address, unsigned lbo_bytes) {
  return (smem_address >> 4) | ((lbo_bytes >> 4) << 16);
}
__device__ __forceinline__ unsigned long long desc_sw128(unsigned lo) {
  unsigned long long d;
  asm("mov.b64 %0, {%1, %2};" : "=l"(d) : "r"(lo), "r"((1024u >> 4) | (unsigned(smem::kSwizzle128B) << 30)));
  return d;
}
// (desc_k_major_sw128(tile, rows, k) is desc_sw128(desc_lo_sw128(smem_addr(tile) + (k / 64) · rows · 128 +
// (k % 64) · 2, 16)); desc_mn_major_sw128(tile, k_rows, k) is desc_sw128(desc_lo_sw128(smem_addr(tile) +
// k · 128, k_rows · 128)). Kernels form the low word once per stage and advance it by 32-bit adds: a
// few instructions per wgmma instead of ~20 from a generic pointer.)

// ---- Interleaved (unswizzled) K-major tiles: core matrices of 8 rows x 8 k, ordered k-block-major:
// element (r, k) of a tile of `rows` rows at byte ((k/8) * rows + r) * 16 + (k%8) * 2. TMA writes it for
// the 3-D view {8, rows, k/8} of a row-major matrix (tests/gpu/test_hopper_primitives.cpp); ordinary
// stores write it conflict-free. 128-byte aligned base.
__host__ __device__ constexpr unsigned interleave_offset(int rows, int r, int k) {
  return (unsigned(k >> 3) * unsigned(rows) + unsigned(r)) * 16u + unsigned(k & 7) * 2u;
}
template <class T>
__device__ __forceinline__ unsigned long long desc_k_major_interleave(const T* tile, int rows, int k) {
  static_assert(sizeof(T) == 2, "16-bit operands");
  const char* p = reinterpret_cast<const char*>(tile) + (k >> 3) * rows * 16;
  return make_desc(p, unsigned(rows) * 16u, 128, kInterleave);
}

}  // namespace smem

// ================================================================================================
// Warpgroup scope: wgmma ("Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions").
// All 128 threads of the warpgroup execute every call (.sync.aligned), without divergence.

// The fp32 accumulator of a 64 x N wgmma tile (N a multiple of 8), N/2 registers per thread; the
// mapping is the "wgmma D" line of the header comment.
template <int N>
struct WgAcc {
  static_assert(N % 8 == 0 && N >= 8 && N <= 256, "wgmma N: 8..256, a multiple of 8");
  static constexpr int kRegs = N / 2;
  float x[kRegs];

  // Row / column of register i for warpgroup thread t (0..127).
  static __host__ __device__ constexpr int row_of(int t, int i) {
    return (t >> 5) * 16 + ((t & 31) >> 2) + 8 * ((i >> 1) & 1);
  }
  static __host__ __device__ constexpr int col_of(int t, int i) { return (i >> 2) * 8 + (t & 3) * 2 + (i & 1); }
  // The same for the calling thread.
  static __device__ __forceinline__ int row(int i) { return row_of(int(threadIdx.x & 127), i); }
  static __device__ __forceinline__ int col(int i) { return col_of(int(threadIdx.x & 127), i); }

  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int i = 0; i < kRegs; ++i) x[i] = 0.f;
  }
};

namespace warpgroup {

// wgmma.fence: orders this warpgroup's prior register and shared-memory accesses before the following
// wgmma.mma_async (needed before the first one, and after the accumulators or an A fragment were
// written by ordinary instructions).
__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
// wgmma.commit_group: closes the group of wgmma.mma_async issued since the last commit.
__device__ __forceinline__ void commit_group() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// wgmma.wait_group: waits until at most N committed groups are pending; only then may their
// accumulators be read and their shared-memory operands be overwritten (release a pipeline stage).
template <int N>
__device__ __forceinline__ void wait_group() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accesses of the accumulators across the asynchronous wgmma (they are
// "in flight" between mma_async and wait_group): an empty asm that reads and writes each register.
template <int N>
__device__ __forceinline__ void fence_operand(WgAcc<N>& acc) {
#pragma unroll
  for (int i = 0; i < WgAcc<N>::kRegs; ++i) asm volatile("" : "+f"(acc.x[i])::"memory");
}

// The asm operand lists of wgmma.mma_async: the fp32 accumulators are asm operands %0..%(N/2-1),
// built from blocks of 16 (SSD_WGMMA_Rk: the operand names, SSD_WGMMA_O16(k): the constraints of
// d[16k..16k+15]).
#define SSD_WGMMA_R0 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define SSD_WGMMA_R1 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define SSD_WGMMA_R2 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47"
#define SSD_WGMMA_R3 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define SSD_WGMMA_R4 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79"
#define SSD_WGMMA_R5 "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define SSD_WGMMA_R6 "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111"
#define SSD_WGMMA_R7 "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define SSD_WGMMA_O16(k)                                                                                    \
  "+f"(d[16 * (k) + 0]), "+f"(d[16 * (k) + 1]), "+f"(d[16 * (k) + 2]), "+f"(d[16 * (k) + 3]),     \
  "+f"(d[16 * (k) + 4]), "+f"(d[16 * (k) + 5]), "+f"(d[16 * (k) + 6]), "+f"(d[16 * (k) + 7]),     \
  "+f"(d[16 * (k) + 8]), "+f"(d[16 * (k) + 9]), "+f"(d[16 * (k) + 10]), "+f"(d[16 * (k) + 11]),   \
  "+f"(d[16 * (k) + 12]), "+f"(d[16 * (k) + 13]), "+f"(d[16 * (k) + 14]), "+f"(d[16 * (k) + 15])
#define SSD_WGMMA_D32 "{" SSD_WGMMA_R0 "}"
#define SSD_WGMMA_D32_OUT SSD_WGMMA_O16(0)
#define SSD_WGMMA_D64 "{" SSD_WGMMA_R0 ", " SSD_WGMMA_R1 "}"
#define SSD_WGMMA_D64_OUT SSD_WGMMA_O16(0), SSD_WGMMA_O16(1)
#define SSD_WGMMA_D128 "{" SSD_WGMMA_R0 ", " SSD_WGMMA_R1 ", " SSD_WGMMA_R2 ", " SSD_WGMMA_R3 "}"
#define SSD_WGMMA_D128_OUT SSD_WGMMA_O16(0), SSD_WGMMA_O16(1), SSD_WGMMA_O16(2), SSD_WGMMA_O16(3)
#define SSD_WGMMA_D256 "{" SSD_WGMMA_R0 ", " SSD_WGMMA_R1 ", " SSD_WGMMA_R2 ", " SSD_WGMMA_R3 ", " SSD_WGMMA_R4 ", " SSD_WGMMA_R5 ", " SSD_WGMMA_R6 ", " SSD_WGMMA_R7 "}"
#define SSD_WGMMA_D256_OUT SSD_WGMMA_O16(0), SSD_WGMMA_O16(1), SSD_WGMMA_O16(2), SSD_WGMMA_O16(3), SSD_WGMMA_O16(4), SSD_WGMMA_O16(5), SSD_WGMMA_O16(6), SSD_WGMMA_O16(7)

#define SSD_WGMMA_STR2(x) #x
#define SSD_WGMMA_STR(x) SSD_WGMMA_STR2(x)
// One wgmma.mma_async m64nNk16 with fp32 accumulators %0..%(N/2-1), then the operands whose asm numbers
// are given (the preprocessor cannot add): A and B descriptors, scale-d, transpose flags (SS); the
// four A registers, the B descriptor, scale-d, B's transpose flag (RS).
#define SSD_WGMMA_SS(N, TY, A, B, SCALE, TA, TB)                                                          \
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %" SSD_WGMMA_STR(SCALE) ", 0;\n"                           \
               "wgmma.mma_async.sync.aligned.m64n" SSD_WGMMA_STR(N) "k16.f32." TY "." TY " " SSD_WGMMA_D##N \
               ", %" SSD_WGMMA_STR(A) ", %" SSD_WGMMA_STR(B) ", p, 1, 1, %" SSD_WGMMA_STR(TA) ", %"         \
               SSD_WGMMA_STR(TB) "; }\n"                                                                  \
               : SSD_WGMMA_D##N##_OUT                                                                     \
               : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B)                       \
               : "memory")
#define SSD_WGMMA_RS(N, TY, A0, A1, A2, A3, B, SCALE, TB)                                                 \
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %" SSD_WGMMA_STR(SCALE) ", 0;\n"                           \
               "wgmma.mma_async.sync.aligned.m64n" SSD_WGMMA_STR(N) "k16.f32." TY "." TY " " SSD_WGMMA_D##N \
               ", {%" SSD_WGMMA_STR(A0) ", %" SSD_WGMMA_STR(A1) ", %" SSD_WGMMA_STR(A2) ", %"               \
               SSD_WGMMA_STR(A3) "}, %" SSD_WGMMA_STR(B) ", p, 1, 1, %" SSD_WGMMA_STR(TB) "; }\n"          \
               : SSD_WGMMA_D##N##_OUT                                                                     \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TRANS_B)      \
               : "memory")

// acc (+)= A * B on the tensor cores, m64 nN k16, fp32 accumulate, T = bf16 or fp16; asynchronous:
// wrap in fence() ... commit_group() ... wait_group<>(). `accumulate` false computes acc = A * B (the
// scale-d predicate). Both operands from shared memory through descriptors (smem::desc_*);
// TRANS_A / TRANS_B: 0 = K-major, 1 = MN-major (transposed) operand.
template <class T, int TRANS_A, int TRANS_B, int N>
__device__ __forceinline__ void mma_ss(WgAcc<N>& acc, unsigned long long desc_a, unsigned long long desc_b,
                                      bool accumulate) {
  static_assert(is_16bit_float<T>::value, "wgmma operands: bf16 or fp16");
  static_assert(TRANS_A == 0 || TRANS_A == 1, "TRANS_A: 0 or 1");
  static_assert(TRANS_B == 0 || TRANS_B == 1, "TRANS_B: 0 or 1");
  float(&d)[N / 2] = acc.x;
  const int scale_d = accumulate ? 1 : 0;
  constexpr bool kBf16 = same_type<T, bf16>::value;
  if constexpr (N == 32) {
    if constexpr (kBf16)
      SSD_WGMMA_SS(32, "bf16", 16, 17, 18, 19, 20);
    else
      SSD_WGMMA_SS(32, "f16", 16, 17, 18, 19, 20);
  } else if constexpr (N == 64) {
    if constexpr (kBf16)
      SSD_WGMMA_SS(64, "bf16", 32, 33, 34, 35, 36);
    else
      SSD_WGMMA_SS(64, "f16", 32, 33, 34, 35, 36);
  } else if constexpr (N == 128) {
    if constexpr (kBf16)
      SSD_WGMMA_SS(128, "bf16", 64, 65, 66, 67, 68);
    else
      SSD_WGMMA_SS(128, "f16", 64, 65, 66, 67, 68);
  } else {
    static_assert(N == 256, "wgmma wrappers exist for N = 32, 64, 128, 256");
    if constexpr (kBf16)
      SSD_WGMMA_SS(256, "bf16", 128, 129, 130, 131, 132);
    else
      SSD_WGMMA_SS(256, "f16", 128, 129, 130, 131, 132);
  }
}
// The same with A from registers: warp w of the warpgroup passes rows 16w..16w+15 of the 64 x 16 A
// slice as an mma.m16n8k16 A fragment (mma.cuh's FragA, e.g. from warp::load_a or computed).
template <class T, int TRANS_B, int N>
__device__ __forceinline__ void mma_rs(WgAcc<N>& acc, const FragA& a_frag, unsigned long long desc_b, bool accumulate) {
  static_assert(is_16bit_float<T>::value, "wgmma operands: bf16 or fp16");
  static_assert(TRANS_B == 0 || TRANS_B == 1, "TRANS_B: 0 or 1");
  float(&d)[N / 2] = acc.x;
  const unsigned(&a)[4] = a_frag.x;
  const int scale_d = accumulate ? 1 : 0;
  constexpr bool kBf16 = same_type<T, bf16>::value;
  if constexpr (N == 32) {
    if constexpr (kBf16)
      SSD_WGMMA_RS(32, "bf16", 16, 17, 18, 19, 20, 21, 22);
    else
      SSD_WGMMA_RS(32, "f16", 16, 17, 18, 19, 20, 21, 22);
  } else if constexpr (N == 64) {
    if constexpr (kBf16)
      SSD_WGMMA_RS(64, "bf16", 32, 33, 34, 35, 36, 37, 38);
    else
      SSD_WGMMA_RS(64, "f16", 32, 33, 34, 35, 36, 37, 38);
  } else if constexpr (N == 128) {
    if constexpr (kBf16)
      SSD_WGMMA_RS(128, "bf16", 64, 65, 66, 67, 68, 69, 70);
    else
      SSD_WGMMA_RS(128, "f16", 64, 65, 66, 67, 68, 69, 70);
  } else {
    static_assert(N == 256, "wgmma wrappers exist for N = 32, 64, 128, 256");
    if constexpr (kBf16)
      SSD_WGMMA_RS(256, "bf16", 128, 129, 130, 131, 132, 133, 134);
    else
      SSD_WGMMA_RS(256, "f16", 128, 129, 130, 131, 132, 133, 134);
  }
}

#undef SSD_WGMMA_STR2
#undef SSD_WGMMA_STR
#undef SSD_WGMMA_SS
#undef SSD_WGMMA_RS
#undef SSD_WGMMA_R0
#undef SSD_WGMMA_O16
#undef SSD_WGMMA_R1
#undef SSD_WGMMA_R2
#undef SSD_WGMMA_R3
#undef SSD_WGMMA_R4
#undef SSD_WGMMA_R5
#undef SSD_WGMMA_R6
#undef SSD_WGMMA_R7
#undef SSD_WGMMA_D32
#undef SSD_WGMMA_D32_OUT
#undef SSD_WGMMA_D64
#undef SSD_WGMMA_D64_OUT
#undef SSD_WGMMA_D128
#undef SSD_WGMMA_D128_OUT
#undef SSD_WGMMA_D256
#undef SSD_WGMMA_D256_OUT

}  // namespace warpgroup

// ================================================================================================
// Pipeline<STAGES>: a ring of STAGES shared-memory slots guarded by two mbarriers each.
//   full[s]   completes when slot s holds data: the producer's arrivals (one arrive.expect_tx for a TMA
//             producer) plus the transaction bytes of the copies completing on it;
//   empty[s]  completes when every consumer is done with slot s (consumer_arrivals arrivals).
// Each role walks the ring with its own PipelineState (slot index + phase parity, flipped on every
// wrap). The producer waits on empty with the opposite parity, so the first lap finds every slot free.
//
//   producer (one thread for TMA):          consumers:
//     pipe.producer_acquire(st);              pipe.consumer_wait(st);
//     bar = pipe.producer_expect_tx(st, B);   ... read slot st.index (issue wgmma) ...
//     tma_load_2d(slot(st.index), &map, bar,) (wgmma: warpgroup::wait_group until its reads are done)
//     st.advance();                           pipe.consumer_release(st); st.advance();
//
// A producer writing the slot with ordinary stores instead calls producer_commit(st) after its stores
// (and fence_proxy_async_shared() first when wgmma reads the slot). The object lives in shared memory;
// init() is called by one thread, followed by a block barrier (__syncthreads) before first use.
// One thread's phase parities of up to 32 full mbarriers it waits on, each phase once and in order,
// the barriers not necessarily used in ring order (chunk_scan_fwd's two rings and its rows barrier):
// wait(bars, i) blocks until barrier i's next phase has completed.
struct MbarrierParities {
  unsigned bits = 0;
  __device__ __forceinline__ void wait(unsigned long long* bars, int i) {
    ptx::mbarrier_wait(bars + i, (bits >> i) & 1u);
    bits ^= 1u << i;
  }
};

template <int STAGES>
struct PipelineState {
  static_assert(STAGES >= 1, "at least one stage");
  int index = 0;
  unsigned phase = 0;
  __device__ __forceinline__ void advance() {
    if (++index == STAGES) {
      index = 0;
      phase ^= 1u;
    }
  }
};

template <int STAGES>
struct Pipeline {
  unsigned long long full[STAGES];
  unsigned long long empty[STAGES];

  // producer_arrivals: arrivals that fill a slot (1 for a single TMA thread); consumer_arrivals:
  // arrivals that free it (e.g. 128 when every thread of one consumer warpgroup releases).
  __device__ __forceinline__ void init(unsigned producer_arrivals, unsigned consumer_arrivals) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      ptx::mbarrier_init(&full[s], producer_arrivals);
      ptx::mbarrier_init(&empty[s], consumer_arrivals);
    }
    ptx::fence_mbarrier_init();
  }
  // Producer: waits until slot st.index is free.
  __device__ __forceinline__ void producer_acquire(const PipelineState<STAGES>& st) {
    ptx::mbarrier_wait(&empty[st.index], st.phase ^ 1u);
  }
  // Producer (TMA): announces `bytes` of copies into slot st.index and arrives; returns the barrier the
  // copies must complete on.
  __device__ __forceinline__ unsigned long long* producer_expect_tx(const PipelineState<STAGES>& st, unsigned bytes) {
    ptx::mbarrier_arrive_expect_tx(&full[st.index], bytes);
    return &full[st.index];
  }
  // Producer (ordinary stores): slot st.index is written.
  __device__ __forceinline__ void producer_commit(const PipelineState<STAGES>& st) {
    ptx::mbarrier_arrive(&full[st.index]);
  }
  // Consumer: waits until slot st.index holds data.
  __device__ __forceinline__ void consumer_wait(const PipelineState<STAGES>& st) {
    ptx::mbarrier_wait(&full[st.index], st.phase);
  }
  // Consumer: this thread is done with slot st.index (one arrival).
  __device__ __forceinline__ void consumer_release(const PipelineState<STAGES>& st) {
    ptx::mbarrier_arrive(&empty[st.index]);
  }
};

}  // namespace ssd_kernels
