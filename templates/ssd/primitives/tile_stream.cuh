// Tile streams: the global -> shared copy of a tile that moves by a fixed pattern from one step of
// a contraction to the next (the next p block, the next head, the next K block), for kernels whose
// loaders were dominated by address math (block::load_tile rebuilds every chunk's 64-bit address
// from the step's indices, and the compiler keeps the per-row offsets of each call as loop
// invariants).
//
// A ROWS x COLS tile of T (16-byte chunks of V = 16 / sizeof(T) elements, CPR chunks per row) is
// split over NTHREADS threads exactly as block::load_tile's vector path splits it: thread t owns
// column chunk c = (t % CPR) · V of rows r0 = t / CPR, r0 + RSTEP, r0 + 2·RSTEP, ...
// (RSTEP = NTHREADS / CPR). Per tile a thread keeps one source pointer (element (r0, c) of the
// current step's tile), the row step in elements and its shared offset; a step costs ITERS copies
// and one pointer move (`advance`). Element (r, c') lands at s[r · LD + c'] as with load_tile.
//
// copy(): with `vec` (16-byte aligned rows, unit column stride) cp.async 16-byte copies (visible after
// cp_async_wait + __syncthreads); otherwise the same chunks element by element, synchronously
// (visible after __syncthreads). pred(r, c) decides per chunk whether it is read; chunks not read
// are zero-filled and never touched in global memory (`safe`, any valid address, is the cp.async
// source of a skipped chunk). Only data moves: the order of any arithmetic on it is the kernel's.
#pragma once

#include "ssd/primitives/dtype.cuh"
#include "ssd/primitives/mma.cuh"

namespace ssd_kernels {
namespace block {

template <int NTHREADS, int ROWS, int COLS, int LD, class T>
struct TileStream {
  static constexpr int V = 16 / int(sizeof(T));
  static constexpr int CPR = COLS / V;  // chunks per row
  static_assert(COLS % V == 0, "tile columns must be a multiple of 16 bytes");
  static_assert(LD % V == 0, "shared rows must be 16-byte aligned");
  static_assert(NTHREADS % CPR == 0, "each thread keeps one column chunk");
  static constexpr int RSTEP = NTHREADS / CPR;                // rows between a thread's chunks
  static constexpr int ITERS = (ROWS + RSTEP - 1) / RSTEP;  // chunks per thread (the last may fall off)
  static constexpr int kUnrolledChunks = 4;                 // copies with more chunks run a rolled loop

  const T* src;        // element (r0, c) of the next step's tile
  long long row_step;  // RSTEP rows, in elements
  int r0, c;           // this thread's first row and its column (elements)

  // origin: element (0, 0) of the first step's tile; row_stride, col_stride in elements.
  __device__ __forceinline__ void init(const T* origin, long long row_stride, long long col_stride) {
    r0 = int(threadIdx.x) / CPR;
    c = (int(threadIdx.x) % CPR) * V;
    src = origin + r0 * row_stride + c * col_stride;
    row_step = RSTEP * row_stride;
  }
  __device__ __forceinline__ void advance(long long elements) { src += elements; }

  // s: the stage buffer (element (0, 0) of the tile in shared memory), s_addr its shared-window
  // address (ptx::smem_addr(s)).
  template <class Pred>
  __device__ __forceinline__ void copy(T* s, unsigned s_addr, bool vec, long long col_stride, const T* safe,
                                       Pred pred) const {
    const unsigned dst = s_addr + unsigned((r0 * LD + c) * int(sizeof(T)));
    if (vec) {
      if constexpr (ITERS <= kUnrolledChunks) {
#pragma unroll
        for (int it = 0; it < ITERS; ++it) {
          const int r = r0 + it * RSTEP;
          if (ROWS % RSTEP == 0 || r < ROWS) {
            const bool ok = pred(r, c);
            ptx::cp_async_16(dst + unsigned(it * RSTEP * LD * int(sizeof(T))), ok ? src + it * row_step : safe, ok);
          }
        }
      } else {
        // A rolled walk: unrolled, the compiler keeps one 64-bit pointer per chunk across the
        // whole contraction (register pressure); rolled, one pointer and one offset.
        const T* g = src;
        unsigned d = dst;
#pragma unroll 1
        for (int r = r0; r < ROWS; r += RSTEP) {
          const bool ok = pred(r, c);
          ptx::cp_async_16(d, ok ? g : safe, ok);
          g += row_step;
          d += unsigned(RSTEP * LD * int(sizeof(T)));
        }
      }
    } else {
#pragma unroll 1
      for (int it = 0; it < ITERS; ++it) {
        const int r = r0 + it * RSTEP;
        if (ROWS % RSTEP == 0 || r < ROWS) {
          const bool ok = pred(r, c);
          const T* g = src + it * row_step;
#pragma unroll
          for (int v = 0; v < V; ++v) {
            T val;
            if (ok) {
              val = g[v * col_stride];
            } else {
              val = from_float<T>(0.f);
            }
            s[r * LD + c + v] = val;
          }
        }
      }
    }
  }
};

}  // namespace block

// ------------------------------------------------------------------------------------------------
// Fragment loads at 32-bit shared-window addresses: warp::load_a / load_a_trans / load_b2 /
// load_b2_trans of mma.cuh with the lane's row address split into a per-lane byte offset (computed
// once per kernel: *_lane_offset<T, LD>()) and the sub-tile's address (tile base + constant), so
// the address of each ldmatrix is one 32-bit add instead of a 64-bit generic pointer converted per
// fragment. Same lanes, same rows, same registers as the mma.cuh versions.
namespace warp {

template <class T, int LD>
__device__ __forceinline__ unsigned a_lane_offset() {  // load_a: row L%16, column (L/16)*8
  const int lane = lane_id();
  return unsigned(((lane & 15) * LD + (lane >> 4) * 8) * int(sizeof(T)));
}
template <class T, int LD>
__device__ __forceinline__ unsigned a_trans_lane_offset() {  // load_a_trans: row L%8 + (L/16)*8, column ((L/8)%2)*8
  const int lane = lane_id();
  return unsigned((((lane & 7) + ((lane >> 4) << 3)) * LD + ((lane >> 3) & 1) * 8) * int(sizeof(T)));
}
template <class T, int LD>
__device__ __forceinline__ unsigned b2_lane_offset() {  // load_b2: row L%8 + (L/16)*8, column ((L/8)%2)*8
  return a_trans_lane_offset<T, LD>();
}
template <class T, int LD>
__device__ __forceinline__ unsigned b2_trans_lane_offset() {  // load_b2_trans: row L%8 + ((L/8)%2)*8, column (L/16)*8
  const int lane = lane_id();
  return unsigned((((lane & 7) + (((lane >> 3) & 1) << 3)) * LD + (lane >> 4) * 8) * int(sizeof(T)));
}

// addr: the sub-tile's shared address plus the matching lane offset.
__device__ __forceinline__ void load_a_at(FragA& a, unsigned addr) { ptx::ldmatrix_x4(a.x, addr); }
__device__ __forceinline__ void load_a_trans_at(FragA& a, unsigned addr) { ptx::ldmatrix_x4_trans(a.x, addr); }
// (load_b2_at / load_b2_trans_at are mma.cuh's: load_b2 / load_b2_trans call them.)

}  // namespace warp
}  // namespace ssd_kernels
