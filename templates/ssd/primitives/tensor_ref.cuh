// TensorRef<T, N>: a strided view of a tensor, shared by the host launchers (g++) and the kernels
// (NVRTC): a base pointer and N (1..4) strides in ELEMENTS, 64-bit, the outermost axis first.
//
//   offset(i0, ..., iK-1) = i0·stride[0] + i1·stride[1] + ... + iK-1·stride[K-1]   (K <= N; 64-bit)
//   ptr(i...) = pointer to that element;  operator()(i...) = data[offset(i...)]
//   ptr_as<E>(i...) = static_cast<E*>(data) + offset(i...)   (type-erased views)
//
// Plain C layout on purpose: the struct is an aggregate of one pointer and a long long array (no
// constructors, no virtuals), so it is trivially copyable, has the same size and alignment under
// g++ and NVRTC, and can sit inside the __grid_constant__ parameter blocks that the host fills
// byte for byte. A view may cover only the leading axes of a tensor whose innermost axis has unit
// stride (the parameter blocks say so per field); the kernels then add the inner index to ptr().
// Passing fewer indices than axes addresses the start of a sub-tensor (the rest are 0).
//
// Element type erasure: tensors whose element type is a template parameter of the kernel (x, B,
// C, z, ...) are TensorRef<const void, N> / TensorRef<void, N> in the parameter blocks, since the
// blocks are not templates. ptr()/operator() do not exist for void views; a kernel keeps its typed
// base pointer (xg = static_cast<const T*>(p.x.data), also what its bounds-safe loads fall back
// to) and adds offset(), or names the element type with ptr_as<T>(). There is no typed copy of a
// view (as<T>() returning TensorRef<const T, N>): copying the strides into a local view moved the
// address arithmetic around and changed the register allocation of several kernels.
//
// Bit-exactness: offset() and ptr() are force-inlined and spell out the sums the kernels wrote by
// hand before the views existed, in the same order with the same 64-bit widening of the indices;
// the preset kernels' cubins are byte-identical to the hand-indexed ones (reduce_head_partials
// differs only in its parameter offsets: its out[j] views interleave pointer and stride).
#pragma once

#if !defined(SSD_HOST_DEVICE)
#if defined(__CUDACC__)
#define SSD_HOST_DEVICE __host__ __device__
#else
#define SSD_HOST_DEVICE
#endif
#endif
#if defined(__CUDACC__)
#define SSD_TENSOR_REF_INLINE __host__ __device__ __forceinline__
#else
#define SSD_TENSOR_REF_INLINE inline
#endif

namespace ssd_kernels {

namespace detail {
// E with the const-ness of Erased (const void -> const E, void -> E).
template <class Erased, class E>
struct with_const_of {
  using type = E;
};
template <class Erased, class E>
struct with_const_of<const Erased, E> {
  using type = const E;
};
}  // namespace detail

template <class T, int N>
struct TensorRef {
  static_assert(N >= 1 && N <= 4, "TensorRef: 1 to 4 axes");
  T* data;
  long long stride[N];

  // Element offset of (i0, ..., iK-1), K <= N: the leading K axes (the trailing indices are 0, and
  // are left out rather than passed as 0 so that no zero term enters the sum). One overload per
  // count, each written out as the sum the kernels wrote by hand before the views existed (same
  // order, same 64-bit widening of the indices) and force-inlined, so that the compiler sees the
  // very same address arithmetic.
  SSD_TENSOR_REF_INLINE long long offset(long long i0) const {
    static_assert(N >= 1, "TensorRef::offset: at most one index per axis");
    return i0 * stride[0];
  }
  SSD_TENSOR_REF_INLINE long long offset(long long i0, long long i1) const {
    static_assert(N >= 2, "TensorRef::offset: at most one index per axis");
    return i0 * stride[0] + i1 * stride[1];
  }
  SSD_TENSOR_REF_INLINE long long offset(long long i0, long long i1, long long i2) const {
    static_assert(N >= 3, "TensorRef::offset: at most one index per axis");
    return i0 * stride[0] + i1 * stride[1] + i2 * stride[2];
  }
  SSD_TENSOR_REF_INLINE long long offset(long long i0, long long i1, long long i2, long long i3) const {
    static_assert(N >= 4, "TensorRef::offset: at most one index per axis");
    return i0 * stride[0] + i1 * stride[1] + i2 * stride[2] + i3 * stride[3];
  }
  // Pointer to the element (typed views only), written as the chain of pointer steps
  // ((data + i0·stride[0]) + i1·stride[1]) + ... that the kernels wrote by hand: the same address
  // as data + offset(i...). (In three kernels a ptr() call still moved one address add; those
  // lines spell the sum out over the view's strides, see the comments there.)
  SSD_TENSOR_REF_INLINE T* ptr(long long i0) const { return data + i0 * stride[0]; }
  SSD_TENSOR_REF_INLINE T* ptr(long long i0, long long i1) const { return data + i0 * stride[0] + i1 * stride[1]; }
  SSD_TENSOR_REF_INLINE T* ptr(long long i0, long long i1, long long i2) const {
    return data + i0 * stride[0] + i1 * stride[1] + i2 * stride[2];
  }
  SSD_TENSOR_REF_INLINE T* ptr(long long i0, long long i1, long long i2, long long i3) const {
    return data + i0 * stride[0] + i1 * stride[1] + i2 * stride[2] + i3 * stride[3];
  }
  // Reference to the element, data[offset(i...)] (typed views only: the return type of a void
  // view is never formed because the body is instantiated only when called).
  template <class... I>
  SSD_TENSOR_REF_INLINE decltype(auto) operator()(I... i) const {
    return data[offset(i...)];
  }
  // Pointer to the element as element type E, for the type-erased views (void data):
  // static_cast<E*>(data) + offset(i...). No typed copy of the view is made: copying the strides
  // into a local view changed the register allocation of the kernels.
  template <class E, class... I>
  SSD_TENSOR_REF_INLINE typename detail::with_const_of<T, E>::type* ptr_as(I... i) const {
    return static_cast<typename detail::with_const_of<T, E>::type*>(data) + offset(i...);
  }
};

}  // namespace ssd_kernels
