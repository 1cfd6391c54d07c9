// Tensor-core tile primitives (sm_80+), in the spirit of ThunderKittens: small register tile types
// and the operations on them, grouped by the scope that executes them.
//
//   ptx::    one thread: address conversion, cp.async, 16-bit pack/unpack, raw mma/ldmatrix wrappers
//   warp::   one warp (32 lanes cooperate): fragment loads from shared memory (ldmatrix) and mma
//   block::  all threads of a block: cooperative global -> shared tile copies (cp.async, 16 bytes)
//
// Everything here is NVRTC-safe: no system or CUDA headers; the only inline PTX of the project lives
// in this header and in dtype.cuh. Element types are the bit containers of dtype.cuh (bf16, fp16).
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"):
//   lane = threadIdx.x % 32, g = lane / 4 ("groupID"), t = lane % 4 ("threadID_in_group").
//   A (16x16, row-major, 16-bit): 4 registers of 2 elements, lower element (smaller column) in the
//     low 16 bits:  a[0] = A[g  ][2t..2t+1]   a[1] = A[g+8][2t..2t+1]
//                   a[2] = A[g  ][2t+8..+9]   a[3] = A[g+8][2t+8..+9]
//   B (16x8, K x N, ".col"): 2 registers, lower element = smaller k:
//                   b[0] = B[2t..2t+1][g]     b[1] = B[2t+8..2t+9][g]
//   C/D (16x8 fp32): c[0..1] = C[g][2t..2t+1]   c[2..3] = C[g+8][2t..2t+1]
//
// ldmatrix.m8n8.x4.b16: lanes 8j..8j+7 supply the 8 row addresses (16 bytes each) of matrix j; lane L
//   receives in register j the elements (row L/4, columns 2(L%4), 2(L%4)+1) of matrix j, or with
//   .trans the elements (rows 2(L%4), 2(L%4)+1; column L/4) of matrix j, lower row in the low half.
//   Hence: a row-major [m][k] tile gives A without .trans, a [k][m] tile gives A with .trans; an
//   [n][k] tile (k contiguous) gives B without .trans, a [k][n] tile (n contiguous) gives B with .trans.
#pragma once

#include "ssd/primitives/dtype.cuh"

namespace ssd_kernels {

// ------------------------------------------------------------------------------------------------
// Tiny type traits (no <type_traits> under NVRTC).
template <class A, class B> struct same_type { static constexpr bool value = false; };
template <class A> struct same_type<A, A> { static constexpr bool value = true; };
template <class T> struct is_16bit_float { static constexpr bool value = false; };
template <> struct is_16bit_float<bf16> { static constexpr bool value = true; };
template <> struct is_16bit_float<fp16> { static constexpr bool value = true; };

// ------------------------------------------------------------------------------------------------
// Register tile types (one warp holds the whole tile; each lane holds the part given above).
struct FragA {  // 16x16 16-bit operand A (row-major), 4 x b32
  unsigned x[4];
};
struct FragB {  // 16x8 16-bit operand B (K x N, column fragment), 2 x b32
  unsigned x[2];
};
struct FragC {  // 16x8 fp32 accumulator C/D, 4 x f32
  float x[4];
  // x[2 * half + e] is element (row(lane, half), col(lane) + e) of the tile (layout above).
  __device__ __forceinline__ static int row(int lane, int half) { return (lane >> 2) + 8 * half; }
  __device__ __forceinline__ static int col(int lane) { return 2 * (lane & 3); }
};

// ================================================================================================
// Thread scope.
namespace ptx {

// Generic -> shared-window address (32-bit), for ldmatrix / cp.async operands.
__device__ __forceinline__ unsigned smem_addr(const void* p) {
  unsigned a;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}

// prefetch.global.L1: pulls the line holding ptr (global memory) into L1. No destination register and
// nothing waits on it: a hint only, no value depends on it; a later load of the line then hits L1.
__device__ __forceinline__ void prefetch_global_l1(const void* ptr) {
  asm volatile("prefetch.global.L1 [%0];" ::"l"(__cvta_generic_to_global(ptr)));
}

// One 16-byte global store of four 32-bit words (ptr 16-byte aligned, global memory). Where NVVM
// splits a uint4 assignment into four 4-byte stores (it lost the pointer's alignment in address
// arithmetic), this keeps it one st.global.v4.
__device__ __forceinline__ void st_global_v4(void* ptr, unsigned a, unsigned b, unsigned c, unsigned d) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(__cvta_generic_to_global(ptr)), "r"(a), "r"(b),
               "r"(c), "r"(d)
               : "memory");
}

// ex2.approx.ftz.f32: 2^x, subnormal inputs and results flushed to zero. For x >= -126 (or NaN) it
// gives the bits of ex2.approx.f32 (what __expf(v) evaluates on rn(v · log2 e)) without that
// instruction's subnormal guard: the result is normal there (chunk_scan_fwd's decay<true>).
__device__ __forceinline__ float ex2_approx_ftz(float x) {
  float e;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(x));
  return e;
}

// rcp.approx.ftz.f32: the reciprocal's approximation (MUFU.RCP), the first step of the correctly
// rounded reciprocal's fast path (primitives/sigmoid.cuh: rcp_rn_fast).
__device__ __forceinline__ float rcp_approx_ftz(float x) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

// 16-byte asynchronous global -> shared copy, L2 only (.cg). When pred is false nothing is read
// (src-size 0) and the 16 destination bytes are zero-filled; src must still be a valid address.
// dst and src must be 16-byte aligned.
__device__ __forceinline__ void cp_async_16(unsigned dst, const void* src, bool pred) {
  const int src_bytes = pred ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
// Closes the group of cp.async issued by this thread since the last commit.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still pending. Other threads' copies
// become visible only after a following __syncthreads().
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Two fp32 -> one b32 holding two 16-bit values, round to nearest even; `lo` goes to bits 0..15
// (the lower-indexed element of a fragment register). cvt's first source fills the upper half.
template <class T> __device__ __forceinline__ unsigned pack2(float lo, float hi);
template <> __device__ __forceinline__ unsigned pack2<bf16>(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
template <> __device__ __forceinline__ unsigned pack2<fp16>(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// Inverse of pack2 (exact).
template <class T> __device__ __forceinline__ void unpack2(unsigned v, float& lo, float& hi);
template <> __device__ __forceinline__ void unpack2<bf16>(unsigned v, float& lo, float& hi) {
  lo = __uint_as_float(v << 16);
  hi = __uint_as_float(v & 0xffff0000u);
}
template <> __device__ __forceinline__ void unpack2<fp16>(unsigned v, float& lo, float& hi) {
  asm("{ .reg .f16 l, h; mov.b32 {l, h}, %2; cvt.f32.f16 %0, l; cvt.f32.f16 %1, h; }"
      : "=f"(lo), "=f"(hi)
      : "r"(v));
}

// ldmatrix wrappers. addr: this lane's row address (see the header comment).
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// D = A * B + D, m16n8k16, fp32 accumulate, operands bf16 or fp16 (layouts in the header comment).
template <class T> __device__ __forceinline__ void mma_16816(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]);
// The two specializations differ only in the operand type's PTX name (the same instruction text).
#define SSD_MMA_16816(T, ptx_type)                                                                          \
  template <>                                                                                               \
  __device__ __forceinline__ void mma_16816<T>(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) { \
    asm("mma.sync.aligned.m16n8k16.row.col.f32." ptx_type "." ptx_type ".f32 {%0, %1, %2, %3}, "              \
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"                                                     \
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                                    \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));                               \
  }
SSD_MMA_16816(bf16, "bf16")
SSD_MMA_16816(fp16, "f16")
#undef SSD_MMA_16816

}  // namespace ptx

// ================================================================================================
// Warp scope. `s` points at element (0, 0) of the 16x16 / 16x16 sub-tile in a shared tile with
// leading dimension `ld` (elements); rows must be 16-byte aligned (ld % 8 == 0, tile base aligned).
// ld * 2 bytes an odd multiple of 16 keeps every ldmatrix phase bank-conflict free (pad by 8).
namespace warp {

__device__ __forceinline__ int lane_id() { return threadIdx.x & 31; }

__device__ __forceinline__ void zero(FragC& c) {
#pragma unroll
  for (int i = 0; i < 4; ++i) c.x[i] = 0.f;
}

// A (16x16) from a row-major [m][k] tile (k contiguous): matrices (m0-7,k0-7), (m8-15,k0-7),
// (m0-7,k8-15), (m8-15,k8-15) -> a[0..3]. Lane L addresses row m = L%16, column k = (L/16)*8.
template <class T>
__device__ __forceinline__ void load_a(FragA& a, const T* s, int ld) {
  const int lane = lane_id();
  ptx::ldmatrix_x4(a.x, ptx::smem_addr(s + (lane & 15) * ld + (lane >> 4) * 8));
}
// A (16x16) from a [k][m] tile (m contiguous), transposed on load: stored matrices (k0-7,m0-7),
// (k0-7,m8-15), (k8-15,m0-7), (k8-15,m8-15) -> a[0..3]. Lane L addresses stored row
// k = L%8 + (L/16)*8, column m = ((L/8)%2)*8.
template <class T>
__device__ __forceinline__ void load_a_trans(FragA& a, const T* s, int ld) {
  const int lane = lane_id();
  ptx::ldmatrix_x4_trans(a.x, ptx::smem_addr(s + ((lane & 7) + ((lane >> 4) << 3)) * ld + ((lane >> 3) & 1) * 8));
}
// Two B fragments (k 0..15 x n 0..7 and n 8..15) from an [n][k] tile (k contiguous, i.e. the
// row-major B^T): matrices (n0-7,k0-7), (n0-7,k8-15), (n8-15,k0-7), (n8-15,k8-15) -> b0.x[0],
// b0.x[1], b1.x[0], b1.x[1]. Lane L addresses row n = L%8 + (L/16)*8, column k = ((L/8)%2)*8.
// The *_at forms take the lane's shared-window address itself (primitives/tile_stream.cuh forms it
// as a per-lane offset plus a constant).
// An ldmatrix.x4 result as the two B fragments: matrices 0, 1 -> b0, matrices 2, 3 -> b1.
__device__ __forceinline__ void split_b2(const unsigned (&r)[4], FragB& b0, FragB& b1) {
  b0.x[0] = r[0];
  b0.x[1] = r[1];
  b1.x[0] = r[2];
  b1.x[1] = r[3];
}
__device__ __forceinline__ void load_b2_at(FragB& b0, FragB& b1, unsigned addr) {
  unsigned r[4];
  ptx::ldmatrix_x4(r, addr);
  split_b2(r, b0, b1);
}
__device__ __forceinline__ void load_b2_trans_at(FragB& b0, FragB& b1, unsigned addr) {
  unsigned r[4];
  ptx::ldmatrix_x4_trans(r, addr);
  split_b2(r, b0, b1);
}
template <class T>
__device__ __forceinline__ void load_b2(FragB& b0, FragB& b1, const T* s, int ld) {
  const int lane = lane_id();
  load_b2_at(b0, b1, ptx::smem_addr(s + ((lane & 7) + ((lane >> 4) << 3)) * ld + ((lane >> 3) & 1) * 8));
}
// Two B fragments from a [k][n] tile (n contiguous), transposed on load: stored matrices
// (k0-7,n0-7), (k8-15,n0-7), (k0-7,n8-15), (k8-15,n8-15) -> b0.x[0], b0.x[1], b1.x[0], b1.x[1].
// Lane L addresses stored row k = L%8 + ((L/8)%2)*8, column n = (L/16)*8.
template <class T>
__device__ __forceinline__ void load_b2_trans(FragB& b0, FragB& b1, const T* s, int ld) {
  const int lane = lane_id();
  load_b2_trans_at(b0, b1, ptx::smem_addr(s + ((lane & 7) + (((lane >> 3) & 1) << 3)) * ld + (lane >> 4) * 8));
}

// c += a * b (one m16n8k16 tensor-core op, fp32 accumulate).
template <class T>
__device__ __forceinline__ void mma(FragC& c, const FragA& a, const FragB& b) {
  ptx::mma_16816<T>(c.x, a.x, b.x);
}

// Every accumulator of a warp's MI x NJ tile to +0.0.
template <int MI, int NJ>
__device__ __forceinline__ void zero_tile(FragC (&acc)[MI][NJ]) {
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < NJ; ++j) zero(acc[i][j]);
}

// One 16-wide K step of a warp's MI x NJ tile of fp32 accumulators ACC (element type T): the MI
// A fragments a[i] filled by the statement LOAD_A (for i = 0 .. MI-1), the NJ B fragments in
// pairs bf[j], bf[j + 1] by LOAD_B2 (for j = 0, 2, ..), then ACC[i][j] += a[i] · bf[j] in order
// (i, j). A macro, not a function taking the loaders: the templates' code stays token for token
// what they spelled out before (same machine code).
#define SSD_WARP_MMA_K16(T, ACC, LOAD_A, LOAD_B2)                                 \
  {                                                                              \
    FragA a[MI];                                                                 \
    FragB bf[NJ];                                                                \
    _Pragma("unroll") for (int i = 0; i < MI; ++i) { LOAD_A; }                   \
    _Pragma("unroll") for (int j = 0; j < NJ; j += 2) { LOAD_B2; }               \
    _Pragma("unroll") for (int i = 0; i < MI; ++i)                               \
        _Pragma("unroll") for (int j = 0; j < NJ; ++j) warp::mma<T>(ACC[i][j], a[i], bf[j]); \
  }

// The same K step with the B fragments one pair at a time (fewer live registers): LOAD_B2 fills
// b0, b1 for columns j, j + 1, then ACC[i][j] += a[i] · b0 and ACC[i][j + 1] += a[i] · b1 for
// every i, pair after pair.
#define SSD_WARP_MMA_K16_PAIRS(T, ACC, LOAD_A, LOAD_B2)                           \
  {                                                                              \
    FragA a[MI];                                                                 \
    _Pragma("unroll") for (int i = 0; i < MI; ++i) { LOAD_A; }                   \
    _Pragma("unroll") for (int j = 0; j < NJ; j += 2) {                          \
      FragB b0, b1;                                                              \
      LOAD_B2;                                                                   \
      _Pragma("unroll") for (int i = 0; i < MI; ++i) {                           \
        warp::mma<T>(ACC[i][j], a[i], b0);                                       \
        warp::mma<T>(ACC[i][j + 1], a[i], b1);                                   \
      }                                                                          \
    }                                                                            \
  }

// Multiplies the A fragment column-wise (k) by fp32 factors and rounds back to T: element (m, k)
// becomes rn(float(A[m][k]) * f[k]). f01 = factors of columns 2t, 2t+1; f89 = of 2t+8, 2t+9.
template <class T>
__device__ __forceinline__ void scale_a_cols(FragA& a, float2 f01, float2 f89) {
  float lo, hi;
  ptx::unpack2<T>(a.x[0], lo, hi);
  a.x[0] = ptx::pack2<T>(lo * f01.x, hi * f01.y);
  ptx::unpack2<T>(a.x[1], lo, hi);
  a.x[1] = ptx::pack2<T>(lo * f01.x, hi * f01.y);
  ptx::unpack2<T>(a.x[2], lo, hi);
  a.x[2] = ptx::pack2<T>(lo * f89.x, hi * f89.y);
  ptx::unpack2<T>(a.x[3], lo, hi);
  a.x[3] = ptx::pack2<T>(lo * f89.x, hi * f89.y);
}

// The same column scaling carried as two terms: hi(m, k) = rn(float(A[m][k]) * f[k]) (what
// scale_a_cols gives) and lo(m, k) = rn(float(A[m][k]) * f[k] − float(hi(m, k))), the difference
// exact in fp32. hi · B + lo · B is the product with ~16 more bits of the scaled operand.
template <class T>
__device__ __forceinline__ void scale_a_cols_two_term(FragA& a, FragA& lo, float2 f01, float2 f89) {
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const float2 f = r < 2 ? f01 : f89;
    float x0, x1, h0, h1;
    ptx::unpack2<T>(a.x[r], x0, x1);
    const float v0 = x0 * f.x, v1 = x1 * f.y;
    a.x[r] = ptx::pack2<T>(v0, v1);
    ptx::unpack2<T>(a.x[r], h0, h1);
    lo.x[r] = ptx::pack2<T>(__fsub_rn(v0, h0), __fsub_rn(v1, h1));
  }
}

}  // namespace warp

// ================================================================================================
// Block scope: cooperative tile copies global -> shared. All threads 0..NTHREADS-1 must call.
namespace block {

// Copies a ROWS x COLS tile of T; element (r, c) comes from g[r * row_stride + c * col_stride]
// and goes to s[r * LD + c]. pred(r, c0) decides per 16-byte chunk (columns c0 .. c0+V-1,
// V = 16 / sizeof(T)) whether it is read; chunks not read are zero-filled and never touched in
// global memory. With vec (16-byte aligned rows, col_stride == 1) the copy is cp.async (complete
// after cp_async_wait + __syncthreads); otherwise it is a synchronous element-wise copy (visible
// after __syncthreads). `safe` is any valid global address (used as the source of skipped chunks).
template <int NTHREADS, int ROWS, int COLS, int LD, class T, class Pred>
__device__ __forceinline__ void load_tile(T* s, const T* g, long long row_stride, long long col_stride, bool vec,
                                          const T* safe, Pred pred) {
  constexpr int V = 16 / int(sizeof(T));
  static_assert(COLS % V == 0, "tile columns must be a multiple of 16 bytes");
  static_assert(LD % V == 0, "shared rows must be 16-byte aligned");
  constexpr int CPR = COLS / V;  // chunks per row
  constexpr int TOTAL = ROWS * CPR;
  constexpr int ITERS = (TOTAL + NTHREADS - 1) / NTHREADS;
  if (vec) {
    if constexpr (NTHREADS % CPR == 0) {
      // Each thread keeps one column chunk and walks rows in steps of NTHREADS / CPR.
      constexpr int RSTEP = NTHREADS / CPR;
      const int r0 = int(threadIdx.x) / CPR, c = (int(threadIdx.x) % CPR) * V;
      const T* src0 = g + (long long)r0 * row_stride + c;
      const long long step = (long long)RSTEP * row_stride;
      const unsigned dst0 = ptx::smem_addr(s + r0 * LD + c);
#pragma unroll
      for (int it = 0; it < ITERS; ++it) {
        const int r = r0 + it * RSTEP;
        if (TOTAL % NTHREADS == 0 || r < ROWS) {
          const bool ok = pred(r, c);
          ptx::cp_async_16(dst0 + unsigned(it * RSTEP * LD * int(sizeof(T))), ok ? src0 + it * step : safe, ok);
        }
      }
    } else {
#pragma unroll
      for (int it = 0; it < ITERS; ++it) {
        const int i = it * NTHREADS + int(threadIdx.x);
        if (TOTAL % NTHREADS == 0 || i < TOTAL) {
          const int r = i / CPR, c = (i % CPR) * V;
          const bool ok = pred(r, c);
          const T* src = ok ? g + (long long)r * row_stride + c : safe;
          ptx::cp_async_16(ptx::smem_addr(s + r * LD + c), src, ok);
        }
      }
    }
  } else {
    for (int i = threadIdx.x; i < TOTAL; i += NTHREADS) {
      const int r = i / CPR, c0 = (i % CPR) * V;
      const bool ok = pred(r, c0);
#pragma unroll
      for (int v = 0; v < V; ++v) {
        T val;
        if (ok) {
          val = g[(long long)r * row_stride + (long long)(c0 + v) * col_stride];
        } else {
          val = from_float<T>(0.f);
        }
        s[r * LD + c0 + v] = val;
      }
    }
  }
}

// The cp.async ring of STAGES shared buffers over `steps` steps of a contraction: step k lives in
// buffer k % STAGES. The kernel keeps its own loop (and its unroll choice) and calls
//   prologue(load)      before it: issues steps 0 .. STAGES-2 (one commit group each, empty past
//                       the last step, so that the group count stays in step);
//   begin(k, load)      at the start of step k: waits until step k's group has landed, barrier
//                       (step k visible to all; everyone is done with step k-1 and its buffer),
//                       then issues step k + STAGES - 1 into the buffer step k-1 freed;
//   drain()             after the loop: waits for every group.
// load(buffer, step) issues one step's block::load_tile calls (it may do more, e.g. register
// prefetches). Every cp.async kernel uses this order of copies, waits and barriers.
template <int STAGES>
struct CpAsyncPipeline {
  static_assert(STAGES >= 2, "a ring needs at least two buffers");
  int steps;

  __device__ __forceinline__ static int buffer(int step) { return step % STAGES; }

  template <class Load>
  __device__ __forceinline__ void prologue(Load&& load) const {
#pragma unroll
    for (int st = 0; st < STAGES - 1; ++st) {
      if (st < steps) load(st, st);
      ptx::cp_async_commit();
    }
  }

  template <class Load>
  __device__ __forceinline__ void begin(int step, Load&& load) const {
    ptx::cp_async_wait<STAGES - 2>();
    __syncthreads();
    const int next = step + STAGES - 1;
    if (next < steps) load(next % STAGES, next);
    ptx::cp_async_commit();
  }

  __device__ __forceinline__ void drain() const { ptx::cp_async_wait<0>(); }
};

}  // namespace block

namespace smem {
// Byte offset of element (r, c) (c < 64) of 16-bit elements in a 128-byte swizzled tile (rows of 64
// elements, 1024-byte aligned base; what TMA writes with CU_TENSOR_MAP_SWIZZLE_128B and wgmma reads,
// primitives/hopper.cuh): chunk c/8 of row r sits at chunk (c/8) ^ (r%8).
__host__ __device__ constexpr unsigned swizzle128_offset(int r, int c) {
  return unsigned(r) * 128u + ((unsigned(c >> 3) ^ unsigned(r & 7)) << 4) + unsigned(c & 7) * 2u;
}
// p advanced to the next 1024-byte boundary of the shared window (the 128-byte swizzle atom), for a
// dynamic shared-memory base. Pointer arithmetic, not an integer round trip: the compiler keeps
// knowing that the result is shared memory.
__device__ __forceinline__ unsigned char* align1024(unsigned char* p) {
  return p + ((1024u - (ptx::smem_addr(p) & 1023u)) & 1023u);
}
}  // namespace smem

// 16-byte alignment test for vectorized paths: pointer aligned and every listed stride a
// multiple of `v` elements.
__device__ __forceinline__ bool aligned16(const void* p) {
  return (reinterpret_cast<unsigned long long>(p) & 15ull) == 0;
}

}  // namespace ssd_kernels
